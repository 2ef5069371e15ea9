//! `imgctl verify`.
use crate::cli::VerifyArgs;
use crate::ExitStatus;

/// Runs `imgctl verify`.
pub fn run(_args: VerifyArgs) -> anyhow::Result<ExitStatus> {
    Err(crate::CliError::failure("not implemented in this build").into())
}
