//! One file per subcommand: turn clap args into typed options, call the core,
//! print through [`crate::output`].
use crate::cli::{Cli, Command};
use crate::ExitStatus;

pub mod build;
pub mod completions;
pub mod engine_line;
pub mod error;
pub mod image_args;
pub mod inspect;
pub mod lock;
pub mod output_files;
pub mod render;
pub mod sample;
pub mod sbom;
pub mod specs;
pub mod torch_part;
pub mod train_demo;
pub mod verify;
pub mod workstation;

/// Runs the parsed command.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitStatus> {
    // A front end without libtorch hands torch commands to the full imgctl.
    torch_part::hand_over(&cli.command)?;
    if let Some(name) = &cli.global.context {
        // Global, as `docker --context`: every engine connection of the
        // process (the build, verify --image, their clean-up guards) uses it.
        crate::docker::engine::choose_context(name);
    }
    match cli.command {
        Command::Build(args) => build::run(args),
        Command::Render(args) => render::run(args),
        Command::Specs(args) => specs::run(args),
        Command::Lock(args) => lock::run(args),
        Command::Completions(args) => completions::completions(args),
        Command::Man(args) => completions::man(args),
        Command::Verify(args) => verify::run(args),
        Command::TrainDemo(args) => train_demo::run(args),
        Command::Sample(args) => sample::run(args),
        Command::Up(args) => workstation::up(args),
        Command::Ps(args) => workstation::ps(args),
        Command::Down(args) => workstation::down(args),
        Command::Logs(args) => workstation::logs(args),
        Command::Sbom(args) => sbom::run(args),
        Command::Inspect(args) => inspect::run(args),
    }
}

/// The error a torch-only command gives in a binary built without the `torch` feature.
#[cfg(not(feature = "torch"))]
pub(crate) fn torch_missing(command: &str) -> anyhow::Error {
    crate::commands::error::CliError::usage(format!("`imgctl {command}` needs libtorch, and this imgctl was built without the `torch` feature"))
        .with_hint(format!("install the full imgctl beside this one as {} (`make install` does), use the imgctl inside an image built by `imgctl build`, or build with default features (`cargo build --release`)", torch_part::TORCH_PART))
        .into()
}
