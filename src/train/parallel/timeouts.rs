//! How long data parallelism waits, and how a wait reads in a message: the
//! collective timeout ([`collective_timeout`], from `$IMGCTL_COLLECTIVE_TIMEOUT`)
//! and [`fmt_secs`].
//!
//! A leaf: the rendezvous, both collective backends, the watchdog and the
//! error texts import it; it imports none of them (so the NCCL backend does
//! not import back into `parallel/mod.rs`). It must not wait for anything itself.
use std::time::Duration;

use crate::env_vars as ev;

/// How long one collective waits for the other ranks: 30 minutes, torch.distributed's
/// default process-group timeout (`default_pg_timeout`, torch/distributed/constants.py).
/// Long because rank 0 may be writing a checkpoint or a sample grid meanwhile.
pub const COLLECTIVE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// How long a collective may wait for the other ranks before its rank gives
/// up: `$IMGCTL_COLLECTIVE_TIMEOUT` seconds, else [`COLLECTIVE_TIMEOUT`]
/// (30 min, which covers rank 0 writing a checkpoint or a sample grid while
/// the others wait). Bounds the CPU backend's exchanges and the NCCL watchdog.
pub fn collective_timeout() -> anyhow::Result<Duration> {
    ev::seconds(ev::IMGCTL_COLLECTIVE_TIMEOUT, COLLECTIVE_TIMEOUT)
}

/// `30 s`, `2.5 s`, `300 s`.
pub fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if (s - s.round()).abs() < 1e-9 {
        format!("{} s", s.round() as u64)
    } else {
        format!("{s:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_as_whole_or_one_decimal() {
        assert_eq!(fmt_secs(Duration::from_secs(300)), "300 s");
        assert_eq!(fmt_secs(Duration::from_millis(2500)), "2.5 s");
    }
}
