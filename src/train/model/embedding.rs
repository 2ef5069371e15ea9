//! The timestep embedding: diffusers' `Timesteps` (sinusoidal projection,
//! `get_timestep_embedding` in models/embeddings.py) and `TimestepEmbedding`
//! (`linear_1` → SiLU → `linear_2`).
//!
//! It owns turning integer (or fractional) timesteps into the embedding the
//! ResNets consume; it must not know about blocks.
use tch::{nn, Kind, Tensor};

use super::layers::Linear;

/// `max_period` of the sinusoidal embedding (DDPM; diffusers' default 10000).
const MAX_PERIOD: f64 = 10_000.0;

/// Sinusoidal embedding of `timesteps` (`[N]`) into `dim` channels, in f32.
///
/// Frequencies are `exp(-ln(10000)·i / (dim/2 - freq_shift))` for
/// `i < dim/2`; the result is `[sin, cos]` or, with `flip_sin_to_cos`,
/// `[cos, sin]`, zero-padded by one column when `dim` is odd.
pub fn timestep_embedding(
    timesteps: &Tensor,
    dim: i64,
    flip_sin_to_cos: bool,
    freq_shift: f64,
) -> Tensor {
    let half = dim / 2;
    let device = timesteps.device();
    // Same op order and dtype as diffusers, so the f32 result matches bit for bit.
    let exponent = Tensor::arange(half, (Kind::Float, device)) * (-MAX_PERIOD.ln());
    let exponent = exponent / (half as f64 - freq_shift);
    let freqs = exponent.exp();
    let args = timesteps.to_kind(Kind::Float).unsqueeze(1) * freqs.unsqueeze(0);
    let (sin, cos) = (args.sin(), args.cos());
    let emb = if flip_sin_to_cos {
        Tensor::cat(&[cos, sin], -1)
    } else {
        Tensor::cat(&[sin, cos], -1)
    };
    if dim % 2 == 1 {
        emb.constant_pad_nd([0, 1, 0, 0])
    } else {
        emb
    }
}

/// `TimestepEmbedding`: the MLP on top of the sinusoidal projection.
#[derive(Debug)]
pub struct TimestepEmbedding {
    linear_1: Linear,
    linear_2: Linear,
}

impl TimestepEmbedding {
    /// An MLP from `in_dim` to `embed_dim` (hidden width `embed_dim`).
    pub fn new(p: &nn::Path, in_dim: i64, embed_dim: i64) -> Self {
        Self {
            linear_1: Linear::new(&(p / "linear_1"), in_dim, embed_dim),
            linear_2: Linear::new(&(p / "linear_2"), embed_dim, embed_dim),
        }
    }

    /// Embeds `t_emb` (`[N, in_dim]`), cast first to the parameters' dtype as
    /// diffusers does (`t_emb.to(dtype=self.dtype)`).
    pub fn forward(&self, t_emb: &Tensor) -> Tensor {
        let t_emb = t_emb.to_kind(self.linear_1.weight.kind());
        // diffusers: TimestepEmbedding's act_fn defaults to "silu" and
        // UNet2DModel does not override it.
        self.linear_2.forward(&self.linear_1.forward(&t_emb).silu())
    }
}
