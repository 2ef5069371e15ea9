//! What the benchmark core's errors mean for the user of
//! `imgctl train-demo --benchmark --compare`: the exit status and how to get
//! an interpreter for the PyTorch reference.

use super::advice::Advice;

/// Advice for the errors of `bench/`.
#[cfg(not(feature = "torch"))]
pub(super) fn advise(_err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    None
}

/// Advice for the errors of `bench/`.
#[cfg(feature = "torch")]
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    use crate::bench::reference::ReferenceError;
    use crate::env_vars::IMGCTL_PYTHON;
    err.downcast_ref::<ReferenceError>().map(|e| match e {
        ReferenceError::Spawn { .. } => Advice::usage(format!(
            "install Python 3 with torch and diffusers (scripts/setup.sh does), or point {IMGCTL_PYTHON} at such an interpreter"
        )),
        ReferenceError::Imports { .. } => Advice::usage(format!(
            "point {IMGCTL_PYTHON} at a Python with torch and diffusers (the venv scripts/setup.sh made: `{IMGCTL_PYTHON}=~/.cache/imgctl/venv-torch-2.7.0/bin/python`), or `pip install torch diffusers` into this one"
        )),
    })
}
