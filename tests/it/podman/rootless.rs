//! imgctl on rootless Podman: a `podman system service` run as the test
//! user `imgctl-rootless` (scripts/setup.sh makes it, with subordinate uids
//! and gids), its socket at `$XDG_RUNTIME_DIR/podman/podman.sock` in a
//! folder of its own. imgctl itself runs as root here (it links libtorch
//! from root's cache), which changes nothing of what the engine does.
//! Covered: the rootless socket found where there is no Docker socket and
//! named `rootless`; a busybox build; `up --userns keep-id` with the
//! workspace's files the user's own; a port below 1024 refused in one line;
//! the memlock ulimit, which rootless Podman lowers to the user's hard limit
//! without a word.
use std::os::unix::fs::MetadataExt;

use super::*;

/// The user scripts/setup.sh makes for these tests.
pub(crate) const USER: &str = "imgctl-rootless";

/// The test user's uid, gid and home; panics naming setup.sh when missing.
pub(crate) fn user() -> (u32, u32, PathBuf) {
    let out = Command::new("getent")
        .args(["passwd", USER])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let fields: Vec<&str> = line.split(':').collect();
    assert!(
        fields.len() >= 6,
        "no user {USER}: run scripts/setup.sh (it makes the rootless Podman test user)"
    );
    (
        fields[2].parse().unwrap(),
        fields[3].parse().unwrap(),
        PathBuf::from(fields[5]),
    )
}

/// A command run as the test user, with its runtime folder `runtime`.
pub(crate) fn as_user(program: &str, runtime: &Path) -> Command {
    let (uid, gid, home) = user();
    let mut cmd = Command::new("setpriv");
    cmd.args([
        &format!("--reuid={uid}"),
        &format!("--regid={gid}"),
        "--init-groups",
        "--",
        program,
    ])
    .current_dir(&home)
    .env("HOME", &home)
    .env("XDG_RUNTIME_DIR", runtime)
    .env_remove("XDG_DATA_HOME")
    .env_remove("XDG_CONFIG_HOME");
    cmd
}

impl PodmanService {
    /// Starts the service as the test user, on
    /// `$XDG_RUNTIME_DIR/podman/podman.sock` of a fresh runtime folder.
    pub(crate) fn rootless() -> Self {
        let (uid, gid, _) = user();
        let dir = tempfile::Builder::new()
            .prefix("h-podman-it-rootless-")
            .tempdir()
            .unwrap();
        std::fs::create_dir(dir.path().join("podman")).unwrap();
        for p in [dir.path().to_path_buf(), dir.path().join("podman")] {
            std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        }
        let mut cmd = as_user("podman", dir.path());
        Self::start(dir, "podman/podman.sock", &mut cmd)
    }
}

/// Copies a Docker engine image into the test user's storage once.
pub(crate) fn load_rootless(image: &str, runtime: &Path) {
    let exists = as_user("podman", runtime)
        .args(["image", "exists", image])
        .status()
        .unwrap();
    if exists.success() {
        return;
    }
    let mut load = as_user("podman", runtime)
        .args(["load", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut save = Command::new("docker")
        .args(["save", image])
        .env("DOCKER_API_VERSION", "1.41")
        .stdout(load.stdin.take().unwrap())
        .spawn()
        .unwrap();
    assert!(save.wait().unwrap().success(), "docker save {image}");
    let out = load.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "podman load (rootless): {}",
        texts(&out).1
    );
}

#[test]
fn rootless_podman_is_found_named_builds_and_keeps_the_workspace_the_users() {
    crate::build::ensure_bases();
    let service = PodmanService::rootless();
    let runtime = service.dir.path().to_path_buf();
    load_rootless(crate::build::BUSYBOX_BASE, &runtime);
    load_rootless(crate::build::DEBIAN_BASE, &runtime);
    let podman_user = |args: &[&str]| as_user("podman", &runtime).args(args).output().unwrap();

    // Found under XDG_RUNTIME_DIR where there is no Docker socket; a build.
    let spec = crate::build::busybox_spec();
    let built = tag("rootless");
    let started = Instant::now();
    let out = imgctl_without_docker_socket(
        None,
        Some(&runtime),
        &["build", "--spec", spec.to_str().unwrap(), "--tag", &built],
    );
    let build_s = started.elapsed().as_secs_f64();
    let (_, stderr) = texts(&out);
    let _ = podman_user(&["rmi", "-f", &built]);
    assert!(out.status.success(), "{stderr}");
    let line = format!(
        "(API compat 1.41), rootless at unix://{}/podman/podman.sock (no Docker socket; Podman's rootless socket), builder classic",
        runtime.display()
    );
    assert!(stderr.contains("engine: Podman 4."), "{stderr}");
    assert!(stderr.contains(&line), "wanted {line:?} in:\n{stderr}");

    // up --userns keep-id: the image's user is the caller's uid, so what it
    // writes in /workspace is the user's own on the host.
    let (uid, gid, _) = user();
    let image = tag("ws-rootless");
    let context = tempfile::tempdir().unwrap();
    std::fs::write(
        context.path().join("Dockerfile"),
        format!(
            "FROM {}\nLABEL io.imgctl.user=dev io.imgctl.uid=1000\nCMD [\"sh\", \"-c\", \"echo shm=$(df -k /dev/shm | awk 'END {{print $2}}'); echo uid=$(id -u) memlock=$(ulimit -l); touch /workspace/made-inside; sleep 600\"]\n",
            crate::build::DEBIAN_BASE
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        context.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = podman_user(&[
        "build",
        "-q",
        "-t",
        &image,
        context.path().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "podman build (rootless): {}",
        texts(&out).1
    );
    let workspace = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(workspace.path(), Some(uid), Some(gid)).unwrap();
    let name = format!("h-podman-it-rl-{}", std::process::id());
    let up = |extra: &[&str]| {
        let mut args = vec![
            "up",
            "--name",
            &name,
            "--mount",
            workspace.path().to_str().unwrap(),
            "--no-verify",
            "--wait",
            "30",
            "--json",
        ];
        args.extend_from_slice(extra);
        args.push(&image);
        imgctl_on(&service, &args)
    };
    // A port below 1024: the rootless engine may not bind it; one line, nothing left.
    let out = up(&["--jupyter-port", "80"]);
    let (_, low_port) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{low_port}");
    let error = crate::common::one_error_line(&low_port).to_string();
    assert!(error.contains("80"), "{low_port}");
    assert_eq!(
        podman_user(&["ps", "-a", "-q", "--filter", &format!("name=^{name}$")]).stdout,
        b""
    );

    let started = Instant::now();
    let out = up(&["--userns", "keep-id"]);
    let up_s = started.elapsed().as_secs_f64();
    let (stdout, stderr) = texts(&out);
    // The workstation and its image go before any assertion can fail.
    let down = || {
        imgctl_on(&service, &["down", "--volumes", "--time", "1", &name]);
        podman_user(&["rmi", "-f", &image]);
    };
    if out.status.code() != Some(0) {
        down();
        panic!("up --userns keep-id on rootless Podman: {stderr}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let made = workspace.path().join("made-inside");
    while !made.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let logs = imgctl_on(&service, &["logs", &name]);
    let owner = std::fs::metadata(&made).map(|m| m.uid());
    down();
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("up --json");
    assert_eq!(report["gpus"], "none", "{stdout}");
    assert_eq!(owner.ok(), Some(uid), "logs: {}", texts(&logs).0);
    assert!(
        texts(&logs).0.contains(&format!("uid={uid} ")),
        "{}",
        texts(&logs).0
    );
    // /dev/shm is a tmpfs of the size asked for (16 GiB): no cgroup needed.
    assert!(
        texts(&logs).0.contains(&format!("shm={}\n", 16 << 20)),
        "{}",
        texts(&logs).0
    );
    // memlock=-1 asked for: rootless Podman lowers it to the user's hard
    // limit (the service's) without a word, so the container has that.
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", service.child.id())).unwrap();
    let hard_kib = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .and_then(|l| l.split_whitespace().nth(4))
        .map(|v| match v {
            "unlimited" => v.to_string(),
            bytes => (bytes.parse::<u64>().unwrap() / 1024).to_string(),
        })
        .unwrap();
    assert!(
        texts(&logs).0.contains(&format!("memlock={hard_kib}\n")),
        "memlock: wanted {hard_kib} KiB in {}",
        texts(&logs).0
    );
    eprintln!(
        "rootless Podman: busybox build {build_s:.1} s, up --userns keep-id {up_s:.1} s, memlock {hard_kib} KiB; a port below 1024: {error}"
    );
}
