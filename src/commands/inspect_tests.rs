//! `inspect` against the in-process fake registry of `oci/fake_tests.rs`:
//! what a hostile registry's referrers do to the table, `--json` and `--save`.
use super::*;
use crate::image::oci::fake_tests::{repository, start, subject, Shared, PASSWORD};
use crate::image::oci::manifest::OCI_MANIFEST;

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

#[tokio::test]
async fn save_writes_one_file_per_artifact_and_counts_the_files() {
    // Two SBOMs went to one sbom.cdx.json (the second overwrote the
    // first), and the message said "saved 2 file(s)".
    let state = start(true).await;
    let subject = subject(&state);
    let repo = repository(&state, PASSWORD);
    let mut pushed = Vec::new();
    for (t, bytes, predicate) in [
        (attest::CYCLONEDX_MEDIA_TYPE, &b"{\"sbom\":1}"[..], None),
        (attest::CYCLONEDX_MEDIA_TYPE, b"{\"sbom\":2}", None),
        (
            attest::IN_TOTO_MEDIA_TYPE,
            b"{\"provenance\":1}",
            Some(attest::SLSA_PROVENANCE_V1),
        ),
    ] {
        let mut annotations = std::collections::BTreeMap::new();
        if let Some(p) = predicate {
            annotations.insert(attest::PREDICATE_ANNOTATION.to_string(), p.to_string());
        }
        let d = repo
            .push_artifact(&subject, t, t, bytes, annotations)
            .await
            .unwrap();
        pushed.push((d, bytes.to_vec()));
    }
    // A registry that lists the first SBOM twice.
    state
        .lock()
        .unwrap()
        .referrers
        .get_mut(&subject.digest)
        .unwrap()
        .push(pushed[0].0.clone());
    let dir = tempfile::tempdir().unwrap();
    let reference = reference(&state);
    let inspected = read(&repo, &reference, Some(dir.path())).await.unwrap();
    assert_eq!(inspected.referrers.len(), 4);
    let name = |i: usize| format!("sbom.{}.cdx.json", short_hex(&pushed[i].0.digest));
    assert_eq!(
        inspected.saved,
        vec![name(0), name(1), attest::files::PROVENANCE.to_string()]
    );
    let mut on_disk: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut expected = inspected.saved.clone();
    expected.sort();
    assert_eq!(on_disk, expected);
    for (i, file) in inspected.saved.iter().enumerate() {
        assert_eq!(std::fs::read(dir.path().join(file)).unwrap(), pushed[i].1);
    }
    assert_eq!(
        saved_line(&inspected.saved, Path::new("out")),
        format!(
            "saved 3 files in out: {}, {}, provenance.intoto.json",
            name(0),
            name(1)
        )
    );
    // Alone, an SBOM keeps the name `build --attest` gives it.
    let one = vec![pushed[0].0.clone()];
    assert_eq!(save_names(&one)[0].1, attest::files::SBOM);
    // Digests alike in their first 12 hex digits: all 64 tell them apart.
    let hex = |tail: &str| format!("sha256:{}{tail}", "0".repeat(64 - tail.len()));
    let alike: Vec<Descriptor> = ["1", "2"]
        .iter()
        .map(|t| Descriptor {
            digest: hex(t),
            ..pushed[0].0.clone()
        })
        .collect();
    let names: Vec<String> = save_names(&alike).into_iter().map(|(_, n)| n).collect();
    assert_eq!(
        names,
        vec![
            format!("sbom.{}.cdx.json", attest::hex_of(&hex("1"))),
            format!("sbom.{}.cdx.json", attest::hex_of(&hex("2")))
        ]
    );
}

#[test]
fn registry_timeout_is_one_to_86400_seconds() {
    use clap::Parser as _;
    let parse = |v: &str| {
        crate::cli::Cli::try_parse_from(["imgctl", "inspect", "r/x:1", "--registry-timeout", v])
    };
    for bad in ["0", "86401", "-1", "1.5", "soon"] {
        let e = parse(bad).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{bad}: {e}");
        assert!(e.to_string().contains("--registry-timeout"), "{e}");
    }
    let Ok(crate::cli::Cli {
        command: crate::cli::Command::Inspect(args),
        ..
    }) = parse("7")
    else {
        panic!("--registry-timeout 7 was refused");
    };
    assert_eq!(args.registry_timeout.registry_timeout, 7);
    let Ok(crate::cli::Cli {
        command: crate::cli::Command::Inspect(args),
        ..
    }) = crate::cli::Cli::try_parse_from(["imgctl", "inspect", "r/x:1"])
    else {
        panic!("inspect was refused");
    };
    assert_eq!(args.registry_timeout.registry_timeout, 300);
}

#[tokio::test]
async fn more_referrers_than_the_cap_are_said_and_all_lifts_it() {
    let state = start(true).await;
    let subject = subject(&state);
    let listed: Vec<Descriptor> = (0..1200)
        .map(|i: u32| Descriptor::of(OCI_MANIFEST, &i.to_be_bytes()))
        .collect();
    {
        let mut fake = state.lock().unwrap();
        fake.referrers.insert(subject.digest.clone(), listed);
        fake.per_page = 500;
    }
    let reference = reference(&state);
    let inspected = read(&repository(&state, PASSWORD), &reference, None)
        .await
        .unwrap();
    assert_eq!(inspected.referrers.len(), 1000);
    assert!(inspected.truncated);
    let shown = render(&inspected);
    assert!(
        shown.lines().next().unwrap().ends_with(
            "the first 1000 artifacts attached (the registry lists more; --all lists every one)"
        ),
        "{}",
        shown.lines().next().unwrap()
    );
    let json = serde_json::to_value(&inspected).unwrap();
    assert_eq!(json["truncated"], true);
    let all = repository(&state, PASSWORD).with_all_referrers();
    let inspected = read(&all, &reference, None).await.unwrap();
    assert_eq!(
        (inspected.referrers.len(), inspected.truncated),
        (1200, false)
    );
    assert!(render(&inspected)
        .lines()
        .next()
        .unwrap()
        .ends_with(": 1200 artifacts attached"));
}
