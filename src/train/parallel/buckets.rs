//! Gradient buckets: after backward, gradients are packed into a few large
//! flat buffers, each all-reduced once, then unpacked, instead of one
//! collective call per parameter tensor.
//!
//! The bucket cap is 25 MiB, PyTorch DDP's default `bucket_cap_mb=25`
//! (torch/nn/parallel/distributed.py); parameters are bucketed in reverse
//! registration order as DDP does, since backward produces the last layers'
//! gradients first. Packing is one `cat` kernel per bucket and unpacking one
//! `split_with_sizes_copy`, so a step costs O(buckets) kernel launches, not
//! O(parameters). This module also broadcasts the parameters from rank 0 at
//! start. It owns no communicator and must not decide the averaging policy of
//! the optimizer (it averages: the loss is a per-rank mean).
use tch::{Kind, Tensor};

use super::collective::Collective;

/// DDP's default bucket size, 25 MiB (`bucket_cap_mb=25`).
pub const DEFAULT_BUCKET_BYTES: usize = 25 * 1024 * 1024;

/// One flat buffer and the parameters it carries.
#[derive(Debug)]
struct Bucket {
    flat: Tensor,
    /// Indices into the parameter list, in packing order.
    members: Vec<usize>,
    /// Element counts of the members, in packing order.
    sizes: Vec<i64>,
}

/// The bucket layout for one list of parameters.
#[derive(Debug)]
pub struct GradBuckets {
    buckets: Vec<Bucket>,
    params: usize,
}

impl GradBuckets {
    /// Lays out `params` (all on one device) into buckets of at most
    /// `cap_bytes` (a tensor larger than the cap gets a bucket of its own).
    /// Parameters of different kinds go to different buckets.
    pub fn new(params: &[Tensor], cap_bytes: usize) -> Self {
        let mut buckets: Vec<Bucket> = Vec::new();
        // Open bucket per kind: (kind, members, sizes, bytes).
        let mut open: Vec<(Kind, Vec<usize>, Vec<i64>, usize)> = Vec::new();
        let close =
            |kind: Kind, members: Vec<usize>, sizes: Vec<i64>, buckets: &mut Vec<Bucket>| {
                let total: i64 = sizes.iter().sum();
                let device = params[members[0]].device();
                buckets.push(Bucket {
                    flat: Tensor::zeros([total], (kind, device)),
                    members,
                    sizes,
                });
            };
        for (i, p) in params.iter().enumerate().rev() {
            let kind = p.kind();
            let n = p.numel() as i64;
            let bytes = p.numel() * kind.elt_size_in_bytes();
            let slot = match open.iter().position(|o| o.0 == kind) {
                Some(s) => s,
                None => {
                    open.push((kind, Vec::new(), Vec::new(), 0));
                    open.len() - 1
                }
            };
            if !open[slot].1.is_empty() && open[slot].3 + bytes > cap_bytes {
                let (k, m, s, _) =
                    std::mem::replace(&mut open[slot], (kind, Vec::new(), Vec::new(), 0));
                close(k, m, s, &mut buckets);
            }
            open[slot].1.push(i);
            open[slot].2.push(n);
            open[slot].3 += bytes;
        }
        for (k, m, s, _) in open {
            if !m.is_empty() {
                close(k, m, s, &mut buckets);
            }
        }
        Self {
            buckets,
            params: params.len(),
        }
    }

    /// Number of buckets.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether there are no buckets (no parameters).
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Bytes per bucket.
    pub fn bucket_bytes(&self) -> Vec<usize> {
        self.buckets
            .iter()
            .map(|b| b.flat.numel() * b.flat.kind().elt_size_in_bytes())
            .collect()
    }

    /// Averages the gradients of `params` over all ranks, in place. Every
    /// rank must pass the same parameter list the layout was made from. A
    /// parameter without a gradient contributes zeros and keeps no gradient.
    pub fn all_reduce_avg(
        &mut self,
        params: &[Tensor],
        coll: &mut dyn Collective,
    ) -> anyhow::Result<()> {
        anyhow::ensure!(
            params.len() == self.params,
            "gradient buckets were laid out for {} parameters, got {}",
            self.params,
            params.len()
        );
        if coll.world_size() == 1 {
            return Ok(());
        }
        let _guard = tch::no_grad_guard();
        for b in &mut self.buckets {
            let grads: Vec<Tensor> = b
                .members
                .iter()
                .zip(&b.sizes)
                .map(|(&i, &n)| {
                    let g = params[i].grad();
                    if g.defined() {
                        g.view([-1])
                    } else {
                        Tensor::zeros([n], (b.flat.kind(), b.flat.device()))
                    }
                })
                .collect();
            let _ = Tensor::cat_out(&b.flat, &grads, 0);
            coll.all_reduce_avg(&b.flat)?;
            // Unpacks into the gradients (views); parameters without a gradient
            // unpack into their throwaway zeros.
            b.flat
                .split_with_sizes_copy_out(&grads, b.sizes.as_slice(), 0);
        }
        Ok(())
    }

    /// Copies rank 0's values of `params` to every rank (the start of a run).
    pub fn broadcast_params(
        &mut self,
        params: &[Tensor],
        coll: &mut dyn Collective,
    ) -> anyhow::Result<()> {
        anyhow::ensure!(
            params.len() == self.params,
            "buckets were laid out for {} parameters, got {}",
            self.params,
            params.len()
        );
        if coll.world_size() == 1 {
            return Ok(());
        }
        let _guard = tch::no_grad_guard();
        for b in &mut self.buckets {
            let views: Vec<Tensor> = b.members.iter().map(|&i| params[i].view([-1])).collect();
            let _ = Tensor::cat_out(&b.flat, &views, 0);
            coll.broadcast(&b.flat)?;
            b.flat
                .split_with_sizes_copy_out(&views, b.sizes.as_slice(), 0);
        }
        Ok(())
    }
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
    use super::super::collective::Solo;
    use super::*;
    use tch::Device;

    fn params(sizes: &[i64]) -> Vec<Tensor> {
        sizes
            .iter()
            .map(|&n| Tensor::ones([n], (Kind::Float, Device::Cpu)).set_requires_grad(true))
            .collect()
    }

    #[test]
    fn layout_respects_the_cap_in_reverse_order() {
        // 4-byte floats: cap 40 bytes = 10 elements.
        let p = params(&[4, 4, 4, 20, 2]);
        let b = GradBuckets::new(&p, 40);
        let members: Vec<Vec<usize>> = b.buckets.iter().map(|b| b.members.clone()).collect();
        assert_eq!(members, vec![vec![4], vec![3], vec![2, 1], vec![0]]);
        assert_eq!(b.bucket_bytes(), vec![8, 80, 32, 16]);
        let one = GradBuckets::new(&p, DEFAULT_BUCKET_BYTES);
        assert_eq!(one.len(), 1);
    }

    #[test]
    fn solo_all_reduce_keeps_gradients() {
        let p = params(&[3, 2]);
        let loss = (&p[0] * 2.0).sum(Kind::Float) + (&p[1] * 3.0).sum(Kind::Float);
        loss.backward();
        let mut b = GradBuckets::new(&p, 8);
        b.all_reduce_avg(&p, &mut Solo).unwrap();
        assert_eq!(Vec::<f32>::try_from(&p[0].grad()).unwrap(), vec![2.0; 3]);
        assert_eq!(tensors_hash(&p), tensors_hash(&params(&[3, 2])));
    }
}
