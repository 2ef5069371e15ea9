//! Resuming a checkpoint on another number of ranks (an elastic restart:
//! torchrun `--nnodes 1:2` lost a node and restarted the survivors, or
//! regained one): the run keeps the checkpoint's global batch.
//!
//! `training.batch_size` is images per rank, so the same per-rank batch on
//! half the ranks would halve the global batch, and with it the learning
//! dynamics (the loss is a mean over the global batch, AdamW's step is
//! per optimizer step). The data, noise and timestep streams are pure
//! functions of `(seed, global sample position)` (`super::data`), so a
//! global batch of G samples is the same G samples at any world size: only
//! its split over the ranks changes. [`fit`] decides the per-rank batch from
//! the checkpoint's record ([`Recorded`]) and the new world size; every rank
//! reads the same checkpoint and so decides the same. The optimizer, EMA,
//! learning-rate schedule and step count are the checkpoint's, unchanged.
//!
//! A pure decision: it must not read files, print or name a flag.

/// What a checkpoint records of the batch it was trained with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recorded {
    /// The checkpoint's step.
    pub step: u64,
    /// Ranks that trained it.
    pub world_size: usize,
    /// Images per rank per step then.
    pub batch_size: usize,
    /// The per-rank batch the run's configuration asked for, before any
    /// elastic restart changed it (equal to `batch_size` until one did).
    pub configured_batch_size: usize,
}

impl Recorded {
    /// Images per step over all ranks.
    pub fn global_batch(&self) -> usize {
        self.batch_size * self.world_size
    }
}

/// The batch a resumed run trains with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fit {
    /// Images per rank per step.
    pub batch_size: usize,
    /// The per-rank batch the configuration asked for, recorded in the
    /// run's next checkpoints (so a later restart with the same command line
    /// knows that it asks for no change).
    pub configured_batch_size: usize,
    /// What changed, for the run to say on rank 0; `None` when nothing did.
    pub note: Option<String>,
}

/// Why a checkpoint cannot be resumed on this many ranks.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ElasticError {
    /// The global batch does not split evenly over the new ranks (exit 2).
    #[error("cannot resume step {step} of a {from_world}-rank run on {world} ranks: its global batch of {global} images does not divide by {world}")]
    DoesNotDivide {
        /// The checkpoint's step.
        step: u64,
        /// The checkpoint's global batch.
        global: usize,
        /// The checkpoint's ranks.
        from_world: usize,
        /// The ranks now.
        world: usize,
    },
}

/// The per-rank batch of a run that resumes `ckpt` on `world` ranks, its
/// configuration asking for `asked` images per rank.
///
/// `asked` equal to the checkpoint's per-rank batch, or to the one its run
/// was configured with (the same command line restarted by a launcher),
/// asks for no change: the global batch stays, split over `world` ranks
/// (an [`ElasticError::DoesNotDivide`] when it does not split evenly). Any
/// other `asked` is a deliberate change and is honoured, the note saying
/// how the global batch changes.
pub fn fit(ckpt: &Recorded, asked: usize, world: usize) -> Result<Fit, ElasticError> {
    let world = world.max(1);
    let global = ckpt.global_batch();
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    if asked == ckpt.batch_size || asked == ckpt.configured_batch_size {
        if global % world != 0 {
            return Err(ElasticError::DoesNotDivide {
                step: ckpt.step,
                global,
                from_world: ckpt.world_size,
                world,
            });
        }
        let batch_size = global / world;
        let changed = world != ckpt.world_size || batch_size != asked;
        return Ok(Fit {
            batch_size,
            configured_batch_size: ckpt.configured_batch_size,
            note: changed.then(|| {
                format!(
                    "resuming step {} of a {}-rank run on {world} rank{}: {batch_size} image{} per rank keep the global batch of {global}",
                    ckpt.step,
                    ckpt.world_size,
                    plural(world),
                    plural(batch_size),
                )
            }),
        });
    }
    let now = asked * world;
    Ok(Fit {
        batch_size: asked,
        configured_batch_size: asked,
        note: (now != global).then(|| {
            format!(
                "resuming step {} with {asked} image{} per rank on {world} rank{}, as configured: the global batch changes from {global} to {now}",
                ckpt.step,
                plural(asked),
                plural(world),
            )
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ckpt(world_size: usize, batch_size: usize, configured: usize) -> Recorded {
        Recorded {
            step: 40,
            world_size,
            batch_size,
            configured_batch_size: configured,
        }
    }

    #[test]
    fn the_same_world_size_changes_nothing() {
        let f = fit(&ckpt(2, 4, 4), 4, 2).unwrap();
        assert_eq!(
            (f.batch_size, f.configured_batch_size, f.note),
            (4, 4, None)
        );
    }

    #[test]
    fn two_ranks_to_one_and_back_keep_the_global_batch() {
        // 2 → 1: the same command line (4 per rank) trains 8 on the one rank.
        let one = fit(&ckpt(2, 4, 4), 4, 1).unwrap();
        assert_eq!((one.batch_size, one.configured_batch_size), (8, 4));
        assert_eq!(
            one.note.as_deref(),
            Some("resuming step 40 of a 2-rank run on 1 rank: 8 images per rank keep the global batch of 8")
        );
        // 1 → 2, from the 1-rank checkpoint (8 per rank, configured 4): the
        // command line's 4 and the checkpoint config's 8 both mean "no change".
        for asked in [4, 8] {
            let two = fit(&ckpt(1, 8, 4), asked, 2).unwrap();
            assert_eq!((two.batch_size, two.configured_batch_size), (4, 4));
        }
        // 1 → 1 again (a second restart on the survivor), command line 4.
        let again = fit(&ckpt(1, 8, 4), 4, 1).unwrap();
        assert_eq!(again.batch_size, 8);
        assert!(again.note.is_some());
    }

    #[test]
    fn a_global_batch_that_does_not_divide_is_refused_naming_the_numbers() {
        let e = fit(&ckpt(2, 3, 3), 3, 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot resume step 40 of a 2-rank run on 4 ranks: its global batch of 6 images does not divide by 4"
        );
    }

    #[test]
    fn another_per_rank_batch_is_a_deliberate_change() {
        let f = fit(&ckpt(2, 4, 4), 6, 1).unwrap();
        assert_eq!((f.batch_size, f.configured_batch_size), (6, 6));
        assert_eq!(
            f.note.as_deref(),
            Some("resuming step 40 with 6 images per rank on 1 rank, as configured: the global batch changes from 8 to 6")
        );
        // Asking exactly for the global batch on one rank says nothing more.
        let f = fit(&ckpt(2, 4, 4), 8, 1).unwrap();
        assert_eq!((f.batch_size, f.note), (8, None));
    }
}
