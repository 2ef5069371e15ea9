//! Rendezvous: all ranks meet at rank 0's TCP server before any collective.
//!
//! Rank 0 listens on `MASTER_PORT`, waits until every other rank has said
//! hello (rank and world size), then sends each of them the session payload
//! (the 128-byte NCCL unique id, or nothing for the CPU backend). The sockets
//! stay open afterwards: the CPU backend runs its collectives over them. Every
//! wait has a deadline and its error names what was waited for. This module
//! owns the wire format of the hello; it must not know what the payload means.
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::launch::LaunchInfo;
use crate::CliError;

/// Default time every rank waits for the others (`--rendezvous-timeout`):
/// 300 s, the order of torchrun's own rendezvous timeout (900 s for c10d
/// `--rdzv-conf timeout`), short enough that a wrong WORLD_SIZE fails in minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Magic bytes opening every hello ("IMGCTLRV" + protocol version 1).
const MAGIC: &[u8; 8] = b"IMGCTLRV";
const PROTOCOL: u32 = 1;
/// How long an accepted connection may take to send its hello before rank 0
/// drops it (a port scanner or a stray client must not stall the rendezvous).
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between connection attempts of a non-zero rank while rank 0 is not up yet.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The sockets a rendezvous leaves behind.
#[derive(Debug)]
pub enum Links {
    /// World size 1: nobody to talk to.
    Alone,
    /// Rank 0: one stream per other rank, index `r - 1` for rank `r`.
    Root(Vec<TcpStream>),
    /// Any other rank: the stream to rank 0.
    Leaf(TcpStream),
}

/// The outcome of a rendezvous.
#[derive(Debug)]
pub struct Session {
    /// This process's rank.
    pub rank: usize,
    /// Number of ranks that met.
    pub world_size: usize,
    /// What rank 0 handed out (e.g. the NCCL unique id).
    pub payload: Vec<u8>,
    /// The open connections.
    pub links: Links,
    /// Where rank 0 listened, for messages.
    pub address: String,
}

fn timed_out(timeout: Duration, what: String) -> anyhow::Error {
    CliError::failure(format!(
        "rendezvous timed out after {}: {what}",
        fmt_secs(timeout)
    ))
    .with_hint(
        "start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT; \
         raise --rendezvous-timeout (IMGCTL_RENDEZVOUS_TIMEOUT) if ranks start slowly",
    )
    .into()
}

/// `30 s`, `2.5 s`, `300 s`.
pub(crate) fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if (s - s.round()).abs() < 1e-9 {
        format!("{} s", s.round() as u64)
    } else {
        format!("{s:.1} s")
    }
}

fn ranks_list(ranks: &[usize]) -> String {
    let v: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    v.join(", ")
}

/// Binds rank 0's listener: on the loopback address when MASTER_ADDR is a
/// loopback address (the `--gpus` supervisor), else on all interfaces.
pub fn bind(info: &LaunchInfo) -> anyhow::Result<TcpListener> {
    let ip = match info.master_addr.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() => ip,
        _ if info.master_addr == "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let addr = SocketAddr::new(ip, info.master_port);
    TcpListener::bind(addr).map_err(|e| {
        if e.kind() == ErrorKind::AddrInUse {
            CliError::usage(format!(
                "MASTER_PORT {} is already in use on this host: rank 0 cannot listen on {addr}",
                info.master_port
            ))
            .with_hint(format!(
                "choose a free port (MASTER_PORT={}) or stop the process holding it \
                 (`ss -ltnp 'sport = :{}'`)",
                info.master_port.wrapping_add(1).max(1024),
                info.master_port
            ))
            .into()
        } else {
            anyhow::Error::from(e).context(format!("rank 0 cannot listen on {addr}"))
        }
    })
}

/// Meets the other ranks. Rank 0 binds MASTER_PORT first (so a taken port is
/// reported at once), then calls `payload` and hands its bytes to every rank.
pub fn rendezvous(
    info: &LaunchInfo,
    payload: impl FnOnce() -> anyhow::Result<Vec<u8>>,
    timeout: Duration,
) -> anyhow::Result<Session> {
    let address = format!("{}:{}", info.master_addr, info.master_port);
    if info.world_size == 1 {
        return Ok(Session {
            rank: 0,
            world_size: 1,
            payload: payload()?,
            links: Links::Alone,
            address,
        });
    }
    if info.rank == 0 {
        let listener = bind(info)?;
        let bytes = payload()?;
        serve(listener, info, bytes, timeout, address)
    } else {
        join(info, timeout, address)
    }
}

/// Rank 0 with an already bound listener (tests bind port 0 first).
pub fn serve(
    listener: TcpListener,
    info: &LaunchInfo,
    payload: Vec<u8>,
    timeout: Duration,
    address: String,
) -> anyhow::Result<Session> {
    let deadline = Instant::now() + timeout;
    let n = info.world_size;
    let mut peers: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    listener.set_nonblocking(true)?;
    let mut arrived = 1usize;
    while arrived < n {
        if Instant::now() >= deadline {
            let missing: Vec<usize> = (1..n).filter(|&r| peers[r].is_none()).collect();
            return Err(timed_out(
                timeout,
                format!(
                    "{arrived} of {n} ranks arrived at {address} (missing ranks: {})",
                    ranks_list(&missing)
                ),
            ));
        }
        let (mut stream, peer) = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => return Err(anyhow::Error::from(e).context("rendezvous: accept failed")),
        };
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(HELLO_TIMEOUT))?;
        let (rank, world) = match read_hello(&mut stream) {
            Ok(h) => h,
            // Not one of ours (or it gave up): ignore it and keep waiting.
            Err(_) => continue,
        };
        if world != n {
            let msg = format!(
                "rank {rank} (from {peer}) was started with WORLD_SIZE={world}, \
                 but rank 0 has WORLD_SIZE={n}"
            );
            let _ = send_reply(&mut stream, Err(&msg));
            for s in peers.iter_mut().flatten() {
                let _ = send_reply(s, Err(&msg));
            }
            return Err(CliError::usage(format!("rendezvous failed: {msg}"))
                .with_hint("start every rank with the same WORLD_SIZE")
                .into());
        }
        if rank == 0 || rank >= n || peers[rank].is_some() {
            let msg = if rank == 0 || peers[rank].is_some() {
                format!("rank {rank} joined twice (second one from {peer})")
            } else {
                format!("rank {rank} (from {peer}) is out of range for WORLD_SIZE={n}")
            };
            let _ = send_reply(&mut stream, Err(&msg));
            for s in peers.iter_mut().flatten() {
                let _ = send_reply(s, Err(&msg));
            }
            return Err(CliError::usage(format!("rendezvous failed: {msg}"))
                .with_hint("give every process a distinct RANK below WORLD_SIZE")
                .into());
        }
        peers[rank] = Some(stream);
        arrived += 1;
    }
    let mut links = Vec::with_capacity(n - 1);
    for (r, s) in peers.into_iter().enumerate().skip(1) {
        let mut s = s.expect("all ranks arrived");
        s.set_nodelay(true)?;
        send_reply(&mut s, Ok(&payload))
            .with_context(|| format!("rendezvous: sending the session to rank {r}"))?;
        links.push(s);
    }
    Ok(Session {
        rank: 0,
        world_size: n,
        payload,
        links: Links::Root(links),
        address,
    })
}

fn join(info: &LaunchInfo, timeout: Duration, address: String) -> anyhow::Result<Session> {
    let deadline = Instant::now() + timeout;
    let mut last_err = String::from("no attempt");
    let mut stream = loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(timed_out(
                timeout,
                format!(
                    "rank {} could not reach rank 0 at {address} (last error: {last_err})",
                    info.rank
                ),
            ));
        }
        let attempt = (info.master_addr.as_str(), info.master_port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", info.master_addr))
            .and_then(|mut addrs| {
                addrs
                    .next()
                    .ok_or_else(|| format!("{} has no address", info.master_addr))
            })
            .and_then(|addr| {
                let left = deadline.saturating_duration_since(now);
                TcpStream::connect_timeout(&addr, left.min(Duration::from_secs(5)))
                    .map_err(|e| e.to_string())
            });
        match attempt {
            Ok(s) => break s,
            Err(e) => {
                last_err = e;
                std::thread::sleep(RETRY_PAUSE);
            }
        }
    };
    stream.set_nodelay(true)?;
    write_hello(&mut stream, info.rank, info.world_size)
        .with_context(|| format!("rendezvous: sending hello to rank 0 at {address}"))?;
    let left = deadline.saturating_duration_since(Instant::now());
    stream.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    let payload = match read_reply(&mut stream) {
        Ok(Ok(p)) => p,
        Ok(Err(msg)) => {
            return Err(CliError::usage(format!("rendezvous failed: {msg}"))
                .with_hint("start every rank with the same WORLD_SIZE and a distinct RANK")
                .into())
        }
        Err(e) if is_timeout(&e) => {
            return Err(timed_out(
                timeout,
                format!(
                    "rank {} reached rank 0 at {address}, but not all WORLD_SIZE={} ranks arrived",
                    info.rank, info.world_size
                ),
            ))
        }
        Err(e) => {
            return Err(anyhow::Error::from(e).context(format!(
                "rendezvous: rank 0 at {address} closed the connection (did it fail?)"
            )))
        }
    };
    Ok(Session {
        rank: info.rank,
        world_size: info.world_size,
        payload,
        links: Links::Leaf(stream),
        address,
    })
}

/// Whether an I/O error is a socket read/write timeout.
pub(crate) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn write_hello(s: &mut TcpStream, rank: usize, world: usize) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(20);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&PROTOCOL.to_le_bytes());
    buf.extend_from_slice(&(rank as u32).to_le_bytes());
    buf.extend_from_slice(&(world as u32).to_le_bytes());
    s.write_all(&buf)
}

fn read_hello(s: &mut TcpStream) -> std::io::Result<(usize, usize)> {
    let mut buf = [0u8; 20];
    s.read_exact(&mut buf)?;
    if &buf[..8] != MAGIC || u32::from_le_bytes(buf[8..12].try_into().unwrap()) != PROTOCOL {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "not an imgctl hello",
        ));
    }
    let rank = u32::from_le_bytes(buf[12..16].try_into().unwrap()) as usize;
    let world = u32::from_le_bytes(buf[16..20].try_into().unwrap()) as usize;
    Ok((rank, world))
}

fn send_reply(s: &mut TcpStream, reply: Result<&[u8], &str>) -> std::io::Result<()> {
    let (status, body) = match reply {
        Ok(p) => (0u8, p),
        Err(m) => (1u8, m.as_bytes()),
    };
    let mut buf = vec![status];
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(body);
    s.write_all(&buf)
}

fn read_reply(s: &mut TcpStream) -> std::io::Result<Result<Vec<u8>, String>> {
    let mut head = [0u8; 5];
    s.read_exact(&mut head)?;
    let len = u32::from_le_bytes(head[1..5].try_into().unwrap()) as usize;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)?;
    Ok(if head[0] == 0 {
        Ok(body)
    } else {
        Err(String::from_utf8_lossy(&body).into_owned())
    })
}

/// A free TCP port on the loopback interface (bind port 0, read it, release it).
pub fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_ranks_meet_and_get_the_payload() {
        let port = free_port().unwrap();
        let t = Duration::from_secs(20);
        let leaves: Vec<_> = (1..3)
            .map(|r| {
                std::thread::spawn(move || {
                    rendezvous(&LaunchInfo::loopback(r, 3, port), || Ok(vec![]), t)
                })
            })
            .collect();
        let root = rendezvous(
            &LaunchInfo::loopback(0, 3, port),
            || Ok(b"session".to_vec()),
            t,
        )
        .unwrap();
        assert!(matches!(root.links, Links::Root(ref v) if v.len() == 2));
        for l in leaves {
            let s = l.join().unwrap().unwrap();
            assert_eq!(s.payload, b"session");
        }
    }

    #[test]
    fn missing_rank_times_out_with_names() {
        let port = free_port().unwrap();
        let e = rendezvous(
            &LaunchInfo::loopback(0, 2, port),
            || Ok(vec![]),
            Duration::from_millis(300),
        )
        .unwrap_err();
        let m = e.to_string();
        assert!(m.contains("1 of 2 ranks arrived"), "{m}");
        assert!(m.contains("missing ranks: 1"), "{m}");
    }

    #[test]
    fn leaf_without_root_times_out() {
        let port = free_port().unwrap();
        let e = rendezvous(
            &LaunchInfo::loopback(1, 2, port),
            || Ok(vec![]),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(e.to_string().contains("could not reach rank 0"), "{e}");
    }

    #[test]
    fn world_size_mismatch_is_reported() {
        let port = free_port().unwrap();
        let t = Duration::from_secs(10);
        let leaf = std::thread::spawn(move || {
            rendezvous(&LaunchInfo::loopback(1, 3, port), || Ok(vec![]), t)
        });
        let e = rendezvous(&LaunchInfo::loopback(0, 2, port), || Ok(vec![]), t).unwrap_err();
        assert!(e.to_string().contains("WORLD_SIZE=3"), "{e}");
        let e = leaf.join().unwrap().unwrap_err();
        assert!(e.to_string().contains("WORLD_SIZE=3"), "{e}");
    }

    #[test]
    fn taken_port_is_named() {
        let hold = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = hold.local_addr().unwrap().port();
        let e = rendezvous(
            &LaunchInfo::loopback(0, 2, port),
            || Ok(vec![]),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("MASTER_PORT {port} is already in use")),
            "{e}"
        );
    }
}
