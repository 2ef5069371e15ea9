//! What build refuses or says before any engine work: no engine, bad flags, report
//! paths, and the dry run's Dockerfile and context.
use super::*;

#[test]
fn no_engine_names_the_socket_in_one_line() {
    let out = imgctl_env(
        &["build", "--spec", busybox_spec().to_str().unwrap()],
        &[("DOCKER_HOST", DEAD_SOCKET)],
    );
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty());
    let error = one_error_line(&stderr);
    assert!(error.contains("/tmp/nonexistent.sock"), "{error}");
    assert!(stderr.contains("\nhint: "), "{stderr}");
    assert!(
        !stderr.contains("caused by"),
        "more than one line of error: {stderr}"
    );
}

#[test]
fn dry_run_prints_dockerfile_and_context_without_an_engine() {
    let spec = busybox_spec();
    let out = imgctl_env(
        &[
            "build",
            "--spec",
            spec.to_str().unwrap(),
            "--dry-run",
            "--tag",
            "imgctl-test/dry:run",
        ],
        &[("DOCKER_HOST", DEAD_SOCKET)],
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("FROM ")), "{stdout}");
    // The listing: the Dockerfile and the imgctl binary with its real size.
    let size = std::fs::metadata(imgctl_bin()).unwrap().len();
    assert!(stderr.contains("build context ("), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.trim_end().ends_with(" Dockerfile")),
        "{stderr}"
    );
    let bin_line = stderr
        .lines()
        .find(|l| l.trim_end().ends_with(" imgctl"))
        .unwrap_or_else(|| panic!("imgctl not listed:\n{stderr}"));
    assert!(bin_line.trim_start().starts_with("0755"), "{bin_line}");
    assert!(stderr.contains("nothing was built"), "{stderr}");
    assert!(!docker(&["image", "inspect", "imgctl-test/dry:run"])
        .status
        .success());

    let out = imgctl_env(
        &[
            "build",
            "--spec",
            spec.to_str().unwrap(),
            "--dry-run",
            "--json",
            "--build-arg",
            "A=1",
        ],
        &[("DOCKER_HOST", DEAD_SOCKET)],
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let plan: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(plan["schema_version"], 1);
    assert_eq!(plan["build_args"]["A"], "1");
    assert!(plan["dockerfile"].as_str().unwrap().contains("FROM "));
    let listed: Vec<&str> = plan["context"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(listed.first(), Some(&"Dockerfile"));
    assert!(listed.contains(&"imgctl"), "{listed:?}");
    let bin = plan["context"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "imgctl")
        .unwrap();
    assert_eq!(bin["size"].as_u64(), Some(size));
}

#[test]
fn bad_flags_are_usage_errors_before_any_engine_work() {
    let spec = busybox_spec();
    let spec = spec.to_str().unwrap();
    for (flag, value, needle) in [
        ("--build-arg", "NOVALUE", "--build-arg"),
        ("--label", "=x", "--label"),
        ("--tag", "Not A Tag", "--tag"),
    ] {
        // A dead socket: reaching the engine would be exit 1, not 2.
        let out = imgctl_env(
            &["build", "--spec", spec, flag, value],
            &[("DOCKER_HOST", DEAD_SOCKET)],
        );
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        let error = stderr.lines().next().unwrap_or_default();
        assert!(
            error.starts_with("error: ") && error.contains(needle),
            "{error}"
        );
        assert!(stderr.contains("hint: "), "{stderr}");
    }
}

#[test]
fn report_paths_are_checked_before_any_engine_work() {
    // A directory or a missing folder as --report was found only after the
    // build (a built image reported as a failure); now it is a usage error
    // before the engine is asked anything (the dead socket is never reached).
    let dir = tempfile::tempdir().unwrap();
    let spec = busybox_spec();
    let missing = dir.path().join("no/such/report.json");
    for (path, says) in [
        (
            dir.path().to_path_buf(),
            "is a directory; it takes a file path".to_string(),
        ),
        (
            missing.clone(),
            format!(
                "its folder {} does not exist",
                missing.parent().unwrap().display()
            ),
        ),
    ] {
        let out = imgctl_env(
            &[
                "build",
                "--spec",
                spec.to_str().unwrap(),
                "--report",
                path.to_str().unwrap(),
            ],
            &[("DOCKER_HOST", DEAD_SOCKET)],
        );
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let first = format!("error: --report {}", path.display());
        assert!(stderr.starts_with(&first), "{stderr}");
        assert!(stderr.lines().next().unwrap().contains(&says), "{stderr}");
        assert!(
            stderr.contains("\nhint: --report takes the path of a file"),
            "{stderr}"
        );
    }
}
