//! NVML: the seam, the real backend over nvml-wrapper, a scriptable fake for
//! tests and the NVML checks (`nvml.*`); all in `checks.rs` until it is split.
mod checks;

pub use checks::*;
