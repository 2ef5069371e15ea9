//! The settings of a training run: the model architecture, the training
//! hyper-parameters, the precision, and how presets, a YAML file and flags
//! combine into them.
//!
//! Order of precedence: preset < checkpoint (on `--resume`) < `--config` file <
//! flags. A config file has three optional top-level keys, `preset`, `model`
//! (fields of diffusers' `UNet2DModel` config, merged over the preset's) and
//! `training` (fields of [`TrainingConfig`], merged over the preset's); every
//! unknown key is an error naming its path. The command layer sets the
//! flags last, each on the [`TrainingConfig`] field of its name, so a field
//! is a setting's one home: its YAML key, default, check and
//! `--print-config` line. Owns parsing and validation only; must not touch
//! tensors or files other than the config file.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

// The value sets the flags, the file and the checkpoints share live in a leaf.
pub use crate::choices::{GradReduce, GroupNormKernel, Precision, Preset};

use super::ema::EmaConfig;
use super::model::config::unknown_preset;
use super::model::UNetConfig;
use super::optim::AdamWConfig;
use super::schedule::NUM_TRAIN_TIMESTEPS;

/// What can be wrong with a training config (all usage errors: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum TrainConfigError {
    /// A training setting out of range.
    #[error("invalid training setting: {what}")]
    Setting {
        /// The setting and its value (`steps is 0`).
        what: String,
        /// Which check it failed.
        check: SettingCheck,
    },
    /// A config file that does not parse or holds unknown keys.
    #[error("invalid training config {file}: {error}")]
    File {
        /// The file (or source) as named in messages.
        file: String,
        /// What is wrong with it.
        error: String,
    },
    /// A config file that cannot be read.
    #[error("cannot read config file {}: {error}", .path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// A model whose output width differs from its input width.
    #[error(
        "invalid model config: out_channels is {out_channels} but in_channels is {in_channels}"
    )]
    OutChannels {
        /// `out_channels`.
        out_channels: i64,
        /// `in_channels`.
        in_channels: i64,
    },
    /// A non-square `sample_size`.
    #[error("sample_size {h}x{w} is not square")]
    NotSquare {
        /// Height.
        h: i64,
        /// Width.
        w: i64,
    },
}

/// The range check a training setting failed ([`TrainConfigError::Setting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingCheck {
    /// `steps` is 0.
    Steps,
    /// `batch_size` is 0.
    BatchSize,
    /// `lr` is not positive.
    Lr,
    /// An Adam beta outside [0, 1).
    AdamBetas,
    /// Adam `eps` not positive or `weight_decay` negative.
    AdamEps,
    /// `max_grad_norm` not positive.
    MaxGradNorm,
    /// EMA `max_decay` or `inv_gamma` out of range.
    Ema,
    /// EMA `power` not positive.
    EmaPower,
    /// `bucket_cap_mb` not positive.
    BucketCap,
    /// `gpu_sample_every_s` negative or not a number.
    GpuSampleEvery,
    /// `keep` is 0.
    Keep,
    /// Sample grids of no image or no step.
    Sampling,
    /// More sampling steps than the scheduler has.
    SampleSteps,
    /// `synthetic_images` is 0.
    SyntheticImages,
    /// `prefetch` past [`MAX_PREFETCH`].
    Prefetch,
}

/// The largest `--config` file read (as a spec: 256 KiB; the presets'
/// resolved configs are under 4 KiB).
pub const MAX_CONFIG_BYTES: u64 = crate::yaml::MAX_YAML_BYTES;

/// The most batches a loader thread queues: more only holds memory.
pub const MAX_PREFETCH: usize = 64;

/// Training hyper-parameters and output cadence. Every field is optional in a
/// file; missing ones keep the preset's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainingConfig {
    /// Optimizer steps of the whole run.
    pub steps: u64,
    /// Images per process per step.
    pub batch_size: usize,
    /// Peak learning rate (train_unconditional.py `--learning_rate 1e-4`).
    pub lr: f64,
    /// Linear warm-up steps (train_unconditional.py `--lr_warmup_steps 500`),
    /// capped at a tenth of `steps` so short runs reach the peak rate.
    pub lr_warmup_steps: u64,
    /// AdamW hyper-parameters.
    pub adam: AdamWConfig,
    /// Global gradient-norm clip (train_unconditional.py: `clip_grad_norm_(…, 1.0)`).
    pub max_grad_norm: f64,
    /// EMA hyper-parameters.
    pub ema: EmaConfig,
    /// Random seed for weights, data, noise and timesteps.
    pub seed: u64,
    /// Precision; `None` means bf16 on CUDA and fp32 on CPU.
    pub precision: Option<Precision>,
    /// The dtype of the gradient all-reduce in bf16 data-parallel runs.
    #[serde(default)]
    pub grad_reduce: GradReduce,
    /// Run the model in channels-last (NHWC) memory layout, which tensor-core
    /// convolutions prefer on GPUs; results are the same.
    #[serde(default)]
    pub channels_last: bool,
    /// The GroupNorm (+ SiLU) kernels: ATen's, or imgctl's fused ones for
    /// channels-last CUDA activations (self-checked first; ATen's after a
    /// failed check).
    #[serde(default)]
    pub groupnorm: GroupNormKernel,
    /// Read the loss and gradient norm back to the host (the step's one
    /// synchronisation, and the finite check) every this many steps; 0 is
    /// auto: every step on the CPU, every 10 on CUDA ([`super::readback`]).
    #[serde(default)]
    pub read_every: u64,
    /// Recompute each down, mid and up block's activations in backward
    /// instead of keeping them (diffusers' `enable_gradient_checkpointing()`):
    /// less memory, about a forward's more compute, bit-identical results.
    #[serde(default)]
    pub gradient_checkpointing: bool,
    /// Average each gradient bucket across ranks as soon as backward has
    /// finished it, while backward goes on (as PyTorch DDP does); off, the
    /// all-reduce starts after backward. Results are bit-identical.
    #[serde(default = "default_overlap")]
    pub overlap_grad_reduce: bool,
    /// Gradient bucket cap in MiB (DDP's `bucket_cap_mb`, default 25).
    #[serde(default = "default_bucket_cap_mb")]
    pub bucket_cap_mb: f64,
    /// Checkpoint every N steps (0: only at the end).
    pub checkpoint_every: u64,
    /// Checkpoints to keep.
    pub keep: usize,
    /// Sample grid every N steps (0: never).
    pub sample_every: u64,
    /// Images in a sample grid.
    pub sample_num: i64,
    /// DDIM steps for the grids written during training.
    pub sample_steps: usize,
    /// Plain progress line every N steps when stderr is not a terminal (0: about 20 lines per run).
    pub log_every: u64,
    /// Seconds between two readings of the run's GPUs through NVML
    /// (utilisation, memory, power, temperature, SM clock, throttle
    /// reasons); 0: never. CPU runs read none.
    #[serde(default = "default_gpu_sample_every_s")]
    pub gpu_sample_every_s: f64,
    /// Data loader threads.
    pub workers: usize,
    /// Batches queued per loader thread.
    pub prefetch: usize,
    /// Images in the synthetic dataset.
    pub synthetic_images: usize,
    /// What the synthetic images look like: `shapes` (varied) or `bold`
    /// (one big shape on a flat ground; the smoke preset's).
    #[serde(default)]
    pub synthetic_style: crate::train::data::SyntheticStyle,
}

fn default_overlap() -> bool {
    true
}

/// Every 5 s: nvidia-smi's utilisation covers the last 1/6 s to 1 s (by
/// product, nvml.h `nvmlDeviceGetUtilizationRates`), so a reading every few
/// seconds is a sample, not an average; 5 s costs nothing next to a step and
/// still gives a 10-minute run 120 points.
fn default_gpu_sample_every_s() -> f64 {
    5.0
}

/// DDP's default `bucket_cap_mb=25` (torch/nn/parallel/distributed.py).
fn default_bucket_cap_mb() -> f64 {
    25.0
}

impl TrainingConfig {
    /// The gradient bucket cap in bytes.
    pub fn bucket_cap_bytes(&self) -> usize {
        (self.bucket_cap_mb * 1024.0 * 1024.0).round().max(1.0) as usize
    }

    /// The training settings of a preset.
    pub fn preset(preset: Preset) -> Self {
        // Defaults from diffusers' train_unconditional.py: batch 16, lr 1e-4, warm-up 500.
        let default = Self {
            // A demo length, not diffusers' 100 epochs: long enough to see the loss fall.
            steps: 1000,
            batch_size: 16,
            lr: 1e-4,
            lr_warmup_steps: 500,
            adam: AdamWConfig::default(),
            max_grad_norm: 1.0,
            ema: EmaConfig::default(),
            seed: 0,
            precision: None,
            grad_reduce: GradReduce::Fp32,
            channels_last: false,
            groupnorm: GroupNormKernel::Aten,
            read_every: 0,
            gradient_checkpointing: false,
            overlap_grad_reduce: default_overlap(),
            bucket_cap_mb: default_bucket_cap_mb(),
            // Twice per default run; K = 3 kept as in accelerate's `checkpoints_total_limit` examples.
            checkpoint_every: 500,
            keep: 3,
            sample_every: 500,
            // A 4×4 grid, 50 DDIM steps: diffusers' DDIMPipeline default step count.
            sample_num: 16,
            sample_steps: 50,
            log_every: 0,
            gpu_sample_every_s: default_gpu_sample_every_s(),
            // 4 threads × 2 queued batches keep a GPU step (tens of ms) fed: one
            // 64-image batch of synthetic data takes a few ms per thread.
            workers: 4,
            prefetch: 2,
            // Enough distinct images that the default model does not memorise them in a demo.
            synthetic_images: 4096,
            synthetic_style: crate::train::data::SyntheticStyle::Shapes,
        };
        match preset {
            Preset::Default => default,
            // The tiny model learns the synthetic set in a few hundred steps on a CPU at a
            // higher rate (measured: see tests/it/trainer.rs `train_tiny_loss_falls`).
            Preset::Tiny => Self {
                steps: 200,
                batch_size: 8,
                lr: 1e-3,
                lr_warmup_steps: 10,
                checkpoint_every: 100,
                sample_every: 100,
                sample_num: 8,
                sample_steps: 20,
                workers: 2,
                // Small enough for the tiny model to fit quickly.
                synthetic_images: 512,
                ..default
            },
            // A smoke run that visibly learns its data on a CPU: the tiny UNet
            // at 16×16 on the bold synthetic set (one big shape on a flat
            // ground). Measured on 2 shared CPU cores: 1200 steps in about
            // 2 minutes with start-up; the samples show the data's coloured
            // discs and squares (see tests/it/smoke.rs); 400 steps still
            // give blurred blobs.
            Preset::Smoke => Self {
                steps: 1200,
                batch_size: 16,
                lr: 2e-3,
                lr_warmup_steps: 50,
                checkpoint_every: 400,
                sample_every: 400,
                sample_num: 8,
                sample_steps: 20,
                workers: 1,
                synthetic_images: 512,
                synthetic_style: crate::train::data::SyntheticStyle::Bold,
                ..default
            },
        }
    }

    /// Warm-up actually used: `lr_warmup_steps`, at most a tenth of the run.
    pub fn effective_warmup(&self) -> u64 {
        self.lr_warmup_steps.min(self.steps / 10)
    }

    /// Checks ranges (exit 2 on a bad value).
    pub fn validate(&self) -> anyhow::Result<()> {
        let bad = |what: String, check: SettingCheck| -> anyhow::Result<()> {
            Err(TrainConfigError::Setting { what, check }.into())
        };
        if self.steps == 0 {
            return bad("steps is 0".into(), SettingCheck::Steps);
        }
        if self.batch_size == 0 {
            return bad("batch_size is 0".into(), SettingCheck::BatchSize);
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad(format!("lr is {}", self.lr), SettingCheck::Lr);
        }
        let a = self.adam;
        if !(0.0..1.0).contains(&a.beta1) || !(0.0..1.0).contains(&a.beta2) {
            return bad(
                format!("adam betas {} / {}", a.beta1, a.beta2),
                SettingCheck::AdamBetas,
            );
        }
        if a.eps.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
            || !(a.weight_decay.is_finite() && a.weight_decay >= 0.0)
        {
            return bad(
                format!("adam eps {} / weight_decay {}", a.eps, a.weight_decay),
                SettingCheck::AdamEps,
            );
        }
        if self.max_grad_norm.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return bad(
                format!("max_grad_norm is {}", self.max_grad_norm),
                SettingCheck::MaxGradNorm,
            );
        }
        if !(0.0..1.0).contains(&self.ema.max_decay)
            || self.ema.inv_gamma.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        {
            return bad("ema settings".into(), SettingCheck::Ema);
        }
        if !(self.ema.power.is_finite() && self.ema.power > 0.0) {
            return bad(
                format!("ema power is {}", self.ema.power),
                SettingCheck::EmaPower,
            );
        }
        if !(self.bucket_cap_mb.is_finite() && self.bucket_cap_mb > 0.0) {
            return bad(
                format!("bucket_cap_mb is {}", self.bucket_cap_mb),
                SettingCheck::BucketCap,
            );
        }
        if !(self.gpu_sample_every_s.is_finite() && self.gpu_sample_every_s >= 0.0) {
            return bad(
                format!("gpu_sample_every_s is {}", self.gpu_sample_every_s),
                SettingCheck::GpuSampleEvery,
            );
        }
        if self.keep == 0 {
            return bad("keep is 0".into(), SettingCheck::Keep);
        }
        if self.sample_every > 0 && (self.sample_num <= 0 || self.sample_steps == 0) {
            return bad("sample_num / sample_steps".into(), SettingCheck::Sampling);
        }
        // The samplers visit `sample_steps` of the scheduler's training
        // timesteps: more cannot be spaced (found at the first grid otherwise).
        if self.sample_every > 0 && self.sample_steps as i64 > NUM_TRAIN_TIMESTEPS {
            return bad(
                format!(
                    "sample_steps is {}, more than the scheduler's {NUM_TRAIN_TIMESTEPS} train timesteps",
                    self.sample_steps
                ),
                SettingCheck::SampleSteps,
            );
        }
        if self.synthetic_images == 0 {
            return bad(
                "synthetic_images is 0".into(),
                SettingCheck::SyntheticImages,
            );
        }
        if self.prefetch > MAX_PREFETCH {
            return bad(
                format!("prefetch is {}, more than {MAX_PREFETCH}", self.prefetch),
                SettingCheck::Prefetch,
            );
        }
        Ok(())
    }
}

/// Everything that shapes a run's numbers: stored in every checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// The preset this config started from.
    pub preset: Preset,
    /// The model architecture.
    pub model: UNetConfig,
    /// The training settings.
    pub training: TrainingConfig,
}

/// Recursively merges mapping `over` into `base` (scalars and lists replace).
fn merge(base: &mut serde_yaml::Value, over: serde_yaml::Value) {
    match (base, over) {
        (serde_yaml::Value::Mapping(b), serde_yaml::Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

fn config_error(source: &str, e: impl std::fmt::Display) -> anyhow::Error {
    TrainConfigError::File {
        file: source.to_string(),
        error: e.to_string(),
    }
    .into()
}

impl TrainConfig {
    /// The config of a preset.
    pub fn preset(preset: Preset) -> Self {
        Self {
            preset,
            model: UNetConfig::preset(preset),
            training: TrainingConfig::preset(preset),
        }
    }

    /// Applies a YAML document over `self` (see the module docs). A `preset`
    /// key in the file replaces the base when `preset_from_flag` is false.
    pub fn apply_yaml(
        &mut self,
        text: &str,
        source: &str,
        preset_from_flag: bool,
    ) -> anyhow::Result<()> {
        crate::yaml::nesting_ok(text).map_err(|e| config_error(source, e))?;
        let doc: serde_yaml::Value =
            serde_yaml::from_str(text).map_err(|e| config_error(source, e))?;
        let mut map = match doc {
            serde_yaml::Value::Mapping(m) => m,
            serde_yaml::Value::Null => return Ok(()),
            _ => return Err(config_error(source, "the document is not a mapping")),
        };
        if let Some(p) = map.remove("preset") {
            // The preset's serde names are its flag values (`crate::choices`).
            let preset: Preset = match p.as_str() {
                Some(name) => serde_yaml::from_value(p.clone())
                    .map_err(|_| anyhow::Error::from(unknown_preset(name)))?,
                None => return Err(config_error(source, "preset: expected a string")),
            };
            if !preset_from_flag {
                *self = Self::preset(preset);
            }
        }
        let mut base = serde_yaml::to_value(&*self).map_err(|e| config_error(source, e))?;
        let mut over = serde_yaml::Mapping::new();
        for (k, v) in map {
            match k.as_str() {
                Some("model") | Some("training") => {
                    over.insert(k, v);
                }
                _ => {
                    return Err(config_error(
                        source,
                        format!(
                            "unknown top-level key `{}` (expected preset, model, training)",
                            serde_yaml::to_string(&k).unwrap_or_default().trim()
                        ),
                    ))
                }
            }
        }
        merge(&mut base, serde_yaml::Value::Mapping(over));
        let merged: Self =
            serde_path_to_error::deserialize(base).map_err(|e| config_error(source, e))?;
        *self = merged;
        Ok(())
    }

    /// Reads and applies a config file.
    pub fn apply_file(&mut self, path: &Path, preset_from_flag: bool) -> anyhow::Result<()> {
        let text = crate::sys::fs::read_regular_text(path, MAX_CONFIG_BYTES).map_err(|error| {
            TrainConfigError::ReadFile {
                path: path.to_path_buf(),
                error,
            }
        })?;
        self.apply_yaml(&text, &path.display().to_string(), preset_from_flag)
    }

    /// Validates the model and the training settings: everything a run can
    /// check before its first step (exit 2 on a bad value), so that no
    /// setting fails once training has started.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.model.validate()?;
        // The model predicts the noise added to its input: a different
        // output width would broadcast in the loss and train nonsense.
        if self.model.out_channels != self.model.in_channels {
            return Err(TrainConfigError::OutChannels {
                out_channels: self.model.out_channels,
                in_channels: self.model.in_channels,
            }
            .into());
        }
        self.image_size()?;
        self.training.validate()
    }

    /// Side length of the (square) training images.
    pub fn image_size(&self) -> anyhow::Result<u32> {
        let (h, w) = self.model.sample_size.hw();
        if h != w {
            return Err(TrainConfigError::NotSquare { h, w }.into());
        }
        Ok(h as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_merges_over_the_preset() {
        let mut c = TrainConfig::preset(Preset::Tiny);
        c.apply_yaml(
            "training:\n  lr: 0.01\n  steps: 7\nmodel:\n  norm_num_groups: 4\n",
            "t.yaml",
            true,
        )
        .unwrap();
        assert_eq!(c.training.lr, 0.01);
        assert_eq!(c.training.steps, 7);
        assert_eq!(c.training.batch_size, 8);
        assert_eq!(c.model.norm_num_groups, 4);
    }

    #[test]
    fn unknown_keys_name_their_path() {
        let mut c = TrainConfig::preset(Preset::Tiny);
        let e = c
            .apply_yaml("training:\n  stepz: 7\n", "t.yaml", true)
            .unwrap_err();
        assert!(e.to_string().contains("stepz"), "{e}");
        assert!(e.to_string().contains("training"), "{e}");
        let e = c.apply_yaml("optimizer: {}\n", "t.yaml", true).unwrap_err();
        assert!(e.to_string().contains("optimizer"), "{e}");
    }

    #[test]
    fn preset_key_in_file_selects_the_base() {
        let mut c = TrainConfig::preset(Preset::Default);
        c.apply_yaml("preset: tiny\n", "t.yaml", false).unwrap();
        assert_eq!(c.preset, Preset::Tiny);
        assert_eq!(c.training.batch_size, 8);
    }

    /// Settings that used to fail only once training had started (the first
    /// sample grid) or never (a NaN weight decay or EMA power) fail validation.
    #[test]
    fn late_failures_are_caught_by_validation() {
        let invalid = |edit: &dyn Fn(&mut TrainConfig)| {
            let mut c = TrainConfig::preset(Preset::Tiny);
            edit(&mut c);
            let e = c.validate().unwrap_err();
            assert!(e.downcast_ref::<TrainConfigError>().is_some(), "{e:?}");
            e.to_string()
        };
        assert_eq!(
            invalid(&|c| c.training.sample_steps = 5000),
            "invalid training setting: sample_steps is 5000, more than the scheduler's 1000 train timesteps"
        );
        let mut c = TrainConfig::preset(Preset::Tiny);
        c.training.sample_steps = 1000;
        c.validate().unwrap();
        // Not sampling, the value is not used.
        c.training.sample_steps = 5000;
        c.training.sample_every = 0;
        c.validate().unwrap();
        assert!(invalid(&|c| c.training.ema.power = f64::NAN).contains("ema power is NaN"));
        assert!(invalid(&|c| c.training.adam.weight_decay = f64::NAN).contains("weight_decay NaN"));
        assert_eq!(
            invalid(&|c| c.training.gpu_sample_every_s = -1.0),
            "invalid training setting: gpu_sample_every_s is -1"
        );
        // 0 reads no GPU; a file without the key keeps the 5 s default.
        c.training.gpu_sample_every_s = 0.0;
        c.validate().unwrap();
        let mut c = TrainConfig::preset(Preset::Tiny);
        c.apply_yaml("training:\n  steps: 3\n", "t.yaml", false)
            .unwrap();
        assert_eq!(c.training.gpu_sample_every_s, 5.0);
        assert_eq!(
            invalid(&|c| c.model.out_channels = 1),
            "invalid model config: out_channels is 1 but in_channels is 3"
        );
    }

    /// The file's `preset:` takes the flag's names; a misspelt one is the
    /// model's unknown-preset error, with the near name.
    #[test]
    fn the_files_preset_is_read_by_its_flag_names() {
        let mut c = TrainConfig::preset(Preset::Default);
        c.apply_yaml("preset: smoke\n", "t.yaml", false).unwrap();
        assert_eq!(c.preset, Preset::Smoke);
        let e = c
            .apply_yaml("preset: tinyy\n", "t.yaml", false)
            .unwrap_err();
        assert_eq!(e.to_string(), "unknown model preset `tinyy`");
        let e = c.apply_yaml("preset: 3\n", "t.yaml", false).unwrap_err();
        assert!(e.to_string().contains("preset: expected a string"), "{e}");
        // The precision's aliases read in the file as on the command line.
        c.apply_yaml("training:\n  precision: bfloat16\n", "t.yaml", false)
            .unwrap();
        assert_eq!(c.training.precision, Some(Precision::Bf16));
    }
}
