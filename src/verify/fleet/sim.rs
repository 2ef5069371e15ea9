//! The fleet at 1,024 and 10,000 ranks in one process (#54): every rank a
//! thread running the real fleet verify ([`run_with`]) on loopback, with
//! the real rendezvous, heartbeat, reports, tree of link probes and
//! all-reduce; only each node's own checks are a fixed report. Ignored by
//! default (about a minute); run it with
//! `cargo test --release --lib verify::fleet::sim -- --ignored --nocapture`.
//!
//! It prints what rank 0 carries as the fleet grows: the CPU of its own
//! thread, the bytes it reads and sends, its report's size, and the
//! process's peak memory (every rank's, an upper bound on rank 0's).
use std::time::{Duration, Instant};

use super::*;
use crate::verify::result::CheckResult;
use crate::verify::{ExpectGpus, Level};
use crate::world::rendezvous::free_port;

/// A node's report as a quick CPU verify gives it (5 checks and 18 skips).
fn node_report() -> Report {
    let mut results = vec![
        CheckResult::pass("torch.version", "torch 2.7.0+cu126 matches the pin")
            .measured("2.7.0+cu126 (CUDA 12.6) from /opt/venv/lib/python3.11/site-packages/torch"),
    ];
    for id in ["cudart", "cublas", "cudnn", "nccl"] {
        results.push(
            CheckResult::pass(&format!("torch.{id}_loaded"), "matches the pin").measured(
                "12.6 (wheel 12.6.77) from /opt/venv/lib/python3.11/site-packages/nvidia/lib/x.so",
            ),
        );
    }
    for i in 0..18 {
        results.push(CheckResult::skip(
            &format!("nvml.check{i}"),
            "NVML not available (no NVIDIA driver: libnvidia-ml.so.1 not found)",
        ));
    }
    Report::new("host", None, Level::Quick, ExpectGpus::Any, results)
}

fn identity() -> String {
    "0.1.0 (sha256:000000000000)".to_string()
}

/// A field of /proc/self/status in kB (`VmHWM`, `VmRSS`).
fn status_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Room for every rank's sockets: a leaf holds 3 (its link, its heartbeat,
/// its probe port), rank 0 two a leaf.
fn raise_fd_limit(ranks: usize) {
    let want = 6 * ranks as u64 + 1024;
    let got = crate::sys::process::raise_open_files(want);
    assert!(
        got >= want,
        "{ranks} ranks need {want} open files; the limit is {got}"
    );
}

fn simulate(world: usize, group_size: usize) {
    raise_fd_limit(world);
    let port = free_port().unwrap();
    let options = FleetOptions {
        timeout: Duration::from_secs(300),
        link_bytes: 1 << 20,
        link_floor_mbs: None,
        heartbeat: heartbeat::Settings::default(),
        group_size,
    };
    let report = node_report();
    let rss0 = status_kb("VmRSS");
    let start = Instant::now();
    let leaves: Vec<_> = (1..world)
        .map(|rank| {
            let r = report.clone();
            std::thread::Builder::new()
                .name("sim-leaf".into())
                .stack_size(512 << 10)
                .spawn(move || {
                    let info = LaunchInfo::loopback(rank, world, port);
                    run_with(&info, options, move || r, identity).map(|o| match o {
                        FleetOutcome::Leaf { passed, .. } => passed,
                        FleetOutcome::Root(_) => false,
                    })
                })
                .unwrap()
        })
        .collect();
    let r = report.clone();
    let root = std::thread::Builder::new()
        .name("sim-root".into())
        .spawn(move || {
            let info = LaunchInfo::loopback(0, world, port);
            let out = run_with(&info, options, move || r, identity);
            (out, crate::sys::process::thread_cpu_seconds())
        })
        .unwrap();
    let (out, cpu) = root.join().unwrap();
    let FleetOutcome::Root(fleet) = out.unwrap() else {
        panic!("rank 0 was not the root")
    };
    let passed = leaves
        .into_iter()
        .map(l_join)
        .filter(|o| *o == Some(true))
        .count();
    let wall = start.elapsed().as_secs_f64();
    assert!(fleet.passed, "{}", render::summary_line(&fleet));
    assert_eq!(passed, world - 1, "every leaf heard that the fleet passed");
    let p = &fleet.phases;
    assert_eq!(p.links_by_root + p.links_by_leaders, world - 1);
    let json = serde_json::to_vec(&fleet).unwrap().len();
    let each = allreduce::buffer_bytes(options.link_bytes, world) as f64;
    eprintln!(
        "{world} ranks, groups of {group_size}: {wall:.1} s wall; rank 0's thread {cpu:.2} s CPU; \
         reports read {:.1} MB ({:.1} kB a node) in {:.2} s; links {:.2} s ({} groups, {} timed by rank 0 \
         = {:.0} MB sent, {} by leaders); all-reduce {:.2} s ({:.0} MB through rank 0); \
         --json {:.1} MB; peak RSS of the whole process {:.0} MB (+{:.0} MB over its start)",
        p.report_bytes as f64 / 1e6,
        p.report_bytes as f64 / 1e3 / (world - 1) as f64,
        p.reports_s,
        p.links_s,
        p.groups,
        p.links_by_root,
        (p.links_by_root as u64 * options.link_bytes) as f64 / 1e6,
        p.links_by_leaders,
        p.all_reduce_s,
        2.0 * (world - 1) as f64 * each / 1e6,
        json as f64 / 1e6,
        status_kb("VmHWM") as f64 / 1e3,
        (status_kb("VmHWM").saturating_sub(rss0)) as f64 / 1e3,
    );
}

/// A leaf thread's outcome: whether it heard "passed".
fn l_join(l: std::thread::JoinHandle<anyhow::Result<bool>>) -> Option<bool> {
    l.join().ok()?.ok()
}

#[test]
#[ignore = "a measurement of about a minute: see the module note"]
fn rank_0_of_1024_and_10000_ranks_in_one_process() {
    simulate(1024, 32);
    simulate(10_000, 100);
}
