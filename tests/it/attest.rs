//! Attested builds (issue 27) on the busybox test image, against the real
//! engine and a real local registry: `build --attest DIR --push` writes the
//! CycloneDX SBOM and the SLSA provenance, the same inputs give the same
//! bytes, the provenance names every input with its digest and no secret
//! (neither the build-secret CA nor the registry's password), and the push
//! attaches both to the pushed manifest as OCI referrers that `imgctl
//! inspect` reads back. `--verify` and the SBOM of a real image run on the
//! end-to-end image (`image_e2e.rs`).
use std::path::Path;

use serde_json::Value;

use crate::build::{busybox_spec, docker_ok, ensure_bases, EngineGuard, LocalRegistry};
use crate::buildkit::imgctl;
use crate::common::texts;

/// The host's CA bundle, passed as a build secret: its bytes must not leak.
const HOST_CA: &str = "/etc/ssl/certs/ca-certificates.crt";

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn attested_build_records_every_input_no_secret_and_pushes_its_referrers() {
    ensure_bases();
    let registry = LocalRegistry::start("attester", "att3st-pw");
    let mut guard = EngineGuard::default();
    let repo = format!("127.0.0.1:{}/imgctl-test/attest", registry.port);
    let tag = format!("{repo}:{}", std::process::id());
    guard.image(&tag);
    let config = tempfile::tempdir().unwrap();
    let auth = registry.write_docker_config(config.path(), "attester", "att3st-pw");
    let env = [
        ("DOCKER_CONFIG", config.path().to_str().unwrap()),
        ("SOURCE_DATE_EPOCH", "1700000000"),
    ];
    let work = tempfile::tempdir().unwrap();
    let spec = busybox_spec();
    let build = |dir: &str| {
        let out = imgctl(
            &[
                "build",
                "--spec",
                spec.to_str().unwrap(),
                "--builder",
                "buildkit",
                "--ca-cert-secret",
                HOST_CA,
                "--build-arg",
                "IMGCTL_TEST_FAIL=attest",
                "--tag",
                &tag,
                "--attest",
                work.path().join(dir).to_str().unwrap(),
                "--push",
                "--json",
            ],
            &env,
        );
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains("attestations: sbom.cdx.json, provenance.intoto.json"),
            "{stderr}"
        );
        // Piped, the push says each layer done (#53 F7).
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&format!("pushing {tag}: ")) && l.contains(" layers done")),
            "{stderr}"
        );
        serde_json::from_str::<Value>(&stdout).expect("build --json")
    };
    let first = build("one");
    let second = build("two");
    assert_eq!(
        first["image_id"], second["image_id"],
        "the cached rebuild gave a new image"
    );
    let (one, two) = (work.path().join("one"), work.path().join("two"));
    for file in ["sbom.cdx.json", "provenance.intoto.json"] {
        assert_eq!(
            read(&one, file),
            read(&two, file),
            "{file} differs between two builds"
        );
    }
    assert!(
        !one.join("verify.intoto.json").exists(),
        "no --verify, no verdict"
    );

    let pushed = check_provenance(&one, &first, &repo, &tag);

    check_no_secret(&one, &first, &auth);

    // Attached to the pushed manifest: the report names each artifact, the
    // registry (no referrers API: distribution 2.8) holds the referrers tag,
    // and `imgctl inspect` lists both and fetches them back byte for byte.
    let attached: Vec<&str> = first["attestations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["attached"][0].as_str().unwrap())
        .collect();
    assert_eq!(attached.len(), 2, "{first}");
    assert!(attached
        .iter()
        .all(|a| a.starts_with(&format!("{repo}@sha256:"))));
    let (status, _, index) = registry.get_accepting(
        &format!("/v2/imgctl-test/attest/manifests/sha256-{pushed}"),
        Some("application/vnd.oci.image.index.v1+json"),
        "attester",
        "att3st-pw",
    );
    assert_eq!(status, 200, "{index}");
    let index: Value = serde_json::from_str(&index).unwrap();
    assert_eq!(
        index["manifests"].as_array().unwrap().len(),
        2,
        "rebuilt twice, listed once: {index}"
    );
    let saved = work.path().join("saved");
    let out = imgctl(
        &["inspect", &tag, "--json", "--save", saved.to_str().unwrap()],
        &env,
    );
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let inspected: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        inspected["schema_version"], 1,
        "docs/reference/json.md says 1"
    );
    assert_eq!(inspected["subject"]["digest"], format!("sha256:{pushed}"));
    let types: Vec<&str> = inspected["referrers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["artifactType"].as_str().unwrap())
        .collect();
    assert!(
        types.contains(&"application/vnd.cyclonedx+json"),
        "{types:?}"
    );
    assert!(types.contains(&"application/vnd.in-toto+json"), "{types:?}");
    for file in ["sbom.cdx.json", "provenance.intoto.json"] {
        assert_eq!(
            read(&saved, file),
            read(&one, file),
            "{file} came back changed"
        );
    }
    let out = imgctl(&["inspect", &tag], &env);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("SBOM (CycloneDX)") && stdout.contains("provenance (SLSA v1)"),
        "{stdout}"
    );
    // Without credentials: one line naming the registry and its refusal.
    let out = imgctl(
        &["inspect", &tag],
        &[("DOCKER_CONFIG", work.path().to_str().unwrap())],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        crate::common::one_error_line(&stderr).contains("401"),
        "{stderr}"
    );
    drop(guard);
}

/// The provenance of the busybox build: the image id and the pushed digest
/// as subjects, every input with its digest, the engine and builder, the
/// SBOM as a byproduct, the time of SOURCE_DATE_EPOCH. Returns the pushed
/// digest's hex.
fn check_provenance(one: &Path, first: &Value, repo: &str, tag: &str) -> String {
    let prov: Value = serde_json::from_str(&read(one, "provenance.intoto.json")).unwrap();
    assert_eq!(prov["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(prov["predicateType"], "https://slsa.dev/provenance/v1");
    let id = first["image_id"].as_str().unwrap();
    assert_eq!(
        prov["subject"][0]["digest"]["sha256"],
        id.trim_start_matches("sha256:")
    );
    let repo_digests = docker_ok(&["image", "inspect", "--format", "{{json .RepoDigests}}", tag]);
    let pushed = prov["subject"][1]["digest"]["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(prov["subject"][1]["name"], repo);
    assert!(
        repo_digests.contains(&format!("{repo}@sha256:{pushed}")),
        "{repo_digests}"
    );
    let def = &prov["predicate"]["buildDefinition"];
    let deps = def["resolvedDependencies"].as_array().unwrap();
    let dep = |name: &str| -> &Value {
        deps.iter()
            .find(|d| d["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {deps:?}"))
    };
    let spec_hash = {
        use sha2::Digest as _;
        format!(
            "{:x}",
            sha2::Sha256::digest(std::fs::read(busybox_spec()).unwrap())
        )
    };
    assert_eq!(dep("spec")["digest"]["sha256"], spec_hash.as_str());
    for name in [
        "template",
        "context:Dockerfile",
        "context:imgctl",
        "base-image",
    ] {
        assert_eq!(
            dep(name)["digest"]["sha256"].as_str().map(str::len),
            Some(64),
            "{name}"
        );
    }
    assert_eq!(def["internalParameters"]["builder"], "buildkit");
    assert!(def["externalParameters"]["caCertSecret"]
        .as_str()
        .unwrap()
        .starts_with(HOST_CA));
    let sbom_hash = {
        use sha2::Digest as _;
        format!("{:x}", sha2::Sha256::digest(read(one, "sbom.cdx.json")))
    };
    assert_eq!(
        prov["predicate"]["runDetails"]["byproducts"][0]["digest"]["sha256"],
        sbom_hash.as_str()
    );
    assert_eq!(
        prov["predicate"]["runDetails"]["metadata"]["finishedOn"],
        "2023-11-14T22:13:20Z"
    );

    pushed
}

/// No secret in the attestations or the report: not a line of the CA's
/// base64, not the registry's password or its auth string.
fn check_no_secret(one: &Path, first: &Value, auth: &str) {
    let ca = std::fs::read_to_string(HOST_CA).unwrap();
    let ca_line = ca
        .lines()
        .find(|l| l.len() == 64 && !l.starts_with('-'))
        .expect("a base64 line in the CA bundle");
    for file in ["sbom.cdx.json", "provenance.intoto.json"] {
        let text = read(one, file);
        for secret in [ca_line, "att3st-pw", auth] {
            assert!(!text.contains(secret), "{file} holds a secret ({secret})");
        }
    }
    let report = serde_json::to_string(&first).unwrap();
    assert!(!report.contains("att3st-pw") && !report.contains(ca_line));
}
