//! `imgctl::image::oci` against a real registry: Debian's docker-registry
//! (distribution 2.8, htpasswd basic auth), which has no referrers API, so
//! the referrers tag schema's fallback is what is exercised. An image pushed
//! with `docker push` is the subject; three artifacts (an SBOM, two in-toto
//! statements) refer to it, are listed, filtered, read back and pushed again
//! without duplicates, and the registry's own API shows the `sha256-<hex>`
//! tag holding an OCI index. A wrong password is a one-line 401 without the
//! password.
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use imgctl::image::oci::manifest::{OCI_INDEX, OCI_MANIFEST};
use imgctl::image::oci::{Descriptor, Repository};
use serde_json::Value;

use crate::build::{docker_ok, ensure_bases, EngineGuard, LocalRegistry, BUSYBOX_BASE};
use crate::common::texts;

pub(crate) const USER: &str = "referrer";
pub(crate) const PASSWORD: &str = "r3f-s3cret-pw";
const CYCLONEDX: &str = "application/vnd.cyclonedx+json";
const IN_TOTO: &str = "application/vnd.in-toto+json";
const PREDICATE: &str = "dev.imgctl.predicate-type";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn credentials(password: &str) -> Option<DockerCredentials> {
    Some(DockerCredentials {
        username: Some(USER.to_string()),
        password: Some(password.to_string()),
        ..Default::default()
    })
}

/// Tags the busybox base as `tag` and `docker push`es it with the
/// credentials in a DOCKER_CONFIG of its own.
pub(crate) fn docker_push(registry: &LocalRegistry, tag: &str) {
    docker_ok(&["tag", BUSYBOX_BASE, tag]);
    let config = tempfile::tempdir().unwrap();
    registry.write_docker_config(config.path(), USER, PASSWORD);
    let out = Command::new("docker")
        .args(["push", tag])
        .env("DOCKER_CONFIG", config.path())
        .env("DOCKER_API_VERSION", "1.41")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "docker push {tag} failed: {stderr}");
}

/// The three artifacts: (artifact type, content, annotations).
fn artifacts() -> Vec<(&'static str, Vec<u8>, BTreeMap<String, String>)> {
    let annotations = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    vec![
        (
            CYCLONEDX,
            br#"{"bomFormat":"CycloneDX","specVersion":"1.5","components":[]}"#.to_vec(),
            annotations(&[("org.opencontainers.image.created", "2023-11-14T22:13:20Z")]),
        ),
        (
            IN_TOTO,
            br#"{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://slsa.dev/provenance/v1"}"#.to_vec(),
            annotations(&[(PREDICATE, "https://slsa.dev/provenance/v1")]),
        ),
        (
            IN_TOTO,
            br#"{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://imgctl.dev/verify/v1"}"#.to_vec(),
            annotations(&[(PREDICATE, "https://imgctl.dev/verify/v1")]),
        ),
    ]
}

fn digests(list: &[Descriptor]) -> Vec<&str> {
    let mut d: Vec<&str> = list.iter().map(|d| d.digest.as_str()).collect();
    d.sort_unstable();
    d
}

#[test]
fn referrers_push_list_filter_and_fetch_through_the_fallback_tag() {
    ensure_bases();
    let registry = LocalRegistry::start(USER, PASSWORD);
    let mut guard = EngineGuard::default();
    let tag = format!(
        "127.0.0.1:{}/imgctl-test/ref:{}",
        registry.port,
        std::process::id()
    );
    guard.image(&tag);
    docker_push(&registry, &tag);

    let repo = Repository::new(&tag, credentials(PASSWORD)).unwrap();
    assert_eq!(repo.registry(), format!("127.0.0.1:{}", registry.port));
    assert_eq!(repo.name(), "imgctl-test/ref");
    let rt = runtime();
    rt.block_on(async {
        let subject = repo.resolve(repo.tag_or_digest().unwrap()).await.unwrap();
        assert_eq!(
            subject.media_type,
            "application/vnd.docker.distribution.manifest.v2+json"
        );
        assert!(subject.size > 0);
        // Resolving by digest gives the same descriptor; nothing refers to it yet.
        assert_eq!(repo.resolve(&subject.digest).await.unwrap(), subject);
        assert!(repo
            .referrers(&subject.digest, None)
            .await
            .unwrap()
            .list
            .is_empty());

        let mut pushed = Vec::new();
        for (artifact_type, content, annotations) in artifacts() {
            let d = repo
                .push_artifact(
                    &subject,
                    artifact_type,
                    artifact_type,
                    &content,
                    annotations.clone(),
                )
                .await
                .unwrap();
            assert_eq!(d.media_type, OCI_MANIFEST);
            assert_eq!(d.artifact_type.as_deref(), Some(artifact_type));
            assert_eq!(d.annotations, annotations);
            pushed.push(d);
        }

        // All three listed, as pushed (artifact type and annotations included).
        let listed = repo.referrers(&subject.digest, None).await.unwrap().list;
        assert_eq!(listed.len(), 3, "{listed:?}");
        for d in &pushed {
            assert!(listed.contains(d), "{d:?} not in {listed:?}");
        }
        // Each artifact's manifest, read through the registry's own API, names the subject.
        for d in &listed {
            let (status, _, body) = registry.get_accepting(
                &format!("/v2/imgctl-test/ref/manifests/{}", d.digest),
                Some(OCI_MANIFEST),
                USER,
                PASSWORD,
            );
            assert_eq!(status, 200, "{body}");
            let manifest: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(
                manifest["subject"]["digest"],
                subject.digest.as_str(),
                "{body}"
            );
            assert_eq!(
                manifest["artifactType"],
                d.artifact_type.as_deref().unwrap()
            );
        }

        // Filtered by artifact type.
        let in_toto = repo
            .referrers(&subject.digest, Some(IN_TOTO))
            .await
            .unwrap()
            .list;
        assert_eq!(digests(&in_toto), digests(&pushed[1..]));
        let sboms = repo
            .referrers(&subject.digest, Some(CYCLONEDX))
            .await
            .unwrap()
            .list;
        assert_eq!(digests(&sboms), digests(&pushed[..1]));
        assert!(repo
            .referrers(&subject.digest, Some("application/x-none"))
            .await
            .unwrap()
            .list
            .is_empty());

        // Read back byte for byte.
        let (sbom_type, sbom, _) = &artifacts()[0];
        let (layer, bytes) = repo.fetch_artifact(&pushed[0].digest).await.unwrap();
        assert_eq!(&bytes, sbom);
        assert_eq!(layer.media_type, *sbom_type);
        assert_eq!(layer.size, sbom.len() as u64);

        // The same artifact again: the same digest, still three referrers.
        let (artifact_type, content, annotations) = &artifacts()[1];
        let again = repo
            .push_artifact(
                &subject,
                artifact_type,
                artifact_type,
                content,
                annotations.clone(),
            )
            .await
            .unwrap();
        assert_eq!(again, pushed[1]);
        let listed = repo.referrers(&subject.digest, None).await.unwrap().list;
        assert_eq!(digests(&listed), digests(&pushed));
        subject
    });
    let subject = rt
        .block_on(repo.resolve(repo.tag_or_digest().unwrap()))
        .unwrap();

    // The registry's own view: the referrers tag holds an OCI index of the three.
    let hex = subject.digest.strip_prefix("sha256:").unwrap();
    let (status, head, body) = registry.get_accepting(
        &format!("/v2/imgctl-test/ref/manifests/sha256-{hex}"),
        Some(OCI_INDEX),
        USER,
        PASSWORD,
    );
    assert_eq!(status, 200, "{head}\n{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("content-type: {OCI_INDEX}")),
        "{head}"
    );
    let index: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(index["schemaVersion"], 2);
    assert_eq!(index["mediaType"], OCI_INDEX);
    assert_eq!(index["manifests"].as_array().unwrap().len(), 3, "{body}");
    let (status, body) = registry.get("/v2/imgctl-test/ref/tags/list", USER, PASSWORD);
    assert_eq!(status, 200);
    assert!(body.contains(&format!("\"sha256-{hex}\"")), "{body}");
}

#[test]
fn referrers_with_a_wrong_password_is_a_one_line_401() {
    let registry = LocalRegistry::start(USER, PASSWORD);
    let reference = format!("127.0.0.1:{}/imgctl-test/ref:x", registry.port);
    let wrong = "wr0ng-pa55word";
    let repo = Repository::new(&reference, credentials(wrong)).unwrap();
    let rt = runtime();
    let subject = Descriptor {
        media_type: OCI_MANIFEST.to_string(),
        digest: format!("sha256:{}", "0".repeat(64)),
        size: 2,
        artifact_type: None,
        annotations: BTreeMap::new(),
    };
    let errors = [
        rt.block_on(repo.resolve("x")).unwrap_err(),
        rt.block_on(repo.referrers(&subject.digest, None))
            .unwrap_err(),
        rt.block_on(repo.push_artifact(&subject, IN_TOTO, IN_TOTO, b"{}", BTreeMap::new()))
            .unwrap_err(),
    ];
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{wrong}"));
    for e in errors {
        let text = format!("{e:#}");
        assert!(!text.contains('\n'), "{text}");
        assert!(
            text.starts_with(&format!("registry 127.0.0.1:{} refused ", registry.port)),
            "{text}"
        );
        assert!(
            text.contains("of imgctl-test/ref: 401 UNAUTHORIZED"),
            "{text}"
        );
        assert!(text.contains("(the credentials were refused)"), "{text}");
        let debug = format!("{e:?}");
        for shown in [&text, &debug] {
            assert!(
                !shown.contains(wrong) && !shown.contains(&b64),
                "a secret leaked: {shown}"
            );
        }
    }
}
