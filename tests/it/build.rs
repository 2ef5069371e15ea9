//! `imgctl build` against the real Docker engine (no mocks): a fast build
//! FROM a local busybox base, labels and the JSON report, a rebuild that hits
//! the layer cache, the failing-step error, Ctrl-C, the no-engine error,
//! `--dry-run`, and bad flags. Every image and container a test creates is
//! removed by an [`EngineGuard`], also when an assertion fails.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{imgctl_bin, one_error_line, repo_root, texts};

mod push;
mod refusals;

/// The local base images made by scripts/test-bases.sh.
pub const BUSYBOX_BASE: &str = "imgctl-test/busybox:latest";
/// The Debian bookworm minbase made by scripts/test-bases.sh.
pub const DEBIAN_BASE: &str = "imgctl-test/debian:bookworm";
/// Repository of the images these tests build (pid-suffixed tags).
const TEST_REPO: &str = "imgctl-test/it-build";
/// A socket nothing listens on.
pub const DEAD_SOCKET: &str = "unix:///tmp/nonexistent.sock";

/// The docker CLI, for inspection only (imgctl itself never calls it). The
/// CLI may be newer than the engine (Docker 20.10 speaks API 1.41).
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .env("DOCKER_API_VERSION", "1.41")
        .stdin(Stdio::null())
        .output()
        .expect("run the docker CLI")
}

/// Runs the docker CLI and returns its trimmed stdout; panics on failure.
pub fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "docker {args:?} failed: {stderr}");
    stdout.trim().to_string()
}

/// Makes the local base images once per test process (idempotent script).
pub fn ensure_bases() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let script = repo_root().join("scripts/test-bases.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .expect("run scripts/test-bases.sh");
        let (_, stderr) = texts(&out);
        assert!(
            out.status.success(),
            "scripts/test-bases.sh failed:\n{stderr}"
        );
        sweep_stale_test_images();
    });
}

/// Removes images of earlier test processes that died before their guards ran
/// (their tags carry the pid), keeping the engine's disk use bounded.
fn sweep_stale_test_images() {
    let listing = docker_ok(&["images", TEST_REPO, "--format", "{{.Repository}}:{{.Tag}}"]);
    for reference in listing.lines() {
        let pid = reference
            .rsplit(':')
            .next()
            .and_then(|t| t.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let _ = docker(&["rmi", "-f", "--no-prune", reference]);
        }
    }
}

/// Removes the images and containers it was told about when dropped.
#[derive(Default)]
pub struct EngineGuard {
    images: Vec<String>,
    containers: Vec<String>,
}

impl EngineGuard {
    /// Registers an image (tag or id) for removal.
    pub fn image(&mut self, name: &str) {
        self.images.push(name.to_string());
    }
    /// Registers a container (name or id) for removal.
    pub fn container(&mut self, name: &str) {
        self.containers.push(name.to_string());
    }
}

impl Drop for EngineGuard {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker(&["rm", "-f", "-v", c]);
            // A workstation's home volume (`imgctl up` makes NAME-home).
            let _ = docker(&["volume", "rm", "-f", &format!("{c}-home")]);
        }
        // --no-prune: an image's untagged parents are the classic builder's
        // cache chain, which builds of other tests running at the same time
        // may be using (removing one fails them: "failed to get digest").
        for i in self.images.iter().rev() {
            let _ = docker(&["rmi", "-f", "--no-prune", i]);
        }
    }
}

/// A tag unique to this process and test.
pub fn test_tag(name: &str) -> String {
    format!("{TEST_REPO}:{}-{name}", std::process::id())
}

/// The busybox fixture spec (its template builds FROM [`BUSYBOX_BASE`]).
pub fn busybox_spec() -> PathBuf {
    repo_root().join("tests/fixtures/specs/busybox.yaml")
}

/// Runs imgctl with extra environment variables.
fn imgctl_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(imgctl_bin());
    // These tests read the classic builder's text (`Running in`, intermediate
    // containers); on engines where `auto` picks BuildKit they ask for the
    // classic builder the docker CLI's way. tests/it/buildkit.rs covers BuildKit.
    cmd.args(args)
        .env("NO_COLOR", "1")
        .env("DOCKER_BUILDKIT", "0")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run imgctl")
}

fn labels_of(image: &str) -> BTreeMap<String, String> {
    let json = docker_ok(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config.Labels}}",
        image,
    ]);
    serde_json::from_str(&json).expect("labels JSON")
}

#[test]
fn busybox_build_has_labels_and_report() {
    ensure_bases();
    let mut guard = EngineGuard::default();
    let tag = test_tag("labels");
    let tag2 = test_tag("labels2");
    guard.image(&tag);
    guard.image(&tag2);
    let dir = tempfile::tempdir().unwrap();
    let report_path = dir.path().join("report.json");
    let spec = busybox_spec();
    let spec = spec.to_str().unwrap();

    // The plan's labels (the spec's pins plus OCI labels), without an engine.
    let out = imgctl_env(
        &[
            "build",
            "--spec",
            spec,
            "--dry-run",
            "--json",
            "--label",
            "team=vision",
        ],
        &[("DOCKER_HOST", DEAD_SOCKET)],
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "dry run failed: {stderr}");
    let plan: Value = serde_json::from_str(&stdout).expect("dry-run JSON");
    let planned: BTreeMap<String, String> = serde_json::from_value(plan["labels"].clone()).unwrap();

    let out = imgctl_env(
        &[
            "build",
            "--spec",
            spec,
            "--tag",
            &tag,
            "--tag",
            &tag2,
            "--label",
            "team=vision",
            "--build-arg",
            "IMGCTL_TEST_ARG=1",
            "--report",
            report_path.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "build failed:\n{stderr}");
    // Plain progress lines when stderr is not a terminal.
    assert!(stderr.contains("Step 1/"), "no plain step lines:\n{stderr}");

    let report: Value =
        serde_json::from_str(&stdout).expect("--json prints the report alone on stdout");
    let on_disk: Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).unwrap()).unwrap();
    assert_eq!(report, on_disk, "--report and --json differ");
    assert_eq!(report["schema_version"], 1);

    // The report against the engine's own view of the image.
    let id = docker_ok(&["image", "inspect", "--format", "{{.Id}}", &tag]);
    assert_eq!(report["image_id"], id.as_str());
    assert_eq!(
        docker_ok(&["image", "inspect", "--format", "{{.Id}}", &tag2]),
        id
    );
    assert_eq!(report["tags"], serde_json::json!([tag, tag2]));
    let size: u64 = docker_ok(&["image", "inspect", "--format", "{{.Size}}", &tag])
        .parse()
        .unwrap();
    assert!(size > 0);
    assert_eq!(report["size_bytes"].as_u64(), Some(size));
    assert!(report["duration_s"].as_f64().unwrap() > 0.0);
    let base_id = docker_ok(&["image", "inspect", "--format", "{{.Id}}", BUSYBOX_BASE]);
    // An imported base has no registry digest: the report names its local id.
    assert_eq!(report["base_digest"], base_id.as_str());
    assert_eq!(report["base_images"][0]["reference"], BUSYBOX_BASE);

    // Every planned label and pin is on the image, and the report's pins are the image's labels.
    let labels = labels_of(&tag);
    for (key, value) in &planned {
        if key == "org.opencontainers.image.created" {
            continue; // a timestamp: the dry run was earlier
        }
        assert_eq!(
            labels.get(key),
            Some(value),
            "label {key} missing or different"
        );
    }
    assert_eq!(labels.get("team").map(String::as_str), Some("vision"));
    assert_eq!(
        labels.get("org.opencontainers.image.base.digest"),
        Some(&base_id)
    );
    assert!(labels.contains_key("org.opencontainers.image.created"));
    let pins: BTreeMap<String, String> = serde_json::from_value(report["pins"].clone()).unwrap();
    assert_eq!(pins, labels);
    assert!(
        pins.iter()
            .any(|(k, v)| k.contains("torch") && v.contains("2.7.0")),
        "no torch pin among the labels: {pins:?}"
    );
    assert!(report["spec"]["sha256"].as_str().unwrap().len() == 64);

    // The image holds the imgctl binary the context carried.
    let version = docker_ok(&[
        "run",
        "--rm",
        "--entrypoint",
        "/bin/sh",
        &tag,
        "-c",
        "ls -l /usr/local/bin/imgctl",
    ]);
    assert!(version.contains("imgctl"), "{version}");
}

#[test]
fn rebuild_hits_the_cache() {
    ensure_bases();
    let mut guard = EngineGuard::default();
    let tag = test_tag("cache");
    guard.image(&tag);
    let spec = busybox_spec();
    let spec = spec.to_str().unwrap();
    // A fixed creation time (SOURCE_DATE_EPOCH) makes an unchanged rebuild identical.
    let env = [("SOURCE_DATE_EPOCH", "1700000000")];
    // A build-arg value of its own (not 1, so nothing fails) gives this test a
    // cache chain no concurrent test builds: the classic builder picks the
    // newest matching child image, so a twin layer made by another test between
    // the two builds would otherwise change the rebuilt image's id.
    let args = [
        "build",
        "--spec",
        spec,
        "--tag",
        &tag,
        "--build-arg",
        "IMGCTL_TEST_FAIL=rebuild-test",
        "--json",
    ];
    let first = imgctl_env(&args, &env);
    let (stdout, stderr) = texts(&first);
    assert!(first.status.success(), "first build failed:\n{stderr}");
    let first: Value = serde_json::from_str(&stdout).unwrap();

    let started = Instant::now();
    let second = imgctl_env(&args, &env);
    let elapsed = started.elapsed();
    let (stdout, stderr) = texts(&second);
    assert!(second.status.success(), "rebuild failed:\n{stderr}");
    let second: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        second["image_id"], first["image_id"],
        "an unchanged rebuild gave a new image"
    );
    assert_eq!(
        second["steps"]["executed"], 0,
        "steps ran again: {}",
        second["steps"]
    );
    let total = second["steps"]["total"].as_u64().unwrap();
    let cached = second["steps"]["cached"].as_u64().unwrap();
    assert!(cached > 0 && cached < total, "cached {cached} of {total}");
    assert!(stderr.contains("Using cache"), "{stderr}");
    // Cached steps cost no container runs: seconds, not the first build's time.
    assert!(
        elapsed < Duration::from_secs(30),
        "cached rebuild took {elapsed:?}"
    );
}

/// Runs a build expected to fail at a RUN step and checks the error: exit 1,
/// one `error:` line naming the step, the instruction and the exit code, the
/// step's last output lines (at most 20) before it, a hint, and no container
/// or tag left behind. Returns the tail lines.
pub(crate) fn check_failing_build(args: &[&str], tag: &str, exit_code: i64) -> Vec<String> {
    let mut full: Vec<&str> = vec!["build", "-v", "--tag", tag];
    full.extend_from_slice(args);
    let out = imgctl_env(&full, &[]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    // imgctl's own report follows the build's log (which -v prints raw, and
    // where uv's own `error:` lines appear): one error line there.
    let report = stderr
        .rfind("output of step ")
        .map_or(stderr.as_str(), |i| &stderr[i..]);
    let error = one_error_line(report);
    assert!(error.contains("build failed at step "), "{error}");
    assert!(
        error.contains(": RUN "),
        "the instruction is not named: {error}"
    );
    assert!(error.contains(&format!("exit code {exit_code}")), "{error}");
    let tail_header = stderr
        .lines()
        .position(|l| l.starts_with("output of step "))
        .unwrap_or_else(|| panic!("no output tail:\n{stderr}"));
    let tail: Vec<String> = stderr
        .lines()
        .skip(tail_header + 1)
        .take_while(|l| l.starts_with("  | "))
        .map(|l| l.trim_start_matches("  | ").to_string())
        .collect();
    assert!(!tail.is_empty() && tail.len() <= 20, "{tail:?}");
    assert!(stderr.contains("\nhint: "), "{stderr}");
    // The failed step's container was removed (forcerm), and nothing was tagged.
    for id in running_in_ids(&stderr) {
        assert!(
            !docker(&["inspect", &id]).status.success(),
            "container {id} left behind"
        );
    }
    assert!(
        !docker(&["image", "inspect", tag]).status.success(),
        "a failed build was tagged"
    );
    remove_step_images(&stderr);
    tail
}

#[test]
fn failing_run_step_reports_step_instruction_and_tail() {
    ensure_bases();
    let mut guard = EngineGuard::default();
    let tag = test_tag("fail");
    guard.image(&tag);

    // 31 lines of output then exit 3: the tail is the last 20, no more.
    let spec = busybox_spec();
    let tail = check_failing_build(
        &[
            "--spec",
            spec.to_str().unwrap(),
            "--build-arg",
            "IMGCTL_TEST_FAIL=1",
        ],
        &tag,
        3,
    );
    assert_eq!(tail.len(), 20, "{tail:?}");
    assert!(tail.iter().any(|l| l == "test output line 30"), "{tail:?}");
    assert!(!tail.iter().any(|l| l == "test output line 10"), "{tail:?}");

    // The real cu124 template on a base without apt: its first RUN fails.
    let tail = check_failing_build(&["--cuda", "12.4", "--base-image", BUSYBOX_BASE], &tag, 127);
    assert!(
        tail.iter()
            .any(|l| l.contains("apt-get") && l.contains("not found")),
        "{tail:?}"
    );
}

/// The intermediate container ids in a `-v` build log.
fn running_in_ids(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.trim().strip_prefix("---> Running in "))
        .map(|id| id.trim().to_string())
        .collect()
}

#[test]
fn ctrl_c_cancels_the_build_and_leaves_nothing() {
    ensure_bases();
    let _guard = EngineGuard::default();
    let tag = test_tag("cancel");
    let ca = "/etc/ssl/certs/ca-certificates.crt";
    // --no-cache: the apt step runs (seconds of network), so there is a step to interrupt.
    let mut child = Command::new(imgctl_bin())
        .args([
            "build",
            "-v",
            "--no-cache",
            "--cuda",
            "12.4",
            "--base-image",
            DEBIAN_BASE,
            "--ca-cert",
            ca,
            "--tag",
            &tag,
        ])
        .env("NO_COLOR", "1")
        .env("DOCKER_BUILDKIT", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start imgctl build");
    let stderr = child.stderr.take().unwrap();
    let pid = child.id() as libc::pid_t;
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut lines = Vec::new();
        let mut signalled = None;
        let mut in_run_step = false;
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap_or_default();
            if line.starts_with("Step ") {
                in_run_step = line.contains(" : RUN ");
            }
            if signalled.is_none() && in_run_step && line.trim().starts_with("---> Running in ") {
                // SIGINT, as Ctrl-C in a terminal sends, while a RUN container works.
                // SAFETY: kill(2) on our own child's pid has no memory effects.
                unsafe { libc::kill(pid, libc::SIGINT) };
                signalled = Some(Instant::now());
            }
            lines.push(line);
        }
        (lines, signalled)
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("imgctl build did not end within 300 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (lines, signalled) = reader.join().unwrap();
    let log = lines.join("\n");
    let signalled = signalled.unwrap_or_else(|| panic!("no step started:\n{log}"));
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(
        signalled.elapsed() < Duration::from_secs(30),
        "cancelling took {:?}",
        signalled.elapsed()
    );
    assert!(log.contains("interrupted"), "{log}");
    let ids = running_in_ids(&log);
    assert!(!ids.is_empty());
    for id in ids {
        assert!(
            !docker(&["inspect", &id]).status.success(),
            "container {id} left dangling:\n{log}"
        );
    }
    assert!(
        !docker(&["image", "inspect", &tag]).status.success(),
        "a cancelled build was tagged"
    );
    // The steps committed before the interruption stay as build cache (as with
    // `docker build`); --no-cache made them new, so remove them.
    remove_step_images(&log);
}

/// Removes the untagged step images a failed or cancelled build left (kept by
/// the engine as build cache), newest first, never a base image; an image
/// another build still uses is kept (no `-f`).
fn remove_step_images(log: &str) {
    let mut bases = Vec::new();
    for base in [BUSYBOX_BASE, DEBIAN_BASE] {
        bases.push(docker_ok(&[
            "image", "inspect", "--format", "{{.Id}}", base,
        ]));
    }
    for layer in layer_ids(log).iter().rev() {
        if !bases
            .iter()
            .any(|b| b.trim_start_matches("sha256:").starts_with(layer.as_str()))
        {
            let _ = docker(&["rmi", layer]);
        }
    }
}

/// The ids of the layers a `-v` build log says the build made (` ---> 0123abcd`),
/// not those it took from the cache (` ---> Using cache` before the id): those
/// are other builds' cache chain, and removing one while a concurrent build is
/// about to use it fails that build ("failed to get digest sha256:…").
fn layer_ids(log: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cached = false;
    for line in log.lines() {
        let Some(rest) = line.trim().strip_prefix("---> ") else {
            continue;
        };
        if rest == "Using cache" {
            cached = true;
        } else if !rest.is_empty() && rest.chars().all(|c| c.is_ascii_hexdigit()) {
            if !cached {
                ids.push(rest.to_string());
            }
            cached = false;
        }
    }
    ids
}

/// A local registry (Debian's `docker-registry`, the CNCF distribution
/// registry 2.8) with htpasswd auth, stopped when dropped.
pub struct LocalRegistry {
    child: std::process::Child,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    _dir: tempfile::TempDir,
    /// A kept storage's lock ([`LocalRegistry::start_kept`]), held while it
    /// serves.
    _lock: Option<std::fs::File>,
}

impl LocalRegistry {
    /// Starts one that lets `user` in with `password`.
    pub fn start(user: &str, password: &str) -> Self {
        Self::start_with(user, password, "")
    }

    /// Starts one that lets `user` in with `password`, with `http_extra`
    /// (indented lines of its config's `http:` section, e.g. `tls:`).
    pub fn start_with(user: &str, password: &str, http_extra: &str) -> Self {
        Self::start_on(user, password, http_extra, None)
    }

    /// Starts one whose storage outlives the test: `$IMGCTL_CACHE/NAME`
    /// (default `~/.cache/imgctl/NAME`), on `port`. Its blobs are kept, its
    /// manifests, tags (so referrers) and unfinished uploads cleared at start:
    /// an engine that pushed an image there before finds its layers and
    /// sends only what changed, as on a registry in daily use, instead of
    /// compressing and sending gigabytes again. Where another run holds the
    /// storage or the port is taken, one as [`LocalRegistry::start`] makes
    /// (a cold push). The storage is emptied past 16 GB.
    pub fn start_kept(user: &str, password: &str, name: &str, port: u16) -> Self {
        let cache = std::env::var_os("IMGCTL_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("imgctl")))
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/imgctl")
            });
        let root = cache.join(name);
        std::fs::create_dir_all(&root).unwrap();
        let lock = std::fs::File::create(root.join(".lock")).unwrap();
        let free = std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if imgctl::sys::fs::try_lock_exclusive(&lock).is_err() || !free {
            eprintln!(
                "registry: {} is in use or port {port} is taken: a fresh one",
                root.display()
            );
            return Self::start(user, password);
        }
        let store = root.join("docker/registry/v2");
        if dir_size(&store) > 16 << 30 {
            let _ = std::fs::remove_dir_all(&store);
        }
        clear_manifests(&store.join("repositories"));
        Self::start_on(user, password, "", Some((root, port, lock)))
    }

    fn start_on(
        user: &str,
        password: &str,
        http_extra: &str,
        kept: Option<(PathBuf, u16, std::fs::File)>,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let which = Command::new("sh")
            .args(["-c", "command -v docker-registry && command -v htpasswd"])
            .output()
            .unwrap();
        assert!(
            which.status.success(),
            "docker-registry and htpasswd are needed (scripts/setup.sh installs docker-registry and apache2-utils)"
        );
        // bcrypt is the only hash the registry's htpasswd auth accepts.
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", user, password])
            .output()
            .unwrap();
        assert!(htpasswd.status.success());
        std::fs::write(dir.path().join("htpasswd"), &htpasswd.stdout).unwrap();
        let (storage, port, lock) = match kept {
            Some((root, port, lock)) => (root, port, Some(lock)),
            None => {
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                (dir.path().to_path_buf(), port, None)
            }
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {storage}\nhttp:\n  addr: 127.0.0.1:{port}\n{http_extra}auth:\n  htpasswd:\n    realm: imgctl-test\n    path: {root}/htpasswd\n",
            storage = storage.display(),
            root = dir.path().display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start docker-registry");
        let registry = Self {
            child,
            port,
            _dir: dir,
            _lock: lock,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        registry
    }

    /// Writes `dir/config.json`, a docker config that logs `user` in to this
    /// registry with `password`; returns the `auth` string it holds.
    pub fn write_docker_config(&self, dir: &Path, user: &str, password: &str) -> String {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        std::fs::write(
            dir.join("config.json"),
            format!(
                r#"{{"auths": {{"127.0.0.1:{}": {{"auth": "{auth}"}}}}}}"#,
                self.port
            ),
        )
        .unwrap();
        auth
    }

    /// GET on the registry API with basic auth; returns (status, body).
    pub fn get(&self, path: &str, user: &str, password: &str) -> (u16, String) {
        let (status, _, body) = self.get_accepting(path, None, user, password);
        (status, body)
    }

    /// GET on the registry API with basic auth and, when given, an `Accept`
    /// header (the registry hides OCI manifests from clients that do not
    /// accept them);
    /// returns (status, the head's header lines, body).
    pub fn get_accepting(
        &self,
        path: &str,
        accept: Option<&str>,
        user: &str,
        password: &str,
    ) -> (u16, String, String) {
        use base64::Engine as _;
        use std::io::{Read, Write};
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic {auth}\r\n{accept}Connection: close\r\n\r\n").unwrap();
        let mut response = String::new();
        s.read_to_string(&mut response).unwrap();
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        (status, head.to_string(), body.to_string())
    }
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes every `_manifests` and `_uploads` folder under a registry's
/// `repositories` (its manifests, tags and unfinished uploads; the links to
/// its layers stay).
fn clear_manifests(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        match entry.file_name().to_str() {
            Some("_manifests" | "_uploads") => std::fs::remove_dir_all(&path).unwrap(),
            Some("_layers") => {}
            _ => clear_manifests(&path),
        }
    }
}

/// The bytes of the files under `dir` (0 when it is absent).
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// No registry (this machine has none) and a base the engine lacks: both
/// builders fail in one line naming the base as not pullable, with the
/// `--base-image` hint, not the engine's raw DNS error and "rerun with -v".
#[test]
fn a_base_that_cannot_be_pulled_is_named_by_both_builders() {
    let spec = busybox_spec();
    let tag = test_tag("nobase");
    for builder in ["classic", "buildkit"] {
        let out = imgctl_env(
            &[
                "build",
                "--spec",
                spec.to_str().unwrap(),
                "--base-image",
                "imgctl-test/absent:1",
                "--builder",
                builder,
                "--tag",
                &tag,
            ],
            &[],
        );
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{builder}: {stderr}");
        assert!(
            one_error_line(&stderr).contains("imgctl-test/absent:1 could not be pulled"),
            "{builder}: {stderr}"
        );
        assert!(
            stderr.contains("hint: ") && stderr.contains("--base-image"),
            "{stderr}"
        );
        assert!(!stderr.contains("rerun with -v"), "{builder}: {stderr}");
        assert!(!docker(&["image", "inspect", &tag]).status.success());
    }
}
