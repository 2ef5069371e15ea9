//! What gradient checkpointing costs and saves, measured in the benchmark's
//! own run: with `--gradient-checkpointing`, after the timed steps, rounds of
//! steps without it and with it alternate on the same model, data loader and
//! device (off, on, off, on …), so the throughput ratio is the median of the
//! rounds' ratios, each pair run minutes apart at most, and both arms' memory
//! comes from the same probe ([`MemProbe`]). Checkpointing changes no number
//! the trainer computes (bit-identical losses and weights), so toggling it
//! between rounds leaves the run the same run.
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tch::Device;

use super::{host_memory, median, sync, StepMemory};
use crate::train::trainer::{StepStats, Trainer};

/// Alternating rounds of each arm.
pub const ROUNDS: usize = 3;

/// How a run of steps' memory is read: torch's caching allocator on CUDA
/// (peak allocated bytes), the process's resident set on the CPU (`VmHWM`,
/// reset through `/proc/self/clear_refs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemProbe {
    /// torch's allocator statistics of this CUDA device (torch ≥ 2.9).
    Cuda(usize),
    /// The process's RSS (Linux).
    Host,
}

impl MemProbe {
    /// The probe for `device`.
    pub fn of(device: Device) -> Self {
        match device {
            Device::Cuda(i) => Self::Cuda(i),
            _ => Self::Host,
        }
    }

    /// Resets the peak and returns the bytes in use now; `None` where this
    /// process cannot measure (torch < 2.9 on CUDA, no `/proc`).
    pub fn start(self) -> Option<u64> {
        match self {
            Self::Cuda(i) => crate::sys::torch_ext::cuda_allocator_stats(i, true)
                .ok()
                .flatten()
                .map(|s| s.allocated_bytes),
            Self::Host => host_memory::reset_peak()
                .then(host_memory::read)
                .flatten()
                .map(|r| r.current),
        }
    }

    /// The peak since [`MemProbe::start`].
    pub fn peak(self) -> Option<u64> {
        match self {
            Self::Cuda(i) => crate::sys::torch_ext::cuda_allocator_stats(i, false)
                .ok()
                .flatten()
                .map(|s| s.peak_allocated_bytes),
            Self::Host => host_memory::read().map(|r| r.peak),
        }
    }

    /// How [`MemProbe::step_memory`] measured, for the report.
    pub fn method(self) -> &'static str {
        match self {
            Self::Cuda(_) => "torch caching allocator: peak allocated during the timed steps over allocated before them",
            Self::Host => "process RSS: VmHWM during the measured steps (reset through /proc/self/clear_refs) over VmRSS before them, glibc's mmap threshold fixed at 1 MiB so freed tensors leave the RSS; the benchmark's own figure comes from a step after its timed steps, which run without that threshold",
        }
    }

    /// The memory of steps of `batch` images that began at `before`
    /// ([`MemProbe::start`]'s value).
    pub fn step_memory(self, before: Option<u64>, batch: usize) -> Option<StepMemory> {
        Some(StepMemory::new(self.method(), before?, self.peak()?, batch))
    }
}

/// One arm of the comparison over its rounds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Arm {
    /// Images per second over all its timed steps (all ranks).
    pub img_per_s: f64,
    /// Each round's images per second.
    pub rounds_img_per_s: Vec<f64>,
    /// Its steps' memory: the round with the highest peak (`None` where the
    /// probe cannot measure).
    pub step_memory: Option<StepMemory>,
}

/// Gradient checkpointing off against on, measured in one run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Comparison {
    /// How it was measured.
    pub method: String,
    /// Rounds of each arm.
    pub rounds: usize,
    /// Timed steps per round and arm (after one untimed step each).
    pub steps_per_round: u64,
    /// Without checkpointing.
    pub off: Arm,
    /// With checkpointing.
    pub on: Arm,
    /// img/s with it over img/s without: the median of the rounds' ratios.
    pub throughput_ratio: f64,
    /// Per-image memory with it over without (`None` where unmeasured).
    pub per_image_memory_ratio: Option<f64>,
}

/// What [`compare`] needs of the benchmark.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// The benchmark's device.
    pub device: Device,
    /// Images per step over all ranks (for img/s).
    pub global_batch: usize,
    /// Images per step on this rank (for per-image memory).
    pub batch_per_rank: usize,
    /// Timed steps per round and arm.
    pub steps_per_round: u64,
}

/// Steps per round for a benchmark of `timed` steps: the comparison's timed
/// steps come to about twice the benchmark's own.
pub fn steps_per_round(timed: u64) -> u64 {
    timed.div_ceil(ROUNDS as u64).max(1)
}

/// Runs [`ROUNDS`] rounds of each arm, off first, on `trainer` through
/// `step` (one training step, returning its data wait and stats), and leaves
/// checkpointing on (the benchmark compares only runs that have it on). Every rank of a data-parallel job calls
/// it with the same setup, so the ranks toggle at the same step.
pub fn compare(
    trainer: &mut Trainer,
    step: &mut dyn FnMut(&mut Trainer) -> anyhow::Result<(f64, StepStats)>,
    setup: Setup,
) -> anyhow::Result<Comparison> {
    let probe = MemProbe::of(setup.device);
    if probe == MemProbe::Host {
        // Both arms' memory needs it; both arms' timings pay its page
        // faults alike, so their ratio stays like for like.
        host_memory::exact_accounting();
    }
    let mut walls: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut memory: [Option<StepMemory>; 2] = [None, None];
    for _ in 0..ROUNDS {
        for (arm, on) in [(0, false), (1, true)] {
            trainer.set_gradient_checkpointing(on);
            // One untimed step: the allocator grows or shrinks to the arm.
            step(trainer)?;
            sync(setup.device);
            let before = probe.start();
            let t = Instant::now();
            for _ in 0..setup.steps_per_round {
                step(trainer)?;
            }
            sync(setup.device);
            walls[arm].push(t.elapsed().as_secs_f64());
            if let Some(m) = probe.step_memory(before, setup.batch_per_rank) {
                if !memory[arm]
                    .as_ref()
                    .is_some_and(|k| k.peak_bytes >= m.peak_bytes)
                {
                    memory[arm] = Some(m);
                }
            }
        }
    }
    trainer.set_gradient_checkpointing(true);
    let images = (setup.global_batch as u64 * setup.steps_per_round) as f64;
    let rate = |s: f64| if s > 0.0 { images / s } else { 0.0 };
    let arm = |k: usize, memory: Option<StepMemory>| {
        let total: f64 = walls[k].iter().sum();
        Arm {
            img_per_s: rate(total / ROUNDS as f64),
            rounds_img_per_s: walls[k].iter().map(|&s| rate(s)).collect(),
            step_memory: memory,
        }
    };
    let [m_off, m_on] = memory;
    let (off, on) = (arm(0, m_off), arm(1, m_on));
    let ratios: Vec<f64> = off
        .rounds_img_per_s
        .iter()
        .zip(&on.rounds_img_per_s)
        .filter(|(o, _)| **o > 0.0)
        .map(|(o, n)| n / o)
        .collect();
    let per_image_memory_ratio = match (&off.step_memory, &on.step_memory) {
        (Some(a), Some(b)) if a.per_image_bytes > 0 => {
            Some(b.per_image_bytes as f64 / a.per_image_bytes as f64)
        }
        _ => None,
    };
    Ok(Comparison {
        method: format!(
            "{ROUNDS} rounds alternating off and on (off first), each one untimed step then {} timed; throughput ratio: the median of the rounds' on/off ratios; memory: {}",
            setup.steps_per_round,
            probe.method()
        ),
        rounds: ROUNDS,
        steps_per_round: setup.steps_per_round,
        throughput_ratio: median(ratios),
        per_image_memory_ratio,
        off,
        on,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_cover_about_the_benchmarks_own_steps() {
        assert_eq!(steps_per_round(10), 4);
        assert_eq!(steps_per_round(50), 17);
        assert_eq!(steps_per_round(1), 1);
        assert_eq!(steps_per_round(0), 1);
    }
}
