//! `imgctl build`.
use crate::cli::BuildArgs;
use crate::ExitStatus;

/// Runs `imgctl build`.
pub fn run(_args: BuildArgs) -> anyhow::Result<ExitStatus> {
    Err(crate::CliError::failure("not implemented in this build").into())
}
