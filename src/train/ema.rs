//! Exponential moving average of the weights, with warm-up.
//!
//! Follows diffusers' `EMAModel` as configured by `train_unconditional.py`
//! (`use_ema_warmup=True`, `--ema_inv_gamma 1.0 --ema_power 0.75
//! --ema_max_decay 0.9999`, `min_decay` 0, `update_after_step` 0). Owns the
//! shadow buffer (flat, fp32, same layout as the master weights) and the decay
//! rule; must not know about models or files.
use tch::Tensor;

/// EMA hyper-parameters (train_unconditional.py defaults).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmaConfig {
    /// Upper bound of the decay (`--ema_max_decay`).
    pub max_decay: f64,
    /// Warm-up inverse gamma (`--ema_inv_gamma`).
    pub inv_gamma: f64,
    /// Warm-up power (`--ema_power`).
    pub power: f64,
}

impl Default for EmaConfig {
    fn default() -> Self {
        Self {
            max_decay: 0.9999,
            inv_gamma: 1.0,
            power: 0.75,
        }
    }
}

impl EmaConfig {
    /// The decay used at optimisation step `k` (1-based, counted after the
    /// increment, as in `EMAModel.step`): 0 for the first step (the shadow
    /// copies the weights), then `1 - (1 + s/inv_gamma)^-power` with `s = k - 1`,
    /// capped at `max_decay`.
    pub fn decay(&self, k: u64) -> f64 {
        let s = k.saturating_sub(1);
        if s == 0 {
            return 0.0;
        }
        let d = 1.0 - (1.0 + s as f64 / self.inv_gamma).powf(-self.power);
        d.clamp(0.0, self.max_decay)
    }
}

/// The shadow weights and the number of updates applied.
#[derive(Debug)]
pub struct Ema {
    /// Hyper-parameters.
    pub config: EmaConfig,
    /// Shadow weights (flat fp32).
    pub shadow: Tensor,
    /// Updates applied so far (`EMAModel.optimization_step`).
    pub step: u64,
}

impl Ema {
    /// A shadow initialised to a copy of `params`.
    pub fn new(config: EmaConfig, params: &Tensor) -> Self {
        Self {
            config,
            shadow: tch::no_grad(|| params.detach().copy()),
            step: 0,
        }
    }

    /// `shadow -= (1 - decay) · (shadow - params)`; returns the decay used.
    pub fn update(&mut self, params: &Tensor) -> f64 {
        self.step += 1;
        let decay = self.config.decay(self.step);
        tch::no_grad(|| {
            let _ = self.shadow.lerp_(params, 1.0 - decay);
        });
        decay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decay_warms_up_like_diffusers() {
        let c = EmaConfig::default();
        assert_eq!(c.decay(1), 0.0);
        // k = 2: s = 1, 1 - 2^-0.75.
        assert!((c.decay(2) - (1.0 - 2f64.powf(-0.75))).abs() < 1e-12);
        assert_eq!(c.decay(10_000_000_000), 0.9999);
    }

    #[test]
    fn first_update_copies_then_averages() {
        let p0 = Tensor::from_slice(&[1.0f32, 2.0]);
        let mut ema = Ema::new(EmaConfig::default(), &p0);
        let p1 = Tensor::from_slice(&[3.0f32, 4.0]);
        ema.update(&p1);
        assert_eq!(Vec::<f32>::try_from(&ema.shadow).unwrap(), vec![3.0, 4.0]);
        let p2 = Tensor::from_slice(&[5.0f32, 6.0]);
        let d = ema.update(&p2);
        let got = Vec::<f32>::try_from(&ema.shadow).unwrap();
        assert!((got[0] as f64 - (3.0 * d + 5.0 * (1.0 - d))).abs() < 1e-5);
    }
}
