//! Sign → push → `verify-image` over HTTPS, against the registry with a
//! private CA ([`crate::tls_registry`]), with both key types: `build
//! --sign-key --push --registry-ca` attaches the bundles, `verify-image`
//! trusts them with the CA from a certs.d folder (the round trip's checks,
//! the other key refused) and from `--registry-ca`; a wrong CA is refused
//! naming the registry, a `--registry-ca` that is no certificate is a usage
//! error. `verify --image --key` reads the verdict over HTTPS with
//! `--registry-ca` too, and `up` refuses a bad one (or one without `--key`).
use super::round_trip::{check_bundle, check_gate};
use super::*;
use crate::build::{busybox_spec, ensure_bases, EngineGuard};
use crate::buildkit::imgctl;
use crate::tls_registry::{make_ca, TlsRegistry};

#[test]
fn signed_push_and_verify_image_over_https_with_both_key_types() {
    ensure_bases();
    let reg = TlsRegistry::start();
    let mut guard = EngineGuard::default();
    let config = tempfile::tempdir().unwrap();
    reg.docker_config(config.path());
    let work = tempfile::tempdir().unwrap();
    let spec = busybox_spec();
    let kinds = ["ecdsa-p256", "ed25519"];
    for kind in kinds {
        assert!(key_generate(&work.path().join(kind), kind, None)
            .status
            .success());
    }
    let (config_dir, ca) = (config.path().to_str().unwrap(), reg.ca.to_str().unwrap());
    let certs = reg.certs_dir();
    let by_certs_d = [
        ("DOCKER_CONFIG", config_dir),
        ("IMGCTL_REGISTRY_CERTS_DIR", certs.to_str().unwrap()),
    ];
    let mut tags = Vec::new();
    for (i, kind) in kinds.into_iter().enumerate() {
        let keys = work.path().join(kind);
        let (private, public) = (keys.join("imgctl.key"), keys.join("imgctl.pub"));
        let tag = format!(
            "{}/imgctl-test/signed-https-{kind}:{}",
            reg.address,
            std::process::id()
        );
        guard.image(&tag);
        let dir = work.path().join(format!("attest-{kind}"));
        let out = imgctl(
            &[
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
                "--registry-ca",
                ca,
                "--sign-key",
                private.to_str().unwrap(),
            ],
            &[("DOCKER_CONFIG", config_dir)],
        );
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{kind}: {stderr}");
        assert!(stderr.contains("signed 2 statements with key"), "{stderr}");
        check_bundle(&dir, &public, kind);
        let other = work.path().join(kinds[1 - i]).join("imgctl.pub");
        check_gate(&dir, &tag, (&public, &private), &other, &by_certs_d);
        // The CA by the flag instead of the folder.
        let out = imgctl(
            &["verify-image", &tag, "--key", public.to_str().unwrap()],
            &[("DOCKER_CONFIG", config_dir)],
        )
        .status
        .code();
        assert_eq!(out, Some(1), "without the CA, HTTPS cannot be trusted");
        let out = imgctl(
            &[
                "verify-image",
                &tag,
                "--key",
                public.to_str().unwrap(),
                "--registry-ca",
                ca,
            ],
            &[("DOCKER_CONFIG", config_dir)],
        );
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{kind}: {stderr}");
        assert!(stderr.contains("may deploy"), "{stderr}");
        tags.push((tag, public));
    }

    // Refused over HTTPS: a CA that did not issue the registry's certificate.
    let (tag, public) = &tags[0];
    let wrong = make_ca(work.path(), "other");
    let out = imgctl(
        &[
            "verify-image",
            tag,
            "--key",
            public.to_str().unwrap(),
            "--registry-ca",
            wrong.to_str().unwrap(),
        ],
        &[("DOCKER_CONFIG", config_dir)],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let line = one_error_line(&stderr);
    assert!(
        line.contains(&format!(
            "registry {} presented a certificate that no trusted CA signed",
            reg.address
        )) && line.contains("--registry-ca FILE"),
        "{line}"
    );
    // A --registry-ca that is no certificate: a usage error, before any request.
    let out = imgctl(
        &[
            "verify-image",
            tag,
            "--key",
            public.to_str().unwrap(),
            "--registry-ca",
            "/etc/hostname",
        ],
        &[("DOCKER_CONFIG", config_dir)],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("--registry-ca /etc/hostname for registry"),
        "{stderr}"
    );
    before_start_over_https(tag, public, ca, config_dir, &mut guard);
    fit_over_https(tag, public, ca, config_dir);
    drop(guard);
}

/// `verify-image --fleet` over HTTPS (#55): the busybox build carries the
/// labels of torch 2.7.0+cu126; a B200 fleet refuses it with the arch
/// rule's line and the profile that fits, an H200 fleet admits it, and
/// `--json` gives every reason. The time of each run is printed.
fn fit_over_https(tag: &str, public: &Path, ca: &str, config_dir: &str) {
    let dir = tempfile::tempdir().unwrap();
    let fleet = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let b200 = fleet(
        "b200.yaml",
        "version: 1\ngpus:\n  - {model: B200, driver: 570.133.20, nodes: 16}\n",
    );
    let h200 = fleet(
        "h200.yaml",
        "version: 1\ngpus:\n  - {model: H200, driver: 550.54.15, nodes: 8}\n",
    );
    let gate = |file: &str, extra: &[&str]| {
        let mut args = vec![
            "verify-image",
            tag,
            "--key",
            public.to_str().unwrap(),
            "--registry-ca",
            ca,
            "--fleet",
            file,
        ];
        args.extend(extra);
        let start = std::time::Instant::now();
        let out = imgctl(&args, &[("DOCKER_CONFIG", config_dir)]);
        eprintln!(
            "verify-image --fleet {file} {extra:?}: {:.2} s\n{}",
            start.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let out = gate(&b200, &[]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("may not deploy to this fleet: B200 (sm_100) is not in the image's arch list sm_50…sm_90: torch 2.7.0+cu126 has no Blackwell kernels"),
        "{stderr}"
    );
    assert!(stderr.contains("the cu128 profile fits"), "{stderr}");
    assert!(
        stderr.contains(
            "; from the signed provenance (internalParameters.gpuFit)) to 1 GPU model(s)"
        ),
        "{stderr}"
    );
    let out = gate(&h200, &[]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("PASS  fit.arch: H200 (sm_90): the image has sm_90 code"),
        "{stderr}"
    );
    assert!(
        stderr.contains("by minor-version compatibility"),
        "{stderr}"
    );
    let out = gate(&b200, &["--json"]);
    let (stdout, _) = texts(&out);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["fit"]["admitted"], false, "{v}");
    assert_eq!(v["fit"]["image"]["variant"], "cu126", "{v}");
    assert_eq!(v["fit"]["reasons"][0]["rule"], "arch", "{v}");
    // A fleet file with a typo is a usage error, before the registry is read.
    let bad = fleet(
        "bad.yaml",
        "version: 1\ngpus: [{model: B200, drivers: 570.1}]\n",
    );
    let out = gate(&bad, &[]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("unknown field `drivers`"),
        "{stderr}"
    );
}

/// verify --image and up --key read the verdict over HTTPS the same way:
/// with the CA, the signed statements are read and, the busybox build
/// having no verdict, verify.passed fails; without it, HTTPS is the error;
/// `up` refuses a `--registry-ca` that is no certificate, and one without
/// `--key`, starting nothing.
fn before_start_over_https(
    tag: &str,
    public: &Path,
    ca: &str,
    config_dir: &str,
    guard: &mut EngineGuard,
) {
    let public = public.to_str().unwrap();
    let gate_before_start = |extra: &[&str]| {
        let mut args = vec!["verify", "--image", tag, "--key", public];
        args.extend(extra);
        let out = imgctl(&args, &[("DOCKER_CONFIG", config_dir)]);
        let (_, stderr) = texts(&out);
        (out.status.code(), stderr)
    };
    let (code, stderr) = gate_before_start(&["--registry-ca", ca]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("trusted  sha256:"), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("rule verify.passed failed"),
        "{stderr}"
    );
    let (code, stderr) = gate_before_start(&[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("it speaks HTTPS; put the registry's CA certificate in"),
        "{stderr}"
    );
    let name = format!("imgctl-test-https-up-{}", std::process::id());
    guard.container(&name);
    for (extra, said) in [
        (
            vec!["--key", public, "--registry-ca", "/etc/hostname"],
            "--registry-ca /etc/hostname for registry",
        ),
        (vec!["--registry-ca", ca], "--key"),
    ] {
        let mut args = vec!["up", tag, "--no-mount", "--name", &name];
        args.extend(extra);
        let out = imgctl(&args, &[("DOCKER_CONFIG", config_dir)]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
    }
    let listed = crate::build::docker_ok(&["ps", "-aq", "--filter", &format!("name=^{name}$")]);
    assert!(listed.trim().is_empty(), "up started {name}: {listed}");
}
