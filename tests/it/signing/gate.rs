//! `verify-image`'s refusals, each on an image of its own in the local
//! registry: an unsigned (forged) verdict, a statement about another
//! digest, a signature by an unknown key, a payload changed after signing,
//! an expired verdict under `--max-age`, and an older image's verdict
//! replayed onto a newer one. A signed verdict of 8 H200s passes the flags
//! and a `--policy` file; bad flags and policies are usage errors (exit 2).
//! The statements are made here, signed with imgctl's library and pushed
//! with its registry client, as a builder on a GPU machine would.
use std::collections::BTreeMap;
use std::process::Command;

use imgctl::image::oci::Repository;
use imgctl::image::sign::bundle::{self, BUNDLE_MEDIA_TYPE};
use serde_json::{json, Value};

use super::*;
use crate::build::{ensure_bases, EngineGuard, LocalRegistry, BUSYBOX_BASE};
use crate::buildkit::imgctl;
use crate::referrers::{docker_push, PASSWORD, USER};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn repository(tag: &str) -> Repository {
    let credentials = bollard::auth::DockerCredentials {
        username: Some(USER.to_string()),
        password: Some(PASSWORD.to_string()),
        ..Default::default()
    };
    Repository::new(tag, Some(credentials)).unwrap()
}

/// A verify verdict about `digest`: `passed`, 8 H200s, level full, made
/// `age` ago.
fn verdict(digest: &str, passed: bool, age: std::time::Duration) -> Vec<u8> {
    let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now() - age).to_string();
    let gpus: Vec<String> = (0..8)
        .map(|i| format!("NVIDIA H200 GPU-0000000{i} at 00000000:0{i}:00.0"))
        .collect();
    serde_json::to_vec_pretty(&json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "image", "digest": {"sha256": digest.trim_start_matches("sha256:")}}],
        "predicateType": "urn:imgctl:predicate:verify:v1",
        "predicate": {
            "level": "full", "expectGpus": "8", "gpus": gpus, "passed": passed,
            "verifiedOn": at,
            "summary": {"pass": 40, "warn": 0, "fail": u8::from(!passed), "skip": 0, "error": 0},
            "results": [{"id": "nvml.ecc", "status": if passed { "PASS" } else { "FAIL" }, "message": "ECC on"}],
        },
    }))
    .unwrap()
}

/// The bundle of `statement` signed with `key`.
fn signed(statement: &[u8], key: &PrivateKey) -> Vec<u8> {
    let envelope = Envelope::sign(IN_TOTO, statement, key).unwrap();
    bundle::to_bundle(&envelope, key)
}

/// Attaches `bytes` to `tag`'s manifest, as a bundle or a plain statement.
fn attach(tag: &str, bytes: &[u8], as_bundle: bool) {
    let repo = repository(tag);
    runtime().block_on(async {
        let subject = repo.resolve(repo.tag_or_digest().unwrap()).await.unwrap();
        let (kind, annotations) = if as_bundle {
            (
                BUNDLE_MEDIA_TYPE,
                bundle::annotations("urn:imgctl:predicate:verify:v1", None),
            )
        } else {
            (IN_TOTO, BTreeMap::new())
        };
        repo.push_artifact(&subject, kind, kind, bytes, annotations)
            .await
            .unwrap();
    });
}

fn digest_of(tag: &str) -> String {
    let repo = repository(tag);
    runtime().block_on(async {
        repo.resolve(repo.tag_or_digest().unwrap())
            .await
            .unwrap()
            .digest
    })
}

/// `verify-image TAG --key PUBLIC ARGS…`: (exit code, stderr).
fn gate(config: &Path, tag: &str, public: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["verify-image", tag, "--key", public.to_str().unwrap()];
    all.extend(args);
    let out = imgctl(&all, &[("DOCKER_CONFIG", config.to_str().unwrap())]);
    (out.status.code(), texts(&out).1)
}

/// One registry, two keys (ours, trusted; theirs, not) and the images of
/// the cases, each in a repository of its own.
struct Setup {
    registry: LocalRegistry,
    guard: EngineGuard,
    config: tempfile::TempDir,
    work: tempfile::TempDir,
    key: PrivateKey,
    their_key: PrivateKey,
    public: std::path::PathBuf,
}

impl Setup {
    fn new() -> Self {
        ensure_bases();
        let registry = LocalRegistry::start(USER, PASSWORD);
        let config = tempfile::tempdir().unwrap();
        registry.write_docker_config(config.path(), USER, PASSWORD);
        let work = tempfile::tempdir().unwrap();
        let (ours, theirs) = (work.path().join("ours"), work.path().join("theirs"));
        assert!(key_generate(&ours, "ecdsa-p256", None).status.success());
        assert!(key_generate(&theirs, "ed25519", None).status.success());
        Setup {
            key: PrivateKey::read(&ours.join("imgctl.key"), None).unwrap(),
            their_key: PrivateKey::read(&theirs.join("imgctl.key"), None).unwrap(),
            public: ours.join("imgctl.pub"),
            registry,
            guard: EngineGuard::default(),
            config,
            work,
        }
    }

    /// The busybox base pushed as `gate-CASE:PID`.
    fn image(&mut self, case: &str) -> String {
        let tag = format!(
            "127.0.0.1:{}/imgctl-test/gate-{case}:{}",
            self.registry.port,
            std::process::id()
        );
        docker_push(&self.registry, &tag);
        self.guard.image(&tag);
        tag
    }

    fn gate(&self, tag: &str, args: &[&str]) -> (Option<i32>, String) {
        gate(self.config.path(), tag, &self.public, args)
    }
}

const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);
const GATE_FLAGS: [&str; 7] = [
    "--require-verify",
    "--min-gpus",
    "8",
    "--gpu-model",
    "H200",
    "--level",
    "full",
];

#[test]
fn verify_image_passes_a_signed_verdict_by_flags_and_policy_file() {
    let mut s = Setup::new();
    // A signed verdict of 8 H200s about this image passes every flag.
    let good = s.image("good");
    attach(
        &good,
        &signed(&verdict(&digest_of(&good), true, DAY / 24), &s.key),
        true,
    );
    let (code, stderr) = s.gate(&good, &GATE_FLAGS);
    assert_eq!(code, Some(0), "{stderr}");
    for rule in [
        "verify.passed",
        "verify.min_gpus",
        "verify.gpu_model",
        "verify.level",
    ] {
        assert!(
            stderr.contains(&format!("PASS  {rule}")),
            "{rule}: {stderr}"
        );
    }
    // --json: the README's schema_version, each rule with the statement it held on.
    let mut args = vec![
        "verify-image",
        &good,
        "--key",
        s.public.to_str().unwrap(),
        "--json",
    ];
    args.extend(GATE_FLAGS);
    let out = imgctl(
        &args,
        &[("DOCKER_CONFIG", s.config.path().to_str().unwrap())],
    );
    let doc: Value = serde_json::from_str(&texts(&out).0).unwrap();
    assert_eq!(
        (doc["schema_version"].as_u64(), doc["passed"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(doc["rules"].as_array().unwrap().len(), 4, "{doc}");
    assert_eq!(doc["rules"][0]["statement"], doc["accepted"][0]["manifest"]);
    let (code, stderr) = s.gate(&good, &["--min-gpus", "16"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        one_error_line(&stderr)
            .contains("rule verify.min_gpus failed: 8 GPUs seen, at least 16 wanted"),
        "{stderr}"
    );
    // A policy file: its rules and the flags' together; a bad one is exit 2.
    let policy = s.work.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "version: 1\nrequire_verify: true\nchecks_passed: [nvml.ecc]\nmax_age: 7d\n",
    )
    .unwrap();
    let (code, stderr) = s.gate(&good, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("PASS  check:nvml.ecc"), "{stderr}");
    std::fs::write(&policy, "version: 1\nrequire_verfy: true\n").unwrap();
    let (code, stderr) = s.gate(&good, &["--policy", policy.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("unknown field `require_verfy`"),
        "{stderr}"
    );
    let (code, stderr) = gate(s.config.path(), &good, &s.work.path().join("none.pub"), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("cannot read the key file"),
        "{stderr}"
    );
}

/// A forged verdict, signed but changed after signing.
fn changed(d: &str, key: &PrivateKey) -> (Vec<u8>, bool) {
    // A failed verdict, signed, then forged into a passed one.
    let text = String::from_utf8(signed(&verdict(d, false, DAY / 24), key)).unwrap();
    let mut b: Value = serde_json::from_str(&text).unwrap();
    let payload = String::from_utf8(base64_decode(
        b["dsseEnvelope"]["payload"].as_str().unwrap(),
    ))
    .unwrap();
    let forged = payload.replace("\"passed\": false", "\"passed\": true");
    assert_ne!(forged, payload);
    b["dsseEnvelope"]["payload"] = json!(base64_encode(forged.as_bytes()));
    (serde_json::to_vec(&b).unwrap(), true)
}

/// How a refused statement is made from the image's digest.
type Make<'a> = &'a dyn Fn(&str) -> (Vec<u8>, bool);

#[test]
fn verify_image_refuses_each_untrusted_statement() {
    let mut s = Setup::new();
    let (key, their_key) = (&s.key, &s.their_key);
    let zeros = format!("sha256:{}", "0".repeat(64));
    // (case, how the statement is made, the words of its refusal, extra flags).
    // A verdict dated 2100 (#50 M2): never young enough for --max-age.
    let future = |d: &str| {
        let mut v: Value = serde_json::from_slice(&verdict(d, true, DAY / 24)).unwrap();
        v["predicate"]["verifiedOn"] = json!("2100-01-01T00:00:00Z");
        (signed(&serde_json::to_vec(&v).unwrap(), key), true)
    };
    let refusals: [(&str, Make, &str, &[&str]); 6] = [
        (
            "unsigned",
            &|d| (verdict(d, true, DAY / 24), false),
            "unsigned",
            &[],
        ),
        (
            "other-subject",
            &|_| (signed(&verdict(&zeros, true, DAY / 24), key), true),
            "its subject is another image",
            &[],
        ),
        (
            "unknown-key",
            &|d| (signed(&verdict(d, true, DAY / 24), their_key), true),
            "signed by an unknown key",
            &[],
        ),
        (
            "changed",
            &|d| changed(d, key),
            "does not verify with key",
            &[],
        ),
        (
            "expired",
            &|d| (signed(&verdict(d, true, DAY * 10), key), true),
            "expired: made",
            &["--max-age", "7d"],
        ),
        (
            "future",
            &future,
            "made in the future (2100-01-01T00:00:00Z)",
            &["--max-age", "7d"],
        ),
    ];
    let mut made = Vec::new();
    for (case, make, words, extra) in refusals {
        let tag = format!(
            "127.0.0.1:{}/imgctl-test/gate-{case}:{}",
            s.registry.port,
            std::process::id()
        );
        docker_push(&s.registry, &tag);
        let (bytes, as_bundle) = make(&digest_of(&tag));
        attach(&tag, &bytes, as_bundle);
        let mut flags = GATE_FLAGS.to_vec();
        flags.extend(extra);
        let (code, stderr) = s.gate(&tag, &flags);
        assert_eq!(code, Some(1), "{case}: {stderr}");
        // An unsigned statement is said, not warned of (#53 F12).
        let marker = match case {
            "unsigned" => "unsigned sha256:",
            _ => "refused  sha256:",
        };
        assert!(
            stderr.contains(marker) && stderr.contains(words),
            "{case}: {stderr}"
        );
        // The key the statements were checked against, by id.
        assert!(
            stderr.contains("of 127.0.0.1:") && stderr.contains(", checked against key "),
            "{case}: {stderr}"
        );
        let line = one_error_line(&stderr);
        assert!(
            line.contains("rule verify.passed failed: no signed verify verdict of this image"),
            "{case}: {line}"
        );
        made.push(tag);
    }
    for tag in made {
        s.guard.image(&tag);
    }
}

#[test]
fn verify_image_refuses_an_older_images_verdict_replayed_onto_a_newer_one() {
    let mut s = Setup::new();
    let pid = std::process::id();
    // The older image's signed verdict attached to a newer image.
    let old = s.image("replay");
    let new = format!(
        "127.0.0.1:{}/imgctl-test/gate-replay:new-{pid}",
        s.registry.port
    );
    let built = Command::new("docker")
        .args(["build", "-q", "-t", &new, "-"])
        .env("DOCKER_BUILDKIT", "0")
        .env("DOCKER_API_VERSION", "1.41")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            child.stdin.take().unwrap().write_all(
                format!("FROM {BUSYBOX_BASE}\nLABEL imgctl.test=replay-{pid}\n").as_bytes(),
            )?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(built.status.success(), "{}", texts(&built).1);
    s.guard.image(&new);
    let push = Command::new("docker")
        .args(["push", &new])
        .env("DOCKER_CONFIG", s.config.path())
        .env("DOCKER_API_VERSION", "1.41")
        .output()
        .unwrap();
    assert!(push.status.success(), "{}", texts(&push).1);
    let old_verdict = signed(&verdict(&digest_of(&old), true, DAY / 24), &s.key);
    attach(&old, &old_verdict, true);
    assert_eq!(s.gate(&old, &GATE_FLAGS).0, Some(0));
    attach(&new, &old_verdict, true);
    let (code, stderr) = s.gate(&new, &GATE_FLAGS);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("its subject is another image") && stderr.contains(&digest_of(&old)),
        "{stderr}"
    );
}

#[test]
fn up_and_verify_image_check_the_signed_verdict_before_starting_anything() {
    let mut s = Setup::new();
    let tag = s.image("start");
    let config = s.config.path().to_str().unwrap().to_string();
    let public = s.public.to_str().unwrap().to_string();
    let env = [("DOCKER_CONFIG", config.as_str())];
    // A forged (unsigned) verdict: neither starts anything.
    attach(&tag, &verdict(&digest_of(&tag), true, DAY / 24), false);
    let out = imgctl(&["verify", "--image", &tag, "--key", &public], &env);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("rule verify.passed failed"),
        "{stderr}"
    );
    let name = format!("imgctl-test-gate-up-{}", std::process::id());
    s.guard.container(&name);
    let out = imgctl(
        &["up", &tag, "--key", &public, "--no-mount", "--name", &name],
        &env,
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // The unsigned statement is said and not used (#53 F12).
    assert!(
        stderr.contains("unsigned sha256:") && stderr.contains("not used"),
        "{stderr}"
    );
    let listed = crate::build::docker_ok(&["ps", "-aq", "--filter", &format!("name=^{name}$")]);
    assert!(listed.trim().is_empty(), "up started {name}: {listed}");
    // An image never pushed has no digest a verdict could name.
    let out = imgctl(&["verify", "--image", BUSYBOX_BASE, "--key", &public], &env);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("has no digest from the registry"),
        "{stderr}"
    );
    // Signed and passed: verify --image goes on to run the image.
    attach(
        &tag,
        &signed(&verdict(&digest_of(&tag), true, DAY / 24), &s.key),
        true,
    );
    let out = imgctl(&["verify", "--image", &tag, "--key", &public], &env);
    let (_, stderr) = texts(&out);
    assert!(stderr.contains("PASS  verify.passed"), "{stderr}");
    assert!(stderr.contains("passed; starting"), "{stderr}");
}
