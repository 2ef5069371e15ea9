//! Rank 0's side of the rendezvous's hellos: accepts connections, reads
//! each hello on a thread of its own, and keeps the ones that are this
//! job's ranks ([`gather`]). Split from `rendezvous.rs` by topic; it knows
//! the hello, not the session that follows.
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::auth::Nonce;
use super::hello::{read_hello_of, send_reply, Reply};
use super::launch::LaunchInfo;

/// The most accepted connections whose hello rank 0 waits for at once,
/// beyond two per rank of the world ([`pending_cap`]); past it, the oldest
/// of them is closed to make room, never the newcomer (a real rank sends
/// its hello at once, so it is never the oldest). Each is read on a thread
/// of its own, so idle connections (12 of them kept the real rank 1 out for
/// two minutes when hellos were read one after another) never delay a real
/// rank.
const MAX_PENDING_HELLOS: usize = 64;

/// The pending-hello bound for a world of `n`: a fleet of 1,024 that joins
/// at once has ~1,000 hellos in flight before the first is read, and a flat
/// 64 closed real ranks (the in-process simulation of #54 saw 311 of 1,024
/// join).
fn pending_cap(n: usize) -> usize {
    MAX_PENDING_HELLOS.saturating_add(n.saturating_mul(2))
}

/// Accepts hellos until every rank of `info`'s world has one in `peers` or
/// `deadline` passes; returns the refusals (at most 8).
pub(super) fn gather(
    listener: &TcpListener,
    info: &LaunchInfo,
    deadline: Instant,
    peers: &mut [Option<(TcpStream, SocketAddr)>],
    nonces: &mut [Option<Nonce>],
) -> anyhow::Result<Vec<String>> {
    let n = info.world_size;
    listener.set_nonblocking(true)?;
    let mut arrived = 1 + peers.iter().skip(1).flatten().count();
    let (tx, hellos) = std::sync::mpsc::channel();
    // The connections whose hello is awaited, oldest first (a clone of
    // each, to close it from here).
    let mut waiting: VecDeque<(u64, TcpStream)> = VecDeque::new();
    let mut accepted = 0u64;
    let mut refused: Vec<String> = Vec::new();
    let cap = pending_cap(n);
    while arrived < n {
        if Instant::now() >= deadline {
            return Ok(refused);
        }
        let mut took_one = false;
        match listener.accept() {
            Ok((stream, peer)) => {
                if waiting.len() >= cap {
                    // Too many connections say nothing: the oldest goes.
                    if let Some((_, oldest)) = waiting.pop_front() {
                        let _ = oldest.shutdown(Shutdown::Both);
                    }
                }
                let Ok(clone) = stream.try_clone() else {
                    continue;
                };
                let id = accepted;
                accepted += 1;
                waiting.push_back((id, clone));
                let (tx, token) = (tx.clone(), info.token.clone());
                std::thread::spawn(move || {
                    let hello = read_hello_of(stream, token.as_ref());
                    let _ = tx.send((id, hello, peer));
                });
                took_one = true;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow::Error::from(e).context("rendezvous: accept failed")),
        }
        // A hello read for each connection accepted: in a burst of joins
        // the hellos keep pace with the accepts.
        let next = if took_one {
            hellos.try_recv().ok()
        } else {
            hellos.recv_timeout(Duration::from_millis(20)).ok()
        };
        let Some((id, hello, peer)) = next else {
            continue;
        };
        waiting.retain(|(i, _)| *i != id);
        // Not one of ours (or it gave up): ignore it and keep waiting.
        let Ok((mut stream, hello)) = hello else {
            continue;
        };
        let (rank, world) = (hello.rank, hello.world);
        // A hello that cannot be one of this job's ranks (another job's, a
        // wrong WORLD_SIZE, a rank taken or out of range, or forged) is
        // refused on its own connection; the job goes on waiting for the
        // real rank, and a timeout names what was refused.
        let token_why = hello.token.as_ref().err().map(|t| t.describe(rank, &peer));
        if let Some(msg) = token_why {
            let _ = send_reply(&mut stream, Reply::TokenRefused(&msg));
            if refused.len() < 8 {
                refused.push(msg);
            }
            continue;
        }
        let why = if world != n {
            Some(format!(
                "rank {rank} (from {peer}) was started with WORLD_SIZE={world}, \
                 but rank 0 has WORLD_SIZE={n}"
            ))
        } else if rank == 0 || rank >= n {
            Some(format!(
                "rank {rank} (from {peer}) is out of range for WORLD_SIZE={n}"
            ))
        } else if peers[rank].is_some() {
            Some(format!("rank {rank} joined twice (second one from {peer})"))
        } else {
            None
        };
        if let Some(msg) = why {
            let _ = send_reply(&mut stream, Reply::Refused(&msg));
            if refused.len() < 8 {
                refused.push(msg);
            }
            continue;
        }
        peers[rank] = Some((stream, peer));
        nonces[rank] = hello.token.ok().flatten();
        arrived += 1;
    }
    Ok(refused)
}
