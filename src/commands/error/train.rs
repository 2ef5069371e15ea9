//! What the training core's errors mean for the user of `imgctl train-demo`
//! and `imgctl sample`: their exit status, the flags in their lines and the
//! hints (which flag to change, how to continue a stopped run).
//!
//! One function per core enum of `train/` (`parallel/` has its own table);
//! each matches every variant, so a new variant without advice does not
//! compile. Without the `torch` feature there is no training core and no
//! advice.

use super::advice::Advice;

/// Advice for the errors of `train/` (not `train/parallel/`).
#[cfg(not(feature = "torch"))]
pub(super) fn advise(_err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    None
}

/// Advice for the errors of `train/` (not `train/parallel/`).
#[cfg(feature = "torch")]
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    with_torch::advise(err)
}

#[cfg(feature = "torch")]
mod with_torch {
    use tch::Device;

    use super::Advice;
    use crate::train::budget::{gib, BudgetError};
    use crate::train::checkpoint::CheckpointError;
    use crate::train::config::{Precision, SettingCheck, TrainConfigError};
    use crate::train::elastic::ElasticError;
    use crate::train::images::ImagesError;
    use crate::train::model::config::preset_names;
    use crate::train::model::error::{ModelCheck, ModelConfigError, WeightsError};
    use crate::train::out_lock::{holder, OutLockError};
    use crate::train::run::RunError;
    use crate::train::schedule::{ScheduleError, NUM_TRAIN_TIMESTEPS};
    use crate::train::session::SessionError;
    use crate::train::space::{free_words, human_bytes, SpaceError};
    use crate::train::trainer::{StepError, TrainerError};

    /// Advice for the errors of `train/` (not `train/parallel/`).
    pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
        if let Some(e) = err.downcast_ref::<TrainConfigError>() {
            return Some(config(e));
        }
        if let Some(e) = err.downcast_ref::<BudgetError>() {
            return Some(budget(e));
        }
        if let Some(e) = err.downcast_ref::<CheckpointError>() {
            return Some(checkpoint(e));
        }
        if let Some(e) = err.downcast_ref::<SessionError>() {
            return Some(session(e));
        }
        if let Some(e) = err.downcast_ref::<RunError>() {
            return Some(run(e));
        }
        if let Some(e) = err.downcast_ref::<ElasticError>() {
            return Some(elastic(e));
        }
        if let Some(e) = err.downcast_ref::<TrainerError>() {
            return Some(trainer(e));
        }
        if let Some(e) = err.downcast_ref::<StepError>() {
            return Some(match e {
                StepError::NonFinite { .. } | StepError::NonFiniteState { .. } => {
                    Advice::failure(None)
                }
            });
        }
        if let Some(e) = err.downcast_ref::<crate::sys::torch_ext::FusedError>() {
            use crate::sys::torch_ext::FusedError;
            return Some(match e {
                FusedError::Inputs(_) => Advice::failure(
                    "the optimizer's tensors do not fit together, a bug of imgctl: please report it with this line"
                        .to_string(),
                ),
                // Handled inside the optimizer (it falls back to the
                // elementwise update); here only should that ever change.
                FusedError::Fused(_) => Advice::failure(None),
            });
        }
        if let Some(e) = err.downcast_ref::<SpaceError>() {
            return Some(space(e));
        }
        if let Some(e) = err.downcast_ref::<OutLockError>() {
            return Some(out_lock(e));
        }
        if let Some(e) = err.downcast_ref::<ScheduleError>() {
            return Some(match e {
                ScheduleError::Steps { .. } => {
                    Advice::usage(format!("use between 1 and {NUM_TRAIN_TIMESTEPS} steps"))
                }
            });
        }
        if let Some(e) = err.downcast_ref::<ImagesError>() {
            return Some(match e {
                ImagesError::Write { .. } => {
                    Advice::usage("choose a writable output path".to_string())
                }
            });
        }
        if let Some(e) = err.downcast_ref::<ModelConfigError>() {
            return Some(model_config(e));
        }
        err.downcast_ref::<WeightsError>().map(weights)
    }

    fn config(e: &TrainConfigError) -> Advice {
        let hint = match e {
            TrainConfigError::Setting { check, .. } => setting_hint(*check),
            TrainConfigError::File { .. } => "top-level keys are preset, model (diffusers UNet2DModel fields) and training; unknown keys are rejected".to_string(),
            TrainConfigError::ReadFile { .. } => "pass a readable YAML file to --config".to_string(),
            TrainConfigError::OutChannels { .. } => "a noise-predicting UNet outputs as many channels as it reads: set both to the same value".to_string(),
            TrainConfigError::NotSquare { .. } => {
                "train-demo trains on square images; set sample_size to one number".to_string()
            }
        };
        Advice::usage(hint)
    }

    fn setting_hint(check: SettingCheck) -> String {
        match check {
            SettingCheck::Steps => "train at least one step (--steps N)".to_string(),
            SettingCheck::BatchSize => "use --batch-size 1 or more".to_string(),
            SettingCheck::Lr => "use a positive learning rate such as 1e-4".to_string(),
            SettingCheck::AdamBetas => "betas lie in [0, 1)".to_string(),
            SettingCheck::AdamEps => "eps > 0, weight_decay >= 0".to_string(),
            SettingCheck::MaxGradNorm => "use a positive norm such as 1.0".to_string(),
            SettingCheck::Ema => "max_decay in [0, 1), inv_gamma > 0".to_string(),
            SettingCheck::EmaPower => "use a positive warm-up power such as 0.75".to_string(),
            SettingCheck::BucketCap => {
                "use a positive size in MiB such as 25 (--bucket-cap-mb 25)".to_string()
            }
            SettingCheck::GpuSampleEvery => {
                "use a number of seconds such as 5, or 0 to read no GPU statistics".to_string()
            }
            SettingCheck::Keep => "keep at least one checkpoint (--keep 1)".to_string(),
            SettingCheck::Sampling => {
                "sample grids need at least one image and one step".to_string()
            }
            SettingCheck::SampleSteps => format!(
                "use 1 to {NUM_TRAIN_TIMESTEPS} sampling steps (50 is DDIM's usual), or --sample-every 0"
            ),
            SettingCheck::SyntheticImages => "use a positive dataset size".to_string(),
            SettingCheck::Prefetch => {
                "queue a few batches per loader thread (the default is 2)".to_string()
            }
        }
    }

    fn budget(e: &BudgetError) -> Advice {
        match e {
            BudgetError::Parameters { .. } => Advice::usage(
                "use a smaller model (fewer or narrower blocks; --preset default has 113,673,219 parameters)"
                    .to_string(),
            ),
            BudgetError::Workers { max, .. } => Advice::usage(format!(
                "use --workers {max} or fewer: data loading needs a few threads, not thousands"
            )),
            BudgetError::SyntheticImages { largest, .. } => Advice::usage(format!(
                "set synthetic_images to {largest} or fewer (a few thousand is plenty)"
            )),
            BudgetError::Activations {
                largest_batch: 0,
                largest_size,
                ..
            } => Advice::usage(format!(
                "set model.sample_size to {largest_size} or less (train-demo's presets use 16 to 64)"
            )),
            BudgetError::Activations { largest_batch, .. } => Advice::usage(format!(
                "use --batch-size {largest_batch} or less, or a smaller model.sample_size"
            )),
            BudgetError::DeviceTraining { largest_batch: 0, .. } => Advice::usage(
                "use a smaller model (--preset smoke) or a GPU with more free memory"
                    .to_string(),
            ),
            BudgetError::DeviceTraining { largest_batch, .. } => Advice::usage(format!(
                "use --batch-size {largest_batch} or less, --gradient-checkpointing, or more GPUs (--gpus)"
            )),
            BudgetError::DeviceSampling { largest, .. } => Advice::usage(format!(
                "use --num {largest} or fewer (run sample again for more)"
            )),
            BudgetError::Sampling {
                num,
                need,
                available,
                largest,
            } => Advice::usage(format!(
                "ask for {largest} images or fewer (run sample again for more)"
            ))
            .with_message(format!(
                "--num {num} needs about {} to denoise at once, more than the {} of memory available; at most --num {largest} fits",
                gib(*need),
                gib(*available as f64)
            )),
        }
    }

    fn checkpoint(e: &CheckpointError) -> Advice {
        Advice::usage(
            match e {
                CheckpointError::NoCheckpoint { .. } => "pass a train-demo --out directory with checkpoints/step-*/, or one step-* directory",
                CheckpointError::NotFound { .. } => {
                    "pass a train-demo --out directory or one of its checkpoints/step-* directories"
                }
                CheckpointError::ReadState { .. } => {
                    "the checkpoint is incomplete; pick another step directory"
                }
                CheckpointError::BadState { .. } => {
                    "it was written by a different imgctl version, or damaged"
                }
                CheckpointError::Version { .. } => {
                    "use the imgctl version that wrote the checkpoint"
                }
            }
            .to_string(),
        )
    }

    fn session(e: &SessionError) -> Advice {
        let usage = |hint: &str| Advice::usage(hint.to_string());
        match e {
            SessionError::Fp16OnCpu => {
                usage("use --precision fp32 or bf16 on the CPU, or --device cuda")
            }
            SessionError::Unsupported { .. } => usage("use --precision fp32"),
            SessionError::OutDir { .. } | SessionError::CreateDir { .. } => {
                usage("choose a writable --out directory")
            }
            SessionError::OutDirFull { need, .. } => Advice::failure(format!(
                "the run needs about {} there: free space on that file system, or choose another --out",
                human_bytes(*need)
            )),
            SessionError::NotADirectory { .. } => {
                usage("move that file away, or choose another --out")
            }
            SessionError::DataFolder { .. } => {
                usage("pass a readable directory of PNG or JPEG images to --data")
            }
            SessionError::NoImages { .. } | SessionError::NoReadableImages { .. } => usage("put .png/.jpg/.jpeg files directly in the folder (subfolders are not searched), or omit --data for the synthetic set"),
        }
    }

    fn elastic(e: &ElasticError) -> Advice {
        match e {
            ElasticError::DoesNotDivide { global, .. } => Advice::usage(format!(
                "resume on a number of ranks that divides {global}, or pass --batch-size to choose a new per-rank batch (the global batch then changes)"
            )),
        }
    }

    fn run(e: &RunError) -> Advice {
        match e {
            RunError::RanksDisagree { .. } => Advice::failure(
                "every rank must see the same --out (a shared file system), with the same checkpoints"
                    .to_string(),
            ),
            RunError::AlreadyDone { .. } => {
                Advice::usage("pass a larger --steps to train further".to_string())
            }
            RunError::Interrupted { out, data, .. } => Advice::interrupted(format!(
                "continue with `imgctl train-demo --resume --out {}{}`",
                out.display(),
                match data {
                    Some(d) => format!(" --data {}", d.display()),
                    None => String::new(),
                }
            )),
            RunError::Diverged {
                kept, precision, ..
            } => Advice::failure(
                match (precision, kept) {
                    (Precision::Fp32, Some(_)) => "resume with a lower --lr",
                    (Precision::Fp32, None) => "start again with a lower --lr",
                    (_, Some(_)) => "resume with --precision fp32 or a lower --lr",
                    (_, None) => "start again with --precision fp32 or a lower --lr",
                }
                .to_string(),
            ),
        }
    }

    fn trainer(e: &TrainerError) -> Advice {
        match e {
            TrainerError::Libtorch { first, device, .. } => Advice::failure(
                if first.contains("out of memory") {
                    "lower --batch-size, or use --precision bf16"
                } else if matches!(device, Device::Cuda(_)) {
                    "check the GPU with `imgctl verify --level full`, and the kernel log (dmesg) for Xid errors"
                } else {
                    "rerun with RUST_BACKTRACE=1 and report the message"
                }
                .to_string(),
            ),
            TrainerError::ModelMismatch { .. } => Advice::usage(
                "resume with the same --preset / --config model section, or start a new --out directory"
                    .to_string(),
            ),
            TrainerError::MissingTensor { .. } | TrainerError::TensorMismatch { .. } => {
                Advice::usage("the checkpoint is damaged or from another model".to_string())
            }
        }
    }

    fn space(e: &SpaceError) -> Advice {
        match e {
            SpaceError::NotEnough { free, need, .. } => Advice::failure(format!(
                "free at least {} on that file system, or choose another --out",
                human_bytes(need - free)
            )),
            SpaceError::DiskFull {
                out,
                checkpoint,
                free,
                ..
            } => Advice::failure(format!(
                "a checkpoint needs about {} and {} in {}: free space there, then continue with --resume (or choose another --out)",
                human_bytes(*checkpoint),
                free_words(*free),
                out.display()
            )),
        }
    }

    fn out_lock(e: &OutLockError) -> Advice {
        match e {
            OutLockError::CannotWrite { .. } => {
                Advice::usage("choose a writable --out directory".to_string())
            }
            OutLockError::Held { out, pid } => {
                let stop = match pid {
                    Some(p) => format!("stop it (kill {p})"),
                    None => "stop it".to_string(),
                };
                Advice::usage(format!(
                    "wait for that run to end or {stop}, or choose another --out"
                ))
                .with_message(format!(
                    "--out {} is in use by another imgctl run ({})",
                    out.display(),
                    holder(*pid)
                ))
            }
        }
    }

    fn model_config(e: &ModelConfigError) -> Advice {
        let hint = match e {
            ModelConfigError::UnknownPreset { close, .. } => match close {
                Some(p) => format!(
                    "did you mean `{p}`? The presets are: {}",
                    preset_names().join(", ")
                ),
                None => format!("the presets are: {}", preset_names().join(", ")),
            },
            ModelConfigError::Yaml { .. } => "fields are those of diffusers' UNet2DModel config.json; unknown fields are rejected".to_string(),
            ModelConfigError::NotJson { .. } => {
                "pass the config.json that diffusers' save_pretrained wrote".to_string()
            }
            ModelConfigError::NotUNet { .. } => {
                "imgctl implements diffusers' UNet2DModel only".to_string()
            }
            ModelConfigError::Json { .. } => {
                "fields are those of diffusers' UNet2DModel config.json".to_string()
            }
            ModelConfigError::Read { .. } => {
                "pass a readable YAML file or a diffusers config.json".to_string()
            }
            ModelConfigError::Invalid { check, .. } => model_check_hint(*check).to_string(),
        };
        Advice::usage(hint)
    }

    fn model_check_hint(check: ModelCheck) -> &'static str {
        match check {
            ModelCheck::NoBlocks => "give one channel count per block, e.g. [32, 64]",
            ModelCheck::BlockCounts => {
                "give one down block type, one up block type and one channel count per level"
            }
            ModelCheck::Channels => "channel counts must be positive",
            ModelCheck::Positive => "it must be a positive integer",
            ModelCheck::TimeEmbedding => "use a positive width or null",
            ModelCheck::Dropout => "use a probability in [0, 1)",
            ModelCheck::NormEps => "use a small positive value such as 1e-5",
            ModelCheck::MidBlockScale => "use a finite non-zero factor (diffusers' default is 1)",
            ModelCheck::DownsamplePadding => "use 1 (diffusers' default) or 0",
            ModelCheck::ClassConditioning => {
                "imgctl trains unconditional models; set both to null"
            }
            ModelCheck::AttentionHeadDim => {
                "use a head dimension between 1 and the smallest channel count"
            }
            ModelCheck::NormGroups => "choose norm_num_groups dividing every block's channel count (and skip concatenations)",
            ModelCheck::SampleSize => "use a sample size divisible by 2^(number of blocks - 1)",
            ModelCheck::TooLarge => "use a value within the bound (diffusers' UNet2DModels stay far below it)",
        }
    }

    fn weights(e: &WeightsError) -> Advice {
        Advice::usage(
            match e {
                WeightsError::Write { .. } | WeightsError::CreateDir { .. } => {
                    "choose a writable output directory"
                }
                WeightsError::Read { .. } => "pass an existing .safetensors file",
                WeightsError::NotSafetensors { .. } => "pass a .safetensors file, e.g. diffusion_pytorch_model.safetensors written by diffusers",
                WeightsError::Mismatch { .. } => "pass a diffusers UNet2DModel state dict saved for the same config (--config / --preset)",
            }
            .to_string(),
        )
    }
}

#[cfg(all(test, feature = "torch"))]
mod tests {
    use std::path::PathBuf;

    use tch::Device;

    use crate::commands::error::{render_error, status_of};
    use crate::error::ExitStatus;
    use crate::train::config::{Preset, TrainConfig};
    use crate::train::out_lock::OutLockError;
    use crate::train::space::{checkpoint_bytes, SpaceError};
    use crate::train::trainer::TrainerError;

    fn text(e: impl Into<anyhow::Error>) -> (String, ExitStatus) {
        let e = e.into();
        (render_error(&e), status_of(&e))
    }

    /// The settings that used to fail only once training had started are
    /// usage errors, as every other invalid setting.
    #[test]
    fn late_failures_of_validation_are_usage_errors() {
        let edits: [&dyn Fn(&mut TrainConfig); 4] = [
            &|c| c.training.sample_steps = 5000,
            &|c| c.training.ema.power = f64::NAN,
            &|c| c.training.adam.weight_decay = f64::NAN,
            &|c| c.model.out_channels = 1,
        ];
        for edit in edits {
            let mut c = TrainConfig::preset(Preset::Tiny);
            edit(&mut c);
            let e = c.validate().unwrap_err();
            assert_eq!(status_of(&e), ExitStatus::Usage, "{e}");
        }
    }

    #[test]
    fn a_held_out_directory_names_the_flag_and_the_holder() {
        let (t, s) = text(OutLockError::Held {
            out: PathBuf::from("/runs/a"),
            pid: Some(4242),
        });
        assert_eq!(s, ExitStatus::Usage);
        assert_eq!(
            t.lines().next().unwrap(),
            "error: --out /runs/a is in use by another imgctl run (pid 4242)"
        );
    }

    #[test]
    fn a_full_disk_is_a_failure_whose_hint_sizes_a_checkpoint() {
        let (t, s) = text(SpaceError::DiskFull {
            what: "writing the checkpoint of step 3 under x".into(),
            out: PathBuf::from("/"),
            checkpoint: checkpoint_bytes(1_000_000),
            free: None,
        });
        assert_eq!(s, ExitStatus::Failure);
        assert!(
            t.contains("\nhint: a checkpoint needs about 16.2 MB and "),
            "{t}"
        );
    }

    #[test]
    fn a_libtorch_failure_on_the_cpu_has_a_hint() {
        let (t, s) = text(TrainerError::Libtorch {
            step: 7,
            first: "shape '[3]' is invalid for input of size 2".into(),
            device: Device::Cpu,
        });
        assert!(t.contains("\nhint: "), "{t}");
        assert!(
            t.ends_with("\nhint: rerun with RUST_BACKTRACE=1 and report the message\n"),
            "{t}"
        );
        assert_eq!(s, ExitStatus::Failure);
    }
}
