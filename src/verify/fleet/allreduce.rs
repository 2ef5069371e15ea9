//! The fleet's all-reduce: every node at once over the CPU collective (the
//! star of imgctl's rendezvous sockets, as CPU training uses it), the sum
//! checked on every element. Its buffer shrinks as the fleet grows, so
//! that rank 0's links carry at most [`ROOT_BUDGET`] in and out whatever
//! the fleet's size ([`buffer_bytes`]).
//!
//! Part: the verify wing (`docs/architecture.md`).
use std::io::Write;
use std::net::TcpStream;
use std::time::Instant;

use super::{FleetOptions, ALL_REDUCE};
use crate::verify::result::CheckResult;
use crate::world::rendezvous::Links;

/// The most bytes the all-reduce moves through rank 0's links, in and out
/// together: 512 MiB (16 MiB a node up to 17 nodes, 4 MiB at 64, 26 KiB
/// at 10,000).
pub const ROOT_BUDGET: u64 = 512 << 20;

/// Each node's buffer: `link_bytes`, or less where the star would carry
/// more than [`ROOT_BUDGET`] through rank 0 (2 buffers a node); at least
/// 4 KiB, a whole number of floats.
pub fn buffer_bytes(link_bytes: u64, world: usize) -> u64 {
    let others = (world as u64).saturating_sub(1).max(1);
    (link_bytes.min(ROOT_BUDGET / (2 * others)).max(4096)) & !3
}

/// `16 MiB`, `26 KiB`.
fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// The id of the cross-node all-reduce's verdict.
pub(super) const ALL_REDUCE_ID: &str = "fleet.allreduce";

/// What rank `rank` fills its buffer with: `rank % 64 + 1`, so that a node
/// dropped or counted twice changes the sum, and the sum of 10,000 nodes
/// stays an integer an f32 holds exactly (below 2^24).
fn fill(rank: usize) -> f64 {
    (rank % 64 + 1) as f64
}

/// The sum every element must hold after the all-reduce over `world`.
fn expected_sum(world: usize) -> f64 {
    (0..world).map(fill).sum()
}

/// Rank `rank`'s buffer of `bytes`.
fn all_reduce_buffer(rank: usize, bytes: u64) -> tch::Tensor {
    let n = (bytes / 4).max(1) as i64;
    tch::Tensor::full([n], fill(rank), (tch::Kind::Float, tch::Device::Cpu))
}

/// Rank 0's side of the cross-node all-reduce over the CPU collective (the
/// star of imgctl's rendezvous sockets, as CPU training uses it): every
/// node at once, the result checked, the time and bytes reported.
pub(super) fn all_reduce_root(
    streams: Vec<(usize, TcpStream)>,
    world: usize,
    options: FleetOptions,
) -> (CheckResult, Vec<(usize, TcpStream)>) {
    use crate::world::collective::cpu::CpuCollective;
    use crate::world::collective::Collective;
    use crate::world::rendezvous::Session;
    let ranks: Vec<usize> = streams.iter().map(|(r, _)| *r).collect();
    let mut links = Vec::new();
    for (_, mut s) in streams {
        if s.write_all(&[ALL_REDUCE]).is_err() {
            return (
                CheckResult::error(ALL_REDUCE_ID, "a node went away before the all-reduce"),
                Vec::new(),
            );
        }
        links.push(s);
    }
    let session = Session {
        rank: 0,
        world_size: world,
        payload: Vec::new(),
        links: Links::Root(links),
        address: String::new(),
        auth: None,
        listener: None,
    };
    let each = buffer_bytes(options.link_bytes, world);
    let buf = all_reduce_buffer(0, each);
    let outcome = CpuCollective::new(session, options.timeout).and_then(|mut c| {
        let start = Instant::now();
        c.all_reduce_sum(&buf)?;
        Ok((start.elapsed().as_secs_f64().max(1e-9), c.into_links()))
    });
    let (secs, links) = match outcome {
        Ok(v) => v,
        Err(e) => {
            return (
                CheckResult::error(ALL_REDUCE_ID, format!("the all-reduce failed: {e:#}")),
                Vec::new(),
            )
        }
    };
    let streams = match links {
        Links::Root(v) => ranks.into_iter().zip(v).collect(),
        _ => Vec::new(),
    };
    let want = expected_sum(world);
    let wrong = buf.ne(want).sum(tch::Kind::Int64).int64_value(&[]);
    let bytes = each as f64;
    let algbw = bytes / secs / 1e6;
    // The star sends every node's buffer to rank 0 and the sum back: rank 0's
    // links carry 2(n-1) buffers.
    let through_root = 2.0 * (world as f64 - 1.0) * bytes / secs / 1e6;
    let r = if wrong > 0 {
        CheckResult::fail(
            ALL_REDUCE_ID,
            format!(
                "the all-reduce over {world} nodes is wrong in {wrong} element(s): expected {want}"
            ),
        )
        .hint(
            "a node or a link corrupts data: check each node's memory and NIC (dmesg, ethtool -S)",
        )
    } else {
        CheckResult::pass(
            ALL_REDUCE_ID,
            format!(
                "CPU all-reduce of {} over {world} nodes in {:.0} ms, result checked: algbw {algbw:.0} MB/s, {through_root:.0} MB/s through rank 0's links",
                size(each),
                secs * 1e3
            ),
        )
    };
    let r = r
        .measured(format!("algbw {algbw:.0} MB/s"))
        .threshold(format!("every element = {want}"))
        .value(algbw, "MB/s");
    (r, streams)
}

/// A node's side of the cross-node all-reduce; gives the stream back.
pub(super) fn all_reduce_leaf(
    stream: TcpStream,
    rank: usize,
    world: usize,
    options: FleetOptions,
    address: &str,
) -> anyhow::Result<TcpStream> {
    use crate::world::collective::cpu::CpuCollective;
    use crate::world::collective::Collective;
    use crate::world::rendezvous::Session;
    let session = Session {
        rank,
        world_size: world,
        payload: Vec::new(),
        links: Links::Leaf(stream),
        address: address.to_string(),
        auth: None,
        listener: None,
    };
    let mut c = CpuCollective::new(session, options.timeout)?;
    c.all_reduce_sum(&all_reduce_buffer(
        rank,
        buffer_bytes(options.link_bytes, world),
    ))?;
    match c.into_links() {
        Links::Leaf(s) => Ok(s),
        _ => anyhow::bail!("fleet verify: the all-reduce kept the link"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_shrinks_so_rank_0_carries_at_most_the_budget() {
        let mib = 1u64 << 20;
        assert_eq!(buffer_bytes(16 * mib, 3), 16 * mib);
        assert_eq!(buffer_bytes(16 * mib, 17), 16 * mib);
        assert_eq!(size(buffer_bytes(16 * mib, 64)), "4 MiB");
        assert_eq!(size(buffer_bytes(16 * mib, 10_000)), "26 KiB");
        for world in [2, 64, 1024, 10_000] {
            let each = buffer_bytes(16 * mib, world);
            assert!(2 * (world as u64 - 1) * each <= ROOT_BUDGET, "{world}");
            assert_eq!(each % 4, 0);
        }
        // Never below 4 KiB, whatever the fleet.
        assert_eq!(buffer_bytes(16 * mib, 1_000_000), 4096);
        assert_eq!(buffer_bytes(1, 2), 4096);
    }

    #[test]
    fn the_expected_sum_is_exact_in_f32_for_ten_thousand_nodes() {
        assert_eq!(expected_sum(3), 6.0);
        let s = expected_sum(10_000);
        assert!(s < f64::from(1u32 << 24));
        assert_eq!(f64::from(s as f32), s);
    }
}
