//! `inspect` against the in-process fake registry of `oci/fake_tests.rs`:
//! what a hostile registry's referrers do to the table, `--json` and `--save`.
use super::*;
use crate::oci::fake_tests::{repository, start, subject, Shared, PASSWORD};
use crate::oci::manifest::OCI_MANIFEST;

/// `inspect 127.0.0.1:PORT/me/x:v1`'s reference.
fn reference(state: &Shared) -> String {
    format!("127.0.0.1:{}/me/x:v1", state.lock().unwrap().port)
}

#[tokio::test]
async fn a_multibyte_referrer_digest_is_an_error_not_a_panic() {
    // The table sliced the digest's first 12 bytes: `a€€€€€` panicked
    // (exit 101), and `--json` passed it through with exit 0.
    let state = start(true).await;
    let subject = subject(&state);
    let bad = Descriptor {
        digest: "sha256:a€€€€€".into(),
        artifact_type: Some(attest::CYCLONEDX_MEDIA_TYPE.into()),
        ..Descriptor::of(OCI_MANIFEST, b"r")
    };
    state
        .lock()
        .unwrap()
        .referrers
        .insert(subject.digest.clone(), vec![bad]);
    let repo = repository(&state, PASSWORD);
    let reference = reference(&state);
    match read(&repo, &reference, None).await {
        Ok(inspected) => {
            let shown = render(&inspected);
            panic!("a bad digest was listed: {shown}");
        }
        Err(e) => {
            let e = format!("{e:#}");
            assert!(
                e.ends_with("its manifests[0]: the digest 'sha256:a€€€€€' is not a sha256:<64 hex digits> digest"),
                "{e}"
            );
        }
    }
    // Short digests of good ones still render.
    assert_eq!(short_hex("sha256:a€€€€€"), "a€€€€€");
    assert_eq!(short_hex(&subject.digest).len(), 12);
}

/// A client of `reference` on the fake with its credentials.
fn client(reference: &str) -> Repository {
    let credentials = bollard::auth::DockerCredentials {
        username: Some("me".into()),
        password: Some(PASSWORD.into()),
        ..Default::default()
    };
    Repository::new(reference, Some(credentials)).unwrap()
}

#[tokio::test]
async fn inspect_name_at_digest_lists_that_digests_referrers_or_fails() {
    // The HEAD answered `Docker-Content-Digest: Y` for `me/x@X`, and
    // inspect listed Y's referrers under X's name.
    let state = start(true).await;
    let subject = subject(&state);
    let other = Descriptor::of(OCI_MANIFEST, b"{\"another\":1}");
    let theirs = Descriptor {
        artifact_type: Some(attest::CYCLONEDX_MEDIA_TYPE.into()),
        ..Descriptor::of(OCI_MANIFEST, b"sbom of another")
    };
    {
        let mut fake = state.lock().unwrap();
        fake.head_digest = Some(other.digest.clone());
        fake.referrers.insert(other.digest.clone(), vec![theirs]);
    }
    let port = state.lock().unwrap().port;
    let reference = format!("127.0.0.1:{port}/me/x@{}", subject.digest);
    let e = match read(&client(&reference), &reference, None).await {
        Ok(i) => panic!("listed another digest's referrers: {}", render(&i)),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("a pinned digest is the digest used"), "{e}");
    state.lock().unwrap().head_digest = None;
    let inspected = read(&client(&reference), &reference, None).await.unwrap();
    assert_eq!(inspected.subject, subject);
    assert!(inspected.referrers.is_empty());
}

#[tokio::test]
async fn a_registrys_escapes_are_shown_escaped_in_the_table() {
    // An OSC title, a screen clear, colours and a `\r\n` that forges a row
    // reached the terminal raw from the artifact type and annotations.
    let state = start(true).await;
    let subject = subject(&state);
    let evil = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\r\n│ SBOM (CycloneDX) │ forged │";
    let mut annotations = std::collections::BTreeMap::new();
    annotations.insert("org.opencontainers.image.created".to_string(), evil.into());
    annotations.insert(attest::PREDICATE_ANNOTATION.to_string(), evil.into());
    let listed = vec![
        Descriptor {
            artifact_type: Some(evil.into()),
            annotations: annotations.clone(),
            ..Descriptor::of(OCI_MANIFEST, b"one")
        },
        Descriptor {
            artifact_type: Some(attest::IN_TOTO_MEDIA_TYPE.into()),
            annotations,
            ..Descriptor::of(OCI_MANIFEST, b"two")
        },
    ];
    state
        .lock()
        .unwrap()
        .referrers
        .insert(subject.digest.clone(), listed);
    let reference = reference(&state);
    let inspected = read(&repository(&state, PASSWORD), &reference, None)
        .await
        .unwrap();
    let shown = render(&inspected);
    assert!(
        !shown.chars().any(|c| c.is_control() && c != '\n'),
        "{shown:?}"
    );
    assert!(shown.contains("\\u{1b}]0;pwned\\u{7}"), "{shown}");
    // The header, two lines, the table's 3 border lines, its header and
    // two rows: no third row.
    assert_eq!(shown.lines().count(), 2 + 3 + 1 + 2, "{shown}");
    // --json keeps the registry's text as it is, JSON-escaped.
    let json = serde_json::to_string(&inspected).unwrap();
    assert!(json.contains(r"\u001b]0;pwned\u0007"), "{json}");
}
