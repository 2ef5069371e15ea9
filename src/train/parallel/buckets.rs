//! Gradient buckets: the trainer keeps all gradients in one flat buffer
//! ([`crate::train::flat`]); after backward it is all-reduced in a few large
//! buckets (contiguous slices of that buffer, no copies), not one collective
//! call per parameter tensor and not one giant call.
//!
//! The bucket cap is 25 MiB, PyTorch DDP's default `bucket_cap_mb=25`
//! (torch/nn/parallel/distributed.py): large enough that NCCL runs at full
//! bandwidth, small enough that the CPU backend's per-call buffers stay small.
//! The same slicing broadcasts the parameters from rank 0 at start. This
//! module owns no communicator and must not decide the averaging policy of the
//! optimizer (it averages: the loss is a per-rank mean).
use tch::Tensor;

use crate::world::collective::{Backend, Collective};

/// DDP's default bucket size, 25 MiB (`bucket_cap_mb=25`).
pub const DEFAULT_BUCKET_BYTES: usize = 25 * 1024 * 1024;

/// `(start, length)` in elements of each bucket of a flat buffer of `numel`
/// elements of `elem_bytes` bytes, at most `cap_bytes` per bucket.
pub fn bucket_ranges(numel: usize, elem_bytes: usize, cap_bytes: usize) -> Vec<(i64, i64)> {
    let per = (cap_bytes / elem_bytes.max(1)).max(1);
    (0..numel)
        .step_by(per)
        .map(|start| (start as i64, per.min(numel - start) as i64))
        .collect()
}

/// Buckets of whole parameters for the all-reduce that overlaps backward.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamBuckets {
    /// `(start, length)` in elements of each bucket in the flat buffer.
    pub ranges: Vec<(i64, i64)>,
    /// The bucket of each parameter, in layout order.
    pub param_bucket: Vec<usize>,
}

/// Groups parameters, given as `(offset, numel)` in layout order (contiguous,
/// ascending), into buckets of whole parameters of at least `cap_bytes`
/// (fewer only for the last bucket; a bucket closes as soon as it reaches the
/// cap, so one large parameter closes the bucket it joins). Filled from the end of the buffer, as DDP fills its
/// buckets in reverse registration order, so that bucket 0 holds the
/// parameters backward reaches first if the layout follows the forward pass.
pub fn param_buckets(params: &[(i64, i64)], elem_bytes: usize, cap_bytes: usize) -> ParamBuckets {
    let cap = cap_bytes.max(1) as i64;
    let elem = elem_bytes.max(1) as i64;
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    let mut param_bucket = vec![0; params.len()];
    let mut open: Option<(i64, i64)> = None; // (start, end) of the bucket being filled
    for (i, &(offset, numel)) in params.iter().enumerate().rev() {
        let (_, end) = *open.get_or_insert((offset, offset + numel));
        open = Some((offset, end));
        param_bucket[i] = ranges.len();
        if (end - offset) * elem >= cap {
            ranges.push((offset, end - offset));
            open = None;
        }
    }
    if let Some((start, end)) = open {
        ranges.push((start, end - start));
    }
    ParamBuckets {
        ranges,
        param_bucket,
    }
}

fn flat_view(flat: &Tensor) -> anyhow::Result<Tensor> {
    anyhow::ensure!(
        flat.is_contiguous(),
        "gradient buckets need a contiguous flat buffer"
    );
    Ok(flat.view([-1]))
}

/// Averages a flat buffer over all ranks in place, bucket by bucket.
/// Returns the number of collective calls made.
pub fn all_reduce_avg_flat(
    flat: &Tensor,
    cap_bytes: usize,
    coll: &mut dyn Collective,
) -> anyhow::Result<usize> {
    for_each_bucket(flat, cap_bytes, coll, |coll, bucket| {
        coll.all_reduce_avg(bucket)
    })
}

/// Copies rank 0's flat buffer to every rank, bucket by bucket.
pub fn broadcast_flat(
    flat: &Tensor,
    cap_bytes: usize,
    coll: &mut dyn Collective,
) -> anyhow::Result<usize> {
    let _guard = tch::no_grad_guard();
    for_each_bucket(flat, cap_bytes, coll, |coll, bucket| coll.broadcast(bucket))
}

/// Runs one collective per bucket of `flat` (views, no copies) and returns the
/// number of calls. NCCL with one rank still runs (so `--gpus 1` exercises the
/// real path and is the honest baseline of a scaling run); only Solo skips.
fn for_each_bucket(
    flat: &Tensor,
    cap_bytes: usize,
    coll: &mut dyn Collective,
    mut op: impl FnMut(&mut dyn Collective, &Tensor) -> anyhow::Result<()>,
) -> anyhow::Result<usize> {
    if coll.backend() == Backend::Single {
        return Ok(0);
    }
    let v = flat_view(flat)?;
    let ranges = bucket_ranges(v.numel(), v.kind().elt_size_in_bytes(), cap_bytes);
    for &(start, len) in &ranges {
        op(coll, &v.narrow(0, start, len))?;
    }
    Ok(ranges.len())
}

/// SHA-256 over the bytes of `tensors` (moved to the CPU), hex: equal hashes
/// on two ranks mean bit-identical parameters.
pub fn tensors_hash(tensors: &[Tensor]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for t in tensors {
        let c = t.detach().to_device(tch::Device::Cpu).contiguous();
        let n = c.numel() * c.kind().elt_size_in_bytes();
        let mut bytes = vec![0u8; n];
        c.copy_data_u8(&mut bytes, c.numel());
        h.update(&bytes);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_respect_the_cap() {
        // 4-byte floats, cap 40 bytes = 10 elements.
        assert_eq!(bucket_ranges(25, 4, 40), vec![(0, 10), (10, 10), (20, 5)]);
        assert_eq!(bucket_ranges(10, 4, 40), vec![(0, 10)]);
        assert_eq!(bucket_ranges(0, 4, 40), vec![]);
        // The default model (113,673,219 fp32 parameters, 455 MB) takes 18 buckets.
        assert_eq!(
            bucket_ranges(113_673_219, 4, DEFAULT_BUCKET_BYTES).len(),
            18
        );
    }

    #[test]
    fn parameter_buckets_hold_whole_parameters_from_the_end() {
        // Four parameters of 3, 5, 2 and 4 elements at 4 bytes, cap 24 bytes (6).
        let params = [(0, 3), (3, 5), (8, 2), (10, 4)];
        let b = param_buckets(&params, 4, 24);
        // From the end: [10..14)+[8..10) = 6 elements closes bucket 0; then
        // [3..8) + [0..3) = 8 elements (bucket 1 reaches the cap with both).
        assert_eq!(b.ranges, vec![(8, 6), (0, 8)]);
        assert_eq!(b.param_bucket, vec![1, 1, 0, 0]);
        // A parameter above the cap closes the bucket it joins; the rest is the last bucket.
        let b = param_buckets(&[(0, 1), (1, 100), (101, 1)], 4, 8);
        assert_eq!(b.ranges, vec![(1, 101), (0, 1)]);
        assert_eq!(b.param_bucket, vec![1, 0, 0]);
        // Together the buckets cover the buffer exactly once.
        let b = param_buckets(&params, 4, 1 << 20);
        assert_eq!(b.ranges, vec![(0, 14)]);
        assert_eq!(param_buckets(&[], 4, 8).ranges, vec![]);
    }

    #[test]
    fn hashes_see_every_bit() {
        let a = Tensor::from_slice(&[1.0f32, 2.0]);
        let b = Tensor::from_slice(&[1.0f32, 2.000_000_2]);
        assert_ne!(tensors_hash(&[a.shallow_clone()]), tensors_hash(&[b]));
        assert_eq!(
            tensors_hash(&[a.shallow_clone()]),
            tensors_hash(&[a.copy()])
        );
    }
}
