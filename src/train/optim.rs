//! AdamW over a flat fp32 parameter buffer, the learning-rate schedule,
//! global-norm gradient clipping and dynamic loss scaling for fp16.
//!
//! Written here rather than with tch's `nn::Optimizer` because that one
//! cannot export its moment buffers for checkpoints. The update itself is
//! libtorch's fused AdamW kernel (`aten::_fused_adamw_`, torch.optim.AdamW's
//! `fused=True`), reached through our C++ shim (`csrc/torch_ext.cpp`): one
//! pass over weights, gradients and moments instead of ten elementwise
//! kernels, with the clipping (and fp16 unscaling) folded in as its gradient
//! divisor. Owns the update math and its state; must not know about models,
//! data or files.
use tch::{Kind, Tensor};

use crate::sys::torch_ext::{self, FusedError};

/// AdamW hyper-parameters. Defaults are diffusers' `train_unconditional.py`
/// (`--adam_beta1 0.95 --adam_beta2 0.999 --adam_weight_decay 1e-6 --adam_epsilon 1e-08`, lr 1e-4).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamWConfig {
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Decoupled weight decay (Loshchilov & Hutter 2019).
    pub weight_decay: f64,
    /// Denominator epsilon.
    pub eps: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            beta1: 0.95,
            beta2: 0.999,
            weight_decay: 1e-6,
            eps: 1e-8,
        }
    }
}

/// AdamW state over one flat buffer: `exp_avg`, `exp_avg_sq` and the step count.
#[derive(Debug)]
pub struct AdamW {
    /// Hyper-parameters.
    pub config: AdamWConfig,
    /// First moments (same layout as the flat parameters).
    pub exp_avg: Tensor,
    /// Second moments.
    pub exp_avg_sq: Tensor,
    /// Number of updates applied so far.
    pub step: u64,
    /// `step` as the float scalar on the parameters' device the fused kernel reads.
    step_t: Tensor,
    /// Why the fused kernel is not used (it failed once); `None` while it is.
    unfused_reason: Option<String>,
}

impl AdamW {
    /// Zeroed state for a flat fp32 parameter buffer like `params`.
    pub fn new(config: AdamWConfig, params: &Tensor) -> Self {
        Self {
            config,
            exp_avg: params.zeros_like(),
            exp_avg_sq: params.zeros_like(),
            step: 0,
            step_t: Tensor::zeros([], (Kind::Float, params.device())),
            unfused_reason: None,
        }
    }

    /// Why updates use the elementwise path: libtorch's fused kernel failed
    /// once (its message), and every later update avoids it. `None` normally.
    pub fn unfused_reason(&self) -> Option<&str> {
        self.unfused_reason.as_deref()
    }

    /// Uses the elementwise update from now on, as after a failure of the
    /// fused kernel (for tests and comparisons).
    pub fn avoid_fused(&mut self, reason: &str) {
        self.unfused_reason = Some(reason.to_string());
    }

    /// One update of `params` with `grads / grad_divisor` (a scalar tensor on
    /// the same device, e.g. the clipping and loss-scale divisor; `grads` is
    /// left divided) at learning rate `lr`: libtorch's fused AdamW, the math
    /// of `torch.optim.AdamW` (decay, moment updates, bias correction, then
    /// `p -= lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps)`). Tensors that do not
    /// match (shape, dtype, device, layout) are an error. Should libtorch's
    /// fused kernel fail, this and every later update take the elementwise
    /// path instead (same math; see [`AdamW::unfused_reason`]).
    pub fn update(
        &mut self,
        params: &mut Tensor,
        grads: &Tensor,
        lr: f64,
        grad_divisor: Option<&Tensor>,
    ) -> anyhow::Result<()> {
        let c = self.config;
        self.step += 1;
        let divisor = grad_divisor.map(|d| d.to_kind(Kind::Float).reshape([]));
        if self.unfused_reason.is_none() {
            let _ = tch::no_grad(|| self.step_t.fill_(self.step as f64));
            let hyper = [lr, c.beta1, c.beta2, c.weight_decay, c.eps];
            match torch_ext::fused_adamw(
                params,
                grads,
                &self.exp_avg,
                &self.exp_avg_sq,
                &self.step_t,
                divisor.as_ref(),
                hyper,
            ) {
                Ok(()) => return Ok(()),
                Err(e @ FusedError::Inputs(_)) => {
                    self.step -= 1;
                    return Err(e.into());
                }
                // The kernel checks before it writes: nothing was updated;
                // this and every later update take the elementwise path.
                Err(FusedError::Fused(why)) => self.unfused_reason = Some(why),
            }
        }
        let g = match &divisor {
            Some(d) => tch::no_grad(|| grads.shallow_clone().g_div_(d)),
            None => grads.shallow_clone(),
        };
        self.apply_unfused(params, &g, lr);
        Ok(())
    }

    /// The update of step `self.step` as ten elementwise libtorch calls
    /// (`_single_tensor_adamw` of torch 2.7).
    fn apply_unfused(&mut self, params: &mut Tensor, grads: &Tensor, lr: f64) {
        let c = self.config;
        tch::no_grad(|| {
            let _ = params.g_mul_scalar_(1.0 - lr * c.weight_decay);
            let _ = self.exp_avg.lerp_(grads, 1.0 - c.beta1);
            let _ = self.exp_avg_sq.g_mul_scalar_(c.beta2);
            let _ = self.exp_avg_sq.addcmul_(&(grads * (1.0 - c.beta2)), grads);
            let bc1 = 1.0 - c.beta1.powi(self.step as i32);
            let bc2 = 1.0 - c.beta2.powi(self.step as i32);
            let step_size = lr / bc1;
            let mut denom = self.exp_avg_sq.sqrt();
            let _ = denom.g_div_scalar_(bc2.sqrt());
            let _ = denom.g_add_scalar_(c.eps);
            let _ = params.addcdiv_(&(&self.exp_avg * (-step_size)), &denom);
        });
    }
}

/// Linear warm-up then cosine decay to zero: diffusers'
/// `get_cosine_schedule_with_warmup` (num_cycles 0.5) as used by
/// train_unconditional.py (`--lr_scheduler cosine --lr_warmup_steps 500`).
/// `step` is 0-based: the first update uses `lr_at(0)`, as with `LambdaLR`.
pub fn lr_at(peak: f64, step: u64, warmup: u64, total: u64) -> f64 {
    if step < warmup {
        return peak * step as f64 / warmup.max(1) as f64;
    }
    let progress = (step - warmup) as f64 / (total.saturating_sub(warmup)).max(1) as f64;
    peak * (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
}

/// Global-norm clipping as a divisor (`torch.nn.utils.clip_grad_norm_`,
/// whose coefficient `max_norm / (norm + 1e-6)` clamped to 1 multiplies the
/// gradients): for `grads` holding `loss_scale` times the true gradients,
/// returns the true norm and `loss_scale / coefficient`, both device scalars;
/// dividing `grads` by the latter unscales and clips them in one go (the
/// fused AdamW does it while reading them).
pub fn clip_divisor(grads: &Tensor, max_norm: f64, loss_scale: f64) -> (Tensor, Tensor) {
    tch::no_grad(|| {
        let norm = grads.norm().to_kind(Kind::Float) / loss_scale;
        let inv_coef = ((&norm + 1e-6) / max_norm).clamp_min(1.0);
        let divisor = inv_coef * loss_scale;
        (norm, divisor)
    })
}

/// Dynamic loss scaling with `torch.amp.GradScaler` semantics: initial scale
/// 2^16, ×2 after 2000 consecutive finite steps, ×0.5 and a skipped step on
/// overflow (torch/amp/grad_scaler.py defaults).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GradScaler {
    /// Current loss scale.
    pub scale: f64,
    /// Finite steps since the last change.
    pub growth_tracker: u64,
    /// Growth factor (2.0).
    pub growth_factor: f64,
    /// Back-off factor (0.5).
    pub backoff_factor: f64,
    /// Steps between growths (2000).
    pub growth_interval: u64,
}

impl Default for GradScaler {
    fn default() -> Self {
        Self {
            scale: 65536.0,
            growth_tracker: 0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        }
    }
}

impl GradScaler {
    /// Records a step's outcome: `found_inf` lowers the scale (the caller skips
    /// the update), otherwise the scale grows after `growth_interval` good steps.
    pub fn update(&mut self, found_inf: bool) {
        if found_inf {
            self.scale *= self.backoff_factor;
            self.growth_tracker = 0;
        } else {
            self.growth_tracker += 1;
            if self.growth_tracker == self.growth_interval {
                self.scale *= self.growth_factor;
                self.growth_tracker = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn schedule_warms_up_then_decays() {
        assert_eq!(lr_at(1.0, 0, 10, 100), 0.0);
        assert!((lr_at(1.0, 5, 10, 100) - 0.5).abs() < 1e-12);
        assert!((lr_at(1.0, 10, 10, 100) - 1.0).abs() < 1e-12);
        assert!((lr_at(1.0, 55, 10, 100) - 0.5).abs() < 1e-12);
        assert!(lr_at(1.0, 100, 10, 100).abs() < 1e-12);
    }

    #[test]
    fn adamw_matches_hand_computed_first_step() {
        // Step 1: m = (1-b1) g, v = (1-b2) g², bias-corrected update = lr · g/(|g| + eps').
        let mut p = Tensor::from_slice(&[1.0f32, -2.0]);
        let g = Tensor::from_slice(&[0.5f32, -0.25]);
        let mut opt = AdamW::new(AdamWConfig::default(), &p);
        opt.update(&mut p, &g, 0.1, None).unwrap();
        let out = Vec::<f32>::try_from(&p).unwrap();
        let want0 = 1.0 * (1.0 - 0.1 * 1e-6) - 0.1 * 0.5 / (0.5 + 1e-8);
        let want1 = -2.0 * (1.0 - 0.1 * 1e-6) + 0.1 * 0.25 / (0.25 + 1e-8);
        assert!((out[0] as f64 - want0).abs() < 1e-6, "{out:?}");
        assert!((out[1] as f64 - want1).abs() < 1e-6, "{out:?}");
        assert_eq!(opt.step, 1);
    }

    /// Our flat AdamW against libtorch's own `torch::optim::AdamW` (through
    /// tch's `nn::AdamW`) on the same weights and gradients, over several
    /// steps with a changing learning rate.
    #[test]
    fn adamw_matches_libtorch_adamw() {
        use tch::nn::{self, OptimizerConfig};
        use tch::Kind;
        tch::manual_seed(1);
        let vs = nn::VarStore::new(Device::Cpu);
        let w = vs.root().randn("w", &[64], 0.0, 1.0);
        let c = AdamWConfig {
            weight_decay: 0.1, // large enough for the decay term to matter
            ..AdamWConfig::default()
        };
        let mut reference = nn::AdamW {
            beta1: c.beta1,
            beta2: c.beta2,
            wd: c.weight_decay,
            eps: c.eps,
            amsgrad: false,
        }
        .build(&vs, 1e-2)
        .unwrap();
        let mut ours = tch::no_grad(|| w.detach().copy());
        let mut opt = AdamW::new(c, &ours);
        for (i, lr) in [1e-2, 5e-3, 2e-2, 1e-3].into_iter().enumerate() {
            let target = Tensor::randn([64], (Kind::Float, Device::Cpu)) * (i as f64 + 1.0);
            reference.set_lr(lr);
            reference.zero_grad();
            let loss = (&w - &target).square().sum(Kind::Float);
            loss.backward();
            // The gradient of our copy at our weights: 2 (w - target).
            let g = (&ours - &target) * 2.0;
            reference.step();
            opt.update(&mut ours, &g, lr, None).unwrap();
            let diff = f64::try_from((&ours - &w.detach()).abs().max()).unwrap();
            assert!(
                diff < 1e-6,
                "step {}: max |ours - libtorch| = {diff}",
                i + 1
            );
        }
    }

    #[test]
    fn the_fused_update_matches_the_elementwise_one_with_the_divisor_applied() {
        use tch::Kind;
        tch::manual_seed(3);
        let c = AdamWConfig {
            weight_decay: 0.1,
            ..AdamWConfig::default()
        };
        let mut fused_p = Tensor::randn([1000], (Kind::Float, Device::Cpu));
        let mut plain_p = fused_p.copy();
        let mut fused = AdamW::new(c, &fused_p);
        let mut plain = AdamW::new(c, &plain_p);
        plain.avoid_fused("compared against the fused kernel");
        for (i, lr) in [1e-2, 3e-3, 1e-3].into_iter().enumerate() {
            let g = Tensor::randn([1000], (Kind::Float, Device::Cpu)) * 100.0;
            let divisor = Tensor::from(4.0f32 + i as f32);
            fused
                .update(&mut fused_p, &g.copy(), lr, Some(&divisor))
                .unwrap();
            plain
                .update(&mut plain_p, &g.copy(), lr, Some(&divisor))
                .unwrap();
            let diff = f64::try_from((&fused_p - &plain_p).abs().max()).unwrap();
            assert!(diff < 1e-6, "step {}: max |fused - plain| = {diff}", i + 1);
            let dm = f64::try_from((&fused.exp_avg_sq - &plain.exp_avg_sq).abs().max()).unwrap();
            assert!(dm < 1e-3, "second moments differ by {dm}");
        }
        assert_eq!((fused.step, plain.step), (3, 3));
        assert_eq!(fused.unfused_reason(), None);
        // A gradient that does not match (which libtorch's CPU kernel would
        // read out of bounds) is refused, and the step is not counted.
        for bad in [
            Tensor::zeros([3], (Kind::Float, Device::Cpu)),
            Tensor::zeros([1000], (Kind::BFloat16, Device::Cpu)),
        ] {
            let err = fused
                .update(&mut fused_p, &bad, 1e-3, None)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("AdamW: the gradient "), "{err}");
        }
        assert_eq!(fused.step, 3);
    }

    #[test]
    fn the_clip_divisor_bounds_the_norm_and_unscales() {
        let g = Tensor::from_slice(&[3.0f32, 4.0]);
        let (n, d) = clip_divisor(&g, 1.0, 1.0);
        assert!((f64::try_from(&n).unwrap() - 5.0).abs() < 1e-6);
        assert!((f64::try_from((&g / &d).norm()).unwrap() - 1.0).abs() < 1e-5);
        // Below the bound nothing is clipped.
        let small = Tensor::from_slice(&[0.3f32, 0.4]);
        let (_, d) = clip_divisor(&small, 1.0, 1.0);
        assert_eq!(f64::try_from(&d).unwrap(), 1.0);
        // fp16: gradients scaled by 1024 give the true norm, and the divisor
        // removes the scale as well.
        let scaled = Tensor::from_slice(&[0.3f32 * 1024.0, 0.4 * 1024.0]);
        let (n, d) = clip_divisor(&scaled, 1.0, 1024.0);
        assert!((f64::try_from(&n).unwrap() - 0.5).abs() < 1e-6);
        assert!((f64::try_from(&d).unwrap() - 1024.0).abs() < 1e-9);
    }

    #[test]
    fn scaler_backs_off_and_grows() {
        let mut s = GradScaler {
            growth_interval: 2,
            ..Default::default()
        };
        s.update(true);
        assert_eq!(s.scale, 32768.0);
        s.update(false);
        s.update(false);
        assert_eq!(s.scale, 65536.0);
    }
}
