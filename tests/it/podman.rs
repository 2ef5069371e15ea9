//! imgctl on Podman (Debian's 4.3, installed by scripts/setup.sh) through its
//! Docker-compatible API, rootful: each test starts its own `podman system
//! service` on a socket in a temporary folder and stops it when done. Images
//! come from the Docker engine's test bases (`docker save | podman load`),
//! as no registry is reachable. Covered: finding Podman's socket where there
//! is no Docker socket (imgctl runs in a mount namespace whose `/run` is a
//! fresh tmpfs, so `/var/run/docker.sock` is not there) and the `engine:`
//! line naming it, also for `--version -v`; a build of the busybox test
//! image and a failing step of it (not the end-to-end image: that one is
//! made on the Docker engine by tests/it/image_e2e, whose Podman step copies
//! it here for `up`, Jupyter, SSH and `build --attest`); `verify --image`
//! and `sbom` with the verify tests' Debian image; `up`/`ps`/`logs`/`down`
//! with a labelled busybox image, and GPU requests refused where no CDI spec
//! names them (tests/it/cdi/podman.rs gives GPUs by CDI through libpod's
//! create).
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{imgctl_bin, texts};

mod defaults;
pub(crate) mod rootless;

/// The Podman CLI (the same storage as the rootful service), for set-up and
/// inspection only; imgctl itself talks to the service.
pub fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run podman (scripts/setup.sh installs it)")
}

/// The service's containers.conf, for the test machines: their cgroups are
/// hybrid (v1 controllers beside an empty v2 tree), which crun 1.8 refuses
/// ("cgroups in hybrid mode not supported") and runc takes; and they lack
/// CAP_SYS_RESOURCE, so the ulimits rootful Podman sets by default (nofile
/// 1048576, nproc 4194304) are refused by the runtime ("setrlimit: Operation
/// not permitted"): these are limits the machine accepted (measured: nproc
/// 20000 passes, 65536 is refused; nofile 20000 is its hard limit). On a
/// cgroup v2 host with the capability neither is needed.
const CONTAINERS_CONF: &str = r#"[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]
[engine]
runtime = "runc"
"#;

/// A rootful `podman system service` on its own socket, stopped when dropped.
pub struct PodmanService {
    child: Child,
    /// Holds the socket, the service's log and its containers.conf.
    pub dir: tempfile::TempDir,
    socket: PathBuf,
}

impl PodmanService {
    /// Starts the rootful service and waits (up to 30 s) for its socket to answer.
    pub fn rootful() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("h-podman-it-")
            .tempdir()
            .unwrap();
        let mut cmd = Command::new("podman");
        Self::start(dir, "podman.sock", &mut cmd)
    }

    /// [`PodmanService::rootful`] that pushes to the plain-HTTP registry at
    /// `registry` (`127.0.0.1:PORT`): Podman, unlike Docker, does not take a
    /// loopback registry as insecure by itself; its registries.conf says so.
    pub fn rootful_trusting(registry: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("h-podman-it-")
            .tempdir()
            .unwrap();
        let conf = dir.path().join("registries.conf");
        std::fs::write(
            &conf,
            format!("[[registry]]\nlocation = \"{registry}\"\ninsecure = true\n"),
        )
        .unwrap();
        let mut cmd = Command::new("podman");
        cmd.env("CONTAINERS_REGISTRIES_CONF", &conf);
        Self::start(dir, "podman.sock", &mut cmd)
    }

    /// A rootful service with `conf` as its containers.conf (None: none,
    /// the package's defaults; /etc/containers has no containers.conf here).
    pub fn rootful_with(conf: Option<&str>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("h-podman-it-")
            .tempdir()
            .unwrap();
        let mut cmd = Command::new("podman");
        Self::start_with(dir, "podman.sock", &mut cmd, conf)
    }

    /// Starts `podman` (in `cmd`) as a service on `dir/socket`, with the
    /// test machines' containers.conf, and waits for it.
    fn start(dir: tempfile::TempDir, socket: &str, cmd: &mut Command) -> Self {
        Self::start_with(dir, socket, cmd, Some(CONTAINERS_CONF))
    }

    /// [`Self::start`] with `conf` (None: the package's defaults).
    fn start_with(
        dir: tempfile::TempDir,
        socket: &str,
        cmd: &mut Command,
        conf: Option<&str>,
    ) -> Self {
        let socket = dir.path().join(socket);
        let log = std::fs::File::create(dir.path().join("service.log")).unwrap();
        let path = dir.path().join("containers.conf");
        std::fs::write(&path, conf.unwrap_or("")).unwrap();
        if conf.is_none() {
            cmd.env_remove("CONTAINERS_CONF");
        } else {
            cmd.env("CONTAINERS_CONF", &path);
        }
        let child = cmd
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", socket.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start podman system service (scripts/setup.sh installs podman)");
        let service = Self {
            child,
            dir,
            socket: socket.clone(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "podman system service did not listen on {} within 30 s: {}",
                socket.display(),
                std::fs::read_to_string(service.dir.path().join("service.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        service
    }

    /// The socket's path.
    pub fn socket(&self) -> PathBuf {
        self.socket.clone()
    }

    /// The socket as an engine address.
    pub fn address(&self) -> String {
        format!("unix://{}", self.socket().display())
    }
}

impl Drop for PodmanService {
    fn drop(&mut self) {
        // SIGTERM: the service stops listening and exits. Rootless Podman
        // runs again inside its user namespace as another process, which
        // the TERM to the first does not reach: every process whose command
        // line names this service's socket (in its own temporary folder) is
        // told too.
        let socket = self.socket.display().to_string();
        let mut pids = vec![self.child.id().to_string()];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&socket) && !pids.contains(&name) {
                pids.push(name);
            }
        }
        for pid in &pids {
            let _ = Command::new("kill").args(["-TERM", pid]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes the Podman images it was told about when dropped.
#[derive(Default)]
pub struct PodmanImages(Vec<String>);

impl PodmanImages {
    /// Registers an image for removal.
    pub fn add(&mut self, name: &str) {
        self.0.push(name.to_string());
    }
}

impl Drop for PodmanImages {
    fn drop(&mut self) {
        for image in &self.0 {
            let _ = podman(&["rmi", "-f", image]);
        }
    }
}

/// Removes a workstation (and its home volume) from Podman's storage when
/// dropped, through the Podman CLI (the service may be gone by then).
pub struct PodmanWorkstation(pub String);

impl Drop for PodmanWorkstation {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "1", &self.0]);
        let _ = podman(&["volume", "rm", "-f", &format!("{}-home", self.0)]);
    }
}

/// Copies a Docker engine image into Podman's storage once (kept there,
/// like the Docker engine keeps its test bases).
pub fn load_into_podman(image: &str) {
    if podman(&["image", "exists", image]).status.success() {
        return;
    }
    let out = Command::new("sh")
        .args(["-c", "docker save \"$0\" | podman load", image])
        .env("DOCKER_API_VERSION", "1.41")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    assert!(
        out.status.success(),
        "docker save {image} | podman load: {stderr}"
    );
}

/// Runs imgctl where the Docker socket is not there: in a mount namespace of
/// its own whose `/run` (and so `/var/run`) is an empty tmpfs, with
/// `/run/podman/podman.sock` linked to `rootful` when given, and
/// `XDG_RUNTIME_DIR` as given. No `DOCKER_HOST`, `DOCKER_CONTEXT` nor
/// docker config (a fresh `DOCKER_CONFIG`).
fn imgctl_without_docker_socket(
    rootful: Option<&Path>,
    xdg_runtime_dir: Option<&Path>,
    args: &[&str],
) -> Output {
    let config = tempfile::tempdir().unwrap();
    let link = rootful.map_or(String::new(), |s| {
        format!(
            "mkdir -p /run/podman && ln -s '{}' /run/podman/podman.sock && ",
            s.display()
        )
    });
    let script = format!("mount -t tmpfs h-podman-it /run && {link}exec \"$@\"");
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ])
    .arg(imgctl_bin())
    .args(args)
    .env_remove("DOCKER_HOST")
    .env_remove("DOCKER_CONTEXT")
    .env_remove("XDG_RUNTIME_DIR")
    .env("DOCKER_CONFIG", config.path())
    .env("NO_COLOR", "1")
    .stdin(Stdio::null());
    if let Some(dir) = xdg_runtime_dir {
        cmd.env("XDG_RUNTIME_DIR", dir);
    }
    cmd.output().expect("run unshare (util-linux)")
}

/// A tag unique to this process and test.
pub(crate) fn tag(name: &str) -> String {
    format!("localhost/h-podman-it:{}-{name}", std::process::id())
}

#[test]
fn podman_is_found_without_a_docker_socket_named_and_builds_busybox() {
    crate::build::ensure_bases();
    load_into_podman(crate::build::BUSYBOX_BASE);
    let service = PodmanService::rootful();
    let mut images = PodmanImages::default();
    let spec = crate::build::busybox_spec();
    let built = tag("found");
    images.add(&built);
    let started = Instant::now();
    let out = imgctl_without_docker_socket(
        Some(&service.socket()),
        None,
        &["build", "--spec", spec.to_str().unwrap(), "--tag", &built],
    );
    let build_s = started.elapsed().as_secs_f64();
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let version =
        String::from_utf8_lossy(&podman(&["version", "--format", "{{.Server.Version}}"]).stdout)
            .trim()
            .to_string();
    let line = format!(
        "engine: Podman {version} (API compat 1.41), rootful at unix:///run/podman/podman.sock (no Docker socket; Podman's rootful socket), builder classic"
    );
    assert!(stderr.contains(&line), "wanted {line:?} in:\n{stderr}");
    // `--version -v` says the same engine line (on stdout, after the version).
    let out = imgctl_without_docker_socket(Some(&service.socket()), None, &["--version", "-v"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "imgctl {}\n{}\n",
            env!("CARGO_PKG_VERSION"),
            line.trim_end_matches(", builder classic")
        )
    );
    // The image is in Podman's storage, with the spec's labels.
    let title = podman(&[
        "image",
        "inspect",
        "--format",
        "{{index .Labels \"org.opencontainers.image.title\"}}",
        &built,
    ]);
    assert_eq!(
        String::from_utf8_lossy(&title.stdout).trim(),
        "imgctl-busybox-test"
    );
    eprintln!("busybox build on rootful Podman: {build_s:.1} s");

    // BuildKit (by name, or through a build-only CA) is refused in one line,
    // before anything is sent: buildah has no BuildKit session to wait for.
    for extra in [
        &["--builder", "buildkit"][..],
        &["--ca-cert-secret", "/etc/ssl/certs/ca-certificates.crt"][..],
    ] {
        let mut args = vec!["build", "--spec", spec.to_str().unwrap(), "--tag", &built];
        args.extend_from_slice(extra);
        let started = Instant::now();
        let out = on_service(&service).args(&args).output().unwrap();
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert_eq!(
            crate::common::one_error_line(&stderr),
            "error: Podman's Docker-compatible build is buildah's, which has no BuildKit API (no secret or cache mounts)",
            "{stderr}"
        );
        assert!(
            stderr.contains("hint: build with --builder classic"),
            "{stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{extra:?} took {:?}",
            started.elapsed()
        );
    }

    // A failing step (buildah's `STEP 3/9:` lines and `exit status 3`): the
    // step, its exit code and its output's tail, as on Docker.
    let out = on_service(&service)
        .args(["build", "--spec", spec.to_str().unwrap(), "--tag", &built])
        .args(["--build-arg", "IMGCTL_TEST_FAIL=1"])
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error = crate::common::one_error_line(&stderr);
    assert!(
        error.starts_with("error: build failed at step 3/")
            && error.contains(" with exit code 3: RUN "),
        "{stderr}"
    );
    assert!(stderr.contains("  | test output line 30\n"), "{stderr}");
    assert!(
        stderr.contains("hint: the step's last output lines are above"),
        "{stderr}"
    );

    // No rootful socket: the rootless one, under XDG_RUNTIME_DIR.
    let runtime = tempfile::tempdir().unwrap();
    std::fs::create_dir(runtime.path().join("podman")).unwrap();
    std::os::unix::fs::symlink(service.socket(), runtime.path().join("podman/podman.sock"))
        .unwrap();
    let out = imgctl_without_docker_socket(
        None,
        Some(runtime.path()),
        &[
            "-v",
            "verify",
            "--image",
            "h-podman-it/none:x",
            "--expect-gpus",
            "0",
        ],
    );
    let (_, stderr) = texts(&out);
    let address = format!("unix://{}/podman/podman.sock", runtime.path().display());
    assert!(
        stderr.contains(&format!(
            "at {address} (no Docker socket; Podman's rootless socket)"
        )),
        "{stderr}"
    );
    // Nothing at all: the Docker socket is named, and how to start either.
    let out = imgctl_without_docker_socket(
        None,
        None,
        &["verify", "--image", "x:1", "--expect-gpus", "0"],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: cannot connect to the Docker engine at unix:///var/run/docker.sock"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("podman.socket"), "{stderr}");
    // --version -v there: the version, and that no engine was found (exit 0).
    let out = imgctl_without_docker_socket(None, None, &["--version", "-v"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[1].starts_with(
            "engine: none found (cannot connect to the Docker engine at unix:///var/run/docker.sock: "
        ),
        "{stdout}"
    );
}

/// `verify --image --json`'s report in `stdout`, checked: the checks ran in
/// the container (`host.container` passed) and its own results came back
/// (no NVML in there: `nvml.driver` skipped).
pub(crate) fn container_results(stdout: &str) -> serde_json::Value {
    let report: serde_json::Value = serde_json::from_str(stdout).expect("verify's JSON");
    assert_eq!(report["context"], "container", "{stdout}");
    let status = |id: &str| {
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .map(|r| r["status"].as_str().unwrap().to_string())
    };
    assert_eq!(
        status("host.container").as_deref(),
        Some("pass"),
        "{stdout}"
    );
    assert_eq!(status("nvml.driver").as_deref(), Some("skip"), "{stdout}");
    report
}

/// A runtime and imgctl's connection to `service` (as `DOCKER_HOST` names it).
pub(crate) fn connect(
    service: &PodmanService,
) -> (tokio::runtime::Runtime, imgctl::docker::engine::Engine) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let endpoint = imgctl::docker::endpoint::Endpoint {
        address: service.address(),
        context: None,
        origin: imgctl::docker::endpoint::Origin::HostEnv,
    };
    let engine = rt
        .block_on(imgctl::docker::engine::connect_to(endpoint))
        .expect("connect to the Podman service");
    (rt, engine)
}

#[test]
fn verify_image_runs_on_podman_and_removes_its_container() {
    use crate::verify::image::{build_test_image, mount_arg, BASE, TEST_IMAGE};
    crate::build::ensure_bases();
    load_into_podman(BASE);
    let service = PodmanService::rootful();
    let mut images = PodmanImages::default();
    images.add(TEST_IMAGE);
    let (rt, engine) = connect(&service);
    assert_eq!(engine.info.product, imgctl::docker::engine::Product::Podman);
    assert!(!engine.info.rootless);
    rt.block_on(build_test_image(&engine.docker))
        .expect("build the verify test image on Podman");
    let mount = mount_arg();
    let started = Instant::now();
    let out = on_service(&service)
        .args([
            "-v",
            "verify",
            "--image",
            TEST_IMAGE,
            "--expect-gpus",
            "0",
            "--json",
        ])
        .args(["--mount", &mount])
        .output()
        .unwrap();
    let verify_s = started.elapsed().as_secs_f64();
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "engine: Podman {} (API compat 1.41), rootful at {} (DOCKER_HOST)",
            engine.info.version,
            service.address()
        )),
        "{stderr}"
    );
    let report = container_results(&stdout);
    // No GPU was asked for (--expect-gpus 0), and the report says so.
    assert_eq!(report["gpu_api"], "none", "{stdout}");
    // No container of the image is left.
    let left = podman(&[
        "ps",
        "-a",
        "-q",
        "--filter",
        &format!("ancestor={TEST_IMAGE}"),
    ]);
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "a container was left behind"
    );
    eprintln!("verify --image on rootful Podman: {verify_s:.1} s");
    // sbom reads the same image through a container of it.
    let out = on_service(&service)
        .args(["sbom", TEST_IMAGE])
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let sbom: serde_json::Value = serde_json::from_str(&stdout).expect("the SBOM's JSON");
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    assert!(
        sbom["components"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["purl"]
                .as_str()
                .is_some_and(|p| p.starts_with("pkg:deb/debian/apt@"))),
        "{stdout}"
    );
}

/// Runs imgctl against `service` (`DOCKER_HOST`), with an empty `HOME`.
pub(crate) fn imgctl_on(service: &PodmanService, args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    on_service(service)
        .args(args)
        .env("HOME", home.path())
        .env_remove("IMGCTL_CDI_KIND")
        .output()
        .unwrap()
}

/// This run's imgctl pointed at `service` (`DOCKER_HOST`), plain output, no
/// standard input: a command to add arguments to.
pub(crate) fn on_service(service: &PodmanService) -> Command {
    let mut c = Command::new(imgctl_bin());
    c.env("DOCKER_HOST", service.address())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    c
}

#[test]
fn up_ps_logs_down_on_podman_with_the_busybox_image() {
    crate::build::ensure_bases();
    load_into_podman(crate::build::BUSYBOX_BASE);
    let service = PodmanService::rootful();
    let mut images = PodmanImages::default();
    // The labels `up` looks for, as tests/it/workstation.rs's labelled image
    // (no Jupyter nor SSH in busybox: --no-verify; no healthcheck).
    let image = tag("ws");
    images.add(&image);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!(
            "FROM {}\nLABEL io.imgctl.user=dev io.imgctl.uid=1000\nCMD [\"sh\", \"-c\", \"echo h-podman-ws-started; sleep 600\"]\n",
            crate::build::BUSYBOX_BASE
        ),
    )
    .unwrap();
    let out = podman(&["build", "-q", "-t", &image, dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "podman build: {}", texts(&out).1);
    let name = format!("h-podman-it-ws-{}", std::process::id());
    let _workstation = PodmanWorkstation(name.clone());
    let workspace = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let up = |extra: &[&str]| {
        let mut args = vec![
            "up",
            "--name",
            &name,
            "--mount",
            workspace.path().to_str().unwrap(),
            "--no-verify",
            "--wait",
            "20",
            "--json",
        ];
        args.extend_from_slice(extra);
        args.push(&image);
        imgctl_on(&service, &args)
    };
    // --gpus by name: the runtime's request is refused in one line; CDI
    // names (asked for, or `auto`) go through libpod's create and are
    // refused at start (no CDI spec for nvidia.com/gpu here): one line
    // naming `nvidia-ctk cdi generate`. Nothing is left either way
    // (tests/it/cdi/podman.rs gives a fake vendor's device).
    for api in ["runtime", "cdi", "auto"] {
        let out = up(&["--gpus", "all", "--gpu-api", api]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{api}: {stderr}");
        let line = crate::common::one_error_line(&stderr);
        if api == "runtime" {
            assert!(
                line.contains("Podman has no NVIDIA runtime hook"),
                "{stderr}"
            );
            assert!(stderr.contains("hint: pass --gpu-api cdi"), "{stderr}");
        } else {
            assert!(line.contains("nvidia-ctk cdi generate"), "{api}: {stderr}");
        }
        assert_eq!(
            podman(&["ps", "-a", "-q", "--filter", &format!("name=^{name}$")]).stdout,
            b""
        );
    }
    // No --gpus: it starts without GPUs, says so, and keeps what the engine allows.
    let out = up(&[]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let up_s = started.elapsed().as_secs_f64();
    assert!(
        stderr.contains("the engine has no CDI spec for GPUs (nvidia.com/gpu; `nvidia-ctk cdi generate` makes one): the workstation starts without GPUs"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("up --json");
    assert_eq!(report["gpus"], "none", "{stdout}");
    assert_eq!(report["gpu_api"], serde_json::Value::Null, "{stdout}");
    let inspect = podman(&["inspect", "--format", "{{json .HostConfig}}", &name]);
    let host: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(host["ShmSize"], 16_i64 << 30, "{host}");
    for (_, bindings) in host["PortBindings"].as_object().unwrap() {
        assert_eq!(bindings[0]["HostIp"], "127.0.0.1", "{host}");
    }
    // ps lists it, logs shows its output, down removes it and keeps the folder.
    let ps = imgctl_on(&service, &["ps", "--json"]);
    let ps: serde_json::Value = serde_json::from_str(&texts(&ps).0).unwrap();
    let row = ps["workstations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in ps: {ps}"));
    assert_eq!(row["state"], "running");
    let logs = imgctl_on(&service, &["logs", &name]);
    assert_eq!(logs.status.code(), Some(0), "{}", texts(&logs).1);
    assert!(texts(&logs).0.contains("h-podman-ws-started"), "{logs:?}");
    std::fs::write(workspace.path().join("notes.txt"), "kept").unwrap();
    // --volumes: the home volume goes too (a plain down keeps it, and
    // every run of this test left one in Podman's storage).
    let out = imgctl_on(&service, &["down", "--volumes", "--time", "1", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    assert!(texts(&out).1.contains(&format!("removed {name}")));
    assert_eq!(
        podman(&["ps", "-a", "-q", "--filter", &format!("name=^{name}$")]).stdout,
        b""
    );
    let home = format!("{name}-home");
    assert_eq!(
        podman(&["volume", "ls", "-q", "--filter", &format!("name={home}")]).stdout,
        b"",
        "{home} was left"
    );
    assert!(workspace.path().join("notes.txt").exists());
    eprintln!("up on rootful Podman (busybox, with the refused --gpus tries): {up_s:.1} s; stderr of up:\n{stderr}");
}

#[test]
fn build_push_through_podman_attaches_the_sbom_to_the_pushed_manifest() {
    crate::build::ensure_bases();
    load_into_podman(crate::build::BUSYBOX_BASE);
    let registry = crate::build::LocalRegistry::start("pusher", "s3cret-pw");
    let service = PodmanService::rootful_trusting(&format!("127.0.0.1:{}", registry.port));
    let mut images = PodmanImages::default();
    // Not `…/push`: Podman 4.3's router cuts a repository ending in `/push`
    // short (`/images/REPO/push/push` finds no image REPO).
    let tag = format!(
        "127.0.0.1:{}/imgctl-test/pushed:{}",
        registry.port,
        std::process::id()
    );
    images.add(&tag);
    let config = tempfile::tempdir().unwrap();
    registry.write_docker_config(config.path(), "pusher", "s3cret-pw");
    let spec = crate::build::busybox_spec();
    let started = Instant::now();
    let out = on_service(&service)
        .args([
            "build",
            "--spec",
            spec.to_str().unwrap(),
            "--tag",
            &tag,
            "--push",
            "--json",
        ])
        .env("DOCKER_CONFIG", config.path())
        .output()
        .unwrap();
    let push_s = started.elapsed().as_secs_f64();
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("build --json");
    assert_attached_to_pushed(
        registry.port,
        "imgctl-test/pushed",
        &std::process::id().to_string(),
        &report,
    );
    eprintln!("build --push of the busybox image on rootful Podman: {push_s:.1} s");
}

/// Checks that each attestation of `report` (`build --push --json`'s) is a
/// referrer of the manifest the registry at `port` serves for `repo:tag`
/// (user `pusher`): the referrers tag (`sha256-HEX`, this registry has no
/// referrers API) indexes them.
pub fn assert_attached_to_pushed(port: u16, repo: &str, tag: &str, report: &serde_json::Value) {
    let manifest = Command::new("curl")
        .args(["-sfI", "-u", "pusher:s3cret-pw", "-H"])
        .arg("Accept: application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
        .arg(format!("http://127.0.0.1:{port}/v2/{repo}/manifests/{tag}"))
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&manifest.stdout).to_ascii_lowercase();
    let served = headers
        .lines()
        .find_map(|l| l.strip_prefix("docker-content-digest: "))
        .map(|d| d.trim().to_string())
        .unwrap_or_else(|| panic!("the registry has no {repo}:{tag}: {headers}"));
    let referrers = Command::new("curl")
        .args(["-sf", "-u", "pusher:s3cret-pw", "-H"])
        .arg("Accept: application/vnd.oci.image.index.v1+json")
        .arg(format!(
            "http://127.0.0.1:{port}/v2/{repo}/manifests/{}",
            served.replace(':', "-")
        ))
        .output()
        .unwrap();
    let index = String::from_utf8_lossy(&referrers.stdout);
    let attached = report["attestations"].as_array().unwrap();
    assert!(!attached.is_empty(), "nothing attached: {report}");
    for attestation in attached {
        let at = attestation["attached"][0].as_str().unwrap();
        let digest = at.rsplit('@').next().unwrap();
        assert!(
            index.contains(digest),
            "{digest} not in the referrers of {served}: {index}"
        );
    }
}
