//! The fake vendor's CDI device on Podman 4.3, whose compatible API drops
//! GPU requests: imgctl makes the workstation through libpod's own create
//! (`devices: [{"path": "imgctl.test/gpu=0"}]`) and runs it through the
//! compatible API as before. Each test starts its own `podman system
//! service` (tests/it/podman.rs's fixtures).
//!
//! Rootless Podman reads the same spec folders, and gives a CDI device whose
//! node is the host's own at the same path (as NVIDIA's are: `/dev/nvidia0`
//! on both sides). It cannot give device `0` of the fake vendor, `/dev/null`
//! renamed `/dev/imgctl-test-gpu0`: in a user namespace the runtime may not
//! make a device node, so it bind-mounts the host's file at the container's
//! path, and the OCI spec's device carries no host path to bind from (runc:
//! `error creating device nodes: mount /dev/imgctl-test-gpu0:…: no such file
//! or directory`). The rootless test gives device `1`, a node made on the
//! host at the path the container sees, and checks the refusal of device `0`.
use std::process::Output;
use std::time::Instant;

use super::FakeVendorSpec;
use crate::common::{one_error_line, texts};
use crate::podman::rootless::{as_user, build_as_user, load_rootless, one_at_a_time, user};
use crate::podman::{load_into_podman, podman, tag, PodmanImages, PodmanService};

/// A Dockerfile whose entrypoint shows what the fake vendor's CDI edits did
/// (its variable, the device nodes) and the workspace, then runs the
/// command.
fn dockerfile() -> String {
    format!(
        "FROM {}\nLABEL io.imgctl.user=dev io.imgctl.uid=1000\nENTRYPOINT [\"sh\", \"-c\", \"echo IMGCTL_TEST_CDI_GPU=$IMGCTL_TEST_CDI_GPU; ls -l /dev/ | grep imgctl-test; ls /workspace; exec \\\"$@\\\"\", \"sh\"]\nCMD [\"sleep\", \"600\"]\n",
        crate::build::BUSYBOX_BASE
    )
}

/// `imgctl up` of `image` as `name` against `service`, the workspace
/// `workspace`, `IMGCTL_CDI_KIND=kind` (None: unset), and `extra`.
fn up(
    service: &PodmanService,
    (name, image, workspace): (&str, &str, &std::path::Path),
    kind: Option<&str>,
    extra: &[&str],
) -> Output {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = crate::podman::on_service(service);
    cmd.args(["up", "--name", name, "--mount"])
        .arg(workspace)
        .args(["--no-verify", "--wait", "30", "--json"])
        .args(extra)
        .arg(image)
        .env("HOME", home.path());
    match kind {
        Some(k) => cmd.env("IMGCTL_CDI_KIND", k),
        None => cmd.env_remove("IMGCTL_CDI_KIND"),
    };
    cmd.output().unwrap()
}

/// `imgctl ARGS` against `service`.
fn imgctl(service: &PodmanService, args: &[&str]) -> Output {
    crate::podman::imgctl_on(service, args)
}

/// Removes the workstation `name` and its home volume (as root's Podman)
/// when dropped, whatever failed.
struct Leftovers(String);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", &self.0]);
        let _ = podman(&["volume", "rm", "-f", &format!("{}-home", self.0)]);
    }
}

/// What Podman holds of `name`: containers and its home volume (none is `""`).
fn left(name: &str) -> String {
    let containers = podman(&["ps", "-a", "-q", "--filter", &format!("name=^{name}$")]);
    let volumes = podman(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("name={name}-home"),
    ]);
    format!(
        "{}{}",
        String::from_utf8_lossy(&containers.stdout).trim(),
        String::from_utf8_lossy(&volumes.stdout).trim()
    )
}

#[test]
fn on_rootful_podman_the_fake_vendors_device_reaches_the_workstation_through_libpod() {
    let _spec = FakeVendorSpec::write();
    crate::build::ensure_bases();
    load_into_podman(crate::build::BUSYBOX_BASE);
    let service = PodmanService::rootful();
    let mut images = PodmanImages::default();
    let image = tag("cdi");
    images.add(&image);
    let context = tempfile::tempdir().unwrap();
    std::fs::write(context.path().join("Dockerfile"), dockerfile()).unwrap();
    let out = podman(&[
        "build",
        "-q",
        "-t",
        &image,
        context.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "podman build: {}", texts(&out).1);
    let name = format!("h-cdi-it-podman-{}", std::process::id());
    let _leftovers = Leftovers(name.clone());
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes-from-host.txt"), "kept").unwrap();
    let at = (name.as_str(), image.as_str(), workspace.path());
    let kind = Some("imgctl.test/gpu");

    // Asked for by name, and by `auto`: CDI through libpod, both edits in.
    for api in ["cdi", "auto"] {
        let started = Instant::now();
        let out = up(
            &service,
            at,
            kind,
            &["--gpus", "device=0", "--gpu-api", api],
        );
        let up_s = started.elapsed().as_secs_f64();
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{api}: {stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("up --json");
        assert_eq!(report["gpu_api"], "cdi", "{api}: {stdout}");
        assert_eq!(report["gpus"], "device=0", "{api}: {stdout}");
        let logs = imgctl(&service, &["logs", &name]);
        let (log, _) = texts(&logs);
        assert!(log.contains("IMGCTL_TEST_CDI_GPU=0"), "{api}: {log}");
        assert!(log.contains("imgctl-test-gpu0"), "{api}: {log}");
        // What the compatible create carried, libpod's carried too: the
        // workspace, /dev/shm's size, loopback-only ports, the labels.
        assert!(log.contains("notes-from-host.txt"), "{api}: {log}");
        let inspect = podman(&["inspect", "--format", "{{json .}}", &name]);
        let all: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
        let c = &all[0];
        assert_eq!(c["HostConfig"]["ShmSize"], 16_i64 << 30, "{c}");
        let ports = c["HostConfig"]["PortBindings"].as_object().unwrap();
        assert!(!ports.is_empty(), "{c}");
        for (_, bindings) in ports {
            assert_eq!(bindings[0]["HostIp"], "127.0.0.1", "{c}");
        }
        let labels = &c["Config"]["Labels"];
        assert_eq!(labels["io.imgctl.workstation"], "true", "{c}");
        assert_eq!(labels["io.imgctl.workstation.gpu-api"], "cdi", "{c}");
        let mounts: Vec<&str> = c["Mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["Destination"].as_str())
            .collect();
        assert!(
            mounts.contains(&"/workspace") && mounts.contains(&"/home/dev"),
            "{c}"
        );
        // ps lists it with the way its GPUs were asked for.
        let ps = imgctl(&service, &["ps", "--json"]);
        assert!(texts(&ps).0.contains(&name), "{}", texts(&ps).0);
        let out = imgctl(&service, &["down", "--volumes", "--time", "1", &name]);
        assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
        assert_eq!(left(&name), "", "{api}");
        eprintln!("up --gpus device=0 --gpu-api {api} on rootful Podman (CDI through libpod): {up_s:.1} s");
    }

    // The runtime's request: one line, exit 2, nothing left.
    let out = up(
        &service,
        at,
        kind,
        &["--gpus", "device=0", "--gpu-api", "runtime"],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        one_error_line(&stderr).contains("Podman has no NVIDIA runtime hook through its API"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: pass --gpu-api cdi"), "{stderr}");
    assert_eq!(left(&name), "");

    // No spec for nvidia.com/gpu: Podman refuses the names at start; the
    // line says how to make one, and nothing is left.
    let started = Instant::now();
    let out = up(&service, at, None, &["--gpus", "all", "--gpu-api", "cdi"]);
    let refused_s = started.elapsed().as_secs_f64();
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let line = one_error_line(&stderr);
    assert!(
        line.contains("unresolvable CDI devices nvidia.com/gpu=all"),
        "{stderr}"
    );
    assert!(line.contains("nvidia-ctk cdi generate"), "{stderr}");
    assert!(!stderr.contains("--gpu-api runtime"), "{stderr}");
    assert_eq!(left(&name), "");

    // No --gpus: GPUs if the engine has them, here none (no spec): said,
    // and it starts without.
    let out = up(&service, at, None, &[]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("the engine has no CDI spec for GPUs"),
        "{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("up --json");
    assert_eq!(report["gpus"], "none", "{stdout}");
    assert_eq!(report["gpu_api"], serde_json::Value::Null, "{stdout}");
    let out = imgctl(&service, &["down", "--volumes", "--time", "1", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    assert_eq!(left(&name), "");
    eprintln!(
        "no CDI spec for nvidia.com/gpu on rootful Podman: refused in {refused_s:.1} s: {line}"
    );
}

#[test]
fn on_rootless_podman_a_cdi_device_node_of_the_hosts_own_path_reaches_the_workstation() {
    // The user's rootless services one at a time (podman::rootless says why).
    let _one = one_at_a_time();
    let _spec = FakeVendorSpec::write();
    crate::build::ensure_bases();
    let service = PodmanService::rootless();
    let runtime = service.dir.path().to_path_buf();
    load_rootless(crate::build::BUSYBOX_BASE, &runtime);
    let podman_user = |args: &[&str]| as_user("podman", &runtime).args(args).output().unwrap();
    let image = tag("cdi-rootless");
    build_as_user(&runtime, &image, &dockerfile());
    let (uid, gid, _) = user();
    let workspace = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(workspace.path(), Some(uid), Some(gid)).unwrap();
    let name = format!("h-cdi-it-rl-{}", std::process::id());
    let at = (name.as_str(), image.as_str(), workspace.path());
    let kind = Some("imgctl.test/gpu");
    let started = Instant::now();
    let ok = up(
        &service,
        at,
        kind,
        &["--gpus", "device=1", "--gpu-api", "cdi"],
    );
    let up_s = started.elapsed().as_secs_f64();
    let logs = imgctl(&service, &["logs", &name]);
    let _ = imgctl(&service, &["down", "--volumes", "--time", "1", &name]);
    // The renamed node: the runtime refuses it, and nothing is left.
    let renamed = up(
        &service,
        at,
        kind,
        &["--gpus", "device=0", "--gpu-api", "cdi"],
    );
    let after = podman_user(&["ps", "-a", "-q", "--filter", &format!("name=^{name}$")]);
    let _ = imgctl(&service, &["down", "--volumes", "--time", "1", &name]);
    let _ = podman_user(&["rmi", "-f", &image]);

    let (stdout, stderr) = texts(&ok);
    assert_eq!(ok.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("up --json");
    assert_eq!(report["gpu_api"], "cdi", "{stdout}");
    // libpod's create carries the ulimits (the compatible one drops them
    // rootless): the runtime refuses memlock=-1 above the user's hard
    // limit, and up keeps the engine's and says so.
    assert!(
        stderr.contains("may not raise the ulimit memlock=-1"),
        "{stderr}"
    );
    let (log, _) = texts(&logs);
    assert!(log.contains("IMGCTL_TEST_CDI_GPU=1"), "{log}");
    assert!(
        log.contains(&format!("imgctl-test-gpu1-{}", std::process::id())),
        "{log}"
    );
    let (_, refused) = texts(&renamed);
    assert_ne!(renamed.status.code(), Some(0), "{refused}");
    let line = one_error_line(&refused).to_string();
    assert!(line.contains("error creating device nodes"), "{refused}");
    assert_eq!(String::from_utf8_lossy(&after.stdout).trim(), "");
    eprintln!("up --gpus device=1 --gpu-api cdi on rootless Podman: {up_s:.1} s; its stderr:\n{stderr}\nthe renamed node: {line}");
}

#[test]
fn on_podman_a_run_with_cdi_names_no_spec_knows_is_refused_and_its_container_removed() {
    use imgctl::docker::cdi::GpuApi;
    use imgctl::docker::run::{run_to_completion, GpuRequestRejected, RunRequest};
    crate::build::ensure_bases();
    load_into_podman(crate::build::BUSYBOX_BASE);
    let service = PodmanService::rootful();
    let (rt, engine) = crate::podman::connect(&service);
    let label = (
        "io.imgctl.test.cdi-run".to_string(),
        std::process::id().to_string(),
    );
    let request = |gpu_api| RunRequest {
        image: crate::build::BUSYBOX_BASE.to_string(),
        cmd: vec!["echo".into(), "ran".into()],
        gpus: Some(imgctl::gpus::GpuSelection::All),
        gpu_api,
        labels: [label.clone()].into_iter().collect(),
        timeout: std::time::Duration::from_secs(60),
        ..Default::default()
    };
    let left = || {
        let out = podman(&[
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("label={}={}", label.0, label.1),
        ]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // The container verify --image would run (the same path): made by
    // libpod's create, refused at start for want of a spec, removed.
    let started = Instant::now();
    let err = rt
        .block_on(run_to_completion(&engine.docker, request(GpuApi::Auto)))
        .unwrap_err();
    let refused_s = started.elapsed().as_secs_f64();
    let rejected = err
        .chain()
        .find_map(|c| c.downcast_ref::<GpuRequestRejected>())
        .unwrap_or_else(|| panic!("not a GPU refusal: {err:#}"));
    assert_eq!(rejected.refusal, imgctl::docker::run::Refusal::NoCdiSpec);
    assert!(
        rejected
            .why
            .contains("unresolvable CDI devices nvidia.com/gpu=all"),
        "{rejected}"
    );
    assert!(
        rejected.why.contains("nvidia-ctk cdi generate"),
        "{rejected}"
    );
    assert_eq!(left(), "");
    // The runtime's request: refused before anything is made.
    let err = rt
        .block_on(run_to_completion(&engine.docker, request(GpuApi::Runtime)))
        .unwrap_err();
    assert!(
        format!("{err:#}").contains("Podman has no NVIDIA runtime hook"),
        "{err:#}"
    );
    assert_eq!(left(), "");
    // Without GPUs: the compatible create, and no GPU API to record.
    let out = rt
        .block_on(run_to_completion(
            &engine.docker,
            RunRequest {
                gpus: None,
                ..request(GpuApi::Auto)
            },
        ))
        .unwrap();
    assert_eq!((out.exit_code, out.stdout.trim()), (0, "ran"));
    assert_eq!(out.gpu_api, None);
    assert_eq!(left(), "");
    eprintln!("a run with nvidia.com/gpu=all on rootful Podman (no spec): refused in {refused_s:.1} s: {rejected}");
}
