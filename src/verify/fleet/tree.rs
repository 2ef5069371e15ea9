//! The fleet's links timed through its tree ([`super::groups`]): rank 0
//! times its own group's members and every other group's leader; then
//! each leader times its members' links, all groups at once, and sends
//! rank 0 one summary. A member its leader could not time (the leader
//! lost, an old imgctl without a probe port) is timed by rank 0 itself,
//! so every reported node still gets its three facts (answered, intact,
//! fast enough).
//!
//! The wire, after the reports (each a tag on a node's stream to rank 0):
//! - `EXPECT` + a 16-byte ticket, to a member: wait for a probe on your
//!   probe port from the connection that shows this ticket (or for rank 0's
//!   next message, which ends the wait);
//! - `GROUP` + length + JSON [`Order`], to a leader: time these members
//!   (address, ticket), answer with length + JSON `[Timed]`.
//!
//! A member answers only the connection that shows its ticket, which rank
//! 0 drew for this run and sent it over its own link; anyone else who
//! connects is dropped.
//!
//! Part: the verify wing (`docs/architecture.md`).
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::groups::Group;
use super::{lost, probe, read_frame, FleetOptions, NodeEntry, NodeState, EXPECT, GROUP, PROBE};
use crate::sys::net::read_exact_by;

/// Bytes of a member's ticket.
const TICKET: usize = 16;

/// Largest order or summary on the wire (10,000 members is ~1 MiB).
const MAX_MESSAGE: u32 = 16 << 20;

/// What rank 0 tells a leader.
#[derive(Debug, Serialize, Deserialize)]
struct Order {
    /// Bytes per probe.
    bytes: u64,
    /// Bound of each wait, ms.
    timeout_ms: u64,
    /// Whom to time.
    members: Vec<Target>,
}

/// A member to time.
#[derive(Debug, Serialize, Deserialize)]
struct Target {
    rank: usize,
    addr: SocketAddr,
    /// Hex of its ticket.
    ticket: String,
}

/// One member as its leader timed it.
#[derive(Debug, Serialize, Deserialize)]
struct Timed {
    rank: usize,
    #[serde(default)]
    mbs: Option<f64>,
    #[serde(default)]
    intact: Option<bool>,
    #[serde(default)]
    error: Option<String>,
}

/// How rank 0's part went: links it timed itself, and by leaders.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Links rank 0 timed.
    pub direct: usize,
    /// Links the leaders timed.
    pub by_leaders: usize,
}

/// A node's probe port: a listener on the address its link to rank 0
/// leaves from, opened before its report (its port goes in the report).
pub(super) fn listen(to_root: &TcpStream) -> Option<TcpListener> {
    let ip = to_root.local_addr().ok()?.ip();
    let l = TcpListener::bind((ip, 0)).ok()?;
    l.set_nonblocking(true).ok()?;
    Some(l)
}

/// Rank 0: times the link of every node in `streams` whose entry is
/// reported, through the tree of `groups`, and fills the entries.
pub(super) fn time_links(
    nodes: &mut [NodeEntry],
    streams: &mut [(usize, TcpStream)],
    groups: &[Group],
    options: &FleetOptions,
    silence: &dyn Fn(usize, String) -> String,
) -> Tally {
    let mut tally = Tally::default();
    // By rank, so that every lookup below is a binary search (10,000 nodes
    // looked up one by one in a list would be 10^8 comparisons).
    nodes.sort_by_key(|n| n.rank);
    streams.sort_by_key(|(r, _)| *r);
    // The leaders first, while they are idle, then their orders, then rank
    // 0's own group while the leaders work.
    let leaders: Vec<&Group> = groups.iter().filter(|g| g.leader != 0).collect();
    for g in &leaders {
        tally.direct += usize::from(direct(nodes, streams, g.leader, options, silence));
    }
    let mut pending: Vec<(usize, Vec<usize>, Instant)> = Vec::new();
    let mut fallback: Vec<usize> = Vec::new();
    for g in &leaders {
        let leader_ok = reported(nodes, g.leader);
        let mut targets = Vec::new();
        for &m in &g.members {
            match target(nodes, streams, m, leader_ok) {
                Some(t) => targets.push(t),
                None => fallback.push(m),
            }
        }
        if targets.is_empty() {
            continue;
        }
        let ranks: Vec<usize> = targets.iter().map(|t| t.rank).collect();
        let order = Order {
            bytes: options.link_bytes,
            timeout_ms: options.timeout.as_millis() as u64,
            members: targets,
        };
        let sent = stream_of(streams, g.leader).is_some_and(|s| send_message(s, GROUP, &order));
        if sent {
            let due = Instant::now() + options.timeout * (ranks.len() as u32 + 1);
            pending.push((g.leader, ranks, due));
        } else {
            fallback.extend(ranks);
        }
    }
    if let Some(own) = groups.iter().find(|g| g.leader == 0) {
        for &m in &own.members {
            tally.direct += usize::from(direct(nodes, streams, m, options, silence));
        }
    }
    for (leader, ranks, due) in pending {
        let answer = stream_of(streams, leader)
            .ok_or_else(|| "no link".to_string())
            .and_then(|s| read_json::<Vec<Timed>>(s, due));
        match answer {
            Ok(timed) => {
                for t in timed.into_iter().filter(|t| ranks.contains(&t.rank)) {
                    match (t.mbs, node_of(nodes, t.rank)) {
                        (Some(mbs), Some(n)) if mbs.is_finite() && mbs > 0.0 => {
                            n.link_mbs = Some(mbs);
                            n.link_intact = t.intact;
                            n.link_by = Some(leader);
                            tally.by_leaders += 1;
                        }
                        _ => fallback.push(t.rank),
                    }
                }
                // A member the summary left out: rank 0 times it.
                for r in ranks {
                    if node_of(nodes, r).is_some_and(|n| n.link_mbs.is_none()) {
                        fallback.push(r);
                    }
                }
            }
            Err(why) => {
                if let Some(n) = node_of(nodes, leader) {
                    n.state = NodeState::Lost;
                    let why = format!("lost while timing its group's links: {why}");
                    n.reason = Some(silence(leader, why));
                }
                fallback.extend(ranks);
            }
        }
    }
    fallback.sort_unstable();
    fallback.dedup();
    for m in fallback {
        tally.direct += usize::from(direct(nodes, streams, m, options, silence));
    }
    tally
}

/// `rank`'s entry in `nodes` (sorted by rank).
fn node_of(nodes: &mut [NodeEntry], rank: usize) -> Option<&mut NodeEntry> {
    let i = nodes.binary_search_by_key(&rank, |n| n.rank).ok()?;
    Some(&mut nodes[i])
}

/// Whether `rank` is in `nodes` (sorted by rank) and reported.
fn reported(nodes: &[NodeEntry], rank: usize) -> bool {
    nodes
        .binary_search_by_key(&rank, |n| n.rank)
        .is_ok_and(|i| nodes[i].state == NodeState::Reported)
}

/// `rank`'s stream in `streams` (sorted by rank).
fn stream_of(streams: &mut [(usize, TcpStream)], rank: usize) -> Option<&mut TcpStream> {
    let i = streams.binary_search_by_key(&rank, |(r, _)| *r).ok()?;
    Some(&mut streams[i].1)
}

/// Rank 0 times `rank`'s link itself; false when it has no stream or its
/// node is not reported.
fn direct(
    nodes: &mut [NodeEntry],
    streams: &mut [(usize, TcpStream)],
    rank: usize,
    options: &FleetOptions,
    silence: &dyn Fn(usize, String) -> String,
) -> bool {
    if !reported(nodes, rank) {
        return false;
    }
    let Some(stream) = stream_of(streams, rank) else {
        return false;
    };
    let result = probe::send(stream, options.link_bytes, options.timeout);
    let Some(node) = node_of(nodes, rank) else {
        return false;
    };
    match result {
        Ok(p) => {
            node.link_mbs = Some(p.mbs);
            node.link_intact = Some(p.intact);
        }
        Err(why) => {
            node.state = NodeState::Lost;
            node.reason = Some(silence(rank, format!("lost during the link probe: {why}")));
        }
    }
    true
}

/// A member its leader can time: reported, with a probe port, told its
/// ticket; none when rank 0 must time it itself.
fn target(
    nodes: &[NodeEntry],
    streams: &mut [(usize, TcpStream)],
    rank: usize,
    leader_ok: bool,
) -> Option<Target> {
    let i = nodes.binary_search_by_key(&rank, |n| n.rank).ok()?;
    let node = &nodes[i];
    if !leader_ok || node.state != NodeState::Reported {
        return None;
    }
    let ip: std::net::IpAddr = node.address.as_deref()?.parse().ok()?;
    let port = node.probe_port?;
    let ticket: [u8; TICKET] = rand::random();
    let stream = stream_of(streams, rank)?;
    let mut message = vec![EXPECT];
    message.extend_from_slice(&ticket);
    stream.write_all(&message).ok()?;
    Some(Target {
        rank,
        addr: SocketAddr::new(ip, port),
        ticket: hex(&ticket),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `tag`, a length and `value`'s JSON.
fn send_message(stream: &mut TcpStream, tag: u8, value: &impl Serialize) -> bool {
    let Ok(body) = serde_json::to_vec(value) else {
        return false;
    };
    let mut m = vec![tag];
    m.extend_from_slice(&(body.len() as u32).to_le_bytes());
    m.extend_from_slice(&body);
    stream.write_all(&m).is_ok()
}

/// Reads a length and that many bytes of JSON, all before `deadline`.
fn read_json<T: for<'a> Deserialize<'a>>(
    stream: &mut TcpStream,
    deadline: Instant,
) -> Result<T, String> {
    let body = read_frame(stream, deadline, MAX_MESSAGE, "message")?;
    serde_json::from_slice(&body).map_err(|e| format!("sent a message imgctl cannot read: {e}"))
}

/// A member, on `EXPECT`: reads its ticket, then waits for the connection
/// that shows it and answers its probe; ends early when rank 0 sends
/// anything else (it times this node itself then), or after the bound.
pub(super) fn expect(
    stream: &mut TcpStream,
    listener: Option<&TcpListener>,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut ticket = [0u8; TICKET];
    read_exact_by(stream, &mut ticket, Instant::now() + timeout)?;
    let Some(listener) = listener else {
        return Ok(());
    };
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        let fds = [stream.as_raw_fd(), listener.as_raw_fd()];
        let ready = crate::sys::net::poll_readable(&fds, left.min(Duration::from_millis(200)))?;
        if ready[0] {
            return Ok(());
        }
        if !ready[1] {
            continue;
        }
        let Ok((mut conn, _)) = listener.accept() else {
            continue;
        };
        if conn.set_nonblocking(false).is_err() {
            continue;
        }
        let mut shown = [0u8; TICKET + 1];
        if read_exact_by(&mut conn, &mut shown, deadline).is_err()
            || shown[..TICKET] != ticket
            || shown[TICKET] != PROBE
        {
            continue; // not our leader: dropped
        }
        if probe::answer(&mut conn, deadline).is_ok() {
            return Ok(());
        }
    }
}

/// A leader, on `GROUP`: times each member of rank 0's order in turn and
/// sends rank 0 the summary.
pub(super) fn lead(stream: &mut TcpStream, world: usize, timeout: Duration) -> anyhow::Result<()> {
    let order: Order = read_json(stream, Instant::now() + timeout)
        .map_err(|e| anyhow::anyhow!("fleet verify: rank 0's group order: {e}"))?;
    if order.members.len() > world || order.bytes > 4096 << 20 {
        anyhow::bail!(
            "fleet verify: rank 0 sent a group order of {} members and {} bytes (at most {world} and 4 GiB)",
            order.members.len(),
            order.bytes
        );
    }
    let each = Duration::from_millis(order.timeout_ms.clamp(1000, 3_600_000));
    let timed: Vec<Timed> = order
        .members
        .iter()
        .map(|t| match time_member(t, order.bytes, each) {
            Ok(p) => Timed {
                rank: t.rank,
                mbs: Some(p.mbs),
                intact: Some(p.intact),
                error: None,
            },
            Err(why) => Timed {
                rank: t.rank,
                mbs: None,
                intact: None,
                error: Some(why),
            },
        })
        .collect();
    let body = serde_json::to_vec(&timed)?;
    let mut m = (body.len() as u32).to_le_bytes().to_vec();
    m.extend_from_slice(&body);
    stream.write_all(&m)?;
    Ok(())
}

/// Connects to a member, shows its ticket and times its link.
fn time_member(t: &Target, bytes: u64, timeout: Duration) -> Result<probe::Probe, String> {
    let ticket: Vec<u8> = (0..t.ticket.len() / 2)
        .filter_map(|i| u8::from_str_radix(t.ticket.get(2 * i..2 * i + 2)?, 16).ok())
        .collect();
    if ticket.len() != TICKET {
        return Err("rank 0 sent a ticket that is not 16 bytes of hex".into());
    }
    let mut conn = TcpStream::connect_timeout(&t.addr, timeout)
        .map_err(|e| format!("could not connect to {}: {e}", t.addr))?;
    let _ = conn.set_nodelay(true);
    conn.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    conn.write_all(&ticket).map_err(|e| lost(&e))?;
    probe::send(&mut conn, bytes, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair on loopback: (rank 0's end, the node's end).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_member_drops_a_wrong_ticket_and_answers_its_leader() {
        let (mut root_end, mut node_end) = pair();
        let listener = listen(&node_end).unwrap();
        let at = listener.local_addr().unwrap();
        let ticket: [u8; TICKET] = rand::random();
        // The node's loop has read the EXPECT tag: the ticket follows.
        root_end.write_all(&ticket).unwrap();
        let member = std::thread::spawn(move || {
            expect(&mut node_end, Some(&listener), Duration::from_secs(20)).unwrap();
        });
        // A stranger with the wrong ticket is dropped, unanswered.
        let mut stranger = TcpStream::connect(at).unwrap();
        stranger.write_all(&[0u8; TICKET]).unwrap();
        stranger.write_all(&[PROBE]).unwrap();
        let _ = stranger.set_read_timeout(Some(Duration::from_secs(5)));
        let mut got = [0u8; 1];
        let n = std::io::Read::read(&mut stranger, &mut got).unwrap_or(0);
        assert_eq!(n, 0, "the member answered a stranger");
        // Its leader, with the ticket, times the link and the bytes arrive whole.
        let t = Target {
            rank: 1,
            addr: at,
            ticket: hex(&ticket),
        };
        let p = time_member(&t, 8 << 20, Duration::from_secs(20)).unwrap();
        assert!(p.intact && p.mbs > 0.0, "{p:?}");
        member.join().unwrap();
    }

    #[test]
    fn a_leader_times_its_members_and_names_the_one_it_could_not_reach() {
        let (mut root_end, mut leader_end) = pair();
        let (mut to_member, mut member_end) = pair();
        let listener = listen(&member_end).unwrap();
        let at = listener.local_addr().unwrap();
        let ticket: [u8; TICKET] = rand::random();
        to_member.write_all(&ticket).unwrap();
        let member = std::thread::spawn(move || {
            expect(&mut member_end, Some(&listener), Duration::from_secs(20)).unwrap();
        });
        // A port nobody listens on any more: that member cannot be reached.
        let gone = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let dead = gone.local_addr().unwrap();
        drop(gone);
        let target = |rank, addr, t: &[u8]| Target {
            rank,
            addr,
            ticket: hex(t),
        };
        let order = Order {
            bytes: 8 << 20,
            timeout_ms: 5000,
            members: vec![target(2, dead, &[0u8; TICKET]), target(3, at, &ticket)],
        };
        assert!(send_message(&mut root_end, GROUP, &order));
        let mut tag = [0u8; 1];
        std::io::Read::read_exact(&mut leader_end, &mut tag).unwrap();
        assert_eq!(tag[0], GROUP);
        lead(&mut leader_end, 4, Duration::from_secs(20)).unwrap();
        let timed: Vec<Timed> =
            read_json(&mut root_end, Instant::now() + Duration::from_secs(20)).unwrap();
        member.join().unwrap();
        assert_eq!(timed.len(), 2);
        assert!(timed[0].mbs.is_none());
        let why = timed[0].error.as_deref().unwrap_or_default();
        assert!(why.starts_with("could not connect to 127.0.0.1:"), "{why}");
        assert_eq!((timed[1].rank, timed[1].intact), (3, Some(true)));
        assert!(timed[1].mbs.is_some_and(|v| v > 0.0));
    }

    #[test]
    fn an_order_larger_than_the_world_is_refused() {
        let (mut root_end, mut leader_end) = pair();
        let order = Order {
            bytes: 1 << 20,
            timeout_ms: 1000,
            members: (0..5)
                .map(|rank| Target {
                    rank,
                    addr: "127.0.0.1:9".parse().unwrap(),
                    ticket: hex(&[0u8; TICKET]),
                })
                .collect(),
        };
        assert!(send_message(&mut root_end, GROUP, &order));
        let mut tag = [0u8; 1];
        std::io::Read::read_exact(&mut leader_end, &mut tag).unwrap();
        let e = lead(&mut leader_end, 4, Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("a group order of 5 members"), "{e}");
    }
}
