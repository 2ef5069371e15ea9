//! [`super::Repository`] against the fake registry of `fake_tests.rs` in its
//! hostile modes (issue #40): descriptors whose digest is not `sha256:<hex>`,
//! a HEAD that names another digest than the one pinned, slow replies
//! against the command's deadline, and more referrers than imgctl lists.
use super::fake_tests::{repository, start, subject, Shared, PASSWORD};
use super::manifest::{self, Descriptor, OCI_INDEX, OCI_MANIFEST};

/// Lists a referrer whose digest is `digest` (from the API, or with
/// `api: false` from the referrers tag).
fn list_bad_referrer(state: &Shared, subject: &Descriptor, digest: &str, api: bool) {
    let bad = Descriptor {
        digest: digest.to_string(),
        artifact_type: Some("application/vnd.cyclonedx+json".into()),
        ..Descriptor::of(OCI_MANIFEST, b"r")
    };
    let mut fake = state.lock().unwrap();
    if api {
        fake.referrers.insert(subject.digest.clone(), vec![bad]);
    } else {
        let mut index = manifest::empty_index();
        manifest::merge_into_index(&mut index, &bad);
        let tag = manifest::fallback_tag(&subject.digest).unwrap();
        let bytes = serde_json::to_vec(&index).unwrap();
        fake.manifests.insert(tag, (OCI_INDEX.into(), bytes.into()));
    }
}

#[tokio::test]
async fn a_referrer_whose_digest_is_not_sha256_hex_is_refused() {
    for api in [true, false] {
        for bad in [
            "sha256:a€€€€€",
            "sha256:../../../../tmp/x",
            &format!("sha256:{}", "AB".repeat(32)),
            "md5:0123",
        ] {
            let state = start(api).await;
            let subject = subject(&state);
            let repo = repository(&state, PASSWORD);
            list_bad_referrer(&state, &subject, bad, api);
            let port = state.lock().unwrap().port;
            let e = format!(
                "{:#}",
                repo.referrers(&subject.digest, None).await.unwrap_err()
            );
            let whose = if api {
                format!("the referrers list of {} in me/x", subject.digest)
            } else {
                format!(
                    "the referrers tag {} of me/x",
                    manifest::fallback_tag(&subject.digest).unwrap()
                )
            };
            assert_eq!(
                e,
                format!(
                    "{whose} {}registry 127.0.0.1:{port}: its manifests[0]: the digest '{bad}' is not a sha256:<64 hex digits> digest",
                    if api { "from " } else { "in " }
                )
            );
        }
    }
}

#[tokio::test]
async fn an_artifact_manifest_with_a_bad_descriptor_is_refused() {
    let state = start(true).await;
    let subject = subject(&state);
    let repo = repository(&state, PASSWORD);
    let good = Descriptor::of("text/plain", b"x");
    for (field, what) in [
        ("config", "its config"),
        ("subject", "its subject"),
        ("layers", "its layers[0]"),
    ] {
        let mut m = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": good,
            "layers": [good],
            "subject": subject,
        });
        let bad =
            serde_json::json!({"mediaType": "text/plain", "digest": "sha256:a€€€€€", "size": 1});
        m[field] = if field == "layers" {
            serde_json::json!([bad])
        } else {
            bad
        };
        let bytes = serde_json::to_vec(&m).unwrap();
        let digest = manifest::sha256_digest(&bytes);
        state
            .lock()
            .unwrap()
            .manifests
            .insert(digest.clone(), (OCI_MANIFEST.into(), bytes.into()));
        let e = format!("{:#}", repo.fetch_artifact(&digest).await.unwrap_err());
        let port = state.lock().unwrap().port;
        assert_eq!(
            e,
            format!("the artifact manifest {digest} from registry 127.0.0.1:{port}: {what}: the digest 'sha256:a€€€€€' is not a sha256:<64 hex digits> digest")
        );
    }
}

#[tokio::test]
async fn a_pinned_digest_is_the_digest_used() {
    // The HEAD answers another manifest's digest: the GET path checked the
    // hash, the HEAD path took the header's word (and `inspect NAME@X`
    // listed the referrers of Y).
    let state = start(true).await;
    let subject = subject(&state);
    let other = Descriptor::of(OCI_MANIFEST, b"{\"another\":1}");
    let port = state.lock().unwrap().port;
    state.lock().unwrap().head_digest = Some(other.digest.clone());
    let repo = repository(&state, PASSWORD);
    let e = format!("{:#}", repo.resolve(&subject.digest).await.unwrap_err());
    assert_eq!(
        e,
        format!(
            "registry 127.0.0.1:{port} answered for the manifest {} of me/x with another digest, {} (its HEAD's Docker-Content-Digest); refused: a pinned digest is the digest used",
            subject.digest, other.digest
        )
    );
    // A tag pins nothing: the HEAD's word is taken.
    assert_eq!(repo.resolve("v1").await.unwrap().digest, other.digest);
    // Without the lie, the pinned digest resolves (by HEAD alone).
    state.lock().unwrap().head_digest = None;
    let before = super::fake_tests::count(&state, "GET /v2/me/x/manifests/");
    assert_eq!(repo.resolve(&subject.digest).await.unwrap(), subject);
    assert_eq!(
        super::fake_tests::count(&state, "GET /v2/me/x/manifests/"),
        before
    );
    // A digest that is not sha256:<hex> is refused before any request.
    let e = repo.resolve("sha256:a€€").await.unwrap_err().to_string();
    assert_eq!(e, "'sha256:a€€' is not a sha256:<64 hex digits> digest");
}

#[tokio::test]
async fn a_slow_registry_meets_one_deadline_for_the_whole_command() {
    // Each reply in 0.3 s, well within the 120 s a request may take: ten
    // pages, a token and the retries took as long as the registry liked.
    use std::time::{Duration, Instant};
    let state = start(true).await;
    let subject = subject(&state);
    let listed: Vec<Descriptor> = (0..10u8)
        .map(|i| Descriptor::of(OCI_MANIFEST, &[i]))
        .collect();
    {
        let mut fake = state.lock().unwrap();
        fake.referrers
            .insert(subject.digest.clone(), listed.clone());
        fake.delay = Duration::from_millis(300);
    }
    let port = state.lock().unwrap().port;
    let repo = repository(&state, PASSWORD)
        .with_deadline(Duration::from_millis(1500), Some("--registry-timeout"));
    let started = Instant::now();
    let e = format!(
        "{:#}",
        repo.referrers(&subject.digest, None).await.unwrap_err()
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_millis(2500),
        "{took:?}"
    );
    assert!(
        e.starts_with(&format!(
            "registry 127.0.0.1:{port} did not finish within the command's deadline of 1.5 s (GET http://127.0.0.1:{port}/v2/me/x/referrers/{} was under way); --registry-timeout SECS gives it longer",
            subject.digest
        )),
        "{e}"
    );
    // One reply that never comes: the deadline, not the request's 120 s.
    state.lock().unwrap().delay = Duration::from_secs(30);
    let repo = repository(&state, PASSWORD).with_deadline(Duration::from_secs(1), None);
    let started = Instant::now();
    let e = repo.resolve("v1").await.unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(
        e.contains("did not finish within the command's deadline of 1 s (HEAD http://127.0.0.1:"),
        "{e}"
    );
    // Time enough: the same registry lists all ten.
    state.lock().unwrap().delay = Duration::from_millis(10);
    let repo = repository(&state, PASSWORD).with_deadline(Duration::from_secs(30), None);
    assert_eq!(
        repo.referrers(&subject.digest, None).await.unwrap().list,
        listed
    );
}

/// `n` distinct referrer descriptors.
fn many(n: usize) -> Vec<Descriptor> {
    (0..n)
        .map(|i| Descriptor::of(OCI_MANIFEST, i.to_string().as_bytes()))
        .collect()
}

#[tokio::test]
async fn referrers_stop_at_the_cap_and_say_so() {
    // 2,500 referrers, 400 a page: every page was read (99 pages of 10,000
    // took 2.7 GB) and every row printed.
    use super::{fake_tests::count, MAX_REFERRERS};
    let state = start(true).await;
    let subject = subject(&state);
    let listed = many(2500);
    {
        let mut fake = state.lock().unwrap();
        fake.referrers
            .insert(subject.digest.clone(), listed.clone());
        fake.per_page = 400;
    }
    let pages = |state: &Shared| count(state, "GET /v2/me/x/referrers/");
    let repo = repository(&state, PASSWORD);
    let capped = repo.referrers(&subject.digest, None).await.unwrap();
    assert_eq!(capped.list, listed[..MAX_REFERRERS]);
    assert!(capped.more);
    // Three pages (1,200) read, the next one never asked for; one more
    // request was the 401 before the token.
    let read = pages(&state);
    assert!(read <= 4, "{read} requests");
    // Exactly the cap, a next page linked: more, unread.
    state.lock().unwrap().per_page = 500;
    let at_cap = repo.referrers(&subject.digest, None).await.unwrap();
    assert_eq!((at_cap.list.len(), at_cap.more), (MAX_REFERRERS, true));
    // All of them with --all.
    let all = repository(&state, PASSWORD).with_all_referrers();
    let every = all.referrers(&subject.digest, None).await.unwrap();
    assert_eq!((every.list, every.more), (listed.clone(), false));
    // Under the cap nothing is said.
    state
        .lock()
        .unwrap()
        .referrers
        .insert(subject.digest.clone(), many(3));
    let few = repo.referrers(&subject.digest, None).await.unwrap();
    assert_eq!((few.list.len(), few.more), (3, false));
}

#[tokio::test]
async fn the_referrers_tag_is_capped_too() {
    use super::MAX_REFERRERS;
    let state = start(false).await;
    let subject = subject(&state);
    let mut index = manifest::empty_index();
    for d in many(MAX_REFERRERS + 1) {
        manifest::merge_into_index(&mut index, &d);
    }
    let tag = manifest::fallback_tag(&subject.digest).unwrap();
    let bytes = serde_json::to_vec(&index).unwrap();
    state
        .lock()
        .unwrap()
        .manifests
        .insert(tag, (OCI_INDEX.into(), bytes.into()));
    let repo = repository(&state, PASSWORD);
    let capped = repo.referrers(&subject.digest, None).await.unwrap();
    assert_eq!((capped.list.len(), capped.more), (MAX_REFERRERS, true));
    let all = repository(&state, PASSWORD).with_all_referrers();
    let every = all.referrers(&subject.digest, None).await.unwrap();
    assert_eq!((every.list.len(), every.more), (MAX_REFERRERS + 1, false));
}

#[tokio::test]
async fn a_verdict_behind_a_thousand_other_artifacts_is_read() {
    // #50 M9: the gate read the first 1,000 referrers of every kind and then
    // called a valid verdict behind them missing. Asked for one kind, only
    // that kind counts toward the cap: on the API of a registry that ignores
    // the filter (this fake), and on the referrers tag, which lists all.
    const SBOM: &str = "application/vnd.cyclonedx+json";
    const VERDICT: &str = "application/vnd.in-toto+json";
    let typed = |i: usize, t: &str| Descriptor {
        artifact_type: Some(t.to_string()),
        ..Descriptor::of(OCI_MANIFEST, format!("{t} {i}").as_bytes())
    };
    let mut listed: Vec<Descriptor> = (0..1200).map(|i| typed(i, SBOM)).collect();
    let verdict = typed(0, VERDICT);
    listed.push(verdict.clone());

    let api = start(true).await;
    let subject = subject(&api);
    {
        let mut fake = api.lock().unwrap();
        fake.referrers
            .insert(subject.digest.clone(), listed.clone());
        fake.per_page = 400;
    }
    let read = repository(&api, PASSWORD)
        .referrers(&subject.digest, Some(VERDICT))
        .await
        .unwrap();
    assert_eq!((read.list, read.more), (vec![verdict.clone()], false));

    let tagged = start(false).await;
    let subject = super::fake_tests::subject(&tagged);
    let mut index = manifest::empty_index();
    for d in &listed {
        manifest::merge_into_index(&mut index, d);
    }
    let tag = manifest::fallback_tag(&subject.digest).unwrap();
    tagged.lock().unwrap().manifests.insert(
        tag,
        (OCI_INDEX.into(), serde_json::to_vec(&index).unwrap().into()),
    );
    let repo = repository(&tagged, PASSWORD);
    let read = repo
        .referrers(&subject.digest, Some(VERDICT))
        .await
        .unwrap();
    assert_eq!((read.list, read.more), (vec![verdict], false));
    // Unfiltered, the same list is cut at the cap, and says so.
    let all_kinds = repo.referrers(&subject.digest, None).await.unwrap();
    assert_eq!(
        (all_kinds.list.len(), all_kinds.more),
        (super::MAX_REFERRERS, true)
    );
}
