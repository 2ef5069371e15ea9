//! The fleet at 1,024, 3,000 and 10,000 ranks in one process (#54).
//!
//! - 1,024 and 3,000: every rank a thread running the real fleet verify
//!   ([`run_with`]) on loopback, with the real rendezvous, heartbeat,
//!   reports, tree of link probes and all-reduce; only each node's own
//!   checks are a fixed report.
//! - 10,000: rank 0's data path alone (10,000 reports parsed as they come
//!   off the wire, judged, the tree drawn, `--json` and the table written).
//!   Whole ranks do not fit: rank 0 holds 2 sockets a node and every leaf
//!   3, 50,000 in all, and this machine's hard limit on open files is
//!   20,000 (no CAP_SYS_RESOURCE to raise it), which stops the whole
//!   simulation at about 3,900 ranks.
//!
//! Ignored by default (about 15 s); run it with
//! `cargo test --release --lib verify::fleet::sim -- --ignored --nocapture`.
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
        // Thousands of threads on a few cores: a beat may wait seconds for
        // a core, and a lost rank 0 ends the process. The default (1 s, 5 s)
        // is for one process a node.
        heartbeat: heartbeat::Settings {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(30),
        },
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
    assert!(
        fleet.passed,
        "{}",
        render::table(&fleet, crate::output::Fit::Cut(160))
            .lines()
            .filter(|l| !l.starts_with('|') && !l.starts_with('+'))
            .map(|l| l.chars().take(600).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(passed, world - 1, "every leaf heard that the fleet passed");
    let p = &fleet.phases;
    assert_eq!(p.links_by_root + p.links_by_leaders, world - 1);
    let json = serde_json::to_vec(&fleet).unwrap().len();
    let each = allreduce::buffer_bytes(options.link_bytes, world) as f64;
    eprintln!(
        "{world} ranks, groups of {group_size}: {wall:.1} s wall; rank 0's thread {cpu:.2} s CPU; \
         reports read {:.1} MB ({:.1} kB a node) in {:.2} s; links {:.2} s ({} groups, {} timed by rank 0 \
         = {:.0} MB sent, {} by leaders); all-reduce {:.2} s ({:.0} MB through rank 0); \
         its JSON {:.1} MB; peak RSS of the whole process {:.0} MB (+{:.0} MB over its start)",
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

/// Rank 0's data path for `world` ranks: the reports' bytes parsed, the
/// entries judged, the tree drawn, the JSON and the table made.
fn data_path(world: usize, group_size: usize) {
    let report = node_report();
    let bodies: Vec<Vec<u8>> = (1..world)
        .map(|rank| {
            let r = NodeReport {
                rank,
                host: format!("node{rank:05}"),
                node: Some(format!("node{rank:05}")),
                software: software_facts(&report, identity()),
                topology: Some(format!("top.s{}.node{rank:05}", rank / group_size)),
                probe_port: Some(40_000),
                report: report.clone(),
            };
            serde_json::to_vec(&r).unwrap()
        })
        .collect();
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    let rss0 = status_kb("VmRSS");
    let cpu0 = crate::sys::process::thread_cpu_seconds();
    let start = Instant::now();
    let mut nodes: Vec<NodeEntry> = vec![entry(
        NodeReport {
            rank: 0,
            host: "node00000".into(),
            node: None,
            software: software_facts(&report, identity()),
            topology: Some("top.s0.node00000".into()),
            probe_port: None,
            report: report.clone(),
        },
        Some("self".into()),
    )];
    for (i, body) in bodies.iter().enumerate() {
        let r = parse_report(body, i + 1).unwrap();
        let mut e = entry(r, Some(format!("10.0.{}.{}", (i + 1) / 250, (i + 1) % 250)));
        e.link_mbs = Some(1000.0 + (i % 7) as f64);
        e.link_intact = Some(true);
        nodes.push(e);
    }
    let parsed = start.elapsed().as_secs_f64();
    let tree = groups::groups(
        &nodes
            .iter()
            .map(|n| (n.rank, n.topology.clone()))
            .collect::<Vec<_>>(),
        group_size,
    );
    let direct = groups::direct(&tree).len();
    let fleet = judge::judge_with(nodes, world, judge::LinkRule::default());
    let json = serde_json::to_vec(&fleet).unwrap().len();
    let table = render::table(&fleet, crate::output::Fit::Natural).len();
    let cpu = crate::sys::process::thread_cpu_seconds() - cpu0;
    assert!(fleet.passed, "{}", render::summary_line(&fleet));
    assert_eq!(tree.len(), world.div_ceil(group_size));
    let each = allreduce::buffer_bytes(1 << 20, world) as f64;
    eprintln!(
        "{world} ranks, rank 0's data path, groups of {group_size}: {:.2} s ({cpu:.2} s CPU; {parsed:.2} s to parse {:.1} MB of reports, {:.1} kB a node); {} groups, {direct} links timed by rank 0 ({:.0} MB of 1 MiB probes) and {} by leaders; all-reduce {:.0} kB a node, {:.0} MB through rank 0; its JSON {:.1} MB, table {:.1} MB; memory +{:.0} MB",
        start.elapsed().as_secs_f64(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e3 / (world - 1) as f64,
        tree.len(),
        direct as f64 * 1.048_576,
        world - 1 - direct,
        each / 1e3,
        2.0 * (world - 1) as f64 * each / 1e6,
        json as f64 / 1e6,
        table as f64 / 1e6,
        status_kb("VmRSS").saturating_sub(rss0) as f64 / 1e3,
    );
    drop(fleet);
}

#[test]
#[ignore = "a measurement of about a minute: see the module note"]
fn rank_0_of_1024_3000_and_10000_ranks_in_one_process() {
    // The data path first, so that its memory is measured in a process
    // that has not yet held a thousand ranks.
    data_path(10_000, 100);
    simulate(1024, 32);
    simulate(3000, 55);
}
