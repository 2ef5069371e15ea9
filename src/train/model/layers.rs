//! Leaf layers of the UNet: convolution, linear, GroupNorm and activations.
//!
//! Each layer registers its parameters under the PyTorch names (`weight`,
//! `bias`) on the [`nn::Path`] it is given, initialised like PyTorch's own
//! `reset_parameters` so a fresh imgctl model is distributed like a fresh
//! diffusers one. Forward passes call libtorch's fused ops directly
//! (`conv2d`, `linear`, `group_norm`). This module must not know about blocks.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tch::{nn, Tensor};

use super::config::ActFn;
use crate::train::kernels::group_norm;

/// PyTorch's default init for conv and linear layers: `kaiming_uniform_(a=√5)`
/// on the weight and U(-1/√fan_in, 1/√fan_in) on the bias, which both reduce to
/// a uniform bound of 1/√fan_in (torch/nn/modules/conv.py, linear.py).
fn torch_default_init(fan_in: i64) -> nn::Init {
    let bound = 1.0 / (fan_in as f64).sqrt();
    nn::Init::Uniform {
        lo: -bound,
        up: bound,
    }
}

/// A 2-D convolution with bias (`nn.Conv2d`).
#[derive(Debug)]
pub struct Conv2d {
    /// `[out, in, k, k]`.
    pub weight: Tensor,
    /// `[out]`.
    pub bias: Tensor,
    stride: i64,
    padding: i64,
}

impl Conv2d {
    /// A `k×k` convolution from `cin` to `cout` channels.
    pub fn new(p: &nn::Path, cin: i64, cout: i64, k: i64, stride: i64, padding: i64) -> Self {
        let init = torch_default_init(cin * k * k);
        Self {
            weight: p.var("weight", &[cout, cin, k, k], init),
            bias: p.var("bias", &[cout], init),
            stride,
            padding,
        }
    }

    /// The same layer (its parameters shared, not copied).
    pub fn shallow_clone(&self) -> Self {
        Self {
            weight: self.weight.shallow_clone(),
            bias: self.bias.shallow_clone(),
            ..*self
        }
    }

    /// Appends the parameters (shared) to `out`.
    pub fn params(&self, out: &mut Vec<Tensor>) {
        out.extend([self.weight.shallow_clone(), self.bias.shallow_clone()]);
    }

    /// Applies the convolution.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.conv2d(
            &self.weight,
            Some(&self.bias),
            [self.stride, self.stride],
            [self.padding, self.padding],
            [1, 1],
            1,
        )
    }
}

/// A linear layer with bias (`nn.Linear`).
#[derive(Debug)]
pub struct Linear {
    /// `[out, in]`.
    pub weight: Tensor,
    /// `[out]`.
    pub bias: Tensor,
}

impl Linear {
    /// A linear map from `fan_in` to `fan_out` features.
    pub fn new(p: &nn::Path, fan_in: i64, fan_out: i64) -> Self {
        let init = torch_default_init(fan_in);
        Self {
            weight: p.var("weight", &[fan_out, fan_in], init),
            bias: p.var("bias", &[fan_out], init),
        }
    }

    /// The same layer (its parameters shared, not copied).
    pub fn shallow_clone(&self) -> Self {
        Self {
            weight: self.weight.shallow_clone(),
            bias: self.bias.shallow_clone(),
        }
    }

    /// Appends the parameters (shared) to `out`.
    pub fn params(&self, out: &mut Vec<Tensor>) {
        out.extend([self.weight.shallow_clone(), self.bias.shallow_clone()]);
    }

    /// Applies the layer to the last dimension of `x`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, Some(&self.bias))
    }
}

static FUSED_CALLS: AtomicU64 = AtomicU64::new(0);
static ATEN_CALLS: AtomicU64 = AtomicU64::new(0);

/// An affine GroupNorm (`nn.GroupNorm`, weight 1 and bias 0 at init).
#[derive(Debug)]
pub struct GroupNorm {
    weight: Tensor,
    bias: Tensor,
    groups: i64,
    eps: f64,
    fused: bool,
}

impl GroupNorm {
    /// A GroupNorm over `channels` in `groups` groups.
    pub fn new(p: &nn::Path, groups: i64, channels: i64, eps: f64) -> Self {
        Self {
            weight: p.var("weight", &[channels], nn::Init::Const(1.0)),
            bias: p.var("bias", &[channels], nn::Init::Const(0.0)),
            groups,
            eps,
            fused: false,
        }
    }

    /// The same layer (its parameters shared, not copied).
    pub fn shallow_clone(&self) -> Self {
        Self {
            weight: self.weight.shallow_clone(),
            bias: self.bias.shallow_clone(),
            ..*self
        }
    }

    /// Appends the parameters (shared) to `out`.
    pub fn params(&self, out: &mut Vec<Tensor>) {
        out.extend([self.weight.shallow_clone(), self.bias.shallow_clone()]);
    }

    /// Lets [`GroupNorm::forward_act`] run imgctl's fused GroupNorm + SiLU
    /// kernels ([`crate::train::kernels::group_norm`]) where they are ready
    /// (self-checked on the input's device and dtype) and take the input
    /// (channels-last CUDA); ATen's everywhere else.
    pub fn set_fused(&mut self, on: bool) {
        self.fused = on;
    }

    /// How many GroupNorm + SiLU calls of this process ran the fused kernels,
    /// and how many of a layer set to fused ran ATen's (the input not
    /// channels-last, a dtype not self-checked, ...): `(fused, aten)`.
    pub fn fused_calls() -> (u64, u64) {
        (FUSED_CALLS.load(Relaxed), ATEN_CALLS.load(Relaxed))
    }

    /// `activation(act, self.forward(x))`, through the fused kernels when
    /// [`GroupNorm::set_fused`] is on, `act` is SiLU and they take `x`.
    pub fn forward_act(&self, x: &Tensor, act: ActFn) -> Tensor {
        if self.fused
            && matches!(act, ActFn::Silu | ActFn::Swish)
            && group_norm::ready(x.device(), x.kind())
        {
            let op = group_norm::op(self.groups, self.eps, true);
            if op.refuses(x).is_none() {
                FUSED_CALLS.fetch_add(1, Relaxed);
                return op.apply(x, &self.weight, &self.bias).unwrap_or_else(|e| {
                    panic!("fused GroupNorm after its self-check passed: {e}")
                });
            }
        }
        if self.fused {
            ATEN_CALLS.fetch_add(1, Relaxed);
        }
        activation(act, &self.forward(x))
    }

    /// Normalises `x` (`[N, C, …]`) with libtorch's fused kernel.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.group_norm(
            self.groups,
            Some(&self.weight),
            Some(&self.bias),
            self.eps,
            true,
        )
    }
}

/// Applies an activation function (diffusers `get_activation`).
pub fn activation(act: ActFn, x: &Tensor) -> Tensor {
    match act {
        ActFn::Silu | ActFn::Swish => x.silu(),
        ActFn::Mish => x.mish(),
        ActFn::Gelu => x.gelu("none"),
        ActFn::Relu => x.relu(),
    }
}
