//! How long data parallelism waits, and how a wait reads in a message: the
//! collective timeout ([`collective_timeout`], from `$IMGCTL_COLLECTIVE_TIMEOUT`,
//! else 30 s for short runs and 30 min for the others) and [`fmt_secs`].
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

/// The collective timeout of short runs (train-demo's smoke preset and its
/// benchmark): 30 s, so that a node that went silent (no reset: a cut link,
/// a powered-off host) is named within a minute: the timeout, plus up to one
/// step begun before the loss and the exit (2.6 s past an 8 s timeout,
/// measured on the network-namespace nodes of tests/it/multinode.rs), plus
/// the rendezvous-store probe of [`super::agent::RENDEZVOUS_PROBE`]. Their
/// checkpoints and sample grids take well under a second on a CPU rank, so
/// 30 s never cuts a healthy wait.
pub const SHORT_RUN_COLLECTIVE_TIMEOUT: Duration = Duration::from_secs(30);

/// The collective timeout a run gets when `$IMGCTL_COLLECTIVE_TIMEOUT` does
/// not set one: [`SHORT_RUN_COLLECTIVE_TIMEOUT`] for a short run,
/// [`COLLECTIVE_TIMEOUT`] otherwise.
pub fn default_collective_timeout(short_run: bool) -> Duration {
    if short_run {
        SHORT_RUN_COLLECTIVE_TIMEOUT
    } else {
        COLLECTIVE_TIMEOUT
    }
}

/// How long a collective may wait for the other ranks before its rank gives
/// up: `$IMGCTL_COLLECTIVE_TIMEOUT` seconds, else `default` (see
/// [`default_collective_timeout`]). Bounds the CPU backend's exchanges and
/// the NCCL watchdog.
pub fn collective_timeout(default: Duration) -> anyhow::Result<Duration> {
    ev::seconds(ev::IMGCTL_COLLECTIVE_TIMEOUT, default)
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
    fn short_runs_name_a_lost_node_within_a_minute() {
        assert_eq!(default_collective_timeout(true), Duration::from_secs(30));
        assert_eq!(default_collective_timeout(false), Duration::from_secs(1800));
        assert!(
            SHORT_RUN_COLLECTIVE_TIMEOUT + super::super::agent::RENDEZVOUS_PROBE
                <= Duration::from_secs(45),
            "leaves 15 s for the step under way and the exit"
        );
    }

    #[test]
    fn seconds_read_as_whole_or_one_decimal() {
        assert_eq!(fmt_secs(Duration::from_secs(300)), "300 s");
        assert_eq!(fmt_secs(Duration::from_millis(2500)), "2.5 s");
    }
}
