//! AdamW over a flat fp32 parameter buffer, the learning-rate schedule,
//! global-norm gradient clipping and dynamic loss scaling for fp16.
//!
//! Written here rather than with tch's `nn::Optimizer` because that one
//! cannot export its moment buffers for checkpoints. Owns the update math and
//! its state; must not know about models, data or files.
use tch::Tensor;

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
}

impl AdamW {
    /// Zeroed state for a flat fp32 parameter buffer like `params`.
    pub fn new(config: AdamWConfig, params: &Tensor) -> Self {
        Self {
            config,
            exp_avg: params.zeros_like(),
            exp_avg_sq: params.zeros_like(),
            step: 0,
        }
    }

    /// One update of `params` with `grads` at learning rate `lr`, following
    /// `torch.optim.AdamW` (single-tensor path, torch 2.7 `_single_tensor_adamw`):
    /// decay, moment updates, bias correction, then `p -= lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps)`.
    pub fn update(&mut self, params: &mut Tensor, grads: &Tensor, lr: f64) {
        let c = self.config;
        self.step += 1;
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

/// Scales `grads` so their global L2 norm is at most `max_norm`
/// (`torch.nn.utils.clip_grad_norm_`: coefficient `max_norm / (norm + 1e-6)`,
/// clamped to 1). Returns the norm before clipping, as a device scalar.
pub fn clip_grad_norm(grads: &mut Tensor, max_norm: f64) -> Tensor {
    tch::no_grad(|| {
        let norm = grads.norm();
        let coef = ((&norm + 1e-6).reciprocal() * max_norm).clamp_max(1.0);
        let _ = grads.g_mul_(&coef.to_kind(grads.kind()));
        norm
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
        opt.update(&mut p, &g, 0.1);
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
            opt.update(&mut ours, &g, lr);
            let diff = f64::try_from((&ours - &w.detach()).abs().max()).unwrap();
            assert!(
                diff < 1e-6,
                "step {}: max |ours - libtorch| = {diff}",
                i + 1
            );
        }
    }

    #[test]
    fn clipping_bounds_the_norm() {
        let mut g = Tensor::from_slice(&[3.0f32, 4.0]).to_device(Device::Cpu);
        let n = clip_grad_norm(&mut g, 1.0);
        assert!((f64::try_from(n).unwrap() - 5.0).abs() < 1e-6);
        assert!((f64::try_from(g.norm()).unwrap() - 1.0).abs() < 1e-5);
        let mut small = Tensor::from_slice(&[0.3f32, 0.4]);
        let _ = clip_grad_norm(&mut small, 1.0);
        assert_eq!(Vec::<f32>::try_from(&small).unwrap(), vec![0.3, 0.4]);
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
