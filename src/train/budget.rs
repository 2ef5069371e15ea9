//! Memory budgets: what a training or sampling setting costs against what
//! the host has, checked before any tensor is allocated.
//!
//! Settings from flags and config files used to reach the allocator as they
//! were: `--batch-size 100000` or `sample_size: 100000` aborted inside
//! libtorch, `synthetic_images: 1e12` aborted allocating its index
//! permutation, `workers: 100000` panicked spawning threads. The estimates
//! here are deliberately rough (they catch settings off by orders of
//! magnitude, not tight ones): activation bytes per image grow with
//! height × width × channels at every resolution level, plus the attention
//! maps (pixels² × heads) where a level has attention. Only host RAM
//! (`MemAvailable` in /proc/meminfo) is checked for CPU runs; a CUDA run is
//! checked against its device's free memory (`cudaMemGetInfo`, read by the
//! rank itself once its context exists: [`check_device_training`],
//! [`check_device_sampling`]). Device estimates refuse only what exceeds
//! [`DEVICE_SLACK`] times the free memory (cuDNN workspaces and the caching
//! allocator make tight figures unreliable, and refusing a run that would
//! fit is worse than an out-of-memory error), and suggest the value whose
//! estimate fits in the free memory itself.

use crate::train::config::TrainConfig;
use crate::train::model::config::{DownBlockType, UNetConfig, UpBlockType};

/// The most data-loading workers a run may start (also at most 4 per CPU).
pub const MAX_WORKERS: usize = 256;

/// A device setting is refused when its estimate exceeds this many times the
/// device's free memory (see the module's words).
pub const DEVICE_SLACK: f64 = 2.0;

/// Device bytes per parameter of a training step: f32 weights, gradients,
/// Adam's two moments and the EMA copy (4 bytes each).
const TRAIN_BYTES_PER_PARAM: f64 = 20.0;

/// The share of the full activations gradient checkpointing keeps (block
/// inputs only; each block's inside is recomputed in the backward pass).
const CHECKPOINTED_SHARE: f64 = 0.25;

/// Checks one rank's share of a CUDA training step against `free` bytes of
/// device `device`: weights, gradients, optimizer state and EMA, plus the
/// activations of `batch_size / world_size` images (half as many bytes in
/// bf16/fp16, a quarter with gradient checkpointing). A usage error with the
/// largest global batch size whose estimate fits.
pub fn check_device_training(
    config: &TrainConfig,
    half_precision: bool,
    world_size: usize,
    device: usize,
    free: u64,
) -> Result<(), BudgetError> {
    let world = world_size.max(1);
    let batch = config.training.batch_size;
    let per_rank = batch.div_ceil(world);
    let mut per_image = activation_bytes_per_image(&config.model, true);
    if half_precision {
        per_image *= 0.5;
    }
    if config.training.gradient_checkpointing {
        per_image *= CHECKPOINTED_SHARE;
    }
    let fixed = config.model.param_count() as f64 * TRAIN_BYTES_PER_PARAM;
    let need = fixed + per_image * per_rank as f64;
    if need <= DEVICE_SLACK * free as f64 {
        return Ok(());
    }
    let room = free as f64 - fixed;
    let largest_batch = if room <= 0.0 {
        0
    } else {
        (room / per_image) as u64 * world as u64
    };
    Err(BudgetError::DeviceTraining {
        device,
        batch_size: batch,
        world_size: world,
        need,
        free,
        largest_batch,
    })
}

/// Checks `sample --num` on CUDA against `free` bytes of device `device`
/// (f32 weights plus one forward pass over every image at once).
pub fn check_device_sampling(
    model: &UNetConfig,
    num: i64,
    device: usize,
    free: u64,
) -> Result<(), BudgetError> {
    let per_image = activation_bytes_per_image(model, false);
    let fixed = model.param_count() as f64 * 4.0;
    let need = fixed + per_image * num.max(0) as f64;
    if need <= DEVICE_SLACK * free as f64 {
        return Ok(());
    }
    let room = free as f64 - fixed;
    let largest = if room <= 0.0 {
        0
    } else {
        (room / per_image) as u64
    };
    Err(BudgetError::DeviceSampling {
        num,
        device,
        need,
        free,
        largest,
    })
}

pub use super::memory::{cgroup_available, host_available_bytes};

/// The most workers this host may run: 4 per CPU, at most [`MAX_WORKERS`].
pub fn max_workers() -> usize {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    (4 * cpus).min(MAX_WORKERS)
}

/// Rough activation bytes of one image at the model's `sample_size` (f32):
/// forward only (`training` false: sampling frees each layer's input) or
/// kept for the backward pass (`training` true).
pub fn activation_bytes_per_image(m: &UNetConfig, training: bool) -> f64 {
    let (h, w) = m.sample_size.hw();
    let mut pixels = (h.max(1) as f64) * (w.max(1) as f64);
    let mut elements = m.in_channels.max(1) as f64 * pixels;
    let levels = m.block_out_channels.len();
    // Each ResNet keeps about four tensors of its width (two norms, two convs);
    // a level has layers_per_block ResNets going down and one more coming up.
    let resnets = 2.0 * m.layers_per_block.max(1) as f64 + 1.0;
    for (i, &ch) in m.block_out_channels.iter().enumerate() {
        elements += 4.0 * resnets * ch.max(1) as f64 * pixels;
        let up = m.up_block_types.get(levels.saturating_sub(i + 1));
        let attention = m.down_block_types.get(i) == Some(&DownBlockType::AttnDownBlock2D)
            || up == Some(&UpBlockType::AttnUpBlock2D)
            || (i + 1 == levels && m.mid_block_type.is_some() && m.add_attention);
        if attention {
            let (heads, _) = m.attention_heads(ch.max(1));
            elements += pixels * pixels * heads as f64;
        }
        pixels /= 4.0;
    }
    let per_pass = 4.0 * elements;
    if training {
        // Saved activations plus their gradients.
        2.0 * per_pass
    } else {
        // Sampling keeps only a few live layers at a time.
        per_pass / 4.0
    }
}

/// The largest `n` in `1..=upper` with `fits(n)`, assuming `fits` is monotone
/// (true up to some value); 0 when even 1 does not fit.
fn largest_fitting(upper: u64, fits: impl Fn(u64) -> bool) -> u64 {
    if !fits(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1u64, upper.max(1));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// `n` bytes for a message: `3.2 GiB`.
pub fn gib(n: f64) -> String {
    format!("{:.1} GiB", n / (1u64 << 30) as f64)
}

/// Checks a training run's settings against this host: workers, the
/// synthetic set's index permutation, and (on the CPU) a batch's activations.
/// A usage error (exit 2) naming the setting, the estimate and the largest
/// value that fits.
pub fn check_training(config: &TrainConfig, on_cpu: bool) -> Result<(), BudgetError> {
    let t = &config.training;
    let max_w = max_workers();
    if t.workers > max_w {
        return Err(BudgetError::Workers {
            workers: t.workers,
            max: max_w,
        });
    }
    let Some(available) = host_available_bytes() else {
        return Ok(());
    };
    // One permutation of the set's indices per epoch (Vec<usize>); allow half of the RAM.
    let per_index = std::mem::size_of::<usize>() as f64;
    let budget = available as f64 / 2.0;
    if t.synthetic_images as f64 * per_index > budget {
        let largest = (budget / per_index) as u64;
        return Err(BudgetError::SyntheticImages {
            images: t.synthetic_images,
            need: t.synthetic_images as f64 * per_index,
            available,
            largest,
        });
    }
    if on_cpu {
        check_parameters(&config.model, TRAINING_PARAMETER_COPIES)?;
        let per_image = activation_bytes_per_image(&config.model, true);
        let need = per_image * t.batch_size as f64;
        if need > available as f64 {
            let largest_batch = (available as f64 / per_image) as u64;
            let (h, _) = config.model.sample_size.hw();
            let largest_size = largest_fitting(h.max(1) as u64, |s| {
                let mut m = config.model.clone();
                m.sample_size = crate::train::model::config::SampleSize::Square(s as i64);
                activation_bytes_per_image(&m, true) * t.batch_size as f64 <= available as f64
            });
            return Err(BudgetError::Activations {
                batch_size: t.batch_size,
                sample_size: h,
                need,
                available,
                largest_batch,
                largest_size,
            });
        }
    }
    Ok(())
}

/// Checks `imgctl sample --num` against this host (CPU sampling denoises
/// every image in one batch). A usage error with the largest `--num` that fits.
pub fn check_sampling(model: &UNetConfig, num: i64, on_cpu: bool) -> Result<(), BudgetError> {
    if !on_cpu {
        return Ok(());
    }
    check_parameters(model, 1.0)?;
    let Some(available) = host_available_bytes() else {
        return Ok(());
    };
    let per_image = activation_bytes_per_image(model, false);
    let need = per_image * num.max(0) as f64;
    if need > available as f64 {
        let largest = (available as f64 / per_image) as u64;
        return Err(BudgetError::Sampling {
            num,
            need,
            available,
            largest,
        });
    }
    Ok(())
}

/// fp32 copies of every parameter a CPU training run holds: the weights,
/// their gradients, the master copy, AdamW's two moments and the EMA.
const TRAINING_PARAMETER_COPIES: f64 = 6.0;

/// Checks that `copies` fp32 copies of the model's parameters fit in host
/// memory (`None` from /proc: nothing is refused); before any is allocated,
/// so that a huge model is one line, not an allocation failure in libtorch.
fn check_parameters(model: &UNetConfig, copies: f64) -> Result<(), BudgetError> {
    let Some(available) = host_available_bytes() else {
        return Ok(());
    };
    let params = model.census().params;
    let need = params as f64 * 4.0 * copies;
    if need > available as f64 {
        return Err(BudgetError::Parameters {
            params,
            need,
            available,
        });
    }
    Ok(())
}

/// A setting that costs more than this host has (all usage errors: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// A model whose parameters alone do not fit in host memory.
    #[error("the model has {params} parameters, whose fp32 copies need about {}, more than the {} of memory available", gib(*.need), gib(*.available as f64))]
    Parameters {
        /// Parameters of the model.
        params: u64,
        /// Bytes needed.
        need: f64,
        /// Bytes of memory available.
        available: u64,
    },
    /// More data-loading workers than the host allows.
    #[error(
        "workers is {workers}; this host allows at most {max} (4 per CPU, at most {MAX_WORKERS})"
    )]
    Workers {
        /// Workers asked for.
        workers: usize,
        /// The most this host allows ([`max_workers`]).
        max: usize,
    },
    /// A synthetic set whose index permutation does not fit in memory.
    #[error("synthetic_images is {images}: its per-epoch index permutation needs {}, more than half of the {} of memory available; at most {largest} fit", gib(*.need), gib(*.available as f64))]
    SyntheticImages {
        /// Images asked for.
        images: usize,
        /// Bytes of the permutation.
        need: f64,
        /// Bytes of memory available.
        available: u64,
        /// The most images that fit.
        largest: u64,
    },
    /// A batch whose activations do not fit in host memory (CPU training).
    #[error("batch_size {batch_size} at sample_size {sample_size} needs about {} of activations, more than the {} of memory available; {}", gib(*.need), gib(*.available as f64), activation_tail(*.largest_batch, *.largest_size))]
    Activations {
        /// The batch size.
        batch_size: usize,
        /// The side of the images.
        sample_size: i64,
        /// Bytes of activations needed.
        need: f64,
        /// Bytes of memory available.
        available: u64,
        /// The largest batch that fits (0: none at this size).
        largest_batch: u64,
        /// The largest sample size that fits at this batch size.
        largest_size: u64,
    },
    /// More images to sample at once than host memory holds (CPU sampling).
    #[error("{num} images need about {} to denoise at once, more than the {} of memory available; at most {largest} fit", gib(*.need), gib(*.available as f64))]
    Sampling {
        /// Images asked for.
        num: i64,
        /// Bytes needed.
        need: f64,
        /// Bytes of memory available.
        available: u64,
        /// The most images that fit.
        largest: u64,
    },
    /// A training step that does not fit in the GPU's free memory.
    #[error("batch_size {batch_size} ({} per GPU over {world_size}) needs about {} on GPU {device}, which has {} free; {}", .batch_size.div_ceil(*.world_size), gib(*.need), gib(*.free as f64), device_tail(*.largest_batch))]
    DeviceTraining {
        /// The CUDA device index.
        device: usize,
        /// The global batch size.
        batch_size: usize,
        /// Ranks sharing the batch.
        world_size: usize,
        /// Bytes needed on one device.
        need: f64,
        /// Free bytes on the device.
        free: u64,
        /// The largest global batch whose estimate fits (0: none).
        largest_batch: u64,
    },
    /// More images to sample at once than the GPU's free memory holds.
    #[error("{num} images need about {} to denoise at once on GPU {device}, which has {} free; at most {largest} fit", gib(*.need), gib(*.free as f64))]
    DeviceSampling {
        /// Images asked for.
        num: i64,
        /// The CUDA device index.
        device: usize,
        /// Bytes needed.
        need: f64,
        /// Free bytes on the device.
        free: u64,
        /// The most images that fit.
        largest: u64,
    },
}

/// The end of [`BudgetError::DeviceTraining`]'s line.
fn device_tail(largest_batch: u64) -> String {
    if largest_batch == 0 {
        "the model's weights and optimizer state alone do not fit: use a smaller model".to_string()
    } else {
        format!("at most batch_size {largest_batch} fits")
    }
}

/// The end of [`BudgetError::Activations`]'s line: what fits instead.
fn activation_tail(largest_batch: u64, largest_size: u64) -> String {
    if largest_batch == 0 {
        format!("at most sample_size {largest_size} fits at this batch size")
    } else if largest_size == 0 {
        format!("at most batch_size {largest_batch} fits")
    } else {
        format!("at most batch_size {largest_batch} fits (or sample_size {largest_size} at this batch size)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_fitting_finds_the_edge() {
        assert_eq!(largest_fitting(100, |n| n <= 37), 37);
        assert_eq!(largest_fitting(100, |n| n <= 1000), 100);
        assert_eq!(largest_fitting(100, |_| false), 0);
    }

    #[test]
    fn device_training_refuses_what_is_far_too_big_and_names_what_fits() {
        let mut config = TrainConfig::preset(crate::choices::Preset::Default);
        let gib80 = 80u64 << 30;
        config.training.batch_size = 64;
        check_device_training(&config, true, 1, 0, gib80).unwrap();
        config.training.batch_size = 1_000_000;
        let err = check_device_training(&config, true, 1, 0, gib80).unwrap_err();
        let BudgetError::DeviceTraining { largest_batch, .. } = err else {
            panic!("{err:?}");
        };
        assert!(
            largest_batch > 64 && largest_batch < 1_000_000,
            "{largest_batch}"
        );
        // The suggestion fits, and eight ranks share the batch.
        config.training.batch_size = largest_batch as usize;
        check_device_training(&config, true, 1, 0, gib80).unwrap();
        config.training.batch_size = 1_000_000;
        let eight = check_device_training(&config, true, 8, 3, gib80).unwrap_err();
        let text = eight.to_string();
        assert!(
            text.contains("125000 per GPU over 8") && text.contains("GPU 3"),
            "{text}"
        );
        // fp32 and no checkpointing need more than bf16 with checkpointing.
        config.training.batch_size = 64;
        let small = 4u64 << 30;
        let fp32 = check_device_training(&config, false, 1, 0, small).is_err();
        config.training.gradient_checkpointing = true;
        let ckpt = check_device_training(&config, true, 1, 0, small).is_err();
        assert!(fp32 >= ckpt);
        // Weights and optimizer state alone: none fits.
        let err = check_device_training(&config, true, 1, 0, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("use a smaller model"), "{err}");
    }

    #[test]
    fn device_sampling_names_the_largest_count() {
        let model = TrainConfig::preset(crate::choices::Preset::Default).model;
        check_device_sampling(&model, 16, 0, 80u64 << 30).unwrap();
        let err = check_device_sampling(&model, 100_000_000, 0, 80u64 << 30).unwrap_err();
        let BudgetError::DeviceSampling { largest, .. } = err else {
            panic!("{err:?}");
        };
        assert!(largest > 16 && largest < 100_000_000, "{largest}");
        check_device_sampling(&model, largest as i64, 0, 80u64 << 30).unwrap();
    }

    #[test]
    fn activations_grow_with_the_square_of_the_size() {
        let mut m = UNetConfig::tiny();
        let a = activation_bytes_per_image(&m, true);
        m.sample_size = crate::train::model::config::SampleSize::Square(64);
        let b = activation_bytes_per_image(&m, true);
        assert!(b > 4.0 * a, "{a} {b}");
    }
}
