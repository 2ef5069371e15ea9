//! `imgctl train-demo`.
use crate::cli::TrainArgs;
use crate::ExitStatus;

/// Runs `imgctl train-demo`.
#[cfg(feature = "torch")]
pub fn run(_args: TrainArgs) -> anyhow::Result<ExitStatus> {
    Err(crate::CliError::failure("not implemented in this build").into())
}

/// Runs `imgctl train-demo` (unavailable without the `torch` feature).
#[cfg(not(feature = "torch"))]
pub fn run(_args: TrainArgs) -> anyhow::Result<ExitStatus> {
    Err(super::torch_missing("train-demo"))
}
