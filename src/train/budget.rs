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
//! (`MemAvailable` in /proc/meminfo) is checked; on CUDA the device's
//! memory is not (tch exposes no total without initialising a context),
//! so CUDA runs are checked for the host-side costs only.
use crate::train::config::TrainConfig;
use crate::train::model::config::{DownBlockType, UNetConfig, UpBlockType};

/// The most data-loading workers a run may start (also at most 4 per CPU).
pub const MAX_WORKERS: usize = 256;

/// Host memory available for new allocations (`MemAvailable`), in bytes;
/// `None` where /proc/meminfo is unreadable (then nothing is refused).
pub fn host_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

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

/// A setting that costs more than this host has (all usage errors: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
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
    #[error("synthetic_images is {images}: its per-epoch index permutation needs {}, more than half of the {} of host memory available; at most {largest} fit", gib(*.need), gib(*.available as f64))]
    SyntheticImages {
        /// Images asked for.
        images: usize,
        /// Bytes of the permutation.
        need: f64,
        /// Bytes of host memory available.
        available: u64,
        /// The most images that fit.
        largest: u64,
    },
    /// A batch whose activations do not fit in host memory (CPU training).
    #[error("batch_size {batch_size} at sample_size {sample_size} needs about {} of activations, more than the {} of host memory available; {}", gib(*.need), gib(*.available as f64), activation_tail(*.largest_batch, *.largest_size))]
    Activations {
        /// The batch size.
        batch_size: usize,
        /// The side of the images.
        sample_size: i64,
        /// Bytes of activations needed.
        need: f64,
        /// Bytes of host memory available.
        available: u64,
        /// The largest batch that fits (0: none at this size).
        largest_batch: u64,
        /// The largest sample size that fits at this batch size.
        largest_size: u64,
    },
    /// More images to sample at once than host memory holds (CPU sampling).
    #[error("{num} images need about {} to denoise at once, more than the {} of host memory available; at most {largest} fit", gib(*.need), gib(*.available as f64))]
    Sampling {
        /// Images asked for.
        num: i64,
        /// Bytes needed.
        need: f64,
        /// Bytes of host memory available.
        available: u64,
        /// The most images that fit.
        largest: u64,
    },
}

/// The end of [`BudgetError::Activations`]'s line: what fits instead.
fn activation_tail(largest_batch: u64, largest_size: u64) -> String {
    if largest_batch == 0 {
        format!("at most sample_size {largest_size} fits at this batch size")
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
    fn activations_grow_with_the_square_of_the_size() {
        let mut m = UNetConfig::tiny();
        let a = activation_bytes_per_image(&m, true);
        m.sample_size = crate::train::model::config::SampleSize::Square(64);
        let b = activation_bytes_per_image(&m, true);
        assert!(b > 4.0 * a, "{a} {b}");
    }
}
