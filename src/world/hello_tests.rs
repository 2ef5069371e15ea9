//! Tests of the rendezvous's wire format and its token (`hello.rs`), through
//! real rendezvous on loopback.
use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use super::*;
use crate::world::auth::Token;
use crate::world::error::RendezvousError;
use crate::world::launch::LaunchInfo;
use crate::world::rendezvous::{free_port, rendezvous};

/// `LaunchInfo::loopback` with a rendezvous token.
fn with_token(mut info: LaunchInfo, token: Option<&str>) -> LaunchInfo {
    info.token = token.map(Token::new);
    info
}

#[test]
fn ranks_with_the_same_token_meet_and_prove_it() {
    let port = free_port().unwrap();
    let t = Duration::from_secs(20);
    let leaf = std::thread::spawn(move || {
        rendezvous(
            &with_token(LaunchInfo::loopback(1, 2, port), Some("s3")),
            || Ok(vec![]),
            t,
        )
    });
    let root = rendezvous(
        &with_token(LaunchInfo::loopback(0, 2, port), Some("s3")),
        || Ok(b"nccl-id".to_vec()),
        t,
    )
    .unwrap();
    let leaf = leaf.join().unwrap().unwrap();
    // The MAC is not part of the payload.
    assert_eq!(leaf.payload, b"nccl-id");
    let (root_auth, leaf_auth) = (root.auth.unwrap(), leaf.auth.unwrap());
    assert_eq!(root_auth.nonces, leaf_auth.nonces);
}

#[test]
fn a_token_on_one_side_only_or_another_token_is_refused_on_both_sides() {
    for (root_token, leaf_token, words) in [
        (
            Some("s3"),
            None,
            "has no rendezvous token, but rank 0 has one",
        ),
        (
            None,
            Some("s3"),
            "has a rendezvous token, but rank 0 has none",
        ),
        (
            Some("s3"),
            Some("other"),
            "holds another rendezvous token than rank 0",
        ),
    ] {
        let port = free_port().unwrap();
        let t = Duration::from_secs(3);
        let leaf = std::thread::spawn(move || {
            rendezvous(
                &with_token(LaunchInfo::loopback(1, 2, port), leaf_token),
                || Ok(vec![]),
                t,
            )
        });
        let e = rendezvous(
            &with_token(LaunchInfo::loopback(0, 2, port), root_token),
            || Ok(vec![]),
            t,
        )
        .unwrap_err();
        assert!(e.to_string().contains(words), "rank 0: {e}");
        let e = leaf.join().unwrap().unwrap_err();
        assert!(
            matches!(
                e.downcast_ref::<RendezvousError>(),
                Some(RendezvousError::Token { .. })
            ),
            "{e}"
        );
        assert!(e.to_string().contains(words), "rank 1: {e}");
        assert!(!e.to_string().contains("s3"), "the token was shown: {e}");
    }
}

/// A fake rank 0 that does not hold the token answers a real rank's hello
/// with a session: the rank refuses it instead of going on.
#[test]
fn a_rank_0_that_cannot_prove_the_token_is_refused() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut hello = [0u8; HELLO_BYTES + NONCE_BYTES + MAC_BYTES];
        s.read_exact(&mut hello).unwrap();
        // A session with a made-up "proof".
        send_reply(&mut s, Reply::Session(&[7u8; 40])).unwrap();
        s
    });
    let e = rendezvous(
        &with_token(LaunchInfo::loopback(1, 2, port), Some("s3")),
        || Ok(vec![]),
        Duration::from_secs(5),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("could not prove the rendezvous token"),
        "{e}"
    );
    drop(fake.join().unwrap());
}
