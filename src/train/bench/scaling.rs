//! `--scaling`: the world sizes it runs (1, 2, 4 … N ranks) and the table
//! built from their reports, each against the one-rank baseline.
use serde::{Deserialize, Serialize};

use super::{BenchReport, SCHEMA_VERSION};

/// One row of a scaling table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScalingRow {
    /// Ranks.
    pub ranks: usize,
    /// Images per second, all ranks.
    pub img_per_s: f64,
    /// Images per second per rank.
    pub img_per_s_per_device: f64,
    /// img/s / (ranks × img/s at 1 rank).
    pub efficiency: f64,
    /// Share of the profiled step spent in all-reduce.
    pub all_reduce_share: f64,
}

/// `--scaling`: the runs at 1, 2, 4 … N ranks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScalingReport {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `imgctl.train_scaling`.
    pub kind: String,
    /// One row per world size.
    pub rows: Vec<ScalingRow>,
    /// The full reports.
    pub runs: Vec<BenchReport>,
}

/// World sizes for `--scaling` up to `n`: 1, 2, 4, … and n itself.
pub fn scaling_sizes(n: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut k = 1;
    while k < n {
        v.push(k);
        k *= 2;
    }
    v.push(n.max(1));
    v
}

/// Builds the scaling table from runs ordered by world size (the first is the baseline).
pub fn scaling_report(runs: Vec<BenchReport>) -> ScalingReport {
    let base = runs.first().map_or(0.0, |r| r.img_per_s_per_device);
    let rows = runs
        .iter()
        .map(|r| ScalingRow {
            ranks: r.world_size,
            img_per_s: r.img_per_s,
            img_per_s_per_device: r.img_per_s_per_device,
            efficiency: if base > 0.0 {
                r.img_per_s_per_device / base
            } else {
                0.0
            },
            all_reduce_share: r.all_reduce_share,
        })
        .collect();
    ScalingReport {
        schema_version: SCHEMA_VERSION,
        kind: "imgctl.train_scaling".into(),
        rows,
        runs,
    }
}
