//! 64 nodes under the real SLURM cluster (#54): 64 `slurmd`, each in a
//! network namespace of its own, SLURM's tree topology putting each 8
//! under a leaf switch, and one `srun -N 64` of `imgctl verify --fleet`.
//! Every node gives its verdict; the tree's groups are the switches
//! (`SLURM_TOPOLOGY_ADDR`), so each leader times links under its own
//! switch; each node is named by `SLURMD_NODENAME`.
use super::*;

#[test]
#[ignore = "64 nodes take the whole machine: `make test` runs them alone, after the suite"]
fn sixty_four_nodes_under_srun_give_one_verdict_each_grouped_by_switch() {
    let _one = crate::fleet::scale::SCALE
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let cluster = match Cluster::start_with(64, true) {
        Ok(c) => c,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    let up = started.elapsed();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("fleet.json");
    let script = format!(
        "if [ \"$SLURM_PROCID\" = 0 ]; then out={}; else out=/dev/null; fi; exec {} verify --fleet --expect-gpus 0 --fleet-timeout 120 --json > $out",
        json.display(),
        imgctl_bin().display(),
    );
    let mut c = cluster.in_node(0, "srun");
    c.args(["-N", "64", "--ntasks-per-node", "1", "--kill-on-bad-exit=0"])
        .args(["sh", "-c", &script]);
    let start = Instant::now();
    let mut p = Proc::spawn("srun -N 64 verify --fleet", c);
    let ok = p.wait().success();
    let took = start.elapsed();
    let text = p.text();
    assert!(ok, "{text}\n{}", cluster.logs());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["passed"], true, "{text}");
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 64);
    let mut names: Vec<String> = nodes
        .iter()
        .map(|n| {
            assert_eq!(n["state"], "reported", "{n}");
            n["node"].as_str().unwrap().to_string()
        })
        .collect();
    names.sort();
    let mut want: Vec<String> = (1..=64).map(|i| format!("sn{i}")).collect();
    want.sort();
    assert_eq!(names, want);
    // Each node says where it sits, and its leader is under the same switch.
    let switch = |n: &serde_json::Value| {
        let t = n["topology"].as_str().unwrap_or_else(|| panic!("{n}"));
        t.rsplit_once('.').unwrap().0.to_string()
    };
    for n in nodes.iter().filter(|n| n["rank"] != 0) {
        assert!(n["link_mbs"].as_f64().is_some_and(|v| v > 0.0), "{n}");
        if let Some(by) = n["link_by"].as_u64() {
            let leader = nodes.iter().find(|l| l["rank"] == by).unwrap();
            assert_eq!(switch(leader), switch(n), "{n}");
        }
    }
    let phases = &report["phases"];
    assert_eq!(phases["groups"], 8, "{phases}");
    assert_eq!(phases["links_by_root"], 14, "{phases}");
    assert_eq!(phases["links_by_leaders"], 49, "{phases}");
    eprintln!(
        "64 SLURM nodes: cluster up in {:.1} s, srun -N 64 verify --fleet {:.1} s; rank 0: {phases}",
        up.as_secs_f64(),
        took.as_secs_f64()
    );
}
