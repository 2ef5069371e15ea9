//! The entrypoint's idle stop (`IMGCTL_IDLE_STOP`, #45 item 3), run with
//! sh on this host beside the real `imgctl idle-watch`.
use super::entrypoint::Scratch;
use super::*;

/// `IMGCTL_IDLE_STOP` (what `imgctl up --idle-stop` sets): refused before
/// anything starts when it is no duration, under 5 s, or the image has no
/// imgctl; set, the real `imgctl idle-watch` runs beside the services and,
/// with nothing in use, the entrypoint stops and exits 0 within the limit
/// plus a poll, saying why in the line `imgctl ps` reads.
#[test]
fn entrypoint_stops_an_idle_workstation() {
    let scratch = Scratch::new();
    let bare = format!("{}:/usr/bin:/bin", scratch.bin.display());
    let out = check_entrypoint(&[("IMGCTL_IDLE_STOP", "1h"), ("PATH", bare.as_str())], &[]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("IMGCTL_IDLE_STOP is set but this image has no imgctl"),
        "{stderr}"
    );
    std::os::unix::fs::symlink(imgctl_bin(), scratch.bin.join("imgctl")).unwrap();
    let path = scratch.path.as_str();
    for (value, message) in [
        (
            "soon",
            "IMGCTL_IDLE_STOP='soon' is not a duration of at least 5s",
        ),
        (
            "2s",
            "IMGCTL_IDLE_STOP='2s' is not a duration of at least 5s",
        ),
    ] {
        let out = check_entrypoint(&[("IMGCTL_IDLE_STOP", value), ("PATH", path)], &[]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(stderr.contains(message), "{value}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{value}: {stderr}");
    }
    let out = check_entrypoint(
        &[
            ("IMGCTL_IDLE_STOP", "90s"),
            ("IMGCTL_MODE", "none"),
            ("PATH", path),
        ],
        &[],
    );
    assert!(texts(&out).1.contains("idle_stop=90s ssh=no"), "{out:?}");

    // For real, as root's own user (the debug imgctl's libtorch lies under
    // /root, which the tests' other service user cannot reach).
    let user = if running_as_root() {
        "root"
    } else {
        SERVICE_USER
    };
    let t0 = Instant::now();
    let mut child = Command::new("sh")
        .arg(entrypoint())
        .env_clear()
        .env("PATH", path)
        .env("IMGCTL_MODE", "none")
        .env("IMGCTL_IDLE_STOP", "5s")
        .env("IMGCTL_USER", user)
        .env("IMGCTL_RUN_DIR", &scratch.run)
        .env("IMGCTL_WORKSPACE", &scratch.ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if t0.elapsed() > Duration::from_secs(40) {
            child.kill().unwrap();
            panic!(
                "the idle entrypoint still ran after 40 s: {:?}",
                child.wait_with_output()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let took = t0.elapsed();
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = texts(&out);
    assert_eq!(status.code(), Some(0), "{stderr}");
    // The limit, plus one poll (2 s), plus the services' stop.
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(5 + 2 + 8),
        "stopped after {took:?}: {stderr}"
    );
    assert!(
        stderr.contains("idle-stop: stops this workstation after 5s idle:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("imgctl-entrypoint: stopping (idle-stop: idle for 5s)"),
        "{stderr}"
    );
}
