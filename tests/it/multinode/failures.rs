//! A lost node: killed (the collective names it at once), or its link cut
//! (the heartbeat names it), the other stops naming the lost rank.
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

/// Node B's link goes down mid-run: no packet says so, so the heartbeats
/// name the silence (5 s by default), long before the collective timeout;
/// each side names the other; nothing hangs.
#[test]
fn a_cut_link_stops_both_sides_within_the_heartbeat_timeout_naming_the_lost_rank() {
    let Some(nodes) = nodes_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = train_args(dir.path(), &out, 100_000, &["--checkpoint-every", "0"]);
    // Far past the heartbeat's 5 s: the heartbeat, not the collective, speaks.
    let envs = [("IMGCTL_COLLECTIVE_TIMEOUT", "60")];
    let mut a = start_rank(&nodes, 0, 29500, &args, &envs);
    let mut b = start_rank(&nodes, 1, 29500, &args, &envs);
    a.wait_for_line(|l| l.starts_with("step 2/"));
    nodes.cut(1);
    let cut = Instant::now();
    // The heartbeat timeout, plus its poll, plus the exit on a busy machine.
    let limit = Duration::from_secs(12);
    let ta = assert_stopped_naming(&mut a, cut, limit, 1);
    let tb = assert_stopped_naming(&mut b, cut, limit, 0);
    // Silence, not a reset: each side's heartbeat named the other.
    for (p, other) in [(&a, 1), (&b, 0)] {
        assert!(
            p.text().contains(&format!(
                "no heartbeat from rank {other} on {} for 5.",
                nodes.addr(other)
            )),
            "{}: not the heartbeat:\n{}",
            p.what,
            p.text()
        );
    }
    eprintln!("after the cut: rank 0 stopped in {ta:?}, rank 1 in {tb:?}");
}
