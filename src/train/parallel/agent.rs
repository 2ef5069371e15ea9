//! torchrun's elastic agent after this rank lost a peer: whether the
//! rendezvous host went with it ([`rendezvous_host_lost`]).
//!
//! With torchrun's c10d rendezvous the store lives inside the agent of one
//! node (the `--rdzv-endpoint` host, rank 0's node). When that node dies,
//! the survivors' agents cannot restart anything: measured with torch 2.7
//! on the network-namespace nodes of the tests, an agent whose store host
//! was killed ends at once with a RendezvousConnectionError traceback, and
//! one whose store host went silent (a cut link) stays blocked in a TCPStore
//! `recv` for as long as TCP retransmits (over 7 minutes, still waiting),
//! whatever `--rdzv-conf read_timeout/join_timeout/close_timeout` say. So a
//! rank that lost a peer asks the store whether it is still there, with one
//! TCP connection bounded by [`RENDEZVOUS_PROBE`]; a store that does not
//! answer means the job cannot go on. What to do about the agent is
//! `commands/`'s choice: this module only probes, it must not signal
//! processes.
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::error::{CollectiveError, LaunchError};
use super::launch::LaunchInfo;
use super::tcpstore::host_port;

/// How long a rank that lost a peer tries to connect to torchrun's
/// rendezvous store before it takes the store's host for gone: 5 s, far
/// above a connection's round trip on any network a job spans, and short
/// next to the collective timeout that came before it.
pub const RENDEZVOUS_PROBE: Duration = Duration::from_secs(5);

/// The peer `err` says this rank lost (a broken connection or a timeout of
/// the CPU backend): `(rank, peer, peer's host)`.
pub fn lost_peer(err: &anyhow::Error) -> Option<(usize, usize, Option<String>)> {
    err.chain().find_map(|e| match e.downcast_ref::<CollectiveError>()? {
        CollectiveError::PeerLost {
            rank, peer, host, ..
        }
        | CollectiveError::PeerTimeout {
            rank, peer, host, ..
        } => Some((*rank, *peer, host.clone())),
        _ => None,
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

/// When `err` is a lost peer of a rank launched by torchrun (its agent
/// store at `MASTER_ADDR:MASTER_PORT`) and that store does not answer
/// within `probe` either: the [`LaunchError::RendezvousHostLost`] that
/// names both (`ended_agent` left for the caller). `None` otherwise: the
/// agent is alive and restarts the workers itself.
pub fn rendezvous_host_lost(
    launch: &LaunchInfo,
    err: &anyhow::Error,
    probe: Duration,
) -> Option<LaunchError> {
    launch.agent_store.as_ref()?;
    let (rank, peer, host) = lost_peer(err)?;
    if answers(&launch.master_addr, launch.master_port, probe) {
        return None;
    }
    Some(LaunchError::RendezvousHostLost {
        rank,
        peer,
        host,
        store_at: host_port(&launch.master_addr, launch.master_port),
        ended_agent: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::parallel::launch::AgentStore;

    fn torchrun_rank(port: u16) -> LaunchInfo {
        let mut l = LaunchInfo::loopback(1, 2, port);
        l.agent_store = Some(AgentStore {
            run_id: "t".into(),
            restart_count: 0,
        });
        l
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
        assert!(rendezvous_host_lost(&torchrun_rank(port), &lost_rank_0(), probe).is_none());
        // Not under torchrun's agent store: nothing to say either.
        drop(listener);
        let mut plain = torchrun_rank(port);
        plain.agent_store = None;
        assert!(rendezvous_host_lost(&plain, &lost_rank_0(), probe).is_none());
    }

    #[test]
    fn a_store_gone_with_the_peer_is_named_in_one_line() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = rendezvous_host_lost(&torchrun_rank(port), &lost_rank_0(), Duration::from_secs(2))
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
        assert!(rendezvous_host_lost(&torchrun_rank(port), &other, Duration::from_secs(1)).is_none());
    }
}
