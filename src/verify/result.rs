//! The result of a check: its [`Status`], [`Level`], [`Scope`] and the
//! [`CheckResult`] it gives (Serialize + Deserialize: the host reads what
//! ran inside a container).
//!
//! A leaf: it imports nothing from the rest of verify, so the check trait,
//! the context, the runner and the report all build on it. It runs nothing
//! and renders nothing.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::gpus::expected::{format_expected, Basis, Expected, NoReference};

/// The verdict of one check on one subject (the node, one GPU or one GPU pair).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The check ran and the subject is fit.
    Pass,
    /// The check ran; the subject works but something deserves attention.
    Warn,
    /// The check ran and the subject is not fit.
    Fail,
    /// The check did not run; the reason says why. Never counted as a pass.
    Skip,
    /// The check could not be evaluated (a call failed or timed out): the
    /// verdict is unknown, so the run fails.
    Error,
}

impl Status {
    /// Upper-case label used in tables.
    pub fn label(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
            Status::Error => "ERROR",
        }
    }
    /// Whether this verdict fails the run (FAIL, and ERROR because the verdict is unknown).
    pub fn fails_run(self) -> bool {
        matches!(self, Status::Fail | Status::Error)
    }
}

/// When a check runs. Also `verify --level`'s values (clap's names are the
/// serde names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// NVML and library facts (seconds).
    Quick,
    /// Adds functional checks (matrix products, bandwidths, NCCL; about 2 min).
    Full,
}

/// What one check looks at: the whole node once, or each GPU in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Runs once.
    Node,
    /// Runs once per GPU NVML reports, each call with its own deadline.
    PerGpu,
}

/// The result of one check on one subject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// Stable dotted id of the check (`nvml.ecc`); an interface.
    pub id: String,
    /// The GPU index (NVML order) this result is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// The second GPU of a pair (P2P results), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<u32>,
    /// The verdict.
    pub status: Status,
    /// One line: what was found, or why the check was skipped or could not run.
    pub message: String,
    /// The measured value, with units (`3 uncorrectable errors`, `812.4 TFLOP/s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
    /// The threshold the measured value was judged against, with units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<String>,
    /// What `value` should read on this GPU (in `unit`), when imgctl's
    /// reference table has a figure for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<f64>,
    /// Whether `expected` is a typical figure or a peak.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_basis: Option<Basis>,
    /// Where `expected` comes from; without `expected`, why there is none
    /// (an unknown GPU says so instead of guessing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The primary numeric value (in `unit`), for node-median comparisons and machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// The unit of `value`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// What to do about a non-pass verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Structured facts for machines (`uuid`, `name`, `pci_bus_id` of a GPU).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub facts: BTreeMap<String, String>,
    /// Wall time the check took, in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
}

impl CheckResult {
    /// A result with the given verdict and message.
    pub fn new(id: &str, status: Status, message: impl Into<String>) -> Self {
        Self {
            id: id.to_string(),
            gpu: None,
            peer: None,
            status,
            message: message.into(),
            measured: None,
            threshold: None,
            expected: None,
            expected_basis: None,
            source: None,
            value: None,
            unit: None,
            hint: None,
            facts: BTreeMap::new(),
            duration_ms: 0,
        }
    }
    /// A PASS.
    pub fn pass(id: &str, message: impl Into<String>) -> Self {
        Self::new(id, Status::Pass, message)
    }
    /// A WARN.
    pub fn warn(id: &str, message: impl Into<String>) -> Self {
        Self::new(id, Status::Warn, message)
    }
    /// A FAIL.
    pub fn fail(id: &str, message: impl Into<String>) -> Self {
        Self::new(id, Status::Fail, message)
    }
    /// A SKIP; `reason` says why it did not run.
    pub fn skip(id: &str, reason: impl Into<String>) -> Self {
        Self::new(id, Status::Skip, reason)
    }
    /// The SKIP of a torch check in an imgctl built without the `torch` feature.
    pub fn without_torch(id: &str) -> Vec<Self> {
        vec![Self::skip(
            id,
            "this imgctl was built without the torch feature",
        )]
    }
    /// An ERROR: the check could not be evaluated.
    pub fn error(id: &str, message: impl Into<String>) -> Self {
        Self::new(id, Status::Error, message)
    }
    /// Sets the GPU index.
    pub fn gpu(mut self, gpu: u32) -> Self {
        self.gpu = Some(gpu);
        self
    }
    /// Sets the GPU index if there is one.
    pub fn gpu_opt(mut self, gpu: Option<u32>) -> Self {
        self.gpu = gpu;
        self
    }
    /// Sets the peer GPU of a pair.
    pub fn peer(mut self, peer: u32) -> Self {
        self.peer = Some(peer);
        self
    }
    /// Sets the measured value (with units).
    pub fn measured(mut self, measured: impl Into<String>) -> Self {
        self.measured = Some(measured.into());
        self
    }
    /// Sets the threshold (with units).
    pub fn threshold(mut self, threshold: impl Into<String>) -> Self {
        self.threshold = Some(threshold.into());
        self
    }
    /// Sets the expected value and its source, or, for a [`NoReference`],
    /// the reason there is none.
    pub fn expect(mut self, expected: Result<Expected, NoReference>) -> Self {
        match expected {
            Ok(e) => {
                self.expected = Some(e.value);
                self.expected_basis = Some(e.basis);
                self.source = Some(e.source);
            }
            Err(why) => {
                self.expected = None;
                self.expected_basis = None;
                self.source = Some(why.0);
            }
        }
        self
    }
    /// The expected value as text (`≈ 682.8 TFLOP/s`, `≤ 450.0 GB/s peak`),
    /// `no reference` when the source says why there is none, else `None`.
    pub fn expected_label(&self) -> Option<String> {
        match (self.expected, &self.source) {
            (Some(v), _) => Some(format_expected(
                v,
                self.unit.as_deref().unwrap_or(""),
                self.expected_basis.unwrap_or(Basis::Typical),
            )),
            (None, Some(_)) => Some("no reference".to_string()),
            (None, None) => None,
        }
    }
    /// Sets the primary numeric value and its unit.
    pub fn value(mut self, value: f64, unit: &str) -> Self {
        self.value = Some(value);
        self.unit = Some(unit.to_string());
        self
    }
    /// Sets the hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    /// Adds a structured fact.
    pub fn fact(mut self, key: &str, value: impl Into<String>) -> Self {
        self.facts.insert(key.to_string(), value.into());
        self
    }
    /// The subject as a short label: `node`, `gpu0`, `gpu0->gpu1`.
    pub fn subject(&self) -> String {
        match (self.gpu, self.peer) {
            (Some(g), Some(p)) => format!("gpu{g}->gpu{p}"),
            (Some(g), None) => format!("gpu{g}"),
            _ => "node".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_and_fail_fail_the_run_skip_does_not() {
        assert!(Status::Fail.fails_run());
        assert!(Status::Error.fails_run());
        assert!(!Status::Skip.fails_run());
        assert!(!Status::Warn.fails_run());
        assert!(!Status::Pass.fails_run());
    }

    #[test]
    fn result_round_trips_through_json() {
        let r = CheckResult::fail("nvml.ecc", "3 uncorrectable ECC errors")
            .gpu(1)
            .measured("3 errors")
            .threshold("0 errors")
            .value(3.0, "errors")
            .hint("drain the node");
        let text = serde_json::to_string(&r).unwrap();
        assert!(text.contains("\"status\":\"fail\""));
        let back: CheckResult = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.subject(), "gpu1");
    }
}
