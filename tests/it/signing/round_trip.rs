//! Sign → push → `verify-image` against the local registry (Debian's
//! distribution 2.8, no referrers API), with both key types: `build
//! --sign-key` (and `IMGCTL_SIGN_KEY` with an encrypted key) attaches
//! Sigstore bundles that securesystemslib and openssl verify, that the ORAS
//! Python SDK lists, and that `verify-image` trusts with the right key only.
//! No key material in any output, with `-v`.
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::*;
use crate::build::{busybox_spec, ensure_bases, EngineGuard, LocalRegistry};
use crate::buildkit::imgctl;
use crate::referrers::{PASSWORD, USER};

/// Every line of the private key's PEM body, and the passphrase: none may
/// appear in `text`.
pub fn assert_no_key_material(text: &str, private: &Path, what: &str) {
    let pem = std::fs::read_to_string(private).unwrap();
    for line in pem.lines().filter(|l| !l.starts_with("-----")) {
        assert!(
            !text.contains(line),
            "{what} holds a line of the private key"
        );
    }
    assert!(!text.contains(PASSPHRASE), "{what} holds the passphrase");
}

fn oras_list(registry: &LocalRegistry, repo: &str, digest: &str, out: &Path) -> Value {
    let run = Command::new(crate::common::venv_python())
        .arg(crate::common::repo_root().join("tests/signing/oras_list.py"))
        .args([
            &format!("127.0.0.1:{}", registry.port),
            repo,
            digest,
            USER,
            PASSWORD,
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&run);
    assert!(run.status.success(), "oras: {stderr}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn signed_build_push_and_verify_image_round_trip_with_both_key_types() {
    ensure_bases();
    let registry = LocalRegistry::start(USER, PASSWORD);
    let mut guard = EngineGuard::default();
    let config = tempfile::tempdir().unwrap();
    registry.write_docker_config(config.path(), USER, PASSWORD);
    let work = tempfile::tempdir().unwrap();
    let spec = busybox_spec();
    let cases = [("ecdsa-p256", Some(PASSPHRASE)), ("ed25519", None)];
    for (kind, passphrase) in cases {
        assert!(key_generate(&work.path().join(kind), kind, passphrase)
            .status
            .success());
    }
    for (i, (kind, passphrase)) in cases.into_iter().enumerate() {
        let keys = work.path().join(kind);
        let (private, public) = (keys.join("imgctl.key"), keys.join("imgctl.pub"));
        let name = format!("imgctl-test/signed-{kind}");
        let tag = format!("127.0.0.1:{}/{name}:{}", registry.port, std::process::id());
        guard.image(&tag);
        let dir = work.path().join(format!("attest-{kind}"));
        let mut env = vec![
            ("DOCKER_CONFIG", config.path().to_str().unwrap().to_string()),
            ("SOURCE_DATE_EPOCH", "1700000000".to_string()),
        ];
        let mut args = vec![
            "build",
            "--spec",
            spec.to_str().unwrap(),
            "--builder",
            "buildkit",
            "--tag",
            &tag,
            "--attest",
            dir.to_str().unwrap(),
            "--push",
            "--json",
            "-v",
        ];
        // The encrypted ECDSA key through the environment, Ed25519 through the flag.
        let private_arg = private.to_str().unwrap().to_string();
        match passphrase {
            Some(p) => {
                env.push(("IMGCTL_SIGN_KEY", private_arg.clone()));
                env.push(("IMGCTL_KEY_PASSPHRASE", p.to_string()));
            }
            None => args.extend(["--sign-key", &private_arg]),
        }
        let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let out = imgctl(&args, &env_ref);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{kind}: {stderr}");
        assert!(stderr.contains("signed 2 statements with key"), "{stderr}");
        assert_no_key_material(&stdout, &private, "build's stdout");
        assert_no_key_material(&stderr, &private, "build -v's stderr");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            assert_no_key_material(&text, &private, &path.display().to_string());
        }
        let report: Value = serde_json::from_str(&stdout).unwrap();
        let files: Vec<&str> = report["attestations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["file"].as_str().unwrap())
            .collect();
        assert!(
            files.contains(&"provenance.sigstore.json") && files.contains(&"sbom.sigstore.json"),
            "{files:?}"
        );

        let pushed = check_bundle(&dir, &public, kind);
        check_oras(
            &registry,
            &name,
            &pushed,
            &work.path().join(format!("oras-{kind}")),
        );
        let other = work.path().join(cases[1 - i].0).join("imgctl.pub");
        let env = [("DOCKER_CONFIG", config.path().to_str().unwrap())];
        check_gate(&dir, &tag, (&public, &private), &other, &env);
    }
    drop(guard);
}

fn provenance(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("provenance.intoto.json")).unwrap())
        .unwrap()
}

/// The provenance's bundle in the --attest folder: it binds the pushed
/// manifest (its statement's subjects name it), securesystemslib verifies
/// its envelope and openssl its raw signature over DSSE's PAE. Returns the
/// pushed digest.
pub(super) fn check_bundle(dir: &Path, public: &Path, kind: &str) -> String {
    let prov = provenance(dir);
    let pushed = format!(
        "sha256:{}",
        prov["subject"][1]["digest"]["sha256"].as_str().unwrap()
    );
    let bundle_file = dir.join("provenance.sigstore.json");
    let bundle: Value =
        serde_json::from_str(&std::fs::read_to_string(&bundle_file).unwrap()).unwrap();
    assert_eq!(
        bundle["mediaType"],
        "application/vnd.dev.sigstore.bundle.v0.3+json"
    );
    let keyid = bundle["verificationMaterial"]["publicKey"]["hint"]
        .as_str()
        .unwrap();
    let envelope = &bundle["dsseEnvelope"];
    let payload = base64_decode(envelope["payload"].as_str().unwrap());
    assert_eq!(
        payload,
        std::fs::read(dir.join("provenance.intoto.json")).unwrap()
    );
    let said = securesystemslib_verifies(&bundle_file, public, keyid).unwrap();
    assert!(said.contains("https://slsa.dev/provenance/v1"), "{said}");
    let sig = base64_decode(envelope["signatures"][0]["sig"].as_str().unwrap());
    assert!(openssl_verifies(
        kind,
        public,
        &pae(IN_TOTO, &payload),
        &sig
    ));
    pushed
}

/// The ORAS Python SDK lists both bundles of `digest` from the registry,
/// each layer titled `sha256-HEX.sigstore.json`.
fn check_oras(registry: &LocalRegistry, name: &str, digest: &str, out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    let listed = oras_list(registry, name, digest, out);
    let bundles = listed["bundles"].as_array().unwrap();
    assert_eq!(bundles.len(), 2, "{listed}");
    let mut predicates: Vec<&str> = bundles
        .iter()
        .map(|b| {
            assert_eq!(
                b["annotations"]["dev.sigstore.bundle.content"],
                "dsse-envelope"
            );
            // The layer's file name, as cosign's BUNDLE_SPEC.md suggests.
            let layer = b["layer"].as_str().unwrap();
            assert_eq!(
                b["title"],
                format!("{}.sigstore.json", layer.replacen(':', "-", 1)),
                "{b}"
            );
            b["annotations"]["dev.sigstore.bundle.predicateType"]
                .as_str()
                .unwrap()
        })
        .collect();
    predicates.sort_unstable();
    assert_eq!(
        predicates,
        [
            "https://cyclonedx.org/bom",
            "https://slsa.dev/provenance/v1"
        ]
    );
    assert!(
        listed["how"].as_str().unwrap().contains("referrers tag"),
        "{listed}"
    );
}

/// verify-image (with `env`: the docker config, and over HTTPS where the
/// CA is): the right key and the provenance's facts pass (no key material
/// in its -v output); a wrong spec digest fails its rule; the other kind's
/// key is refused as unknown.
pub(super) fn check_gate(
    dir: &Path,
    tag: &str,
    (public, private): (&Path, &Path),
    other: &Path,
    env: &[(&str, &str)],
) {
    let prov = provenance(dir);
    let spec = prov["predicate"]["buildDefinition"]["resolvedDependencies"][0]["digest"]["sha256"]
        .as_str()
        .unwrap();
    let spec_arg = format!("sha256:{spec}");
    let builder_id = prov["predicate"]["runDetails"]["builder"]["id"]
        .as_str()
        .unwrap();
    let public_arg = public.to_str().unwrap();
    let args = [
        "verify-image",
        tag,
        "--key",
        public_arg,
        "--spec-digest",
        &spec_arg,
        "--builder-id",
        builder_id,
        "-v",
    ];
    let out = imgctl(&args, env);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("PASS  provenance.spec_digest"), "{stderr}");
    assert!(stderr.contains("PASS  provenance.builder_id"), "{stderr}");
    assert!(stderr.contains("may deploy"), "{stderr}");
    assert_no_key_material(&format!("{stdout}{stderr}"), private, "verify-image -v");
    let out = imgctl(
        &[
            "verify-image",
            tag,
            "--key",
            public_arg,
            "--spec-digest",
            "sha256:00",
        ],
        env,
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("rule provenance.spec_digest failed"),
        "{stderr}"
    );
    let out = imgctl(
        &["verify-image", tag, "--key", other.to_str().unwrap()],
        env,
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("signed by an unknown key"), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("rule signed failed"),
        "{stderr}"
    );
}
