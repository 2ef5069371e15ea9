//! Registries over HTTPS with a private CA (issue 43, part 3), against
//! Debian's `docker-registry` with TLS and htpasswd on 127.0.0.1
//! ([`crate::tls_registry`]): `build --push --registry-ca` (the engine
//! pushes the image, imgctl attaches the attestations), `inspect` with the
//! CA from `--registry-ca` and from a certs.d folder, the pushed image and
//! its referrers tag read by clients nobody here wrote (skopeo, the `oras`
//! Python SDK), a wrong CA, an expired certificate and another name each a
//! one-line error naming the registry and the fix, and two concurrent
//! pushes of referrers of one subject both kept.
use std::collections::BTreeMap;
use std::process::Command;

use bollard::auth::DockerCredentials;
use imgctl::image::oci::manifest::OCI_MANIFEST;
use imgctl::image::oci::{Descriptor, Repository};
use serde_json::Value;

use crate::build::{busybox_spec, ensure_bases, EngineGuard};
use crate::buildkit::imgctl;
use crate::common::{one_error_line, texts, venv_python};
use crate::tls_registry::{make_ca, Cert, TlsRegistry};

const IN_TOTO: &str = "application/vnd.in-toto+json";

#[test]
fn build_push_and_inspect_over_https_with_a_private_ca() {
    ensure_bases();
    let reg = TlsRegistry::start();
    let mut guard = EngineGuard::default();
    let repo = format!("{}/imgctl-test/tls", reg.address);
    let tag = format!("{repo}:{}", std::process::id());
    guard.image(&tag);
    let config = tempfile::tempdir().unwrap();
    reg.docker_config(config.path());
    let ca = reg.ca.to_str().unwrap();
    let config_dir = config.path().to_str().unwrap();
    let spec = busybox_spec();
    let out = imgctl(
        &[
            "build",
            "--spec",
            spec.to_str().unwrap(),
            "--builder",
            "buildkit",
            "--tag",
            &tag,
            "--push",
            "--registry-ca",
            ca,
            "--json",
        ],
        &[("DOCKER_CONFIG", config_dir)],
    );
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let attached = report["attestations"].as_array().unwrap();
    assert_eq!(attached.len(), 2, "{report}");

    // inspect: the CA from --registry-ca, then from a certs.d folder.
    let certs = reg.certs_dir();
    let by_flag = imgctl(
        &["inspect", &tag, "--json", "--registry-ca", ca],
        &[("DOCKER_CONFIG", config_dir)],
    );
    let by_dir = imgctl(
        &["inspect", &tag, "--json"],
        &[
            ("DOCKER_CONFIG", config_dir),
            ("IMGCTL_REGISTRY_CERTS_DIR", certs.to_str().unwrap()),
        ],
    );
    let mut seen = Vec::new();
    for out in [by_flag, by_dir] {
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let inspected: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(inspected["referrers"].as_array().unwrap().len(), 2);
        seen.push(inspected);
    }
    assert_eq!(seen[0], seen[1]);
    let subject = seen[0]["subject"]["digest"].as_str().unwrap().to_string();
    let referrers: Vec<String> = seen[0]["referrers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["digest"].as_str().unwrap().to_string())
        .collect();

    // skopeo (Debian) reads the pushed image and lists the referrers tag,
    // trusting the CA through its own certs.d-style folder.
    let creds = format!("{}:{}", reg.credentials.0, reg.credentials.1);
    let cert_dir = certs.join(&reg.address);
    let skopeo = |args: &[&str], reference: &str| {
        let out = Command::new("skopeo")
            .args(args)
            .args(["--cert-dir", cert_dir.to_str().unwrap(), "--creds", &creds])
            .arg(format!("docker://{reference}"))
            .output()
            .expect("skopeo (scripts/setup.sh installs it)");
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "skopeo {args:?}: {stderr}");
        serde_json::from_str::<Value>(&stdout).unwrap()
    };
    let inspected = skopeo(&["inspect"], &tag);
    assert_eq!(inspected["Digest"], subject.as_str(), "{inspected}");
    let tags = skopeo(&["list-tags"], &repo);
    let fallback = format!("sha256-{}", subject.strip_prefix("sha256:").unwrap());
    assert!(
        tags["Tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| *t == *fallback),
        "{tags}"
    );

    // The oras SDK, over HTTPS with the CA, finds the referrers imgctl attached.
    let script = r#"
import json, sys
import oras.client
address, repo, tag, ca, user, password = sys.argv[1:]
client = oras.client.OrasClient(hostname=address, tls_verify=ca, auth_backend="basic")
client.auth.set_basic_auth(user, password)
index = client.get_manifest(f"{address}/{repo}:{tag}")
print(json.dumps([m["digest"] for m in index["manifests"]]))
"#;
    let out = Command::new(venv_python())
        .args(["-c", script, &reg.address, "imgctl-test/tls", &fallback, ca])
        .args([&reg.credentials.0, &reg.credentials.1])
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "oras: {stderr}");
    let mut found: Vec<String> = serde_json::from_str(stdout.trim()).unwrap();
    found.sort();
    let mut expected = referrers.clone();
    expected.sort();
    assert_eq!(found, expected);
}

/// `inspect`'s one error line and exit status against `reg` with `args`.
fn inspect_error(reg: &TlsRegistry, args: &[&str]) -> (Option<i32>, String) {
    let config = tempfile::tempdir().unwrap();
    reg.docker_config(config.path());
    let reference = format!("{}/imgctl-test/tls:x", reg.address);
    let mut all = vec!["inspect", reference.as_str()];
    all.extend(args);
    let out = imgctl(&all, &[("DOCKER_CONFIG", config.path().to_str().unwrap())]);
    let (_, stderr) = texts(&out);
    (out.status.code(), one_error_line(&stderr).to_string())
}

#[test]
fn refused_certificates_are_one_line_naming_the_registry_and_the_fix() {
    let good = TlsRegistry::start();
    let other = tempfile::tempdir().unwrap();
    let wrong_ca = make_ca(other.path(), "other");
    let wrong = wrong_ca.to_str().unwrap();
    let (code, line) = inspect_error(&good, &["--registry-ca", wrong]);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains(&format!(
            "registry {} presented a certificate that no trusted CA signed",
            good.address
        )),
        "{line}"
    );
    assert!(line.contains(&format!("checked against {wrong}")), "{line}");
    assert!(
        line.contains(&format!(
            "/{}/ca.crt or pass it with --registry-ca FILE",
            good.address
        )),
        "{line}"
    );
    // No CA at all: imgctl speaks HTTP to a loopback registry, which answers
    // that it speaks HTTPS; the line says where its CA goes.
    let (code, line) = inspect_error(&good, &[]);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains("it speaks HTTPS; put the registry's CA certificate in"),
        "{line}"
    );
    // A --registry-ca that is no certificate is a usage error.
    let (code, line) = inspect_error(&good, &["--registry-ca", "/etc/hostname"]);
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.contains("--registry-ca /etc/hostname for registry"),
        "{line}"
    );

    let expired = TlsRegistry::start_with(Cert::Expired);
    let (code, line) = inspect_error(&expired, &["--registry-ca", expired.ca.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains(&format!(
            "registry {} presented an expired certificate",
            expired.address
        )) && line.contains("renew the registry's certificate"),
        "{line}"
    );
    let named = TlsRegistry::start_with(Cert::OtherName);
    let (code, line) = inspect_error(&named, &["--registry-ca", named.ca.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains(&format!(
            "registry {} presented a certificate for another name",
            named.address
        )) && line.contains("reissue it with 127.0.0.1 in its subjectAltName"),
        "{line}"
    );
}

#[test]
fn two_concurrent_referrer_pushes_to_one_subject_keep_both() {
    let reg = TlsRegistry::start();
    let reference = format!("{}/imgctl-test/race:x", reg.address);
    let credentials = Some(DockerCredentials {
        username: Some(reg.credentials.0.clone()),
        password: Some(reg.credentials.1.clone()),
        ..Default::default()
    });
    let client = || {
        Repository::new(&reference, credentials.clone())
            .unwrap()
            .with_registry_ca(&reg.ca, None)
            .unwrap()
    };
    let (a, b) = (client(), client());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // A subject of its own: an artifact manifest the registry holds.
        let none = Descriptor {
            media_type: OCI_MANIFEST.to_string(),
            digest: format!("sha256:{}", "0".repeat(64)),
            size: 2,
            artifact_type: None,
            annotations: BTreeMap::new(),
        };
        let subject = a
            .push_artifact(&none, IN_TOTO, IN_TOTO, b"{\"subject\":1}", BTreeMap::new())
            .await
            .unwrap();
        let mut pushed = Vec::new();
        for round in 0..4 {
            let (x, y) = (format!("{{\"a\":{round}}}"), format!("{{\"b\":{round}}}"));
            let (one, two) = tokio::join!(
                a.push_artifact(&subject, IN_TOTO, IN_TOTO, x.as_bytes(), BTreeMap::new()),
                b.push_artifact(&subject, IN_TOTO, IN_TOTO, y.as_bytes(), BTreeMap::new()),
            );
            pushed.push(one.unwrap().digest);
            pushed.push(two.unwrap().digest);
        }
        let mut listed: Vec<String> = a
            .referrers(&subject.digest, None)
            .await
            .unwrap()
            .list
            .into_iter()
            .map(|d| d.digest)
            .collect();
        listed.sort();
        pushed.sort();
        assert_eq!(listed, pushed, "an entry was lost");
    });
}
