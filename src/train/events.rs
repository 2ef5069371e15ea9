//! What a training run or a benchmark has to tell the person watching it,
//! as events: [`super::run::run`], `bench::run_rank` and the `--gpus`
//! supervisor ([`super::parallel::supervisor::supervise`]) emit them in
//! order to the sink their caller gives ([`Events`]); the command layer draws them
//! (lines, a progress bar), a library caller may keep them or pass
//! [`silent`]. Owns the event types only (a leaf: it imports nothing of the
//! trainer, so `parallel` may speak through it too); nothing here prints.
use serde::Serialize;

/// Where a run's events go: called once per event, in order, on the
/// thread that runs the loop.
pub type Events<'a> = &'a dyn Fn(&RunEvent);

/// A sink that drops every event (a library caller that trains quietly).
pub fn silent(_: &RunEvent) {}

/// One thing a run or a benchmark says. Notes and warnings are whole
/// sentences without a trailing newline or a `warning:` label; the sink
/// decides how they look.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// A fact about the run: what trains on what, a resume, a file set
    /// aside, a benchmark's phase.
    Note(String),
    /// Something went wrong that does not end the run (an unreadable image
    /// skipped, a plot not drawn, a slower code path taken).
    Warning(String),
    /// A detail for whoever asked for more (`-v`): a worker's pid.
    Detail(String),
    /// The loop begins: `steps` in the run, from `start_step` (after a
    /// resume, the checkpoint's step). Rank 0 only.
    Started {
        /// The run's last step.
        steps: u64,
        /// The step the loop starts after.
        start_step: u64,
    },
    /// A step ended (rank 0 only, every step).
    Step(StepProgress),
    /// The loop ended, finished or not: anything drawn while it ran (a
    /// progress bar) should go before the summary or the error. May come
    /// more than once.
    Stopped,
}

/// A step as the person watching sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepProgress {
    /// The step just trained (1-based).
    pub step: u64,
    /// The run's last step.
    pub steps: u64,
    /// Its loss (mean over ranks).
    pub loss: f64,
    /// Its learning rate.
    pub lr: f64,
    /// Its gradient norm before clipping.
    pub grad_norm: f64,
    /// Images per second over the timed steps so far (this step's own rate
    /// before there are any).
    pub img_per_s: f64,
    /// Seconds left at that rate.
    pub eta_s: f64,
    /// A log line is due at this step (every `log_every` steps and the
    /// last): where no progress bar is drawn, the sink prints one.
    pub log_due: bool,
    /// Seconds this step waited for its batch.
    pub data_wait_s: f64,
    /// Its phases' seconds.
    pub times: PhaseTimes,
    /// The GPUs as last read (a GPU run whose GPUs NVML can read; the
    /// reading may be a few seconds old).
    pub gpu: Option<GpuLoad>,
}

/// What the progress line shows of the watched GPUs' latest reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuLoad {
    /// GPUs read.
    pub gpus: usize,
    /// Their mean utilisation, percent (`None`: NVML did not say).
    pub utilization_pct: Option<f64>,
    /// Memory in use on the fullest of them.
    pub memory_used_bytes: Option<u64>,
    /// That GPU's memory.
    pub memory_total_bytes: Option<u64>,
}

/// Seconds spent in each phase of a step. Without `profile` the phases are
/// timed on the host only (kernels are asynchronous on CUDA, so most time
/// shows up where the host waits: the loss read-back after the optimizer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PhaseTimes {
    /// Host-to-device copies and the forward pass with the loss.
    pub forward: f64,
    /// The backward pass.
    pub backward: f64,
    /// [`super::sync::GradSync::sync_grads`].
    pub grad_sync: f64,
    /// Unscaling, clipping, the loss read-back, AdamW and EMA.
    pub optimizer: f64,
}
