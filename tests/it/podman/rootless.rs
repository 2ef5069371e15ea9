//! imgctl on rootless Podman: a `podman system service` run as the test
//! user `imgctl-rootless` (scripts/setup.sh makes it, with subordinate uids
//! and gids), its socket at `$XDG_RUNTIME_DIR/podman/podman.sock` in a
//! folder of its own. The first test runs the full imgctl as root (it links
//! libtorch from root's cache), which changes nothing of what the engine
//! does: the rootless socket found where there is no Docker socket and
//! named `rootless`; a busybox build; `up` in its default user namespace
//! there (`keep-id:uid=1000,gid=1000`: the user is the image's user) with
//! the workspace's files the user's own; a port below 1024 refused in one line;
//! the memlock ulimit, which rootless Podman lowers to the user's hard limit
//! without a word. The second runs the front end as the user: `build
//! --push` to the local registry and `verify --image`.
use std::os::unix::fs::MetadataExt;

use super::*;

/// The user scripts/setup.sh makes for these tests.
pub(crate) const USER: &str = "imgctl-rootless";

/// Held by each test here for its whole run: two rootless services of the
/// same user, each with its own runtime folder, share one storage: with
/// both running, one's build failed with `identifier is not a container`
/// (measured; likely libpod's reboot check, which reads the runtime folder,
/// resetting the other's state).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits for [`ONE_AT_A_TIME`] (a test that panicked holding it leaves it usable).
pub(crate) fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Builds `dockerfile` as the test user into `image` in the storage of the
/// user's service at `runtime` (`podman build`, the user's own CLI).
pub(crate) fn build_as_user(runtime: &Path, image: &str, dockerfile: &str) {
    let context = tempfile::tempdir().unwrap();
    std::fs::write(context.path().join("Dockerfile"), dockerfile).unwrap();
    std::fs::set_permissions(
        context.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = as_user("podman", runtime)
        .args(["build", "-q", "-t", image, context.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "podman build (rootless): {}",
        texts(&out).1
    );
}

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
        Self::rootless_trusting(None)
    }

    /// [`PodmanService::rootless`] that pushes to the plain-HTTP registry
    /// at `registry` (`127.0.0.1:PORT`) when given, as
    /// [`PodmanService::rootful_trusting`].
    fn rootless_trusting(registry: Option<&str>) -> Self {
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
        if let Some(registry) = registry {
            let conf = dir.path().join("registries.conf");
            std::fs::write(
                &conf,
                format!("[[registry]]\nlocation = \"{registry}\"\ninsecure = true\n"),
            )
            .unwrap();
            cmd.env("CONTAINERS_REGISTRIES_CONF", &conf);
        }
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
    let _one = one_at_a_time();
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

    // up on rootless Podman: by default `--userns keep-id:uid=1000,gid=1000`,
    // the caller is the image's user (uid 1000) inside, so what it writes
    // in /workspace is the user's own on the host.
    let (uid, gid, _) = user();
    let image = tag("ws-rootless");
    build_as_user(
        &runtime,
        &image,
        &format!(
            "FROM {}\nLABEL io.imgctl.user=dev io.imgctl.uid=1000 io.imgctl.gid=1000\nCMD [\"sh\", \"-c\", \"echo shm=$(df -k /dev/shm | awk 'END {{print $2}}'); echo uid=$(id -u) memlock=$(ulimit -l); touch /workspace/made-inside; sleep 600\"]\n",
            crate::build::DEBIAN_BASE
        ),
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
    let out = up(&[]);
    let up_s = started.elapsed().as_secs_f64();
    let (stdout, stderr) = texts(&out);
    // The workstation and its image go before any assertion can fail.
    let down = || {
        imgctl_on(&service, &["down", "--volumes", "--time", "1", &name]);
        podman_user(&["rmi", "-f", &image]);
    };
    if out.status.code() != Some(0) {
        down();
        panic!("up on rootless Podman: {stderr}");
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
    assert_eq!(report["userns"], "keep-id:uid=1000,gid=1000", "{stdout}");
    assert!(
        stderr.contains("you are the image's user dev (uid 1000) inside"),
        "{stderr}"
    );
    assert_eq!(owner.ok(), Some(uid), "logs: {}", texts(&logs).0);
    assert!(texts(&logs).0.contains("uid=1000 "), "{}", texts(&logs).0);
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
        "rootless Podman: busybox build {build_s:.1} s, up (keep-id:uid=1000) {up_s:.1} s, memlock {hard_kib} KiB; a port below 1024: {error}"
    );
}

/// Removes images from the test user's storage when dropped.
struct UserImages<'a> {
    runtime: &'a Path,
    images: Vec<String>,
}

impl Drop for UserImages<'_> {
    fn drop(&mut self) {
        for image in &self.images {
            let _ = as_user("podman", self.runtime)
                .args(["rmi", "-f", image])
                .output();
        }
    }
}

/// A temporary folder the test user can read (and, with `owned`, write).
pub(crate) fn user_folder(owned: bool) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("h-podman-it-user-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    if owned {
        let (uid, gid, _) = user();
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    }
    dir
}

/// `build --push` and `verify --image` with imgctl run as the test user, as
/// a rootless user runs it: the front end (no libtorch, which neither needs
/// on the host), copied where the user can read it, reaching the user's
/// service by `DOCKER_HOST`. The pushed manifest carries its SBOM and
/// provenance; verify's container (the verify tests' Debian image with the
/// full imgctl) gets libtorch from a hard-linked copy of root's
/// site-packages the user can read, mounted where the binary's RUNPATH
/// looks (root's own folder is not the user's to mount).
#[test]
fn rootless_push_and_verify_image_run_as_the_user() {
    let _one = one_at_a_time();
    use crate::verify::image::{build_test_image, site_packages, BASE, TEST_IMAGE};
    crate::build::ensure_bases();
    let registry = crate::build::LocalRegistry::start("pusher", "s3cret-pw");
    let service = PodmanService::rootless_trusting(Some(&format!("127.0.0.1:{}", registry.port)));
    let runtime = service.dir.path().to_path_buf();
    load_rootless(crate::build::BUSYBOX_BASE, &runtime);
    load_rootless(BASE, &runtime);
    let mut images = UserImages {
        runtime: &runtime,
        images: vec![TEST_IMAGE.to_string()],
    };
    let (uid, gid, _) = user();
    // The front end, the spec and the registry login, readable by the user.
    let files = user_folder(false);
    let imgctl = files.path().join("imgctl");
    std::fs::copy(crate::linking::front_binary(), &imgctl).unwrap();
    let specs = crate::common::repo_root().join("tests/fixtures/specs");
    for file in ["busybox.yaml", "busybox.Dockerfile.j2"] {
        std::fs::copy(specs.join(file), files.path().join(file)).unwrap();
    }
    let config = user_folder(true);
    registry.write_docker_config(config.path(), "pusher", "s3cret-pw");
    for entry in std::fs::read_dir(config.path()).unwrap().flatten() {
        std::os::unix::fs::chown(entry.path(), Some(uid), Some(gid)).unwrap();
    }
    let as_the_user = |args: &[&str]| {
        as_user(imgctl.to_str().unwrap(), &runtime)
            .args(args)
            .env("DOCKER_HOST", service.address())
            .env("DOCKER_CONFIG", config.path())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };

    // build --push --attest: the SBOM and provenance written where the user
    // said, and attached to the pushed manifest.
    let attest = user_folder(true);
    let tag = std::process::id().to_string();
    let pushed = format!("127.0.0.1:{}/imgctl-test/rootless:{tag}", registry.port);
    images.images.push(pushed.clone());
    let spec = files.path().join("busybox.yaml");
    let started = Instant::now();
    let out = as_the_user(&[
        "build",
        "--spec",
        spec.to_str().unwrap(),
        "--tag",
        &pushed,
        "--push",
        "--attest",
        attest.path().to_str().unwrap(),
        "--json",
    ]);
    let push_s = started.elapsed().as_secs_f64();
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for file in ["sbom.cdx.json", "provenance.intoto.json"] {
        let path = attest.path().join(file);
        let meta = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(meta.uid(), uid, "{file} is not the user's");
        let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(json.is_object(), "{file}: {json}");
    }
    // No --verify: no verdict (it needs torch inside the image).
    assert!(!attest.path().join("verify.intoto.json").exists());
    assert!(
        stderr.contains(&format!("rootless at {} (DOCKER_HOST)", service.address())),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("build --json");
    super::assert_attached_to_pushed(registry.port, "imgctl-test/rootless", &tag, &report);

    // verify --image: the container's results come back, nothing is left.
    let (rt, engine) = super::connect(&service);
    rt.block_on(build_test_image(&engine.docker))
        .expect("build the verify test image on rootless Podman");
    let libs = user_folder(false);
    let linked = libs.path().join("site-packages");
    let started = Instant::now();
    let copy = Command::new("cp")
        .arg("-al")
        .arg(site_packages())
        .arg(&linked)
        .output()
        .unwrap();
    assert!(copy.status.success(), "cp -al: {}", texts(&copy).1);
    let link_s = started.elapsed().as_secs_f64();
    let mount = format!("{}:{}:ro", linked.display(), site_packages().display());
    let started = Instant::now();
    let out = as_the_user(&[
        "-v",
        "verify",
        "--image",
        TEST_IMAGE,
        "--expect-gpus",
        "0",
        "--json",
        "--mount",
        &mount,
    ]);
    let verify_s = started.elapsed().as_secs_f64();
    let (stdout, stderr) = texts(&out);
    let left = as_user("podman", &runtime)
        .args([
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("ancestor={TEST_IMAGE}"),
        ])
        .output()
        .unwrap();
    drop(images);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("rootless at {} (DOCKER_HOST)", service.address())),
        "{stderr}"
    );
    super::container_results(&stdout);
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "a container was left"
    );
    eprintln!(
        "rootless Podman, imgctl as the user: build --push {push_s:.1} s, site-packages hard-linked in {link_s:.1} s, verify --image {verify_s:.1} s"
    );
}
