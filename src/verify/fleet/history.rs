//! The fleet's memory (`verify --fleet --history DIR`): every run appends
//! one JSON line per node to `DIR/verdicts.jsonl` ([`Record`]), under an
//! exclusive lock and in one write, so two runs at once (on a shared
//! filesystem too: Linux maps `flock` to NFS byte-range locks) never
//! interleave their lines. From it:
//!
//! - repeat offenders ([`offenders`]): a node that failed in 2 of its last
//!   3 runs, or whose figure keeps falling (a least-squares slope of at
//!   most −3 % a week over its last runs);
//! - the nodes to leave out, in SLURM's `--exclude` form ([`exclude_list`]);
//! - return to fleet ([`against`]): a repaired node's figures against the
//!   spread the fleet recorded for its GPU model.
//!
//! Reading and judging are pure; [`append`] and [`read`] are the I/O.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{FleetReport, NodeEntry, NodeState};
use crate::verify::result::{CheckResult, Status};

/// The file in DIR.
pub const HISTORY_FILE: &str = "verdicts.jsonl";
/// The record layout's version.
pub const RECORD_VERSION: u32 = 1;
/// The most bytes of history read (about 200,000 node-runs).
pub const HISTORY_MAX: u64 = 256 << 20;
/// A node that failed in this many …
pub const OFFENDER_FAILS: usize = 2;
/// … of its last this many runs is a repeat offender.
pub const OFFENDER_WINDOW: usize = 3;
/// A figure falling at least this share of its mean a week is drifting.
pub const DRIFT_PER_WEEK: f64 = 0.03;
/// The fewest runs a drift is judged on.
pub const DRIFT_MIN_RUNS: usize = 4;
/// How long an append waits for another run's lock.
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// One GPU as a node's verify saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSeen {
    /// Its index on the node.
    pub index: u32,
    /// Its name (`NVIDIA H200`).
    pub name: String,
    /// Its compute capability as `sm_90`, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm: Option<String>,
}

/// One measured figure of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// The check's id (`functional.matmul`).
    pub id: String,
    /// The GPU's index.
    pub gpu: u32,
    /// Its model (`NVIDIA H200`), when known.
    #[serde(default)]
    pub model: String,
    /// The value.
    pub value: f64,
    /// Its unit.
    #[serde(default)]
    pub unit: String,
}

/// One node in one run: one line of `verdicts.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// [`RECORD_VERSION`].
    pub v: u32,
    /// The run's id (the same on every line of one run).
    pub run: String,
    /// When the run ended, seconds since the Unix epoch.
    pub unix: f64,
    /// The node's name: the scheduler's (`SLURMD_NODENAME`, `NODE_NAME`),
    /// else its host name (with `@address` when two nodes share one).
    pub node: String,
    /// Its rank in that run.
    pub rank: usize,
    /// reported, missing or lost.
    pub state: NodeState,
    /// Whether its own checks passed (false when it did not report).
    pub passed: bool,
    /// The ids of its failed checks, or why it did not report.
    #[serde(default)]
    pub failing: Vec<String>,
    /// Its driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Its GPUs.
    #[serde(default)]
    pub gpus: Vec<GpuSeen>,
    /// Its per-GPU figures.
    #[serde(default)]
    pub figures: Vec<Figure>,
}

/// The name each node is known by in the history and the metrics: its
/// scheduler's name, else its host, with `@address` when hosts are shared.
pub fn node_names(nodes: &[NodeEntry]) -> Vec<String> {
    let base: Vec<String> = nodes
        .iter()
        .map(|n| {
            n.node
                .clone()
                .or_else(|| n.host.clone())
                .unwrap_or_else(|| format!("rank {}", n.rank))
        })
        .collect();
    base.iter()
        .zip(nodes)
        .map(|(name, n)| {
            let shared = base.iter().filter(|b| *b == name).count() > 1;
            match (&n.address, shared) {
                (Some(a), true) if a != "self" => format!("{name}@{a}"),
                (Some(_), true) => format!("{name}@rank0"),
                _ => name.clone(),
            }
        })
        .collect()
}

/// The records of one fleet run, one per node.
pub fn records_of(report: &FleetReport, run: &str, unix: f64) -> Vec<Record> {
    let names = node_names(&report.nodes);
    report
        .nodes
        .iter()
        .zip(names)
        .map(|(n, node)| {
            let (passed, failing, gpus, figures) = match &n.report {
                Some(r) => {
                    let gpus: Vec<GpuSeen> = r
                        .results
                        .iter()
                        .filter(|x| x.id == "nvml.identity")
                        .filter_map(|x| {
                            Some(GpuSeen {
                                index: x.gpu?,
                                name: x.facts.get("name")?.clone(),
                                sm: x.measured.as_deref().and_then(|m| {
                                    m.split(", ")
                                        .find(|w| w.starts_with("sm_"))
                                        .map(str::to_string)
                                }),
                            })
                        })
                        .collect();
                    let model = |g: u32| {
                        gpus.iter()
                            .find(|s| s.index == g)
                            .map(|s| s.name.clone())
                            .unwrap_or_default()
                    };
                    let figures = r
                        .results
                        .iter()
                        .filter(|x| !x.status.fails_run())
                        .filter_map(|x| {
                            Some(Figure {
                                id: x.id.clone(),
                                gpu: x.gpu?,
                                model: model(x.gpu?),
                                value: x.value?,
                                unit: x.unit.clone().unwrap_or_default(),
                            })
                        })
                        .collect();
                    let failing = r
                        .results
                        .iter()
                        .filter(|x| x.status.fails_run())
                        .map(|x| x.id.clone())
                        .collect();
                    (r.passed, failing, gpus, figures)
                }
                None => (
                    false,
                    n.reason.clone().into_iter().collect(),
                    Vec::new(),
                    Vec::new(),
                ),
            };
            Record {
                v: RECORD_VERSION,
                run: run.to_string(),
                unix,
                node,
                rank: n.rank,
                state: n.state,
                passed,
                failing,
                driver: n.software.get("driver").filter(|d| *d != "n/a").cloned(),
                gpus,
                figures,
            }
        })
        .collect()
}

/// Appends `records` to DIR/verdicts.jsonl (DIR made when missing): all
/// lines in one write, under an exclusive lock, then fsynced.
pub fn append(dir: &Path, records: &[Record]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    let path = dir.join(HISTORY_FILE);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match crate::sys::fs::try_lock_exclusive(&file) {
            Ok(()) => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("locking {}: {e}", path.display()),
                ))
            }
        }
    }
    let mut text = String::new();
    for r in records {
        text.push_str(&serde_json::to_string(r).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    file.write_all(text.as_bytes())?;
    file.sync_data()
}

/// The records of DIR, oldest first; lines that do not parse are counted,
/// not fatal (a half-written line of a run that died before its fsync).
pub fn read(dir: &Path) -> std::io::Result<(Vec<Record>, usize)> {
    let path = dir.join(HISTORY_FILE);
    let bytes = match crate::sys::fs::read_regular(&path, HISTORY_MAX) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    Ok(parse(&String::from_utf8_lossy(&bytes)))
}

/// [`read`]'s parse: the records, and how many lines were not one.
pub fn parse(text: &str) -> (Vec<Record>, usize) {
    let mut out = Vec::new();
    let mut bad = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Record>(line) {
            Ok(r) if r.v == RECORD_VERSION => out.push(r),
            _ => bad += 1,
        }
    }
    out.sort_by(|a, b| a.unix.total_cmp(&b.unix));
    (out, bad)
}

/// A node the history names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offender {
    /// The node.
    pub node: String,
    /// Runs it failed among its last ones.
    pub failed: usize,
    /// How many of its last runs were looked at.
    pub of: usize,
    /// What it failed, newest run first.
    pub failing: Vec<String>,
    /// Its falling figures: `functional.matmul GPU 0: −4.1 %/week over 6 runs`.
    pub drifting: Vec<String>,
}

impl Offender {
    /// Whether it is to be left out (failed too often: a drift alone warns).
    pub fn repeat(&self) -> bool {
        self.failed >= OFFENDER_FAILS
    }
}

/// The nodes that failed [`OFFENDER_FAILS`] of their last
/// [`OFFENDER_WINDOW`] runs, or whose figures drift down.
pub fn offenders(records: &[Record]) -> Vec<Offender> {
    let mut by_node: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records {
        by_node.entry(r.node.as_str()).or_default().push(r);
    }
    let mut out = Vec::new();
    for (node, runs) in by_node {
        let last: Vec<&&Record> = runs.iter().rev().take(OFFENDER_WINDOW).collect();
        let failed = last.iter().filter(|r| !r.passed).count();
        let failing: Vec<String> = last
            .iter()
            .filter(|r| !r.passed)
            .map(|r| {
                if r.failing.is_empty() {
                    "failed".to_string()
                } else {
                    r.failing.join(", ")
                }
            })
            .collect();
        let drifting = drifts(&runs);
        if failed >= OFFENDER_FAILS || !drifting.is_empty() {
            out.push(Offender {
                node: node.to_string(),
                failed,
                of: last.len(),
                failing,
                drifting,
            });
        }
    }
    out
}

/// One figure over time: (when, value, unit).
type Series = Vec<(f64, f64, String)>;

/// The falling figures of one node's runs (oldest first).
fn drifts(runs: &[&Record]) -> Vec<String> {
    let mut series: BTreeMap<(String, u32), Series> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.state == NodeState::Reported) {
        for f in &r.figures {
            series.entry((f.id.clone(), f.gpu)).or_default().push((
                r.unix,
                f.value,
                f.unit.clone(),
            ));
        }
    }
    let mut out = Vec::new();
    for ((id, gpu), points) in series {
        if points.len() < DRIFT_MIN_RUNS {
            continue;
        }
        let n = points.len() as f64;
        let mean_t = points.iter().map(|p| p.0).sum::<f64>() / n;
        let mean_v = points.iter().map(|p| p.1).sum::<f64>() / n;
        let var_t: f64 = points.iter().map(|p| (p.0 - mean_t).powi(2)).sum();
        if var_t <= 0.0 || mean_v <= 0.0 {
            continue;
        }
        let slope = points
            .iter()
            .map(|p| (p.0 - mean_t) * (p.1 - mean_v))
            .sum::<f64>()
            / var_t;
        let per_week = slope * 7.0 * 86_400.0 / mean_v;
        if per_week <= -DRIFT_PER_WEEK {
            let (first, last) = (points[0].1, points[points.len() - 1].1);
            out.push(format!(
                "{id} GPU {gpu}: {:+.1} %/week over {} runs ({first:.1} → {last:.1} {})",
                per_week * 100.0,
                points.len(),
                points[0].2
            ));
        }
    }
    out
}

/// The repeat offenders in SLURM's `--exclude` form: names, comma-separated.
pub fn exclude_list(offenders: &[Offender]) -> String {
    offenders
        .iter()
        .filter(|o| o.repeat())
        .map(|o| o.node.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// The `fleet.history` verdicts of a run, its records already appended: a
/// WARN per offender, or one PASS.
pub fn verdicts(offenders: &[Offender], runs: usize, skipped: usize) -> Vec<CheckResult> {
    const ID: &str = "fleet.history";
    let mut out = Vec::new();
    for o in offenders {
        let mut why = Vec::new();
        if o.repeat() {
            why.push(format!(
                "failed in {} of its last {} runs ({})",
                o.failed,
                o.of,
                o.failing.join("; ")
            ));
        }
        why.extend(o.drifting.iter().map(|d| format!("falling: {d}")));
        out.push(
            CheckResult::warn(ID, format!("{} is a repeat offender: {}", o.node, why.join("; ")))
                .measured(format!("{} of {} runs failed", o.failed, o.of))
                .threshold(format!(
                    "fewer than {OFFENDER_FAILS} of the last {OFFENDER_WINDOW}; no figure falling {:.0} %/week or more",
                    DRIFT_PER_WEEK * 100.0
                ))
                .fact("node", o.node.clone())
                .hint("drain it and repair it; a return-to-fleet check against this history says when it may come back"),
        );
    }
    if out.is_empty() {
        out.push(CheckResult::pass(
            ID,
            format!(
                "no repeat offender in {runs} recorded node-run(s){}",
                if skipped > 0 {
                    format!(" ({skipped} unreadable line(s) skipped)")
                } else {
                    String::new()
                }
            ),
        ));
    }
    out
}

/// Return to fleet: each per-GPU figure of `report` against the spread
/// (lowest to highest) the history records for the same check on the same
/// GPU model, from the nodes' runs that passed.
pub fn against(report: &crate::verify::report::Report, records: &[Record]) -> CheckResult {
    const ID: &str = "history.spread";
    let model_of = |gpu: u32| {
        report
            .results
            .iter()
            .find(|x| x.id == "nvml.identity" && x.gpu == Some(gpu))
            .and_then(|x| x.facts.get("name").cloned())
            .unwrap_or_default()
    };
    let mut spread: BTreeMap<(&str, &str), (f64, f64, usize)> = BTreeMap::new();
    for r in records.iter().filter(|r| r.passed) {
        for f in &r.figures {
            let e = spread.entry((f.id.as_str(), f.model.as_str())).or_insert((
                f64::INFINITY,
                f64::NEG_INFINITY,
                0,
            ));
            e.0 = e.0.min(f.value);
            e.1 = e.1.max(f.value);
            e.2 += 1;
        }
    }
    let (mut inside, mut outside, mut unknown) = (0usize, Vec::new(), Vec::new());
    for x in &report.results {
        let (Some(gpu), Some(v)) = (x.gpu, x.value) else {
            continue;
        };
        let model = model_of(gpu);
        let unit = x.unit.as_deref().unwrap_or("");
        match spread.get(&(x.id.as_str(), model.as_str())) {
            Some((lo, hi, n)) if v < *lo || v > *hi => outside.push(format!(
                "{} GPU {gpu}: {v:.1} {unit}, the fleet's {model} recorded {lo:.1}…{hi:.1} {unit} over {n} run(s)",
                x.id
            )),
            Some(_) => inside += 1,
            None => unknown.push(format!("{} GPU {gpu}", x.id)),
        }
    }
    let r = if !outside.is_empty() {
        CheckResult::fail(
            ID,
            format!(
                "{} figure(s) outside the fleet's spread: {}",
                outside.len(),
                outside.join("; ")
            ),
        )
        .hint("keep the node drained: repair it and run this again")
    } else if inside == 0 {
        CheckResult::error(
            ID,
            format!(
                "nothing to compare: {} ({} passing node-run(s) recorded)",
                if unknown.is_empty() {
                    "this node measured no per-GPU figure (the full level measures them, on GPUs)"
                        .to_string()
                } else {
                    format!(
                        "the history has no figure of {} for this GPU model",
                        unknown.join(", ")
                    )
                },
                records.iter().filter(|r| r.passed).count()
            ),
        )
        .hint("record the fleet's history first, at the same level as this check")
    } else {
        CheckResult::pass(
            ID,
            format!("every figure ({inside}) within the fleet's recorded spread for its GPU model"),
        )
    };
    let status = r.status;
    let r = r.measured(format!("{inside} inside, {} outside", outside.len()));
    if status == Status::Pass {
        r.threshold("within the lowest…highest the fleet recorded")
    } else {
        r
    }
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
