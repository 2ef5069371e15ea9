//! The fleet at the scale of an allocation (#54): 64 ranks under real
//! torchrun, each giving one verdict, the links timed through the tree of
//! groups of 8 (`verify --fleet --group-size`); and, on demand, the curve
//! of 16, 32 and 64 nodes, each node a network namespace of its own.
//!
//! Why 8 torchrun agents of 8 ranks, not 64 agents of one: an agent is a
//! Python that imports torch, about 229 MB of private memory here, and an
//! imgctl that loads libtorch about 144 MB (measured with
//! `/proc/PID/smaps_rollup`, Private_Dirty): 64 agents and 64 imgctl
//! would need about 24 GB, the whole of this machine. The SLURM cluster
//! (`slurm::scale`) runs 64 nodes of one task each.
//!
//! Both 64-node tests keep both cores busy for about 40 s: beside the
//! suite's other tests they would make those tests' timings lie, so they
//! are ignored in the plain `cargo test` and `make test` runs them alone
//! after it (`--ignored --exact`).
use super::*;

/// One 64-rank run at a time: each takes about 10 GB of this machine.
pub(crate) static SCALE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The numbers of rank 0's `rank 0's time:` line and its summary.
pub(crate) fn phases_of(root: &str) -> String {
    root.lines()
        .filter(|l| l.contains("rank 0's time:") || l.contains("fleet verify "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
#[ignore = "64 ranks take the whole machine: `make test` runs them alone, after the suite"]
fn sixty_four_ranks_under_torchrun_give_one_verdict_each_through_the_tree() {
    let _one = SCALE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(torchrun) = crate::parallel::torchrun_or_skip() else {
        return;
    };
    let (hosts, per_host) = (8, 8);
    let Some(nodes) = star_or_skip(hosts) else {
        return;
    };
    let start = Instant::now();
    let mut procs: Vec<Proc> = (0..hosts)
        .map(|i| {
            let mut c = torchrun_fleet(&nodes, &torchrun, i, (hosts, per_host), "imgctl-scale");
            c.args(["--fleet-timeout", "120", "--group-size", "8"]);
            Proc::spawn(&format!("torchrun on host {i}"), c)
        })
        .collect();
    let ends = finish(&mut procs);
    let took = start.elapsed();
    let root = passed_root(&ends);
    let flat = root.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("fleet verify passed: 64 of 64 nodes reported"),
        "{root}"
    );
    assert!(
        flat.contains(
            "PASS fleet.reachable: every node that reported answered its link probe (63 of 63)"
        ),
        "{root}"
    );
    assert!(
        flat.contains("PASS fleet.intact: the probe's bytes arrived unchanged at 63 nodes"),
        "{root}"
    );
    // Eight groups of eight: rank 0 times its 7 members and the 7 other
    // leaders; the leaders time the other 49, all groups at once.
    assert!(
        flat.contains("(8 groups: 14 timed by rank 0, 49 by leaders)"),
        "{root}"
    );
    assert!(
        flat.contains("PASS fleet.allreduce: CPU all-reduce of 4 MiB over 64 nodes in "),
        "{root}"
    );
    // Eight ranks share each host: the fleet says so, once per host.
    assert_eq!(
        flat.matches("run on the same host").count(),
        hosts,
        "{root}"
    );
    let leaves = ends
        .iter()
        .map(|(_, t)| t.matches("reported to rank 0 at").count())
        .sum::<usize>();
    assert_eq!(leaves, 63, "{ends:?}");
    eprintln!(
        "64 ranks under torchrun (8 hosts of 8): {:.1} s\n{}",
        took.as_secs_f64(),
        phases_of(root)
    );
}

/// The curve: 16, 32 and 64 nodes, one namespace and one imgctl each, the
/// plain launcher variables (as a Kubernetes indexed Job sets them).
/// Prints one line per size; run it with
/// `cargo test --test it fleet::scale::curve -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement of about 1 minute: see the function's note"]
fn curve_of_16_32_and_64_nodes() {
    let _one = SCALE.lock().unwrap_or_else(|e| e.into_inner());
    let bin = imgctl_bin();
    for n in [16, 32, 64] {
        let Some(nodes) = star_or_skip(n) else { return };
        let start = Instant::now();
        let mut procs: Vec<Proc> = (0..n)
            .map(|r| fleet_rank(&nodes, &bin, r, n, &["--fleet-timeout", "120"]))
            .collect();
        let ends = finish(&mut procs);
        let took = start.elapsed();
        let (code, root) = &ends[0];
        assert_eq!(*code, Some(0), "{root}");
        eprintln!(
            "{n} nodes: {:.1} s wall (load {})\n{}",
            took.as_secs_f64(),
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim(),
            phases_of(root)
        );
    }
}
