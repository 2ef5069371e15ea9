//! A stranger's first hour from the release tarball alone (#51 part 4): a
//! container of the bare local Debian base (no Rust, no Python, no
//! libtorch) with the host engine's socket and nothing of imgctl but the
//! x86_64 tarball. In it: `install.sh`, `--version`, `build` of the busybox
//! spec, `up` / `ps` / `down` of a workstation on the end-to-end image,
//! `verify --image`, `verify` with no flags and `train-demo`, both of which
//! run inside the image (no imgctl-torch there can load a libtorch). Each
//! step's wall time is printed (`--nocapture`).
//!
//! The folder the stranger works in is a host folder mounted at the same
//! path in its container: the engine resolves `train-demo`'s bind mount of
//! the current folder on the host, as it would for a user whose imgctl runs
//! in a container with the socket.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::build::{docker_ok, ensure_bases, test_tag, EngineGuard, DEBIAN_BASE};
use crate::common::{repo_root, texts};

/// The x86_64 tarball `make test` makes (`scripts/dist.sh --profile dev`),
/// made here when it is missing or older than the sources.
pub(crate) fn tarball(arch: &str) -> PathBuf {
    let root = repo_root();
    let out = root.join("target/dist-test");
    let path = out.join(format!(
        "imgctl-{}-{arch}-unknown-linux-musl.tar.gz",
        env!("CARGO_PKG_VERSION")
    ));
    let newest = crate::linking::newest_source();
    let fresh = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| newest.is_some_and(|s| t >= s));
    if !fresh {
        let made = Command::new("bash")
            .arg(root.join("scripts/dist.sh"))
            .args(["--profile", "dev", "--arch", arch, "--out"])
            .arg(&out)
            // This test run's own full imgctl: no cargo build under the test.
            .env("IMGCTL_DIST_TORCH", crate::common::imgctl_bin())
            .current_dir(&root)
            .output()
            .expect("run scripts/dist.sh");
        assert!(made.status.success(), "dist.sh: {}", texts(&made).1);
    }
    path
}

/// The folder a tarball unpacks into (its name without `.tar.gz`).
pub(crate) fn folder_name(tarball: &Path) -> String {
    let name = tarball.file_name().unwrap_or_default().to_string_lossy();
    name.trim_end_matches(".tar.gz").to_string()
}

/// The steps, timed; `image` is the end-to-end image's tag.
pub(super) fn from_the_tarball(image: &str, pid: u32) {
    let started = Instant::now();
    let tarball = tarball("x86_64");
    ensure_bases();
    let mut guard = EngineGuard::default();
    // A host folder at the same path inside: /tmp, world-writable, made anew.
    let shared = tempfile::Builder::new()
        .prefix("imgctl-stranger-")
        .tempdir_in("/tmp")
        .unwrap();
    let dir = shared.path().to_path_buf();
    std::fs::copy(&tarball, dir.join(tarball.file_name().unwrap())).unwrap();
    for f in ["busybox.yaml", "busybox.Dockerfile.j2"] {
        std::fs::copy(
            repo_root().join("tests/fixtures/specs").join(f),
            dir.join(f),
        )
        .unwrap();
    }
    let stranger = format!("imgctl-stranger-{pid}");
    guard.container(&stranger);
    let ws = format!("imgctl-stranger-ws-{pid}");
    guard.container(&ws);
    let built = test_tag("stranger");
    guard.image(&built);
    let d = dir.display().to_string();
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &stranger,
        "-v",
        "/var/run/docker.sock:/var/run/docker.sock",
        "-v",
        &format!("{d}:{d}"),
        "-w",
        &d,
        DEBIAN_BASE,
        "sleep",
        "3600",
    ]);
    // One step: a shell line in the stranger's container, timed; (exit, out, err).
    let step = |what: &str, line: &str| {
        let t = Instant::now();
        let out = Command::new("docker")
            .args([
                "exec",
                "-w",
                &d,
                "-e",
                "NO_COLOR=1",
                "-e",
                "PATH=/root/.local/bin:/usr/bin:/bin",
            ])
            .args([
                "-e",
                &format!("IMGCTL_IMAGE={image}"),
                &stranger,
                "sh",
                "-c",
                line,
            ])
            .output()
            .unwrap();
        let (o, e) = texts(&out);
        eprintln!(
            "stranger: {what}: {:.1} s (exit {:?})",
            t.elapsed().as_secs_f64(),
            out.status.code()
        );
        (out.status.code(), o, e)
    };
    // Nothing of imgctl, Rust, Python or libtorch in the base.
    let (code, _, _) = step(
        "nothing there",
        "command -v cargo || command -v python3 || command -v imgctl",
    );
    assert_ne!(code, Some(0), "the base is not bare");
    let name = folder_name(&tarball);
    let (code, _, err) = step(
        "install.sh",
        &format!("tar xzf {name}.tar.gz && cd {name} && ./install.sh"),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("every file matches SHA256SUMS"), "{err}");
    let (code, out, err) = step("imgctl --version", "imgctl --version");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), format!("imgctl {}", env!("CARGO_PKG_VERSION")));
    let (code, _, err) = step(
        "imgctl build (busybox spec)",
        &format!("imgctl build --spec busybox.yaml --tag {built}"),
    );
    assert_eq!(code, Some(0), "{err}");
    // The image holds the tarball's full imgctl (imgctl-torch), which `build` found beside it.
    let inside = docker_ok(&[
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        &built,
        "-c",
        "ls -l /usr/local/bin/imgctl",
    ]);
    assert!(inside.contains("imgctl"), "{inside}");
    let (code, out, err) = step(
        "imgctl up",
        &format!("imgctl up --no-mount --no-verify --wait 240 --name {ws} {image}"),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("{ws} is up")), "{out}");
    let (code, out, err) = step("imgctl ps", "imgctl ps");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&ws), "{out}");
    let (code, _, err) = step(
        "imgctl down",
        &format!("imgctl down --volumes --time 1 {ws}"),
    );
    assert_eq!(code, Some(0), "{err}");
    through_the_image(&step, &dir, image);
    eprintln!(
        "stranger: all steps: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// One step in the stranger's container: a shell line; (exit, stdout, stderr).
type Step<'a> = &'a dyn Fn(&str, &str) -> (Option<i32>, String, String);

/// `verify --image`, then `verify` and `train-demo` of this host, which run
/// inside the image: no imgctl-torch there can load a libtorch.
fn through_the_image(step: Step, dir: &Path, image: &str) {
    let (code, out, err) = step(
        "imgctl verify --image",
        &format!("imgctl verify --image {image} --expect-gpus 0 --json"),
    );
    assert_eq!(code, Some(0), "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("verify --json");
    assert_eq!(report["context"], "container", "{out}");
    let (code, _, err) = step(
        "imgctl verify (through the image)",
        "imgctl verify --expect-gpus 0",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("imgctl verify runs inside {image}")),
        "{err}"
    );
    let run_dir = dir.join("run");
    let (code, _, err) = step(
        "imgctl train-demo (through the image)",
        "imgctl train-demo --preset tiny --device cpu --steps 5 --out run",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("imgctl train-demo runs inside {image}")),
        "{err}"
    );
    let metrics = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap_or_default();
    assert!(metrics.lines().count() > 0, "no metrics: {err}");
    owned_by_caller(&run_dir.join("metrics.jsonl"));
    // Ctrl-C passes through: the run inside stops as it would here (exit
    // 130), and its container is gone.
    let (code, _, err) = step(
        "imgctl train-demo, Ctrl-C once it trains (through the image)",
        "imgctl train-demo --preset tiny --device cpu --steps 100000 --out run-int & pid=$!; \
         i=0; until [ -s run-int/metrics.jsonl ] || [ $i -ge 180 ]; do sleep 1; i=$((i+1)); done; \
         kill -INT $pid; wait $pid",
    );
    assert_eq!(code, Some(130), "{err}");
    assert!(
        err.contains("SIGINT: passed on to imgctl train-demo"),
        "{err}"
    );
    let left = crate::build::docker_ok(&[
        "ps",
        "-a",
        "-q",
        "--filter",
        &format!("ancestor={image}"),
        "--filter",
        "label=io.imgctl.managed=true",
    ]);
    assert_eq!(left, "", "the interrupted run's container is left");
}

/// What the command wrote is the caller's (the stranger is root: uid 0).
fn owned_by_caller(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(path).unwrap().uid(),
        0,
        "{}",
        path.display()
    );
}
