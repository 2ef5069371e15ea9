//! `imgctl verify`: is this machine (or this image on this machine) fit to train on?
//!
//! This file is a thin hub: it declares the modules and re-exports the public
//! paths (`verify::Options`, `verify::run_local`, …); no child imports it.
//! Each check is an independent unit with a stable dotted id ([`check::Check`],
//! its result types in [`result`]); [`context`] holds what every check sees
//! and the selection rules, [`registry`] every check in run order, [`run`]
//! the runner with its deadlines, and [`report`] the [`Report`] with its
//! table, JSON and JUnit forms. Families live in [`nvml`] (NVML through
//! nvml-wrapper, behind the [`crate::nvml::NvmlBackend`] seam), [`torch`] (libtorch
//! facts and loaded-library provenance), [`functional`] (matrix products,
//! bandwidths, NCCL; `--level full`) and [`host`] (the host side of
//! `verify --image`), and `fleet` runs one verify per node of a launcher's
//! world and judges them together (`verify --fleet`). [`pins`] says which versions are expected; [`versions`]
//! is the leaf both it and [`torch`] use to compare and read versions.
//! Verify must not parse CLI arguments nor name them (see
//! `commands/verify.rs`), nor talk to the Docker engine except through
//! `crate::docker`.
//!
//! Part: the verify wing (`docs/architecture.md`).
pub mod check;
pub mod context;
pub mod error;
pub mod fatbin;
#[cfg(feature = "torch")]
pub mod fleet;
pub mod functional;
pub mod host;
pub mod nvml;
pub mod pins;
pub mod provenance;
pub mod registry;
pub mod report;
pub mod result;
pub mod retry;
pub mod run;
pub mod torch;
pub mod versions;
pub mod wording;

/// Each check's deadline unless `--check-timeout` says otherwise, in seconds
/// (`verify`, and the verify of `build --verify`).
pub const DEFAULT_CHECK_TIMEOUT_S: f64 = 30.0;

pub use check::Check;
pub use context::{in_container, matches, selected, Context, ExpectGpus, NvmlState, Options};
pub use error::VerifyError;
pub use pins::Pins;
pub use registry::{all_ids, registry, unknown_patterns};
pub use report::{Report, Summary, SCHEMA_VERSION};
pub use result::{CheckResult, Level, Scope, Status};
pub use run::{
    apply_node_median, load_real_nvml, run_checks, run_checks_with, run_local, run_local_in,
    run_local_with, Progress, Step, MEDIAN_FRACTION, MEDIAN_RULE_IDS,
};
pub use wording::Wording;

#[cfg(test)]
mod tests;
