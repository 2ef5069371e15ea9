//! `imgctl verify --fleet` across real addresses: three (or four) "nodes"
//! in network namespaces on one bridge ([`Nodes::star`]), each running its
//! own imgctl. A fleet under torchrun's multi-node rendezvous passes and
//! reports every node; a link shaped with `tc` to a tenth is named as the
//! slow one; a node killed after joining and a node that never came are
//! named within the bound; a node running another imgctl binary is named
//! as the software mismatch. Skips (printing why) where namespaces cannot
//! be made, as `multinode.rs` does.
#![cfg(feature = "torch")]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::imgctl_bin;
use crate::multinode::{Nodes, Proc};

pub(crate) mod scale;

/// The port rank 0 listens on in these tests (each fixture has its own namespaces).
const PORT: &str = "29511";

fn star_or_skip(count: usize) -> Option<Nodes> {
    match Nodes::star(count) {
        Ok(n) => Some(n),
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

/// `imgctl verify --fleet` as rank `rank` of `world` on node `rank`, with
/// the plain launcher variables (as a Kubernetes indexed Job sets them).
fn fleet_rank(nodes: &Nodes, program: &Path, rank: usize, world: usize, extra: &[&str]) -> Proc {
    let mut c = nodes.command(rank, program);
    c.args(["verify", "--fleet", "--expect-gpus", "0"])
        .args(extra)
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", "0")
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_WORLD_SIZE", "1")
        .env("MASTER_ADDR", nodes.addr(0))
        .env("MASTER_PORT", PORT);
    Proc::spawn(&format!("fleet rank {rank}"), c)
}

/// torchrun on node `i` of `nodes` as one of `agents` agents of `per_node`
/// ranks each (c10d rendezvous on node 0), starting `imgctl verify --fleet
/// --expect-gpus 0`; the caller adds the rest of imgctl's flags.
pub(crate) fn torchrun_fleet(
    nodes: &Nodes,
    torchrun: &Path,
    i: usize,
    (agents, per_node): (usize, usize),
    id: &str,
) -> Command {
    let endpoint = format!("{}:29400", nodes.addr(0));
    let mut c = nodes.command(i, torchrun);
    c.args(["--nnodes", &agents.to_string()])
        .args(["--nproc-per-node", &per_node.to_string()])
        .args(["--rdzv-backend", "c10d", "--rdzv-endpoint", &endpoint])
        .args(["--rdzv-id", id, "--local-addr", &nodes.addr(i)])
        // The namespaces share a hostname: say which node hosts the store.
        .args([
            "--rdzv-conf",
            if i == 0 { "is_host=1" } else { "is_host=0" },
        ])
        .args(["--max-restarts", "0", "--no-python"])
        .arg(imgctl_bin())
        .args(["verify", "--fleet", "--expect-gpus", "0"]);
    c
}

/// Every process of a torchrun fleet ended 0: the text of the one that
/// printed the fleet's report (torchrun's c10d rendezvous picks which node
/// holds rank 0; the others print one line each).
pub(crate) fn passed_root(ends: &[(Option<i32>, String)]) -> &str {
    for (code, text) in ends {
        assert_eq!(*code, Some(0), "{text}");
    }
    ends.iter()
        .map(|(_, t)| t.as_str())
        .find(|t| t.contains("fleet verify passed"))
        .unwrap_or_else(|| panic!("no fleet report: {ends:?}"))
}

/// Waits for every process, returning (exit code, stderr) of each.
fn finish(procs: &mut [Proc]) -> Vec<(Option<i32>, String)> {
    procs
        .iter_mut()
        .map(|p| {
            let status = p.wait();
            (status.code(), p.text())
        })
        .collect()
}

#[test]
fn three_nodes_under_torchrun_report_as_one_fleet() {
    let Some(torchrun) = crate::parallel::torchrun_or_skip() else {
        return;
    };
    let Some(nodes) = star_or_skip(3) else { return };
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("fleet.xml");
    let start = Instant::now();
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| {
            let mut c = torchrun_fleet(&nodes, &torchrun, i, (3, 1), "imgctl-fleet");
            c.arg("--junit").arg(&junit);
            Proc::spawn(&format!("torchrun on node {i}"), c)
        })
        .collect();
    let ends = finish(&mut procs);
    let took = start.elapsed();
    let root = passed_root(&ends);
    assert!(
        root.contains("fleet verify passed: 3 of 3 nodes reported"),
        "{root}"
    );
    assert!(root.contains("PASS  fleet.software: the same "), "{root}");
    // The namespaces share a host name, not an address: no "same host" warning.
    assert!(!root.contains("run on the same host"), "{root}");
    // Every node at once: the CPU collective's all-reduce, its sum checked.
    assert!(
        root.contains("PASS  fleet.allreduce: CPU all-reduce of 16 MiB over 3 nodes in "),
        "{root}"
    );
    assert!(
        root.contains("PASS  fleet.links: links from rank 0 in MB/s: rank 1 "),
        "{root}"
    );
    let leaves = ends
        .iter()
        .filter(|(_, t)| t.contains("reported to rank 0 at") && t.contains("the fleet passed"))
        .count();
    assert_eq!(leaves, 2, "{ends:?}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(
        xml.matches("<testsuite name=\"imgctl.fleet.").count(),
        3,
        "{xml}"
    );
    assert!(xml.contains("name=\"fleet.software[node]\""), "{xml}");
    eprintln!(
        "three-node fleet under torchrun: {:.1} s\n{root}",
        took.as_secs_f64()
    );
}

#[test]
fn a_link_shaped_to_a_tenth_is_named_as_the_slow_one() {
    let Some(nodes) = star_or_skip(3) else { return };
    // The bridge's ports carry well over 1 GB/s here; 200 Mbit/s is 25 MB/s.
    nodes.shape(2, "200mbit");
    let bin = imgctl_bin();
    let mut procs: Vec<Proc> = (0..3)
        .map(|r| fleet_rank(&nodes, &bin, r, 3, &["--link-mib", "8"]))
        .collect();
    let ends = finish(&mut procs);
    let (code, root) = &ends[0];
    // A slow link is a WARN: the run passes, and says which node.
    assert_eq!(*code, Some(0), "{root}");
    let flat = root.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&format!(
            "WARN fleet.links: the link from rank 0 to {} (rank 2, {}) is slow: ",
            hostname(),
            nodes.addr(2)
        )),
        "{root}"
    );
    assert!(
        !flat.contains(&format!("to {} (rank 1,", hostname())),
        "{root}"
    );
    eprintln!("{root}");
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn a_node_killed_after_joining_and_one_that_never_came_are_named_within_the_bound() {
    let Some(nodes) = star_or_skip(3) else { return };
    let bin = imgctl_bin();
    // World size 4: rank 3 is never started. Rank 2 joins and is killed
    // while rank 0 still waits for rank 3.
    let bound = ["--fleet-timeout", "6"];
    let start = Instant::now();
    let mut root = fleet_rank(&nodes, &bin, 0, 4, &bound);
    let mut one = fleet_rank(&nodes, &bin, 1, 4, &bound);
    let mut two = fleet_rank(&nodes, &bin, 2, 4, &bound);
    wait_for_connection(&nodes, 2);
    two.kill();
    let status = root
        .wait_within(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("rank 0 did not end within 60 s:\n{}", root.text()));
    let took = start.elapsed();
    let text = root.text();
    assert_eq!(status.code(), Some(1), "{text}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("FAIL fleet.nodes: 2 of 4 nodes reported;"),
        "{text}"
    );
    assert!(
        flat.contains(&format!(
            "rank 2 ({}) joined, then died before its report",
            nodes.addr(2)
        )),
        "{text}"
    );
    assert!(
        flat.contains("rank 3 never joined the rendezvous at "),
        "{text}"
    );
    assert!(
        flat.contains("SKIP fleet.allreduce: not every node is here"),
        "{text}"
    );
    eprintln!("{text}");
    // The survivor hears the verdict and fails too.
    assert_eq!(one.wait().code(), Some(1), "{}", one.text());
    assert!(one.text().contains("the fleet FAILED"), "{}", one.text());
    eprintln!(
        "lost and missing nodes named after {:.1} s (bound 6 s)",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(40), "{took:?}");
}

/// A node that joined, then went silent (SIGSTOP: its connections stay
/// open) is named by rank 0's heartbeat within its 5 s, not at the 45 s
/// fleet timeout of every wait.
#[test]
fn a_node_that_joined_then_went_silent_is_named_within_the_heartbeat_timeout() {
    let Some(nodes) = star_or_skip(2) else { return };
    let took = silent_node_is_named(&nodes, &[], "5.");
    eprintln!(
        "a silent node named after {:.1} s (fleet timeout 45 s)",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// `--heartbeat 0.5 --heartbeat-timeout 2` on every node: a node that
/// joined, then went silent is named after 2 s of silence, not 5; the
/// heartbeat flags need `--fleet`.
#[test]
fn verify_fleet_takes_the_heartbeat_flags() {
    use crate::common::{imgctl, texts};
    let out = imgctl(&["verify", "--expect-gpus", "0", "--heartbeat", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", texts(&out).1);
    let Some(nodes) = star_or_skip(2) else { return };
    let beat = ["--heartbeat", "0.5", "--heartbeat-timeout", "2"];
    let took = silent_node_is_named(&nodes, &beat, "2.");
    eprintln!(
        "--heartbeat 0.5 --heartbeat-timeout 2: a silent node named after {:.1} s",
        took.as_secs_f64()
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(12),
        "{took:?}"
    );
}

/// Two nodes with `beat` flags; rank 1 is stopped once it has joined (its
/// rendezvous and heartbeat connections are up). Rank 0 must fail naming it
/// as silent for `secs` (the start of the figure it prints); returns the
/// time from the stop to rank 0's end.
fn silent_node_is_named(nodes: &Nodes, beat: &[&str], secs: &str) -> Duration {
    let bin = imgctl_bin();
    // 256 MiB to probe and all-reduce: seconds, so the stop lands before
    // the verdict even when rank 1's quick checks win the race (CI saw the
    // stop land in a 16 MiB all-reduce).
    let args = [beat, &["--link-mib", "256"]].concat();
    let mut root = fleet_rank(nodes, &bin, 0, 2, &args);
    let one = fleet_rank(nodes, &bin, 1, 2, &args);
    wait_for_connections(nodes, 1, 2);
    one.stop();
    let stopped = Instant::now();
    let status = root
        .wait_within(Duration::from_secs(40))
        .unwrap_or_else(|| panic!("rank 0 did not end within 40 s:\n{}", root.text()));
    let took = stopped.elapsed();
    let text = root.text();
    assert_eq!(status.code(), Some(1), "{text}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    // `rank 1 (ADDR)`, or `HOST (rank 1, ADDR)` when its report came before
    // the stop (seen: its checks are quick).
    let a1 = nodes.addr(1);
    assert!(
        flat.contains(&format!(
            "{a1}) joined, then went silent: no heartbeat from rank 1 on {a1} for {secs}"
        )),
        "{text}"
    );
    took
}

/// Waits until node `i` holds an established connection to rank 0's port.
fn wait_for_connection(nodes: &Nodes, i: usize) {
    wait_for_connections(nodes, i, 1)
}

/// Waits until node `i` holds `n` established connections to rank 0's port.
fn wait_for_connections(nodes: &Nodes, i: usize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                &nodes.names[i],
                "ss",
                "-Htn",
                "state",
                "established",
            ])
            .arg(format!("dst {}:{PORT}", nodes.addr(0)))
            .output()
            .unwrap();
        if String::from_utf8_lossy(&o.stdout).lines().count() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {i} never connected to rank 0"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_node_running_another_imgctl_build_is_named_as_the_mismatch() {
    let Some(nodes) = star_or_skip(3) else { return };
    let dir = tempfile::tempdir().unwrap();
    // The same version, another binary: one byte appended still runs.
    let other = dir.path().join("imgctl");
    std::fs::copy(imgctl_bin(), &other).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&other)
        .unwrap();
    std::io::Write::write_all(&mut f, b"\n").unwrap();
    drop(f);
    let bin = imgctl_bin();
    let mut procs = vec![
        fleet_rank(&nodes, &bin, 0, 3, &[]),
        fleet_rank(&nodes, &bin, 1, 3, &[]),
        fleet_rank(&nodes, &other, 2, 3, &[]),
    ];
    let ends = finish(&mut procs);
    let (code, root) = &ends[0];
    assert_eq!(*code, Some(1), "{root}");
    let flat = root.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&format!(
            "FAIL fleet.software: {} (rank 2, {}) has imgctl {} (sha256:",
            hostname(),
            nodes.addr(2),
            env!("CARGO_PKG_VERSION")
        )) && flat.contains("2 of 3 nodes have"),
        "{root}"
    );
    assert_eq!(flat.matches("FAIL fleet.software").count(), 1, "{root}");
    for (code, text) in &ends[1..] {
        assert_eq!(*code, Some(1), "{text}");
    }
}

/// The fleet examples a user copies: the Kubernetes manifest validates
/// against the API's schemas (kubernetes-validate, strict: a misspelt field
/// fails), its pods carry train-demo's env contract with RANK from the
/// completion index, and both files run a command imgctl's own CLI accepts.
#[test]
fn the_fleet_examples_validate_and_run_valid_imgctl_commands() {
    use clap::Parser;
    use serde::Deserialize;
    let root = crate::common::repo_root();
    let manifest = root.join("examples/k8s-fleet-verify.yaml");
    let validator = crate::common::venv().join("bin/kubernetes-validate");
    let out = Command::new(&validator)
        .args(["--strict", "--no-warn"])
        .arg(&manifest)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", validator.display()));
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(said.matches(" passed for resource ").count(), 2, "{said}");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let mut jobs = 0;
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v = serde_yaml::Value::deserialize(doc).unwrap();
        if v["kind"] != "Job" {
            continue;
        }
        jobs += 1;
        assert_eq!(v["spec"]["completionMode"], "Indexed");
        let completions = v["spec"]["completions"].as_u64().unwrap();
        let c = &v["spec"]["template"]["spec"]["containers"][0];
        let env = c["env"].as_sequence().unwrap();
        let get = |name: &str| {
            env.iter()
                .find(|e| e["name"] == name)
                .unwrap_or_else(|| panic!("{name}"))
        };
        assert_eq!(
            get("RANK")["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        );
        assert_eq!(get("WORLD_SIZE")["value"], completions.to_string());
        let service = v["spec"]["template"]["spec"]["subdomain"].as_str().unwrap();
        assert_eq!(
            get("MASTER_ADDR")["value"].as_str().unwrap(),
            format!("{}-0.{service}", v["metadata"]["name"].as_str().unwrap())
        );
        let args: Vec<&str> = c["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(&args[..3], ["imgctl", "verify", "--fleet"]);
        imgctl::cli::Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(jobs, 1);
    let script = std::fs::read_to_string(root.join("examples/slurm-fleet-verify.sbatch")).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(root.join("examples/slurm-fleet-verify.sbatch"))
        .output()
        .unwrap();
    assert!(
        syntax.status.success(),
        "{}",
        String::from_utf8_lossy(&syntax.stderr)
    );
    let joined = script.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.trim_start().starts_with("srun ") && l.contains("imgctl verify --fleet"))
        .expect("an srun … imgctl verify --fleet line");
    // A lost node must not take rank 0 down before it is named.
    assert!(line.contains("--kill-on-bad-exit=0"), "{line}");
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "imgctl").unwrap();
    imgctl::cli::Cli::try_parse_from(&words[at..]).unwrap_or_else(|e| panic!("sbatch: {e}"));
    assert!(script.contains("#SBATCH --ntasks-per-node=1"));
}

/// Bad fleet flags are usage errors with one line and a hint, before any
/// check runs or any port is opened.
#[test]
fn bad_fleet_flags_are_usage_errors() {
    use crate::common::{imgctl, one_error_line, texts};
    for (args, needle) in [
        (
            vec!["--fleet-timeout", "0"],
            "--fleet-timeout 0.0 is not a number of seconds",
        ),
        (
            vec!["--fleet-timeout", "nan"],
            "--fleet-timeout NaN is not a number of seconds",
        ),
        (
            vec!["--link-mib", "0"],
            "--link-mib 0 is not from 1 to 4096",
        ),
        (vec!["--image", "x:1"], "cannot be used with"),
        (
            vec!["--heartbeat", "0"],
            "--heartbeat 0 is not a number of seconds",
        ),
        (
            vec!["--heartbeat", "2", "--heartbeat-timeout", "1"],
            "--heartbeat-timeout 1 is not longer than --heartbeat 2",
        ),
    ] {
        let mut full = vec!["verify", "--fleet", "--expect-gpus", "0"];
        full.extend(&args);
        let out = imgctl(&full);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            one_error_line(&stderr).contains(needle),
            "{args:?}: {stderr}"
        );
    }
}

/// `verify --fleet` with no launcher's variables (#45 F19) runs as a fleet
/// of one, and says so: it compared nothing across nodes.
#[test]
fn a_fleet_without_a_launcher_says_it_is_a_fleet_of_one() {
    use crate::common::texts;
    let mut c = Command::new(imgctl_bin());
    c.args([
        "verify",
        "--fleet",
        "--expect-gpus",
        "0",
        "--level",
        "quick",
    ])
    .env("NO_COLOR", "1");
    for var in [
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_PROCID",
        "SLURM_NTASKS",
    ] {
        c.env_remove(var);
    }
    let out = c.output().unwrap();
    let (_, stderr) = texts(&out);
    assert!(
        stderr.contains("warning: verify --fleet found no launcher"),
        "{stderr}"
    );
    assert!(stderr.contains("this is a fleet of one node"), "{stderr}");
}
