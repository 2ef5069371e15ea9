//! **The NVML seam** (on the shared floor, under `train/` and `verify/`): the
//! trait ([`NvmlBackend`], in `backend.rs`), the real backend over
//! nvml-wrapper ([`RealNvml`], `real.rs`) and a scriptable fake for unit
//! tests (`FakeNvml`, `fake.rs`, compiled for tests only).
//!
//! Only `real.rs` imports nvml-wrapper; the raw `dlopen` for what it lacks
//! lives in `crate::sys::nvml_raw`. Two wings read GPUs through this seam:
//! verify's NVML checks (`verify::nvml`) and the trainer's GPU watch
//! (`train::gpu_watch`); this module imports neither. The paths
//! `nvml::X` are the public ones.
//!
//! Part: the shared floor (`docs/architecture.md`).
pub mod backend;
#[cfg(test)]
mod fake;
pub mod real;

pub use backend::{
    throttle_names, EccInfo, GpuProcess, NvmlBackend, NvmlErr, NvmlResult, PcieLink, RemappedRows,
    RetiredPages, NVML_LIB, THROTTLE_REASONS,
};
#[cfg(test)]
pub use fake::{fake, FakeGpu, FakeNvml};
pub use real::{NvmlLoadError, RealNvml};
