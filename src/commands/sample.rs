//! `imgctl sample`.
use crate::cli::SampleArgs;
use crate::ExitStatus;

/// Runs `imgctl sample`.
#[cfg(feature = "torch")]
pub fn run(_args: SampleArgs) -> anyhow::Result<ExitStatus> {
    Err(crate::CliError::failure("not implemented in this build").into())
}

/// Runs `imgctl sample` (unavailable without the `torch` feature).
#[cfg(not(feature = "torch"))]
pub fn run(_args: SampleArgs) -> anyhow::Result<ExitStatus> {
    Err(super::torch_missing("sample"))
}
