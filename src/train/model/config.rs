//! [`UNetConfig`]: the architecture of a diffusers-compatible `UNet2DModel`.
//!
//! This module owns the configuration struct (field names identical to the
//! `config.json` that diffusers 0.33.1 writes for `UNet2DModel`), its presets,
//! its validation, and the analytic census of the architecture (parameter count
//! and forward FLOPs). It must not touch tensors: the census walks the same
//! block structure as [`super::unet`] with plain integers, so it also works
//! without a device.
use std::path::Path;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};

use super::error::{ModelCheck, ModelConfigError};
use crate::choices::Preset;

/// The names of the presets ([`Preset`]'s, as flags and files spell them).
pub fn preset_names() -> Vec<&'static str> {
    Preset::value_variants().iter().map(|p| p.name()).collect()
}

/// The error for a preset name that is none of [`preset_names`], with the
/// one it is close to, if any.
pub fn unknown_preset(name: &str) -> ModelConfigError {
    let close = preset_names()
        .into_iter()
        .find(|p| strsim::jaro_winkler(p, name) > 0.8);
    ModelConfigError::UnknownPreset {
        name: name.to_string(),
        close,
    }
}

/// A down block type (diffusers `get_down_block` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DownBlockType {
    /// `DownBlock2D`: ResNet layers, then a strided-conv downsampler.
    DownBlock2D,
    /// `AttnDownBlock2D`: ResNet layers each followed by self-attention.
    AttnDownBlock2D,
}

/// An up block type (diffusers `get_up_block` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpBlockType {
    /// `UpBlock2D`: ResNet layers over concatenated skips, then nearest-x2 + conv.
    UpBlock2D,
    /// `AttnUpBlock2D`: as `UpBlock2D`, each ResNet followed by self-attention.
    AttnUpBlock2D,
}

/// The mid block type; diffusers' `UNet2DModel` knows only this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MidBlockType {
    /// `UNetMidBlock2D`: ResNet, (attention, ResNet) × 1.
    UNetMidBlock2D,
}

/// An activation function (diffusers `get_activation` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActFn {
    /// SiLU, x·σ(x).
    Silu,
    /// Swish: diffusers' alias of SiLU.
    Swish,
    /// Mish, x·tanh(softplus(x)).
    Mish,
    /// GELU (exact, erf form; `nn.GELU()` default).
    Gelu,
    /// ReLU.
    Relu,
}

/// How a ResNet block injects the time embedding (`resnet_time_scale_shift`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeScaleShift {
    /// `default`: add the projected embedding before `norm2`.
    Default,
    /// `scale_shift`: project to 2×channels and apply `norm2(h)·(1+scale)+shift`.
    ScaleShift,
}

/// The only time embedding `imgctl` implements (`time_embedding_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeEmbeddingType {
    /// Sinusoidal positional embedding (DDPM), diffusers' `Timesteps`.
    Positional,
}

/// The only resampling flavour implemented (`downsample_type` / `upsample_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResampleType {
    /// A 3×3 convolution (stride 2 down; after nearest ×2 up).
    Conv,
}

/// `sample_size`: one side for square inputs, or `[height, width]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SampleSize {
    /// A square `n × n` image.
    Square(i64),
    /// `[height, width]`.
    Rect([i64; 2]),
}

impl SampleSize {
    /// `(height, width)`.
    pub fn hw(self) -> (i64, i64) {
        match self {
            SampleSize::Square(n) => (n, n),
            SampleSize::Rect([h, w]) => (h, w),
        }
    }
}

/// The architecture of a `UNet2DModel`, field for field as diffusers 0.33.1
/// names it in `config.json` (`diffusers/models/unets/unet_2d.py`), so a
/// diffusers config parses and an imgctl config loads into diffusers.
///
/// Fields left out of a file take the [`Default`] value: the `UNet2DModel`
/// that diffusers' `examples/unconditional_image_generation/train_unconditional.py`
/// builds. Unknown fields are an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UNetConfig {
    /// Height/width of the training images (the model accepts any size that
    /// is a multiple of `2^(blocks-1)`; this one drives FLOPs and sampling).
    pub sample_size: SampleSize,
    /// Channels of the input image (3 for RGB).
    pub in_channels: i64,
    /// Channels of the predicted noise (3 for RGB).
    pub out_channels: i64,
    /// Map the input from [0,1] to [-1,1] (`2x-1`) before `conv_in`.
    pub center_input_sample: bool,
    /// Time embedding kind; only `positional` is implemented.
    pub time_embedding_type: TimeEmbeddingType,
    /// Width of the time embedding MLP; `null` means `4 × block_out_channels[0]`.
    pub time_embedding_dim: Option<i64>,
    /// `downscale_freq_shift` of the sinusoidal embedding.
    pub freq_shift: f64,
    /// Order the sinusoidal embedding `[cos, sin]` instead of `[sin, cos]`.
    pub flip_sin_to_cos: bool,
    /// One entry per resolution level, from the input resolution down.
    pub down_block_types: Vec<DownBlockType>,
    /// The mid block; `null` for none.
    pub mid_block_type: Option<MidBlockType>,
    /// One entry per level, from the lowest resolution up.
    pub up_block_types: Vec<UpBlockType>,
    /// Output channels of each down block (mirrored for the up blocks).
    pub block_out_channels: Vec<i64>,
    /// ResNet layers per down block (up blocks get one more).
    pub layers_per_block: i64,
    /// `output_scale_factor` of the mid block's ResNets and attention.
    pub mid_block_scale_factor: f64,
    /// Padding of the stride-2 downsampling conv (0 pads right/bottom by one first).
    pub downsample_padding: i64,
    /// Downsampler kind; only `conv` is implemented.
    pub downsample_type: ResampleType,
    /// Upsampler kind; only `conv` is implemented.
    pub upsample_type: ResampleType,
    /// Dropout probability inside the ResNet blocks (training only).
    pub dropout: f64,
    /// Activation of the ResNet blocks (the time MLP and `conv_act` are always SiLU, as in diffusers).
    pub act_fn: ActFn,
    /// Channels per attention head; `null` means one head over all channels.
    pub attention_head_dim: Option<i64>,
    /// GroupNorm groups of every norm layer.
    pub norm_num_groups: i64,
    /// Groups of the mid-block attention's GroupNorm; `null` means
    /// `norm_num_groups` with `default` time scale shift, no norm otherwise.
    pub attn_norm_num_groups: Option<i64>,
    /// Epsilon of every GroupNorm.
    pub norm_eps: f64,
    /// How the ResNets inject the time embedding.
    pub resnet_time_scale_shift: TimeScaleShift,
    /// Put the attention layer in the mid block.
    pub add_attention: bool,
    /// Class conditioning; must be `null` (unconditional model).
    pub class_embed_type: Option<String>,
    /// Class conditioning; must be `null` (unconditional model).
    pub num_class_embeds: Option<i64>,
    /// Only used by diffusers' `learned` time embedding; accepted and ignored.
    pub num_train_timesteps: Option<i64>,
}

impl Default for UNetConfig {
    /// The `train_unconditional.py` model (diffusers 0.33.1 example):
    /// 64×64 RGB, blocks (128,128,256,256,512,512), 2 layers per block,
    /// attention in the 5th down block, the 2nd up block and the mid block.
    fn default() -> Self {
        use DownBlockType::*;
        use UpBlockType::*;
        Self {
            sample_size: SampleSize::Square(64),
            in_channels: 3,
            out_channels: 3,
            center_input_sample: false,
            time_embedding_type: TimeEmbeddingType::Positional,
            time_embedding_dim: None,
            freq_shift: 0.0,
            flip_sin_to_cos: true,
            down_block_types: vec![
                DownBlock2D,
                DownBlock2D,
                DownBlock2D,
                DownBlock2D,
                AttnDownBlock2D,
                DownBlock2D,
            ],
            mid_block_type: Some(MidBlockType::UNetMidBlock2D),
            up_block_types: vec![
                UpBlock2D,
                AttnUpBlock2D,
                UpBlock2D,
                UpBlock2D,
                UpBlock2D,
                UpBlock2D,
            ],
            block_out_channels: vec![128, 128, 256, 256, 512, 512],
            layers_per_block: 2,
            mid_block_scale_factor: 1.0,
            downsample_padding: 1,
            downsample_type: ResampleType::Conv,
            upsample_type: ResampleType::Conv,
            dropout: 0.0,
            act_fn: ActFn::Silu,
            attention_head_dim: Some(8),
            norm_num_groups: 32,
            attn_norm_num_groups: None,
            norm_eps: 1e-5,
            resnet_time_scale_shift: TimeScaleShift::Default,
            add_attention: true,
            class_embed_type: None,
            num_class_embeds: None,
            num_train_timesteps: None,
        }
    }
}

/// The most down (and up) blocks of a model: each halves the sample size
/// (diffusers' UNet2DModels have 4 to 6).
pub const MAX_BLOCKS: i64 = 8;
/// The most channels of a block (Stable Diffusion XL's widest is 1280).
pub const MAX_CHANNELS: i64 = 8192;
/// The most ResNets per down block (diffusers' UNets use 1 to 3).
pub const MAX_LAYERS_PER_BLOCK: i64 = 16;
/// The most image channels in and out (RGB is 3, latents 4 to 16).
pub const MAX_IMAGE_CHANNELS: i64 = 64;
/// The largest side of the samples, in pixels.
pub const MAX_SAMPLE_SIZE: i64 = 4096;

/// The analytic size of a model: what [`UNetConfig::census`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Census {
    /// Number of parameters (all trainable).
    pub params: u64,
    /// Multiply-accumulates of one forward pass of one image at `sample_size`
    /// (convolutions, linear layers and the two attention matmuls).
    pub forward_macs: u64,
}

impl UNetConfig {
    /// A real but small UNet (a step takes milliseconds on a CPU): 32×32 RGB,
    /// blocks (32, 64), one ResNet per down block, attention in the second
    /// down block, the first up block and the mid block, 8 norm groups.
    pub fn tiny() -> Self {
        Self {
            sample_size: SampleSize::Square(32),
            down_block_types: vec![DownBlockType::DownBlock2D, DownBlockType::AttnDownBlock2D],
            up_block_types: vec![UpBlockType::AttnUpBlock2D, UpBlockType::UpBlock2D],
            block_out_channels: vec![32, 64],
            layers_per_block: 1,
            norm_num_groups: 8,
            ..Self::default()
        }
    }

    /// The model of a preset.
    pub fn preset(preset: Preset) -> Self {
        match preset {
            Preset::Default => Self::default(),
            Preset::Tiny => Self::tiny(),
            // The tiny UNet at 16×16: four times fewer pixels, so a CPU run
            // reaches recognisable samples within minutes (the smoke preset).
            Preset::Smoke => Self {
                sample_size: SampleSize::Square(16),
                ..Self::tiny()
            },
        }
    }

    /// Parses a YAML model config (strict: unknown fields are an error naming
    /// the field path). `source` names the input in errors.
    pub fn from_yaml_str(text: &str, source: &str) -> anyhow::Result<Self> {
        crate::yaml::nesting_ok(text).map_err(|error| ModelConfigError::Yaml {
            file: source.to_string(),
            error,
        })?;
        let de = serde_yaml::Deserializer::from_str(text);
        let cfg: Self =
            serde_path_to_error::deserialize(de).map_err(|e| ModelConfigError::Yaml {
                file: source.to_string(),
                error: e.to_string(),
            })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses a diffusers `config.json` of a `UNet2DModel`. Keys starting with
    /// `_` (`_class_name`, `_diffusers_version`, …) are metadata and skipped;
    /// any other unknown key is an error.
    pub fn from_diffusers_json_str(text: &str, source: &str) -> anyhow::Result<Self> {
        let mut value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ModelConfigError::NotJson {
                file: source.to_string(),
                error: e.to_string(),
            })?;
        if let Some(class) = value.get("_class_name").and_then(|c| c.as_str()) {
            if class != "UNet2DModel" {
                return Err(ModelConfigError::NotUNet {
                    file: source.to_string(),
                    class: class.to_string(),
                }
                .into());
            }
        }
        if let Some(map) = value.as_object_mut() {
            map.retain(|k, _| !k.starts_with('_'));
        }
        let cfg: Self =
            serde_path_to_error::deserialize(value).map_err(|e| ModelConfigError::Json {
                file: source.to_string(),
                error: e.to_string(),
            })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Loads a model config file: `.json` as a diffusers `config.json`, anything
    /// else as YAML.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = crate::sys::fs::read_regular_text(path, crate::yaml::MAX_YAML_BYTES).map_err(
            |error| ModelConfigError::Read {
                path: path.to_path_buf(),
                error,
            },
        )?;
        let source = path.display().to_string();
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            Self::from_diffusers_json_str(&text, &source)
        } else {
            Self::from_yaml_str(&text, &source)
        }
    }

    /// The config as a diffusers `config.json` value (with `_class_name`), the
    /// form `UNet2DModel.from_config` reads.
    pub fn to_diffusers_json(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).expect("UNetConfig serializes");
        if let Some(map) = value.as_object_mut() {
            map.insert("_class_name".into(), "UNet2DModel".into());
            map.insert("_diffusers_version".into(), "0.33.1".into());
        }
        value
    }

    /// Checks the config describes a model that can be built and run: equal
    /// block counts, positive sizes, channels divisible by the norm groups, and
    /// a sample size the down/up path maps back onto itself.
    pub fn validate(&self) -> anyhow::Result<()> {
        let bad = |what: String, check: ModelCheck| -> anyhow::Result<()> {
            Err(ModelConfigError::Invalid { what, check }.into())
        };
        let n = self.block_out_channels.len();
        if n == 0 {
            return bad("block_out_channels is empty".into(), ModelCheck::NoBlocks);
        }
        if self.down_block_types.len() != n || self.up_block_types.len() != n {
            return bad(
                format!(
                    "block_out_channels has {n} entries but down_block_types has {} and up_block_types {}",
                    self.down_block_types.len(),
                    self.up_block_types.len()
                ),
                ModelCheck::BlockCounts,
            );
        }
        if let Some(c) = self.block_out_channels.iter().find(|&&c| c <= 0) {
            return bad(
                format!("block_out_channels contains {c}"),
                ModelCheck::Channels,
            );
        }
        for (name, v) in [
            ("in_channels", self.in_channels),
            ("out_channels", self.out_channels),
            ("layers_per_block", self.layers_per_block),
            ("norm_num_groups", self.norm_num_groups),
            (
                "attn_norm_num_groups",
                self.attn_norm_num_groups.unwrap_or(1),
            ),
        ] {
            if v <= 0 {
                return bad(format!("{name} is {v}"), ModelCheck::Positive);
            }
        }
        // Upper bounds well past any UNet2DModel published with diffusers, so
        // that what a field implies (the layers built, the tensors allocated,
        // the analytic census in u64) stays finite; the memory budget
        // (`train::budget`) then decides what fits this host.
        let (h, w) = self.sample_size.hw();
        for (name, v, max) in [
            ("the number of blocks", n as i64, MAX_BLOCKS),
            ("in_channels", self.in_channels, MAX_IMAGE_CHANNELS),
            ("out_channels", self.out_channels, MAX_IMAGE_CHANNELS),
            (
                "layers_per_block",
                self.layers_per_block,
                MAX_LAYERS_PER_BLOCK,
            ),
            (
                "a block's channels",
                self.block_out_channels.iter().copied().max().unwrap_or(0),
                MAX_CHANNELS,
            ),
            (
                "time_embedding_dim",
                self.time_embedding_dim.unwrap_or(0),
                MAX_CHANNELS * 4,
            ),
            ("the sample size", h.max(w), MAX_SAMPLE_SIZE),
        ] {
            if v > max {
                return bad(
                    format!("{name} is {v}, more than {max}"),
                    ModelCheck::TooLarge,
                );
            }
        }
        if let Some(d) = self.time_embedding_dim {
            if d <= 0 {
                return bad(
                    format!("time_embedding_dim is {d}"),
                    ModelCheck::TimeEmbedding,
                );
            }
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("dropout is {}", self.dropout), ModelCheck::Dropout);
        }
        if self.norm_eps <= 0.0 || !self.norm_eps.is_finite() {
            return bad(
                format!("norm_eps is {}", self.norm_eps),
                ModelCheck::NormEps,
            );
        }
        if self.mid_block_scale_factor == 0.0 || !self.mid_block_scale_factor.is_finite() {
            return bad(
                format!("mid_block_scale_factor is {}", self.mid_block_scale_factor),
                ModelCheck::MidBlockScale,
            );
        }
        if !matches!(self.downsample_padding, 0 | 1) {
            return bad(
                format!("downsample_padding is {}", self.downsample_padding),
                ModelCheck::DownsamplePadding,
            );
        }
        if self.class_embed_type.is_some() || self.num_class_embeds.is_some() {
            return bad(
                "class conditioning (class_embed_type / num_class_embeds) is not supported".into(),
                ModelCheck::ClassConditioning,
            );
        }
        for c in self.block_out_channels.iter().copied() {
            if let Some(hd) = self.attention_head_dim {
                if hd <= 0 || c < hd {
                    return bad(
                        format!("attention_head_dim {hd} does not fit a block of {c} channels"),
                        ModelCheck::AttentionHeadDim,
                    );
                }
            }
        }
        for (what, c, g) in self.group_norms() {
            if c % g != 0 {
                return bad(
                    format!("{what} has {c} channels, not divisible by {g} norm groups"),
                    ModelCheck::NormGroups,
                );
            }
        }
        let factor = 1_i64 << (n - 1);
        if h <= 0 || w <= 0 || h % factor != 0 || w % factor != 0 {
            return bad(
                format!("sample_size {h}x{w} is not a positive multiple of {factor} ({n} levels halve it {} times)", n - 1),
                ModelCheck::SampleSize,
            );
        }
        Ok(())
    }

    /// Width of the time embedding (`time_embedding_dim` or 4 × first block).
    pub fn time_embed_dim(&self) -> i64 {
        self.time_embedding_dim
            .unwrap_or(self.block_out_channels[0] * 4)
    }

    /// Heads and channels per head of an attention layer over `channels`
    /// (diffusers: `heads = channels // attention_head_dim`).
    pub fn attention_heads(&self, channels: i64) -> (i64, i64) {
        let head_dim = self.attention_head_dim.unwrap_or(channels);
        ((channels / head_dim).max(1), head_dim)
    }

    /// Norm groups of the mid block's attention, `None` for no GroupNorm
    /// (diffusers `UNetMidBlock2D`: `attn_groups`).
    pub fn mid_attention_groups(&self) -> Option<i64> {
        self.attn_norm_num_groups
            .or(match self.resnet_time_scale_shift {
                TimeScaleShift::Default => Some(self.norm_num_groups),
                TimeScaleShift::ScaleShift => None,
            })
    }

    /// `(prev_output_channel, in_channels (skip of the last layer), out_channels)`
    /// of up block `i`, as `UNet2DModel.__init__` derives them.
    pub fn up_block_channels(&self, i: usize) -> (i64, i64, i64) {
        let rev: Vec<i64> = self.block_out_channels.iter().rev().copied().collect();
        let prev = if i == 0 { rev[0] } else { rev[i - 1] };
        let input = rev[(i + 1).min(rev.len() - 1)];
        (prev, input, rev[i])
    }

    /// Every GroupNorm as (what, channels, groups), for validation.
    fn group_norms(&self) -> Vec<(String, i64, i64)> {
        let g = self.norm_num_groups;
        let mut out = Vec::new();
        let n = self.block_out_channels.len();
        let mut prev = self.block_out_channels[0];
        for (i, &c) in self.block_out_channels.iter().enumerate() {
            out.push((format!("down_blocks.{i}.resnets.0.norm1"), prev, g));
            out.push((format!("down_blocks.{i}.resnets.0.norm2"), c, g));
            prev = c;
        }
        if let Some(ag) = self.mid_attention_groups() {
            out.push((
                "mid_block.attentions.0.group_norm".into(),
                self.block_out_channels[n - 1],
                ag,
            ));
        }
        for i in 0..n {
            let (prev_out, input, c) = self.up_block_channels(i);
            let layers = self.layers_per_block + 1;
            for j in 0..layers {
                let skip = if j == layers - 1 { input } else { c };
                let res_in = if j == 0 { prev_out } else { c };
                out.push((format!("up_blocks.{i}.resnets.{j}.norm1"), res_in + skip, g));
            }
        }
        out
    }

    /// The analytic parameter count and forward MACs (one image at
    /// `sample_size`), walking the block structure of diffusers' `UNet2DModel`.
    pub fn census(&self) -> Census {
        let (h, w) = self.sample_size.hw();
        let mut c = Counter::default();
        let ted = self.time_embed_dim();
        let c0 = self.block_out_channels[0];
        // conv_in, time embedding MLP (Timesteps has no parameters).
        c.conv(self.in_channels, c0, 3, h * w);
        c.linear(c0, ted, 1);
        c.linear(ted, ted, 1);
        let (mut hh, mut ww) = (h, w);
        let n = self.block_out_channels.len();
        let mut out_ch = c0;
        for (i, ty) in self.down_block_types.iter().enumerate() {
            let in_ch = out_ch;
            out_ch = self.block_out_channels[i];
            for j in 0..self.layers_per_block {
                let cin = if j == 0 { in_ch } else { out_ch };
                self.count_resnet(&mut c, cin, out_ch, hh * ww);
                if *ty == DownBlockType::AttnDownBlock2D {
                    self.count_attention(&mut c, out_ch, Some(self.norm_num_groups), hh * ww);
                }
            }
            if i + 1 < n {
                // Stride-2 conv: output size (x + 2p - 3) / 2 + 1, after a (0,1) pad when p = 0.
                let pad_total = if self.downsample_padding == 0 {
                    1
                } else {
                    2 * self.downsample_padding
                };
                hh = (hh + pad_total - 3) / 2 + 1;
                ww = (ww + pad_total - 3) / 2 + 1;
                c.conv(out_ch, out_ch, 3, hh * ww);
            }
        }
        if self.mid_block_type.is_some() {
            let ch = self.block_out_channels[n - 1];
            self.count_resnet(&mut c, ch, ch, hh * ww);
            if self.add_attention {
                self.count_attention(&mut c, ch, self.mid_attention_groups(), hh * ww);
            }
            self.count_resnet(&mut c, ch, ch, hh * ww);
        }
        for (i, ty) in self.up_block_types.iter().enumerate() {
            let (prev_out, input, ch) = self.up_block_channels(i);
            let layers = self.layers_per_block + 1;
            for j in 0..layers {
                let skip = if j == layers - 1 { input } else { ch };
                let res_in = if j == 0 { prev_out } else { ch };
                self.count_resnet(&mut c, res_in + skip, ch, hh * ww);
                if *ty == UpBlockType::AttnUpBlock2D {
                    self.count_attention(&mut c, ch, Some(self.norm_num_groups), hh * ww);
                }
            }
            if i + 1 < n {
                hh *= 2;
                ww *= 2;
                c.conv(ch, ch, 3, hh * ww);
            }
        }
        c.norm(c0);
        c.conv(c0, self.out_channels, 3, hh * ww);
        Census {
            params: c.params,
            forward_macs: c.macs,
        }
    }

    fn count_resnet(&self, c: &mut Counter, cin: i64, cout: i64, hw: i64) {
        let ted = self.time_embed_dim();
        c.norm(cin);
        c.conv(cin, cout, 3, hw);
        let proj = match self.resnet_time_scale_shift {
            TimeScaleShift::Default => cout,
            TimeScaleShift::ScaleShift => 2 * cout,
        };
        c.linear(ted, proj, 1);
        c.norm(cout);
        c.conv(cout, cout, 3, hw);
        if cin != cout {
            c.conv(cin, cout, 1, hw);
        }
    }

    fn count_attention(&self, c: &mut Counter, ch: i64, groups: Option<i64>, hw: i64) {
        let (heads, head_dim) = self.attention_heads(ch);
        let inner = heads * head_dim;
        if groups.is_some() {
            c.norm(ch);
        }
        for _ in 0..3 {
            c.linear(ch, inner, hw);
        }
        c.linear(inner, ch, hw);
        // softmax(QKᵀ)V: two [hw × hw × inner] matmuls.
        c.macs += 2 * (hw * hw * inner) as u64;
    }

    /// Number of parameters, computed from the config (no tensors built).
    pub fn param_count(&self) -> u64 {
        self.census().params
    }

    /// Forward FLOPs of one image at `sample_size`: 2 × the MACs of the
    /// convolutions, linear layers and attention matmuls (the convention of
    /// `torch.utils.flop_counter`; norms and activations are not counted).
    pub fn forward_flops_per_image(&self) -> f64 {
        2.0 * self.census().forward_macs as f64
    }

    /// Training FLOPs of one image: forward + backward ≈ 3 × forward (the
    /// backward pass computes gradients for both inputs and weights).
    pub fn train_flops_per_image(&self) -> f64 {
        3.0 * self.forward_flops_per_image()
    }
}

/// Accumulates parameters and MACs of the layers the census visits.
#[derive(Default)]
struct Counter {
    params: u64,
    macs: u64,
}

impl Counter {
    /// A k×k convolution with bias producing `out_hw` output pixels.
    fn conv(&mut self, cin: i64, cout: i64, k: i64, out_hw: i64) {
        self.params += (cout * cin * k * k + cout) as u64;
        self.macs += (cout * cin * k * k * out_hw) as u64;
    }
    /// A linear layer with bias applied to `rows` vectors.
    fn linear(&mut self, fan_in: i64, fan_out: i64, rows: i64) {
        self.params += (fan_in * fan_out + fan_out) as u64;
        self.macs += (fan_in * fan_out * rows) as u64;
    }
    /// An affine GroupNorm.
    fn norm(&mut self, ch: i64) {
        self.params += 2 * ch as u64;
    }
}
