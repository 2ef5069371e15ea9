//! The training step on one device: model and optimizer state
//! ([`Trainer`]), the step (forward, loss, backward, gradient sync, clipping,
//! AdamW, EMA), sampling with the EMA weights, and checkpoint I/O.
//!
//! Data parallelism plugs in through [`GradSync`] ([`super::sync`]):
//! [`Trainer::new`] describes the flat gradient buffer to it once
//! ([`GradSync::prepare`]), [`Trainer::broadcast`] makes every rank's state
//! rank 0's, and every backward pass goes to [`GradSync::backward_and_sync`],
//! which averages the flat gradients across ranks during backward
//! (overlapped, as DDP) or after it. The loop around the step is
//! [`super::run`]; the model, the schedule, the optimizer math and the file
//! formats live in their own modules. This module must not print progress
//! or write run outputs besides checkpoints.
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
//!
//! Part: the train wing (`docs/architecture.md`).
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tch::nn::VarStore;
use tch::{Device, Kind, Reduction, Tensor};

use super::checkpoint::{self, DataSource, State};
use super::config::{GradReduce, GroupNormKernel, Precision, TrainConfig};
use super::data::step_torch_seed;
use super::ema::Ema;
use super::flat::FlatLayout;
use super::kernels::{self, GroupNormStatus};
use super::model::{weights, UNet2DModel};
use super::optim::{clip_divisor, lr_at, AdamW, GradScaler};
use super::readback::{self, Pending, ResolvedStep};
use super::schedule::{DdpmSchedule, Sampler};
use super::sync::{GradLayout, GradSync, SyncStats};

pub use super::trainer_error::{step_panic_error, StepError, TrainerError};

/// fp16 steps skipped in a row before the run is declared diverged: at a
/// back-off of 0.5 per skip, 64 skips take the initial 2^16 scale to 2^-48.
const MAX_CONSECUTIVE_SKIPS: u64 = 64;

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

pub use super::events::PhaseTimes;

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
    /// This step's update fell back from libtorch's fused AdamW to the
    /// elementwise one, which is slower ([`Trainer::unfused_reason`] says
    /// why); later steps stay on the elementwise update.
    pub fell_back: bool,
    /// Loss and gradient norm are not read yet (NaN here): a later step's
    /// read resolves them ([`Trainer::take_resolved`], [`super::readback`]).
    pub deferred: bool,
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
    /// The per-rank batch the configuration asked for, recorded in
    /// checkpoints; differs from `config.training.batch_size` after a resume
    /// on another number of ranks ([`super::elastic`]).
    pub configured_batch_size: usize,
    /// The GroupNorm kernels in force, their self-check, any fall-back.
    pub groupnorm: GroupNormStatus,
    read_every: u64,
    pending: Vec<Pending>,
    resolved: Vec<ResolvedStep>,
}

/// Waits for every kernel queued on `device` (nothing on the CPU).
pub(crate) fn sync_device(device: Device) {
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
        let groupnorm = kernels::resolve(config.training.groupnorm, device, precision);
        let fused_gn = groupnorm.active == GroupNormKernel::Fused;
        model.set_fused_group_norm(fused_gn);
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
            m.set_fused_group_norm(fused_gn);
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
        let configured_batch_size = config.training.batch_size;
        Ok(Self {
            configured_batch_size,
            groupnorm,
            read_every: readback::read_every(config.training.read_every, device),
            pending: Vec::new(),
            resolved: Vec::new(),
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

    /// Why the update is libtorch's elementwise AdamW rather than its fused
    /// one, once it is (see [`StepStats::fell_back`]).
    pub fn unfused_reason(&self) -> Option<&str> {
        self.opt.unfused_reason()
    }

    /// The warning a step that [`StepStats::fell_back`] gives, with the reason.
    pub fn fell_back_warning(&self) -> String {
        format!(
            "libtorch's fused AdamW failed ({}); using the elementwise update, which is slower",
            self.unfused_reason().unwrap_or("no reason given")
        )
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
    pub fn sync_stats(&self) -> Option<SyncStats> {
        self.sync.stats()
    }

    /// Whether any rank's `local` flag is set (every rank calls it at the
    /// same step; the Ctrl-C flag, so all ranks stop together).
    pub fn sync_any_rank(&mut self, local: bool) -> anyhow::Result<bool> {
        self.sync.any_rank(local)
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

    /// Turns gradient checkpointing on or off for the steps that follow (the
    /// benchmark's comparison of both); the step's results are the same
    /// either way.
    pub fn set_gradient_checkpointing(&mut self, on: bool) {
        self.config.training.gradient_checkpointing = on;
        self.model.set_gradient_checkpointing(on);
        if let Some((_, m)) = self.compute.as_mut() {
            m.set_gradient_checkpointing(on);
        }
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
        let step_no = self.step + 1;
        self.pending.push(Pending {
            step: step_no,
            loss: loss.detach(),
            norm,
        });
        let tr = &self.config.training;
        let lr = lr_at(tr.lr, self.step, tr.effective_warmup(), tr.steps);
        let deferred = !self.read_due(step_no);
        let (loss_v, norm_v, finite) = if deferred {
            (f64::NAN, f64::NAN, true)
        } else {
            self.read_pending()?;
            let now = self.resolved.pop().expect("the read covers this step");
            (now.loss, now.grad_norm, now.finite())
        };
        let mut skipped = false;
        let mut fell_back = false;
        if !finite {
            let is_fp16 = self.scaler.is_some();
            if is_fp16 && self.consecutive_skips < MAX_CONSECUTIVE_SKIPS {
                if let Some(s) = self.scaler.as_mut() {
                    s.update(true);
                }
                self.consecutive_skips += 1;
                skipped = true;
            } else {
                let p = self.precision.name();
                return Err(StepError::non_finite(step_no, loss_v, norm_v, p).into());
            }
        } else {
            if let Some(s) = self.scaler.as_mut() {
                s.update(false);
            }
            self.consecutive_skips = 0;
            let was_fused = self.opt.unfused_reason().is_none();
            self.opt.update(&mut self.master, &g, lr, Some(&divisor))?;
            fell_back = was_fused && self.opt.unfused_reason().is_some();
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
            fell_back,
            deferred,
        })
    }

    /// Whether step `step` reads its values back ([`super::readback`]).
    fn read_due(&self, step: u64) -> bool {
        let tr = &self.config.training;
        let every = |n: u64| n > 0 && step % n == 0;
        self.read_every <= 1
            || self.profile
            || self.scaler.is_some()
            || step >= tr.steps
            || every(self.read_every)
            || every(tr.checkpoint_every)
            || every(tr.sample_every)
    }

    /// Reads the pending steps back in one transfer, their losses averaged
    /// over the ranks, into [`Self::take_resolved`]'s list; the first
    /// non-finite one before the newest is the run's error.
    fn read_pending(&mut self) -> anyhow::Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let pairs = readback::read(&pending)?;
        let local: Vec<bool> = pairs.iter().map(|p| p.0.is_finite()).collect();
        let mut losses: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        self.sync.mean_scalars(&mut losses)?;
        for (i, p) in pending.iter().enumerate() {
            let r = ResolvedStep {
                step: p.step,
                loss: losses[i],
                grad_norm: pairs[i].1,
                local_loss_finite: local[i],
            };
            if i + 1 < pending.len() && !r.finite() {
                return Err(self.non_finite(&r).into());
            }
            self.resolved.push(r);
        }
        Ok(())
    }

    fn non_finite(&self, r: &ResolvedStep) -> StepError {
        StepError::non_finite(r.step, r.loss, r.grad_norm, self.precision.name())
    }

    /// Reads back every step not read yet (before a checkpoint that does
    /// not fall on a read step: an interrupted run's); a non-finite one is
    /// the run's error.
    pub fn flush_pending(&mut self) -> anyhow::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.read_pending()?;
        match self.resolved.last().filter(|r| !r.finite()) {
            Some(r) => Err(self.non_finite(r).into()),
            None => Ok(()),
        }
    }

    /// Steps per host read-back of the loss ([`super::readback`]).
    pub fn read_every(&self) -> u64 {
        self.read_every
    }

    /// The values of earlier deferred steps that the last read resolved,
    /// in step order (drained).
    pub fn take_resolved(&mut self) -> Vec<ResolvedStep> {
        std::mem::take(&mut self.resolved)
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
        self.check_finite()?;
        let backup = tch::no_grad(|| self.master.copy());
        tch::no_grad(|| self.master.shallow_clone().copy_(&self.ema.shadow));
        let result = weights::save_pretrained(&self.master_vs, &self.config.model, dir);
        tch::no_grad(|| self.master.shallow_clone().copy_(&backup));
        result
    }

    /// Checks that the weights, the EMA and AdamW's moments are all finite,
    /// one fused `isfinite().all()` over each flat buffer (four reductions
    /// and one read-back each, at a checkpoint or an export only): a
    /// [`StepError::NonFiniteState`] otherwise, so that no NaN state is
    /// ever saved as good.
    pub fn check_finite(&self) -> Result<(), StepError> {
        for (what, t) in [
            ("weights", &self.master),
            ("EMA weights", &self.ema.shadow),
            ("optimizer moments", &self.opt.exp_avg),
            ("optimizer moments", &self.opt.exp_avg_sq),
        ] {
            let finite = tch::no_grad(|| t.isfinite().all().int64_value(&[]) != 0);
            if !finite {
                return Err(StepError::NonFiniteState {
                    step: self.step,
                    what,
                    precision: self.precision.name(),
                });
            }
        }
        Ok(())
    }
}

mod save_load;

#[cfg(test)]
mod tests;
