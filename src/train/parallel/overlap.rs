//! The gradient all-reduce overlapped with backward, as PyTorch DDP does it.
//!
//! Gradient buckets hold whole parameters ([`super::buckets::param_buckets`]).
//! While backward runs, a worker thread waits for each bucket's parameters to
//! report final gradients ([`super::hooks`]) and starts that bucket's
//! all-reduce at once: on a GPU on NCCL's own stream, so the backward kernels
//! keep the device busy meanwhile; on CPU ranks over TCP while the autograd
//! thread computes. Only the buckets still in flight when backward ends are
//! waited for ("exposed" communication).
//!
//! Every rank must issue the same collectives in the same order, so buckets
//! are reduced in one agreed order, never in the order they happen to finish:
//! first from the end of the flat buffer towards its start, then, from the
//! second step on, in the order the buckets completed on rank 0 in the first
//! step (broadcast to all ranks by [`Overlap::agree_order`]). The order cannot
//! change the result: each element is averaged on its own. This module owns
//! that schedule and the worker; it must not decide the dtype of the
//! reduction or touch the optimizer.
use std::sync::Arc;
use std::time::Instant;

use tch::{Kind, Tensor};

use super::buckets::param_buckets;
use super::hooks::{CloseOnDrop, GradHooks, Readiness, Ready};
use crate::train::flat::FlatEntry;
use crate::world::collective::Collective;

/// What one overlapped step did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OverlapStep {
    /// Buckets whose all-reduce started while backward was still running.
    pub started_during_backward: usize,
    /// Buckets reduced.
    pub buckets: usize,
    /// Host seconds the worker spent starting collectives (on CPU ranks the
    /// whole exchange; on GPUs only the enqueueing).
    pub collective_seconds: f64,
}

/// The hooks, the buckets and the agreed order of one data-parallel process.
#[derive(Debug)]
pub struct Overlap {
    hooks: GradHooks,
    ranges: Vec<(i64, i64)>,
    order: Vec<usize>,
    agreed: bool,
}

impl Overlap {
    /// Buckets `params` (in flat-layout order; gradients of `elem_bytes` per
    /// element, at most `cap_bytes` per bucket, see [`param_buckets`]) and
    /// hooks them.
    pub fn new(
        params: Vec<(FlatEntry, Tensor)>,
        elem_bytes: usize,
        cap_bytes: usize,
    ) -> anyhow::Result<Self> {
        // Each parameter's span runs to the next one's start: the alignment
        // gaps between them (zeros on every rank) ride along, so the buckets
        // tile the whole flat buffer and every element is reduced once.
        let spans: Vec<(i64, i64)> = params
            .iter()
            .enumerate()
            .map(|(i, (e, _))| {
                let end = params.get(i + 1).map_or(
                    crate::train::flat::align_up(e.offset + e.numel),
                    |(next, _)| next.offset,
                );
                (e.offset, end - e.offset)
            })
            .collect();
        let buckets = param_buckets(&spans, elem_bytes, cap_bytes);
        let readiness = Arc::new(Readiness::new(buckets.param_bucket));
        let params = params.into_iter().map(|(e, t)| (e.name, t)).collect();
        let order = (0..buckets.ranges.len()).collect();
        Ok(Self {
            hooks: GradHooks::set(params, readiness)?,
            ranges: buckets.ranges,
            order,
            agreed: false,
        })
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        self.ranges.len()
    }

    /// The order buckets are reduced in.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Runs `backward` while averaging the flat gradients `grads` across
    /// ranks bucket by bucket as they become final. With `reduce_in`, each
    /// bucket is first cast into that buffer (same layout, e.g. fp32 for bf16
    /// gradients) and averaged there. On return the averaged values can be
    /// read by work queued for the device from then on.
    pub fn run(
        &self,
        coll: &mut dyn Collective,
        grads: &Tensor,
        reduce_in: Option<&Tensor>,
        backward: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<OverlapStep> {
        let readiness = self.hooks.readiness().as_ref();
        let flat = grads.view([-1]);
        let target = reduce_in.map(|t| t.view([-1]));
        let (order, ranges) = (&self.order, &self.ranges);
        readiness.arm();
        std::thread::scope(|s| {
            let worker = s.spawn(move || -> anyhow::Result<OverlapStep> {
                let _no_grad = tch::no_grad_guard();
                coll.begin_async()?;
                let mut step = OverlapStep::default();
                for &b in order {
                    match readiness.wait(b) {
                        Ready::Aborted => anyhow::bail!("backward failed"),
                        Ready::Reported if readiness.backward_running() => {
                            step.started_during_backward += 1;
                        }
                        _ => {}
                    }
                    let t = Instant::now();
                    let (start, len) = ranges[b];
                    let src = flat.narrow(0, start, len);
                    let buf = match &target {
                        Some(dst) => {
                            let mut d = dst.narrow(0, start, len);
                            d.copy_(&src);
                            d
                        }
                        None => src,
                    };
                    coll.all_reduce_avg_async(&buf)?;
                    step.collective_seconds += t.elapsed().as_secs_f64();
                    step.buckets += 1;
                }
                coll.wait_async()?;
                Ok(step)
            });
            let mut guard = CloseOnDrop::new(readiness);
            let done = backward();
            guard.succeeded = done.is_ok();
            drop(guard);
            let step = worker.join().unwrap_or_else(|_| {
                Err(anyhow::anyhow!("the gradient all-reduce worker panicked"))
            });
            // A failed backward explains a stopped worker, not the reverse.
            done?;
            step
        })
    }

    /// After the first step: all ranks adopt the order in which rank 0's
    /// buckets completed (buckets that never completed keep their place at
    /// the end). Later calls do nothing. A collective: every rank calls it.
    pub fn agree_order(
        &mut self,
        coll: &mut dyn Collective,
        device: tch::Device,
    ) -> anyhow::Result<()> {
        if self.agreed {
            return Ok(());
        }
        let proposal = completion_first(&self.hooks.readiness().completion_order(), &self.order);
        let as_f32: Vec<f32> = proposal.iter().map(|&b| b as f32).collect();
        let t = Tensor::from_slice(&as_f32).to_device(device);
        coll.broadcast(&t)?;
        let agreed: Vec<f32> = Vec::try_from(&t.to_device(tch::Device::Cpu).to_kind(Kind::Float))?;
        let order: Vec<usize> = agreed.iter().map(|&b| b as usize).collect();
        anyhow::ensure!(
            is_permutation(&order, self.ranges.len()),
            "rank 0 sent a bucket order that is not a permutation of {} buckets: {order:?}",
            self.ranges.len()
        );
        self.order = order;
        self.agreed = true;
        Ok(())
    }
}

/// `completed` first, then the buckets of `current` it lacks, in that order.
pub fn completion_first(completed: &[usize], current: &[usize]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(current.len());
    for &b in completed.iter().chain(current) {
        if current.contains(&b) && !out.contains(&b) {
            out.push(b);
        }
    }
    out
}

fn is_permutation(order: &[usize], n: usize) -> bool {
    let mut seen = vec![false; n];
    order.len() == n
        && order
            .iter()
            .all(|&b| b < n && !std::mem::replace(&mut seen[b], true))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::collective::{check_buffer, Backend};
    use tch::{nn, nn::Module, Device};

    /// A world of two whose other rank always holds ones: the sum adds 1.
    /// Records each call's length.
    #[derive(Default)]
    struct OtherRankHoldsOnes {
        calls: Vec<i64>,
    }

    impl Collective for OtherRankHoldsOnes {
        fn rank(&self) -> usize {
            0
        }
        fn world_size(&self) -> usize {
            2
        }
        fn backend(&self) -> Backend {
            Backend::Cpu
        }
        fn all_reduce_sum(&mut self, buf: &Tensor) -> anyhow::Result<()> {
            check_buffer(buf, None)?;
            self.calls.push(buf.numel() as i64);
            let _ = buf.shallow_clone().g_add_scalar_(1.0);
            Ok(())
        }
        fn broadcast(&mut self, _buf: &Tensor) -> anyhow::Result<()> {
            Ok(())
        }
        fn barrier(&mut self) -> anyhow::Result<()> {
            Ok(())
        }
    }

    fn overlap_of(params: &Params, cap_bytes: usize) -> Overlap {
        let params = params
            .iter()
            .map(|(e, t)| (e.clone(), t.shallow_clone()))
            .collect();
        Overlap::new(params, 4, cap_bytes).unwrap()
    }

    type Params = Vec<(crate::train::flat::FlatEntry, Tensor)>;

    /// A two-layer net whose gradients live in one flat buffer, and its
    /// parameters with their places there, in name order.
    fn net_with_flat_grads() -> (nn::VarStore, nn::Sequential, Tensor, Params) {
        let vs = nn::VarStore::new(Device::Cpu);
        let net = nn::seq()
            .add(nn::linear(vs.root() / "a", 20, 10, Default::default()))
            .add_fn(|x| x.relu())
            .add(nn::linear(vs.root() / "b", 10, 30, Default::default()));
        let layout = crate::train::flat::FlatLayout::of(&vs);
        let grads = layout.bind_grads(&vs, Kind::Float);
        let params = layout.with_vars(&vs);
        (vs, net, grads, params)
    }

    #[test]
    fn every_bucket_is_averaged_once_during_backward_and_the_order_is_agreed() {
        let (_vs, net, grads, params) = net_with_flat_grads();
        // Layout a.bias 10, a.weight 200, b.bias 30, b.weight 300 elements,
        // each starting at a multiple of 128 (spans 128, 256, 128, 384 with
        // their gaps); a 1500-byte cap (375 floats) makes buckets [b.weight]
        // (384), [a.weight, b.bias] (384), [a.bias] (128).
        let mut ov = overlap_of(&params, 1500);
        assert_eq!(ov.buckets(), 3);
        let x = Tensor::ones([3, 20], (Kind::Float, Device::Cpu));
        // The plain gradients first (hooks not armed: nothing reduced).
        let _ = grads.shallow_clone().zero_();
        net.forward(&x).sum(Kind::Float).backward();
        let plain = grads.copy();
        let mut coll = OtherRankHoldsOnes::default();
        let _ = grads.shallow_clone().zero_();
        let step = ov
            .run(&mut coll, &grads, None, &mut || {
                net.forward(&x).sum(Kind::Float).backward();
                Ok(())
            })
            .unwrap();
        assert_eq!(step.buckets, 3);
        assert_eq!(
            coll.calls,
            vec![384, 384, 128],
            "the last layer's bucket first"
        );
        // (local + the other rank's ones) / 2, element by element, everywhere.
        assert!(grads.allclose(&((&plain + 1.0) / 2.0), 0.0, 0.0, false));
        // Rank 0's completion order becomes everyone's: the last layer first.
        ov.agree_order(&mut coll, Device::Cpu).unwrap();
        assert_eq!(ov.order()[0], 0);
        assert!(is_permutation(ov.order(), 3));
    }

    #[test]
    fn gradients_are_copied_into_the_reduce_buffer_bucket_by_bucket() {
        let (_vs, net, grads, params) = net_with_flat_grads();
        let ov = overlap_of(&params, 1500);
        let reduce_in = Tensor::zeros([grads.numel() as i64], (Kind::Float, Device::Cpu));
        let x = Tensor::ones([3, 20], (Kind::Float, Device::Cpu));
        let mut coll = OtherRankHoldsOnes::default();
        let _ = grads.shallow_clone().zero_();
        ov.run(&mut coll, &grads, Some(&reduce_in), &mut || {
            net.forward(&x).sum(Kind::Float).backward();
            Ok(())
        })
        .unwrap();
        // The gradients stay as they were; the buffer holds their average.
        let want = (&grads + 1.0) / 2.0;
        assert!(reduce_in.allclose(&want, 0.0, 0.0, false));
    }

    #[test]
    fn a_failed_backward_ends_the_step_without_hanging() {
        let (_vs, _net, grads, params) = net_with_flat_grads();
        let ov = overlap_of(&params, 1500);
        let mut coll = OtherRankHoldsOnes::default();
        let err = ov
            .run(&mut coll, &grads, None, &mut || {
                anyhow::bail!("out of memory")
            })
            .unwrap_err();
        assert_eq!(err.to_string(), "out of memory");
        assert!(
            coll.calls.is_empty(),
            "nothing was reduced: {:?}",
            coll.calls
        );
        // Backward that never reaches the hooks (no gradient at all): every
        // bucket is still reduced once, after backward.
        let step = ov.run(&mut coll, &grads, None, &mut || Ok(())).unwrap();
        assert_eq!((step.buckets, step.started_during_backward), (3, 0));
    }

    #[test]
    fn completion_order_goes_first_and_nothing_is_lost_or_doubled() {
        assert_eq!(completion_first(&[2, 0], &[0, 1, 2, 3]), vec![2, 0, 1, 3]);
        assert_eq!(completion_first(&[], &[1, 0]), vec![1, 0]);
        // Stray or repeated entries are ignored.
        assert_eq!(completion_first(&[9, 1, 1], &[0, 1]), vec![1, 0]);
        assert!(is_permutation(&[1, 0, 2], 3));
        assert!(!is_permutation(&[1, 1, 2], 3));
        assert!(!is_permutation(&[0, 1], 3));
        assert!(!is_permutation(&[0, 3, 1], 3));
    }
}
