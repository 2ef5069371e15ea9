//! A silent node (issue #46): nothing closes its connections, so only the
//! heartbeat sees it. With the default 30-minute collective timeout (the
//! tiny preset is no short run), a stopped rank is named within the
//! heartbeat timeout plus a step, and the restarted job resumes; a rank 0
//! that holds the others in a slow checkpoint write is not mistaken for one.
use super::*;

/// Rank 1 is SIGSTOPped mid-run (a hung process: its sockets stay open):
/// rank 0 names it, its host and its last step within the heartbeat
/// timeout (5 s by default) plus a step, and ends with exit 1; the same
/// command started again resumes from the last checkpoint and completes.
#[test]
fn a_stopped_rank_is_named_within_the_heartbeat_timeout_and_the_job_resumes() {
    let Some(nodes) = nodes_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let steps = 8;
    let args = train_args(
        dir.path(),
        &out,
        steps,
        &["--checkpoint-every", "2", "--resume", "auto"],
    );
    let mut a = start_rank(&nodes, 0, 29500, &args, &[]);
    let mut b = start_rank(&nodes, 1, 29500, &args, &[]);
    a.wait_for_line(|l| l.starts_with("step 3/"));
    b.stop();
    let stopped = Instant::now();
    // The timeout, the step under way and the exit on a busy machine.
    let took = assert_stopped_naming(&mut a, stopped, Duration::from_secs(12), 1);
    let line = error_lines(&a.text())[0].to_string();
    assert!(
        line.contains(&format!(
            "no heartbeat from rank 1 on {} for 5.",
            nodes.addr(1)
        )) && line.contains("; its last step was "),
        "{line}"
    );
    assert_eq!(a.child.try_wait().unwrap().and_then(|s| s.code()), Some(1));
    // Its last beat came up to one interval (1 s) before the stop.
    assert!(
        took >= Duration::from_secs(4),
        "named after {took:?}, before the heartbeat timeout"
    );
    eprintln!("silent rank named in {took:?}: {line}");
    b.kill();
    drop((a, b));
    let saved = checkpoints(&out);
    let last = saved.last().cloned().expect("a checkpoint before the stop");
    let last_step: u64 = last["step-".len()..].parse().unwrap();
    assert!((2..steps).contains(&last_step), "{saved:?}");
    let err = run_both(&nodes, 29501, &args, &[]);
    assert!(
        err.contains(&format!("(step {last_step})")) && err.contains("resuming from"),
        "not resumed from {last}:\n{err}"
    );
    let end = checkpoints(&out).last().cloned().unwrap_or_default();
    assert_eq!(
        end["step-".len()..].parse::<u64>().ok(),
        Some(steps),
        "{err}"
    );
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), steps as usize, "{metrics}");
}

/// Rank 0 writes a checkpoint that takes longer than the heartbeat timeout
/// (the test hook IMGCTL_TEST_CHECKPOINT_DELAY), while rank 1 waits for it
/// in the next step's collective: both heartbeat threads beat on, nobody
/// is declared lost, and the run completes.
#[test]
fn a_checkpoint_write_longer_than_the_heartbeat_timeout_loses_nobody() {
    let Some(nodes) = nodes_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = train_args(
        dir.path(),
        &out,
        4,
        &[
            "--checkpoint-every",
            "2",
            "--heartbeat",
            "0.5",
            "--heartbeat-timeout",
            "2",
        ],
    );
    let start = Instant::now();
    let mut a = start_rank(
        &nodes,
        0,
        29500,
        &args,
        &[("IMGCTL_TEST_CHECKPOINT_DELAY", "3")],
    );
    let mut b = start_rank(&nodes, 1, 29500, &args, &[]);
    let (sa, sb) = (a.wait(), b.wait());
    let err = format!("{}\n---\n{}", a.text(), b.text());
    assert!(sa.success() && sb.success(), "{err}");
    assert!(!err.contains("no heartbeat"), "{err}");
    // The hook did hold rank 0: two checkpoints of 3 s each.
    assert!(start.elapsed() >= Duration::from_secs(6), "{err}");
    assert_eq!(checkpoints(&out).len(), 2, "{err}");
}

/// Node B's outgoing packets are all dropped (`tc netem loss 100%` on its
/// link; where the kernel has no netem, as in this test machine's VM, the
/// same loss made with `iptables -A OUTPUT -j DROP` in its namespace):
/// rank 0 hears nothing from rank 1 and names it. Rank 1 hears rank 0's
/// beats only until TCP, without its acknowledgements, stops sending new
/// data (within a retransmission timeout), so rank 0's notice cannot reach
/// it: it names rank 0's silence, or rank 0's exit (its closing connection
/// gets through) when that came first.
#[test]
fn a_node_whose_packets_are_all_lost_is_named_on_both_nodes() {
    let Some(nodes) = nodes_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = train_args(dir.path(), &out, 100_000, &["--checkpoint-every", "0"]);
    let mut a = start_rank(&nodes, 0, 29500, &args, &[]);
    let mut b = start_rank(&nodes, 1, 29500, &args, &[]);
    a.wait_for_line(|l| l.starts_with("step 2/"));
    let ns = &nodes.names[1];
    let netem = Command::new("tc")
        .args(["-n", ns, "qdisc", "add", "dev", "eth0", "root"])
        .args(["netem", "loss", "100%"])
        .output()
        .unwrap();
    let how = if netem.status.success() {
        "tc netem loss 100%"
    } else {
        let o = Command::new("ip")
            .args([
                "netns", "exec", ns, "iptables", "-A", "OUTPUT", "-j", "DROP",
            ])
            .output();
        match o {
            Ok(o) if o.status.success() => "iptables -A OUTPUT -j DROP",
            _ => {
                eprintln!("SKIPPED: neither tc netem nor iptables can drop node B's packets");
                return;
            }
        }
    };
    let lossy = Instant::now();
    let limit = Duration::from_secs(12);
    let ta = assert_stopped_naming(&mut a, lossy, limit, 1);
    let tb = assert_stopped_naming(&mut b, lossy, limit, 0);
    let (a0, a1) = (nodes.addr(0), nodes.addr(1));
    let la = error_lines(&a.text())[0].to_string();
    let lb = error_lines(&b.text())[0].to_string();
    assert!(
        la.contains(&format!("rank 0: no heartbeat from rank 1 on {a1} for ")),
        "{la}"
    );
    assert!(
        lb.contains(&format!("rank 1: no heartbeat from rank 0 on {a0} for "))
            || lb.contains(&format!(
                "rank 1: rank 0 saw no heartbeat from rank 1 on {a1} for "
            ))
            || lb.contains(&format!("rank 1: the connection to rank 0 on {a0} broke")),
        "{lb}"
    );
    eprintln!("{how} on node B: rank 0 stopped in {ta:?}, rank 1 in {tb:?}");
}
