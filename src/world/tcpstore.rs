//! A client of PyTorch's c10d `TCPStore`, the key-value store torchrun's
//! elastic agent runs at `MASTER_ADDR:MASTER_PORT` and lends its workers
//! (`TORCHELASTIC_USE_AGENT_STORE=True`).
//!
//! Under torchrun that port is the agent's, not ours: rank 0 therefore serves
//! imgctl's rendezvous on a port of its own choosing and publishes it here,
//! and the other ranks read it from here (see [`super::rendezvous`]). This
//! module owns the wire format of the few store commands imgctl needs
//! (validate, ping, set, wait, get); it must not know what the keys mean.
//!
//! The protocol is torch 2.7's (torch/csrc/distributed/c10d/TCPStore.cpp,
//! TCPStoreBackend.hpp, TCPStoreLibUvBackend.cpp): every request is a
//! one-byte [`Query`] followed by its arguments; integers travel in the
//! host's byte order (the server copies them into C++ integers), strings and
//! byte vectors as a `u64` length then the bytes. A new connection must send
//! `VALIDATE` with the magic number first, or the libuv server ignores it.
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The number a client sends with `VALIDATE` (`validationMagicNumber` in
/// torch 2.7's TCPStoreBackend.hpp).
pub const VALIDATION_MAGIC: u32 = 0x3C85_F7CE;

/// The prefix torch's `TCPStore` client puts before every key
/// (`TCPStore::keyPrefix_ = "/"`, TCPStore.hpp): a key set here is the key a
/// Python `TCPStore.get(key)` reads.
pub const KEY_PREFIX: &str = "/";

/// Pause between connection attempts while the store is not up yet.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// The commands of torch 2.7's `c10d::detail::QueryType` (TCPStoreBackend.hpp;
/// the byte is the enumerator's position), those imgctl sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Query {
    /// Opens a session: followed by [`VALIDATION_MAGIC`] as a `u32`; no reply.
    Validate = 0,
    /// Stores a value: key, value; no reply.
    Set = 1,
    /// Reads a value: key; replies with the value (the key must exist).
    Get = 3,
    /// Blocks until keys exist: `u64` count, keys; replies one byte (0, `STOP_WAITING`).
    Wait = 6,
    /// Echo: a `u32` nonce; replies with the same `u32`.
    Ping = 13,
}

/// One request, framed as the store expects.
#[derive(Debug, Default)]
pub struct Request(Vec<u8>);

impl Request {
    /// Starts a request with its command byte.
    pub fn new(q: Query) -> Self {
        Self(vec![q as u8])
    }
    /// Appends a `u32` in host byte order.
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    /// Appends a `u64` in host byte order.
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    /// Appends bytes as `u64` length + bytes (tcputil's sendVector/sendString).
    pub fn bytes(self, b: &[u8]) -> Self {
        let mut s = self.u64(b.len() as u64);
        s.0.extend_from_slice(b);
        s
    }
    /// Appends a key (with [`KEY_PREFIX`]).
    pub fn key(self, key: &str) -> Self {
        self.bytes(format!("{KEY_PREFIX}{key}").as_bytes())
    }
    /// The framed bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// An open, validated connection to a `TCPStore` server.
#[derive(Debug)]
pub struct StoreClient {
    stream: TcpStream,
    /// `host:port` as given (for messages).
    address: String,
}

/// `host:port`, with IPv6 literals in brackets (`[fd00::2]:29500`).
pub fn host_port(host: &str, port: u16) -> String {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port).to_string(),
        Err(_) => format!("{host}:{port}"),
    }
}

/// Connects to the first address of `host:port` that answers, trying every
/// resolved address in turn and retrying until `deadline`. On failure
/// returns the last error, naming the address it came from.
pub fn connect_any(host: &str, port: u16, deadline: Instant) -> Result<TcpStream, String> {
    let mut last = String::from("no attempt");
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(last);
        }
        match (host, port).to_socket_addrs() {
            Err(e) => last = format!("cannot resolve {host}: {e}"),
            Ok(addrs) => {
                let addrs: Vec<SocketAddr> = addrs.collect();
                if addrs.is_empty() {
                    last = format!("{host} has no address");
                }
                for a in addrs {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    match TcpStream::connect_timeout(&a, left.min(Duration::from_secs(5))) {
                        Ok(s) => return Ok(s),
                        Err(e) => last = format!("{a}: {e}"),
                    }
                }
            }
        }
        std::thread::sleep(RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now())));
    }
}

impl StoreClient {
    /// This end's address of the connection to the store: an address of this
    /// host that the store's host (and so, as a rule, every node of the job)
    /// can reach.
    pub fn local_ip(&self) -> std::io::Result<std::net::IpAddr> {
        Ok(self.stream.local_addr()?.ip())
    }

    /// Connects to the store at `host:port` (retrying until `deadline`),
    /// validates the session and pings the server, so that a port held by
    /// something else than a `TCPStore` is an error here, not a hang later.
    pub fn connect(host: &str, port: u16, deadline: Instant) -> anyhow::Result<Self> {
        let address = host_port(host, port);
        let stream = connect_any(host, port, deadline).map_err(|e| {
            anyhow::anyhow!("cannot reach torchrun's agent store at {address} ({e})")
        })?;
        stream.set_nodelay(true)?;
        let mut c = Self { stream, address };
        c.send(&Request::new(Query::Validate).u32(VALIDATION_MAGIC))?;
        let nonce = std::process::id();
        c.send(&Request::new(Query::Ping).u32(nonce))?;
        let echoed = c.read_u32(deadline).map_err(|e| {
            anyhow::anyhow!(
                "torchrun's agent store at {} did not answer a ping ({e}): is it a c10d TCPStore?",
                c.address
            )
        })?;
        if echoed != nonce {
            anyhow::bail!(
                "torchrun's agent store at {} answered a ping with {echoed}, not {nonce}: \
                 is it a c10d TCPStore?",
                c.address
            );
        }
        Ok(c)
    }

    /// Where the store is (`host:port`).
    pub fn address(&self) -> &str {
        &self.address
    }

    fn send(&mut self, r: &Request) -> anyhow::Result<()> {
        self.stream.write_all(r.as_bytes()).map_err(|e| {
            anyhow::anyhow!("writing to torchrun's agent store at {}: {e}", self.address)
        })
    }

    /// The whole of `buf` before `deadline`, however the store paces it.
    fn read_exact(&mut self, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
        crate::sys::net::read_exact_by(&mut self.stream, buf, deadline)
    }

    fn read_u32(&mut self, deadline: Instant) -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        self.read_exact(&mut b, deadline)?;
        Ok(u32::from_ne_bytes(b))
    }

    /// Stores `value` under `key`.
    pub fn set(&mut self, key: &str, value: &[u8]) -> anyhow::Result<()> {
        self.send(&Request::new(Query::Set).key(key).bytes(value))
    }

    /// Waits until `key` exists, then reads it. `Ok(None)` when `deadline`
    /// passed first.
    pub fn wait_get(&mut self, key: &str, deadline: Instant) -> anyhow::Result<Option<Vec<u8>>> {
        self.send(&Request::new(Query::Wait).u64(1).key(key))?;
        let mut status = [0u8; 1];
        match self.read_exact(&mut status, deadline) {
            Ok(()) => {}
            Err(e) if is_timeout(&e) => return Ok(None),
            Err(e) => {
                return Err(anyhow::anyhow!(
                    "waiting for key {key:?} in torchrun's agent store at {}: {e}",
                    self.address
                ))
            }
        }
        // WaitResponseType::STOP_WAITING (TCPStoreBackend.hpp).
        if status[0] != 0 {
            anyhow::bail!(
                "torchrun's agent store at {} answered WAIT for {key:?} with {}",
                self.address,
                status[0]
            );
        }
        self.send(&Request::new(Query::Get).key(key))?;
        let mut len = [0u8; 8];
        let io = |e: std::io::Error, addr: &str| {
            anyhow::anyhow!("reading key {key:?} from torchrun's agent store at {addr}: {e}")
        };
        // The key exists now: the reply follows at once, whatever the deadline.
        let soon = Instant::now() + Duration::from_secs(30);
        self.read_exact(&mut len, soon)
            .map_err(|e| io(e, &self.address))?;
        let n = u64::from_ne_bytes(len);
        // A port number is a few bytes; refuse absurd lengths rather than allocate them.
        if n > 1 << 20 {
            anyhow::bail!(
                "torchrun's agent store at {} sent {n} bytes for {key:?}",
                self.address
            );
        }
        let mut v = vec![0u8; n as usize];
        self.read_exact(&mut v, soon)
            .map_err(|e| io(e, &self.address))?;
        Ok(Some(v))
    }
}

/// Whether an I/O error is a socket read/write timeout.
pub(crate) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_framed_like_torchs_client() {
        let r = Request::new(Query::Set).key("a/b").bytes(b"29501");
        let mut want = vec![1u8];
        want.extend_from_slice(&4u64.to_ne_bytes());
        want.extend_from_slice(b"/a/b");
        want.extend_from_slice(&5u64.to_ne_bytes());
        want.extend_from_slice(b"29501");
        assert_eq!(r.as_bytes(), want.as_slice());
        let v = Request::new(Query::Validate).u32(VALIDATION_MAGIC);
        assert_eq!(v.as_bytes()[0], 0);
        assert_eq!(&v.as_bytes()[1..], &0x3C85_F7CEu32.to_ne_bytes());
        let w = Request::new(Query::Wait).u64(1).key("k");
        assert_eq!(w.as_bytes()[0], 6);
        assert_eq!(&w.as_bytes()[1..9], &1u64.to_ne_bytes());
    }

    #[test]
    fn addresses_print_like_socket_addrs() {
        assert_eq!(host_port("fd00::2", 29830), "[fd00::2]:29830");
        assert_eq!(host_port("10.0.0.1", 1), "10.0.0.1:1");
        assert_eq!(host_port("node01", 29500), "node01:29500");
    }

    #[test]
    fn a_port_without_a_store_is_named() {
        // Something that accepts but is not a TCPStore: the ping times out.
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        let e = StoreClient::connect(
            "127.0.0.1",
            port,
            Instant::now() + Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(e.to_string().contains("did not answer a ping"), "{e}");
        drop(l);
        let e = StoreClient::connect(
            "127.0.0.1",
            port,
            Instant::now() + Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "cannot reach torchrun's agent store at 127.0.0.1:{port}"
            )),
            "{e}"
        );
    }
}
