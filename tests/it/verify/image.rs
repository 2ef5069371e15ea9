//! `verify --image`: the image's own verify in a container of it, reported back and
//! cleaned up on every path, its report checked against the host's view.
use super::*;

pub(crate) const BASE: &str = "imgctl-test/debian:bookworm";

pub(crate) const TEST_IMAGE: &str = "imgctl-test/verify:latest";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn engine() -> Option<bollard::Docker> {
    imgctl::docker::connect()
        .await
        .ok()
        .map(|engine| engine.docker)
}

/// Builds FROM the local debian base an image holding this imgctl at
/// /usr/local/bin/imgctl (classic builder, context tar made in memory).
pub(crate) async fn build_test_image(docker: &bollard::Docker) -> Result<(), String> {
    use futures_util::StreamExt;
    let bin = std::fs::read(imgctl_bin()).map_err(|e| e.to_string())?;
    let dockerfile =
        format!("FROM {BASE}\nCOPY imgctl /usr/local/bin/imgctl\nLABEL io.imgctl.test=verify\n");
    let mut tar = tar::Builder::new(Vec::new());
    for (name, data, mode) in [
        ("Dockerfile", dockerfile.into_bytes(), 0o644),
        ("imgctl", bin, 0o755),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_cksum();
        tar.append_data(&mut h, name, data.as_slice())
            .map_err(|e| e.to_string())?;
    }
    let context = tar.into_inner().map_err(|e| e.to_string())?;
    let options = bollard::query_parameters::BuildImageOptions {
        dockerfile: "Dockerfile".into(),
        t: Some(TEST_IMAGE.into()),
        rm: true,
        forcerm: true,
        version: bollard::query_parameters::BuilderVersion::BuilderV1,
        ..Default::default()
    };
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| e.to_string())?;
        if let Some(err) = info.error_detail.and_then(|d| d.message) {
            return Err(err);
        }
    }
    Ok(())
}

/// Containers (running or not) that mount `source`: each test mounts a
/// fresh temporary folder, so only its own containers match.
async fn containers_mounting(docker: &bollard::Docker, source: &Path) -> Vec<String> {
    let opts = bollard::query_parameters::ListContainersOptions {
        all: true,
        ..Default::default()
    };
    let want = source.to_string_lossy().into_owned();
    docker
        .list_containers(Some(opts))
        .await
        .expect("list containers")
        .into_iter()
        .filter(|c| {
            c.mounts.as_ref().is_some_and(|ms| {
                ms.iter()
                    .any(|m| m.source.as_deref() == Some(want.as_str()))
            })
        })
        .filter_map(|c| c.id)
        .collect()
}

fn probe_arg(dir: &Path) -> String {
    format!("{}:/probe:ro", dir.display())
}

/// The folder holding torch and the nvidia wheels this imgctl links against,
/// mounted at the same path so the binary's RUNPATH resolves in the container.
pub(crate) fn site_packages() -> PathBuf {
    let libtorch = std::env::var("LIBTORCH")
        .unwrap_or_else(|_| format!("{}/.libtorch", env!("CARGO_MANIFEST_DIR")));
    let root = crate::common::repo_root();
    let p = root.join(&libtorch);
    let p = if Path::new(&libtorch).is_absolute() {
        PathBuf::from(&libtorch)
    } else {
        p
    };
    p.canonicalize()
        .expect("LIBTORCH resolves")
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Sets up the engine side once per test; None (with a note) when no engine
/// answers. The debian base is made here when missing (`ensure_bases`).
fn image_setup() -> Option<(tokio::runtime::Runtime, bollard::Docker)> {
    let rt = runtime();
    let docker = rt.block_on(engine())?;
    // Makes the debian base when this test runs before any build test (a
    // clean engine, or `cargo test --test it verify::` alone).
    crate::build::ensure_bases();
    if rt.block_on(docker.inspect_image(BASE)).is_err() {
        panic!("the base image {BASE} is missing after scripts/test-bases.sh");
    }
    rt.block_on(build_test_image(&docker))
        .expect("build the verify test image");
    Some((rt, docker))
}

pub(crate) fn mount_arg() -> String {
    let sp = site_packages();
    format!("{0}:{0}:ro", sp.display())
}

#[test]
fn verify_image_reports_back_and_removes_the_container() {
    let Some((rt, docker)) = image_setup() else {
        panic!("no Docker engine at DOCKER_HOST / /var/run/docker.sock");
    };
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("image.xml");
    let mount = mount_arg();
    let probe = probe_arg(dir.path());
    let out = imgctl(&[
        "verify",
        "--image",
        TEST_IMAGE,
        "--expect-gpus",
        "0",
        "--json",
        "--junit",
        junit.to_str().unwrap(),
        "--mount",
        &mount,
        "--mount",
        &probe,
    ]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = json_of(&stdout);
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["context"], "container");
    assert_eq!(report["image"], TEST_IMAGE);
    assert_eq!(status(&report, "host.container"), "pass");
    assert!(results(&report, "host.container")[0]["message"]
        .as_str()
        .unwrap()
        .contains("no GPU requested"));
    // The container's own results came back: NVML is absent in there too.
    assert_eq!(status(&report, "nvml.driver"), "skip");
    assert_eq!(status(&report, "host.gpu_uuids"), "skip");
    #[cfg(feature = "torch")]
    {
        assert_eq!(status(&report, "torch.version"), "pass");
        assert_eq!(status(&report, "torch.cudnn_loaded"), "pass");
    }
    // The same table is printed on stderr.
    assert!(stderr.contains("| host.container"), "{stderr}");
    assert!(stderr.contains("verify passed:"), "{stderr}");
    assert_well_formed_xml(&junit);
    assert!(
        rt.block_on(containers_mounting(&docker, dir.path()))
            .is_empty(),
        "the verify container was left behind"
    );
}

#[test]
fn verify_image_without_gpu_fails_with_the_driver_line_and_cleans_up() {
    if has_nvidia_driver() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let Some((rt, docker)) = image_setup() else {
        panic!("no Docker engine");
    };
    let dir = tempfile::tempdir().unwrap();
    let (mount, probe) = (mount_arg(), probe_arg(dir.path()));
    let out = imgctl(&[
        "verify", "--image", TEST_IMAGE, "--only", "nvml", "--mount", &mount, "--mount", &probe,
    ]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.lines().next(),
        Some("error: no NVIDIA driver: libnvidia-ml.so.1 not found"),
        "{stderr}"
    );
    assert!(
        rt.block_on(containers_mounting(&docker, dir.path()))
            .is_empty(),
        "container left behind"
    );
}

#[test]
fn verify_image_without_imgctl_is_an_error_and_cleans_up() {
    let Some((rt, docker)) = image_setup() else {
        panic!("no Docker engine");
    };
    let dir = tempfile::tempdir().unwrap();
    let probe = probe_arg(dir.path());
    let out = imgctl(&[
        "verify",
        "--image",
        BASE,
        "--expect-gpus",
        "0",
        "--json",
        "--mount",
        &probe,
    ]);
    let (stdout, stderr) = texts(&out);
    // Either the engine refuses to start a missing entrypoint (an error line), or
    // the report says the image gave no JSON; both exit 1 and leave nothing behind.
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("imgctl"), "{stderr}");
    assert!(
        rt.block_on(containers_mounting(&docker, dir.path()))
            .is_empty(),
        "container left behind"
    );
}

#[test]
fn an_imgctl_the_image_cannot_start_is_named_without_the_parsers_words() {
    // This imgctl is linked against glibc; the busybox base has no loader for
    // it, so the engine starts the container and the exec fails (#53 F18).
    let Some((rt, docker)) = image_setup() else {
        panic!("no Docker engine");
    };
    let dir = tempfile::tempdir().unwrap();
    let out = imgctl(&[
        "verify",
        "--image",
        crate::build::BUSYBOX_BASE,
        "--expect-gpus",
        "0",
        "--mount",
        &probe_arg(dir.path()),
        "--mount",
        &format!("{}:/usr/local/bin/imgctl:ro", imgctl_bin().display()),
    ]);
    let (stdout, stderr) = texts(&out);
    let text = format!("{stdout}\n{stderr}");
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "the image's imgctl cannot run in {}",
            crate::build::BUSYBOX_BASE
        )),
        "{text}"
    );
    assert!(text.contains("no glibc loader"), "{text}");
    assert!(!text.contains("EOF while parsing"), "{text}");
    assert!(!text.contains("on the image's PATH"), "{text}");
    assert!(
        rt.block_on(containers_mounting(&docker, dir.path()))
            .is_empty(),
        "container left behind"
    );
}

#[test]
fn verify_image_unknown_image_is_a_usage_error() {
    if runtime().block_on(engine()).is_none() {
        panic!("no Docker engine");
    }
    let out = imgctl(&[
        "verify",
        "--image",
        "imgctl-test/does-not-exist:nope",
        "--expect-gpus",
        "0",
    ]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: image `imgctl-test/does-not-exist:nope` not found"),
        "{stderr}"
    );
}

/// An executable `imgctl` shell script in `dir` running `body`, to mount into
/// a container over the image's own.
fn fake_imgctl(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("imgctl");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

/// `imgctl verify --image BASE --expect-gpus EXPECT --json` with `fake`
/// mounted over the image's imgctl.
fn verify_json_with(fake: &Path, expect: &str) -> std::process::Output {
    Command::new(imgctl_bin())
        .args([
            "verify",
            "--image",
            BASE,
            "--expect-gpus",
            expect,
            "--json",
            "--mount",
        ])
        .arg(format!("{}:/usr/local/bin/imgctl:ro", fake.display()))
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// Starts `imgctl verify --image` with `sleeper` (a hanging fake imgctl)
/// mounted over the image's, and returns once its container exists (stderr
/// piped, for the caller to read after stopping it).
fn start_hanging_verify(
    rt: &tokio::runtime::Runtime,
    docker: &bollard::Docker,
    sleeper: &Path,
) -> std::process::Child {
    let child = Command::new(imgctl_bin())
        .args(["verify", "--image", BASE, "--expect-gpus", "0", "--mount"])
        .arg(format!("{}:/usr/local/bin/imgctl:ro", sleeper.display()))
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while rt.block_on(containers_mounting(docker, sleeper)).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the container never appeared"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    child
}

#[test]
fn verify_image_ctrl_c_or_sigterm_removes_the_container() {
    let Some((rt, docker)) = image_setup() else {
        panic!("no Docker engine");
    };
    // An "imgctl" that hangs, so the container is still running at Ctrl-C.
    let dir = tempfile::tempdir().unwrap();
    let sleeper = fake_imgctl(dir.path(), "exec sleep 120");
    // Ctrl-C in a terminal, and the stop of a CI runner or Kubernetes.
    for (signal, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
        let child = start_hanging_verify(&rt, &docker, &sleeper);
        // SAFETY: signalling the child we started, by its pid.
        unsafe { libc::kill(child.id() as i32, signal) };
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{stderr}");
        assert!(
            stderr.contains(&format!("interrupted by {name}")),
            "{stderr}"
        );
        assert!(
            rt.block_on(containers_mounting(&docker, &sleeper))
                .is_empty(),
            "container left behind after {name}"
        );
    }
}

/// SIGKILL leaves no time to remove the container (reliability issue, item
/// 21): the next `verify --image` of this host removes what a killed run
/// left (its container carries the run's pid and the host's boot id).
#[test]
fn a_container_left_by_a_killed_run_is_removed_by_the_next() {
    let Some((rt, docker)) = image_setup() else {
        panic!("no Docker engine");
    };
    let dir = tempfile::tempdir().unwrap();
    let sleeper = fake_imgctl(dir.path(), "exec sleep 120");
    let mut child = start_hanging_verify(&rt, &docker, &sleeper);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(
        rt.block_on(containers_mounting(&docker, &sleeper)).len(),
        1,
        "a SIGKILLed run cannot clean up: its container is still there"
    );
    // The next run (any verify --image) removes it first.
    let probe_dir = tempfile::tempdir().unwrap();
    let out = imgctl(&[
        "verify",
        "--image",
        BASE,
        "--expect-gpus",
        "0",
        "--mount",
        &probe_arg(probe_dir.path()),
    ]);
    let (_, stderr) = texts(&out);
    assert!(
        rt.block_on(containers_mounting(&docker, &sleeper))
            .is_empty(),
        "the killed run's container is still there:\n{stderr}"
    );
    // Usually this run removed it and said so; a verify --image of another
    // test running at the same moment may have been first.
    if !stderr.contains("removed 1 container left by an imgctl run that was killed") {
        eprintln!("the stale container was removed by another run:\n{stderr}");
    }
}

/// A container's stderr is kept bounded (its last 64 KiB), and the error
/// quotes the end of it on one short line: before, 10 MB of stderr on one
/// line became a 10 MB result message (and 136 s of table layout).
#[test]
fn a_container_flooding_stderr_gives_a_short_error_quickly() {
    let Some((_rt, _docker)) = image_setup() else {
        panic!("no Docker engine");
    };
    let dir = tempfile::tempdir().unwrap();
    // 4 MB of stderr on one line, its last words, and no report.
    let flood = fake_imgctl(
        dir.path(),
        "head -c 4000000 /dev/zero | tr '\\0' x >&2\necho ' the last words' >&2\necho not-a-report\nexit 3",
    );
    for json in [true, false] {
        let started = Instant::now();
        let mut cmd = Command::new(imgctl_bin());
        cmd.args(["verify", "--image", BASE, "--expect-gpus", "0", "--mount"])
            .arg(format!("{}:/usr/local/bin/imgctl:ro", flood.display()))
            .env("NO_COLOR", "1");
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        let took = started.elapsed();
        let (stdout, stderr) = texts(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            &stderr[..stderr.len().min(2000)]
        );
        assert!(
            stdout.len() + stderr.len() < 16 * 1024,
            "json {json}: {} bytes of stdout, {} of stderr",
            stdout.len(),
            stderr.len()
        );
        assert!(took < Duration::from_secs(60), "json {json}: {took:?}");
        let text = if json {
            let report = json_of(&stdout);
            let c = &results(&report, "host.container")[0];
            assert_eq!(c["status"], "error", "{c}");
            c["message"].as_str().unwrap().to_string()
        } else {
            // The table goes to stderr when stdout is not a terminal.
            format!("{stdout}{stderr}")
        };
        assert!(
            text.contains("gave no JSON report (exit code 3): …xxx"),
            "json {json}: {text}"
        );
        assert!(text.contains("x the last words"), "json {json}: {text}");
    }
}

#[test]
fn verify_image_does_not_trust_a_report_that_contradicts_itself() {
    let Some((rt, docker)) = image_setup() else {
        panic!("no Docker engine");
    };
    // An "imgctl" in the image that claims failures but lists no results, and
    // exits 1: before, the host merged the empty list and passed.
    let dir = tempfile::tempdir().unwrap();
    let forger = fake_imgctl(
        dir.path(),
        "echo '{\"schema_version\":1,\"imgctl_version\":\"0.0.0\",\"context\":\"container\",\"level\":\"quick\",\"expect_gpus\":\"0\",\"results\":[],\"summary\":{\"pass\":0,\"warn\":0,\"fail\":5,\"skip\":0,\"error\":0},\"passed\":false}'\nexit 1",
    );
    let out = verify_json_with(&forger, "0");
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report = json_of(&stdout);
    let c = &results(&report, "host.container")[0];
    assert_eq!(c["status"], "error", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("reported no results"),
        "{c}"
    );
    assert!(rt
        .block_on(containers_mounting(&docker, &forger))
        .is_empty());
}

/// A forged, self-consistent PASS report from the image does not stand
/// against what the host sees for itself (reliability and security III):
/// with `--expect-gpus 2` on this host without GPUs, the host passes none
/// into the container, so every GPU claim of the report fails (it used to
/// pass, exit 0).
#[test]
fn verify_image_overrides_a_forged_report_with_the_hosts_view() {
    let Some((rt, docker)) = image_setup() else {
        panic!("no Docker engine");
    };
    if has_nvidia_driver() {
        eprintln!("this host has an NVIDIA driver: the forged claims could be true here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let forger = fake_imgctl(
        dir.path(),
        "echo '{\"schema_version\":1,\"imgctl_version\":\"0.1.0\",\"context\":\"container\",\"level\":\"quick\",\"expect_gpus\":\"2\",\"results\":[{\"id\":\"nvml.driver\",\"status\":\"pass\",\"message\":\"driver 580.65\"},{\"id\":\"nvml.device_count\",\"status\":\"pass\",\"message\":\"2 GPUs\"},{\"id\":\"torch.version\",\"status\":\"pass\",\"message\":\"torch 2.7.0\"}],\"summary\":{\"pass\":3,\"warn\":0,\"fail\":0,\"skip\":0,\"error\":0},\"passed\":true}'\nexit 0",
    );
    let out = verify_json_with(&forger, "2");
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}\n{stdout}");
    let report = json_of(&stdout);
    assert_eq!(status(&report, "host.container"), "pass", "{stdout}");
    for id in ["nvml.driver", "nvml.device_count"] {
        assert_eq!(status(&report, id), "fail", "{id}: {stdout}");
        let m = results(&report, id)[0]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(m.contains("but the host passed no GPU into it"), "{m}");
    }
    assert_eq!(status(&report, "torch.version"), "pass", "{stdout}");
    assert_eq!(report["passed"], false, "{stdout}");
    assert!(rt
        .block_on(containers_mounting(&docker, &forger))
        .is_empty());
}

#[test]
fn gpu_request_on_an_engine_without_the_nvidia_runtime_is_rejected_and_cleaned_up() {
    use imgctl::docker::run::{run_to_completion, GpuRequestRejected, RunRequest};
    use imgctl::gpus::GpuSelection;
    let rt = runtime();
    let Some(docker) = rt.block_on(engine()) else {
        panic!("no Docker engine");
    };
    let info = rt.block_on(docker.info()).expect("engine info");
    let has_nvidia = info
        .runtimes
        .as_ref()
        .is_some_and(|r| r.contains_key("nvidia"));
    if has_nvidia {
        eprintln!("skipped: this engine has the nvidia runtime");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let req = RunRequest {
        image: BASE.into(),
        entrypoint: Some(vec!["true".into()]),
        cmd: vec![],
        gpus: Some(GpuSelection::All),
        binds: vec![probe_arg(dir.path())],
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let err = rt
        .block_on(run_to_completion(&docker, req))
        .expect_err("no GPU runtime here");
    assert!(
        err.chain()
            .any(|c| c.downcast_ref::<GpuRequestRejected>().is_some()),
        "not recognised as a GPU rejection: {err:#}"
    );
    assert!(
        rt.block_on(containers_mounting(&docker, dir.path()))
            .is_empty(),
        "container left behind"
    );
    // The same request without GPUs runs and reports its exit code and output.
    let req = RunRequest {
        image: BASE.into(),
        entrypoint: Some(vec!["sh".into(), "-c".into()]),
        cmd: vec!["echo out; echo err >&2; exit 3".into()],
        binds: vec![probe_arg(dir.path())],
        timeout: Duration::from_secs(60),
        ..Default::default()
    };
    let out = rt
        .block_on(run_to_completion(&docker, req))
        .expect("plain run");
    assert_eq!(
        (out.exit_code, out.stdout.as_str(), out.stderr.as_str()),
        (3, "out\n", "err\n")
    );
    assert!(
        rt.block_on(containers_mounting(&docker, dir.path()))
            .is_empty(),
        "container left behind"
    );
}

#[test]
fn mounts_are_checked_before_the_engine_sees_them() {
    // `nocolon` reached the engine (a raw HTTP 500), a missing host path was
    // created as root, a bare name left a named volume behind.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-here");
    let missing_arg = format!("{}:/x", missing.display());
    let rel = "data/models:/x";
    let cases = [
        (
            "nocolon",
            "error: --mount nocolon is not of the form SRC:DST or SRC:DST:ro".to_string(),
        ),
        (
            "name:/x",
            "error: --mount name:/x: 'name' is not a host path; Docker would take it as a named volume and keep it after the run, so verify does not mount volumes".to_string(),
        ),
        (
            missing_arg.as_str(),
            format!(
                "error: --mount {missing_arg}: the host path {} does not exist (Docker would create it as an empty directory owned by root)",
                missing.display()
            ),
        ),
        (
            rel,
            "error: --mount data/models:/x: the host path 'data/models' is not absolute".to_string(),
        ),
        (
            "/tmp:x",
            "error: --mount /tmp:x: the container path 'x' is not absolute".to_string(),
        ),
        (
            "/tmp:/x:rx",
            "error: --mount /tmp:/x:rx: unknown mode rx; ro (read-only) or rw".to_string(),
        ),
    ];
    for (mount, line) in &cases {
        let out = Command::new(imgctl_bin())
            .args([
                "verify",
                "--image",
                "imgctl-test/none:x",
                "--expect-gpus",
                "0",
                "--mount",
                mount,
            ])
            .env("NO_COLOR", "1")
            // Nothing may reach an engine: a dead socket would answer otherwise.
            .env("DOCKER_HOST", "unix:///nonexistent/imgctl-test.sock")
            .output()
            .unwrap();
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{mount}: {stderr}");
        assert_eq!(stderr.lines().next(), Some(line.as_str()), "{stderr}");
        assert!(
            stderr.contains("\nhint: --mount takes an existing host path"),
            "{stderr}"
        );
    }
    assert!(!missing.exists());
}

/// What a measurement should read travels from the image's report to the
/// host's table, JSON and JUnit (fleet verify issue, item 1): the expected
/// value stands in the row beside the measured one, its source under the
/// table, and an unknown GPU says "no reference" instead of a guess.
#[test]
fn expected_values_and_their_sources_reach_every_output_of_verify_image() {
    let Some((rt, docker)) = image_setup() else {
        panic!("no Docker engine");
    };
    use imgctl::gpus::expected::{expected, Metric};
    use imgctl::verify::{CheckResult, Level, Report};
    let report = Report::new(
        "container",
        None,
        Level::Full,
        imgctl::verify::ExpectGpus::Any,
        vec![
            CheckResult::pass("func.matmul_bf16", "bf16 8192³ matmul 686.3 TFLOP/s")
                .gpu(0)
                .measured("686.3 TFLOP/s")
                .value(686.3, "TFLOP/s")
                .expect(expected(Metric::Bf16Matmul, "NVIDIA H200")),
            CheckResult::pass("func.matmul_bf16", "bf16 8192³ matmul 150.2 TFLOP/s")
                .gpu(1)
                .measured("150.2 TFLOP/s")
                .value(150.2, "TFLOP/s")
                .expect(expected(Metric::Bf16Matmul, "NVIDIA GeForce RTX 4090")),
        ],
    );
    let json = serde_json::to_string(&report).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fake = fake_imgctl(dir.path(), &format!("cat <<'END'\n{json}\nEND\nexit 0"));
    let junit = dir.path().join("verify.xml");
    let out = Command::new(imgctl_bin())
        .args(["verify", "--image", BASE, "--expect-gpus", "0", "--junit"])
        .arg(&junit)
        .arg("--mount")
        .arg(format!("{}:/usr/local/bin/imgctl:ro", fake.display()))
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    // The table is on stderr (stdout is for --json).
    let (_, table) = texts(&out);
    // This host passed no GPU into the container, so the claims fail; their
    // figures are still shown with what they should be.
    assert_eq!(out.status.code(), Some(1), "{table}");
    let row = table
        .lines()
        .find(|l| l.contains("686.3 TFLOP/s"))
        .unwrap_or_else(|| panic!("{table}"));
    let (m, e) = (
        row.find("686.3 TFLOP/s").unwrap(),
        row.find("≈ 682.8 TFLOP/s [1]")
            .unwrap_or_else(|| panic!("{table}")),
    );
    assert!(m < e, "{row}");
    assert!(table.contains("no reference [2]"), "{table}");
    assert!(
        table.contains("\n[1] 69% of the H200 datasheet's 989.5 TFLOP/s bf16 dense"),
        "{table}"
    );
    assert!(
        table.contains("\n[2] no reference for \"NVIDIA GeForce RTX 4090\""),
        "{table}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("expected: ≈ 682.8 TFLOP/s (69% of"), "{xml}");
    let out = verify_json_with(&fake, "0");
    let (stdout, _) = texts(&out);
    let back = json_of(&stdout);
    let bf16 = results(&back, "func.matmul_bf16");
    assert!(
        (bf16[0]["expected"].as_f64().unwrap() - 682.755).abs() < 1e-6,
        "{stdout}"
    );
    assert!(
        bf16[0]["source"]
            .as_str()
            .unwrap()
            .contains("https://www.nvidia.com/"),
        "{stdout}"
    );
    assert!(bf16[1].get("expected").is_none(), "{stdout}");
    assert!(rt.block_on(containers_mounting(&docker, &fake)).is_empty());
}
