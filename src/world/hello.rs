//! The rendezvous's wire format: a rank's hello (protocol 1, or 2 with a
//! nonce and its proof of the rendezvous token), rank 0's answer (status,
//! length, body; a session's body proves the token too), read whole against
//! a deadline and bounded in size. The pure decoders ([`parse_hello`],
//! [`parse_reply_head`]) are what the fuzz target `wire_messages` drives.
//! What the payload means is the caller's.
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::auth::{self, Nonce, Token, MAC_BYTES, NONCE_BYTES};
use crate::sys::net::read_exact_by;

/// Magic bytes opening every hello ("IMGCTLRV" + protocol version 1).
const MAGIC: &[u8; 8] = b"IMGCTLRV";
const PROTOCOL: u32 = 1;
/// The protocol of a hello that proves the rendezvous token: the 20 bytes of
/// protocol 1, then a nonce and the MAC of both ([`super::auth`]).
const PROTOCOL_TOKEN: u32 = 2;
/// Reply status of a refusal over the rendezvous token.
pub(super) const TOKEN_REFUSED: u8 = 3;
/// How long an accepted connection may take to send its whole hello before
/// rank 0 drops it (a port scanner, a stray client or a peer dripping a byte
/// at a time must not stall the rendezvous).
pub(super) const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of rank 0's answer to a hello a rank reads: the payload
/// is an NCCL unique id (128 bytes) or nothing, a refusal one line.
pub const MAX_REPLY_BYTES: usize = 1 << 20;

/// The body of a session answer: the payload, and with a token the MAC of
/// the hello's nonce and the payload (rank 0 proves it holds the token, to
/// this rank, for this hello alone).
pub(super) fn session_body(
    payload: &[u8],
    token: Option<&Token>,
    nonce: Option<&Nonce>,
) -> Vec<u8> {
    let mut body = payload.to_vec();
    if let (Some(t), Some(n)) = (token, nonce) {
        body.extend_from_slice(&t.mac(b"session", &[n, payload]));
    }
    body
}

/// The payload of a session answer that proves the token (see
/// [`session_body`]); `None` when the proof is missing or wrong.
pub(super) fn proven_payload(token: &Token, nonce: &Nonce, mut body: Vec<u8>) -> Option<Vec<u8>> {
    let at = body.len().checked_sub(MAC_BYTES)?;
    let tag = body.split_off(at);
    token
        .verify(b"session", &[nonce, &body], &tag)
        .then_some(body)
}

/// Sends a hello; with a token, protocol 2 with a fresh nonce and the MAC
/// of both (the nonce is returned: rank 0's answers are bound to it).
pub(super) fn write_hello(
    s: &mut TcpStream,
    rank: usize,
    world: usize,
    token: Option<&Token>,
) -> std::io::Result<Option<Nonce>> {
    let mut buf = Vec::with_capacity(HELLO_BYTES + NONCE_BYTES + MAC_BYTES);
    buf.extend_from_slice(MAGIC);
    let protocol = if token.is_some() {
        PROTOCOL_TOKEN
    } else {
        PROTOCOL
    };
    buf.extend_from_slice(&protocol.to_le_bytes());
    buf.extend_from_slice(&(rank as u32).to_le_bytes());
    buf.extend_from_slice(&(world as u32).to_le_bytes());
    let nonce = token.map(|t| {
        let n = auth::nonce();
        let tag = t.mac(b"hello", &[&buf, &n]);
        buf.extend_from_slice(&n);
        buf.extend_from_slice(&tag);
        n
    });
    s.write_all(&buf)?;
    Ok(nonce)
}

/// Why a hello is refused over the rendezvous token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRefusal {
    /// Rank 0 has a token; the hello proves none.
    Missing,
    /// The hello's proof is not of rank 0's token.
    Another,
    /// The hello proves a token, but rank 0 has none.
    Unexpected,
}

impl TokenRefusal {
    /// The refusal in words, for rank 0's error and the refused rank.
    pub(super) fn describe(self, rank: usize, peer: &SocketAddr) -> String {
        match self {
            TokenRefusal::Missing => format!(
                "rank {rank} (from {peer}) has no rendezvous token, but rank 0 has one"
            ),
            TokenRefusal::Another => format!(
                "rank {rank} (from {peer}) holds another rendezvous token than rank 0 (or is not one of this job's ranks)"
            ),
            TokenRefusal::Unexpected => format!(
                "rank {rank} (from {peer}) has a rendezvous token, but rank 0 has none"
            ),
        }
    }
}

/// A hello as rank 0 read it.
pub(super) struct Hello {
    pub(super) rank: usize,
    pub(super) world: usize,
    /// With tokens on both sides, the nonce it proved; without any, `None`;
    /// else why it is refused.
    pub(super) token: Result<Option<Nonce>, TokenRefusal>,
}

/// Reads the hello of an accepted connection, all of it within
/// [`HELLO_TIMEOUT`], and checks its proof of `token`.
pub(super) fn read_hello_of(
    mut stream: TcpStream,
    token: Option<&Token>,
) -> std::io::Result<(TcpStream, Hello)> {
    stream.set_nonblocking(false)?;
    let deadline = Instant::now() + HELLO_TIMEOUT;
    let mut head = [0u8; HELLO_BYTES];
    read_exact_by(&mut stream, &mut head, deadline)?;
    let parsed = parse_hello(&head)?;
    let proof = if parsed.proves_token {
        let mut rest = [0u8; NONCE_BYTES + MAC_BYTES];
        read_exact_by(&mut stream, &mut rest, deadline)?;
        let (n, tag) = rest.split_at(NONCE_BYTES);
        let nonce: Nonce = n.try_into().expect("NONCE_BYTES");
        Some((nonce, tag.to_vec()))
    } else {
        None
    };
    let checked = match (token, proof) {
        (None, None) => Ok(None),
        (Some(t), Some((n, tag))) if t.verify(b"hello", &[&head, &n], &tag) => Ok(Some(n)),
        (Some(_), Some(_)) => Err(TokenRefusal::Another),
        (Some(_), None) => Err(TokenRefusal::Missing),
        (None, Some(_)) => Err(TokenRefusal::Unexpected),
    };
    let hello = Hello {
        rank: parsed.rank,
        world: parsed.world,
        token: checked,
    };
    Ok((stream, hello))
}

/// The length of a hello: magic, protocol, rank, world size.
pub const HELLO_BYTES: usize = 20;

/// What the first [`HELLO_BYTES`] of a hello say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloHead {
    /// The rank it claims.
    pub rank: usize,
    /// Its world size.
    pub world: usize,
    /// Protocol 2: a nonce and a MAC follow.
    pub proves_token: bool,
}

/// The head of a hello; `InvalidData` for anything but [`HELLO_BYTES`]
/// bytes of an imgctl hello of protocol 1 or 2. Pure: the fuzz target
/// `wire_messages` drives it.
pub fn parse_hello(buf: &[u8]) -> std::io::Result<HelloHead> {
    let not_ours = || std::io::Error::new(ErrorKind::InvalidData, "not an imgctl hello");
    let buf: &[u8; HELLO_BYTES] = buf.try_into().map_err(|_| not_ours())?;
    let word = |i: usize| u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
    if &buf[..8] != MAGIC || !matches!(word(8), PROTOCOL | PROTOCOL_TOKEN) {
        return Err(not_ours());
    }
    Ok(HelloHead {
        rank: word(12) as usize,
        world: word(16) as usize,
        proves_token: word(8) == PROTOCOL_TOKEN,
    })
}

/// The status and body length of rank 0's answer to a hello, from its
/// 5-byte head; `InvalidData` past [`MAX_REPLY_BYTES`]. Pure, as
/// [`parse_hello`].
pub fn parse_reply_head(head: &[u8]) -> std::io::Result<(u8, usize)> {
    let [status, a, b, c, d] = *head else {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "an answer's head is 5 bytes",
        ));
    };
    let len = u32::from_le_bytes([a, b, c, d]) as usize;
    if len > MAX_REPLY_BYTES {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            format!("rank 0 answered the hello with {len} bytes (at most {MAX_REPLY_BYTES}): not an imgctl rank 0"),
        ));
    }
    Ok((status, len))
}

/// What rank 0 answers a hello with (status byte, length, body).
pub(super) enum Reply<'a> {
    /// Status 0: the session payload.
    Session(&'a [u8]),
    /// Status 1: the job is misconfigured (a usage error on every rank).
    Refused(&'a str),
    /// Status [`TIMED_OUT`]: rank 0's deadline passed before every rank came.
    TimedOut(&'a str),
    /// Status [`TOKEN_REFUSED`]: the hello's proof of the token failed.
    TokenRefused(&'a str),
}

/// Reply status of [`Reply::TimedOut`].
pub(super) const TIMED_OUT: u8 = 2;

pub(super) fn send_reply(s: &mut TcpStream, reply: Reply<'_>) -> std::io::Result<()> {
    let (status, body) = match reply {
        Reply::Session(p) => (0u8, p),
        Reply::Refused(m) => (1u8, m.as_bytes()),
        Reply::TimedOut(m) => (TIMED_OUT, m.as_bytes()),
        Reply::TokenRefused(m) => (TOKEN_REFUSED, m.as_bytes()),
    };
    let mut buf = vec![status];
    buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
    buf.extend_from_slice(body);
    s.write_all(&buf)
}

/// The payload, or the refusal's status and message: the whole answer
/// before `deadline`, at most [`MAX_REPLY_BYTES`] of it.
pub(super) fn read_reply(
    s: &mut TcpStream,
    deadline: Instant,
) -> std::io::Result<Result<Vec<u8>, (u8, String)>> {
    let mut head = [0u8; 5];
    read_exact_by(s, &mut head, deadline)?;
    let (status, len) = parse_reply_head(&head)?;
    let mut body = vec![0u8; len];
    read_exact_by(s, &mut body, deadline)?;
    Ok(if status == 0 {
        Ok(body)
    } else {
        Err((status, String::from_utf8_lossy(&body).into_owned()))
    })
}

#[cfg(test)]
#[path = "hello_tests.rs"]
mod tests;
