//! `build --push`: an unreachable registry fails clearly, and a local registry
//! receives the image with the docker config's credentials.
use super::*;

#[test]
fn push_to_an_unreachable_registry_fails_clearly() {
    ensure_bases();
    let mut guard = EngineGuard::default();
    // Port 9 (discard) on loopback: nothing listens, the engine is refused at once.
    let tag = format!("127.0.0.1:9/imgctl-test/push:{}", std::process::id());
    guard.image(&tag);
    let config = tempfile::tempdir().unwrap();
    // "user:pass" in base64, for the registry of the tag.
    std::fs::write(
        config.path().join("config.json"),
        r#"{"auths": {"127.0.0.1:9": {"auth": "dXNlcjpwYXNz"}}}"#,
    )
    .unwrap();
    let out = imgctl_env(
        &[
            "build",
            "--spec",
            busybox_spec().to_str().unwrap(),
            "--tag",
            &tag,
            "--push",
        ],
        &[("DOCKER_CONFIG", config.path().to_str().unwrap())],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default();
    assert!(
        error.contains(&format!("pushing {tag} to 127.0.0.1:9 failed")),
        "{stderr}"
    );
    assert!(
        !stderr.contains("dXNlcjpwYXNz") && !stderr.contains("pass"),
        "a secret leaked: {stderr}"
    );
}

#[test]
fn push_uses_the_docker_config_credentials() {
    ensure_bases();
    let registry = LocalRegistry::start("pusher", "s3cret-pw");
    let mut guard = EngineGuard::default();
    let repo = format!("127.0.0.1:{}/imgctl-test/push", registry.port);
    let tag = format!("{repo}:{}", std::process::id());
    guard.image(&tag);
    let spec = busybox_spec();
    let spec = spec.to_str().unwrap();
    let config = tempfile::tempdir().unwrap();
    // A fixed creation time: both builds give one image, none is left dangling.
    let env = [
        ("DOCKER_CONFIG", config.path().to_str().unwrap()),
        ("SOURCE_DATE_EPOCH", "1700000000"),
    ];

    // Wrong password: refused by the registry, exit 1, and the secret is not shown.
    registry.write_docker_config(config.path(), "pusher", "wrong-pw");
    let out = imgctl_env(&["build", "--spec", spec, "--tag", &tag, "--push"], &env);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default();
    assert!(
        error.contains(&format!(
            "pushing {tag} to 127.0.0.1:{} failed",
            registry.port
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("wrong-pw"), "a secret leaked: {stderr}");

    // The right credentials from $DOCKER_CONFIG/config.json: pushed, and the registry has it.
    registry.write_docker_config(config.path(), "pusher", "s3cret-pw");
    let out = imgctl_env(
        &["build", "--spec", spec, "--tag", &tag, "--push", "--json"],
        &env,
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "push failed:\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["pushed"], serde_json::json!([tag]));
    let (status, body) = registry.get("/v2/imgctl-test/push/tags/list", "pusher", "s3cret-pw");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!("\"{}\"", std::process::id())),
        "{body}"
    );
}
