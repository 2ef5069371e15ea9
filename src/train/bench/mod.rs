//! The training benchmark (`imgctl train-demo --benchmark`): throughput,
//! step-time breakdown, peak device memory and MFU of the trainer's own step,
//! scaling over 1, 2, 4 … N ranks, and the comparison with the PyTorch
//! reference script.
//!
//! Method: warm-up steps, then timed steps run exactly as in training (the
//! trainer reads the loss back every `read_every` steps, nothing else
//! synchronises; each step of a read window counts the window's mean), then a
//! separate set of profiled steps that synchronise the device between phases
//! for the breakdown, so the synchronisation never distorts the throughput
//! figure. Memory on CUDA is `cudaMemGetInfo` (device used = total − free)
//! sampled after every timed step: it includes the CUDA context and torch's
//! caching-allocator reserve, so it is an upper bound of live tensors. A
//! benchmark starts as a run does, through [`crate::train::session`] (without
//! an output directory or a checkpoint to resume). This module measures and
//! reports; it must not change how the trainer steps.
//!
//! Part: the train wing (`docs/architecture.md`).
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tch::Device;

use crate::sys::cudart::CudaRuntime;
use crate::train::config::Precision;
use crate::train::data::Loader;
use crate::train::events::{Events, RunEvent};
use crate::train::session::{self, RunOptions};
use crate::train::sync::GradSync;
use crate::train::trainer::{self, Trainer};
use checkpointing::MemProbe;
use profiled::{profiled_steps, trace_if_asked, Profiled};

pub mod charts;
pub mod checkpointing;
pub mod host_memory;
pub mod ops;
pub mod peak;
mod profiled;
pub mod reference;
pub mod report;
pub mod scaling;
pub use scaling::{scaling_report, scaling_sizes, ScalingReport, ScalingRow};

/// Version of every benchmark JSON document.
pub const SCHEMA_VERSION: u32 = 1;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Model, batch, precision, device and data, as for training.
    pub run: RunOptions,
    /// Untimed steps first (allocator warm-up, cuDNN algorithm search).
    pub warmup: u64,
    /// Timed steps.
    pub steps: u64,
    /// Steps with device synchronisation between phases, for the breakdown.
    pub profile_steps: u64,
}

/// Step-time statistics in milliseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepStatsMs {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub median: f64,
    /// Fastest step.
    pub min: f64,
    /// Slowest step.
    pub max: f64,
}

impl StepStatsMs {
    fn of(secs: &[f64]) -> Self {
        let mut v: Vec<f64> = secs.iter().map(|s| s * 1e3).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len().max(1) as f64;
        Self {
            mean: v.iter().sum::<f64>() / n,
            median: median(v.clone()),
            min: v.first().copied().unwrap_or(0.0),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

/// Mean milliseconds per phase over the profiled steps.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Breakdown {
    /// Waiting for the data loader.
    pub data: f64,
    /// Host-to-device copies, noising and the forward pass with the loss.
    pub forward: f64,
    /// The backward pass.
    pub backward: f64,
    /// The gradient all-reduce (0 for one rank).
    pub all_reduce: f64,
    /// Unscale, clipping, loss read-back, AdamW and EMA.
    pub optimizer: f64,
    /// Sum of the phases.
    pub total: f64,
    /// Steps averaged.
    pub steps: u64,
}

/// Device memory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Memory {
    /// How it was measured.
    pub method: String,
    /// Peak device memory in use during the timed steps.
    pub peak_used_bytes: u64,
    /// In use before the model was built (CUDA context, other processes).
    pub baseline_used_bytes: u64,
    /// The device's total memory.
    pub total_bytes: u64,
    /// torch's caching allocator: the most bytes in tensors at once during the
    /// timed steps (`torch.cuda.max_memory_allocated`); `None` where this
    /// libtorch cannot say (before torch 2.9).
    #[serde(default)]
    pub peak_allocated_bytes: Option<u64>,
    /// The most bytes the allocator held from the device at once then
    /// (`torch.cuda.max_memory_reserved`).
    #[serde(default)]
    pub peak_reserved_bytes: Option<u64>,
}

/// The memory budget [`StepMemory::max_batch_in_budget`] is computed for
/// (a 24 GiB GPU).
pub const BATCH_BUDGET_BYTES: u64 = 24 << 30;

/// What a step holds beyond the model: the peak of the timed steps over the
/// memory in use before them (parameters, gradients, optimizer state), per
/// image, and the batch that fits a budget at that rate.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepMemory {
    /// How it was measured.
    pub method: String,
    /// In use before the timed steps (after the warm-up).
    pub before_bytes: u64,
    /// The peak during the timed steps.
    pub peak_bytes: u64,
    /// (peak − before) / batch: activations and other per-image transients.
    pub per_image_bytes: u64,
    /// The budget of `max_batch_in_budget` ([`BATCH_BUDGET_BYTES`]).
    pub budget_bytes: u64,
    /// The largest batch with before + batch × per-image ≤ budget.
    pub max_batch_in_budget: u64,
}

impl StepMemory {
    /// From the memory before and at the peak of steps of `batch` images.
    pub fn new(method: &str, before: u64, peak: u64, batch: usize) -> Self {
        let per_image = peak.saturating_sub(before) / batch.max(1) as u64;
        Self {
            method: method.into(),
            before_bytes: before,
            peak_bytes: peak,
            per_image_bytes: per_image,
            budget_bytes: BATCH_BUDGET_BYTES,
            max_batch_in_budget: BATCH_BUDGET_BYTES.saturating_sub(before) / per_image.max(1),
        }
    }
}

/// Model FLOPs utilisation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Flops {
    /// Training FLOPs per image (forward + backward, from the model config).
    pub train_flops_per_image: f64,
    /// Achieved TFLOP/s per device.
    pub achieved_tflops_per_device: f64,
    /// The device's datasheet peak for this precision, if known.
    pub peak_tflops: Option<f64>,
    /// Which peak (bf16 dense, tf32 dense).
    pub peak_kind: Option<String>,
    /// Where the peak comes from.
    pub peak_source: Option<String>,
    /// achieved / peak, if a peak is known.
    pub mfu: Option<f64>,
    /// Why MFU is missing, when it is.
    pub mfu_note: Option<String>,
}

/// One benchmark run (one world size).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BenchReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `imgctl.train_benchmark`.
    pub kind: String,
    /// Model preset.
    pub preset: String,
    /// Trainable parameters.
    pub params: i64,
    /// Image side in pixels.
    pub image_size: u32,
    /// fp32, fp16 or bf16.
    pub precision: String,
    /// The dtype gradients are all-reduced in: fp32, or bf16 for a bf16 run
    /// with `--grad-reduce bf16`.
    pub grad_reduce: String,
    /// Bytes each rank all-reduces per step (0 for one rank).
    pub all_reduce_bytes_per_step: usize,
    /// The all-reduce overlapped backward (`--overlap-grad-reduce`, on by
    /// default); `breakdown_ms.all_reduce` is then the part left after backward.
    #[serde(default)]
    pub grad_overlap: bool,
    /// Gradient buckets per step (collective calls).
    #[serde(default)]
    pub buckets_per_step: f64,
    /// Share of the buckets whose all-reduce started while backward was still
    /// running (overlapped runs only).
    #[serde(default)]
    pub buckets_during_backward: f64,
    /// The model ran in channels-last memory layout (`--channels-last`).
    pub channels_last: bool,
    /// The GroupNorm + SiLU kernels that ran: `aten` or `fused` (`--groupnorm`).
    #[serde(default)]
    pub groupnorm: String,
    /// The fused GroupNorm's self-check, one line per activation dtype
    /// (empty when not asked for).
    #[serde(default)]
    pub groupnorm_self_check: Vec<String>,
    /// GroupNorm + SiLU calls in this process on the fused kernels, and on
    /// ATen's in layers set to fused (inputs the kernels do not take).
    #[serde(default)]
    pub groupnorm_calls: (u64, u64),
    /// Why the fused GroupNorm was asked for and ATen's ran instead.
    #[serde(default)]
    pub groupnorm_fallback: Option<String>,
    /// Steps per host read-back of the loss (`--read-every`, auto resolved).
    #[serde(default)]
    pub read_every: u64,
    /// The SDPA backend(s) libtorch chose for the attention layers:
    /// `flash`, `efficient`, `cudnn` or `math` (`+`-joined when several).
    #[serde(default)]
    pub attention_backend: Option<String>,
    /// Each UNet block was checkpointed (`--gradient-checkpointing`).
    #[serde(default)]
    pub gradient_checkpointing: bool,
    /// The timed steps' memory over the model's: peak RSS on the CPU, torch's
    /// allocated bytes on CUDA (where this libtorch reports them).
    #[serde(default)]
    pub step_memory: Option<StepMemory>,
    /// With `--gradient-checkpointing`: its throughput and memory against the
    /// same steps without it, alternating in this run.
    #[serde(default)]
    pub checkpointing_comparison: Option<checkpointing::Comparison>,
    /// cuDNN's autotuner was on (always on CUDA).
    pub cudnn_benchmark: bool,
    /// cpu or cuda:N (as this rank saw it).
    pub device: String,
    /// GPU name, or "cpu".
    pub device_name: String,
    /// single, nccl or cpu.
    pub backend: String,
    /// Ranks.
    pub world_size: usize,
    /// Images per rank per step.
    pub batch_per_rank: usize,
    /// Images per step over all ranks.
    pub global_batch: usize,
    /// Warm-up steps.
    pub warmup_steps: u64,
    /// Timed steps.
    pub timed_steps: u64,
    /// Images per second, all ranks.
    pub img_per_s: f64,
    /// Images per second per device.
    pub img_per_s_per_device: f64,
    /// Timed step wall times.
    pub step_ms: StepStatsMs,
    /// Profiled phase times.
    pub breakdown_ms: Breakdown,
    /// all-reduce / phase total of the profiled steps.
    pub all_reduce_share: f64,
    /// Device memory (CUDA only).
    pub memory: Option<Memory>,
    /// FLOPs and MFU.
    pub flops: Flops,
    /// Final loss (sanity: finite).
    pub last_loss: f64,
}

/// The device as the report names it (`cpu`, `cuda:N`).
fn device_label(d: Device) -> String {
    match d {
        Device::Cpu => "cpu".into(),
        Device::Cuda(i) => format!("cuda:{i}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The median (the mean of the middle two for an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Moves a read-back window's step times (plus `extra` seconds waited
/// after it) into `walls`, each step at the window's mean.
fn spread(window: &mut Vec<f64>, walls: &mut Vec<f64>, extra: f64) {
    if window.is_empty() {
        return;
    }
    let each = (window.iter().sum::<f64>() + extra) / window.len() as f64;
    walls.extend(std::iter::repeat(each).take(window.len()));
    window.clear();
}

/// Waits for the device's queued work (CUDA; nothing on the CPU).
fn sync(d: Device) {
    if let Device::Cuda(i) = d {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Runs the benchmark on this rank (every rank of a data-parallel job calls
/// it; rank 0's report is the one to print); what it says as it goes
/// reaches `events` ([`RunEvent::Note`] and [`RunEvent::Warning`]).
pub fn run_rank(
    opts: &BenchOptions,
    sync_impl: Box<dyn GradSync>,
    events: Events,
) -> anyhow::Result<BenchReport> {
    let run = &opts.run;
    // Intra-op threads on the CPU chosen as a training run chooses them, and
    // said (#45 F7: torch's default of every core, on a loaded machine, made
    // a benchmark 7.3x slower than one thread, and two --compare runs gave
    // 0.26x and 0.51x).
    if run.device == Device::Cpu {
        let (cores, load) = crate::train::threads::host();
        let omp = std::env::var(crate::env_vars::OMP_NUM_THREADS).ok();
        let t = crate::train::threads::choose(omp.as_deref(), cores, load);
        tch::set_num_threads(t.count as i32);
        events(&RunEvent::Note(format!(
            "benchmark on cpu with {} thread{}: {}",
            t.count,
            if t.count == 1 { "" } else { "s" },
            t.why
        )));
    }
    let backend = sync_backend_label(sync_impl.as_ref(), run.device);
    // The session of a run, without its output directory (a benchmark writes
    // nothing) or a checkpoint; the GPU's memory is read before the model.
    if std::env::var_os(crate::env_vars::IMGCTL_PROFILE_TRACE).is_some() {
        crate::sys::torch_ext::quiet_kineto_for_cpu(run.device.is_cuda());
    }
    let (session, gpu) = session::start(run, false, None, sync_impl, || Gpu::open(run.device))?;
    let mut trainer = session.trainer;
    trainer.groupnorm.announce(events);
    let mut loader = session::start_loader(&trainer, Arc::new(session.data));
    let mut step = |trainer: &mut Trainer| bench_step(&mut loader, trainer, events);

    let timed = timed_steps(opts, &mut trainer, &mut step, &gpu)?;
    let comparison = checkpointing_comparison(opts, &mut trainer, &mut step, events)?;
    let profiled = profiled_steps(opts.profile_steps, &mut trainer, &mut step)?;
    // On demand, a Chrome trace of a few more steps (not timed above).
    trace_if_asked(run.device, &mut trainer, &mut step, events)?;
    drop(loader);
    report(opts, &trainer, &gpu, backend, timed, comparison, profiled)
}

/// A benchmark step ([`bench_step`] over this rank's loader): the seconds
/// waited for the batch, and the step's stats.
type Step<'a> = dyn FnMut(&mut Trainer) -> anyhow::Result<(f64, trainer::StepStats)> + 'a;

/// One training step exactly as a run takes it, on the next batch of
/// `loader`: the seconds waited for the batch, and the step's stats (a
/// fall-back to the slower AdamW is said to `events`, as a run says it).
fn bench_step(
    loader: &mut Loader,
    trainer: &mut Trainer,
    events: Events,
) -> anyhow::Result<(f64, trainer::StepStats)> {
    let t = Instant::now();
    let batch = loader
        .next_batch()
        .ok_or_else(|| anyhow::anyhow!("a data loader thread stopped unexpectedly"))?;
    let data_s = t.elapsed().as_secs_f64();
    let stats = trainer.train_step(&batch)?;
    // The earlier steps a read resolved: the benchmark times steps, and the
    // finite check ran in the read.
    trainer.take_resolved();
    if stats.fell_back {
        events(&RunEvent::Warning(format!(
            "{} (the figures below are of that update)",
            trainer.fell_back_warning()
        )));
    }
    Ok((data_s, stats))
}

/// The benchmarked GPU's CUDA runtime, and the memory in use on it (used,
/// total) before the model is built; both `None` on the CPU.
struct Gpu {
    /// The CUDA runtime, its current device the benchmarked one.
    rt: Option<CudaRuntime>,
    /// Used and total bytes before the model.
    baseline: Option<(u64, u64)>,
}

impl Gpu {
    /// Locates the CUDA runtime of `device` and reads the memory in use.
    fn open(device: Device) -> anyhow::Result<Self> {
        let rt = match device {
            Device::Cuda(i) => {
                let rt = CudaRuntime::locate()?;
                // cudaMemGetInfo reads the calling thread's current device, which
                // torch leaves at 0 (its device guards restore it after each op):
                // make it the benchmarked one, or `--device cuda:1` reports GPU 0.
                rt.set_device(i)?;
                Some(rt)
            }
            _ => None,
        };
        let baseline = rt.as_ref().map(used_memory).transpose()?;
        Ok(Self { rt, baseline })
    }
}

/// The device's used (total − free) and total bytes (cudaMemGetInfo).
fn used_memory(rt: &CudaRuntime) -> anyhow::Result<(u64, u64)> {
    rt.mem_get_info().map(|(free, total)| (total - free, total))
}

/// What the warm-up and timed steps measured.
struct Timed {
    /// Wall seconds of each timed step.
    walls: Vec<f64>,
    /// Seconds of all the timed steps, synchronised at both ends.
    elapsed: f64,
    /// Peak device memory in use after a timed step (cudaMemGetInfo).
    peak_used: u64,
    /// torch's allocator peaks at the end of the timed steps (CUDA).
    torch_peaks: Option<crate::sys::torch_ext::AllocatorStats>,
    /// The timed steps' memory over the model's.
    step_memory: Option<StepMemory>,
    /// The loss of the last timed step (NaN for none).
    last_loss: f64,
}

/// The warm-up steps, then the timed steps run exactly as in training, with
/// the device memory sampled after each and their own memory peaks.
fn timed_steps(
    opts: &BenchOptions,
    trainer: &mut Trainer,
    step: &mut Step<'_>,
    gpu: &Gpu,
) -> anyhow::Result<Timed> {
    let device = opts.run.device;
    for _ in 0..opts.warmup {
        step(trainer)?;
    }
    sync(device);
    // The timed steps' own peaks on CUDA, as the PyTorch reference resets
    // them; the host's come from steps of their own ([`host_step_memory`]).
    let probe = MemProbe::of(device);
    let before_steps = match probe {
        MemProbe::Cuda(_) => probe.start(),
        MemProbe::Host => None,
    };
    let mut walls = Vec::with_capacity(opts.steps as usize);
    let mut peak_used = gpu.baseline.map_or(0, |b| b.0);
    let mut last_loss = f64::NAN;
    // Steps since the last read-back: the host waits for all of them at the
    // read (the trainer's `--read-every`), so each gets the window's mean.
    let mut window: Vec<f64> = Vec::new();
    let t0 = Instant::now();
    for _ in 0..opts.steps {
        let t = Instant::now();
        let (_, s) = step(trainer)?;
        window.push(t.elapsed().as_secs_f64());
        if !s.deferred {
            last_loss = s.loss;
            spread(&mut window, &mut walls, 0.0);
        }
        if let Some(rt) = &gpu.rt {
            peak_used = peak_used.max(used_memory(rt)?.0);
        }
    }
    let t = Instant::now();
    sync(device);
    trainer.flush_pending()?;
    spread(&mut window, &mut walls, t.elapsed().as_secs_f64());
    if let Some(r) = trainer.take_resolved().last() {
        last_loss = r.loss;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let torch_peaks = match device {
        Device::Cuda(i) => crate::sys::torch_ext::cuda_allocator_stats(i, false)
            .ok()
            .flatten(),
        _ => None,
    };
    let step_memory = match probe {
        MemProbe::Host => host_step_memory(trainer, step, opts.run.config.training.batch_size)?,
        MemProbe::Cuda(_) => probe.step_memory(before_steps, opts.run.config.training.batch_size),
    };
    Ok(Timed {
        walls,
        elapsed,
        peak_used,
        torch_peaks,
        step_memory,
        last_loss,
    })
}

/// The host memory of a CPU step, from steps of its own after the timed
/// ones: glibc's mmap threshold fixed ([`host_memory::exact_accounting`]) so
/// freed tensors leave the RSS, one step to settle the heap, one measured.
/// Fixed during the timed steps, it mapped and faulted in every large tensor
/// anew each step: 1.42× their time (median of 4 interleaved pairs,
/// `bench/results/2026-12-03-cpu-benchmark-memory-accounting.md`).
fn host_step_memory(
    trainer: &mut Trainer,
    step: &mut Step<'_>,
    batch: usize,
) -> anyhow::Result<Option<StepMemory>> {
    host_memory::exact_accounting();
    step(trainer)?;
    let probe = MemProbe::Host;
    let before = probe.start();
    step(trainer)?;
    Ok(probe.step_memory(before, batch))
}

/// With `--gradient-checkpointing`: its rounds against the same steps
/// without it ([`checkpointing::compare`]; rank 0 says so); `None` otherwise.
fn checkpointing_comparison(
    opts: &BenchOptions,
    trainer: &mut Trainer,
    step: &mut Step<'_>,
    events: Events,
) -> anyhow::Result<Option<checkpointing::Comparison>> {
    let tr = &opts.run.config.training;
    if !tr.gradient_checkpointing {
        return Ok(None);
    }
    let setup = checkpointing::Setup {
        device: opts.run.device,
        global_batch: tr.batch_size * trainer.world_size(),
        batch_per_rank: tr.batch_size,
        steps_per_round: checkpointing::steps_per_round(opts.steps),
    };
    if trainer.rank() == 0 {
        events(&RunEvent::Note(format!(
            "benchmark: gradient checkpointing off against on, {} rounds of {} timed steps each",
            checkpointing::ROUNDS,
            setup.steps_per_round
        )));
    }
    Ok(Some(checkpointing::compare(trainer, step, setup)?))
}

/// The FLOPs of `per_device` images per second per device, and the MFU
/// against the datasheet peak of `device_name` in `precision` where imgctl
/// knows one (a note says why not otherwise).
fn flops(
    device: Device,
    device_name: &str,
    precision: Precision,
    per_device: f64,
    flops_per_image: f64,
) -> Flops {
    let achieved = per_device * flops_per_image / 1e12;
    match (device, peak::lookup(device_name)) {
        (Device::Cuda(_), Some(p)) => {
            let (peak, kind) = peak::peak_for(p, precision);
            Flops {
                train_flops_per_image: flops_per_image,
                achieved_tflops_per_device: achieved,
                peak_tflops: Some(peak),
                peak_kind: Some(kind.into()),
                peak_source: Some(p.source.into()),
                mfu: Some(achieved / peak),
                mfu_note: None,
            }
        }
        (Device::Cuda(_), None) => Flops {
            train_flops_per_image: flops_per_image,
            achieved_tflops_per_device: achieved,
            peak_tflops: None,
            peak_kind: None,
            peak_source: None,
            mfu: None,
            mfu_note: Some(format!(
                "no datasheet peak for {device_name} in imgctl's table"
            )),
        },
        _ => Flops {
            train_flops_per_image: flops_per_image,
            achieved_tflops_per_device: achieved,
            peak_tflops: None,
            peak_kind: None,
            peak_source: None,
            mfu: None,
            mfu_note: Some("n/a on the CPU (no datasheet peak)".into()),
        },
    }
}

/// This rank's [`BenchReport`] from what its steps measured.
fn report(
    opts: &BenchOptions,
    trainer: &Trainer,
    gpu: &Gpu,
    backend: String,
    timed: Timed,
    comparison: Option<checkpointing::Comparison>,
    profiled: Profiled,
) -> anyhow::Result<BenchReport> {
    let run = &opts.run;
    let device = run.device;
    let cfg = &run.config;
    let tr = &cfg.training;
    let world = trainer.world_size();
    let sync_stats = trainer.sync_stats();
    let breakdown = profiled.breakdown;
    let global_batch = tr.batch_size * world;
    let img_per_s = if timed.elapsed > 0.0 {
        (global_batch as f64 * opts.steps as f64) / timed.elapsed
    } else {
        0.0
    };
    let per_device = img_per_s / world as f64;
    let device_name = match (&gpu.rt, device) {
        (Some(rt), Device::Cuda(i)) => rt.device_name(i).unwrap_or_else(|_| "unknown GPU".into()),
        _ => "cpu".into(),
    };
    let flops = flops(
        device,
        &device_name,
        run.precision,
        per_device,
        cfg.model.train_flops_per_image(),
    );
    let torch_peaks = timed.torch_peaks;
    let memory = match (gpu.baseline, &gpu.rt) {
        (Some((base, total)), Some(_)) => Some(Memory {
            method: "cudaMemGetInfo (total - free) sampled after every timed step; includes the CUDA context and torch's caching-allocator reserve".into(),
            peak_used_bytes: timed.peak_used,
            baseline_used_bytes: base,
            total_bytes: total,
            peak_allocated_bytes: torch_peaks.map(|t| t.peak_allocated_bytes),
            peak_reserved_bytes: torch_peaks.map(|t| t.peak_reserved_bytes),
        }),
        _ => None,
    };
    Ok(BenchReport {
        schema_version: SCHEMA_VERSION,
        kind: "imgctl.train_benchmark".into(),
        preset: cfg.preset.name().into(),
        params: trainer.param_count(),
        image_size: cfg.image_size()?,
        precision: run.precision.name().into(),
        grad_reduce: match run.precision {
            Precision::Bf16 => tr.grad_reduce.name(),
            _ => "fp32",
        }
        .into(),
        all_reduce_bytes_per_step: trainer.grad_sync_bytes(),
        grad_overlap: sync_stats.is_some_and(|s| s.overlapped),
        buckets_per_step: sync_stats
            .filter(|s| s.calls > 0)
            .map_or(0.0, |s| s.buckets as f64 / s.calls as f64),
        buckets_during_backward: sync_stats
            .filter(|s| s.buckets > 0 && s.overlapped)
            .map_or(0.0, |s| s.buckets_during_backward as f64 / s.buckets as f64),
        channels_last: tr.channels_last,
        groupnorm: trainer.groupnorm.active.name().into(),
        groupnorm_self_check: trainer.groupnorm.self_check.clone(),
        groupnorm_fallback: trainer.groupnorm.fallback.clone(),
        groupnorm_calls: crate::train::model::layers::GroupNorm::fused_calls(),
        attention_backend: crate::train::model::blocks::sdpa_backends(),
        read_every: trainer.read_every(),
        gradient_checkpointing: tr.gradient_checkpointing,
        step_memory: timed.step_memory,
        checkpointing_comparison: comparison,
        cudnn_benchmark: device.is_cuda(),
        device: device_label(device),
        device_name,
        backend,
        world_size: world,
        batch_per_rank: tr.batch_size,
        global_batch,
        warmup_steps: opts.warmup,
        timed_steps: opts.steps,
        img_per_s,
        img_per_s_per_device: per_device,
        step_ms: StepStatsMs::of(&timed.walls),
        all_reduce_share: if breakdown.total > 0.0 {
            breakdown.all_reduce / breakdown.total
        } else {
            0.0
        },
        breakdown_ms: breakdown,
        memory,
        flops,
        last_loss: profiled.last_loss.unwrap_or(timed.last_loss),
    })
}

/// The gradient sync's backend as the report names it: `single` for one
/// rank, `nccl` between GPUs, `cpu` between CPU ranks.
fn sync_backend_label(s: &dyn GradSync, device: Device) -> String {
    match (s.world_size(), device) {
        (1, _) => "single".into(),
        (_, Device::Cuda(_)) => "nccl".into(),
        _ => "cpu".into(),
    }
}

/// Default warm-up and timed steps for a device: GPUs need more warm-up
/// (cuDNN autotuning, allocator growth); CPU steps are slow.
pub fn default_steps(device: Device) -> (u64, u64) {
    match device {
        Device::Cuda(_) => (10, 50),
        _ => (2, 10),
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
