//! The CPU collective backend: ranks on CPUs, connected over the rendezvous
//! sockets in a star around rank 0.
//!
//! All-reduce: every rank sends its buffer to rank 0, which sums the buffers
//! in rank order (0, 1, 2, …, always the same order, so the result does not
//! depend on arrival times) and sends the sum back; every rank therefore holds
//! bit-identical results. It exists so that the data-parallel code path runs
//! in tests and on machines without GPUs; NCCL is the engine on GPUs. This
//! module owns the wire format of the operations; it must not know about
//! models or gradients.
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tch::{Device, Tensor};

use super::{bf16_to_f32, check_buffer, f32_to_bf16, Backend, Collective, Elem};
use crate::sys::tensor::with_cpu_bytes;
use crate::world::error::CollectiveError;
use crate::world::rendezvous::{Links, Session};
use crate::world::tcpstore::is_timeout;

const OP_ALL_REDUCE: u8 = 1;
const OP_BROADCAST: u8 = 2;
const OP_BARRIER: u8 = 3;

fn op_name(op: u8) -> &'static str {
    match op {
        OP_ALL_REDUCE => "all-reduce",
        OP_BROADCAST => "broadcast",
        _ => "barrier",
    }
}

/// CPU ranks connected to rank 0 over TCP.
#[derive(Debug)]
pub struct CpuCollective {
    rank: usize,
    world_size: usize,
    links: Links,
    timeout: Duration,
    /// The address each peer connected from or was reached at, by rank
    /// (`None` for this rank and for ranks it has no link to), for messages.
    hosts: Vec<Option<String>>,
    /// Receive buffer reused across calls (one bucket of bytes).
    scratch: Vec<u8>,
    /// Accumulator reused across calls.
    acc: Vec<f32>,
}

impl CpuCollective {
    /// Takes over a rendezvous session's sockets; `timeout` bounds every wait.
    pub fn new(session: Session, timeout: Duration) -> anyhow::Result<Self> {
        let host = |s: &TcpStream| s.peer_addr().ok().map(|a| a.ip().to_string());
        let mut hosts = vec![None; session.world_size];
        match &session.links {
            Links::Root(v) => {
                for (i, s) in v.iter().enumerate() {
                    s.set_read_timeout(Some(timeout))?;
                    s.set_write_timeout(Some(timeout))?;
                    hosts[i + 1] = host(s);
                }
            }
            Links::Leaf(s) => {
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                hosts[0] = host(s);
            }
            Links::Alone => {}
        }
        Ok(Self {
            rank: session.rank,
            world_size: session.world_size,
            links: session.links,
            timeout,
            hosts,
            scratch: Vec::new(),
            acc: Vec::new(),
        })
    }

    /// Gives the sockets back (fleet verify talks on after its all-reduce).
    pub fn into_links(self) -> Links {
        self.links
    }

    fn peer_error(&self, peer: usize, op: u8, e: std::io::Error) -> anyhow::Error {
        peer_error(self.rank, self.timeout, (peer, &self.hosts[peer]), op, e)
    }

    /// Runs one operation; `bytes` is this rank's buffer (empty for a barrier).
    fn run(&mut self, op: u8, elem: Elem, bytes: &mut [u8]) -> anyhow::Result<()> {
        let header = header(op, elem, bytes.len());
        // One deadline for the whole operation, not one per socket call.
        let deadline = Instant::now() + self.timeout;
        match &mut self.links {
            Links::Alone => Ok(()),
            Links::Leaf(s) => {
                let res = (|| -> std::io::Result<()> {
                    let mut s = By(s, deadline);
                    let mut msg = Vec::with_capacity(16 + bytes.len());
                    msg.extend_from_slice(&header);
                    if op != OP_BROADCAST {
                        msg.extend_from_slice(bytes);
                    }
                    s.write_all(&msg)?;
                    // Rank 0 answers with a status byte, then the result.
                    let mut status = [0u8; 1];
                    s.read_exact(&mut status)?;
                    if status[0] != 0 {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            "rank 0 reported mismatched collective calls",
                        ));
                    }
                    if op != OP_BARRIER {
                        s.read_exact(bytes)?;
                    }
                    Ok(())
                })();
                res.map_err(|e| self.peer_error(0, op, e))
            }
            Links::Root(peers) => {
                let n = bytes.len();
                if op == OP_ALL_REDUCE {
                    self.acc.clear();
                    self.acc.extend(decode(elem, bytes));
                }
                self.scratch.resize(n, 0);
                let mut mismatch = None;
                for (i, s) in peers.iter_mut().enumerate() {
                    let peer = i + 1;
                    let mut s = By(s, deadline);
                    let mut h = [0u8; 16];
                    if let Err(e) = s.read_exact(&mut h) {
                        let err = peer_error(0, self.timeout, (peer, &self.hosts[peer]), op, e);
                        return Err(err);
                    }
                    if h != header {
                        mismatch = Some((peer, describe(&h)));
                        break;
                    }
                    if op == OP_ALL_REDUCE {
                        s.read_exact(&mut self.scratch).map_err(|e| {
                            peer_error(0, self.timeout, (peer, &self.hosts[peer]), op, e)
                        })?;
                        // Sum in rank order: acc = ((r0 + r1) + r2) + …
                        match elem {
                            Elem::F32 => {
                                for (a, c) in self.acc.iter_mut().zip(self.scratch.chunks_exact(4))
                                {
                                    *a += f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                                }
                            }
                            Elem::Bf16 => {
                                for (a, c) in self.acc.iter_mut().zip(self.scratch.chunks_exact(2))
                                {
                                    *a += bf16_to_f32(u16::from_le_bytes([c[0], c[1]]));
                                }
                            }
                        }
                    }
                }
                if let Some((peer, theirs)) = mismatch {
                    for s in peers.iter_mut() {
                        let _ = s.write_all(&[1u8]);
                    }
                    return Err(CollectiveError::Diverged {
                        ours: describe(&header),
                        peer,
                        theirs,
                    }
                    .into());
                }
                if op == OP_ALL_REDUCE {
                    encode(elem, &self.acc, bytes);
                }
                for (i, s) in peers.iter_mut().enumerate() {
                    let mut s = By(s, deadline);
                    let res = s.write_all(&[0u8]).and_then(|_| {
                        if op != OP_BARRIER {
                            s.write_all(bytes)
                        } else {
                            Ok(())
                        }
                    });
                    if let Err(e) = res {
                        return Err(anyhow::Error::from(e).context(format!(
                            "rank 0: sending the {} result to rank {} failed",
                            op_name(op),
                            i + 1
                        )));
                    }
                }
                Ok(())
            }
        }
    }
}

/// A socket whose reads and writes all end by one deadline: the socket's own
/// timeout bounds each call, so a transfer that made some progress before its
/// peer fell silent (a cut link) would otherwise wait once more.
struct By<'a>(&'a mut TcpStream, Instant);

impl By<'_> {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.1.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

impl Read for By<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.set_read_timeout(Some(self.left()?))?;
        self.0.read(buf)
    }
}

impl Write for By<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.set_write_timeout(Some(self.left()?))?;
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

fn header(op: u8, elem: Elem, len: usize) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0] = op;
    h[1] = elem.tag();
    h[8..16].copy_from_slice(&(len as u64).to_le_bytes());
    h
}

fn describe(h: &[u8; 16]) -> String {
    let len = u64::from_le_bytes(h[8..16].try_into().unwrap());
    let (kind, size) = match h[1] {
        1 => ("f32", 4),
        2 => ("bf16", 2),
        _ => ("?", 1),
    };
    match h[0] {
        OP_BARRIER => "barrier".into(),
        op => format!("{} of {} {kind}", op_name(op), len / size),
    }
}

fn decode(elem: Elem, bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    let step = elem.size();
    bytes.chunks_exact(step).map(move |c| match elem {
        Elem::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
        Elem::Bf16 => bf16_to_f32(u16::from_le_bytes([c[0], c[1]])),
    })
}

fn encode(elem: Elem, values: &[f32], out: &mut [u8]) {
    match elem {
        Elem::F32 => {
            for (v, o) in values.iter().zip(out.chunks_exact_mut(4)) {
                o.copy_from_slice(&v.to_le_bytes());
            }
        }
        Elem::Bf16 => {
            for (v, o) in values.iter().zip(out.chunks_exact_mut(2)) {
                o.copy_from_slice(&f32_to_bf16(*v).to_le_bytes());
            }
        }
    }
}

impl Collective for CpuCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world_size
    }
    fn backend(&self) -> Backend {
        Backend::Cpu
    }
    fn all_reduce_sum(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        let elem = check_buffer(buf, Some(Device::Cpu))?;
        with_cpu_bytes(buf, |b| self.run(OP_ALL_REDUCE, elem, b))?
    }
    fn broadcast(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        let elem = check_buffer(buf, Some(Device::Cpu))?;
        with_cpu_bytes(buf, |b| self.run(OP_BROADCAST, elem, b))?
    }
    fn barrier(&mut self) -> anyhow::Result<()> {
        self.run(OP_BARRIER, Elem::F32, &mut [])
    }
}

/// The error for a failed exchange with `peer` (its rank and address): a
/// timeout names the wait, a broken connection names the peer that probably
/// exited, both with the peer's host (a lost node, under a launcher that
/// spreads ranks over many).
fn peer_error(
    rank: usize,
    timeout: Duration,
    (peer, host): (usize, &Option<String>),
    op: u8,
    e: std::io::Error,
) -> anyhow::Error {
    if is_timeout(&e) {
        CollectiveError::PeerTimeout {
            rank,
            peer,
            host: host.clone(),
            timeout,
            op: op_name(op),
        }
        .into()
    } else {
        CollectiveError::PeerLost {
            rank,
            peer,
            host: host.clone(),
            op: op_name(op),
            error: e,
        }
        .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::launch::LaunchInfo;
    use crate::world::rendezvous::{free_port, rendezvous};
    use tch::Kind;

    fn group(world: usize) -> Vec<CpuCollective> {
        let port = free_port().unwrap();
        let t = Duration::from_secs(20);
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                std::thread::spawn(move || {
                    let info = LaunchInfo::loopback(rank, world, port);
                    let s = rendezvous(&info, || Ok(vec![]), t).unwrap();
                    CpuCollective::new(s, Duration::from_secs(20)).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    #[test]
    fn all_reduce_broadcast_barrier_across_three_ranks() {
        let ranks = group(3);
        let outs: Vec<_> = ranks
            .into_iter()
            .map(|mut c| {
                std::thread::spawn(move || {
                    let r = c.rank() as f32;
                    let t = Tensor::from_slice(&[r, 1.0, 0.1 * r]);
                    c.all_reduce_sum(&t).unwrap();
                    let avg = Tensor::from_slice(&[r, 3.0]).to_kind(Kind::BFloat16);
                    c.all_reduce_avg(&avg).unwrap();
                    let b = Tensor::from_slice(&[r + 10.0]);
                    c.broadcast(&b).unwrap();
                    c.barrier().unwrap();
                    (
                        Vec::<f32>::try_from(&t).unwrap(),
                        Vec::<f32>::try_from(&avg.to_kind(Kind::Float)).unwrap(),
                        Vec::<f32>::try_from(&b).unwrap(),
                    )
                })
            })
            .collect();
        let results: Vec<_> = outs.into_iter().map(|h| h.join().unwrap()).collect();
        let expect_sum = vec![3.0f32, 3.0, (0.0f32 + 0.1) + 0.2];
        for (sum, avg, b) in &results {
            assert_eq!(sum, &expect_sum);
            assert_eq!(avg, &vec![1.0, 3.0]);
            assert_eq!(b, &vec![10.0]);
        }
        // Bit-identical on every rank.
        assert!(results.windows(2).all(|w| w[0] == w[1]));
    }

    #[test]
    fn mismatched_calls_are_reported() {
        let ranks = group(2);
        let hs: Vec<_> = ranks
            .into_iter()
            .map(|mut c| {
                std::thread::spawn(move || {
                    let n = 2 + c.rank();
                    c.all_reduce_sum(&Tensor::zeros([n as i64], (Kind::Float, Device::Cpu)))
                })
            })
            .collect();
        let errs: Vec<String> = hs
            .into_iter()
            .map(|h| h.join().unwrap().unwrap_err().to_string())
            .collect();
        assert!(errs[0].contains("ranks diverged"), "{}", errs[0]);
        assert!(errs[0].contains("all-reduce of 3 f32"), "{}", errs[0]);
    }

    #[test]
    fn a_dead_peer_is_named() {
        let mut ranks = group(2);
        let leaf = ranks.pop().unwrap();
        drop(leaf);
        let mut root = ranks.pop().unwrap();
        let e = root
            .all_reduce_sum(&Tensor::from_slice(&[1.0f32]))
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("the connection to rank 1 on 127.0.0.1 broke"),
            "{e:#}"
        );
    }
}
