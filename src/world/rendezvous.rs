//! Rendezvous: all ranks meet at rank 0's TCP server before any collective.
//!
//! Rank 0 listens on `MASTER_PORT` (under torchrun's agent store on a port of
//! its own, published in that store: see [`rendezvous`]), waits until every other rank has said
//! hello (rank and world size), then sends each of them the session payload
//! (the 128-byte NCCL unique id, or nothing for the CPU backend). The sockets
//! stay open afterwards: the CPU backend runs its collectives over them. Every
//! wait has a deadline and its error names what was waited for. This module
//! owns the wire format of the hello; it must not know what the payload means.
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::auth::{Nonce, Token};
use super::error::RendezvousError;
use super::gather::gather;
pub use super::hello::{
    parse_hello, parse_reply_head, HelloHead, TokenRefusal, HELLO_BYTES, MAX_REPLY_BYTES,
};
use super::hello::{
    proven_payload, read_reply, send_reply, session_body, write_hello, Reply, TIMED_OUT,
    TOKEN_REFUSED,
};
use super::launch::LaunchInfo;
use super::tcpstore::{connect_any, host_port, is_timeout, StoreClient};
use super::timeouts::fmt_secs;
use crate::sys::net::bind_all_interfaces;

/// Default time every rank waits for the others (`--rendezvous-timeout`):
/// 300 s, the order of torchrun's own rendezvous timeout (900 s for c10d
/// `--rdzv-conf timeout`), short enough that a wrong WORLD_SIZE fails in minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

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
    /// With a rendezvous token: the token and the nonces the ranks' hellos
    /// named (rank 0: one per other rank, index `r - 1`; another rank: its
    /// own), to which later proofs (the fleet's verdict) are bound.
    pub auth: Option<SessionAuth>,
    /// Rank 0's listener, kept open for the heartbeat ([`super::heartbeat`]).
    pub listener: Option<TcpListener>,
}

/// A session's proof material ([`Session::auth`]).
#[derive(Debug, Clone)]
pub struct SessionAuth {
    /// The shared secret.
    pub token: Token,
    /// The hellos' nonces.
    pub nonces: Vec<Nonce>,
}

fn timed_out(timeout: Duration, what: String) -> anyhow::Error {
    RendezvousError::TimedOut { timeout, what }.into()
}

/// Binds rank 0's listener on `port` where the launcher says: MASTER_ADDR
/// resolved (a literal, or a name such as `localhost` or a hostname that
/// /etc/hosts maps to 127.0.1.1). When every address it resolves to is a
/// loopback one (the `--gpus` supervisor, torchrun `--standalone`), on the
/// first of them only; when it names an address of this host, on that one;
/// else (an address behind NAT, a name that does not resolve here) on all
/// interfaces of both families (`[::]`, dual stack; `0.0.0.0` where the host
/// has no IPv6), so that an IPv4 or an IPv6 MASTER_ADDR reaches it.
fn bind_port(info: &LaunchInfo, port: u16) -> std::io::Result<TcpListener> {
    let l = bind_port_at(info, port)?;
    // A fleet of thousands joins at once: room in the kernel's queue.
    crate::sys::net::widen_backlog(&l);
    Ok(l)
}

fn bind_port_at(info: &LaunchInfo, port: u16) -> std::io::Result<TcpListener> {
    use std::net::ToSocketAddrs;
    let resolved: Vec<IpAddr> = match info.master_addr.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => (info.master_addr.as_str(), port)
            .to_socket_addrs()
            .map(|a| a.map(|s| s.ip()).collect())
            .unwrap_or_default(),
    };
    if let Some(first) = resolved.first() {
        if resolved.iter().all(IpAddr::is_loopback) {
            return TcpListener::bind(SocketAddr::new(*first, port));
        }
        for ip in &resolved {
            match TcpListener::bind(SocketAddr::new(*ip, port)) {
                Ok(l) => return Ok(l),
                Err(e) if e.kind() == ErrorKind::AddrInUse => return Err(e),
                // Not an address of this host: try the next, then all.
                Err(_) => continue,
            }
        }
    }
    bind_all_interfaces(port)
}

/// Binds rank 0's listener on MASTER_PORT (see [`bind_port`] for the address).
pub fn bind(info: &LaunchInfo) -> anyhow::Result<TcpListener> {
    bind_port(info, info.master_port).map_err(|e| {
        let addr = host_port(&info.master_addr, info.master_port);
        if e.kind() == ErrorKind::AddrInUse {
            RendezvousError::PortInUse {
                port: info.master_port,
                addr,
            }
            .into()
        } else {
            anyhow::Error::from(e).context(format!("rank 0 cannot listen for {addr}"))
        }
    })
}

/// Meets the other ranks. Rank 0 binds its port first (so a taken port is
/// reported at once), then calls `payload` and hands its bytes to every rank.
///
/// The port is MASTER_PORT, except under torchrun's agent store
/// ([`LaunchInfo::agent_store`]): MASTER_PORT is then torchrun's own c10d
/// TCPStore, so rank 0 listens on a port the system picks and publishes it in
/// that store, where the other ranks read it (the whole wait bounded by `timeout`).
pub fn rendezvous(
    info: &LaunchInfo,
    payload: impl FnOnce() -> anyhow::Result<Vec<u8>>,
    timeout: Duration,
) -> anyhow::Result<Session> {
    let deadline = Instant::now() + timeout;
    if info.world_size == 1 {
        return Ok(Session {
            rank: 0,
            world_size: 1,
            payload: payload()?,
            links: Links::Alone,
            address: host_port(&info.master_addr, info.master_port),
            auth: None,
            listener: None,
        });
    }
    match (&info.agent_store, info.rank) {
        (_, 0) => {
            let (listener, address) = root_listener(info, timeout, deadline)?;
            let bytes = payload()?;
            serve_until(listener, info, bytes, timeout, deadline, address)
        }
        (None, _) => join(info, &info.master_addr, info.master_port, timeout, deadline),
        (Some(agent), _) => {
            let key = agent.address_key();
            let store_at = host_port(&info.master_addr, info.master_port);
            let waited = || {
                format!(
                    "rank {} waited for rank 0 to publish its rendezvous address under key {key:?} \
                     in torchrun's agent store at {store_at}",
                    info.rank
                )
            };
            let mut store = StoreClient::connect(&info.master_addr, info.master_port, deadline)
                .map_err(|e| {
                    if Instant::now() >= deadline {
                        timed_out(timeout, format!("{} ({e})", waited()))
                    } else {
                        store_error(e, timeout)
                    }
                })?;
            let value = store
                .wait_get(&key, deadline)?
                .ok_or_else(|| timed_out(timeout, waited()))?;
            let text = String::from_utf8_lossy(&value);
            let at = text
                .trim()
                .parse::<std::net::SocketAddr>()
                .ok()
                .filter(|a| a.port() > 0)
                .ok_or_else(|| {
                    anyhow::Error::from(RendezvousError::BadAgentAddress {
                        key: key.clone(),
                        store_at: store_at.clone(),
                        text: text.to_string(),
                    })
                })?;
            join(info, &at.ip().to_string(), at.port(), timeout, deadline)
        }
    }
}

/// Rank 0's listener and the address the others reach it at: MASTER_PORT,
/// or under torchrun's agent store a free port published in that store.
fn root_listener(
    info: &LaunchInfo,
    timeout: Duration,
    deadline: Instant,
) -> anyhow::Result<(TcpListener, String)> {
    let Some(agent) = &info.agent_store else {
        let listener = bind(info)?;
        return Ok((listener, host_port(&info.master_addr, info.master_port)));
    };
    let listener = bind_port(info, 0).with_context(|| {
        format!(
            "rank 0 cannot listen on a free port for {}",
            info.master_addr
        )
    })?;
    let port = listener.local_addr()?.port();
    let store_at = host_port(&info.master_addr, info.master_port);
    let mut store = StoreClient::connect(&info.master_addr, info.master_port, deadline)
        .map_err(|e| store_error(e, timeout))?;
    // Rank 0's own address, not MASTER_ADDR: torchrun only promises
    // that the store is there, and after a re-rendezvous rank 0 may
    // run on another node. The address this host reached the store
    // from is one the other nodes reach too.
    let me = std::net::SocketAddr::new(store.local_ip()?, port);
    store
        .set(&agent.address_key(), me.to_string().as_bytes())
        .with_context(|| {
            format!("rank 0 publishing its rendezvous port in torchrun's store at {store_at}")
        })?;
    Ok((listener, me.to_string()))
}

/// What rank 0 of a rendezvous that goes on without the absent holds
/// ([`rendezvous_whoever_comes`]).
#[derive(Debug)]
pub struct Gathered {
    /// Per rank (index = rank, 0 is this one and `None`): the stream and the
    /// address it came from, or `None` for a rank that did not arrive.
    pub peers: Vec<Option<(TcpStream, SocketAddr)>>,
    /// Where rank 0 listened.
    pub address: String,
    /// Hellos refused on the way (another job's, a wrong WORLD_SIZE).
    pub refused: Vec<String>,
    /// Per rank, the nonce its hello named, with a rendezvous token.
    pub nonces: Vec<Option<Nonce>>,
    /// The listener, kept open for the heartbeat (as [`Session::listener`]).
    pub listener: Option<TcpListener>,
}

/// Rank 0's side of a rendezvous that does not fail when a rank stays
/// away: it waits until every rank came or `timeout` passed, hands an
/// empty session to those that came, and returns them with the absent
/// ones as `None` (fleet verify names a node that never joined). Other
/// ranks call [`rendezvous`] as usual.
pub fn rendezvous_whoever_comes(info: &LaunchInfo, timeout: Duration) -> anyhow::Result<Gathered> {
    let deadline = Instant::now() + timeout;
    let mut peers: Vec<Option<(TcpStream, SocketAddr)>> =
        (0..info.world_size).map(|_| None).collect();
    let mut nonces: Vec<Option<Nonce>> = vec![None; info.world_size];
    if info.world_size == 1 {
        return Ok(Gathered {
            peers,
            address: host_port(&info.master_addr, info.master_port),
            refused: Vec::new(),
            nonces,
            listener: None,
        });
    }
    let (listener, address) = root_listener(info, timeout, deadline)?;
    let refused = gather(&listener, info, deadline, &mut peers, &mut nonces)?;
    for (p, nonce) in peers.iter_mut().zip(&nonces) {
        if let Some((s, _)) = p {
            s.set_nodelay(true)?;
            let body = session_body(&[], info.token.as_ref(), nonce.as_ref());
            if send_reply(s, Reply::Session(&body)).is_err() {
                // It left between its hello and now: as absent as one that never came.
                *p = None;
            }
        }
    }
    Ok(Gathered {
        peers,
        address,
        refused,
        nonces,
        listener: Some(listener),
    })
}

/// A failure to talk to torchrun's agent store, with the hint that goes with it.
fn store_error(e: anyhow::Error, timeout: Duration) -> anyhow::Error {
    RendezvousError::Store {
        cause: format!("{e:#}"),
        timeout,
    }
    .into()
}

/// Rank 0 with an already bound listener (tests bind port 0 first).
pub fn serve(
    listener: TcpListener,
    info: &LaunchInfo,
    payload: Vec<u8>,
    timeout: Duration,
    address: String,
) -> anyhow::Result<Session> {
    serve_until(
        listener,
        info,
        payload,
        timeout,
        Instant::now() + timeout,
        address,
    )
}

fn serve_until(
    listener: TcpListener,
    info: &LaunchInfo,
    payload: Vec<u8>,
    timeout: Duration,
    deadline: Instant,
    address: String,
) -> anyhow::Result<Session> {
    let n = info.world_size;
    let mut peers: Vec<Option<(TcpStream, SocketAddr)>> = (0..n).map(|_| None).collect();
    let mut nonces: Vec<Option<Nonce>> = vec![None; n];
    let refused = gather(&listener, info, deadline, &mut peers, &mut nonces)?;
    let missing: Vec<String> = (1..n)
        .filter(|&r| peers[r].is_none())
        .map(|r| r.to_string())
        .collect();
    if !missing.is_empty() {
        let (arrived, missing) = (n - missing.len(), missing.join(", "));
        let mut what =
            format!("{arrived} of {n} ranks arrived at {address} (missing ranks: {missing})");
        if !refused.is_empty() {
            what.push_str(&format!("; refused: {}", refused.join("; ")));
        }
        // The ranks that came learn why they are sent home.
        let told = format!("rank 0 gave up after {}: {what}", fmt_secs(timeout));
        for (s, _) in peers.iter_mut().flatten() {
            let _ = send_reply(s, Reply::TimedOut(&told));
        }
        return Err(timed_out(timeout, what));
    }
    let mut links = Vec::with_capacity(n - 1);
    for (r, s) in peers.into_iter().enumerate().skip(1) {
        let (mut s, _) = s.expect("all ranks arrived");
        s.set_nodelay(true)?;
        let body = session_body(&payload, info.token.as_ref(), nonces[r].as_ref());
        send_reply(&mut s, Reply::Session(&body))
            .with_context(|| format!("rendezvous: sending the session to rank {r}"))?;
        links.push(s);
    }
    let auth = info.token.clone().map(|token| SessionAuth {
        token,
        nonces: nonces.into_iter().skip(1).flatten().collect(),
    });
    Ok(Session {
        rank: 0,
        world_size: n,
        payload,
        links: Links::Root(links),
        address,
        auth,
        listener: Some(listener),
    })
}

/// A non-zero rank: connects to rank 0 at MASTER_ADDR:`port` (every
/// resolved address in turn, retrying until `deadline`) and waits for the session.
fn join(
    info: &LaunchInfo,
    host: &str,
    port: u16,
    timeout: Duration,
    deadline: Instant,
) -> anyhow::Result<Session> {
    let address = host_port(host, port);
    let mut stream = connect_any(host, port, deadline).map_err(|last_err| {
        timed_out(
            timeout,
            format!(
                "rank {} could not reach rank 0 at {address} (last error: {last_err})",
                info.rank
            ),
        )
    })?;
    stream.set_nodelay(true)?;
    let nonce = write_hello(&mut stream, info.rank, info.world_size, info.token.as_ref())
        .with_context(|| format!("rendezvous: sending hello to rank 0 at {address}"))?;
    let payload = match read_reply(&mut stream, deadline) {
        Ok(Ok(p)) => match (&info.token, nonce) {
            (Some(t), Some(n)) => proven_payload(t, &n, p).ok_or_else(|| RendezvousError::Token {
                msg: format!(
                    "rank 0 at {address} could not prove the rendezvous token: it holds another one, or it is not this job's rank 0"
                ),
            })?,
            _ => p,
        },
        Ok(Err((TOKEN_REFUSED, msg))) => return Err(RendezvousError::Token { msg }.into()),
        Ok(Err((TIMED_OUT, msg))) => {
            return Err(RendezvousError::RootGaveUp {
                rank: info.rank,
                address,
                msg,
            }
            .into())
        }
        Ok(Err((_, msg))) => return Err(RendezvousError::Refused { msg }.into()),
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
    let auth = info.token.clone().zip(nonce).map(|(token, n)| SessionAuth {
        token,
        nonces: vec![n],
    });
    Ok(Session {
        rank: info.rank,
        world_size: info.world_size,
        payload,
        links: Links::Leaf(stream),
        address,
        auth,
        listener: None,
    })
}

/// A free TCP port on the loopback interface (bind port 0, read it, release it).
pub fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
#[path = "rendezvous_tests.rs"]
mod tests;
