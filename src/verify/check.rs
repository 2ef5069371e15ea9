//! The shape of a check and the runner that gives every check a deadline.
//!
//! This module owns the [`Check`] trait, [`FnCheck`], [`run_with_deadline`]
//! and [`run_check`]; the result types live in [`super::result`] (re-exported
//! here, so `verify::check::CheckResult` keeps working). It knows nothing of
//! NVML or torch.
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::context::Context;
pub use super::result::{CheckResult, Level, Scope, Status};

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
    fn run(&self, ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult>;
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
    pub run: fn(&Context, Option<u32>) -> Vec<CheckResult>,
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
    fn run(&self, ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
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
    ctx: std::sync::Arc<Context>,
    gpu: Option<u32>,
    timeout: Duration,
) -> CheckRun {
    let id = check.id();
    let start = Instant::now();
    let c = check.clone();
    let words = ctx.words;
    let outcome = run_with_deadline(timeout, move || c.run(&ctx, gpu));
    let elapsed = start.elapsed().as_millis() as u64;
    let timed_out = matches!(outcome, Err(DeadlineError::TimedOut(_)));
    let mut results = match outcome {
        Ok(r) if r.is_empty() => vec![CheckResult::error(id, "the check returned no result")],
        Ok(r) => r,
        Err(e @ DeadlineError::TimedOut(_)) => vec![CheckResult::error(id, e.to_string())
            .threshold(format!("deadline {}", fmt_secs(timeout)))
            .hint(format!("a driver or library call hung; check `nvidia-smi` and the kernel log (dmesg) for Xid errors, or raise {}", words.check_timeout))],
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
}
