//! What every check sees and what a run asks for: the GPU expectation
//! ([`ExpectGpus`]), whether NVML loaded ([`NvmlState`]), the [`Context`]
//! handed to each check, the [`Options`] of a run, and the selection rules
//! ([`matches`], [`selected`]) that `--only` / `--skip` patterns follow.
//!
//! A leaf of verify: it builds on the result types and the NVML seam only,
//! runs no check and knows no check id.
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::error::VerifyError;
use super::pins::Pins;
use super::result::{CheckResult, Level};
use super::wording::Wording;
use crate::nvml::backend::NvmlBackend;

/// How many GPUs the run requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExpectGpus {
    /// At least one.
    Any,
    /// Exactly this many (0: a CPU-only host; GPU checks are SKIP).
    Exactly(u32),
}

impl ExpectGpus {
    /// Parses `any` or a count.
    pub fn parse(s: &str) -> Result<Self, VerifyError> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("any") {
            return Ok(ExpectGpus::Any);
        }
        t.parse::<u32>()
            .map(ExpectGpus::Exactly)
            .map_err(|_| VerifyError::ExpectGpus {
                value: s.to_string(),
            })
    }
    /// Whether `count` GPUs satisfy the expectation.
    pub fn accepts(self, count: u32) -> bool {
        match self {
            ExpectGpus::Any => count >= 1,
            ExpectGpus::Exactly(n) => count == n,
        }
    }
    /// Whether no GPU is an acceptable outcome.
    pub fn allows_none(self) -> bool {
        self == ExpectGpus::Exactly(0)
    }
    /// `≥ 1 GPU` / `= 4 GPU(s)`.
    pub fn describe(self) -> String {
        match self {
            ExpectGpus::Any => "≥ 1 GPU".to_string(),
            ExpectGpus::Exactly(n) => format!("= {n} GPU(s)"),
        }
    }
    /// The CLI spelling (`any`, `4`).
    pub fn as_arg(self) -> String {
        match self {
            ExpectGpus::Any => "any".to_string(),
            ExpectGpus::Exactly(n) => n.to_string(),
        }
    }
}

/// Whether NVML could be loaded.
#[derive(Clone)]
pub enum NvmlState {
    /// Loaded; the backend to use.
    Ready(Arc<dyn NvmlBackend>),
    /// Not loaded; the one-line reason ("no NVIDIA driver: libnvidia-ml.so.1 not found").
    Unavailable(String),
    /// nvmlInit did not return within the deadline: a driver is there but
    /// wedged. Always an ERROR (the verdict is unknown), whatever is expected.
    Hung(String),
}

/// What every check can see.
pub struct Context {
    /// NVML, or why not.
    pub nvml: NvmlState,
    /// How many GPUs must be present.
    pub expect: ExpectGpus,
    /// quick or full.
    pub level: Level,
    /// Expected versions of torch and its CUDA libraries.
    pub pins: Pins,
    /// Whether verify runs inside a container (see [`in_container`]).
    pub in_container: bool,
    /// The command-line words hints quote (from the command layer).
    pub words: Wording,
}

/// Whether this process runs inside a container: the runtimes create these
/// files (Docker `/.dockerenv`, Podman `/run/.containerenv`).
pub fn in_container() -> bool {
    std::path::Path::new("/.dockerenv").exists()
        || std::path::Path::new("/run/.containerenv").exists()
}

impl Context {
    /// The NVML backend, or the SKIP result a check returns when NVML is not
    /// loaded (`nvml.driver` carries the verdict for that).
    pub fn nvml_backend(&self, id: &str) -> Result<Arc<dyn NvmlBackend>, Box<CheckResult>> {
        match &self.nvml {
            NvmlState::Ready(b) => Ok(b.clone()),
            NvmlState::Unavailable(e) | NvmlState::Hung(e) => Err(Box::new(CheckResult::skip(
                id,
                format!("NVML not available ({e}); see nvml.driver"),
            ))),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// quick or full.
    pub level: Level,
    /// GPU expectation.
    pub expect: ExpectGpus,
    /// Ids or id prefixes to run (empty: all at the level).
    pub only: Vec<String>,
    /// Ids or id prefixes to leave out.
    pub skip: Vec<String>,
    /// Deadline per check and subject.
    pub timeout: Duration,
    /// The command-line words hints quote (from the command layer).
    pub words: Wording,
}

/// Whether check `id` matches a pattern: the id itself or an id prefix
/// (`nvml`, `nvml.*`).
pub fn matches(id: &str, pattern: &str) -> bool {
    let p = pattern.trim_end_matches(".*").trim_end_matches('.');
    id == p || id.starts_with(&format!("{p}."))
}

/// Whether check `id` is selected by `only` / `skip` at `level`. A check named
/// by `--only` runs whatever its level.
pub fn selected(id: &str, check_level: Level, opts: &Options) -> bool {
    if opts.skip.iter().any(|p| matches(id, p)) {
        return false;
    }
    if !opts.only.is_empty() {
        return opts.only.iter().any(|p| matches(id, p));
    }
    check_level == Level::Quick || opts.level == Level::Full
}
