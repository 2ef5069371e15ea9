//! NVML: the seam ([`NvmlBackend`], in `backend.rs`), the real backend over
//! nvml-wrapper ([`RealNvml`], `real.rs`), a scriptable fake for unit tests
//! (`FakeNvml`, `fake.rs`, compiled for tests only) and the NVML checks
//! (`nvml.*`, `checks.rs`).
//!
//! Only `real.rs` imports nvml-wrapper; the raw `dlopen` for what it lacks
//! lives in `crate::sys::nvml_raw`. The checks see the backend through the
//! trait, so every verdict path can be driven from a test. This module only
//! re-exports: the paths `verify::nvml::X` are the public ones.
pub(super) mod backend;
pub(super) mod checks;
#[cfg(test)]
mod fake;
pub(super) mod real;

pub use backend::{
    throttle_names, EccInfo, GpuProcess, NvmlBackend, NvmlErr, NvmlResult, PcieLink, RemappedRows,
    RetiredPages, NVML_LIB, THROTTLE_REASONS,
};
pub use checks::{checks, fmt_cuda_version, from_err, BENIGN_THROTTLE};
#[cfg(test)]
pub use fake::{fake, FakeGpu, FakeNvml};
pub use real::{NvmlLoadError, RealNvml};
