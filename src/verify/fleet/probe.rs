//! Rank 0's link probe: `bytes` of a pseudo-random pattern sent to a node,
//! timed from the first byte to the node's answer, and the answer carries
//! the node's checksum of what it read, so that "it answered", "the bytes
//! arrived unchanged" and "the link is fast enough" are three facts
//! (`fleet.reachable`, `fleet.intact`, `fleet.links`).
//!
//! The checksum is a word-wise rotate-and-xor over the bytes: order- and
//! value-sensitive, and cheap enough (a few ms per 16 MiB) not to lower
//! the figure it rides with.
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::{lost, PROBE};
use crate::sys::net::read_exact_by;

/// The pattern's block: 1 MiB, sent again and again.
const BLOCK: usize = 1 << 20;

/// What one probe found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    /// Rank 0 → node, 10^6 bytes a second.
    pub mbs: f64,
    /// Whether the node's checksum of the bytes is rank 0's.
    pub intact: bool,
}

/// The pattern: xorshift64 from a fixed seed, the same on both ends.
fn block() -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut out = Vec::with_capacity(BLOCK);
    while out.len() < BLOCK {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Folds `bytes` (a multiple of 8 long, or the stream's tail) into `acc`.
fn fold(mut acc: u64, bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        acc = acc.rotate_left(5) ^ u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
    }
    for b in words.remainder() {
        acc = acc.rotate_left(5) ^ u64::from(*b);
    }
    acc
}

/// Sends `bytes` to a node and waits for its answer: MB/s of the link from
/// rank 0 to it, and whether its checksum matches.
pub fn send(stream: &mut TcpStream, bytes: u64, timeout: Duration) -> Result<Probe, String> {
    stream
        .set_write_timeout(Some(timeout))
        .and_then(|_| stream.set_read_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let chunk = block();
    let mut want = 0u64;
    let start = Instant::now();
    let mut head = vec![PROBE];
    head.extend_from_slice(&bytes.to_le_bytes());
    stream.write_all(&head).map_err(|e| lost(&e))?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        stream.write_all(&chunk[..n]).map_err(|e| lost(&e))?;
        want = fold(want, &chunk[..n]);
        left -= n as u64;
    }
    let mut ack = [0u8; 9];
    read_exact_by(stream, &mut ack, start + timeout).map_err(|e| lost(&e))?;
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let got = u64::from_le_bytes(ack[1..].try_into().unwrap_or([0; 8]));
    Ok(Probe {
        mbs: bytes as f64 / secs / 1e6,
        intact: ack[0] == 1 && got == want,
    })
}

/// Reads rank 0's probe bytes, all of them before `deadline`, and answers
/// with their checksum.
pub fn answer(stream: &mut TcpStream, deadline: Instant) -> anyhow::Result<()> {
    let mut len = [0u8; 8];
    read_exact_by(stream, &mut len, deadline)?;
    let mut left = u64::from_le_bytes(len);
    let mut buf = vec![0u8; BLOCK];
    let mut sum = 0u64;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        read_exact_by(stream, &mut buf[..n], deadline)?;
        sum = fold(sum, &buf[..n]);
        left -= n as u64;
    }
    let mut ack = vec![1u8];
    ack.extend_from_slice(&sum.to_le_bytes());
    stream.write_all(&ack)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_changed_bit_or_two_swapped_words_change_the_checksum() {
        let b = block();
        let sum = fold(0, &b);
        let mut flipped = b.clone();
        flipped[123_457] ^= 0x10;
        assert_ne!(fold(0, &flipped), sum);
        let mut swapped = b.clone();
        swapped.swap(0, 8);
        swapped.swap(1, 9);
        assert_ne!(fold(0, &swapped), sum);
        // Folding in pieces of 1 MiB is folding the whole.
        let two: Vec<u8> = b.iter().chain(b.iter()).copied().collect();
        assert_eq!(fold(fold(0, &b), &b), fold(0, &two));
    }
}
