//! GPUs through CDI without a GPU: a CDI spec of a fake vendor
//! (`imgctl.test/gpu=0`, injecting an environment variable and `/dev/null`
//! as `/dev/imgctl-test-gpu0`) in `/var/run/cdi`, a spec folder Docker 25+
//! and Podman both read, and `up --gpus device=0 --gpu-api cdi` with
//! `IMGCTL_CDI_KIND=imgctl.test/gpu`. On an engine with CDI (Docker 28
//! through scripts/engine-tests.sh 28, where scripts/dev-engine.sh turns the
//! `cdi` feature on) the container must see both edits, and asking for
//! `nvidia.com/gpu` (no spec) names `nvidia-ctk cdi generate`; on the
//! machine's Docker 20.10 (API 1.41) `--gpu-api cdi` is refused in one line.
//! On Podman 4.3 (whose compatible API drops GPU requests) imgctl makes the
//! container through libpod's create: [`podman`] runs the same fake vendor
//! there, rootful and rootless.
use std::process::{Command, Output};

use crate::build::{docker_ok, EngineGuard};
use crate::common::{imgctl_bin, one_error_line, texts};

mod podman;

/// The fake vendor's CDI spec: device `0` (an environment variable, and
/// `/dev/null` as `/dev/imgctl-test-gpu0`) and device `1` (a variable, and
/// the node [`device_1_node`] at the same path on both sides, for rootless
/// Podman: see [`podman`]).
fn spec_text() -> String {
    format!(
        r#"cdiVersion: "0.5.0"
kind: imgctl.test/gpu
devices:
  - name: "0"
    containerEdits:
      env:
        - IMGCTL_TEST_CDI_GPU=0
      deviceNodes:
        - path: /dev/imgctl-test-gpu0
          hostPath: /dev/null
  - name: "1"
    containerEdits:
      env:
        - IMGCTL_TEST_CDI_GPU=1
      deviceNodes:
        - path: {}
"#,
        device_1_node().display()
    )
}

/// Where device `1`'s node is, on the host and in the container.
fn device_1_node() -> std::path::PathBuf {
    format!("/dev/imgctl-test-gpu1-{}", std::process::id()).into()
}

/// How many of this process's tests hold the spec: one file for them all,
/// since two specs naming the same device (`imgctl.test/gpu=0`) conflict,
/// and the engine then resolves neither.
static SPEC_HOLDERS: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// The fake vendor's spec in `/var/run/cdi` under a name of this process,
/// and device `1`'s node (made with the numbers of `/dev/null`), made by
/// the first test to hold them and removed when the last lets go.
struct FakeVendorSpec;

impl FakeVendorSpec {
    fn path() -> std::path::PathBuf {
        format!("/var/run/cdi/imgctl-test-{}.yaml", std::process::id()).into()
    }

    fn write() -> Self {
        let mut holders = SPEC_HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
        if *holders == 0 {
            let node = device_1_node();
            let _ = std::fs::remove_file(&node);
            let out = Command::new("mknod")
                .args(["-m", "666"])
                .arg(&node)
                .args(["c", "1", "3"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "mknod {}: {}",
                node.display(),
                texts(&out).1
            );
            std::fs::create_dir_all("/var/run/cdi").unwrap();
            std::fs::write(Self::path(), spec_text()).unwrap();
        }
        *holders += 1;
        Self
    }
}

impl Drop for FakeVendorSpec {
    fn drop(&mut self) {
        let mut holders = SPEC_HOLDERS.lock().unwrap_or_else(|e| e.into_inner());
        *holders -= 1;
        if *holders == 0 {
            let _ = std::fs::remove_file(Self::path());
            let _ = std::fs::remove_file(device_1_node());
        }
    }
}

fn up(name: &str, image: &str, kind: Option<&str>, extra: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(imgctl_bin());
    cmd.args([
        "up",
        "--name",
        name,
        "--no-mount",
        "--no-verify",
        "--wait",
        "30",
    ])
    .args(extra)
    .arg(image)
    .env("HOME", home.path())
    .env("NO_COLOR", "1");
    match kind {
        Some(k) => cmd.env("IMGCTL_CDI_KIND", k),
        None => cmd.env_remove("IMGCTL_CDI_KIND"),
    };
    cmd.output().unwrap()
}

#[test]
fn a_fake_vendors_cdi_device_reaches_the_container_or_cdi_is_refused_in_one_line() {
    let _spec = FakeVendorSpec::write();
    let mut guard = EngineGuard::default();
    let image = crate::workstation::labelled_image_with(
        &mut guard,
        "cdi",
        "ENTRYPOINT [\"sh\", \"-c\", \"echo IMGCTL_TEST_CDI_GPU=$IMGCTL_TEST_CDI_GPU; ls -l /dev/imgctl-test-gpu0; exec \\\"$@\\\"\", \"sh\"]\n",
    );
    let name = format!("imgctl-it-cdi-{}", std::process::id());
    guard.container(&name);
    let api = docker_ok(&["version", "--format", "{{.Server.APIVersion}}"]);
    let (major, minor) = api.split_once('.').unwrap();
    let cdi_api = (major.parse::<u32>().unwrap(), minor.parse::<u32>().unwrap()) >= (1, 44);
    let device = ["--gpus", "device=0", "--gpu-api", "cdi"];
    if !cdi_api {
        // Docker 20.10 (API 1.41): one line, exit 2, nothing left. (From
        // API 1.44 on, CDI must work: scripts/dev-engine.sh turns it on.)
        let out = up(&name, &image, Some("imgctl.test/gpu"), &device);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("hint: make CDI work as the line says, or pass --gpu-api runtime"),
            "{stderr}"
        );
        let line = one_error_line(&stderr);
        assert!(
            line.contains("CDI device requests need 1.44 (Docker 25) or later"),
            "{stderr}"
        );
        assert_eq!(
            docker_ok(&["ps", "-a", "-q", "--filter", &format!("name=^/{name}$")]),
            ""
        );
        eprintln!("engine API {api} without CDI: refused: {line}");
        return;
    }
    // CDI on: the fake vendor's edits are in the container, and the report
    // says CDI was used.
    let mut json = device.to_vec();
    json.push("--json");
    let out = up(&name, &image, Some("imgctl.test/gpu"), &json);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("up --json");
    assert_eq!(report["gpu_api"], "cdi", "{stdout}");
    let logs = Command::new(imgctl_bin())
        .args(["logs", &name])
        .output()
        .unwrap();
    let (log, _) = texts(&logs);
    assert!(log.contains("IMGCTL_TEST_CDI_GPU=0"), "{log}");
    assert!(log.contains("/dev/imgctl-test-gpu0"), "{log}");
    assert!(!log.contains("No such file"), "{log}");
    let host = docker_ok(&[
        "inspect",
        "--format",
        "{{json .HostConfig.DeviceRequests}}",
        &name,
    ]);
    assert!(
        host.contains("\"cdi\"") && host.contains("imgctl.test/gpu=0"),
        "{host}"
    );
    let out = Command::new(imgctl_bin())
        .args(["down", "--time", "1", &name])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    // No spec for nvidia.com/gpu: the line says how to make one; nothing left.
    let out = up(&name, &image, None, &["--gpus", "all", "--gpu-api", "cdi"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("nvidia-ctk cdi generate"),
        "{stderr}"
    );
    assert_eq!(
        docker_ok(&["ps", "-a", "-q", "--filter", &format!("name=^/{name}$")]),
        ""
    );
}
