//! The heartbeat thread's loop (see the parent module): one thread per
//! rank, non-blocking sockets watched with `poll(2)`, so rank 0 follows
//! every other rank from one thread.
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::wire::{self, Bad, Decoder, Dir, Frame, Keys, CHALLENGE_BYTES};
use super::{FireAction, HeartbeatError, Phase, Progress, Settings};
use crate::sys::net::poll_readable;
use crate::world::auth::Token;

/// The longest one poll waits, so that a stop is seen within it.
const TICK: Duration = Duration::from_millis(100);
/// The most bytes queued for a peer that does not read (about 2,000 beats).
const MAX_QUEUED: usize = 64 * 1024;
/// How long the last frames (byes, lost notices) may take to leave.
const LAST_WORDS: Duration = Duration::from_secs(1);
/// The most connections rank 0 waits for a hello on at once, beyond two a
/// rank of the world ([`Monitor::max_pending`]): a fleet of thousands
/// connects its heartbeats at once.
const MAX_PENDING: usize = 64;
/// How long a connection may keep its slot without a hello when others wait.
const HELLO_GRACE: Duration = Duration::from_secs(1);

/// Which end of the star this rank is.
pub(super) enum Role {
    /// Rank 0: the rendezvous's listener, the other ranks' addresses (by
    /// rank, from the rendezvous) and their hellos' nonces (index `r - 1`).
    Root {
        listener: TcpListener,
        hosts: Vec<Option<String>>,
        nonces: Vec<Vec<u8>>,
        /// By rank: whether it is watched (fleet verify's absent are not).
        watch: Vec<bool>,
    },
    /// Another rank: where rank 0 listens, and its own hello's nonce.
    Leaf { root: SocketAddr, nonce: Vec<u8> },
}

/// What the thread does with a lost peer.
pub(super) enum OnLost {
    /// Rank 0 tells the other ranks, then this runs and the thread ends
    /// (training: the rank ends).
    End(FireAction),
    /// This runs with the peer's rank and the thread watches the others on
    /// (fleet verify's rank 0 marks the node lost and goes on).
    Each(super::LostAction),
}

/// What the thread knows from the start.
pub(super) struct Monitor {
    pub(super) rank: usize,
    pub(super) world: usize,
    pub(super) settings: Settings,
    pub(super) token: Option<Token>,
    pub(super) progress: Arc<Progress>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) frozen: Arc<AtomicBool>,
    /// Whether a peer whose heartbeat never came is lost too (training);
    /// fleet verify only watches peers that beat once.
    pub(super) strict: bool,
}

/// One heartbeat connection.
struct Conn {
    stream: TcpStream,
    keys: Keys,
    dec: Decoder,
    out: Vec<u8>,
    seq_out: u64,
    seq_in: u64,
    /// The direction of what this end sends.
    send: Dir,
}

impl Conn {
    fn new(stream: TcpStream, keys: Keys, send: Dir) -> Self {
        Self {
            stream,
            keys,
            dec: Decoder::default(),
            out: Vec::new(),
            seq_out: 0,
            seq_in: 0,
            send,
        }
    }

    /// Queues the frame `f` makes of the next sequence number, unless the
    /// peer has stopped reading.
    fn queue(&mut self, f: impl FnOnce(u64) -> Frame) {
        if self.out.len() > MAX_QUEUED {
            return;
        }
        self.seq_out += 1;
        let frame = f(self.seq_out);
        self.out
            .extend_from_slice(&wire::encode(&frame, self.send, &self.keys));
    }

    /// Writes what the socket takes now; an error is a broken connection.
    fn flush(&mut self) -> std::io::Result<()> {
        while !self.out.is_empty() {
            match self.stream.write(&self.out) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The frames that arrived; `Err` for a closed, broken or misbehaving
    /// connection (after the frames before it).
    fn receive(&mut self) -> (Vec<Frame>, Result<(), String>) {
        let mut frames = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            match self.stream.read(&mut buf) {
                Ok(0) => break Err("closed".to_string()),
                Ok(n) => self.dec.push(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => break Err(e.to_string()),
            }
        };
        let from = match self.send {
            Dir::FromRoot => Dir::ToRoot,
            Dir::ToRoot => Dir::FromRoot,
        };
        loop {
            match self.dec.next(from, |_| Some(&self.keys)) {
                Ok(None) => break,
                Ok(Some(f)) if f.seq() <= self.seq_in => {
                    return (frames, Err(Bad("a replayed frame".into()).0));
                }
                Ok(Some(f)) => {
                    self.seq_in = f.seq();
                    frames.push(f);
                }
                Err(Bad(why)) => return (frames, Err(why)),
            }
        }
        (frames, end)
    }
}

/// A peer this rank watches.
struct Peer {
    host: Option<String>,
    conn: Option<Conn>,
    heard: Instant,
    last: Option<(u64, Phase)>,
    bye: bool,
    /// Whether its heartbeat connection ever came.
    joined: bool,
    /// A lost notice from rank 0, not acted on yet.
    notice: Option<Frame>,
}

/// A connection rank 0 accepted, before its hello.
struct Pending {
    stream: TcpStream,
    challenge: [u8; CHALLENGE_BYTES],
    dec: Decoder,
    since: Instant,
}

impl Monitor {
    /// [`MAX_PENDING`] and two a rank of the world.
    fn max_pending(&self) -> usize {
        MAX_PENDING.saturating_add(self.world.saturating_mul(2))
    }

    /// The thread's body: beats, reads and judges until stopped or a peer
    /// is lost (then `fire`).
    pub(super) fn run(self, role: Role, mut on_lost: OnLost) {
        let start = Instant::now();
        let peer = |host| Peer {
            host,
            conn: None,
            heard: start,
            last: None,
            bye: false,
            joined: false,
            notice: None,
        };
        let mut peers: Vec<Option<Peer>> = (0..self.world).map(|_| None).collect();
        let (mut listener, mut nonces, mut root) = (None, Vec::new(), None);
        match role {
            Role::Root {
                listener: l,
                hosts,
                nonces: n,
                watch,
            } => {
                for (r, p) in peers.iter_mut().enumerate().skip(1) {
                    if watch.get(r).copied().unwrap_or(true) {
                        *p = Some(peer(hosts.get(r).cloned().flatten()));
                    }
                }
                let _ = l.set_nonblocking(true);
                (listener, nonces) = (Some(l), n);
            }
            Role::Leaf { root: at, nonce } => {
                peers[0] = Some(peer(Some(at.ip().to_string())));
                root = Some((at, nonce));
            }
        }
        let mut pending: Vec<Pending> = Vec::new();
        let mut next_beat = start;
        loop {
            if self.frozen.load(Ordering::SeqCst) {
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(TICK);
                continue;
            }
            let stopping = self.stop.load(Ordering::SeqCst);
            let conn = match &root {
                // Within the timeout: past it, rank 0 is lost (training), or
                // no imgctl of this version (fleet verify, not watched).
                Some((at, nonce)) if !stopping && start.elapsed() < self.settings.timeout => {
                    self.connect(*at, nonce, start)
                }
                _ => None,
            };
            if let Some(c) = conn {
                if let Some(p) = peers[0].as_mut() {
                    p.conn = Some(c);
                    p.joined = true;
                    p.heard = Instant::now();
                }
                root = None;
            }
            let now = Instant::now();
            let wait = if stopping {
                Duration::ZERO
            } else {
                next_beat.saturating_duration_since(now).min(TICK)
            };
            self.wait_and_read(&mut peers, listener.as_ref(), &mut pending, wait);
            if let Some(l) = &listener {
                self.accept(l, &mut pending);
                self.greet(&mut pending, &mut peers, &nonces);
            }
            // A lost notice from rank 0 ends this rank, stopping or not.
            if let Some(err) = self.notice(&mut peers) {
                match on_lost {
                    OnLost::End(fire) => return fire(err),
                    OnLost::Each(ref mut each) => each(0, err),
                }
            }
            if stopping {
                return self.say_bye(&mut peers);
            }
            let now = Instant::now();
            if now >= next_beat {
                let (step, phase) = self.progress.get();
                for c in peers.iter_mut().flatten().filter_map(|p| p.conn.as_mut()) {
                    c.queue(|seq| Frame::Beat {
                        seq,
                        step,
                        phase: phase as u8,
                    });
                }
                next_beat = (next_beat + self.settings.interval).max(now);
            }
            for p in peers.iter_mut().flatten() {
                if p.conn.as_mut().is_some_and(|c| c.flush().is_err()) {
                    p.conn = None;
                }
            }
            let tell = matches!(on_lost, OnLost::End(_));
            while let Some((peer, err)) = self.judge(&mut peers, tell) {
                match on_lost {
                    OnLost::End(fire) => return fire(err),
                    OnLost::Each(ref mut each) => each(peer, err),
                }
            }
        }
    }

    /// A leaf's heartbeat connection to rank 0: the challenge read, the
    /// hello sent. `None` while rank 0 cannot be reached (retried).
    fn connect(&self, at: SocketAddr, nonce: &[u8], start: Instant) -> Option<Conn> {
        let deadline = (start + self.settings.timeout).max(Instant::now() + TICK);
        let mut s = TcpStream::connect_timeout(&at, Duration::from_secs(1)).ok()?;
        let _ = s.set_nodelay(true);
        let mut challenge = [0u8; CHALLENGE_BYTES];
        crate::sys::net::read_exact_by(&mut s, &mut challenge, deadline).ok()?;
        let keys = Keys {
            token: self.token.clone(),
            nonce: nonce.to_vec(),
            challenge,
        };
        let hello = Frame::Hello {
            rank: self.rank as u32,
            world: self.world as u32,
        };
        s.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
        s.write_all(&wire::encode(&hello, Dir::ToRoot, &keys))
            .ok()?;
        s.set_nonblocking(true).ok()?;
        Some(Conn::new(s, keys, Dir::ToRoot))
    }

    /// Waits up to `wait` for anything to read, then takes in what the
    /// peers' connections have ([`take_in`]); the listener's and the
    /// pending connections' turn comes after.
    fn wait_and_read(
        &self,
        peers: &mut [Option<Peer>],
        listener: Option<&TcpListener>,
        pending: &mut [Pending],
        wait: Duration,
    ) {
        let mut fds: Vec<i32> = Vec::with_capacity(peers.len() + pending.len() + 1);
        // A full set of pending hellos leaves newcomers in the backlog.
        let room = pending.len() < self.max_pending();
        fds.extend(listener.filter(|_| room).map(|l| l.as_raw_fd()));
        fds.extend(pending.iter().map(|p| p.stream.as_raw_fd()));
        let watched: Vec<usize> = (0..peers.len())
            .filter(|&r| peers[r].as_ref().is_some_and(|p| p.conn.is_some()))
            .collect();
        fds.extend(watched.iter().map(|&r| {
            let p = peers[r].as_ref().expect("watched");
            p.conn.as_ref().expect("connected").stream.as_raw_fd()
        }));
        if fds.is_empty() {
            std::thread::sleep(wait);
            return;
        }
        let Ok(ready) = poll_readable(&fds, wait) else {
            std::thread::sleep(wait);
            return;
        };
        let skip = fds.len() - watched.len();
        for (i, &r) in watched.iter().enumerate() {
            if ready[skip + i] {
                take_in(peers[r].as_mut().expect("watched"), r);
            }
        }
    }

    /// Accepts new connections and sends each its challenge. With every
    /// slot taken, the oldest makes room once it has had [`HELLO_GRACE`]
    /// (a real rank answers the challenge at once; one that says nothing
    /// must not keep the real ones out); until then the newcomers wait in
    /// the kernel's backlog (a thousand ranks connecting at once).
    fn accept(&self, l: &TcpListener, pending: &mut Vec<Pending>) {
        loop {
            if pending.len() >= self.max_pending() {
                if pending[0].since.elapsed() < HELLO_GRACE {
                    return;
                }
                pending.remove(0);
            }
            let Ok((mut s, _)) = l.accept() else { return };
            let challenge: [u8; CHALLENGE_BYTES] = rand::random();
            let _ = s.set_nodelay(true);
            if s.set_nonblocking(true).is_err() || s.write(&challenge).ok() != Some(CHALLENGE_BYTES)
            {
                continue;
            }
            pending.push(Pending {
                stream: s,
                challenge,
                dec: Decoder::default(),
                since: Instant::now(),
            });
        }
    }

    /// Rank 0: reads the pending connections' hellos; a valid one (this
    /// job's world, a rank without a connection, the token's MAC over this
    /// connection's challenge and that rank's nonce) becomes its rank's
    /// heartbeat connection. Anything else, or nothing for the timeout, is
    /// closed.
    fn greet(&self, pending: &mut Vec<Pending>, peers: &mut [Option<Peer>], nonces: &[Vec<u8>]) {
        let timeout = self.settings.timeout;
        let mut i = 0;
        while i < pending.len() {
            let p = &mut pending[i];
            let mut buf = [0u8; 256];
            let closed = match p.stream.read(&mut buf) {
                Ok(0) => true,
                Ok(n) => {
                    p.dec.push(&buf[..n]);
                    false
                }
                Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted),
            };
            let world = self.world;
            let keys_of = |rank: u32| Keys {
                token: self.token.clone(),
                nonce: nonces
                    .get((rank as usize).wrapping_sub(1))
                    .cloned()
                    .unwrap_or_default(),
                challenge: p.challenge,
            };
            let mut chosen = None;
            let hello = p.dec.next(Dir::ToRoot, |f| match f {
                Frame::Hello { rank, world: w }
                    if *w as usize == world && *rank >= 1 && (*rank as usize) < world =>
                {
                    chosen = Some(keys_of(*rank));
                    chosen.as_ref()
                }
                _ => None,
            });
            match hello {
                Ok(None) if !closed && p.since.elapsed() < timeout => {
                    i += 1;
                    continue;
                }
                Ok(Some(Frame::Hello { rank, .. })) => {
                    let p = pending.remove(i);
                    let keys = chosen.expect("keys of the hello");
                    if let Some(peer) = peers[rank as usize].as_mut() {
                        if peer.conn.is_none() && !peer.bye {
                            let mut c = Conn::new(p.stream, keys, Dir::FromRoot);
                            c.dec = p.dec;
                            // A beat back at once, and the frames that came
                            // with the hello.
                            let (step, phase) = self.progress.get();
                            c.queue(|seq| Frame::Beat {
                                seq,
                                step,
                                phase: phase as u8,
                            });
                            peer.conn = Some(c);
                            peer.joined = true;
                            peer.heard = Instant::now();
                            take_in(peer, rank as usize);
                        }
                    }
                    continue;
                }
                _ => {
                    pending.remove(i);
                }
            }
        }
    }

    /// The error a lost notice from rank 0 carries, if one came.
    fn notice(&self, peers: &mut [Option<Peer>]) -> Option<anyhow::Error> {
        let n = peers.first_mut()?.as_mut()?.notice.take()?;
        let Frame::Lost {
            peer,
            silent_ms,
            last,
            host,
            ..
        } = n
        else {
            return None;
        };
        Some(
            HeartbeatError::Lost {
                rank: self.rank,
                peer: peer as usize,
                host: (!host.is_empty()).then_some(host),
                silent: Duration::from_millis(silent_ms),
                last: last.map(|(s, p)| (s, Phase::from_byte(p))),
                seen_by: Some(0),
            }
            .into(),
        )
    }

    /// The first peer silent past the timeout (no longer watched), as the
    /// error to end with; with `tell`, rank 0 tells every other rank first.
    /// [`Monitor::strict`] (training): a peer whose heartbeat never came is
    /// silent too; else (fleet verify) only a peer that beat, then fell
    /// silent, is (one that never beat is no imgctl of this version, or
    /// none: the wait for its report names it).
    fn judge(&self, peers: &mut [Option<Peer>], tell: bool) -> Option<(usize, anyhow::Error)> {
        let now = Instant::now();
        let lost = (0..peers.len()).find(|&r| {
            peers[r].as_ref().is_some_and(|p| {
                !p.bye
                    && (self.strict || p.joined)
                    && now.saturating_duration_since(p.heard) > self.settings.timeout
            })
        })?;
        let p = peers[lost].take().expect("lost peer");
        let silent = now.saturating_duration_since(p.heard);
        if self.rank == 0 && tell {
            for c in peers.iter_mut().flatten().filter_map(|p| p.conn.as_mut()) {
                c.queue(|seq| Frame::Lost {
                    seq,
                    peer: lost as u32,
                    silent_ms: silent.as_millis() as u64,
                    last: p.last.map(|(s, ph)| (s, ph as u8)),
                    host: p.host.clone().unwrap_or_default(),
                });
            }
            flush_all(peers, LAST_WORDS);
        }
        Some((
            lost,
            HeartbeatError::Lost {
                rank: self.rank,
                peer: lost,
                host: p.host,
                silent,
                last: p.last,
                seen_by: None,
            }
            .into(),
        ))
    }

    /// A normal end: a bye to every peer, sent within a moment.
    fn say_bye(&self, peers: &mut [Option<Peer>]) {
        for c in peers.iter_mut().flatten().filter_map(|p| p.conn.as_mut()) {
            c.queue(|seq| Frame::Bye { seq });
        }
        flush_all(peers, LAST_WORDS / 5);
    }
}

/// Reads what peer `r`'s connection has and applies it: a beat updates
/// when it was heard and its step, a bye ends its judging, a lost notice
/// (from rank 0 only) is kept for [`Monitor::notice`]. A connection that
/// closed, broke or misbehaved is dropped: not judged here (a broken
/// connection fails the collectives at once; silence is the clock's).
fn take_in(p: &mut Peer, r: usize) {
    let Some(c) = p.conn.as_mut() else { return };
    let (frames, end) = c.receive();
    for f in frames {
        match f {
            Frame::Beat { step, phase, .. } => {
                p.heard = Instant::now();
                p.last = Some((step, Phase::from_byte(phase)));
            }
            Frame::Bye { .. } => p.bye = true,
            Frame::Lost { .. } if r == 0 => p.notice = Some(f),
            _ => {}
        }
    }
    if end.is_err() {
        p.conn = None;
    }
}

/// Flushes every connection until all is sent or `within` passed.
fn flush_all(peers: &mut [Option<Peer>], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let mut left = false;
        for p in peers.iter_mut().flatten() {
            if let Some(c) = p.conn.as_mut() {
                if c.flush().is_err() {
                    p.conn = None;
                } else {
                    left |= !c.out.is_empty();
                }
            }
        }
        if !left || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
