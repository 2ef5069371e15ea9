//! `imgctl specs`.
use crate::cli::SpecsArgs;
use crate::ExitStatus;

/// Runs `imgctl specs`.
pub fn run(_args: SpecsArgs) -> anyhow::Result<ExitStatus> {
    Err(crate::CliError::failure("not implemented in this build").into())
}
