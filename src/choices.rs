//! The closed sets of training values that a flag, a YAML config and a JSON
//! file (checkpoint state, metrics, reports) spell alike: [`Precision`],
//! [`GradReduce`], [`Preset`], [`Sampler`] and [`GroupNormKernel`].
//!
//! One enum per set, for every edge: clap reads it as a flag value
//! ([`clap::ValueEnum`]: the names and aliases below), serde reads and writes
//! it in YAML and JSON (`rename_all = "lowercase"`, the same names, the same
//! aliases), and the training core holds it. A leaf: it imports no other
//! module, so the command line (built with or without the `torch` feature)
//! and `train/` both take the types from here. `name()` is the one spelling
//! a message or a report prints.
use serde::{Deserialize, Serialize};

/// Numeric precision of the forward and backward passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Everything in fp32.
    #[serde(alias = "float32", alias = "no")]
    #[value(alias = "float32", alias = "no")]
    Fp32,
    /// fp16 autocast (CUDA) with dynamic loss scaling; fp32 weights.
    #[serde(alias = "float16", alias = "half")]
    #[value(alias = "float16", alias = "half")]
    Fp16,
    /// The model in bf16 (weights, activations, gradients); the optimizer
    /// keeps fp32 master weights and moments.
    #[serde(alias = "bfloat16")]
    #[value(alias = "bfloat16")]
    Bf16,
}

impl Precision {
    /// The name on the command line, in config files and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fp32 => "fp32",
            Self::Fp16 => "fp16",
            Self::Bf16 => "bf16",
        }
    }
}

/// The dtype gradients are averaged in across ranks in a bf16 run (fp32 and
/// fp16 runs always hold fp32 gradients, so this only matters for bf16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum GradReduce {
    /// Cast the bf16 gradients to fp32, then all-reduce: PyTorch DDP's
    /// numerics under bf16 autocast and Megatron-LM's bf16 default; twice
    /// the traffic of bf16.
    #[default]
    #[serde(alias = "float32")]
    #[value(alias = "float32")]
    Fp32,
    /// All-reduce the bf16 gradients as they are: half the bytes on the
    /// wire, a bf16 rounding at every reduction step.
    #[serde(alias = "bfloat16")]
    #[value(alias = "bfloat16")]
    Bf16,
}

impl GradReduce {
    /// The name on the command line, in config files and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Fp32 => "fp32",
            Self::Bf16 => "bf16",
        }
    }
}

/// A bundled model and training preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// diffusers' train_unconditional.py UNet at 64×64.
    Default,
    /// The smallest real UNet (32×32, varied shapes), for tests: a short run
    /// draws noise; `smoke` is the one that shows learning on a CPU.
    Tiny,
    /// The tiny UNet at 16×16 on bold synthetic shapes: a CPU run that
    /// visibly learns within minutes.
    Smoke,
}

impl Preset {
    /// The name on the command line, in config files and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Tiny => "tiny",
            Self::Smoke => "smoke",
        }
    }
}

/// How to walk from noise back to an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Sampler {
    /// Ancestral DDPM (stochastic; diffusers `DDPMScheduler`).
    Ddpm,
    /// DDIM with eta 0 (deterministic; diffusers `DDIMScheduler`).
    Ddim,
}

impl Sampler {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ddpm => "ddpm",
            Self::Ddim => "ddim",
        }
    }
}

macro_rules! display_by_name {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    )*};
}
display_by_name!(Precision, GradReduce, Preset, Sampler);

#[cfg(test)]
mod tests {
    use clap::ValueEnum;
    use serde::de::DeserializeOwned;

    use super::*;

    /// Every variant: its clap name is its serde name (YAML and JSON) and its
    /// `name()`; every clap alias reads back as the same variant in YAML.
    fn round_trips<T>()
    where
        T: ValueEnum + Serialize + DeserializeOwned + PartialEq + std::fmt::Debug + Copy,
        T: std::fmt::Display,
    {
        assert!(!T::value_variants().is_empty());
        for v in T::value_variants() {
            let pv = v.to_possible_value().unwrap();
            let name = pv.get_name();
            assert_eq!(v.to_string(), name);
            assert_eq!(serde_yaml::to_string(v).unwrap().trim(), name);
            assert_eq!(serde_json::to_string(v).unwrap(), format!("\"{name}\""));
            for spelling in pv.get_name_and_aliases() {
                let yaml: T = serde_yaml::from_str(spelling).unwrap();
                assert_eq!(yaml, *v, "YAML `{spelling}`");
                assert_eq!(
                    T::from_str(spelling, false).unwrap(),
                    *v,
                    "CLI `{spelling}`"
                );
            }
        }
    }

    #[test]
    fn cli_names_are_the_serde_names() {
        round_trips::<Precision>();
        round_trips::<GradReduce>();
        round_trips::<Preset>();
        round_trips::<Sampler>();
    }

    /// The spellings the hand-written parsers took before the enums went to
    /// the command line, each still read (case-insensitively on the command
    /// line, where `ignore_case` is set).
    #[test]
    fn every_former_spelling_is_still_read() {
        for (s, p) in [
            ("fp32", Precision::Fp32),
            ("float32", Precision::Fp32),
            ("no", Precision::Fp32),
            ("fp16", Precision::Fp16),
            ("float16", Precision::Fp16),
            ("half", Precision::Fp16),
            ("bf16", Precision::Bf16),
            ("BFloat16", Precision::Bf16),
        ] {
            assert_eq!(Precision::from_str(s, true), Ok(p), "{s}");
        }
        for (s, g) in [
            ("fp32", GradReduce::Fp32),
            ("float32", GradReduce::Fp32),
            ("BF16", GradReduce::Bf16),
            ("bfloat16", GradReduce::Bf16),
        ] {
            assert_eq!(GradReduce::from_str(s, true), Ok(g), "{s}");
        }
        assert_eq!(Sampler::from_str("DDIM", true), Ok(Sampler::Ddim));
        assert!(Precision::from_str("fp8", true).is_err());
        assert!(Preset::from_str("tinyy", false).is_err());
    }
}

/// Which GroupNorm (+ SiLU) kernels the UNet runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum GroupNormKernel {
    /// ATen's `group_norm` then `silu`.
    #[default]
    Aten,
    /// imgctl's fused GroupNorm + SiLU for channels-last CUDA activations
    /// (compiled at run time with NVRTC, self-checked against ATen before
    /// first use); ATen's elsewhere.
    Fused,
}

impl GroupNormKernel {
    /// The name on the command line, in config files and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Aten => "aten",
            Self::Fused => "fused",
        }
    }
}
