//! torchrun's elastic agent after this rank lost a peer: whether the
//! rendezvous host went with it ([`rendezvous_host_lost`]), asked of the
//! c10d store at torchrun's `--rdzv-endpoint` ([`rendezvous_endpoint`]).
//!
//! With torchrun's c10d rendezvous the store lives inside the agent of one
//! node (the `--rdzv-endpoint` host, rank 0's node). When that node dies,
//! the survivors' agents cannot restart anything: measured with torch 2.7
//! on the network-namespace nodes of the tests, an agent whose store host
//! was killed ends within a second with a RendezvousConnectionError
//! traceback, and one whose store host went silent (a cut link) stays
//! blocked in a TCPStore `recv` for as long as TCP retransmits (over 7
//! minutes, still waiting), whatever `--rdzv-conf read_timeout`,
//! `join_timeout` or `close_timeout` say. So a rank that lost a peer asks
//! the store whether it is still there, with TCP connections bounded by
//! [`RENDEZVOUS_PROBE`]; a store that does not answer means the job cannot
//! go on. What to do about the agent is `commands/`'s choice: this module
//! only probes, it must not signal processes.
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::error::{CollectiveError, LaunchError};
use super::tcpstore::host_port;

/// How long a rank that lost a peer tries to connect to torchrun's
/// rendezvous store before it takes the store's host for gone: 5 s, far
/// above a connection's round trip on any network a job spans, and short
/// next to the collective timeout that came before it.
pub const RENDEZVOUS_PROBE: Duration = Duration::from_secs(5);

/// How long after a first answer the store is asked again (see
/// [`rendezvous_host_lost`]): 1 s, far longer than a killed process takes to
/// exit and close its sockets, short next to any collective timeout.
pub const RENDEZVOUS_SETTLE: Duration = Duration::from_secs(1);

/// The peer `err` says this rank lost (a broken connection or a timeout of
/// the CPU backend, or a silence its heartbeat saw): `(rank, peer, peer's host)`.
pub fn lost_peer(err: &anyhow::Error) -> Option<(usize, usize, Option<String>)> {
    err.chain().find_map(|e| {
        if let Some(super::heartbeat::HeartbeatError::Lost {
            rank, peer, host, ..
        }) = e.downcast_ref()
        {
            return Some((*rank, *peer, host.clone()));
        }
        match e.downcast_ref::<CollectiveError>()? {
            CollectiveError::PeerLost {
                rank, peer, host, ..
            }
            | CollectiveError::PeerTimeout {
                rank, peer, host, ..
            } => Some((*rank, *peer, host.clone())),
            _ => None,
        }
    })
}

/// Whether a TCP connection to `host:port` is accepted within `probe`
/// (any of its addresses).
pub fn answers(host: &str, port: u16, probe: Duration) -> bool {
    let Ok(addrs) = (host, port).to_socket_addrs() else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| TcpStream::connect_timeout(&a, probe).is_ok())
}

/// torchrun's c10d rendezvous endpoint, `(host, port)`, from its agent's
/// command line `args` (`--rdzv-endpoint H:P`, `--rdzv_endpoint=H:P`, …) or
/// the `PET_RDZV_ENDPOINT`/`PET_RDZV_BACKEND` variables torchrun also reads
/// (`env`); the port defaults to 29400 as torchrun's does. `None` for
/// another backend (`static` keeps no store to probe across restarts).
pub fn rendezvous_endpoint(
    args: &[String],
    env: impl Fn(&str) -> Option<String>,
) -> Option<(String, u16)> {
    let flag = |names: [&str; 2], var: &str| {
        args.iter()
            .enumerate()
            .find_map(|(i, a)| {
                names.iter().find_map(|n| {
                    if a == n {
                        args.get(i + 1).cloned()
                    } else {
                        a.strip_prefix(n)?.strip_prefix('=').map(str::to_string)
                    }
                })
            })
            .or_else(|| env(var))
    };
    let backend = flag(["--rdzv-backend", "--rdzv_backend"], "PET_RDZV_BACKEND")?;
    if backend != "c10d" {
        return None;
    }
    let endpoint = flag(["--rdzv-endpoint", "--rdzv_endpoint"], "PET_RDZV_ENDPOINT")?;
    let endpoint = endpoint.trim();
    // `[v6]:port`, `host:port`, or a bare host.
    let (host, port) = match endpoint.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && (!h.contains(':') || h.ends_with(']')) => {
            (h, p.parse().ok()?)
        }
        _ => (endpoint, TORCHRUN_RDZV_PORT),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// torchrun's default c10d rendezvous port (`parse_rendezvous_endpoint(…,
/// default_port=29400)` in torch/distributed/elastic/rendezvous/utils.py).
pub const TORCHRUN_RDZV_PORT: u16 = 29400;

/// When `err` is a lost peer of rank `rank`, or `interrupted` (its torchrun
/// agent sent SIGTERM, as it does when its own store calls fail), and the
/// rendezvous store at `endpoint` does not answer within `probe`, now or
/// [`RENDEZVOUS_SETTLE`] later: the [`LaunchError::RendezvousHostLost`]
/// that names both (`ended_agent` left for the caller). `None` otherwise:
/// the store is alive and torchrun restarts the workers itself.
pub fn rendezvous_host_lost(
    rank: usize,
    endpoint: &(String, u16),
    err: &anyhow::Error,
    interrupted: bool,
    probe: Duration,
) -> Option<LaunchError> {
    let lost = match lost_peer(err) {
        Some((_, peer, host)) => Some((peer, host)),
        // The agent stopped this rank: when its store is gone, the agent
        // noticed first (it asks the store every `--monitor-interval`).
        None if interrupted => None,
        None => return None,
    };
    // A node whose processes are killed one by one may break this rank's
    // connection before its agent's store has closed: the store must still
    // answer a moment later to count as alive.
    let (host, port) = endpoint;
    let alive = || answers(host, *port, probe);
    if alive() && {
        std::thread::sleep(RENDEZVOUS_SETTLE);
        alive()
    } {
        return None;
    }
    Some(LaunchError::RendezvousHostLost {
        rank,
        lost,
        store_at: host_port(host, *port),
        ended_agent: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> (String, u16) {
        ("127.0.0.1".to_string(), port)
    }

    fn lost_rank_0() -> anyhow::Error {
        CollectiveError::PeerLost {
            rank: 1,
            peer: 0,
            host: Some("127.0.0.1".into()),
            op: "all-reduce",
            error: std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        }
        .into()
    }

    #[test]
    fn a_store_that_still_answers_leaves_the_restart_to_torchrun() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let probe = Duration::from_secs(2);
        assert!(rendezvous_host_lost(1, &at(port), &lost_rank_0(), false, probe).is_none());
        drop(listener);
    }

    #[test]
    fn a_store_gone_with_the_peer_is_named_in_one_line() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let probe = Duration::from_secs(2);
        let e = rendezvous_host_lost(1, &at(port), &lost_rank_0(), false, probe)
            .expect("nothing listens there");
        let line = e.to_string();
        assert!(
            line.starts_with(&format!(
                "rank 1 lost rank 0 on 127.0.0.1, and torchrun's rendezvous store at 127.0.0.1:{port} does not answer"
            )),
            "{line}"
        );
        assert!(!line.contains('\n'), "{line}");
        // Another error is none of this module's business.
        let other = anyhow::anyhow!("disk full");
        assert!(rendezvous_host_lost(1, &at(port), &other, false, probe).is_none());
        // Stopped by the agent, whose store is gone.
        let e = rendezvous_host_lost(1, &at(port), &other, true, probe).unwrap();
        assert!(
            e.to_string().starts_with(&format!(
                "rank 1 was stopped by its torchrun agent, and torchrun's rendezvous store at 127.0.0.1:{port} does not answer"
            )),
            "{e}"
        );
    }

    #[test]
    fn the_rendezvous_endpoint_comes_from_torchruns_command_line_or_its_variables() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let none = |_: &str| None;
        let c10d = args(&[
            "torchrun",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "10.0.0.1:29401",
        ]);
        assert_eq!(
            rendezvous_endpoint(&c10d, none),
            Some(("10.0.0.1".into(), 29401))
        );
        let eq = args(&[
            "torchrun",
            "--rdzv_backend=c10d",
            "--rdzv_endpoint=[fe80::1]:7",
        ]);
        assert_eq!(rendezvous_endpoint(&eq, none), Some(("fe80::1".into(), 7)));
        let bare = args(&[
            "torchrun",
            "--rdzv-backend=c10d",
            "--rdzv-endpoint",
            "node-a",
        ]);
        assert_eq!(
            rendezvous_endpoint(&bare, none),
            Some(("node-a".into(), 29400))
        );
        let env = |k: &str| match k {
            "PET_RDZV_BACKEND" => Some("c10d".to_string()),
            "PET_RDZV_ENDPOINT" => Some("h:1234".to_string()),
            _ => None,
        };
        assert_eq!(
            rendezvous_endpoint(&args(&["torchrun"]), env),
            Some(("h".into(), 1234))
        );
        // static (the default) and --standalone keep no store across restarts to ask.
        assert_eq!(
            rendezvous_endpoint(&args(&["torchrun", "--nnodes", "2"]), none),
            None
        );
    }
}
