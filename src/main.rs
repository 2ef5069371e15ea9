//! The `imgctl` binary: parse, run, map the outcome to an exit code.
use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = imgctl::cli::Cli::parse();
    imgctl::output::init(&cli.global);
    imgctl::exit(imgctl::run(cli))
}
