use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Instant;

use super::*;
use crate::world::auth::Token;
use crate::world::launch::LaunchInfo;
use crate::world::rendezvous::{free_port, rendezvous};

/// Fast beats for tests: 50 ms, lost after 600 ms.
const FAST: Settings = Settings {
    interval: Duration::from_millis(50),
    timeout: Duration::from_millis(600),
};

/// A rank of a loopback world with its heartbeat, the progress its beats
/// carry, and what its fire action got.
struct Rank {
    hb: Option<Heartbeat>,
    progress: Arc<Progress>,
    fired: mpsc::Receiver<String>,
    _session: Session,
}

fn world(n: usize, token: Option<&str>) -> Vec<Rank> {
    world_with(n, token, true, None)
}

/// A world whose rank `mute` starts no heartbeat at all.
fn world_with(n: usize, token: Option<&str>, strict: bool, mute: Option<usize>) -> Vec<Rank> {
    let port = free_port().unwrap();
    let token = token.map(Token::new);
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let token = token.clone();
            std::thread::spawn(move || {
                let mut info = LaunchInfo::loopback(rank, n, port);
                info.token = token;
                let mut s = rendezvous(&info, || Ok(vec![]), Duration::from_secs(20)).unwrap();
                let progress = Arc::new(Progress::default());
                let (tx, fired) = mpsc::channel();
                let tx = Mutex::new(tx);
                let fire: FireAction = Box::new(move |e: anyhow::Error| {
                    let _ = tx.lock().unwrap().send(e.to_string());
                });
                let hb = if mute == Some(rank) {
                    None
                } else {
                    Heartbeat::start(&mut s, FAST, progress.clone(), fire, strict).unwrap()
                };
                Rank {
                    hb,
                    progress,
                    fired,
                    _session: s,
                }
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn quiet(r: &Rank, within: Duration) {
    if let Ok(line) = r.fired.recv_timeout(within) {
        panic!("fired: {line}");
    }
}

#[test]
fn lines_name_the_peer_its_host_and_what_was_seen() {
    assert_eq!(thousands(1204), "1,204");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1_000_000), "1,000,000");
    let e = HeartbeatError::Lost {
        rank: 0,
        peer: 3,
        host: Some("10.0.0.7".into()),
        silent: Duration::from_millis(5030),
        last: Some((1204, Phase::Training)),
        seen_by: None,
    };
    assert_eq!(
        e.to_string(),
        "rank 0: no heartbeat from rank 3 on 10.0.0.7 for 5.0 s; its last step was 1,204 (training)"
    );
    let e = HeartbeatError::Lost {
        rank: 2,
        peer: 1,
        host: None,
        silent: Duration::from_secs(6),
        last: None,
        seen_by: Some(0),
    };
    assert_eq!(
        e.to_string(),
        "rank 2: rank 0 saw no heartbeat from rank 1 for 6.0 s; it sent no heartbeat since the rendezvous"
    );
}

#[test]
fn healthy_ranks_beat_and_end_without_a_verdict() {
    for token in [None, Some("s3cret")] {
        let mut ranks = world(3, token);
        quiet(&ranks[0], Duration::from_millis(1500));
        for r in &ranks {
            quiet(r, Duration::ZERO);
        }
        // The others end first (their byes), then rank 0 outlives them by
        // more than the timeout, as it does while writing its last outputs.
        for r in ranks.iter_mut().skip(1) {
            r.hb = None;
        }
        quiet(&ranks[0], Duration::from_millis(1200));
    }
}

#[test]
fn a_frozen_rank_is_named_by_rank_0_and_by_the_others_with_its_last_step() {
    for token in [None, Some("s3cret")] {
        let ranks = world(3, token);
        ranks[2].progress.note(1204, Phase::Checkpoint);
        std::thread::sleep(Duration::from_millis(300));
        ranks[2].hb.as_ref().unwrap().freeze();
        let frozen = Instant::now();
        let line = ranks[0].fired.recv_timeout(Duration::from_secs(5)).unwrap();
        let took = frozen.elapsed();
        assert!(
            line.starts_with("rank 0: no heartbeat from rank 2 on 127.0.0.1 for 0.")
                && line.ends_with("; its last step was 1,204 (writing a checkpoint)"),
            "{line}"
        );
        assert!(
            took >= Duration::from_millis(500) && took < Duration::from_millis(1500),
            "{took:?}"
        );
        let told = ranks[1].fired.recv_timeout(Duration::from_secs(2)).unwrap();
        assert!(
            told.starts_with("rank 1: rank 0 saw no heartbeat from rank 2 on 127.0.0.1 for 0."),
            "{told}"
        );
    }
}

#[test]
fn a_frozen_rank_0_is_named_by_every_other_rank() {
    let ranks = world(3, None);
    std::thread::sleep(Duration::from_millis(200));
    ranks[0].hb.as_ref().unwrap().freeze();
    for (r, rank) in ranks.iter().enumerate().skip(1) {
        let line = rank.fired.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(
            line.starts_with(&format!(
                "rank {r}: no heartbeat from rank 0 on 127.0.0.1 for "
            )) && line.ends_with("(starting)"),
            "{line}"
        );
    }
}

#[test]
fn a_stranger_on_rank_0s_port_neither_joins_nor_keeps_a_rank_alive() {
    use std::io::{Read, Write};
    let ranks = world(2, Some("s3cret"));
    let Links::Root(_) = &ranks[0]._session.links else {
        panic!("rank 0 has the root links")
    };
    let at = match &ranks[1]._session.links {
        Links::Leaf(s) => s.peer_addr().unwrap(),
        _ => panic!("rank 1 is a leaf"),
    };
    // A stranger claims rank 1 with a MAC under another token; the real
    // rank 1 then freezes: rank 0 must still name it.
    let mut s = std::net::TcpStream::connect(at).unwrap();
    let mut challenge = [0u8; wire::CHALLENGE_BYTES];
    s.read_exact(&mut challenge).unwrap();
    let keys = wire::Keys {
        token: Some(Token::new("guess")),
        nonce: vec![0; 16],
        challenge,
    };
    let hello = wire::Frame::Hello { rank: 1, world: 2 };
    s.write_all(&wire::encode(&hello, wire::Dir::ToRoot, &keys))
        .unwrap();
    ranks[1].hb.as_ref().unwrap().freeze();
    let line = ranks[0].fired.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        line.starts_with("rank 0: no heartbeat from rank 1"),
        "{line}"
    );
}

#[test]
fn a_rank_whose_heartbeat_never_came_is_lost_in_training_only() {
    // Training (strict): rank 1 never beat, and is named so.
    let ranks = world_with(2, None, true, Some(1));
    let line = ranks[0].fired.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(
        line.ends_with("it sent no heartbeat since the rendezvous"),
        "{line}"
    );
    // Fleet verify: no imgctl of this version; its report's wait names it.
    let ranks = world_with(2, None, false, Some(1));
    quiet(&ranks[0], Duration::from_millis(1500));
}
