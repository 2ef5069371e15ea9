//! The data-parallel seam between the trainer and whatever averages its
//! gradients: [`GradSync`], the flat gradient layout the trainer hands it
//! ([`GradLayout`]), the plain backward-then-sync ([`backward_then_sync`]),
//! the single-process sync ([`SingleProcess`]) and the statistics a sync
//! reports ([`SyncStats`]).
//!
//! Both sides import this module and neither imports the other: the trainer
//! (`super::trainer`, `super::run`) calls a `Box<dyn GradSync>`, and
//! `super::parallel::DataParallel` implements it. This module holds no
//! collective, no training state and no output.
use tch::Tensor;

use super::flat::FlatEntry;

/// The collective operations data-parallel training needs. The single-process
/// implementation ([`SingleProcess`]) does nothing.
pub trait GradSync {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// Makes every rank's flat parameters equal to rank 0's (called once, before training).
    fn broadcast_params(&mut self, flat_params: &Tensor) -> anyhow::Result<()>;
    /// Averages the flat gradient buffer across ranks, in place (called after
    /// every backward pass, before clipping and the update).
    fn sync_grads(&mut self, flat_grads: &Tensor) -> anyhow::Result<()>;
    /// Called once by [`Trainer::new`](super::trainer::Trainer::new) with the layout of the flat gradients;
    /// a sync that overlaps its all-reduce with backward sets its gradient
    /// hooks here.
    fn prepare(&mut self, _layout: GradLayout) -> anyhow::Result<()> {
        Ok(())
    }
    /// Runs `backward`, then averages the gradients across ranks: in
    /// `reduce_in` when given (each rank's `grads` cast into it first, e.g.
    /// bf16 into fp32), else in `grads` itself. The default does exactly that
    /// in sequence; [`crate::train::parallel::DataParallel`] overlaps the two.
    fn backward_and_sync(
        &mut self,
        backward: &mut dyn FnMut() -> anyhow::Result<()>,
        grads: &Tensor,
        reduce_in: Option<&Tensor>,
    ) -> anyhow::Result<()> {
        backward_then_sync(self, backward, grads, reduce_in)
    }
    /// Gradient-sync statistics so far (none for a single process).
    fn stats(&self) -> Option<SyncStats> {
        None
    }
    /// Averages host scalars across ranks in place (the logged loss).
    fn mean_scalars(&mut self, _values: &mut [f64]) -> anyhow::Result<()> {
        Ok(())
    }
    /// Whether any rank's `local` flag is set (called at the top of every
    /// step with the Ctrl-C flag, so all ranks stop at the same step).
    fn any_rank(&mut self, local: bool) -> anyhow::Result<bool> {
        Ok(local)
    }
}

/// [`GradSync::backward_and_sync`] without overlap: `backward`, then (after
/// casting `grads` into `reduce_in`, when given) [`GradSync::sync_grads`].
pub fn backward_then_sync<S: GradSync + ?Sized>(
    sync: &mut S,
    backward: &mut dyn FnMut() -> anyhow::Result<()>,
    grads: &Tensor,
    reduce_in: Option<&Tensor>,
) -> anyhow::Result<()> {
    backward()?;
    match reduce_in {
        Some(r) => {
            tch::no_grad(|| r.shallow_clone().copy_(grads));
            sync.sync_grads(r)
        }
        None => sync.sync_grads(grads),
    }
}

/// The flat gradients as the trainer lays them out (see [`GradSync::prepare`]).
pub struct GradLayout {
    /// Every trainable parameter whose `.grad` is a view of the flat gradient
    /// buffer, with its place there, in layout order.
    pub params: Vec<(FlatEntry, Tensor)>,
    /// Bytes per element of the buffer the gradients are averaged in.
    pub reduce_elem_bytes: usize,
    /// Gradient bucket cap in bytes (`training.bucket_cap_mb`).
    pub bucket_cap_bytes: usize,
    /// Overlap the all-reduce with backward (`training.overlap_grad_reduce`).
    pub overlap: bool,
}

impl std::fmt::Debug for GradLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradLayout")
            .field("params", &self.params.len())
            .field("reduce_elem_bytes", &self.reduce_elem_bytes)
            .field("bucket_cap_bytes", &self.bucket_cap_bytes)
            .field("overlap", &self.overlap)
            .finish()
    }
}

/// One process, no communication.
#[derive(Debug, Default, Clone, Copy)]
pub struct SingleProcess;

impl GradSync for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn broadcast_params(&mut self, _flat_params: &Tensor) -> anyhow::Result<()> {
        Ok(())
    }
    fn sync_grads(&mut self, _flat_grads: &Tensor) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Cumulative time spent in gradient synchronisation.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SyncStats {
    /// Number of gradient syncs.
    pub calls: u64,
    /// Collective calls they made (buckets).
    pub buckets: u64,
    /// Host time spent in them: on CPU ranks the exchanges themselves (when
    /// overlapped, on the worker thread, partly hidden behind backward); on
    /// GPUs only the enqueueing.
    pub seconds: f64,
    /// Bytes all-reduced per sync.
    pub bytes_per_sync: usize,
    /// Whether the all-reduce overlaps backward.
    pub overlapped: bool,
    /// Buckets whose all-reduce started while backward was still running.
    pub buckets_during_backward: u64,
}
