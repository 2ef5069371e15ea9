//! The training step and the training run: model and optimizer state on one
//! device, the step (forward, loss, backward, gradient sync, clipping, AdamW,
//! EMA), and the loop around it with checkpoints, metrics, sample grids,
//! progress, Ctrl-C and the NaN guard.
//!
//! Data parallelism plugs in through [`GradSync`]: [`Trainer::new`] describes
//! the flat gradient buffer to it once ([`GradSync::prepare`]), the loop calls
//! [`GradSync::broadcast_params`] once before the first step and hands every
//! backward pass to [`GradSync::backward_and_sync`], which averages the flat
//! gradients across ranks during backward (overlapped, as DDP) or after it. Each
//! rank reads its own block of every global batch ([`super::data`]); only rank
//! 0 writes files or prints. Owns the orchestration; the model, the schedule,
//! the optimizer math and the file formats live in their own modules.
//!
//! Precision: fp32 runs everything in fp32. fp16 wraps the forward pass in
//! `tch::autocast` (CUDA only) over fp32 weights, with [`GradScaler`]
//! loss scaling. bf16 cannot use autocast (tch 0.20 toggles fp16 autocast
//! only), so the model runs wholly in bf16: a second VarStore holds bf16
//! weights whose gradients land in a flat bf16 buffer; the gradients are cast
//! to fp32, clipped and applied by AdamW to fp32 master weights (and the fp32
//! EMA), and the master weights are cast back into the bf16 copy after every
//! update. Across ranks the bf16 gradients are cast to fp32 before the
//! all-reduce by default (`--grad-reduce`, [`GradReduce`]). GroupNorm,
//! softmax and the loss accumulate in fp32 inside libtorch's
//! kernels; checkpoints always hold the fp32 master weights.
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tch::nn::VarStore;
use tch::{Device, Kind, Reduction, Tensor};

use super::checkpoint::{self, DataSource, State};
use super::config::{GradReduce, Precision, TrainConfig};
use super::data::{step_torch_seed, Dataset, Loader, Source, StreamSpec};
use super::ema::Ema;
use super::flat::{FlatEntry, FlatLayout};
use super::images;
use super::metrics::{MetricsWriter, StepRecord};
use super::model::{weights, UNet2DModel};
use super::optim::{clip_divisor, lr_at, AdamW, GradScaler};
use super::schedule::{DdpmSchedule, Sampler};
use super::space;
use crate::output::printer;
use crate::CliError;

/// Version of the summary JSON.
pub const SUMMARY_SCHEMA_VERSION: u32 = 1;

/// fp16 steps skipped in a row before the run is declared diverged: at a
/// back-off of 0.5 per skip, 64 skips take the initial 2^16 scale to 2^-48.
const MAX_CONSECUTIVE_SKIPS: u64 = 64;

/// The collective operations data-parallel training needs. The single-process
/// implementation ([`SingleProcess`]) does nothing.
pub trait GradSync {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Makes every rank's flat parameters equal to rank 0's (called once, before training).
    fn broadcast_params(&mut self, flat_params: &Tensor) -> anyhow::Result<()>;
    /// Averages the flat gradient buffer across ranks, in place (called after
    /// every backward pass, before clipping and the update).
    fn sync_grads(&mut self, flat_grads: &Tensor) -> anyhow::Result<()>;
    /// Called once by [`Trainer::new`] with the layout of the flat gradients;
    /// a sync that overlaps its all-reduce with backward sets its gradient
    /// hooks here.
    fn prepare(&mut self, _layout: GradLayout) -> anyhow::Result<()> {
        Ok(())
    }
    /// Runs `backward`, then averages the gradients across ranks: in
    /// `reduce_in` when given (each rank's `grads` cast into it first, e.g.
    /// bf16 into fp32), else in `grads` itself. The default does exactly that
    /// in sequence; [`crate::train::parallel::DataParallel`] overlaps the two.
    fn backward_and_sync(
        &mut self,
        backward: &mut dyn FnMut() -> anyhow::Result<()>,
        grads: &Tensor,
        reduce_in: Option<&Tensor>,
    ) -> anyhow::Result<()> {
        backward_then_sync(self, backward, grads, reduce_in)
    }
    /// Gradient-sync statistics so far (none for a single process).
    fn stats(&self) -> Option<crate::train::parallel::SyncStats> {
        None
    }
    /// Averages host scalars across ranks in place (the logged loss).
    fn mean_scalars(&mut self, _values: &mut [f64]) -> anyhow::Result<()> {
        Ok(())
    }
    /// Whether any rank's `local` flag is set (called at the top of every
    /// step with the Ctrl-C flag, so all ranks stop at the same step).
    fn any_rank(&mut self, local: bool) -> anyhow::Result<bool> {
        Ok(local)
    }
}

/// [`GradSync::backward_and_sync`] without overlap: `backward`, then (after
/// casting `grads` into `reduce_in`, when given) [`GradSync::sync_grads`].
pub fn backward_then_sync<S: GradSync + ?Sized>(
    sync: &mut S,
    backward: &mut dyn FnMut() -> anyhow::Result<()>,
    grads: &Tensor,
    reduce_in: Option<&Tensor>,
) -> anyhow::Result<()> {
    backward()?;
    match reduce_in {
        Some(r) => {
            tch::no_grad(|| r.shallow_clone().copy_(grads));
            sync.sync_grads(r)
        }
        None => sync.sync_grads(grads),
    }
}

/// The flat gradients as the trainer lays them out (see [`GradSync::prepare`]).
pub struct GradLayout {
    /// Every trainable parameter whose `.grad` is a view of the flat gradient
    /// buffer, with its place there, in layout order.
    pub params: Vec<(FlatEntry, Tensor)>,
    /// Bytes per element of the buffer the gradients are averaged in.
    pub reduce_elem_bytes: usize,
    /// Gradient bucket cap in bytes (`training.bucket_cap_mb`).
    pub bucket_cap_bytes: usize,
    /// Overlap the all-reduce with backward (`training.overlap_grad_reduce`).
    pub overlap: bool,
}

impl std::fmt::Debug for GradLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradLayout")
            .field("params", &self.params.len())
            .field("reduce_elem_bytes", &self.reduce_elem_bytes)
            .field("bucket_cap_bytes", &self.bucket_cap_bytes)
            .field("overlap", &self.overlap)
            .finish()
    }
}

/// bf16 gradients are averaged in fp32 unless asked otherwise (see
/// [`GradReduce`]); a single process needs no cast before the update's.
fn casts_grads_before_sync(precision: Precision, config: &TrainConfig, world_size: usize) -> bool {
    precision == Precision::Bf16
        && config.training.grad_reduce == GradReduce::Fp32
        && world_size > 1
}

/// Moves a host batch tensor to `device`. On CUDA the copy goes through
/// pinned memory and does not block the host (PyTorch's
/// `DataLoader(pin_memory=True)` with `.to(device, non_blocking=True)`): it
/// queues behind the previous step's optimizer kernels instead of waiting for
/// them, so the GPU does not idle while the host stages the batch. torch's
/// pinned-memory cache keeps the staging buffer until the copy has run. If
/// pinning fails, the plain blocking copy is used.
fn batch_to_device(t: Tensor, device: Device) -> Tensor {
    if device.is_cuda() {
        let pinned = crate::sys::torch_ext::pin_memory(&t)
            .and_then(|p| Ok(p.f_to_device_(device, p.kind(), true, false)?));
        if let Ok(on_device) = pinned {
            return on_device;
        }
    }
    t.to_device(device)
}

/// Seconds since `t` (restarted), after waiting for the device when `profile`.
fn mark(profile: bool, device: Device, t: &mut Instant) -> f64 {
    if profile {
        sync_device(device);
    }
    let dt = t.elapsed().as_secs_f64();
    *t = Instant::now();
    dt
}

/// One process, no communication.
#[derive(Debug, Default, Clone, Copy)]
pub struct SingleProcess;

impl GradSync for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn broadcast_params(&mut self, _flat_params: &Tensor) -> anyhow::Result<()> {
        Ok(())
    }
    fn sync_grads(&mut self, _flat_grads: &Tensor) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Seconds spent in each phase of a step. Without `profile` the phases are
/// timed on the host only (kernels are asynchronous on CUDA, so most time
/// shows up where the host waits: the loss read-back after the optimizer).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PhaseTimes {
    /// Host-to-device copies and the forward pass with the loss.
    pub forward: f64,
    /// The backward pass.
    pub backward: f64,
    /// [`GradSync::sync_grads`].
    pub grad_sync: f64,
    /// Unscaling, clipping, the loss read-back, AdamW and EMA.
    pub optimizer: f64,
}

/// What one step produced.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StepStats {
    /// Step number (1-based).
    pub step: u64,
    /// Loss (mean over ranks).
    pub loss: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Loss scale used (1 outside fp16).
    pub loss_scale: f64,
    /// The update was skipped (fp16 overflow).
    pub skipped: bool,
    /// Phase timings.
    pub times: PhaseTimes,
}

/// Ways a step can stop the run.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The loss or the gradients were NaN or infinite (fp32/bf16), or fp16
    /// kept overflowing.
    #[error("the loss became {what} at step {step} (loss {loss}, gradient norm {grad_norm}, {precision}); training stopped")]
    NonFinite {
        /// The step that produced it (1-based).
        step: u64,
        /// "NaN" or "infinite".
        what: &'static str,
        /// The loss read back.
        loss: f64,
        /// The gradient norm read back.
        grad_norm: f64,
        /// The run's precision.
        precision: &'static str,
    },
}

/// Model, optimizer and EMA state of a run on one device.
pub struct Trainer {
    /// The run configuration.
    pub config: TrainConfig,
    /// The device.
    pub device: Device,
    /// The precision.
    pub precision: Precision,
    master_vs: VarStore,
    model: UNet2DModel,
    compute: Option<(VarStore, UNet2DModel)>,
    layout: FlatLayout,
    master: Tensor,
    compute_flat: Option<Tensor>,
    grads: Tensor,
    /// fp32 buffer the bf16 gradients are averaged in (`grad_reduce: fp32`
    /// with several ranks); kept for the whole run so the overlapped
    /// all-reduce never sees it freed.
    reduce_buf: Option<Tensor>,
    opt: AdamW,
    ema: Ema,
    scaler: Option<GradScaler>,
    schedule: DdpmSchedule,
    sync: Box<dyn GradSync>,
    consecutive_skips: u64,
    /// Optimizer steps completed (skipped fp16 steps included).
    pub step: u64,
    /// Global samples consumed.
    pub samples_seen: u64,
    /// Synchronise the device between phases so [`PhaseTimes`] is exact.
    pub profile: bool,
    /// Test knob: make the loss NaN at this step.
    pub inject_nan_at: Option<u64>,
    /// The training data, recorded in checkpoints so `--resume` reuses it.
    pub data: Option<DataSource>,
}

/// Checks that `device` can run `precision` (exit 2 before training if not).
pub fn check_precision(device: Device, precision: Precision) -> anyhow::Result<()> {
    match (device, precision) {
        (_, Precision::Fp32) => Ok(()),
        (Device::Cpu, Precision::Fp16) => Err(CliError::usage(
            "fp16 needs a CUDA device: tch's autocast is CUDA-only, so fp16 on the CPU would silently train in fp32",
        )
        .with_hint("use --precision fp32 or bf16 on the CPU, or --device cuda")
        .into()),
        (d, p) => {
            let kind = if p == Precision::Bf16 { Kind::BFloat16 } else { Kind::Half };
            let probe = Tensor::f_ones([8, 8], (kind, d))
                .and_then(|a| a.f_matmul(&a))
                .and_then(|m| m.f_sum(Kind::Float))
                .and_then(f64::try_from);
            match probe {
                Ok(512.0) => Ok(()),
                other => Err(CliError::usage(format!(
                    "{} is not supported on {d:?} ({})",
                    p.name(),
                    match other {
                        Ok(v) => format!("a test matmul returned {v}"),
                        Err(e) => e.to_string().lines().next().unwrap_or_default().to_string(),
                    }
                ))
                .with_hint("use --precision fp32")
                .into()),
            }
        }
    }
}

/// The error for a training step that panicked inside tch: libtorch's own
/// message (`CUDA out of memory. Tried to allocate …`) without tch's
/// `called Result::unwrap() on an Err value: Torch("…")` wrapping.
pub fn step_panic_error(
    step: u64,
    device: Device,
    panic: &(dyn std::any::Any + Send),
) -> anyhow::Error {
    let text = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    let inner = text
        .split_once("Torch(\"")
        .map(|(_, rest)| rest.trim_end_matches("\")").replace("\\n", "\n"))
        .unwrap_or(text);
    let first = inner.lines().next().unwrap_or_default().trim().to_string();
    let hint = if first.contains("out of memory") {
        "lower --batch-size, or use --precision bf16"
    } else if matches!(device, Device::Cuda(_)) {
        "check the GPU with `imgctl verify --level full`, and the kernel log (dmesg) for Xid errors"
    } else {
        "rerun with RUST_BACKTRACE=1 and report the message"
    };
    CliError::failure(format!("training step {step} failed in libtorch: {first}"))
        .with_hint(hint)
        .into()
}

fn sync_device(device: Device) {
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

impl Trainer {
    /// Builds the model (seeded init on the CPU, then moved to `device`), the
    /// flat buffers, AdamW, the EMA and the loss scaler. `init_from` loads a
    /// diffusers state dict strictly (exit 2 listing mismatched keys).
    pub fn new(
        config: TrainConfig,
        device: Device,
        precision: Precision,
        init_from: Option<&Path>,
        mut sync: Box<dyn GradSync>,
    ) -> anyhow::Result<Self> {
        config.validate()?;
        tch::manual_seed(config.training.seed as i64);
        let mut master_vs = VarStore::new(Device::Cpu);
        let mut model = UNet2DModel::try_new(&master_vs.root(), &config.model)?;
        model.set_channels_last(config.training.channels_last);
        model.set_gradient_checkpointing(config.training.gradient_checkpointing);
        if device.is_cuda() {
            // Fixed shapes every step: cuDNN's autotuner pays off after the
            // first step (torch.backends.cudnn.benchmark = True).
            tch::Cuda::cudnn_set_benchmark(true);
        }
        if let Some(path) = init_from {
            weights::load_diffusers_state_dict(&master_vs, path)?;
        }
        master_vs.set_device(device);
        let layout = FlatLayout::of(&master_vs);
        let master = layout.bind_params(&master_vs, Kind::Float);
        let (compute, compute_flat, grads) = if precision == Precision::Bf16 {
            let mut vs = VarStore::new(device);
            let mut m = UNet2DModel::try_new(&vs.root(), &config.model)?;
            m.set_channels_last(config.training.channels_last);
            m.set_gradient_checkpointing(config.training.gradient_checkpointing);
            vs.bfloat16();
            let flat = layout.bind_params(&vs, Kind::BFloat16);
            tch::no_grad(|| flat.shallow_clone().copy_(&master));
            let grads = layout.bind_grads(&vs, Kind::BFloat16);
            (Some((vs, m)), Some(flat), grads)
        } else {
            let grads = layout.bind_grads(&master_vs, Kind::Float);
            (None, None, grads)
        };
        let reduce_buf = casts_grads_before_sync(precision, &config, sync.world_size())
            .then(|| Tensor::zeros([layout.numel], (Kind::Float, device)));
        // The variables whose `.grad` are views of `grads`.
        let grad_vs = compute.as_ref().map_or(&master_vs, |(vs, _)| vs);
        sync.prepare(GradLayout {
            params: layout.with_vars(grad_vs),
            reduce_elem_bytes: reduce_buf
                .as_ref()
                .unwrap_or(&grads)
                .kind()
                .elt_size_in_bytes(),
            bucket_cap_bytes: config.training.bucket_cap_bytes(),
            overlap: config.training.overlap_grad_reduce,
        })?;
        let opt = AdamW::new(config.training.adam, &master);
        let ema = Ema::new(config.training.ema, &master);
        let scaler = (precision == Precision::Fp16).then(GradScaler::default);
        Ok(Self {
            schedule: DdpmSchedule::new(device),
            config,
            device,
            precision,
            master_vs,
            model,
            compute,
            layout,
            master,
            compute_flat,
            grads,
            reduce_buf,
            opt,
            ema,
            scaler,
            sync,
            consecutive_skips: 0,
            step: 0,
            samples_seen: 0,
            profile: false,
            inject_nan_at: None,
            data: None,
        })
    }

    /// Number of trainable parameters.
    pub fn param_count(&self) -> i64 {
        self.layout.params
    }

    /// The flat fp32 master weights (layout: [`Trainer::layout`]).
    pub fn master_params(&self) -> &Tensor {
        &self.master
    }

    /// The flat EMA weights.
    pub fn ema_params(&self) -> &Tensor {
        &self.ema.shadow
    }

    /// The flat buffers' layout.
    pub fn layout(&self) -> &FlatLayout {
        &self.layout
    }

    /// The rank of this process.
    pub fn rank(&self) -> usize {
        self.sync.rank()
    }

    /// The number of ranks.
    pub fn world_size(&self) -> usize {
        self.sync.world_size()
    }

    /// The fp32 VarStore whose variables are views of the master weights.
    pub fn master_var_store(&self) -> &VarStore {
        &self.master_vs
    }

    /// Broadcasts rank 0's weights, EMA and optimizer moments to every rank.
    pub fn broadcast(&mut self) -> anyhow::Result<()> {
        self.sync.broadcast_params(&self.master)?;
        self.sync.broadcast_params(&self.ema.shadow)?;
        self.sync.broadcast_params(&self.opt.exp_avg)?;
        self.sync.broadcast_params(&self.opt.exp_avg_sq)?;
        self.refresh_compute();
        Ok(())
    }

    fn refresh_compute(&mut self) {
        if let Some(flat) = &self.compute_flat {
            tch::no_grad(|| flat.shallow_clone().copy_(&self.master));
        }
    }

    /// The gradient sync's statistics so far (none for a single process).
    pub fn sync_stats(&self) -> Option<crate::train::parallel::SyncStats> {
        self.sync.stats()
    }

    /// Averages `values` over the ranks, in place (unchanged for one process).
    pub fn sync_mean_scalars(&mut self, values: &mut [f64]) -> anyhow::Result<()> {
        self.sync.mean_scalars(values)
    }

    /// Bytes each rank all-reduces per step: the flat gradients in the
    /// dtype they are reduced in (0 for a single process).
    pub fn grad_sync_bytes(&self) -> usize {
        if self.sync.world_size() <= 1 {
            return 0;
        }
        let reduced = self.reduce_buf.as_ref().unwrap_or(&self.grads);
        self.layout.numel as usize * reduced.kind().elt_size_in_bytes()
    }

    fn compute_model(&self) -> &UNet2DModel {
        self.compute.as_ref().map(|(_, m)| m).unwrap_or(&self.model)
    }

    fn mark(&self, t: &mut Instant) -> f64 {
        mark(self.profile, self.device, t)
    }

    /// One optimizer step on `batch` (this rank's block of the global batch).
    ///
    /// tch's non-`f_` calls unwrap libtorch's errors (a CUDA out-of-memory, a
    /// failed kernel, a cuDNN error), so they arrive as panics; they end the
    /// step as an error (exit 1 with libtorch's message) instead of aborting
    /// the process with a Rust backtrace.
    pub fn train_step(&mut self, batch: &super::data::Batch) -> anyhow::Result<StepStats> {
        let step = self.step + 1;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.train_step_inner(batch)
        }))
        .unwrap_or_else(|panic| Err(step_panic_error(step, self.device, panic.as_ref())))
    }

    fn train_step_inner(&mut self, batch: &super::data::Batch) -> anyhow::Result<StepStats> {
        let mut times = PhaseTimes::default();
        let mut t = Instant::now();
        let b = batch.batch as i64;
        let s = batch.size as i64;
        let shape = [b, 3, s, s];
        let x0 = batch_to_device(Tensor::from_slice(&batch.images).view(shape), self.device);
        let noise = batch_to_device(Tensor::from_slice(&batch.noise).view(shape), self.device);
        let ts = batch_to_device(Tensor::from_slice(&batch.timesteps), self.device);
        let noisy = self.schedule.add_noise(&x0, &noise, &ts);
        let _ = self.grads.zero_();
        // What the forward pass draws (dropout) depends on the step alone, as
        // the batch does, so resuming replays it exactly.
        tch::manual_seed(step_torch_seed(
            self.config.training.seed,
            self.step + 1,
            self.sync.rank(),
        ));
        let pred = match self.precision {
            Precision::Fp16 => tch::autocast(true, || self.model.forward_t(&noisy, &ts, true)),
            _ => self.compute_model().forward_t(&noisy, &ts, true),
        };
        let mut loss = pred.to_kind(Kind::Float).mse_loss(&noise, Reduction::Mean);
        if self.inject_nan_at == Some(self.step + 1) {
            loss = loss.g_mul_scalar(f64::NAN);
        }
        let scale = self.scaler.map_or(1.0, |s| s.scale);
        times.forward = self.mark(&mut t);
        // Backward, with the gradient all-reduce during (overlapped) or after
        // it; `times.backward` ends when backward does, `grad_sync` is the
        // communication left after that.
        let (profile, device) = (self.profile, self.device);
        // A libtorch error in backward panics (as in forward) and is turned
        // into a one-line error by `train_step`.
        let mut backward = || -> anyhow::Result<()> {
            if scale != 1.0 {
                (&loss * scale).backward();
            } else {
                loss.backward();
            }
            times.backward = mark(profile, device, &mut t);
            Ok(())
        };
        self.sync
            .backward_and_sync(&mut backward, &self.grads, self.reduce_buf.as_ref())?;
        times.grad_sync = self.mark(&mut t);
        let g = match &self.reduce_buf {
            Some(r) => r.shallow_clone(),
            None if self.precision == Precision::Bf16 => self.grads.to_kind(Kind::Float),
            None => self.grads.shallow_clone(),
        };
        // Unscaling (fp16) and clipping happen inside the fused update.
        let (norm, divisor) = clip_divisor(&g, self.config.training.max_grad_norm, scale);
        // One device-to-host read for both values (a single synchronisation).
        let pair = Vec::<f64>::try_from(
            Tensor::stack(&[loss.detach(), norm], 0)
                .to_kind(Kind::Double)
                .to_device(Device::Cpu),
        )?;
        let mut host = [pair[0], pair[1]];
        let local_loss_finite = host[0].is_finite();
        self.sync.mean_scalars(&mut host[..1])?;
        let [loss_v, norm_v] = host;
        let tr = &self.config.training;
        let lr = lr_at(tr.lr, self.step, tr.effective_warmup(), tr.steps);
        let finite = local_loss_finite && loss_v.is_finite() && norm_v.is_finite();
        let mut skipped = false;
        if !finite {
            let is_fp16 = self.scaler.is_some();
            if is_fp16 && self.consecutive_skips < MAX_CONSECUTIVE_SKIPS {
                if let Some(s) = self.scaler.as_mut() {
                    s.update(true);
                }
                self.consecutive_skips += 1;
                skipped = true;
            } else {
                return Err(StepError::NonFinite {
                    step: self.step + 1,
                    what: if loss_v.is_nan() || norm_v.is_nan() {
                        "NaN"
                    } else {
                        "infinite"
                    },
                    loss: loss_v,
                    grad_norm: norm_v,
                    precision: self.precision.name(),
                }
                .into());
            }
        } else {
            if let Some(s) = self.scaler.as_mut() {
                s.update(false);
            }
            self.consecutive_skips = 0;
            let was_fused = self.opt.unfused_reason().is_none();
            self.opt.update(&mut self.master, &g, lr, Some(&divisor))?;
            if let (true, Some(why)) = (was_fused, self.opt.unfused_reason()) {
                printer().warn(format!(
                    "libtorch's fused AdamW failed ({why}); using the elementwise update, which is slower"
                ));
            }
            self.refresh_compute();
            self.ema.update(&self.master);
        }
        times.optimizer = self.mark(&mut t);
        self.step += 1;
        self.samples_seen += (batch.batch * self.sync.world_size()) as u64;
        Ok(StepStats {
            step: self.step,
            loss: loss_v,
            grad_norm: norm_v,
            lr,
            loss_scale: scale,
            skipped,
            times,
        })
    }

    /// Generates `n` images with the EMA weights (or the raw ones) through
    /// `steps` steps of `sampler`; the training weights are restored exactly.
    pub fn sample(
        &mut self,
        n: i64,
        steps: usize,
        sampler: Sampler,
        seed: u64,
        use_ema: bool,
    ) -> anyhow::Result<Tensor> {
        let target = self
            .compute_flat
            .as_ref()
            .unwrap_or(&self.master)
            .shallow_clone();
        let backup = use_ema.then(|| tch::no_grad(|| target.copy()));
        if use_ema {
            tch::no_grad(|| target.shallow_clone().copy_(&self.ema.shadow));
        }
        let size = self.config.image_size()? as i64;
        let c = self.config.model.in_channels;
        let fp16 = self.precision == Precision::Fp16;
        let model = self.compute_model();
        let result = self.schedule.sample(
            |x, t| {
                if fp16 {
                    tch::autocast(true, || model.forward(x, t))
                } else {
                    model.forward(x, t)
                }
            },
            n,
            [c, size, size],
            sampler,
            steps as i64,
            seed,
            self.device,
        );
        if let Some(backup) = backup {
            tch::no_grad(|| target.shallow_clone().copy_(&backup));
        }
        result
    }

    /// Writes a diffusers model folder (`config.json`,
    /// `diffusion_pytorch_model.safetensors`) with the EMA weights, as
    /// train_unconditional.py saves its final pipeline's UNet; the training
    /// weights are restored exactly afterwards.
    pub fn export_diffusers(&self, dir: &Path) -> anyhow::Result<()> {
        let backup = tch::no_grad(|| self.master.copy());
        tch::no_grad(|| self.master.shallow_clone().copy_(&self.ema.shadow));
        let result = weights::save_pretrained(&self.master_vs, &self.config.model, dir);
        tch::no_grad(|| self.master.shallow_clone().copy_(&backup));
        result
    }

    /// Writes a checkpoint of the current step under `out` atomically and
    /// prunes to `keep`. Returns its directory.
    pub fn save_checkpoint(
        &self,
        out: &Path,
        epoch: u64,
        last_loss: Option<f64>,
    ) -> anyhow::Result<PathBuf> {
        let state = State {
            schema_version: checkpoint::STATE_VERSION,
            step: self.step,
            epoch,
            samples_seen: self.samples_seen,
            seed: self.config.training.seed,
            optimizer_step: self.opt.step,
            ema_step: self.ema.step,
            scaler: self.scaler,
            world_size: self.sync.world_size(),
            batch_size: self.config.training.batch_size,
            precision: self.precision.name().to_string(),
            last_loss,
            config: self.config.clone(),
            data: self.data.clone(),
            written_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
        };
        let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
        let dir = checkpoint::write_atomic(out, self.step, |dir| {
            weights::save_safetensors(&self.master_vs, &dir.join(checkpoint::MODEL_FILE))?;
            weights::write_tensors(
                &dir.join(checkpoint::EMA_FILE),
                &self.layout.named_views(&self.ema.shadow),
                Some(meta.clone()),
            )?;
            let mut moments = Vec::with_capacity(2 * self.layout.entries.len());
            for (name, v) in self.layout.named_views(&self.opt.exp_avg) {
                moments.push((format!("exp_avg.{name}"), v));
            }
            for (name, v) in self.layout.named_views(&self.opt.exp_avg_sq) {
                moments.push((format!("exp_avg_sq.{name}"), v));
            }
            weights::write_tensors(&dir.join(checkpoint::OPTIMIZER_FILE), &moments, None)?;
            std::fs::write(
                dir.join(checkpoint::CONFIG_FILE),
                serde_json::to_string_pretty(&self.config.model.to_diffusers_json())?,
            )?;
            std::fs::write(
                dir.join(checkpoint::STATE_FILE),
                serde_json::to_string_pretty(&state)?,
            )?;
            Ok(())
        })
        .with_context(|| {
            format!(
                "writing the checkpoint of step {} under {}",
                self.step,
                out.display()
            )
        })?;
        checkpoint::prune(out, self.config.training.keep)?;
        Ok(dir)
    }

    /// Restores weights, EMA, optimizer moments, counters and the loss scale
    /// from a checkpoint directory. The model config must match.
    pub fn load_checkpoint(&mut self, dir: &Path) -> anyhow::Result<State> {
        let state = checkpoint::read_state(dir)?;
        if state.config.model != self.config.model {
            return Err(CliError::usage(format!(
                "the checkpoint {} was trained with a different model config",
                dir.display()
            ))
            .with_hint("resume with the same --preset / --config model section, or start a new --out directory")
            .into());
        }
        weights::load_diffusers_state_dict(&self.master_vs, &dir.join(checkpoint::MODEL_FILE))?;
        let ema = weights::read_tensors(&dir.join(checkpoint::EMA_FILE))?;
        let opt = weights::read_tensors(&dir.join(checkpoint::OPTIMIZER_FILE))?;
        let ema: std::collections::HashMap<String, Tensor> = ema.into_iter().collect();
        let opt: std::collections::HashMap<String, Tensor> = opt.into_iter().collect();
        tch::no_grad(|| -> anyhow::Result<()> {
            for e in &self.layout.entries {
                let find =
                    |map: &std::collections::HashMap<String, Tensor>, key: &str, file: &str| {
                        map.get(key).map(|t| t.shallow_clone()).ok_or_else(|| {
                            anyhow::Error::from(
                                CliError::usage(format!(
                                    "checkpoint {} lacks `{key}` in {file}",
                                    dir.display()
                                ))
                                .with_hint("the checkpoint is damaged or from another model"),
                            )
                        })
                    };
                let src = find(&ema, &e.name, checkpoint::EMA_FILE)?;
                self.layout
                    .view(&self.ema.shadow, e)
                    .copy_(&src.to_kind(Kind::Float).to_device(self.device));
                let m = find(
                    &opt,
                    &format!("exp_avg.{}", e.name),
                    checkpoint::OPTIMIZER_FILE,
                )?;
                self.layout
                    .view(&self.opt.exp_avg, e)
                    .copy_(&m.to_device(self.device));
                let v = find(
                    &opt,
                    &format!("exp_avg_sq.{}", e.name),
                    checkpoint::OPTIMIZER_FILE,
                )?;
                self.layout
                    .view(&self.opt.exp_avg_sq, e)
                    .copy_(&v.to_device(self.device));
            }
            Ok(())
        })?;
        self.opt.step = state.optimizer_step;
        self.ema.step = state.ema_step;
        if self.scaler.is_some() {
            self.scaler = Some(state.scaler.unwrap_or_default());
        }
        self.step = state.step;
        self.samples_seen = state.samples_seen;
        self.refresh_compute();
        Ok(state)
    }
}

/// The process-wide Ctrl-C flag; the handler is installed on first use.
pub fn interrupt_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        // The first Ctrl-C asks the loop to checkpoint and stop after the
        // current step; a second one ends the process at once.
        let handler = move || {
            if f.swap(true, Ordering::SeqCst) {
                eprintln!("second interrupt: exiting without a checkpoint");
                std::process::exit(130);
            }
        };
        if let Err(e) = ctrlc::set_handler(handler) {
            printer().warn(format!(
                "cannot install the Ctrl-C handler ({e}); Ctrl-C will not write a checkpoint"
            ));
        }
        flag
    })
    .clone()
}

/// Where training data comes from.
#[derive(Debug, Clone)]
pub enum DataChoice {
    /// The embedded synthetic dataset.
    Synthetic,
    /// A folder of PNG/JPEG images.
    Folder(PathBuf),
}

impl DataChoice {
    /// What a checkpoint records of this choice under `config`: the folder as
    /// an absolute path (so a resume from another directory finds it), or the
    /// synthetic set's size and seed.
    pub fn record(&self, config: &TrainConfig) -> DataSource {
        match self {
            Self::Synthetic => DataSource::Synthetic {
                images: config.training.synthetic_images,
                seed: config.training.seed,
            },
            Self::Folder(d) => DataSource::Folder {
                path: d.canonicalize().unwrap_or_else(|_| d.clone()),
            },
        }
    }
}

/// Everything a training run needs besides the config.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Model and training settings.
    pub config: TrainConfig,
    /// The device.
    pub device: Device,
    /// The precision (already checked against the device).
    pub precision: Precision,
    /// Output directory.
    pub out: PathBuf,
    /// Training data.
    pub data: DataChoice,
    /// diffusers state dict to start from.
    pub init_from: Option<PathBuf>,
    /// Checkpoint to resume from.
    pub resume: Option<PathBuf>,
    /// `--resume auto`: a checkpoint already at the final step is a finished
    /// run (a job requeued after its last checkpoint): its outputs are
    /// written again and nothing is trained, instead of exit 2.
    pub finished_ok: bool,
    /// Test knob: NaN loss at this step.
    pub inject_nan_at: Option<u64>,
    /// Test knob: behave as if Ctrl-C came right after this step.
    pub interrupt_after: Option<u64>,
    /// Why the precision is not the device's usual default, when it is not
    /// (printed once before training).
    pub precision_note: Option<String>,
}

/// Data facts for the summary.
#[derive(Debug, Clone, Serialize)]
pub struct DataSummary {
    /// `synthetic` or `folder`.
    pub source: String,
    /// The folder, if any.
    pub path: Option<PathBuf>,
    /// Images in one epoch.
    pub images: usize,
    /// Files skipped as unreadable (at scan time and during training).
    pub unreadable_files: usize,
    /// The first unreadable files with the reason.
    pub unreadable: Vec<UnreadableFile>,
}

/// The last sample grid of a run: how it was made, and the statistics that
/// tell learnt images from noise ([`images::ImageStats`]) for it and for the
/// training data (up to 64 of its first images).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SampleStats {
    /// Images in the grid.
    pub images: i64,
    /// DDIM steps.
    pub ddim_steps: usize,
    /// The grid's statistics.
    pub samples: images::ImageStats,
    /// The training data's.
    pub data: images::ImageStats,
}

/// The [`images::ImageStats`] of up to 64 of `data`'s first images (as the
/// model sees them before augmentation); `None` when one cannot be read.
fn data_stats(data: &Dataset, seed: u64) -> Option<images::ImageStats> {
    let n = data.len().min(64);
    let size = data.size as i64;
    let imgs: Vec<Tensor> = (0..n)
        .map(|i| {
            data.image(seed, i)
                .ok()
                .map(|v| Tensor::from_slice(&v).view([3, size, size]))
        })
        .collect::<Option<_>>()?;
    if imgs.is_empty() {
        return None;
    }
    images::ImageStats::of(&Tensor::stack(&imgs, 0)).ok()
}

/// One skipped file.
#[derive(Debug, Clone, Serialize)]
pub struct UnreadableFile {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub error: String,
}

/// The final report of a run (summary.json, `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct TrainSummary {
    /// Version of this layout.
    pub schema_version: u32,
    /// `completed`.
    pub status: String,
    /// The preset the config started from.
    pub preset: String,
    /// The device.
    pub device: String,
    /// The precision.
    pub precision: String,
    /// Ranks.
    pub world_size: usize,
    /// Images per rank per step.
    pub batch_size: usize,
    /// Trainable parameters.
    pub params: i64,
    /// The step the run started at (non-zero after --resume).
    pub start_step: u64,
    /// The last step completed.
    pub final_step: u64,
    /// Steps skipped for fp16 overflow.
    pub skipped_steps: u64,
    /// Loss of the first step of this process.
    pub first_loss: Option<f64>,
    /// Mean loss of the last (up to) 10 steps.
    pub final_loss: Option<f64>,
    /// Images per second over the run, all ranks, excluding the first step.
    pub img_per_s: Option<f64>,
    /// Training FLOPs per image (forward + backward, from the config).
    pub train_flops_per_image: f64,
    /// Device memory in use at the end of training (CUDA only).
    pub device_memory: Option<DeviceMemory>,
    /// The gradient all-reduce (data-parallel runs, one rank too; `null` for a
    /// single process).
    pub grad_sync: Option<crate::train::parallel::SyncStats>,
    /// Wall-clock seconds of the training loop.
    pub elapsed_s: f64,
    /// The data.
    pub data: DataSummary,
    /// The output directory.
    pub out_dir: PathBuf,
    /// The last checkpoint written.
    pub checkpoint: Option<PathBuf>,
    /// metrics.jsonl.
    pub metrics: PathBuf,
    /// The TensorBoard event file.
    pub tensorboard: PathBuf,
    /// Sample grids written.
    pub samples: Vec<PathBuf>,
    /// What the last grid shows, and how it compares with the training data.
    pub sample_stats: Option<SampleStats>,
    /// The final EMA weights as a diffusers model folder
    /// (`UNet2DModel.from_pretrained(path)`).
    pub diffusers_model: Option<PathBuf>,
}

/// Device memory of a training run: torch's caching-allocator peaks (what
/// `torch.cuda.max_memory_allocated`/`max_memory_reserved` report), and the
/// device's own count after training from `cudaMemGetInfo` (total − free: the
/// CUDA context plus the allocator's reserve).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DeviceMemory {
    /// The most bytes torch's allocator had in tensors at once; `None` where
    /// this libtorch cannot say (before torch 2.9).
    pub peak_allocated_bytes: Option<u64>,
    /// The most bytes torch's allocator held from the device at once.
    pub peak_reserved_bytes: Option<u64>,
    /// Bytes in use on the device after training (cudaMemGetInfo).
    pub used_bytes: u64,
    /// The device's total memory.
    pub total_bytes: u64,
}

/// Reads [`DeviceMemory`] on a CUDA device (`None` on the CPU, or when the
/// CUDA runtime cannot be asked: the figure is informative, not essential).
fn device_memory(device: Device) -> Option<DeviceMemory> {
    let Device::Cuda(index) = device else {
        return None;
    };
    let rt = crate::sys::cudart::CudaRuntime::locate().ok()?;
    // cudaMemGetInfo reads the calling thread's current device.
    rt.set_device(index).ok()?;
    let (free, total) = rt.mem_get_info().ok()?;
    let torch = crate::sys::torch_ext::cuda_allocator_stats(index, false)
        .ok()
        .flatten();
    Some(DeviceMemory {
        peak_allocated_bytes: torch.map(|t| t.peak_allocated_bytes),
        peak_reserved_bytes: torch.map(|t| t.peak_reserved_bytes),
        used_bytes: total.saturating_sub(free),
        total_bytes: total,
    })
}

/// The folders a run writes under its output directory (TensorBoard events,
/// checkpoints, sample grids).
pub const OUT_SUBDIRS: [&str; 3] = ["tb", checkpoint::CHECKPOINTS, "samples"];

/// The compute capability `(major, minor)` of CUDA device `index`, from the
/// CUDA runtime libtorch loaded; `None` when there is none or no device.
pub fn cuda_compute_capability(index: usize) -> Option<(i32, i32)> {
    crate::sys::cudart::CudaRuntime::locate()
        .ok()?
        .compute_capability(index)
}

/// The precision a run gets when none is asked for, and a note when a GPU
/// gets fp32: fp32 on the CPU; bf16 on a GPU of compute capability 8.0 or
/// newer (Ampere on, the first with bf16 tensor cores; PyTorch's
/// `torch.cuda.is_bf16_supported(including_emulation=False)` draws the same
/// line); fp32 on an
/// older GPU, where bf16 is emulated and slower than fp32. An unknown
/// capability keeps bf16, which [`check_precision`] then probes.
pub fn default_precision(
    device: Device,
    capability: Option<(i32, i32)>,
) -> (Precision, Option<String>) {
    match (device, capability) {
        (Device::Cuda(_), Some((major, minor))) if major < 8 => (
            Precision::Fp32,
            Some(format!(
                "{} has compute capability {major}.{minor}, without bf16 tensor cores (8.0+): training in fp32 (--precision fp16 uses fp16 tensor cores where the GPU has them, from compute capability 7.0)",
                device_name(device)
            )),
        ),
        (Device::Cuda(_), _) => (Precision::Bf16, None),
        _ => (Precision::Fp32, None),
    }
}

/// Checks that `out` and its [`OUT_SUBDIRS`] can be created and written
/// (exit 2 otherwise; exit 1 for a full disk), so that a file in their way
/// fails before training, not at the first checkpoint. Leaves no file behind.
/// `params` (the model's parameters) sizes the space a full disk's hint names.
pub fn check_out_dir(out: &Path, params: u64) -> anyhow::Result<()> {
    let fail = |e: std::io::Error| -> anyhow::Error {
        CliError::usage(format!(
            "cannot write to the output directory {}: {e}",
            out.display()
        ))
        .with_hint("choose a writable --out directory")
        .into()
    };
    let full = || -> anyhow::Error {
        CliError::failure(format!(
            "no space left on the device for the output directory {}",
            out.display()
        ))
        .with_hint(format!(
            "the run needs about {} there: free space on that file system, or choose another --out",
            space::human_bytes(space::run_bytes(params))
        ))
        .into()
    };
    std::fs::create_dir_all(out).map_err(|e| if space::is_full(&e) { full() } else { fail(e) })?;
    let probe = out.join(format!(".imgctl-write-test-{}", std::process::id()));
    let written = std::fs::write(&probe, b"ok");
    // Removed whether or not the write worked (a full disk creates it empty).
    let removed = std::fs::remove_file(&probe);
    match written.and(removed) {
        Err(e) if space::is_full(&e) => return Err(full()),
        r => r.map_err(fail)?,
    }
    for sub in OUT_SUBDIRS {
        let dir = out.join(sub);
        if dir.exists() && !dir.is_dir() {
            return Err(CliError::usage(format!(
                "cannot write to the output directory: {} is not a directory",
                dir.display()
            ))
            .with_hint("move that file away, or choose another --out")
            .into());
        }
        std::fs::create_dir_all(&dir).map_err(|e| -> anyhow::Error {
            CliError::usage(format!("cannot create {}: {e}", dir.display()))
                .with_hint("choose a writable --out directory")
                .into()
        })?;
    }
    Ok(())
}

/// Opens the dataset (exit 2 for an unreadable or empty folder).
pub fn open_dataset(choice: &DataChoice, config: &TrainConfig) -> anyhow::Result<Dataset> {
    let size = config.image_size()?;
    match choice {
        DataChoice::Synthetic => Ok(Dataset::synthetic(
            config.training.synthetic_images,
            size,
            config.training.synthetic_style,
        )),
        DataChoice::Folder(dir) => {
            let data = Dataset::folder(dir, size).map_err(|e| {
                CliError::usage(format!(
                    "cannot read the data folder {}: {e}",
                    dir.display()
                ))
                .with_hint("pass a readable directory of PNG or JPEG images to --data")
            })?;
            if data.is_empty() {
                let msg = if data.skipped.is_empty() {
                    format!(
                        "the data folder {} holds no PNG or JPEG images",
                        dir.display()
                    )
                } else {
                    format!(
                        "the data folder {} holds no readable images ({} unreadable, e.g. {}: {})",
                        dir.display(),
                        data.skipped.len(),
                        data.skipped[0].0.display(),
                        data.skipped[0].1
                    )
                };
                return Err(CliError::usage(msg)
                    .with_hint("put .png/.jpg/.jpeg files directly in the folder (subfolders are not searched), or omit --data for the synthetic set")
                    .into());
            }
            Ok(data)
        }
    }
}

fn device_name(d: Device) -> String {
    match d {
        Device::Cpu => "cpu".into(),
        Device::Cuda(i) => format!("cuda:{i}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

fn human_duration(secs: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs.max(0.0).round() as u64))
        .to_string()
}

/// Runs a whole training: preflight checks, model, optional resume, the loop
/// with outputs on rank 0, and the summary. Ctrl-C writes a checkpoint and
/// ends with an interrupted error (exit 130); a non-finite loss ends with a
/// failure (exit 1) that names the last good checkpoint.
pub fn run(opts: RunOptions, sync: Box<dyn GradSync>) -> anyhow::Result<TrainSummary> {
    let rank = sync.rank();
    let world = sync.world_size();
    let lead = rank == 0;
    let p = printer();
    let cfg = opts.config.clone();
    let tr = cfg.training.clone();

    // Everything that can be wrong with the input, before any training.
    check_precision(opts.device, opts.precision)?;
    let data = open_dataset(&opts.data, &cfg)?;
    if lead {
        // Room for a checkpoint first: a run that cannot save must not start
        // (nor leave the folders of check_out_dir behind).
        space::preflight(&opts.out, cfg.model.param_count())?;
        check_out_dir(&opts.out, cfg.model.param_count())?;
    }
    let mut trainer = Trainer::new(
        cfg.clone(),
        opts.device,
        opts.precision,
        opts.init_from.as_deref(),
        sync,
    )?;
    trainer.inject_nan_at = opts.inject_nan_at;
    trainer.data = Some(opts.data.record(&cfg));
    if let Some(dir) = &opts.resume {
        let state = trainer.load_checkpoint(dir)?;
        if lead {
            p.info(format!(
                "resuming from {} (step {})",
                dir.display(),
                state.step
            ));
        }
    }
    trainer.broadcast()?;
    let start_step = trainer.step;
    // Every rank must continue from the same step: one that sees another
    // --out (a per-node folder, a stale network-file-system cache) would run
    // a different number of steps and leave the others waiting.
    let mut agreed = [start_step as f64];
    trainer.sync_mean_scalars(&mut agreed)?;
    if (agreed[0] - start_step as f64).abs() > 0.5 {
        return Err(CliError::failure(format!(
            "rank {rank} starts at step {start_step}, but the ranks disagree (their mean is {:.1})",
            agreed[0]
        ))
        .with_hint(
            "every rank must see the same --out (a shared file system), with the same checkpoints",
        )
        .into());
    }
    if start_step >= tr.steps && opts.finished_ok {
        if lead {
            p.info(format!(
                "the run in {} is complete (checkpoint at step {start_step} of {}): writing its outputs, training nothing",
                opts.out.display(),
                tr.steps
            ));
        }
    } else if start_step >= tr.steps {
        return Err(CliError::usage(format!(
            "the checkpoint is at step {start_step}, and the run has {} steps",
            tr.steps
        ))
        .with_hint("pass a larger --steps to train further")
        .into());
    }

    let data = Arc::new(data);
    if lead {
        for (path, why) in &data.skipped {
            p.warn(format!("skipping unreadable {}: {why}", path.display()));
        }
        let src = match &opts.data {
            DataChoice::Synthetic => format!("synthetic ({} images)", data.len()),
            DataChoice::Folder(d) => format!("{} ({} images)", d.display(), data.len()),
        };
        p.info(format!(
            "training {} ({} params) on {} in {}, batch {}×{}, {} steps, data {src}",
            cfg.preset,
            trainer.param_count(),
            device_name(opts.device),
            opts.precision.name(),
            tr.batch_size,
            world,
            tr.steps,
        ));
    }
    let spec = StreamSpec {
        seed: tr.seed,
        batch_size: tr.batch_size,
        rank,
        world_size: world,
        start_position: trainer.samples_seen,
    };
    let mut loader = Loader::start(data.clone(), spec, tr.workers, tr.prefetch);

    let mut metrics = if lead {
        checkpoint::remove_stale_temporaries(&opts.out);
        // Every rank has loaded its checkpoint (the broadcast above): a
        // damaged one now goes out of the way of pruning and later resumes.
        for aside in checkpoint::set_aside_damaged(&opts.out).with_context(|| {
            format!(
                "setting aside damaged checkpoints in {}",
                opts.out.display()
            )
        })? {
            p.info(format!(
                "the damaged checkpoint is kept as {}",
                aside.display()
            ));
        }
        Some(
            MetricsWriter::open(&opts.out, opts.resume.as_ref().map(|_| start_step))
                .with_context(|| format!("opening metrics files in {}", opts.out.display()))?,
        )
    } else {
        None
    };
    let interrupt = interrupt_flag();
    let log_every = if tr.log_every > 0 {
        tr.log_every
    } else {
        // About 20 lines per run, at least one every 100 steps.
        (tr.steps / 20).clamp(1, 100)
    };
    let bar = if lead {
        p.progress(
            tr.steps,
            "{bar:30} {pos}/{len} {msg} [{elapsed_precise}, ETA {eta}]",
        )
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_position(start_step);

    let global_batch = (tr.batch_size * world) as f64;
    let started = Instant::now();
    let mut timed_images = 0.0;
    let mut timed_secs = 0.0;
    let mut first_loss = None;
    let mut recent: std::collections::VecDeque<f64> = Default::default();
    let mut last_checkpoint: Option<PathBuf> = opts.resume.clone();
    let mut last_checkpoint_step = opts.resume.as_ref().map(|_| start_step);
    let mut samples = Vec::new();
    let mut sample_stats = None;
    let mut training_data_stats = None;
    let mut skipped_steps = 0;
    let mut last_loss = None;
    let epoch_len = data.len() as u64;

    let write_checkpoint = |trainer: &Trainer, last_loss: Option<f64>| -> anyhow::Result<PathBuf> {
        trainer.save_checkpoint(&opts.out, trainer.samples_seen / epoch_len, last_loss)
    };
    // An error once this run has trained a step (a sample grid, a metrics
    // write, the data loader) must not lose the steps since the last
    // checkpoint: rank 0 saves one, then the error is reported. Not after a
    // failed step, whose update may be half-applied (the NaN guard keeps the
    // last good checkpoint), nor after a failed checkpoint write itself.
    let save_before_error = |trainer: &Trainer,
                             last_loss: Option<f64>,
                             last_checkpoint_step: Option<u64>,
                             err: anyhow::Error|
     -> anyhow::Error {
        if !lead || trainer.step == start_step || last_checkpoint_step == Some(trainer.step) {
            return err;
        }
        match write_checkpoint(trainer, last_loss) {
            Ok(dir) => p.warn(format!(
                "saved the checkpoint of step {} before stopping: {} (fix the error below, then continue with --resume)",
                trainer.step,
                dir.display()
            )),
            Err(e) => p.warn(format!(
                "could not save a checkpoint of step {} before stopping: {}",
                trainer.step,
                space::explain_disk_full(e, &opts.out, cfg.model.param_count())
            )),
        }
        err
    };

    while trainer.step < tr.steps {
        let stop = interrupt.load(Ordering::SeqCst);
        if trainer.sync.any_rank(stop)? {
            bar.finish_and_clear();
            let mut where_ = String::new();
            if lead {
                if let Some(m) = metrics.as_mut() {
                    m.flush()?;
                }
                let dir = if last_checkpoint_step == Some(trainer.step) {
                    last_checkpoint.clone().expect("checkpoint path")
                } else {
                    write_checkpoint(&trainer, last_loss)?
                };
                where_ = format!("; checkpoint {}", dir.display());
            }
            return Err(CliError::interrupted(format!(
                "interrupted at step {}{where_}",
                trainer.step
            ))
            .with_hint(format!(
                "continue with `imgctl train-demo --resume --out {}{}`",
                opts.out.display(),
                match &opts.data {
                    DataChoice::Folder(d) => format!(" --data {}", d.display()),
                    DataChoice::Synthetic => String::new(),
                }
            ))
            .into());
        }
        let step_start = Instant::now();
        let Some(batch) = loader.next_batch() else {
            bar.finish_and_clear();
            let err = anyhow::anyhow!("a data loader thread stopped unexpectedly");
            return Err(save_before_error(
                &trainer,
                last_loss,
                last_checkpoint_step,
                err,
            ));
        };
        let data_wait = step_start.elapsed().as_secs_f64();
        let stats = match trainer.train_step(&batch) {
            Ok(s) => s,
            Err(e) => {
                bar.finish_and_clear();
                if let Some(m) = metrics.as_mut() {
                    let _ = m.flush();
                }
                if e.downcast_ref::<StepError>().is_some() {
                    let kept = match &last_checkpoint {
                        Some(d) => format!("the last good checkpoint is {}", d.display()),
                        None => "no checkpoint was written before it".to_string(),
                    };
                    // Resuming unchanged replays the same NaN: the run is deterministic.
                    let hint = match (opts.precision, &last_checkpoint) {
                        (Precision::Fp32, Some(_)) => "resume with a lower --lr",
                        (Precision::Fp32, None) => "start again with a lower --lr",
                        (_, Some(_)) => "resume with --precision fp32 or a lower --lr",
                        (_, None) => "start again with --precision fp32 or a lower --lr",
                    };
                    return Err(CliError::failure(format!("{e}; {kept}"))
                        .with_hint(hint)
                        .into());
                }
                return Err(e);
            }
        };
        let dt = step_start.elapsed().as_secs_f64();
        if stats.step > start_step + 1 {
            timed_images += global_batch;
            timed_secs += dt;
        }
        if stats.skipped {
            skipped_steps += 1;
        }
        first_loss.get_or_insert(stats.loss);
        last_loss = Some(stats.loss);
        recent.push_back(stats.loss);
        if recent.len() > 10 {
            recent.pop_front();
        }
        let done = trainer.step == tr.steps;
        // Metrics, progress and the sample grid of this step.
        let outputs = (|| -> anyhow::Result<()> {
            let img_per_s = global_batch / dt.max(1e-9);
            if let Some(m) = metrics.as_mut() {
                m.record(&StepRecord {
                    step: stats.step,
                    loss: stats.loss,
                    lr: stats.lr,
                    grad_norm: stats.grad_norm,
                    loss_scale: stats.loss_scale,
                    img_per_s,
                    skipped: stats.skipped,
                })?;
                // Flushed every step so `tail -f metrics.jsonl` and TensorBoard follow the run.
                m.flush()?;
            }
            if lead {
                let avg_ips = if timed_secs > 0.0 {
                    timed_images / timed_secs
                } else {
                    img_per_s
                };
                bar.set_message(format!("loss {:.4} {:.1} img/s", stats.loss, avg_ips));
                bar.set_position(stats.step);
                if !p.interactive && (stats.step % log_every == 0 || stats.step == tr.steps) {
                    let left = (tr.steps - stats.step) as f64 * global_batch / avg_ips.max(1e-9);
                    p.info(format!(
                        "step {}/{} loss {:.4} lr {:.2e} grad_norm {:.3} {:.1} img/s ETA {}",
                        stats.step,
                        tr.steps,
                        stats.loss,
                        stats.lr,
                        stats.grad_norm,
                        avg_ips,
                        human_duration(left)
                    ));
                    let t = stats.times;
                    p.verbose(format!(
                        "  step {} seconds: data {data_wait:.3} forward {:.3} backward {:.3} grad_sync {:.3} optimizer {:.3}",
                        stats.step, t.forward, t.backward, t.grad_sync, t.optimizer
                    ));
                }
            }
            if lead && tr.sample_every > 0 && (trainer.step % tr.sample_every == 0 || done) {
                let imgs =
                    trainer.sample(tr.sample_num, tr.sample_steps, Sampler::Ddim, tr.seed, true)?;
                let dir = opts.out.join("samples");
                std::fs::create_dir_all(&dir)?;
                let path = dir.join(format!("{}.png", checkpoint::step_dir_name(trainer.step)));
                let png = images::encode_grid_png(&imgs, None)?;
                checkpoint::write_file_atomic(&path, &png)
                    .with_context(|| format!("writing {}", path.display()))?;
                if training_data_stats.is_none() {
                    training_data_stats = data_stats(&data, tr.seed);
                }
                if let (Ok(got), Some(want)) = (images::ImageStats::of(&imgs), training_data_stats)
                {
                    sample_stats = Some(SampleStats {
                        images: tr.sample_num,
                        ddim_steps: tr.sample_steps,
                        samples: got,
                        data: want,
                    });
                }
                if let Some(m) = metrics.as_mut() {
                    m.image(trainer.step, &png)?;
                }
                samples.push(path);
            }
            Ok(())
        })();
        if let Err(err) = outputs {
            bar.finish_and_clear();
            return Err(save_before_error(
                &trainer,
                last_loss,
                last_checkpoint_step,
                err,
            ));
        }
        if lead && ((tr.checkpoint_every > 0 && trainer.step % tr.checkpoint_every == 0) || done) {
            if let Some(m) = metrics.as_mut() {
                m.flush()?;
            }
            let dir = write_checkpoint(&trainer, last_loss)?;
            last_checkpoint = Some(dir);
            last_checkpoint_step = Some(trainer.step);
        }
        if opts.interrupt_after == Some(trainer.step) {
            interrupt.store(true, Ordering::SeqCst);
        }
    }
    bar.finish_and_clear();
    let elapsed = started.elapsed().as_secs_f64();
    sync_device(opts.device);
    let device_memory = device_memory(opts.device);
    let diffusers_model = if lead {
        let dir = opts.out.join("unet");
        checkpoint::write_dir_atomic(&dir, |tmp| trainer.export_diffusers(tmp))
            .with_context(|| format!("writing the diffusers model folder {}", dir.display()))?;
        Some(dir)
    } else {
        None
    };
    let (metrics_path, tb_path) = match metrics.as_mut() {
        Some(m) => {
            m.flush()?;
            (m.jsonl_path().to_path_buf(), m.tb_path().to_path_buf())
        }
        None => (PathBuf::new(), PathBuf::new()),
    };
    let mut unreadable: Vec<UnreadableFile> = data
        .skipped
        .iter()
        .map(|(p, e)| (p.clone(), e.clone()))
        .chain(loader.skipped().iter().map(|(p, e)| (p.clone(), e.clone())))
        .map(|(path, error)| UnreadableFile { path, error })
        .collect();
    let unreadable_files = unreadable.len();
    unreadable.truncate(20);
    drop(loader);
    Ok(TrainSummary {
        schema_version: SUMMARY_SCHEMA_VERSION,
        status: "completed".into(),
        preset: cfg.preset.clone(),
        device: device_name(opts.device),
        precision: opts.precision.name().into(),
        world_size: world,
        batch_size: tr.batch_size,
        params: trainer.param_count(),
        start_step,
        final_step: trainer.step,
        skipped_steps,
        first_loss,
        final_loss: (!recent.is_empty()).then(|| recent.iter().sum::<f64>() / recent.len() as f64),
        img_per_s: (timed_secs > 0.0).then(|| timed_images / timed_secs),
        train_flops_per_image: cfg.model.train_flops_per_image(),
        device_memory,
        // A single process syncs nothing (its stats would count 0 buckets).
        grad_sync: trainer.sync_stats(),
        elapsed_s: elapsed,
        data: DataSummary {
            source: match data.source {
                Source::Synthetic { .. } => "synthetic".into(),
                Source::Folder { .. } => "folder".into(),
            },
            path: match &opts.data {
                DataChoice::Folder(d) => Some(d.clone()),
                DataChoice::Synthetic => None,
            },
            images: data.len(),
            unreadable_files,
            unreadable,
        },
        out_dir: opts.out.clone(),
        checkpoint: last_checkpoint,
        metrics: metrics_path,
        tensorboard: tb_path,
        samples,
        sample_stats,
        diffusers_model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_is_the_default_only_from_compute_capability_8() {
        let cuda = Device::Cuda(0);
        assert_eq!(
            default_precision(Device::Cpu, None),
            (Precision::Fp32, None)
        );
        assert_eq!(
            default_precision(cuda, Some((9, 0))),
            (Precision::Bf16, None)
        );
        assert_eq!(
            default_precision(cuda, Some((8, 0))),
            (Precision::Bf16, None)
        );
        let (p, note) = default_precision(cuda, Some((7, 0)));
        assert_eq!(p, Precision::Fp32);
        let note = note.expect("a note for fp32 on a GPU");
        assert!(
            note.starts_with("cuda:0 has compute capability 7.0"),
            "{note}"
        );
        // Unknown: bf16, which check_precision probes before training.
        assert_eq!(default_precision(cuda, None), (Precision::Bf16, None));
    }

    #[test]
    fn no_compute_capability_without_a_gpu() {
        if tch::Cuda::is_available() {
            let (major, _) = cuda_compute_capability(0).expect("a capability on a GPU");
            assert!(major >= 3, "{major}");
        } else {
            // With a CUDA libtorch the runtime is mapped here and the call
            // itself fails (no device); with a CPU one nothing is mapped.
            assert_eq!(cuda_compute_capability(0), None);
        }
    }

    #[test]
    fn a_libtorch_panic_becomes_a_one_line_error() {
        // A real libtorch error raised through a panicking tch call.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let panic =
            std::panic::catch_unwind(|| Tensor::zeros([2], (Kind::Float, Device::Cpu)).view([3]))
                .expect_err("a view of the wrong size panics in tch");
        std::panic::set_hook(hook);
        let e = step_panic_error(7, Device::Cpu, panic.as_ref());
        let cli = e.downcast_ref::<CliError>().expect("a CliError");
        let msg = e.to_string();
        assert!(
            msg.starts_with("training step 7 failed in libtorch: shape '[3]' is invalid"),
            "{msg}"
        );
        assert!(!msg.contains("unwrap") && !msg.contains('\n'), "{msg}");
        assert!(cli.hint.is_some());
        let oom = step_panic_error(
            1,
            Device::Cuda(0),
            &"called `Result::unwrap()` on an `Err` value: Torch(\"CUDA out of memory. Tried to allocate 2.00 GiB\\nException raised from malloc\")".to_string(),
        );
        assert_eq!(
            oom.to_string(),
            "training step 1 failed in libtorch: CUDA out of memory. Tried to allocate 2.00 GiB"
        );
    }
}
