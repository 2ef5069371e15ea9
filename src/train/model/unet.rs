//! [`UNet2DModel`]: diffusers' `UNet2DModel` (models/unets/unet_2d.py) in tch.
//!
//! It owns the layout of the network (conv_in, time embedding, down blocks,
//! mid block, up blocks, output head) and the forward pass; parameters live
//! in the caller's `VarStore` under diffusers' state-dict names. It must not
//! do I/O: weights are read and written by [`super::weights`].
use tch::{nn, Tensor};

use super::blocks::{DownBlock, MidBlock, ResnetOpts, UpBlock};
use super::config::{ActFn, DownBlockType, UNetConfig, UpBlockType};
use super::embedding::{timestep_embedding, TimestepEmbedding};
use super::layers::{activation, Conv2d, GroupNorm};

/// A denoising UNet with diffusers' `UNet2DModel` architecture and names.
#[derive(Debug)]
pub struct UNet2DModel {
    conv_in: Conv2d,
    time_embedding: TimestepEmbedding,
    down_blocks: Vec<DownBlock>,
    mid_block: Option<MidBlock>,
    up_blocks: Vec<UpBlock>,
    conv_norm_out: GroupNorm,
    conv_out: Conv2d,
    cfg: UNetConfig,
    channels_last: bool,
    gradient_checkpointing: bool,
}

impl UNet2DModel {
    /// Builds the model under `p` (normally `vs.root()`), initialised like a
    /// fresh diffusers model (PyTorch default inits). `cfg` must be valid.
    ///
    /// # Panics
    /// When `cfg` fails [`UNetConfig::validate`]; configs loaded through
    /// [`UNetConfig::preset`] or [`UNetConfig::from_file`] are validated
    /// already. Use [`UNet2DModel::try_new`] for an error instead.
    pub fn new(p: &nn::Path, cfg: &UNetConfig) -> Self {
        match Self::try_new(p, cfg) {
            Ok(m) => m,
            Err(e) => panic!("UNet2DModel::new: {e:#}"),
        }
    }

    /// Validates `cfg`, then builds the model under `p`.
    pub fn try_new(p: &nn::Path, cfg: &UNetConfig) -> anyhow::Result<Self> {
        cfg.validate()?;
        let c0 = cfg.block_out_channels[0];
        let ted = cfg.time_embed_dim();
        let n = cfg.block_out_channels.len();
        let opts = ResnetOpts {
            groups: cfg.norm_num_groups,
            eps: cfg.norm_eps,
            temb_channels: ted,
            act: cfg.act_fn,
            time_scale_shift: cfg.resnet_time_scale_shift,
            dropout: cfg.dropout,
            output_scale_factor: 1.0,
        };
        let conv_in = Conv2d::new(&(p / "conv_in"), cfg.in_channels, c0, 3, 1, 1);
        let time_embedding = TimestepEmbedding::new(&(p / "time_embedding"), c0, ted);

        let mut down_blocks = Vec::with_capacity(n);
        let mut out_ch = c0;
        for (i, ty) in cfg.down_block_types.iter().enumerate() {
            let in_ch = out_ch;
            out_ch = cfg.block_out_channels[i];
            let attention =
                (*ty == DownBlockType::AttnDownBlock2D).then(|| cfg.attention_heads(out_ch));
            let downsample = (i + 1 < n).then_some(cfg.downsample_padding);
            down_blocks.push(DownBlock::new(
                &(p / "down_blocks" / i),
                in_ch,
                out_ch,
                cfg.layers_per_block,
                attention,
                downsample,
                opts,
            ));
        }

        let mid_block = cfg.mid_block_type.map(|_| {
            let ch = cfg.block_out_channels[n - 1];
            let attention = cfg.add_attention.then(|| {
                let (heads, hd) = cfg.attention_heads(ch);
                (heads, hd, cfg.mid_attention_groups())
            });
            let mid_opts = ResnetOpts {
                output_scale_factor: cfg.mid_block_scale_factor,
                ..opts
            };
            MidBlock::new(&(p / "mid_block"), ch, attention, mid_opts)
        });

        let mut up_blocks = Vec::with_capacity(n);
        for (i, ty) in cfg.up_block_types.iter().enumerate() {
            let (prev_out, skip_in, ch) = cfg.up_block_channels(i);
            let attention = (*ty == UpBlockType::AttnUpBlock2D).then(|| cfg.attention_heads(ch));
            up_blocks.push(UpBlock::new(
                &(p / "up_blocks" / i),
                prev_out,
                skip_in,
                ch,
                cfg.layers_per_block + 1,
                attention,
                i + 1 < n,
                opts,
            ));
        }

        let conv_norm_out = GroupNorm::new(
            &(p / "conv_norm_out"),
            cfg.norm_num_groups,
            c0,
            cfg.norm_eps,
        );
        let conv_out = Conv2d::new(&(p / "conv_out"), c0, cfg.out_channels, 3, 1, 1);
        Ok(Self {
            conv_in,
            time_embedding,
            down_blocks,
            mid_block,
            up_blocks,
            conv_norm_out,
            conv_out,
            cfg: cfg.clone(),
            channels_last: false,
            gradient_checkpointing: false,
        })
    }

    /// The config the model was built from.
    pub fn config(&self) -> &UNetConfig {
        &self.cfg
    }

    /// Runs the network in channels-last (NHWC) memory layout: the input is
    /// laid out NHWC and libtorch's convolutions keep that layout, which suits
    /// tensor-core convolutions on GPUs. Shapes and results are unchanged.
    pub fn set_channels_last(&mut self, on: bool) {
        self.channels_last = on;
    }

    /// Checkpoints the down, mid and up blocks as diffusers'
    /// `enable_gradient_checkpointing()` does, ResNet by ResNet (attention,
    /// resamplers and the up blocks' skip concatenation are not): in a
    /// forward that records a graph, each ResNet keeps only its inputs and
    /// backward recomputes its inside (with the forward's random numbers, so
    /// dropout matches). Losses and gradients are bit-identical to a run
    /// without it; memory drops, compute rises by about one forward.
    pub fn set_gradient_checkpointing(&mut self, on: bool) {
        self.gradient_checkpointing = on;
        for b in &mut self.down_blocks {
            b.set_gradient_checkpointing(on);
        }
        if let Some(m) = &mut self.mid_block {
            m.set_gradient_checkpointing(on);
        }
        for b in &mut self.up_blocks {
            b.set_gradient_checkpointing(on);
        }
    }

    /// Runs every GroupNorm followed by SiLU (the ResNets' and the output's)
    /// through imgctl's fused kernels where they are ready and take the
    /// input ([`crate::train::kernels`]: channels-last CUDA activations whose
    /// dtype passed the self-check); ATen's elsewhere.
    pub fn set_fused_group_norm(&mut self, on: bool) {
        self.conv_norm_out.set_fused(on);
        for b in &mut self.down_blocks {
            b.set_fused_group_norm(on);
        }
        if let Some(m) = &mut self.mid_block {
            m.set_fused_group_norm(on);
        }
        for b in &mut self.up_blocks {
            b.set_fused_group_norm(on);
        }
    }

    /// Whether blocks are checkpointed ([`Self::set_gradient_checkpointing`]).
    pub fn gradient_checkpointing(&self) -> bool {
        self.gradient_checkpointing
    }

    /// Predicts the noise in `x` (`[N, in_channels, H, W]`) at `timesteps`
    /// (int64 or float; a scalar, `[1]` or `[N]`, broadcast over the batch as
    /// diffusers does), in inference mode (no dropout). H and W must be
    /// multiples of `2^(blocks-1)`.
    pub fn forward(&self, x: &Tensor, timesteps: &Tensor) -> Tensor {
        self.forward_t(x, timesteps, false)
    }

    /// As [`UNet2DModel::forward`]; `train` enables dropout (when the config
    /// has any). The input is cast to the parameters' dtype (so a `bfloat16`
    /// VarStore takes f32 images); the output has the parameters' dtype.
    pub fn forward_t(&self, x: &Tensor, timesteps: &Tensor, train: bool) -> Tensor {
        let n = x.size()[0];
        let kind = self.conv_in.weight.kind();
        let mut x = if x.kind() == kind {
            x.shallow_clone()
        } else {
            x.to_kind(kind)
        };
        if self.cfg.center_input_sample {
            x = x * 2.0 - 1.0;
        }
        if self.channels_last {
            // NCHW shape with NHWC strides: torch's channels_last format.
            x = x.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2]);
        }

        // diffusers: a 0-d timestep becomes [1]; then `timesteps * ones(N)`.
        let t = if timesteps.dim() == 0 {
            timesteps.unsqueeze(0)
        } else {
            timesteps.shallow_clone()
        };
        let t = t.to_device(x.device());
        let t = match t.size()[0] {
            1 if n != 1 => t.expand([n], false),
            m if m == n => t,
            m => panic!("UNet2DModel::forward: {m} timesteps for a batch of {n}"),
        };
        let t_emb = timestep_embedding(
            &t,
            self.cfg.block_out_channels[0],
            self.cfg.flip_sin_to_cos,
            self.cfg.freq_shift,
        );
        let emb = self.time_embedding.forward(&t_emb);
        // Every ResNet applies its nonlinearity to the embedding before its
        // projection (diffusers ResnetBlock2D, skip_time_act=False): do it once.
        let temb_act = activation(self.cfg.act_fn, &emb);

        let mut h = self.conv_in.forward(&x);
        let mut skips = Vec::with_capacity(
            1 + self.down_blocks.len() * (self.cfg.layers_per_block as usize + 1),
        );
        skips.push(h.shallow_clone());
        for block in &self.down_blocks {
            h = block.forward(&h, &temb_act, &mut skips, train);
        }
        if let Some(mid) = &self.mid_block {
            h = mid.forward(&h, &temb_act, train);
        }
        for block in &self.up_blocks {
            debug_assert!(skips.len() >= block.num_skips());
            h = block.forward(&h, &temb_act, &mut skips, train);
        }
        // diffusers: conv_act is nn.SiLU() whatever act_fn says.
        let h = self.conv_norm_out.forward_act(&h, ActFn::Silu);
        self.conv_out.forward(&h)
    }
}
