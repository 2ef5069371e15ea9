//! The heartbeat's frames on the wire and their MACs.
//!
//! A frame is a kind byte, a `u32` little-endian body length, the body, and
//! with a rendezvous token a 32-byte HMAC-SHA256 ([`crate::world::auth`])
//! over the direction (to or from rank 0), the leaf's rendezvous nonce, the
//! connection's challenge (16 random bytes rank 0 sends first on every
//! heartbeat connection), the kind and the body. Beats carry a sequence
//! number that must grow: a frame cannot be replayed on another connection
//! (another challenge), to another rank (another nonce), back to its
//! sender (another direction), nor twice on its own connection. This
//! module owns the bytes; it must not read sockets or clocks.
use crate::world::auth::{Token, MAC_BYTES};

/// Bytes of the challenge rank 0 sends on every new heartbeat connection.
pub const CHALLENGE_BYTES: usize = 16;
/// The most bytes of a frame's body (a lost notice names a host: far less).
const MAX_BODY: usize = 1024;
/// The MAC's label.
const LABEL: &[u8] = b"imgctl-heartbeat";

const HELLO: u8 = 1;
const BEAT: u8 = 2;
const BYE: u8 = 3;
const LOST: u8 = 4;

/// Which way a frame goes (part of its MAC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From rank 0 to another rank.
    FromRoot = 0,
    /// From another rank to rank 0.
    ToRoot = 1,
}

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A rank's first frame on its heartbeat connection.
    Hello {
        /// Its rank.
        rank: u32,
        /// Its world size.
        world: u32,
    },
    /// I am alive, at this step and phase.
    Beat {
        /// Grows by one per frame sent on the connection.
        seq: u64,
        /// The sender's step.
        step: u64,
        /// The sender's phase ([`super::Phase`] as a byte).
        phase: u8,
    },
    /// The sender ends normally: stop judging its silence.
    Bye {
        /// As for a beat.
        seq: u64,
    },
    /// Rank 0 declared `peer` lost (sent to the other ranks before it stops).
    Lost {
        /// As for a beat.
        seq: u64,
        /// The lost rank.
        peer: u32,
        /// How long rank 0 heard nothing from it, in milliseconds.
        silent_ms: u64,
        /// Its last step and phase, when it ever beat.
        last: Option<(u64, u8)>,
        /// Its address, as rank 0 knew it (empty when unknown).
        host: String,
    },
}

impl Frame {
    /// The sequence number (a hello has none: 0).
    pub fn seq(&self) -> u64 {
        match self {
            Frame::Hello { .. } => 0,
            Frame::Beat { seq, .. } | Frame::Bye { seq } | Frame::Lost { seq, .. } => *seq,
        }
    }

    fn kind_and_body(&self) -> (u8, Vec<u8>) {
        let mut b = Vec::new();
        let kind = match self {
            Frame::Hello { rank, world } => {
                b.extend_from_slice(&rank.to_le_bytes());
                b.extend_from_slice(&world.to_le_bytes());
                HELLO
            }
            Frame::Beat { seq, step, phase } => {
                b.extend_from_slice(&seq.to_le_bytes());
                b.extend_from_slice(&step.to_le_bytes());
                b.push(*phase);
                BEAT
            }
            Frame::Bye { seq } => {
                b.extend_from_slice(&seq.to_le_bytes());
                BYE
            }
            Frame::Lost {
                seq,
                peer,
                silent_ms,
                last,
                host,
            } => {
                b.extend_from_slice(&seq.to_le_bytes());
                b.extend_from_slice(&peer.to_le_bytes());
                b.extend_from_slice(&silent_ms.to_le_bytes());
                let (has, step, phase) = match last {
                    Some((s, p)) => (1u8, *s, *p),
                    None => (0, 0, 0),
                };
                b.push(has);
                b.extend_from_slice(&step.to_le_bytes());
                b.push(phase);
                let host = &host.as_bytes()[..host.len().min(255)];
                b.push(host.len() as u8);
                b.extend_from_slice(host);
                LOST
            }
        };
        (kind, b)
    }

    fn parse(kind: u8, b: &[u8]) -> Option<Frame> {
        let u32_at = |i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
        let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
        let exact = |n: usize| (b.len() == n).then_some(());
        Some(match kind {
            HELLO => {
                exact(8)?;
                Frame::Hello {
                    rank: u32_at(0)?,
                    world: u32_at(4)?,
                }
            }
            BEAT => {
                exact(17)?;
                Frame::Beat {
                    seq: u64_at(0)?,
                    step: u64_at(8)?,
                    phase: b[16],
                }
            }
            BYE => {
                exact(8)?;
                Frame::Bye { seq: u64_at(0)? }
            }
            LOST => {
                let host_len = *b.get(30)? as usize;
                exact(31 + host_len)?;
                Frame::Lost {
                    seq: u64_at(0)?,
                    peer: u32_at(8)?,
                    silent_ms: u64_at(12)?,
                    last: (b[20] == 1).then(|| (u64_at(21).unwrap_or(0), b[29])),
                    host: String::from_utf8_lossy(&b[31..]).into_owned(),
                }
            }
            _ => return None,
        })
    }
}

/// What a connection's MACs are bound to.
#[derive(Debug, Clone)]
pub struct Keys {
    /// The shared secret, when the job has one.
    pub token: Option<Token>,
    /// The leaf's rendezvous nonce (empty without a token).
    pub nonce: Vec<u8>,
    /// The connection's challenge.
    pub challenge: [u8; CHALLENGE_BYTES],
}

impl Keys {
    fn mac(&self, dir: Dir, kind: u8, body: &[u8]) -> Option<[u8; MAC_BYTES]> {
        let t = self.token.as_ref()?;
        Some(t.mac(
            LABEL,
            &[&[dir as u8], &self.nonce, &self.challenge, &[kind], body],
        ))
    }

    fn verify(&self, dir: Dir, kind: u8, body: &[u8], tag: &[u8]) -> bool {
        match &self.token {
            None => true,
            Some(t) => t.verify(
                LABEL,
                &[&[dir as u8], &self.nonce, &self.challenge, &[kind], body],
                tag,
            ),
        }
    }

    /// Bytes of a frame's MAC under these keys.
    fn mac_len(&self) -> usize {
        if self.token.is_some() {
            MAC_BYTES
        } else {
            0
        }
    }
}

/// `frame` framed (and MACed) for the wire.
pub fn encode(frame: &Frame, dir: Dir, keys: &Keys) -> Vec<u8> {
    let (kind, body) = frame.kind_and_body();
    let mut out = Vec::with_capacity(5 + body.len() + MAC_BYTES);
    out.push(kind);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    if let Some(tag) = keys.mac(dir, kind, &body) {
        out.extend_from_slice(&tag);
    }
    out
}

/// A frame that cannot be one of the job's: the connection is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bad(pub String);

/// Splits a byte stream into frames.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// Adds received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame sent in direction `dir`, `Ok(None)` when the
    /// bytes so far hold none. The hello's rank chooses the keys on rank 0
    /// (its nonce), so `keys` is asked per frame.
    pub fn next<'k>(
        &mut self,
        dir: Dir,
        keys: impl FnOnce(&Frame) -> Option<&'k Keys>,
    ) -> Result<Option<Frame>, Bad> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let kind = self.buf[0];
        let len = u32::from_le_bytes(self.buf[1..5].try_into().expect("4 bytes")) as usize;
        if len > MAX_BODY {
            return Err(Bad(format!("a frame of {len} bytes")));
        }
        let body = self.buf[5..].get(..len);
        let Some(body) = body else { return Ok(None) };
        let frame = Frame::parse(kind, body).ok_or_else(|| Bad(format!("a bad frame {kind}")))?;
        let keys = keys(&frame).ok_or_else(|| Bad("a frame from an unknown rank".into()))?;
        let total = 5 + len + keys.mac_len();
        if self.buf.len() < total {
            return Ok(None);
        }
        if !keys.verify(dir, kind, &self.buf[5..5 + len], &self.buf[5 + len..total]) {
            return Err(Bad("a frame whose MAC does not hold".into()));
        }
        self.buf.drain(..total);
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(token: Option<&str>) -> Keys {
        Keys {
            token: token.map(Token::new),
            nonce: vec![7; 16],
            challenge: [3; CHALLENGE_BYTES],
        }
    }

    #[test]
    fn frames_round_trip_whole_and_in_pieces() {
        let frames = [
            Frame::Hello { rank: 3, world: 8 },
            Frame::Beat {
                seq: 1,
                step: 1204,
                phase: 2,
            },
            Frame::Bye { seq: 2 },
            Frame::Lost {
                seq: 3,
                peer: 3,
                silent_ms: 5000,
                last: Some((1204, 1)),
                host: "10.0.0.7".into(),
            },
            Frame::Lost {
                seq: 4,
                peer: 1,
                silent_ms: 1,
                last: None,
                host: String::new(),
            },
        ];
        for token in [None, Some("s3cret")] {
            let k = keys(token);
            let bytes: Vec<u8> = frames
                .iter()
                .flat_map(|f| encode(f, Dir::ToRoot, &k))
                .collect();
            let mut d = Decoder::default();
            let mut got = Vec::new();
            // One byte at a time: a frame is only whole once all of it came.
            for b in bytes {
                d.push(&[b]);
                while let Some(f) = d.next(Dir::ToRoot, |_| Some(&k)).unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, frames);
        }
    }

    #[test]
    fn a_forged_reflected_or_rebound_frame_is_refused() {
        let k = keys(Some("s3cret"));
        let beat = Frame::Beat {
            seq: 1,
            step: 5,
            phase: 1,
        };
        let refused = |bytes: Vec<u8>, dir: Dir, k: Keys| {
            let mut d = Decoder::default();
            d.push(&bytes);
            d.next(dir, |_| Some(&k)).unwrap_err()
        };
        // Another token, another direction, another connection, another rank.
        let other = keys(Some("guess"));
        refused(encode(&beat, Dir::ToRoot, &other), Dir::ToRoot, k.clone());
        refused(encode(&beat, Dir::FromRoot, &k), Dir::ToRoot, k.clone());
        let mut c = k.clone();
        c.challenge = [4; CHALLENGE_BYTES];
        refused(encode(&beat, Dir::ToRoot, &c), Dir::ToRoot, k.clone());
        let mut n = k.clone();
        n.nonce = vec![8; 16];
        refused(encode(&beat, Dir::ToRoot, &n), Dir::ToRoot, k.clone());
        // No MAC at all, read as a job with a token.
        let plain = encode(&beat, Dir::ToRoot, &keys(None));
        let mut d = Decoder::default();
        d.push(&plain);
        d.push(&[0; MAC_BYTES]);
        assert!(d.next(Dir::ToRoot, |_| Some(&k)).is_err());
        // Nonsense lengths and kinds.
        let none = keys(None);
        let mut d = Decoder::default();
        d.push(&[2, 0xff, 0xff, 0, 0]);
        assert!(d.next(Dir::ToRoot, |_| Some(&none)).is_err());
        let mut d = Decoder::default();
        d.push(&[9, 0, 0, 0, 0]);
        assert!(d.next(Dir::ToRoot, |_| Some(&none)).is_err());
    }
}
