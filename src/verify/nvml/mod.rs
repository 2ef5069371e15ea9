//! verify's NVML checks (`nvml.*`, `checks.rs`), read through the seam in
//! [`crate::nvml`] (the trait, the real backend and the test fake live
//! there, shared with the trainer's GPU watch).
//!
//! The checks see the backend through the trait, so every verdict path can be
//! driven from a test. This module only re-exports: the paths
//! `verify::nvml::X` are the public ones for the checks.
//!
//! Part: the verify wing (`docs/architecture.md`).
pub(super) mod checks;

pub use checks::{checks, fmt_cuda_version, from_err, BENIGN_THROTTLE};
