//! A lost node: killed, or its link cut, the other stops within the collective
//! timeout naming the lost rank.
use super::*;

/// Node B's rank is SIGKILLed mid-run: node A's rank 0 stops at once (its
/// connection to rank 1 is reset), well within the collective timeout.
#[test]
fn a_killed_node_stops_the_other_within_the_collective_timeout_naming_the_lost_rank() {
    let Some(nodes) = nodes_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = train_args(dir.path(), &out, 100_000, &["--checkpoint-every", "0"]);
    let timeout = Duration::from_secs(20);
    let envs = [("IMGCTL_COLLECTIVE_TIMEOUT", "20")];
    let mut a = start_rank(&nodes, 0, 29500, &args, &envs);
    let mut b = start_rank(&nodes, 1, 29500, &args, &envs);
    a.wait_for_line(|l| l.starts_with("step 2/"));
    b.kill();
    let killed = Instant::now();
    assert!(b.wait_within(Duration::from_secs(10)).is_some());
    assert_stopped_naming(&mut a, killed, timeout, 1);
}

/// Node B's link goes down mid-run: no packet says so, so both ranks stop
/// when their collective times out, each naming the other; nothing hangs.
#[test]
fn a_cut_link_stops_both_sides_within_the_collective_timeout_naming_the_lost_rank() {
    let Some(nodes) = nodes_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = train_args(dir.path(), &out, 100_000, &["--checkpoint-every", "0"]);
    // Long enough for a busy machine's slowest step, short for the test.
    let timeout = Duration::from_secs(8);
    let envs = [("IMGCTL_COLLECTIVE_TIMEOUT", "8")];
    let mut a = start_rank(&nodes, 0, 29500, &args, &envs);
    let mut b = start_rank(&nodes, 1, 29500, &args, &envs);
    a.wait_for_line(|l| l.starts_with("step 2/"));
    nodes.cut(1);
    let cut = Instant::now();
    // The bound: the timeout bounds each collective as a whole; the one that
    // gives up may start up to a step after the cut, and exiting takes time
    // on a busy machine (2.6 s past the timeout in all, measured). Under 2 ×
    // the timeout: a send that made progress before the cut used to wait a
    // second timeout (12.7 s with 6 s).
    let limit = timeout + Duration::from_secs(6);
    let ta = assert_stopped_naming(&mut a, cut, limit, 1);
    let tb = assert_stopped_naming(&mut b, cut, limit, 0);
    // Silence, not a reset: each side gave up at its timeout.
    for (p, other) in [(&a, 1), (&b, 0)] {
        assert!(
            p.text().contains(&format!(
                "waited 8 s for rank {other} on {} in a CPU ",
                nodes.addr(other)
            )),
            "{}: not a timeout:\n{}",
            p.what,
            p.text()
        );
    }
    eprintln!("after the cut: rank 0 stopped in {ta:?}, rank 1 in {tb:?}");
}
