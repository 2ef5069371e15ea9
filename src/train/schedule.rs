//! The DDPM noise schedule and the samplers that invert it.
//!
//! It owns the diffusion math of diffusers 0.33.1's `DDPMScheduler` and
//! `DDIMScheduler` at their defaults (schedulers/scheduling_ddpm.py,
//! scheduling_ddim.py): 1000 training steps, linear betas 1e-4..0.02 (Ho et
//! al. 2020, §4), epsilon prediction, `clip_sample` to [-1, 1], "leading"
//! timestep spacing, DDPM variance `fixed_small`, DDIM `eta = 0` with
//! `set_alpha_to_one`. It must not know the model: samplers take any
//! `FnMut(x, t) -> eps`.
//!
//! Sampling noise comes from a seeded ChaCha generator on the host, not from
//! libtorch's global generator, so drawing a sample grid in the middle of a
//! training run does not perturb the run's random stream, and a seed gives the
//! same images on every device.
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tch::{Device, Kind, Tensor};

/// Diffusion steps of training (DDPM, Ho et al. 2020; diffusers' default).
pub const NUM_TRAIN_TIMESTEPS: i64 = 1000;
/// First beta of the linear schedule (Ho et al. 2020, §4).
pub const BETA_START: f64 = 1e-4;
/// Last beta of the linear schedule (Ho et al. 2020, §4).
pub const BETA_END: f64 = 0.02;
/// Predicted clean images are clipped to ±this (diffusers `clip_sample_range`).
pub const CLIP_SAMPLE_RANGE: f64 = 1.0;

/// A number of sampling steps that does not exist (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// Sampling steps outside 1..=[`NUM_TRAIN_TIMESTEPS`].
    #[error("{steps} sampling steps is out of range")]
    Steps {
        /// The steps asked for.
        steps: i64,
    },
}

// The samplers' names are flag values too: the enum lives in a leaf.
pub use crate::choices::Sampler;

/// The linear-beta DDPM schedule: `alphas_cumprod` on the host (for the
/// samplers' scalar coefficients) and its square roots on a device (for
/// [`DdpmSchedule::add_noise`] inside the training step).
#[derive(Debug)]
pub struct DdpmSchedule {
    alphas_cumprod: Vec<f64>,
    /// `[2, T]`: √ᾱ_t and √(1-ᾱ_t), f32.
    noise_coefs: Tensor,
}

impl DdpmSchedule {
    /// The 1000-step schedule with its training coefficients on `device`.
    pub fn new(device: Device) -> Self {
        // diffusers: betas = torch.linspace(1e-4, 0.02, T, dtype=float32);
        // alphas_cumprod = cumprod(1 - betas) in float32. Computed the same
        // way so add_noise matches diffusers' bit for bit.
        let betas = Tensor::linspace(
            BETA_START,
            BETA_END,
            NUM_TRAIN_TIMESTEPS,
            (Kind::Float, Device::Cpu),
        );
        let acp = (1.0f64 - betas).cumprod(0, Kind::Float);
        let alphas_cumprod: Vec<f64> = Vec::<f32>::try_from(&acp)
            .expect("f32 schedule")
            .into_iter()
            .map(f64::from)
            .collect();
        let noise_coefs = Tensor::stack(&[acp.sqrt(), (1.0f64 - &acp).sqrt()], 0).to_device(device);
        Self {
            alphas_cumprod,
            noise_coefs,
        }
    }

    /// Number of training timesteps (1000).
    pub fn num_train_timesteps(&self) -> i64 {
        NUM_TRAIN_TIMESTEPS
    }

    /// ᾱ_t, the product of (1 - β) up to step `t`.
    pub fn alpha_cumprod(&self, t: i64) -> f64 {
        self.alphas_cumprod[t as usize]
    }

    /// The forward process: `√ᾱ_t · x0 + √(1-ᾱ_t) · noise`, with one timestep
    /// per batch element (`t`: int64 `[N]`, best on the schedule's device).
    pub fn add_noise(&self, x0: &Tensor, noise: &Tensor, t: &Tensor) -> Tensor {
        let t = t.to_device(self.noise_coefs.device());
        let coefs = self
            .noise_coefs
            .index_select(1, &t)
            .to_kind(x0.kind())
            .to_device(x0.device());
        let mut shape = vec![-1i64];
        shape.extend(std::iter::repeat(1).take(x0.dim().saturating_sub(1)));
        let a = coefs.get(0).reshape(&shape);
        let b = coefs.get(1).reshape(&shape);
        a * x0 + b * noise
    }

    /// The timesteps a sampler visits with `steps` inference steps, highest
    /// first ("leading" spacing: `i · (T / steps)` for `i < steps`).
    pub fn inference_timesteps(steps: i64) -> anyhow::Result<Vec<i64>> {
        if !(1..=NUM_TRAIN_TIMESTEPS).contains(&steps) {
            return Err(ScheduleError::Steps { steps }.into());
        }
        let ratio = NUM_TRAIN_TIMESTEPS / steps;
        Ok((0..steps).rev().map(|i| i * ratio).collect())
    }

    fn predict_x0(&self, eps: &Tensor, t: i64, x: &Tensor) -> Tensor {
        let a_t = self.alpha_cumprod(t);
        ((x - eps * (1.0 - a_t).sqrt()) / a_t.sqrt()).clamp(-CLIP_SAMPLE_RANGE, CLIP_SAMPLE_RANGE)
    }

    /// One ancestral DDPM step from `t` to `prev_t` (-1 after the last step):
    /// the posterior mean from the clipped x̂0 plus √(fixed_small variance) ·
    /// `noise` (ignored at `t = 0`).
    pub fn ddpm_step(
        &self,
        eps: &Tensor,
        t: i64,
        prev_t: i64,
        x: &Tensor,
        noise: &Tensor,
    ) -> Tensor {
        let a_t = self.alpha_cumprod(t);
        let a_prev = if prev_t >= 0 {
            self.alpha_cumprod(prev_t)
        } else {
            1.0
        };
        let (beta_t, beta_prev) = (1.0 - a_t, 1.0 - a_prev);
        let cur_alpha = a_t / a_prev;
        let cur_beta = 1.0 - cur_alpha;
        let x0 = self.predict_x0(eps, t, x);
        let mean =
            x0 * (a_prev.sqrt() * cur_beta / beta_t) + x * (cur_alpha.sqrt() * beta_prev / beta_t);
        if t > 0 {
            // diffusers _get_variance: clamp(min=1e-20), "fixed_small".
            let variance = (beta_prev / beta_t * cur_beta).max(1e-20);
            mean + noise * variance.sqrt()
        } else {
            mean
        }
    }

    /// One DDIM step (eta 0) from `t` to `prev_t` (negative: to ᾱ = 1).
    pub fn ddim_step(&self, eps: &Tensor, t: i64, prev_t: i64, x: &Tensor) -> Tensor {
        let a_prev = if prev_t >= 0 {
            self.alpha_cumprod(prev_t)
        } else {
            1.0
        };
        let x0 = self.predict_x0(eps, t, x);
        x0 * a_prev.sqrt() + eps * (1.0 - a_prev).sqrt()
    }

    /// Generates `n` images of `shape` (`[C, H, W]`) by running `model_fn(x, t)`
    /// (returning the predicted noise) through `steps` steps of `sampler`,
    /// starting from seeded noise. Returns f32 `[n, C, H, W]` in [-1, 1] on
    /// `device`. Runs without gradients.
    // The argument list mirrors the free function [`sample`] the trainer calls.
    #[allow(clippy::too_many_arguments)]
    pub fn sample<F>(
        &self,
        model_fn: F,
        n: i64,
        shape: [i64; 3],
        sampler: Sampler,
        steps: i64,
        seed: u64,
        device: Device,
    ) -> anyhow::Result<Tensor>
    where
        F: FnMut(&Tensor, &Tensor) -> Tensor,
    {
        self.sample_observed(model_fn, n, shape, sampler, steps, seed, device, |_| {})
    }

    /// [`DdpmSchedule::sample`], calling `on_step(done)` after each of the
    /// `steps` denoising steps (`done` runs 1..=steps): the caller's progress.
    #[allow(clippy::too_many_arguments)]
    pub fn sample_observed<F, P>(
        &self,
        mut model_fn: F,
        n: i64,
        shape: [i64; 3],
        sampler: Sampler,
        steps: i64,
        seed: u64,
        device: Device,
        mut on_step: P,
    ) -> anyhow::Result<Tensor>
    where
        F: FnMut(&Tensor, &Tensor) -> Tensor,
        P: FnMut(u64),
    {
        let timesteps = Self::inference_timesteps(steps)?;
        let full = [n, shape[0], shape[1], shape[2]];
        let mut noise = GaussianNoise::new(seed);
        Ok(tch::no_grad(|| {
            let mut x = noise.tensor(&full, device);
            for (i, &t) in timesteps.iter().enumerate() {
                let t_tensor = Tensor::from_slice(&[t]).to_device(device);
                let eps = model_fn(&x, &t_tensor).to_kind(Kind::Float);
                x = match sampler {
                    Sampler::Ddpm => {
                        let prev_t = timesteps.get(i + 1).copied().unwrap_or(-1);
                        let z = if t > 0 {
                            noise.tensor(&full, device)
                        } else {
                            Tensor::zeros_like(&x)
                        };
                        self.ddpm_step(&eps, t, prev_t, &x, &z)
                    }
                    Sampler::Ddim => self.ddim_step(&eps, t, t - NUM_TRAIN_TIMESTEPS / steps, &x),
                };
                on_step(i as u64 + 1);
            }
            x.clamp(-1.0, 1.0)
        }))
    }
}

/// Generates `n` images: [`DdpmSchedule::sample`] on a fresh schedule.
pub fn sample<F>(
    model_fn: F,
    n: i64,
    shape: [i64; 3],
    sampler: Sampler,
    steps: i64,
    seed: u64,
    device: Device,
) -> anyhow::Result<Tensor>
where
    F: FnMut(&Tensor, &Tensor) -> Tensor,
{
    DdpmSchedule::new(Device::Cpu).sample(model_fn, n, shape, sampler, steps, seed, device)
}

/// Standard normal samples from a seeded ChaCha8 stream (Box–Muller), made on
/// the host so they are identical on every device.
#[derive(Debug)]
pub struct GaussianNoise {
    rng: ChaCha8Rng,
}

impl GaussianNoise {
    /// A stream for `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// `numel` samples.
    pub fn samples(&mut self, numel: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(numel + 1);
        while out.len() < numel {
            // u1 in (0, 1] so ln(u1) is finite.
            let u1: f64 = 1.0 - self.rng.gen::<f64>();
            let u2: f64 = self.rng.gen::<f64>();
            let r = (-2.0 * u1.ln()).sqrt();
            let theta = 2.0 * std::f64::consts::PI * u2;
            out.push((r * theta.cos()) as f32);
            out.push((r * theta.sin()) as f32);
        }
        out.truncate(numel);
        out
    }

    /// An f32 tensor of `shape` on `device`.
    pub fn tensor(&mut self, shape: &[i64], device: Device) -> Tensor {
        let numel = shape.iter().product::<i64>() as usize;
        Tensor::from_slice(&self.samples(numel))
            .reshape(shape)
            .to_device(device)
    }
}
