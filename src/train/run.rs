//! The training run: the loop around [`Trainer::train_step`] with
//! checkpoints, metrics, sample grids, progress, the NaN guard and Ctrl-C
//! ([`interrupt_flag`]), and its report ([`TrainSummary`]).
//!
//! [`run`] starts through [`super::session`] (the preflight it shares with
//! the benchmark), then steps until the last step; only rank 0 writes files
//! or prints. Owns the orchestration of a run; the step lives in
//! [`super::trainer`], the file formats in their own modules, and this
//! module must not name a flag's parsing or pick a data-parallel backend.
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use tch::{Device, Tensor};

use super::checkpoint;
use super::config::Precision;
use super::data::{Dataset, Source};
use super::images;
use super::metrics::{MetricsWriter, StepRecord};
use super::schedule::Sampler;
use super::session::{self, device_name, DataChoice, RunOptions};
use super::space;
use super::sync::{GradSync, SyncStats};
use super::trainer::{sync_device, StepError, Trainer};
use crate::output::printer;

/// Ways a run stops before its last step.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The ranks resumed at different steps (exit 1).
    #[error(
        "rank {rank} starts at step {start_step}, but the ranks disagree (their mean is {mean:.1})"
    )]
    RanksDisagree {
        /// This rank.
        rank: usize,
        /// The step it starts at.
        start_step: u64,
        /// The ranks' mean start step.
        mean: f64,
    },
    /// The resumed checkpoint is at (or past) the last step (exit 2).
    #[error("the checkpoint is at step {step}, and the run has {steps} steps")]
    AlreadyDone {
        /// The checkpoint's step.
        step: u64,
        /// The run's steps.
        steps: u64,
    },
    /// Ctrl-C: the run saved a checkpoint and stopped (exit 130).
    #[error("interrupted at step {step}{}", .checkpoint.as_ref().map(|d| format!("; checkpoint {}", d.display())).unwrap_or_default())]
    Interrupted {
        /// The last step trained.
        step: u64,
        /// The checkpoint of that step (rank 0 only).
        checkpoint: Option<PathBuf>,
        /// The output directory.
        out: PathBuf,
        /// The data folder, when not the synthetic set.
        data: Option<PathBuf>,
    },
    /// The loss or the gradients stopped being finite (exit 1); resuming
    /// unchanged replays the same NaN, the run being deterministic.
    #[error("{error}; {}", .kept.as_ref().map_or("no checkpoint was written before it".to_string(), |d| format!("the last good checkpoint is {}", d.display())))]
    Diverged {
        /// The step's error ([`StepError`]).
        error: String,
        /// The last good checkpoint, if one was written.
        kept: Option<PathBuf>,
        /// The run's precision.
        precision: Precision,
    },
}

/// A [`StepError`] (a non-finite loss, or non-finite state found before a
/// save) as [`RunError::Diverged`], naming `kept`, the last checkpoint
/// written (each passed the finite check); any other error unchanged.
fn diverged(e: anyhow::Error, kept: &Option<PathBuf>, precision: Precision) -> anyhow::Error {
    if e.downcast_ref::<StepError>().is_some() {
        RunError::Diverged {
            error: e.to_string(),
            kept: kept.clone(),
            precision,
        }
        .into()
    } else {
        e
    }
}

/// Version of the summary JSON.
pub const SUMMARY_SCHEMA_VERSION: u32 = 1;

/// The process-wide Ctrl-C flag; the handler is installed on first use.
pub fn interrupt_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        // The first Ctrl-C asks the loop to checkpoint and stop after the
        // current step, and says so at once; a second one ends the process
        // at once. `_exit`, never `process::exit`: exit handlers and static
        // destructors would run while libtorch's threads still compute, and
        // tearing libtorch down under them segfaulted (exit 139).
        // One process says what the first Ctrl-C does: a supervisor says it
        // for its ranks, and of torchrun's ranks rank 0 speaks.
        let announce = std::env::var_os(crate::env_vars::IMGCTL_SUPERVISED).is_none()
            && std::env::var(crate::env_vars::RANK).map_or(true, |r| r == "0");
        let handler = move || {
            if f.swap(true, Ordering::SeqCst) {
                printer().stderr_text("second interrupt: exiting without a checkpoint\n");
                crate::sys::process::exit_now(130);
            }
            if announce {
                printer().stderr_text(
                    "interrupt: finishing this step, then saving a checkpoint (Ctrl-C again exits without one)\n",
                );
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

/// Redraws `out/loss.png` from the metrics written so far; a failure is a
/// warning (once per run), never the run's end: the numbers are in
/// metrics.jsonl and TensorBoard either way.
fn redraw_curves(out: &std::path::Path, warned: &mut bool) -> Option<PathBuf> {
    match super::curves::redraw(out) {
        Ok(path) => Some(path),
        Err(e) => {
            if !std::mem::replace(warned, true) {
                printer().warn(format!(
                    "could not draw {}: {e}",
                    out.join(super::curves::LOSS_PNG).display()
                ));
            }
            None
        }
    }
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
    pub grad_sync: Option<SyncStats>,
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
    /// The curves (loss, learning rate, gradient norm) as a picture; `null`
    /// on other ranks and when it could not be drawn (a warning says why).
    pub loss_plot: Option<PathBuf>,
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

fn human_duration(secs: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs.max(0.0).round() as u64))
        .to_string()
}

/// Runs a whole training: preflight checks, model, optional resume, the loop
/// with outputs on rank 0, and the summary. Ctrl-C writes a checkpoint and
/// ends with an interrupted error (exit 130); a non-finite loss ends with a
/// failure (exit 1) that names the last good checkpoint.
pub fn run(opts: RunOptions, sync: Box<dyn GradSync>) -> anyhow::Result<TrainSummary> {
    // The Ctrl-C handler first: from the first line this run prints (the
    // supervisor and the tests take "training …" as the sign that Ctrl-C
    // will be answered with a checkpoint), SIGINT only sets the flag.
    let interrupt = interrupt_flag();
    let rank = sync.rank();
    let world = sync.world_size();
    let lead = rank == 0;
    let p = printer();
    let cfg = opts.config.clone();
    let tr = cfg.training.clone();

    // Everything that can be wrong with the input, before any training.
    let data = session::check_inputs(&opts, lead, world)?;
    let mut trainer = session::new_trainer(&opts, sync)?;
    trainer.inject_nan_at = opts.inject_nan_at;
    session::initial_weights(&mut trainer, opts.resume.as_deref())?;
    let start_step = trainer.step;
    // Every rank must continue from the same step: one that sees another
    // --out (a per-node folder, a stale network-file-system cache) would run
    // a different number of steps and leave the others waiting.
    let mut agreed = [start_step as f64];
    trainer.sync_mean_scalars(&mut agreed)?;
    if (agreed[0] - start_step as f64).abs() > 0.5 {
        return Err(RunError::RanksDisagree {
            rank,
            start_step,
            mean: agreed[0],
        }
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
        return Err(RunError::AlreadyDone {
            step: start_step,
            steps: tr.steps,
        }
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
    let mut loader = session::start_loader(&trainer, data.clone());

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
        let writer = MetricsWriter::open(&opts.out, opts.resume.as_ref().map(|_| start_step))
            .with_context(|| format!("opening metrics files in {}", opts.out.display()))?;
        if let Some((aside, why)) = &writer.set_aside {
            p.warn(format!(
                "metrics.jsonl was damaged ({why}): moved to {}; a new one keeps its readable steps up to {start_step}",
                aside.display()
            ));
        }
        Some(writer)
    } else {
        None
    };
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
    let mut loss_plot = None;
    let mut plot_warned = false;
    // The step the curves were last drawn at: the last step is a checkpoint,
    // so the end draws again only when the loop left before it.
    let mut plotted_step = None;
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
                "saved the checkpoint of step {} before stopping: {} (fix the error below, then continue with {})",
                trainer.step,
                dir.display(),
                opts.resume_flag
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
        if trainer.sync_any_rank(stop)? {
            bar.finish_and_clear();
            let mut checkpoint = None;
            if lead {
                if let Some(m) = metrics.as_mut() {
                    m.flush()?;
                }
                let dir = if last_checkpoint_step == Some(trainer.step) {
                    last_checkpoint.clone().expect("checkpoint path")
                } else {
                    write_checkpoint(&trainer, last_loss)?
                };
                checkpoint = Some(dir);
            }
            return Err(RunError::Interrupted {
                step: trainer.step,
                checkpoint,
                out: opts.out.clone(),
                data: match &opts.data {
                    DataChoice::Folder(d) => Some(d.clone()),
                    DataChoice::Synthetic => None,
                },
            }
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
                return Err(diverged(e, &last_checkpoint, opts.precision));
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
                loss_plot = redraw_curves(&opts.out, &mut plot_warned);
                plotted_step = Some(trainer.step);
            }
            let dir = write_checkpoint(&trainer, last_loss)
                .map_err(|e| diverged(e, &last_checkpoint, opts.precision))?;
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
        if let Err(e) = checkpoint::write_dir_atomic(&dir, |tmp| trainer.export_diffusers(tmp)) {
            return Err(match e.downcast_ref::<StepError>() {
                Some(_) => diverged(e, &last_checkpoint, opts.precision),
                None => e.context(format!(
                    "writing the diffusers model folder {}",
                    dir.display()
                )),
            });
        }
        Some(dir)
    } else {
        None
    };
    let (metrics_path, tb_path) = match metrics.as_mut() {
        Some(m) => {
            m.flush()?;
            if plotted_step != Some(trainer.step) {
                loss_plot = redraw_curves(&opts.out, &mut plot_warned);
            }
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
        preset: cfg.preset.name().into(),
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
        loss_plot,
        samples,
        sample_stats,
        diffusers_model,
    })
}
