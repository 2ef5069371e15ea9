//! One file per subcommand: turn clap args into typed options, call the core,
//! print through [`crate::output`].
//!
//! Part: the command layer (`docs/architecture.md`).
use crate::cli::{Cli, Command};
use crate::error::ExitStatus;

pub mod build;
pub mod completions;
pub mod engine_line;
pub mod error;
pub mod fit;
pub mod fleet_history;
pub mod image_args;
pub mod inspect;
pub mod key;
pub mod libtorch_here;
pub mod local_image;
pub mod lock;
pub mod narrow;
pub mod output_files;
pub mod render;
pub mod sample;
pub mod sbom;
pub mod specs;
pub mod through_image;
pub mod torch_part;
pub mod train_demo;
pub mod verify;
pub mod verify_image;
pub mod version;
pub mod workstation;

/// Runs the parsed command.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitStatus> {
    // A front end without libtorch hands torch commands to the full imgctl,
    // or runs them inside the image.
    let cli = match torch_part::hand_over(cli)? {
        torch_part::Handed::Here(cli) => *cli,
        torch_part::Handed::Done(status) => return Ok(status),
    };
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
        Command::IdleWatch(args) => workstation::idle_watch(args),
        Command::Sbom(args) => sbom::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::VerifyImage(args) => verify_image::run(args),
        Command::Key(crate::cli::KeyCommand::Generate(args)) => key::generate(args),
    }
}

/// Says a note of a container run ([`crate::docker::run::run_to_completion_with`]):
/// containers of killed runs removed, or not looked for. Returns whether
/// `phase` was one (a step is the caller's to show).
pub(crate) fn say_container_note(phase: &crate::docker::run::ContainerPhase) -> bool {
    use crate::docker::run::ContainerPhase;
    match phase {
        ContainerPhase::StaleRemoved(n) => crate::output::printer().info(format!(
            "removed {n} container{} left by an imgctl run that was killed",
            if *n == 1 { "" } else { "s" }
        )),
        ContainerPhase::StaleUnchecked(e) => crate::output::printer().warn(format!(
            "could not look for containers left by killed imgctl runs: {e}"
        )),
        _ => return false,
    }
    true
}

/// The error a torch-only command gives in a binary built without the `torch` feature.
#[cfg_attr(feature = "torch", allow(dead_code))]
pub(crate) fn torch_missing(command: &str) -> anyhow::Error {
    let looked = std::env::current_exe()
        .map_err(|_| Vec::new())
        .and_then(|e| torch_part::find_part(&e).map(|_| Vec::new()))
        .unwrap_or_else(|folders| folders);
    let shown: Vec<String> = looked
        .iter()
        .take(3)
        .map(|d| d.display().to_string())
        .collect();
    let more = if looked.len() > shown.len() {
        ", …"
    } else {
        ""
    };
    crate::commands::error::CliError::usage(format!(
        "`imgctl {command}` needs libtorch, and this imgctl was built without the `torch` feature; found no {} beside it or on PATH (looked in {}{more})",
        torch_part::TORCH_PART,
        shown.join(", "),
    ))
        .with_hint(format!("install the full imgctl beside this one as {} (`make install` does), use the imgctl inside an image built by `imgctl build`, or build with default features (`cargo build --release`)", torch_part::TORCH_PART))
        .into()
}
