//! What the benchmark core's errors mean for the user of
//! `imgctl train-demo --benchmark --compare` and `--op-profile`: the exit
//! status, how to get an interpreter for the PyTorch reference, and what to
//! do about a profiler trace that cannot be read.

use super::advice::Advice;

/// Advice for the errors of `bench/`.
#[cfg(not(feature = "torch"))]
pub(super) fn advise(_err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    None
}

/// Advice for the errors of `bench/`.
#[cfg(feature = "torch")]
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    use crate::env_vars::IMGCTL_PYTHON;
    use crate::train::bench::ops::TraceError;
    use crate::train::bench::reference::ReferenceError;
    if let Some(e) = err.downcast_ref::<TraceError>() {
        return Some(match e {
            TraceError::Read { .. } => Advice::failure(
                "the profiler's trace went missing: check the free space and permissions of --out (or of the temporary directory)"
                    .to_string(),
            ),
            TraceError::Format { .. } => Advice::failure(
                "the profiler wrote no usable trace; rerun, and report it with the torch version (`imgctl verify`) if it repeats"
                    .to_string(),
            ),
        });
    }
    err.downcast_ref::<ReferenceError>().map(|e| match e {
        ReferenceError::Spawn { .. } => Advice::usage(format!(
            "install Python 3 with torch and diffusers (scripts/setup.sh does), or point {IMGCTL_PYTHON} at such an interpreter"
        )),
        ReferenceError::Imports { .. } => Advice::usage(format!(
            "point {IMGCTL_PYTHON} at a Python with torch and diffusers (the venv scripts/setup.sh made: `{IMGCTL_PYTHON}=~/.cache/imgctl/venv-torch-2.7.0/bin/python`), or `pip install torch diffusers` into this one"
        )),
    })
}
