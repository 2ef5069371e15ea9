//! The shape of a check and of its result, and the runner that gives every
//! check a deadline.
//!
//! This module owns [`Status`], [`CheckResult`] (Serialize + Deserialize: the
//! host reads what ran inside a container), the [`Check`] trait and
//! [`run_with_deadline`]. It knows nothing of NVML or torch.
use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

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

/// When a check runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// One independent check. Implementations must be cheap to construct; the
/// work happens in [`Check::run`], which the runner calls on its own thread
/// under a deadline.
pub trait Check: Send + Sync {
    /// Stable dotted id (`nvml.ecc`).
    fn id(&self) -> &'static str;
    /// One line saying what is checked.
    fn description(&self) -> &'static str;
    /// The level at which it runs.
    fn level(&self) -> Level;
    /// Node-wide or per GPU.
    fn scope(&self) -> Scope;
    /// Whether it needs a GPU (it is SKIP when none is expected and none is found).
    fn needs_gpu(&self) -> bool;
    /// Runs the check. `gpu` is `Some(i)` for [`Scope::PerGpu`] checks.
    fn run(&self, ctx: &super::Context, gpu: Option<u32>) -> Vec<CheckResult>;
}

/// A check defined by a plain function: the common case.
pub struct FnCheck {
    /// Stable id.
    pub id: &'static str,
    /// What it checks.
    pub description: &'static str,
    /// Quick or full.
    pub level: Level,
    /// Node or per GPU.
    pub scope: Scope,
    /// Needs a GPU.
    pub needs_gpu: bool,
    /// The body.
    pub run: fn(&super::Context, Option<u32>) -> Vec<CheckResult>,
}

impl Check for FnCheck {
    fn id(&self) -> &'static str {
        self.id
    }
    fn description(&self) -> &'static str {
        self.description
    }
    fn level(&self) -> Level {
        self.level
    }
    fn scope(&self) -> Scope {
        self.scope
    }
    fn needs_gpu(&self) -> bool {
        self.needs_gpu
    }
    fn run(&self, ctx: &super::Context, gpu: Option<u32>) -> Vec<CheckResult> {
        (self.run)(ctx, gpu)
    }
}

/// Why [`run_with_deadline`] returned no value.
#[derive(Debug, Clone, PartialEq)]
pub enum DeadlineError {
    /// The work did not finish in time; its thread is abandoned.
    TimedOut(Duration),
    /// The work panicked; the panic message.
    Panicked(String),
}

impl std::fmt::Display for DeadlineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeadlineError::TimedOut(d) => write!(f, "timed out after {}", fmt_secs(*d)),
            DeadlineError::Panicked(m) => write!(f, "panicked: {m}"),
        }
    }
}

/// `2s`, `0.25s`.
pub fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if (s - s.round()).abs() < 1e-9 {
        format!("{}s", s.round() as u64)
    } else {
        format!("{s}s")
    }
}

/// How many threads [`run_with_deadline`] has left behind in this process.
static ABANDONED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many deadline threads were abandoned, still inside a call that did not
/// return. When there are any, the process should end with `_exit`: the
/// libraries' exit handlers (CUDA's teardown, NVML's shutdown) could wait
/// forever on the lock the stuck thread holds.
pub fn abandoned_threads() -> usize {
    ABANDONED.load(std::sync::atomic::Ordering::SeqCst)
}

/// Runs `work` on its own thread and waits at most `timeout` for it. A hung
/// call (a driver that never returns) leaves its thread behind and yields
/// [`DeadlineError::TimedOut`]; a panic yields [`DeadlineError::Panicked`].
pub fn run_with_deadline<T, F>(timeout: Duration, work: F) -> Result<T, DeadlineError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("imgctl-check".into())
        .spawn(move || {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
            let _ = tx.send(out);
        });
    if let Err(e) = spawned {
        return Err(DeadlineError::Panicked(format!(
            "could not start a thread: {e}"
        )));
    }
    match rx.recv_timeout(timeout) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(panic)) => Err(DeadlineError::Panicked(panic_message(&panic))),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            ABANDONED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(DeadlineError::TimedOut(timeout))
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(DeadlineError::Panicked(
            "the check thread ended without a result".into(),
        )),
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// What [`run_check`] gives back.
pub struct CheckRun {
    /// The results, durations and GPU indices stamped.
    pub results: Vec<CheckResult>,
    /// Whether the deadline fired (the check's thread is left behind, likely
    /// stuck inside the driver or library it called).
    pub timed_out: bool,
}

/// Runs one check on one subject under `timeout`, turning a timeout or a
/// panic into an ERROR result and stamping durations and GPU indices.
pub fn run_check(
    check: std::sync::Arc<dyn Check>,
    ctx: std::sync::Arc<super::Context>,
    gpu: Option<u32>,
    timeout: Duration,
) -> CheckRun {
    let id = check.id();
    let start = Instant::now();
    let c = check.clone();
    let outcome = run_with_deadline(timeout, move || c.run(&ctx, gpu));
    let elapsed = start.elapsed().as_millis() as u64;
    let timed_out = matches!(outcome, Err(DeadlineError::TimedOut(_)));
    let mut results = match outcome {
        Ok(r) if r.is_empty() => vec![CheckResult::error(id, "the check returned no result")],
        Ok(r) => r,
        Err(e @ DeadlineError::TimedOut(_)) => vec![CheckResult::error(id, e.to_string())
            .threshold(format!("deadline {}", fmt_secs(timeout)))
            .hint("a driver or library call hung; check `nvidia-smi` and the kernel log (dmesg) for Xid errors, or raise --check-timeout")],
        Err(e) => vec![CheckResult::error(id, e.to_string())],
    };
    for r in &mut results {
        if r.gpu.is_none() {
            r.gpu = gpu;
        }
        if r.duration_ms == 0 {
            r.duration_ms = elapsed;
        }
    }
    CheckRun { results, timed_out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_returns_value() {
        let r = run_with_deadline(Duration::from_secs(5), || 41 + 1);
        assert_eq!(r, Ok(42));
    }

    #[test]
    fn deadline_times_out_on_a_hung_call() {
        let start = Instant::now();
        let r = run_with_deadline(Duration::from_millis(100), || {
            std::thread::sleep(Duration::from_secs(3600));
        });
        assert_eq!(r, Err(DeadlineError::TimedOut(Duration::from_millis(100))));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(r.unwrap_err().to_string(), "timed out after 0.1s");
    }

    #[test]
    fn deadline_reports_a_panic() {
        let r: Result<(), _> = run_with_deadline(Duration::from_secs(5), || panic!("boom"));
        assert_eq!(r, Err(DeadlineError::Panicked("boom".into())));
    }

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
