//! The UNet's building blocks, as diffusers 0.33.1 defines them:
//! `ResnetBlock2D` (models/resnet.py), the self-`Attention` of the
//! "deprecated attention block" flavour with `AttnProcessor2_0`
//! (models/attention_processor.py), `Downsample2D` / `Upsample2D`
//! (models/downsampling.py, upsampling.py), and the `DownBlock2D`,
//! `AttnDownBlock2D`, `UpBlock2D`, `AttnUpBlock2D` and `UNetMidBlock2D`
//! containers (models/unets/unet_2d_blocks.py).
//!
//! Parameter paths mirror diffusers' module tree so `VarStore` keys equal
//! state-dict keys. This module owns the per-block forward math; it must not
//! decide the block layout of the whole network (that is [`super::unet`]).
use tch::{nn, Tensor};

use super::config::{ActFn, TimeScaleShift};
use super::layers::{activation, Conv2d, GroupNorm, Linear};

/// Settings shared by every ResNet of a model.
#[derive(Debug, Clone, Copy)]
pub struct ResnetOpts {
    /// GroupNorm groups.
    pub groups: i64,
    /// GroupNorm epsilon.
    pub eps: f64,
    /// Width of the time embedding.
    pub temb_channels: i64,
    /// Nonlinearity.
    pub act: ActFn,
    /// How the time embedding enters.
    pub time_scale_shift: TimeScaleShift,
    /// Dropout before `conv2` (training only).
    pub dropout: f64,
    /// The output is divided by this (1 except in a scaled mid block).
    pub output_scale_factor: f64,
}

/// `ResnetBlock2D`: norm1 → act → conv1 → (+ time proj) → norm2 → act →
/// dropout → conv2, plus a (1×1 conv) shortcut, divided by the output scale.
#[derive(Debug)]
pub struct ResnetBlock2D {
    norm1: GroupNorm,
    conv1: Conv2d,
    time_emb_proj: Linear,
    norm2: GroupNorm,
    conv2: Conv2d,
    conv_shortcut: Option<Conv2d>,
    opts: ResnetOpts,
    checkpoint: bool,
}

impl ResnetBlock2D {
    /// A block from `cin` to `cout` channels.
    pub fn new(p: &nn::Path, cin: i64, cout: i64, opts: ResnetOpts) -> Self {
        let proj = match opts.time_scale_shift {
            TimeScaleShift::Default => cout,
            TimeScaleShift::ScaleShift => 2 * cout,
        };
        Self {
            norm1: GroupNorm::new(&(p / "norm1"), opts.groups, cin, opts.eps),
            conv1: Conv2d::new(&(p / "conv1"), cin, cout, 3, 1, 1),
            time_emb_proj: Linear::new(&(p / "time_emb_proj"), opts.temb_channels, proj),
            norm2: GroupNorm::new(&(p / "norm2"), opts.groups, cout, opts.eps),
            conv2: Conv2d::new(&(p / "conv2"), cout, cout, 3, 1, 1),
            // diffusers: use_in_shortcut = in_channels != out_channels.
            conv_shortcut: (cin != cout)
                .then(|| Conv2d::new(&(p / "conv_shortcut"), cin, cout, 1, 1, 0)),
            opts,
            checkpoint: false,
        }
    }

    /// The same block (its parameters shared, not copied).
    pub fn shallow_clone(&self) -> Self {
        Self {
            norm1: self.norm1.shallow_clone(),
            conv1: self.conv1.shallow_clone(),
            time_emb_proj: self.time_emb_proj.shallow_clone(),
            norm2: self.norm2.shallow_clone(),
            conv2: self.conv2.shallow_clone(),
            conv_shortcut: self.conv_shortcut.as_ref().map(Conv2d::shallow_clone),
            opts: self.opts,
            checkpoint: false,
        }
    }

    /// Appends the parameters (shared) to `out`.
    pub fn params(&self, out: &mut Vec<Tensor>) {
        self.norm1.params(out);
        self.conv1.params(out);
        self.time_emb_proj.params(out);
        self.norm2.params(out);
        self.conv2.params(out);
        if let Some(sc) = &self.conv_shortcut {
            sc.params(out);
        }
    }

    /// Runs norm1 and norm2 (with the activation) through the fused
    /// GroupNorm + SiLU kernels where they apply ([`GroupNorm::set_fused`]).
    pub fn set_fused_group_norm(&mut self, on: bool) {
        self.norm1.set_fused(on);
        self.norm2.set_fused(on);
    }

    /// Checkpoints this block ([`crate::sys::torch_ext::checkpoint`]): in a
    /// forward that records a graph it keeps only its inputs, and backward
    /// recomputes it.
    pub fn set_checkpoint(&mut self, on: bool) {
        self.checkpoint = on;
    }

    /// `x`: `[N, cin, H, W]`; `temb_act`: the time embedding after the
    /// block's nonlinearity, `[N, temb_channels]` (computed once per forward).
    pub fn forward(&self, x: &Tensor, temb_act: &Tensor, train: bool) -> Tensor {
        // `x` feeds norm1 and the shortcut here, and often a skip outside:
        // through an alias, its gradient is summed inside the block first,
        // the order a checkpointed block (one autograd node) must sum in,
        // so results are bit-identical with and without checkpointing.
        let x = x.alias();
        if !self.checkpoint {
            return self.forward_inner(&x, temb_act, train);
        }
        let mut params = Vec::new();
        self.params(&mut params);
        let me = self.shallow_clone();
        crate::sys::torch_ext::checkpoint(&[&x, temb_act], &params, move |a| {
            vec![me.forward_inner(&a[0], &a[1], train)]
        })
        .unwrap_or_else(|e| panic!("{e:#}"))
        .remove(0)
    }

    fn forward_inner(&self, x: &Tensor, temb_act: &Tensor, train: bool) -> Tensor {
        let h = self.norm1.forward_act(x, self.opts.act);
        let h = self.conv1.forward(&h);
        let t = self
            .time_emb_proj
            .forward(temb_act)
            .unsqueeze(-1)
            .unsqueeze(-1);
        let mut h = match self.opts.time_scale_shift {
            TimeScaleShift::Default => self.norm2.forward_act(&(h + t), self.opts.act),
            TimeScaleShift::ScaleShift => {
                let st = t.chunk(2, 1);
                activation(
                    self.opts.act,
                    &(self.norm2.forward(&h) * (&st[0] + 1.0) + &st[1]),
                )
            }
        };
        if train && self.opts.dropout > 0.0 {
            h = h.dropout(self.opts.dropout, true);
        }
        let h = self.conv2.forward(&h);
        let out = match &self.conv_shortcut {
            Some(sc) => sc.forward(x) + h,
            None => x + h,
        };
        if self.opts.output_scale_factor == 1.0 {
            out
        } else {
            out / self.opts.output_scale_factor
        }
    }
}

/// The SDPA backends libtorch chose for this process's attention calls
/// (`at::_fused_sdp_choice`, the dispatcher's own decision: host-side, no
/// device sync), as torch names them: `flash`, `efficient`, `cudnn`, `math`.
static SDPA_BACKENDS: std::sync::Mutex<std::collections::BTreeSet<&'static str>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The query shapes (with dtype and device) whose choice is known: asked
/// once each, so that the step issues no extra operator (the op profile
/// counts `aten::_fused_sdp_choice` as imgctl's own work otherwise).
static SDPA_ASKED: std::sync::Mutex<Vec<(Vec<i64>, String)>> = std::sync::Mutex::new(Vec::new());

fn note_sdpa_backend(q: &Tensor, k: &Tensor, v: &Tensor) {
    let key = (q.size(), format!("{:?} {:?}", q.kind(), q.device()));
    {
        let mut asked = SDPA_ASKED.lock().unwrap_or_else(|p| p.into_inner());
        if asked.contains(&key) {
            return;
        }
        asked.push(key);
    }
    // torch's sdp::SDPBackend (aten/src/ATen/native/transformers/sdp_utils_cpp.h).
    let name =
        match Tensor::f_internal_fused_sdp_choice(q, k, v, None::<Tensor>, 0.0, false, None, false)
        {
            Ok(0) => "math",
            Ok(1) => "flash",
            Ok(2) => "efficient",
            Ok(3) => "cudnn",
            Ok(4) => "overrideable",
            _ => "unknown",
        };
    SDPA_BACKENDS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name);
}

/// The SDPA backends the attention layers ran on so far in this process
/// (sorted, joined with `+`: `flash`, or `flash+math` when shapes differ);
/// `None` before any attention ran.
pub fn sdpa_backends() -> Option<String> {
    let seen = SDPA_BACKENDS.lock().unwrap_or_else(|p| p.into_inner());
    (!seen.is_empty()).then(|| seen.iter().copied().collect::<Vec<_>>().join("+"))
}

/// Self-attention over the pixels of a feature map with a residual
/// connection (`Attention(..., residual_connection=True, bias=True,
/// _from_deprecated_attn_block=True)` in diffusers).
///
/// The q/k/v projections are kept as three parameters (diffusers' names) but
/// applied as one GEMM, and the attention itself is libtorch's fused
/// `scaled_dot_product_attention` (scale 1/√head_dim, as diffusers).
#[derive(Debug)]
pub struct Attention {
    group_norm: Option<GroupNorm>,
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    to_out: Linear,
    heads: i64,
    head_dim: i64,
    rescale_output_factor: f64,
}

impl Attention {
    /// Attention over `channels` with `heads × head_dim` inner width; a
    /// GroupNorm of `groups` groups first when `groups` is set.
    pub fn new(
        p: &nn::Path,
        channels: i64,
        heads: i64,
        head_dim: i64,
        groups: Option<i64>,
        eps: f64,
        rescale_output_factor: f64,
    ) -> Self {
        let inner = heads * head_dim;
        Self {
            group_norm: groups.map(|g| GroupNorm::new(&(p / "group_norm"), g, channels, eps)),
            to_q: Linear::new(&(p / "to_q"), channels, inner),
            to_k: Linear::new(&(p / "to_k"), channels, inner),
            to_v: Linear::new(&(p / "to_v"), channels, inner),
            to_out: Linear::new(&(p / "to_out" / 0), inner, channels),
            heads,
            head_dim,
            rescale_output_factor,
        }
    }

    /// `x`: `[N, C, H, W]` → same shape.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (n, c, h, w) = x.size4().expect("attention input is NCHW");
        let hw = h * w;
        // GroupNorm over [N, C, H·W] equals GroupNorm over [N, C, H, W].
        let normed = match &self.group_norm {
            Some(gn) => gn.forward(x),
            None => x.shallow_clone(),
        };
        let tokens = normed.reshape([n, c, hw]).transpose(1, 2); // [N, HW, C]
        let w_qkv = Tensor::cat(
            &[&self.to_q.weight, &self.to_k.weight, &self.to_v.weight],
            0,
        );
        let b_qkv = Tensor::cat(&[&self.to_q.bias, &self.to_k.bias, &self.to_v.bias], 0);
        // [N, HW, 3, heads, hd] → [3, N, heads, HW, hd]
        let qkv = tokens
            .linear(&w_qkv, Some(&b_qkv))
            .reshape([n, hw, 3, self.heads, self.head_dim])
            .permute([2, 0, 3, 1, 4]);
        // unbind, not three selects: its backward stacks the three
        // gradients into one tensor, where each select's backward fills a
        // zero tensor of all three and copies its third in (the op profile,
        // `train-demo --benchmark --op-profile`, counted 9 MiB a step more).
        let (q, k, v) = match &qkv.unbind(0)[..] {
            [q, k, v] => (q.shallow_clone(), k.shallow_clone(), v.shallow_clone()),
            _ => unreachable!("the qkv tensor's first dimension is 3"),
        };
        note_sdpa_backend(&q, &k, &v);
        let o = Tensor::scaled_dot_product_attention(
            &q,
            &k,
            &v,
            None::<Tensor>,
            0.0,
            false,
            None,
            false,
        );
        let inner = self.heads * self.head_dim;
        let o = o.transpose(1, 2).reshape([n, hw, inner]);
        let o = self
            .to_out
            .forward(&o)
            .transpose(1, 2)
            .reshape([n, c, h, w]);
        // diffusers' order, `o + x`: an elementwise result takes its first
        // operand's layout, and `o` (a transposed view reshaped) has NHWC
        // strides, so the blocks after an attention get channels-last
        // activations in an NCHW model. `x + o` keeps them NCHW and cut the
        // ATen copies a step (op profile, default model, CPU bf16 batch 2:
        // aten::contiguous 118 -> 68 calls, 286 -> 34 MiB) but made the CPU
        // step slower (tiny preset, interleaved pairs: 0.89x in bf16, 0.96x
        // in fp32): oneDNN's convolutions prefer NHWC and reorder NCHW
        // inputs internally, out of the profiler's sight. Kept until a GPU
        // run measures the trade there.
        let out = o + x;
        if self.rescale_output_factor == 1.0 {
            out
        } else {
            out / self.rescale_output_factor
        }
    }
}

/// `Downsample2D(use_conv=True, name="op")`: a stride-2 3×3 conv; with padding
/// 0 the input is first padded by one on the right and bottom.
#[derive(Debug)]
pub struct Downsample2D {
    conv: Conv2d,
    padding: i64,
}

impl Downsample2D {
    /// A downsampler keeping `channels`.
    pub fn new(p: &nn::Path, channels: i64, padding: i64) -> Self {
        Self {
            conv: Conv2d::new(&(p / "conv"), channels, channels, 3, 2, padding),
            padding,
        }
    }

    /// Halves H and W.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        if self.padding == 0 {
            self.conv.forward(&x.constant_pad_nd([0, 1, 0, 1]))
        } else {
            self.conv.forward(x)
        }
    }
}

/// `Upsample2D(use_conv=True)`: nearest-neighbour ×2, then a 3×3 conv.
#[derive(Debug)]
pub struct Upsample2D {
    conv: Conv2d,
}

impl Upsample2D {
    /// An upsampler keeping `channels`.
    pub fn new(p: &nn::Path, channels: i64) -> Self {
        Self {
            conv: Conv2d::new(&(p / "conv"), channels, channels, 3, 1, 1),
        }
    }

    /// Doubles H and W.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (_, _, h, w) = x.size4().expect("upsample input is NCHW");
        let up = x.upsample_nearest2d([2 * h, 2 * w], 2.0, 2.0);
        self.conv.forward(&up)
    }
}

/// A `DownBlock2D` or `AttnDownBlock2D`.
#[derive(Debug)]
pub struct DownBlock {
    resnets: Vec<ResnetBlock2D>,
    attentions: Vec<Attention>,
    downsampler: Option<Downsample2D>,
}

/// The `j`-th attention of a down or up block (diffusers' `attentions.{j}`),
/// normed with the block's groups, after the `j`-th ResNet.
fn block_attention(
    p: &nn::Path,
    j: i64,
    channels: i64,
    (heads, head_dim): (i64, i64),
    opts: ResnetOpts,
) -> Attention {
    Attention::new(
        &(p / "attentions" / j),
        channels,
        heads,
        head_dim,
        Some(opts.groups),
        opts.eps,
        opts.output_scale_factor,
    )
}

impl DownBlock {
    /// `layers` ResNets from `cin` to `cout` channels, each followed by
    /// attention when `attention` is `Some((heads, head_dim))`, then a
    /// downsampler unless this is the last block.
    pub fn new(
        p: &nn::Path,
        cin: i64,
        cout: i64,
        layers: i64,
        attention: Option<(i64, i64)>,
        downsample_padding: Option<i64>,
        opts: ResnetOpts,
    ) -> Self {
        let mut resnets = Vec::new();
        let mut attentions = Vec::new();
        for j in 0..layers {
            let i = if j == 0 { cin } else { cout };
            resnets.push(ResnetBlock2D::new(&(p / "resnets" / j), i, cout, opts));
            if let Some(heads) = attention {
                attentions.push(block_attention(p, j, cout, heads, opts));
            }
        }
        let downsampler =
            downsample_padding.map(|pad| Downsample2D::new(&(p / "downsamplers" / 0), cout, pad));
        Self {
            resnets,
            attentions,
            downsampler,
        }
    }

    /// Checkpoints each ResNet (diffusers' gradient checkpointing).
    pub fn set_gradient_checkpointing(&mut self, on: bool) {
        self.resnets.iter_mut().for_each(|r| r.set_checkpoint(on));
    }

    /// [`ResnetBlock2D::set_fused_group_norm`] on every ResNet.
    pub fn set_fused_group_norm(&mut self, on: bool) {
        self.resnets
            .iter_mut()
            .for_each(|r| r.set_fused_group_norm(on));
    }

    /// Runs the block, pushing every output the up path will consume on `skips`.
    pub fn forward(
        &self,
        x: &Tensor,
        temb_act: &Tensor,
        skips: &mut Vec<Tensor>,
        train: bool,
    ) -> Tensor {
        let mut h = x.shallow_clone();
        for (j, resnet) in self.resnets.iter().enumerate() {
            h = resnet.forward(&h, temb_act, train);
            if let Some(attn) = self.attentions.get(j) {
                h = attn.forward(&h);
            }
            skips.push(h.shallow_clone());
        }
        if let Some(down) = &self.downsampler {
            h = down.forward(&h);
            skips.push(h.shallow_clone());
        }
        h
    }
}

/// `UNetMidBlock2D` with one layer: ResNet, attention (optional), ResNet.
#[derive(Debug)]
pub struct MidBlock {
    resnets: Vec<ResnetBlock2D>,
    attention: Option<Attention>,
}

impl MidBlock {
    /// A mid block over `channels`; `attention` is `(heads, head_dim, groups)`.
    pub fn new(
        p: &nn::Path,
        channels: i64,
        attention: Option<(i64, i64, Option<i64>)>,
        opts: ResnetOpts,
    ) -> Self {
        let resnets = (0..2)
            .map(|j| ResnetBlock2D::new(&(p / "resnets" / j), channels, channels, opts))
            .collect();
        let attention = attention.map(|(heads, hd, groups)| {
            Attention::new(
                &(p / "attentions" / 0),
                channels,
                heads,
                hd,
                groups,
                opts.eps,
                opts.output_scale_factor,
            )
        });
        Self { resnets, attention }
    }

    /// Checkpoints each ResNet (diffusers' gradient checkpointing).
    pub fn set_gradient_checkpointing(&mut self, on: bool) {
        self.resnets.iter_mut().for_each(|r| r.set_checkpoint(on));
    }

    /// [`ResnetBlock2D::set_fused_group_norm`] on every ResNet.
    pub fn set_fused_group_norm(&mut self, on: bool) {
        self.resnets
            .iter_mut()
            .for_each(|r| r.set_fused_group_norm(on));
    }

    /// Runs the block.
    pub fn forward(&self, x: &Tensor, temb_act: &Tensor, train: bool) -> Tensor {
        let mut h = self.resnets[0].forward(x, temb_act, train);
        if let Some(attn) = &self.attention {
            h = attn.forward(&h);
        }
        self.resnets[1].forward(&h, temb_act, train)
    }
}

/// An `UpBlock2D` or `AttnUpBlock2D`.
#[derive(Debug)]
pub struct UpBlock {
    resnets: Vec<ResnetBlock2D>,
    attentions: Vec<Attention>,
    upsampler: Option<Upsample2D>,
}

impl UpBlock {
    /// `layers` ResNets, the first fed `prev_out` channels from below and
    /// each concatenated with a skip (`cout` channels, `skip_in` for the
    /// last), optional attention `(heads, head_dim)`, then an upsampler
    /// unless this is the last block.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        p: &nn::Path,
        prev_out: i64,
        skip_in: i64,
        cout: i64,
        layers: i64,
        attention: Option<(i64, i64)>,
        upsample: bool,
        opts: ResnetOpts,
    ) -> Self {
        let mut resnets = Vec::new();
        let mut attentions = Vec::new();
        for j in 0..layers {
            let skip = if j == layers - 1 { skip_in } else { cout };
            let res_in = if j == 0 { prev_out } else { cout };
            resnets.push(ResnetBlock2D::new(
                &(p / "resnets" / j),
                res_in + skip,
                cout,
                opts,
            ));
            if let Some(heads) = attention {
                attentions.push(block_attention(p, j, cout, heads, opts));
            }
        }
        let upsampler = upsample.then(|| Upsample2D::new(&(p / "upsamplers" / 0), cout));
        Self {
            resnets,
            attentions,
            upsampler,
        }
    }

    /// Checkpoints each ResNet (diffusers' gradient checkpointing).
    pub fn set_gradient_checkpointing(&mut self, on: bool) {
        self.resnets.iter_mut().for_each(|r| r.set_checkpoint(on));
    }

    /// [`ResnetBlock2D::set_fused_group_norm`] on every ResNet.
    pub fn set_fused_group_norm(&mut self, on: bool) {
        self.resnets
            .iter_mut()
            .for_each(|r| r.set_fused_group_norm(on));
    }

    /// Number of skips this block consumes.
    pub fn num_skips(&self) -> usize {
        self.resnets.len()
    }

    /// Runs the block, popping its skips (last pushed first).
    pub fn forward(
        &self,
        x: &Tensor,
        temb_act: &Tensor,
        skips: &mut Vec<Tensor>,
        train: bool,
    ) -> Tensor {
        let mut h = x.shallow_clone();
        for (j, resnet) in self.resnets.iter().enumerate() {
            let skip = skips
                .pop()
                .expect("the down path pushed one skip per up-block ResNet");
            h = resnet.forward(&Tensor::cat(&[&h, &skip], 1), temb_act, train);
            if let Some(attn) = self.attentions.get(j) {
                h = attn.forward(&h);
            }
        }
        if let Some(up) = &self.upsampler {
            h = up.forward(&h);
        }
        h
    }
}
