//! The preflight a training run and the benchmark share, and the start of
//! their session: the device facts ([`default_precision`],
//! [`check_precision`]), the inputs ([`RunOptions`], [`DataChoice`],
//! [`open_dataset`]), the output directory ([`check_out_dir`]), the
//! [`Trainer`] built from them, the initial weights made equal on every rank
//! ([`initial_weights`]) and this rank's data loader ([`start_loader`]).
//!
//! In order, as [`start`] calls them for `super::run::run` and
//! `crate::train::bench::run_rank`: [`check_inputs`] finds everything wrong with the
//! input before any model is built, [`new_trainer`] builds the model,
//! [`initial_weights`] resumes a checkpoint and broadcasts rank 0's weights;
//! then each caller's [`start_loader`] starts the data stream where the
//! trainer stands. This module must not own the
//! training loop, the step or any file a run writes (the probes of
//! [`check_out_dir`] are removed again).
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tch::{Device, Kind, Tensor};

use super::checkpoint::{self, DataSource};
use super::config::{Precision, TrainConfig};
use super::data::{Dataset, Loader, StreamSpec};
use super::space;
use super::sync::GradSync;
use super::trainer::Trainer;

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
    /// The flag that continues this run after a stop (`--resume`), named by
    /// the warning of a checkpoint saved before an error: only `commands/`
    /// knows flags, so it fills this in.
    pub resume_flag: &'static str,
}

/// Checks everything that can be wrong with the input before a model is
/// built: the precision on the device, the dataset (opened and returned), and
/// when `out_dir` (rank 0 of a training run; a benchmark writes nothing) the
/// disk space for a checkpoint and the output directory.
pub fn check_inputs(
    opts: &RunOptions,
    out_dir: bool,
    world_size: usize,
) -> anyhow::Result<Dataset> {
    check_precision(opts.device, opts.precision)?;
    if let Device::Cuda(index) = opts.device {
        // This rank's share of a step against its GPU's free memory (the
        // precision probe above made the context, so the reading is real).
        if let Some(free) = cuda_free_bytes(index) {
            crate::train::budget::check_device_training(
                &opts.config,
                opts.precision != Precision::Fp32,
                world_size,
                index,
                free,
            )?;
        }
    }
    let data = open_dataset(&opts.data, &opts.config)?;
    if out_dir {
        // Room for a checkpoint first: a run that cannot save must not start
        // (nor leave the folders of check_out_dir behind).
        space::preflight(&opts.out, opts.config.model.param_count())?;
        check_out_dir(&opts.out, opts.config.model.param_count())?;
    }
    Ok(data)
}

/// A started session: the checked dataset and the trainer, its weights
/// equal on every rank ([`start`]).
pub struct Session {
    /// The training data, opened by [`check_inputs`].
    pub data: Dataset,
    /// The model with its initial weights ([`initial_weights`]).
    pub trainer: Trainer,
    /// The checkpoint's step when the session resumed one.
    pub resumed_step: Option<u64>,
}

/// Starts a run's or a benchmark's session, the prologue both share:
/// [`check_inputs`] (with the output directory when `out_dir`), then
/// `before_model` (the benchmark reads the device memory in use before the
/// model is built; its value comes back with the session), [`new_trainer`]
/// over `sync`, and [`initial_weights`] from `resume`. The data loader is the
/// caller's to start ([`start_loader`]).
pub fn start<T>(
    opts: &RunOptions,
    out_dir: bool,
    resume: Option<&Path>,
    sync: Box<dyn GradSync>,
    before_model: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(Session, T)> {
    let data = check_inputs(opts, out_dir, sync.world_size())?;
    let before = before_model()?;
    let mut trainer = new_trainer(opts, sync)?;
    let resumed_step = initial_weights(&mut trainer, resume)?;
    Ok((
        Session {
            data,
            trainer,
            resumed_step,
        },
        before,
    ))
}

/// The [`Trainer`] of `opts` (its config, device and precision, started from
/// `opts.init_from` when given) over `sync`, recording the training data for
/// its checkpoints.
pub fn new_trainer(opts: &RunOptions, sync: Box<dyn GradSync>) -> anyhow::Result<Trainer> {
    let mut trainer = Trainer::new(
        opts.config.clone(),
        opts.device,
        opts.precision,
        opts.init_from.as_deref(),
        sync,
    )?;
    trainer.data = Some(opts.data.record(&opts.config));
    Ok(trainer)
}

/// Restores the checkpoint `resume` when given, then makes every rank's
/// weights, EMA and optimizer moments equal to rank 0's; the step resumed
/// from, if any (the caller says so).
pub fn initial_weights(
    trainer: &mut Trainer,
    resume: Option<&Path>,
) -> anyhow::Result<Option<u64>> {
    let resumed = match resume {
        Some(dir) => Some(trainer.load_checkpoint(dir)?.step),
        None => None,
    };
    trainer.broadcast()?;
    Ok(resumed)
}

/// The batch of a run that resumes a checkpoint on `world` ranks
/// ([`super::elastic::fit`]: the checkpoint's global batch is kept), set in
/// `opts.config`; `None` when the run resumes nothing. Every rank reads the
/// same checkpoint and so decides the same.
pub fn fit_world_size(
    opts: &mut RunOptions,
    world: usize,
) -> anyhow::Result<Option<super::elastic::Fit>> {
    let Some(dir) = &opts.resume else {
        return Ok(None);
    };
    let state = checkpoint::read_state(dir)?;
    let recorded = super::elastic::Recorded {
        step: state.step,
        world_size: state.world_size,
        batch_size: state.batch_size,
        configured_batch_size: state.configured_batch_size.unwrap_or(state.batch_size),
    };
    let fit = super::elastic::fit(&recorded, opts.config.training.batch_size, world)?;
    opts.config.training.batch_size = fit.batch_size;
    Ok(Some(fit))
}

/// Starts this rank's background loader over `data`: its block of every
/// global batch, from the sample the trainer has reached.
pub fn start_loader(trainer: &Trainer, data: Arc<Dataset>) -> Loader {
    let tr = &trainer.config.training;
    let spec = StreamSpec {
        seed: tr.seed,
        batch_size: tr.batch_size,
        rank: trainer.rank(),
        world_size: trainer.world_size(),
        start_position: trainer.samples_seen,
    };
    Loader::start(data, spec, tr.workers, tr.prefetch)
}

/// Checks that `device` can run `precision` (exit 2 before training if not).
pub fn check_precision(device: Device, precision: Precision) -> anyhow::Result<()> {
    match (device, precision) {
        (_, Precision::Fp32) => Ok(()),
        (Device::Cpu, Precision::Fp16) => Err(SessionError::Fp16OnCpu.into()),
        (d, p) => {
            let kind = if p == Precision::Bf16 {
                Kind::BFloat16
            } else {
                Kind::Half
            };
            let probe = Tensor::f_ones([8, 8], (kind, d))
                .and_then(|a| a.f_matmul(&a))
                .and_then(|m| m.f_sum(Kind::Float))
                .and_then(f64::try_from);
            match probe {
                Ok(512.0) => Ok(()),
                other => Err(SessionError::Unsupported {
                    precision: p,
                    device: format!("{d:?}"),
                    why: match other {
                        Ok(v) => format!("a test matmul returned {v}"),
                        Err(e) => e.to_string().lines().next().unwrap_or_default().to_string(),
                    },
                }
                .into()),
            }
        }
    }
}

/// The folders a run writes under its output directory (TensorBoard events,
/// checkpoints, sample grids).
pub const OUT_SUBDIRS: [&str; 3] = ["tb", checkpoint::CHECKPOINTS, "samples"];

/// Free bytes of CUDA device `index` (`cudaMemGetInfo`, which makes the
/// device's context if there is none yet); `None` without a CUDA runtime.
pub fn cuda_free_bytes(index: usize) -> Option<u64> {
    let rt = crate::sys::cudart::CudaRuntime::locate().ok()?;
    rt.set_device(index).ok()?;
    rt.mem_get_info().ok().map(|(free, _)| free)
}

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
/// The note says why in the device's terms; which flag changes it is the
/// caller's to add.
pub fn default_precision(
    device: Device,
    capability: Option<(i32, i32)>,
) -> (Precision, Option<String>) {
    match (device, capability) {
        (Device::Cuda(_), Some((major, minor))) if major < 8 => (
            Precision::Fp32,
            Some(format!(
                "{} has compute capability {major}.{minor}, without bf16 tensor cores (8.0+): training in fp32",
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
    let fail = |error: std::io::Error| -> anyhow::Error {
        SessionError::OutDir {
            path: out.to_path_buf(),
            error,
        }
        .into()
    };
    let full = || -> anyhow::Error {
        SessionError::OutDirFull {
            path: out.to_path_buf(),
            need: space::run_bytes(params),
        }
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
            return Err(SessionError::NotADirectory { path: dir }.into());
        }
        std::fs::create_dir_all(&dir)
            .map_err(|error| SessionError::CreateDir { path: dir, error })?;
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
            let data = Dataset::folder(dir, size).map_err(|e| SessionError::DataFolder {
                path: dir.clone(),
                error: e.to_string(),
            })?;
            if data.is_empty() {
                return Err(match data.skipped.first() {
                    None => SessionError::NoImages { path: dir.clone() },
                    Some((first, why)) => SessionError::NoReadableImages {
                        path: dir.clone(),
                        unreadable: data.skipped.len(),
                        first: first.clone(),
                        why: why.clone(),
                    },
                }
                .into());
            }
            Ok(data)
        }
    }
}

/// What can be wrong with a run's inputs before its first step.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// fp16 asked for on the CPU (exit 2).
    #[error("fp16 needs a CUDA device: tch's autocast is CUDA-only, so fp16 on the CPU would silently train in fp32")]
    Fp16OnCpu,
    /// The device failed a probe matmul in the precision (exit 2).
    #[error("{} is not supported on {device} ({why})", .precision.name())]
    Unsupported {
        /// The precision asked for.
        precision: Precision,
        /// The device, as tch debug-prints it (`Cuda(0)`).
        device: String,
        /// What the probe got.
        why: String,
    },
    /// The output directory cannot be created or written (exit 2).
    #[error("cannot write to the output directory {}: {error}", .path.display())]
    OutDir {
        /// The output directory.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// The disk under the output directory is full (exit 1).
    #[error("no space left on the device for the output directory {}", .path.display())]
    OutDirFull {
        /// The output directory.
        path: PathBuf,
        /// Bytes the run needs there.
        need: u64,
    },
    /// A file stands where a folder of the output directory goes (exit 2).
    #[error("cannot write to the output directory: {} is not a directory", .path.display())]
    NotADirectory {
        /// The file in the way.
        path: PathBuf,
    },
    /// A folder of the output directory cannot be created (exit 2).
    #[error("cannot create {}: {error}", .path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// The data folder cannot be read (exit 2).
    #[error("cannot read the data folder {}: {error}", .path.display())]
    DataFolder {
        /// The folder.
        path: PathBuf,
        /// Why not.
        error: String,
    },
    /// The data folder holds no image file (exit 2).
    #[error("the data folder {} holds no PNG or JPEG images", .path.display())]
    NoImages {
        /// The folder.
        path: PathBuf,
    },
    /// The data folder holds image files, none readable (exit 2).
    #[error("the data folder {} holds no readable images ({unreadable} unreadable, e.g. {}: {why})", .path.display(), .first.display())]
    NoReadableImages {
        /// The folder.
        path: PathBuf,
        /// How many files were unreadable.
        unreadable: usize,
        /// The first of them.
        first: PathBuf,
        /// Why it is unreadable.
        why: String,
    },
}

/// The device as the messages and the summary name it (`cpu`, `cuda:N`).
pub(crate) fn device_name(d: Device) -> String {
    match d {
        Device::Cpu => "cpu".into(),
        Device::Cuda(i) => format!("cuda:{i}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The warning for a resume whose run length differs from the checkpoint's
/// (#45 F10): the cosine schedule is laid over the new length, so the
/// learning rate jumps at the resumed step (a step in `loss.png`); `None`
/// when the curve goes on unbroken.
pub fn schedule_change(
    was: &crate::train::config::TrainingConfig,
    now: &crate::train::config::TrainingConfig,
    at: u64,
) -> Option<String> {
    if was.steps == now.steps
        && was.lr == now.lr
        && was.effective_warmup() == now.effective_warmup()
    {
        return None;
    }
    let lr = |t: &crate::train::config::TrainingConfig| {
        super::optim::lr_at(t.lr, at, t.effective_warmup(), t.steps)
    };
    let (before, after) = (lr(was), lr(now));
    let what = if was.steps != now.steps {
        format!(
            "{} steps in all (the checkpoint's run had {})",
            now.steps, was.steps
        )
    } else {
        format!(
            "the learning rate {:.2e} (the checkpoint's run had {:.2e})",
            now.lr, was.lr
        )
    };
    Some(format!(
        "{what}: the cosine learning-rate schedule starts over for the new run, so at step {at} the rate jumps from {before:.2e} to {after:.2e} (a step in loss.png); resume with the checkpoint's settings to keep its curve"
    ))
}

/// Rank 0's lines before training: the unreadable files skipped, then what
/// trains on what ("training …", which the supervisor and the tests wait for).
pub(crate) fn announce(
    opts: &RunOptions,
    trainer: &Trainer,
    data: &Dataset,
    world: usize,
    threads: Option<&super::threads::CpuThreads>,
    events: crate::train::events::Events,
) {
    let cfg = &opts.config;
    for (path, why) in &data.skipped {
        events(&crate::train::events::RunEvent::Warning(format!(
            "skipping unreadable {}: {why}",
            path.display()
        )));
    }
    let src = match &opts.data {
        DataChoice::Synthetic => format!("synthetic ({} images)", data.len()),
        DataChoice::Folder(d) => format!("{} ({} images)", d.display(), data.len()),
    };
    let device = match threads {
        Some(t) => format!(
            "{} ({} thread{}: {})",
            device_name(opts.device),
            t.count,
            if t.count == 1 { "" } else { "s" },
            t.why
        ),
        None => device_name(opts.device),
    };
    events(&crate::train::events::RunEvent::Note(format!(
        "training {} ({} params) on {device} in {}, batch {}×{}, {} steps, data {src}",
        cfg.preset,
        trainer.param_count(),
        opts.precision.name(),
        cfg.training.batch_size,
        world,
        cfg.training.steps,
    )));
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
    fn a_resume_that_changes_the_run_length_says_the_rate_jumps() {
        let was = crate::train::config::TrainConfig::preset(crate::choices::Preset::Smoke).training;
        assert_eq!(schedule_change(&was, &was, 200), None);
        let longer = crate::train::config::TrainingConfig {
            steps: was.steps * 2,
            ..was.clone()
        };
        let w = schedule_change(&was, &longer, was.steps / 2).unwrap();
        assert!(
            w.starts_with(&format!(
                "{} steps in all (the checkpoint's run had {}): the cosine learning-rate schedule starts over",
                was.steps * 2,
                was.steps
            )),
            "{w}"
        );
        // The rate at the resumed step under each length, as lr_at gives them.
        let at = was.steps / 2;
        let before = super::super::optim::lr_at(was.lr, at, was.effective_warmup(), was.steps);
        let after = super::super::optim::lr_at(was.lr, at, longer.effective_warmup(), longer.steps);
        assert!(after > before, "a longer cosine is higher at the same step");
        assert!(
            w.contains(&format!("jumps from {before:.2e} to {after:.2e}")),
            "{w}"
        );
    }
}
