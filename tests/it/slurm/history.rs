//! `verify --fleet --history DIR --exclude-file FILE` under srun on the
//! real cluster (#54): a node whose own checks fail (sn2 expects a GPU
//! this machine lacks) fails twice in each run (the retry), is named a
//! repeat offender after its second failed run, and the file it writes is
//! what `sbatch --exclude` takes: a one-node job lands on sn1, a two-node
//! job cannot be placed. `--against-history` reads the same folder, and
//! prometheus_client's parser reads the `--metrics` file.
use super::*;

/// `srun … sh -c 'imgctl verify --fleet …'`, rank 1 expecting one GPU.
fn fleet_run(cluster: &Cluster, history: &Path, exclude: &Path) -> (bool, String) {
    let script = format!(
        "if [ \"$SLURM_PROCID\" = 1 ]; then expect=1; else expect=0; fi; exec {} verify --fleet --expect-gpus $expect --fleet-timeout 60 --history {} --exclude-file {} --metrics {}",
        imgctl_bin().display(),
        history.display(),
        exclude.display(),
        history.with_extension("prom").display()
    );
    let mut c = cluster.in_node(0, "srun");
    c.args([
        "-N",
        "2",
        "--ntasks-per-node",
        "1",
        "--label",
        "--kill-on-bad-exit=0",
    ])
    .args(["sh", "-c", &script]);
    let mut p = Proc::spawn("srun verify --fleet --history", c);
    let ok = p.wait().success();
    (ok, p.text())
}

#[test]
fn a_repeat_offender_is_named_and_sbatch_excludes_it() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (history, exclude) = (dir.path().join("history"), dir.path().join("exclude"));
    let (ok, first) = fleet_run(&cluster, &history, &exclude);
    assert!(!ok, "{first}");
    assert!(first.contains("nvml.driver node (failed twice)"), "{first}");
    assert!(
        first.contains("PASS  fleet.history: no repeat offender in 2 recorded node-run(s)"),
        "{first}"
    );
    assert_eq!(std::fs::read_to_string(&exclude).unwrap(), "\n");
    let (_, second) = fleet_run(&cluster, &history, &exclude);
    assert!(
        second.contains(
            "WARN  fleet.history: sn2 is a repeat offender: failed in 2 of its last 2 runs"
        ),
        "{second}"
    );
    assert!(second.contains("wrote 1 repeat offender(s) to"), "{second}");
    let list = std::fs::read_to_string(&exclude).unwrap();
    assert_eq!(list, "sn2\n");
    metrics_parse(&history.with_extension("prom"));
    let lines = std::fs::read_to_string(history.join("verdicts.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 4, "{lines}");
    // Return to fleet on a machine without GPUs: nothing comparable, so it
    // cannot pass (its verdict says why, the run exits 1).
    let out = crate::common::imgctl(&[
        "verify",
        "--expect-gpus",
        "0",
        "--against-history",
        history.to_str().unwrap(),
    ]);
    let (_, stderr) = crate::common::texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.contains("history.spread")
            && l.contains("ERROR")
            && l.contains("nothing to compare")),
        "{stderr}"
    );
    let excluded = format!("--exclude={}", list.trim());
    let sbatch = |nodes: &str| {
        cluster
            .in_node(0, "sbatch")
            .args(["--parsable", "-N", nodes, &excluded, "--wrap", "hostname"])
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let one = sbatch("1");
    assert!(
        one.status.success(),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    let id = String::from_utf8_lossy(&one.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        cluster.wait_for_job(&id, Duration::from_secs(60)),
        "COMPLETED"
    );
    assert_eq!(cluster.job_field(&id, "NodeList"), "sn1");
    let two = sbatch("2");
    assert!(
        !two.status.success(),
        "a two-node job was placed with sn2 excluded"
    );
    let said = String::from_utf8_lossy(&two.stderr);
    assert!(
        said.contains("node configuration is not available"),
        "{said}"
    );
}

/// The `--metrics` file, read by prometheus_client's own parser (PyPI): sn2's
/// failed check and both nodes' states come back as gauges.
fn metrics_parse(path: &Path) {
    let script = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
samples = {}
for family in text_string_to_metric_families(open(sys.argv[1]).read()):
    assert family.type == "gauge", family
    for s in family.samples:
        samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
def get(name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]
assert get("imgctl_fleet_passed") == 0.0
assert get("imgctl_fleet_node_up", node="sn1", rank="0") == 1.0
assert get("imgctl_fleet_node_up", node="sn2", rank="1") == 1.0
assert get("imgctl_verify_check_failed", node="sn2", rank="1", check="nvml.driver", subject="node") == 1.0
assert get("imgctl_verify_check_failed", node="sn1", rank="0", check="nvml.driver", subject="node") == 0.0
assert get("imgctl_fleet_check_failed", check="fleet.node_checks") == 1.0
print(len(samples), "samples")
"#;
    let out = std::process::Command::new(crate::common::venv_python())
        .args(["-c", script, path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused {}: {}\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(path).unwrap_or_default()
    );
}
