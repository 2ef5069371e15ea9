//! The training run: the loop around [`Trainer::train_step`] with
//! checkpoints, metrics, sample grids, progress, the NaN guard and Ctrl-C
//! ([`interrupt_flag`]), and its report ([`TrainSummary`], whose types live
//! in [`super::summary`] and are re-exported here).
//!
//! [`run`] starts through [`super::session`] (the preflight it shares with
//! the benchmark), then steps until the last step; only rank 0 writes files
//! or reports progress. What the run says goes to the caller's sink as
//! [`RunEvent`]s; nothing here prints (the Ctrl-C handler's own lines, said
//! when the signal comes, live with it in [`super::interrupt`]). Its phases (start, step, log, sample, checkpoint, finish) are
//! the methods of the private `RunLoop`, which holds the run's state. Owns
//! the orchestration of a run; the step lives in [`super::trainer`], the
//! file formats in their own modules, and this module must not name a flag's
//! parsing or pick a data-parallel backend.
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use super::checkpoint;
use super::config::Precision;
use super::data::{Dataset, Loader, Source};
use super::events::{Events, GpuLoad, RunEvent, StepProgress};
use super::gpu_watch::{self, GpuWatch};
use super::images;
use super::interrupt::interrupt_flag;
use super::metrics::{MetricsWriter, StepRecord};
use super::run_metrics::open_metrics;
use super::schedule::Sampler;
use super::session::{self, device_name, DataChoice, RunOptions};
use super::space;
use super::summary::{data_stats, device_memory};
pub use super::summary::{
    DataSummary, DeviceMemory, SampleStats, TrainSummary, UnreadableFile, SUMMARY_SCHEMA_VERSION,
};
use super::sync::GradSync;
use super::trainer::{sync_device, StepError, StepStats, Trainer};
use crate::world::heartbeat::{self, Phase};

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

/// Runs a whole training: preflight checks, model, optional resume, the loop
/// with outputs on rank 0, and the summary; what it says as it goes reaches
/// `events` (ending with [`RunEvent::Stopped`], also on an error). Ctrl-C
/// writes a checkpoint and ends with an interrupted error (exit 130); a
/// non-finite loss ends with a failure (exit 1) that names the last good
/// checkpoint.
pub fn run(
    mut opts: RunOptions,
    sync: Box<dyn GradSync>,
    events: Events,
) -> anyhow::Result<TrainSummary> {
    // The Ctrl-C handler first: from the first line this run prints (the
    // supervisor and the tests take "training …" as the sign that Ctrl-C
    // will be answered with a checkpoint), SIGINT only sets the flag.
    let interrupt = interrupt_flag();
    let result = session::fit_world_size(&mut opts, sync.world_size())
        .and_then(|fit| RunLoop::start(&opts, sync, interrupt, events, fit))
        .and_then(|mut run| {
            while !run.is_done() {
                run.step()?;
            }
            run.finish()
        });
    events(&RunEvent::Stopped);
    result
}

/// One training run in progress: the trainer, its loader and outputs, and
/// the counters its summary reports. [`run`] drives it: [`Self::start`],
/// [`Self::step`] until the last step, [`Self::finish`]. The fields holding
/// resources come in the order they are dropped (the metrics, the
/// loader before the data and the trainer).
struct RunLoop<'a> {
    /// The run's options.
    opts: &'a RunOptions,
    /// The Ctrl-C flag ([`interrupt_flag`]).
    interrupt: Arc<AtomicBool>,
    /// This is rank 0, which writes the files and prints.
    lead: bool,
    /// Ranks.
    world: usize,
    /// Where the run's events go (rank 0 sends progress; every rank its warnings).
    events: Events<'a>,
    /// metrics.jsonl and TensorBoard (rank 0 only).
    metrics: Option<MetricsWriter>,
    /// The GPUs' watch (rank 0 of a GPU run) and its latest reading's view.
    watch: (Option<GpuWatch>, Option<GpuLoad>),
    /// This rank's data stream.
    loader: Loader,
    /// The training data.
    data: Arc<Dataset>,
    /// The model and its optimizer.
    trainer: Trainer,
    /// A log line every this many steps (without a terminal).
    log_every: u64,
    /// Images per step over all ranks.
    global_batch: f64,
    /// Images in one epoch.
    epoch_len: u64,
    /// The step the run started at.
    start_step: u64,
    /// When the loop started.
    started: Instant,
    /// Images of the timed steps (all but this process's first).
    timed_images: f64,
    /// Seconds of the timed steps.
    timed_secs: f64,
    /// Loss of this process's first step.
    first_loss: Option<f64>,
    /// The losses of the last (up to) 10 steps.
    recent: VecDeque<f64>,
    /// Steps whose values a later read resolves: stats, seconds, data wait.
    deferred: VecDeque<(StepStats, f64, f64)>,
    /// Loss of the last step.
    last_loss: Option<f64>,
    /// Steps skipped for fp16 overflow.
    skipped_steps: u64,
    /// The last checkpoint written (or resumed from).
    last_checkpoint: Option<PathBuf>,
    /// Its step.
    last_checkpoint_step: Option<u64>,
    /// Sample grids written.
    samples: Vec<PathBuf>,
    /// What the last grid shows.
    sample_stats: Option<SampleStats>,
    /// The training data's statistics, once a grid needed them.
    training_data_stats: Option<images::ImageStats>,
    /// loss.png, when last drawn.
    loss_plot: Option<PathBuf>,
    /// A failed drawing of loss.png was warned about.
    plot_warned: bool,
    /// The step the curves were last drawn at: the last step is a
    /// checkpoint, so the end draws again only when the loop left before it.
    plotted_step: Option<u64>,
}

impl<'a> RunLoop<'a> {
    /// The prologue: the session ([`session::start`]: inputs, model, initial
    /// weights), the start step every rank agrees on, the lines that say what
    /// trains, the loader, the metrics files and the start of the progress.
    /// `fit`: the batch of a resume, from [`session::fit_world_size`].
    fn start(
        opts: &'a RunOptions,
        sync: Box<dyn GradSync>,
        interrupt: Arc<AtomicBool>,
        events: Events<'a>,
        fit: Option<super::elastic::Fit>,
    ) -> anyhow::Result<Self> {
        let rank = sync.rank();
        let world = sync.world_size();
        let lead = rank == 0;
        let tr = &opts.config.training;
        // Intra-op threads on the CPU, before the model exists.
        let threads = (opts.device == tch::Device::Cpu).then(|| {
            let (cores, load) = super::threads::host();
            let omp = std::env::var(crate::env_vars::OMP_NUM_THREADS).ok();
            let t = super::threads::choose(omp.as_deref(), cores, load);
            tch::set_num_threads(t.count as i32);
            t
        });

        // Everything that can be wrong with the input, before any training.
        let (
            session::Session {
                data,
                mut trainer,
                resumed_step,
            },
            (),
        ) = session::start(opts, lead, opts.resume.as_deref(), sync, || Ok(()))?;
        if let (true, Some(dir), Some(step)) = (lead, &opts.resume, resumed_step) {
            events(&RunEvent::Note(format!(
                "resuming from {} (step {step})",
                dir.display()
            )));
            if let Ok(state) = checkpoint::read_state(dir) {
                let now = &opts.config.training;
                if let Some(w) = session::schedule_change(&state.config.training, now, step) {
                    events(&RunEvent::Warning(w));
                }
            }
        }
        if lead {
            trainer.groupnorm.announce(events);
        }
        if let Some(fit) = fit {
            trainer.configured_batch_size = fit.configured_batch_size;
            if let (true, Some(note)) = (lead, fit.note) {
                events(&RunEvent::Note(note));
            }
        }
        // Read by the steps only, so set once the weights are in place.
        trainer.inject_nan_at = opts.inject_nan_at;
        let start_step = agreed_start(opts, &mut trainer, rank, events)?;

        let data = Arc::new(data);
        if lead {
            super::session::announce(opts, &trainer, &data, world, threads.as_ref(), events);
        }
        let every_s = tr.gpu_sample_every_s;
        let watch = gpu_watch::start_for_run(opts.device, every_s, rank, world, &mut |v| {
            trainer.sync_mean_scalars(v)
        })?;
        let loader = session::start_loader(&trainer, data.clone());
        let metrics = if lead {
            Some(open_metrics(opts, start_step, events)?)
        } else {
            None
        };
        let log_every = if tr.log_every > 0 {
            tr.log_every
        } else {
            // About 20 lines per run, at least one every 100 steps.
            (tr.steps / 20).clamp(1, 100)
        };
        if lead {
            events(&RunEvent::Started {
                steps: tr.steps,
                start_step,
            });
        }

        Ok(Self {
            opts,
            interrupt,
            lead,
            world,
            events,
            metrics,
            watch: (watch, None),
            loader,
            epoch_len: data.len() as u64,
            data,
            trainer,
            log_every,
            global_batch: (tr.batch_size * world) as f64,
            start_step,
            started: Instant::now(),
            timed_images: 0.0,
            timed_secs: 0.0,
            first_loss: None,
            recent: VecDeque::new(),
            deferred: VecDeque::new(),
            last_loss: None,
            skipped_steps: 0,
            last_checkpoint: opts.resume.clone(),
            last_checkpoint_step: opts.resume.as_ref().map(|_| start_step),
            samples: Vec::new(),
            sample_stats: None,
            training_data_stats: None,
            loss_plot: None,
            plot_warned: false,
            plotted_step: None,
        })
    }

    /// The trainer has reached the run's last step.
    fn is_done(&self) -> bool {
        self.trainer.step >= self.opts.config.training.steps
    }

    /// One pass of the loop: the Ctrl-C check, the batch, the training step
    /// (a failed one ends as [`diverged`]), its counters, then its metrics,
    /// progress and sample grid (an error there saves a checkpoint first,
    /// [`Self::save_before_error`]) and a checkpoint when one is due.
    fn step(&mut self) -> anyhow::Result<()> {
        let opts = self.opts;
        let tr = &opts.config.training;
        self.stop_if_interrupted()?;
        super::interrupt::set_step_in_progress(self.trainer.step + 1);
        heartbeat::note(self.trainer.step + 1, Phase::Training);
        let step_start = Instant::now();
        let Some(batch) = self.loader.next_batch() else {
            (self.events)(&RunEvent::Stopped);
            let err = anyhow::anyhow!("a data loader thread stopped unexpectedly");
            return Err(self.save_before_error(err));
        };
        let data_wait = step_start.elapsed().as_secs_f64();
        let stats = match self.trainer.train_step(&batch) {
            Ok(s) => s,
            Err(e) => {
                // The steps the failed read still resolved go to the metrics.
                let _ = self.flush_resolved();
                (self.events)(&RunEvent::Stopped);
                if let Some(m) = self.metrics.as_mut() {
                    let _ = m.flush();
                }
                return Err(diverged(e, &self.last_checkpoint, opts.precision));
            }
        };
        let dt = step_start.elapsed().as_secs_f64();
        if stats.fell_back {
            (self.events)(&RunEvent::Warning(self.trainer.fell_back_warning()));
        }
        let done = self.trainer.step == tr.steps;
        // Metrics and progress of the steps this read resolved, then the
        // sample grid of this step.
        let outputs = self
            .record(stats, dt, data_wait)
            .and_then(|()| self.sample(done));
        if let Err(err) = outputs {
            (self.events)(&RunEvent::Stopped);
            return Err(self.save_before_error(err));
        }
        if self.lead
            && ((tr.checkpoint_every > 0 && self.trainer.step % tr.checkpoint_every == 0) || done)
        {
            self.checkpoint()?;
        }
        if opts.interrupt_after == Some(self.trainer.step) {
            self.interrupt.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Ctrl-C on any rank (all of them agree): rank 0 flushes the metrics
    /// and saves a checkpoint of this step unless it has one, then every rank
    /// ends with [`RunError::Interrupted`]. `Ok` when no rank was asked to stop.
    fn stop_if_interrupted(&mut self) -> anyhow::Result<()> {
        let opts = self.opts;
        let stop = self.interrupt.load(Ordering::SeqCst);
        if !self.trainer.sync_any_rank(stop)? {
            return Ok(());
        }
        // Every rank reads its pending steps back (a collective) and logs them.
        self.trainer.flush_pending()?;
        self.flush_resolved()?;
        (self.events)(&RunEvent::Stopped);
        let mut checkpoint = None;
        if self.lead {
            if let Some(m) = self.metrics.as_mut() {
                m.flush()?;
            }
            let dir = if self.last_checkpoint_step == Some(self.trainer.step) {
                self.last_checkpoint.clone().expect("checkpoint path")
            } else {
                self.write_checkpoint()?
            };
            checkpoint = Some(dir);
        }
        Err(RunError::Interrupted {
            step: self.trainer.step,
            checkpoint,
            out: opts.out.clone(),
            data: match &opts.data {
                DataChoice::Folder(d) => Some(d.clone()),
                DataChoice::Synthetic => None,
            },
        }
        .into())
    }

    /// Counts and logs `stats` (queued while deferred) with the earlier
    /// steps its read resolved, each window's seconds spread evenly over
    /// its steps (the host waited for them all at the read).
    fn record(&mut self, stats: StepStats, dt: f64, data_wait: f64) -> anyhow::Result<()> {
        self.deferred.push_back((stats, dt, data_wait));
        if stats.deferred {
            return Ok(());
        }
        self.flush_resolved()
    }

    /// Counts and logs the queued steps the trainer's last read resolved.
    fn flush_resolved(&mut self) -> anyhow::Result<()> {
        let resolved = self.trainer.take_resolved();
        let window: f64 = self.deferred.iter().map(|d| d.1).sum();
        let each = window / self.deferred.len().max(1) as f64;
        let mut resolved = resolved.into_iter();
        while let Some((mut s, _, wait)) = self.deferred.pop_front() {
            if s.deferred {
                let Some(r) = resolved.next() else {
                    self.deferred.push_front((s, each, wait));
                    break;
                };
                (s.loss, s.grad_norm, s.deferred) = (r.loss, r.grad_norm, false);
            }
            self.count(&s, each);
            self.log(&s, each, wait)?;
        }
        Ok(())
    }

    /// Adds a step that took `dt` seconds to the summary's counters: the
    /// timed images and seconds (not this process's first step), skipped
    /// steps, and the first, last and recent losses.
    fn count(&mut self, stats: &StepStats, dt: f64) {
        if stats.step > self.start_step + 1 {
            self.timed_images += self.global_batch;
            self.timed_secs += dt;
        }
        if stats.skipped {
            self.skipped_steps += 1;
        }
        self.first_loss.get_or_insert(stats.loss);
        self.last_loss = Some(stats.loss);
        self.recent.push_back(stats.loss);
        if self.recent.len() > 10 {
            self.recent.pop_front();
        }
    }

    /// The step's metrics record (flushed at once), and on rank 0 the step's
    /// progress event, a log line due every `log_every` steps and at the
    /// last.
    fn log(&mut self, stats: &StepStats, dt: f64, data_wait: f64) -> anyhow::Result<()> {
        let tr = &self.opts.config.training;
        let global_batch = self.global_batch;
        let img_per_s = global_batch / dt.max(1e-9);
        let gpus = self.gpu_reading();
        if let Some(m) = self.metrics.as_mut() {
            m.record(&StepRecord {
                step: stats.step,
                loss: stats.loss,
                lr: stats.lr,
                grad_norm: stats.grad_norm,
                loss_scale: stats.loss_scale,
                img_per_s,
                skipped: stats.skipped,
                gpus,
            })?;
            // Flushed every step so `tail -f metrics.jsonl` and TensorBoard follow the run.
            m.flush()?;
        }
        if !self.lead {
            return Ok(());
        }
        let avg_ips = if self.timed_secs > 0.0 {
            self.timed_images / self.timed_secs
        } else {
            img_per_s
        };
        (self.events)(&RunEvent::Step(StepProgress {
            step: stats.step,
            steps: tr.steps,
            loss: stats.loss,
            lr: stats.lr,
            grad_norm: stats.grad_norm,
            img_per_s: avg_ips,
            eta_s: (tr.steps - stats.step) as f64 * global_batch / avg_ips.max(1e-9),
            log_due: stats.step % self.log_every == 0 || stats.step == tr.steps,
            data_wait_s: data_wait,
            times: stats.times,
            gpu: self.watch.1,
        }));
        Ok(())
    }

    /// The GPUs' reading when a new one came since the last step (its view
    /// kept for the progress line), after what the watch has to say once.
    fn gpu_reading(&mut self) -> Vec<gpu_watch::GpuSample> {
        let Some(w) = self.watch.0.as_mut() else {
            return Vec::new();
        };
        for note in w.notes() {
            (self.events)(&RunEvent::Note(note));
        }
        let reading = w.take_new().unwrap_or_default();
        self.watch.1 = gpu_watch::load_of(&reading).or(self.watch.1);
        reading
    }

    /// On rank 0 every `sample_every` steps and at the last (`done`): a
    /// sample grid in `out/samples/`, its statistics against the training
    /// data's, and the image in TensorBoard.
    fn sample(&mut self, done: bool) -> anyhow::Result<()> {
        let opts = self.opts;
        let tr = &opts.config.training;
        let trainer = &mut self.trainer;
        if !(self.lead && tr.sample_every > 0 && (trainer.step % tr.sample_every == 0 || done)) {
            return Ok(());
        }
        heartbeat::note(trainer.step, Phase::Samples);
        let imgs = trainer.sample(tr.sample_num, tr.sample_steps, Sampler::Ddim, tr.seed, true)?;
        let dir = opts.out.join("samples");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{}.png", checkpoint::step_dir_name(trainer.step)));
        let png = images::encode_grid_png(&imgs, None)?;
        checkpoint::write_file_atomic(&path, &png)
            .with_context(|| format!("writing {}", path.display()))?;
        if self.training_data_stats.is_none() {
            self.training_data_stats = data_stats(&self.data, tr.seed);
        }
        if let (Ok(got), Some(want)) = (images::ImageStats::of(&imgs), self.training_data_stats) {
            self.sample_stats = Some(SampleStats {
                images: tr.sample_num,
                ddim_steps: tr.sample_steps,
                samples: got,
                data: want,
                resembles_data: got.resembles(&want, images::RESEMBLANCE_FACTOR),
            });
        }
        if let Some(m) = self.metrics.as_mut() {
            m.image(trainer.step, &png)?;
        }
        self.samples.push(path);
        Ok(())
    }

    /// A due checkpoint (rank 0): the metrics flushed and the curves redrawn
    /// first, then the checkpoint, whose non-finite state ends the run as
    /// [`diverged`] naming the previous one.
    fn checkpoint(&mut self) -> anyhow::Result<()> {
        let opts = self.opts;
        if let Some(m) = self.metrics.as_mut() {
            m.flush()?;
            self.loss_plot =
                super::curves::redraw_warned(&opts.out, &mut self.plot_warned, self.events);
            self.plotted_step = Some(self.trainer.step);
        }
        let dir = self
            .write_checkpoint()
            .map_err(|e| diverged(e, &self.last_checkpoint, opts.precision))?;
        self.last_checkpoint = Some(dir);
        self.last_checkpoint_step = Some(self.trainer.step);
        Ok(())
    }

    /// Writes the checkpoint of the trainer's step under `out/`.
    fn write_checkpoint(&self) -> anyhow::Result<PathBuf> {
        heartbeat::note(self.trainer.step, Phase::Checkpoint);
        let epoch = self.trainer.samples_seen / self.epoch_len;
        self.trainer
            .save_checkpoint(&self.opts.out, epoch, self.last_loss)
    }

    /// An error once this run has trained a step (a sample grid, a metrics
    /// write, the data loader) must not lose the steps since the last
    /// checkpoint: rank 0 saves one, then the error is reported. Not after a
    /// failed step, whose update may be half-applied (the NaN guard keeps the
    /// last good checkpoint), nor after a failed checkpoint write itself.
    fn save_before_error(&self, err: anyhow::Error) -> anyhow::Error {
        let opts = self.opts;
        let step = self.trainer.step;
        if !self.lead || step == self.start_step || self.last_checkpoint_step == Some(step) {
            return err;
        }
        let warning = match self.write_checkpoint() {
            Ok(dir) => format!(
                "saved the checkpoint of step {} before stopping: {} (fix the error below, then continue with {})",
                step,
                dir.display(),
                opts.resume_flag
            ),
            Err(e) => format!(
                "could not save a checkpoint of step {} before stopping: {}",
                step,
                space::explain_disk_full(e, &opts.out, opts.config.model.param_count())
            ),
        };
        (self.events)(&RunEvent::Warning(warning));
        err
    }

    /// The end of a run that reached its last step: the device's memory, the
    /// diffusers export (rank 0), the metrics flushed and the curves drawn if
    /// the last checkpoint did not, and the summary.
    fn finish(mut self) -> anyhow::Result<TrainSummary> {
        let opts = self.opts;
        let cfg = &opts.config;
        heartbeat::note(self.trainer.step, Phase::Finishing);
        (self.events)(&RunEvent::Stopped);
        let elapsed = self.started.elapsed().as_secs_f64();
        // What the watch still had to say (a short run can end before NVML loads).
        let gpus = self.watch.0.take().map(|mut w| {
            w.stop();
            w.notes()
                .into_iter()
                .for_each(|n| (self.events)(&RunEvent::Note(n)));
            w.usage()
        });
        sync_device(opts.device);
        let device_memory = device_memory(opts.device);
        let diffusers_model = self.export_diffusers()?;
        let (metrics_path, tb_path) = match self.metrics.as_mut() {
            Some(m) => {
                m.flush()?;
                if self.plotted_step != Some(self.trainer.step) {
                    self.loss_plot =
                        super::curves::redraw_warned(&opts.out, &mut self.plot_warned, self.events);
                }
                (m.jsonl_path().to_path_buf(), m.tb_path().to_path_buf())
            }
            None => (PathBuf::new(), PathBuf::new()),
        };
        let data = self.data_summary();
        drop(self.loader);
        let recent = &self.recent;
        Ok(TrainSummary {
            schema_version: SUMMARY_SCHEMA_VERSION,
            status: "completed".into(),
            preset: cfg.preset.name().into(),
            device: device_name(opts.device),
            precision: opts.precision.name().into(),
            world_size: self.world,
            batch_size: cfg.training.batch_size,
            params: self.trainer.param_count(),
            start_step: self.start_step,
            final_step: self.trainer.step,
            skipped_steps: self.skipped_steps,
            first_loss: self.first_loss,
            final_loss: (!recent.is_empty())
                .then(|| recent.iter().sum::<f64>() / recent.len() as f64),
            img_per_s: (self.timed_secs > 0.0).then(|| self.timed_images / self.timed_secs),
            train_flops_per_image: cfg.model.train_flops_per_image(),
            device_memory,
            gpus: gpus.unwrap_or_default(),
            // A single process syncs nothing (its stats would count 0 buckets).
            grad_sync: self.trainer.sync_stats(),
            elapsed_s: elapsed,
            data,
            out_dir: opts.out.clone(),
            checkpoint: self.last_checkpoint,
            metrics: metrics_path,
            tensorboard: tb_path,
            loss_plot: self.loss_plot,
            samples: self.samples,
            sample_stats: self.sample_stats,
            diffusers_model,
        })
    }

    /// Rank 0 writes the final EMA weights as a diffusers model folder
    /// (`out/unet`); non-finite weights end the run as [`diverged`].
    fn export_diffusers(&self) -> anyhow::Result<Option<PathBuf>> {
        if !self.lead {
            return Ok(None);
        }
        let dir = self.opts.out.join("unet");
        let written = checkpoint::write_dir_atomic(&dir, |tmp| self.trainer.export_diffusers(tmp));
        if let Err(e) = written {
            return Err(match e.downcast_ref::<StepError>() {
                Some(_) => diverged(e, &self.last_checkpoint, self.opts.precision),
                None => e.context(format!(
                    "writing the diffusers model folder {}",
                    dir.display()
                )),
            });
        }
        Ok(Some(dir))
    }

    /// The data facts of the summary, with the files skipped at scan time
    /// and by the loader (the first 20 named).
    fn data_summary(&self) -> DataSummary {
        let data = &self.data;
        let mut unreadable: Vec<UnreadableFile> = data
            .skipped
            .iter()
            .map(|(p, e)| (p.clone(), e.clone()))
            .chain(
                self.loader
                    .skipped()
                    .iter()
                    .map(|(p, e)| (p.clone(), e.clone())),
            )
            .map(|(path, error)| UnreadableFile { path, error })
            .collect();
        let unreadable_files = unreadable.len();
        unreadable.truncate(20);
        DataSummary {
            source: match data.source {
                Source::Synthetic { .. } => "synthetic".into(),
                Source::Folder { .. } => "folder".into(),
            },
            path: match &self.opts.data {
                DataChoice::Folder(d) => Some(d.clone()),
                DataChoice::Synthetic => None,
            },
            images: data.len(),
            unreadable_files,
            unreadable,
        }
    }
}

/// The step this rank starts at, once every rank has said the same
/// ([`RunError::RanksDisagree`] otherwise): a checkpoint at the last step is
/// [`RunError::AlreadyDone`], unless `--resume auto` takes it as a finished
/// run whose outputs are written again (rank 0 says so).
fn agreed_start(
    opts: &RunOptions,
    trainer: &mut Trainer,
    rank: usize,
    events: Events,
) -> anyhow::Result<u64> {
    let steps = opts.config.training.steps;
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
    if start_step >= steps && opts.finished_ok {
        if rank == 0 {
            events(&RunEvent::Note(format!(
                "the run in {} is complete (checkpoint at step {start_step} of {}): writing its outputs, training nothing",
                opts.out.display(),
                steps
            )));
        }
    } else if start_step >= steps {
        return Err(RunError::AlreadyDone {
            step: start_step,
            steps,
        }
        .into());
    }
    Ok(start_step)
}
