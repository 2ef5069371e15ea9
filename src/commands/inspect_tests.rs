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
