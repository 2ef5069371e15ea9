//! `imgctl render`.
use crate::cli::RenderArgs;
use crate::ExitStatus;

/// Runs `imgctl render`.
pub fn run(_args: RenderArgs) -> anyhow::Result<ExitStatus> {
    Err(crate::CliError::failure("not implemented in this build").into())
}
