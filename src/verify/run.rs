//! The runner: loads NVML under a deadline ([`load_real_nvml`]), runs the
//! selected checks in order, each subject under its own deadline, stops
//! trying a family after its first hang, reports the verdicts a selection
//! must not hide, and applies the node-median rule ([`apply_node_median`]).
//! [`run_local`] turns that into a [`Report`].
//!
//! It prints nothing: progress goes to a [`Progress`] callback.
use std::sync::Arc;
use std::time::Duration;

use super::check::{self, Check};
use super::context::{in_container, selected, Context, NvmlState, Options};
use super::pins::Pins;
use super::registry::registry;
use super::report::Report;
use super::result::{CheckResult, Scope, Status};
use crate::nvml::real::RealNvml;

/// Loads the real NVML under the deadline (a wedged driver can hang nvmlInit).
pub fn load_real_nvml(timeout: Duration) -> NvmlState {
    match check::run_with_deadline(timeout, RealNvml::load) {
        Ok(Ok(real)) => NvmlState::Ready(Arc::new(real)),
        Ok(Err(e)) => NvmlState::Unavailable(e.to_string()),
        Err(e) => NvmlState::Hung(format!("NVML initialisation {e}")),
    }
}

/// The library a check's calls go through. A call that hangs there usually
/// wedges that library for every later call (NVML serialises calls under a
/// lock; CUDA initialises once per process), so after one deadline fires the
/// rest of its family is not tried: verify ends in bounded time.
fn family(id: &str) -> &'static str {
    if id.starts_with("nvml.") {
        "NVML"
    } else if id == "torch.version" {
        // Reads files only: it stays informative after a CUDA hang.
        "files"
    } else {
        "CUDA/libtorch"
    }
}

/// Where a run stands, told to a [`Progress`] before each check starts.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// 1-based position of the check about to run.
    pub index: usize,
    /// How many checks the run holds (it grows when a verdict the
    /// selection left out must be reported).
    pub total: usize,
    /// The check and its subject: `nvml.ecc`, `nvml.ecc gpu1`.
    pub label: &'a str,
}

/// Told of each check as it starts, so that a command can draw progress;
/// verify itself prints nothing. `&|_| {}` when nobody watches.
pub type Progress<'a> = &'a dyn Fn(Step<'_>);

/// Runs checks, short-circuiting a family after its first hang.
struct Runner<'a> {
    ctx: Arc<Context>,
    timeout: Duration,
    /// Family → what hung in it.
    hung: Vec<(&'static str, String)>,
    progress: Progress<'a>,
    /// Checks started so far, and how many the run holds.
    started: usize,
    total: usize,
}

impl Runner<'_> {
    /// Tells the watcher that the next check (on `gpu`) starts.
    fn step(&mut self, id: &str, gpu: Option<u32>) {
        self.started += 1;
        self.total = self.total.max(self.started);
        let label = match gpu {
            Some(g) => format!("{id} gpu{g}"),
            None => id.to_string(),
        };
        (self.progress)(Step {
            index: self.started,
            total: self.total,
            label: &label,
        });
    }

    fn run(&mut self, c: &Arc<dyn Check>, gpu: Option<u32>) -> Vec<CheckResult> {
        self.step(c.id(), gpu);
        let fam = family(c.id());
        if let Some((_, what)) = self.hung.iter().find(|(f, _)| *f == fam) {
            let mut r = CheckResult::error(
                c.id(),
                format!("not evaluated: {fam} hung earlier in this run ({what})"),
            )
            .hint("a driver or library call hung; check `nvidia-smi` and the kernel log (dmesg) for Xid errors");
            r.gpu = gpu;
            return vec![r];
        }
        let run = check::run_check(c.clone(), self.ctx.clone(), gpu, self.timeout);
        if run.timed_out {
            let subject = gpu.map_or(String::new(), |g| format!(" on gpu{g}"));
            self.hung.push((
                fam,
                format!(
                    "{}{subject} timed out after {}",
                    c.id(),
                    check::fmt_secs(self.timeout)
                ),
            ));
        }
        run.results
    }

    /// Runs a check the selection left out because the run's verdict needs
    /// it, saying so in its message.
    fn forced(&mut self, c: &Arc<dyn Check>, why: &str) -> Vec<CheckResult> {
        let mut verdict = self.run(c, None);
        for r in &mut verdict {
            r.message = format!("{} (reported although not selected: {why})", r.message);
        }
        verdict
    }
}

/// Runs the selected checks in order, each subject under its own deadline,
/// then applies the node-median rule.
pub fn run_checks(ctx: Arc<Context>, opts: &Options) -> Vec<CheckResult> {
    run_checks_with(ctx, opts, &|_| {})
}

/// [`run_checks`], telling `progress` of each check as it starts.
pub fn run_checks_with(
    ctx: Arc<Context>,
    opts: &Options,
    progress: Progress<'_>,
) -> Vec<CheckResult> {
    let mut runner = Runner {
        ctx: ctx.clone(),
        timeout: opts.timeout,
        hung: Vec::new(),
        progress,
        started: 0,
        total: 0,
    };
    let count = match &ctx.nvml {
        NvmlState::Ready(b) => {
            let b = b.clone();
            match check::run_with_deadline(opts.timeout, move || b.device_count()) {
                Ok(Ok(n)) => Ok(n),
                Ok(Err(e)) => Err(format!("GPU count unknown ({e}); see nvml.device_count")),
                Err(e) => {
                    runner.hung.push(("NVML", format!("the device count {e}")));
                    Err(format!(
                        "GPU count unknown (device count {e}); see nvml.device_count"
                    ))
                }
            }
        }
        NvmlState::Unavailable(e) | NvmlState::Hung(e) => {
            Err(format!("NVML not available ({e}); see nvml.driver"))
        }
    };
    let mut results = Vec::new();
    let chosen: Vec<Arc<dyn Check>> = registry()
        .into_iter()
        .filter(|c| selected(c.id(), c.level(), opts))
        .collect();
    runner.total = chosen
        .iter()
        .map(|c| match (c.scope(), &count) {
            (Scope::PerGpu, Ok(n)) if *n > 0 => *n as usize,
            _ => 1,
        })
        .sum();
    for c in chosen {
        match c.scope() {
            Scope::Node => results.extend(runner.run(&c, None)),
            Scope::PerGpu => match &count {
                Ok(0) => {
                    runner.step(c.id(), None);
                    results.push(CheckResult::skip(c.id(), "no GPU found"));
                }
                Ok(n) => {
                    for g in 0..*n {
                        results.extend(runner.run(&c, Some(g)));
                    }
                }
                Err(why) => {
                    runner.step(c.id(), None);
                    results.push(CheckResult::skip(c.id(), why.clone()));
                }
            },
        }
    }
    // The NVML verdict and the GPU count verdict are never left out: without
    // them, a run whose NVML did not load, or that found fewer GPUs than
    // expected, could pass on SKIPs alone (the DCGM trap).
    let nvml_missing = match &ctx.nvml {
        NvmlState::Ready(_) => false,
        NvmlState::Unavailable(_) => !ctx.expect.allows_none(),
        NvmlState::Hung(_) => true,
    };
    let count_unmet = matches!(ctx.nvml, NvmlState::Ready(_))
        && match count {
            Ok(n) => !ctx.expect.accepts(n),
            Err(_) => true,
        };
    let mut front = Vec::new();
    let unmet = format!("the GPU count does not meet {}", ctx.words.expect_gpus);
    for (id, needed, why) in [
        ("nvml.driver", nvml_missing, "NVML is required"),
        ("nvml.device_count", count_unmet, unmet.as_str()),
    ] {
        if !needed || results.iter().any(|r| r.id == id) {
            continue;
        }
        if let Some(c) = registry().into_iter().find(|c| c.id() == id) {
            front.extend(runner.forced(&c, why));
        }
    }
    results.splice(0..0, front);
    apply_node_median(&mut results);
    results
}

/// Ids whose per-GPU `value` is a rate where higher is better; the 90 %
/// node-median rule applies to them.
pub const MEDIAN_RULE_IDS: &[&str] = &[
    "func.matmul_bf16",
    "func.matmul_fp32",
    "func.matmul_tf32",
    "func.mem_bandwidth",
    "func.h2d_bandwidth",
    "func.d2h_bandwidth",
    "func.p2p_bandwidth",
];

/// Fraction of the node median under which a GPU is a WARN (the issue: "any
/// GPU below 90 % of the node median on a metric is a WARN").
pub const MEDIAN_FRACTION: f64 = 0.9;

/// Marks PASS results below [`MEDIAN_FRACTION`] of the node median of their
/// metric as WARN, even above the absolute floor.
pub fn apply_node_median(results: &mut [CheckResult]) {
    for id in MEDIAN_RULE_IDS {
        let mut values: Vec<f64> = results
            .iter()
            .filter(|r| r.id == *id && r.gpu.is_some())
            .filter(|r| matches!(r.status, Status::Pass | Status::Warn))
            .filter_map(|r| r.value)
            .collect();
        if values.len() < 2 {
            continue;
        }
        values.sort_by(|a, b| a.total_cmp(b));
        let mid = values.len() / 2;
        let median = if values.len() % 2 == 0 {
            (values[mid - 1] + values[mid]) / 2.0
        } else {
            values[mid]
        };
        for r in results
            .iter_mut()
            .filter(|r| r.id == *id && r.gpu.is_some())
        {
            let (Some(v), Status::Pass) = (r.value, r.status) else {
                continue;
            };
            if v < MEDIAN_FRACTION * median {
                let unit = r.unit.clone().unwrap_or_default();
                r.status = Status::Warn;
                r.message = format!(
                    "{}; below 90% of the node median {median:.1} {unit}",
                    r.message
                );
                let floor = format!(
                    "≥ {:.1} {unit} (90% of node median)",
                    MEDIAN_FRACTION * median
                );
                r.threshold = Some(match &r.threshold {
                    Some(t) => format!("{t}; {floor}"),
                    None => floor,
                });
                r.hint.get_or_insert_with(|| {
                    "this GPU is slower than its peers: check nvml.throttle, nvml.pcie and nvml.temperature".to_string()
                });
            }
        }
    }
}

/// Runs verify on this machine with the given NVML state (the real one from
/// [`load_real_nvml`], or a fake in tests).
pub fn run_local(nvml: NvmlState, opts: &Options, pins: Pins) -> Report {
    run_local_in(nvml, opts, pins, in_container())
}

/// [`run_local`], told whether it runs inside a container (tests drive both).
pub fn run_local_in(nvml: NvmlState, opts: &Options, pins: Pins, in_container: bool) -> Report {
    run_local_with(nvml, opts, pins, in_container, &|_| {})
}

/// [`run_local_in`], telling `progress` of each check as it starts.
pub fn run_local_with(
    nvml: NvmlState,
    opts: &Options,
    pins: Pins,
    in_container: bool,
    progress: Progress<'_>,
) -> Report {
    let ctx = Arc::new(Context {
        nvml,
        expect: opts.expect,
        level: opts.level,
        pins,
        in_container,
        words: opts.words,
    });
    let results = run_checks_with(ctx, opts, progress);
    // `verify --image` shows "container".
    let context = if in_container { "container" } else { "host" };
    Report::new(context, None, opts.level, opts.expect, results)
}
