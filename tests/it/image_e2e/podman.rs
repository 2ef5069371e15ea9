//! The end-to-end image on rootful Podman (#43), a step of
//! `real_image_end_to_end`: the image the Docker engine built, copied into
//! Podman's storage (`skopeo copy`: 118 s here against 124 s for `docker
//! save | podman load`, both measured), then `imgctl up` with JupyterLab
//! reached with its token and SSH logged in, a short `train-demo` run
//! inside over SSH, `ps`, `down`; and `build --verify --attest` of a spec
//! that adds files and labels on top of it (tests/fixtures/specs/on-top.yaml:
//! the verify inside needs the image's torch).
//! The copy, the containers and the volume go on every path, by guards.
use super::*;
use crate::podman::{podman, PodmanImages, PodmanService, PodmanWorkstation};

/// Removes, when dropped, the untagged images a build on top of the copy
/// left in Podman's storage (buildah keeps each step's image as its cache;
/// they carry the end-to-end image's labels): they would keep the copy's
/// 6.6 GB of layers after the copy is removed.
struct BuildCache;

impl Drop for BuildCache {
    fn drop(&mut self) {
        let left = podman(&[
            "images",
            "-q",
            "--filter",
            "dangling=true",
            "--filter",
            "label=org.opencontainers.image.title=imgctl-cu124",
        ]);
        for id in texts(&left).0.split_whitespace() {
            let _ = podman(&["rmi", "-f", id]);
        }
    }
}

/// Runs imgctl against `service` with `HOME` at `home`.
fn imgctl_on(service: &PodmanService, home: &Path, args: &[&str]) -> Output {
    crate::podman::on_service(service)
        .args(args)
        .env("HOME", home)
        .output()
        .unwrap()
}

pub(super) fn workstation_on_podman(pid: u32, key: &Path, work: &Path) {
    let service = PodmanService::rootful();
    let mut images = PodmanImages::default();
    let copy = format!("localhost/imgctl-test/e2e-podman:{pid}");
    images.add(&copy);
    let started = Instant::now();
    let out = Command::new("skopeo")
        .args(["copy", "-q", &format!("docker-daemon:{E2E_TAG}")])
        .arg(format!("containers-storage:{copy}"))
        .stdin(Stdio::null())
        .output()
        .expect("run skopeo (scripts/setup.sh installs it)");
    assert!(out.status.success(), "skopeo copy: {}", texts(&out).1);
    let copy_s = started.elapsed().as_secs_f64();

    let name = format!("imgctl-e2e-podman-{pid}");
    let _workstation = PodmanWorkstation(name.clone());
    let folder = work.join("podman-project");
    std::fs::create_dir_all(&folder).unwrap();
    let chown = Command::new("chown")
        .args(["1000:1000"])
        .arg(&folder)
        .status()
        .unwrap();
    assert!(chown.success());
    let home = work.join("podman-home");
    let started = Instant::now();
    let out = imgctl_on(
        &service,
        &home,
        &[
            "up",
            "--name",
            &name,
            "--json",
            "--mount",
            folder.to_str().unwrap(),
            "--ssh-key",
            key.with_extension("pub").to_str().unwrap(),
            &copy,
        ],
    );
    let up_s = started.elapsed().as_secs_f64();
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "imgctl up on Podman:\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("up --json");
    assert_eq!(report["verify"]["passed"], true, "{stdout}");
    assert_eq!(report["gpus"], "none", "{stdout}");

    // JupyterLab: refused without the token, answers with it.
    let started = Instant::now();
    let url = report["jupyter"]["open"].as_str().unwrap();
    let token = url.rsplit("token=").next().unwrap();
    let jupyter = report["jupyter"]["port"].as_u64().unwrap() as u16;
    assert_eq!(http_status(jupyter, "/api/status", None), 403);
    assert_eq!(http_status(jupyter, "/api/status", Some(token)), 200);
    let jupyter_s = started.elapsed().as_secs_f64();

    // SSH as the image's user, with the image's torch.
    let started = Instant::now();
    let ssh_port = report["ssh"]["port"].as_u64().unwrap() as u16;
    let out = ssh(
        key,
        ssh_port,
        &[],
        "id -un; python -c 'import torch; print(torch.__version__)'",
    );
    let (said, err) = texts(&out);
    assert!(
        out.status.success(),
        "ssh into the Podman workstation: {err}"
    );
    assert_eq!(said.lines().next(), Some("dev"), "{said}");
    assert!(said.contains("2.7.0"), "{said}");
    let ssh_s = started.elapsed().as_secs_f64();

    // train-demo inside (imgctl has no `train-demo --image`: the image's
    // imgctl, over SSH), its metrics written to the mounted folder.
    let started = Instant::now();
    let out = ssh(
        key,
        ssh_port,
        &[],
        "imgctl train-demo --preset tiny --device cpu --steps 20 --out /workspace/run",
    );
    assert!(out.status.success(), "train-demo: {}", texts(&out).1);
    let metrics = std::fs::read_to_string(folder.join("run/metrics.jsonl")).unwrap_or_default();
    assert!(metrics.lines().count() > 0, "no metrics: {}", texts(&out).1);
    let train_s = started.elapsed().as_secs_f64();

    // ps lists it running; down removes it and its volume, keeps the folder.
    let ps = imgctl_on(&service, &home, &["ps", "--json"]);
    let ps: Value = serde_json::from_str(&texts(&ps).0).expect("ps --json");
    let row = ps["workstations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == name.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{name} not in ps: {ps}"));
    assert_eq!(row["state"], "running", "{row}");
    let started = Instant::now();
    let out = imgctl_on(
        &service,
        &home,
        &["down", "--volumes", "--time", "10", &name],
    );
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    let down_s = started.elapsed().as_secs_f64();
    let left = podman(&["ps", "-a", "-q", "--filter", &format!("name=^{name}$")]);
    assert_eq!(texts(&left).0.trim(), "", "down left the container");
    assert!(!podman(&["volume", "exists", &format!("{name}-home")])
        .status
        .success());
    assert!(folder.join("run/metrics.jsonl").exists());

    let attest_s = attested_build_on_podman(&service, &copy, pid, work);
    eprintln!(
        "e2e on Podman: skopeo copy {copy_s:.1} s, up to healthy and verified {up_s:.1} s (phases {}), Jupyter {jupyter_s:.1} s, SSH {ssh_s:.1} s, train-demo (20 steps, CPU) {train_s:.1} s, down {down_s:.1} s, build --verify --attest {attest_s:.1} s",
        report["seconds"]
    );
}

/// `build --verify --attest DIR` on Podman, of the on-top spec over the
/// copied image: the verdict (passed), the SBOM (the image's torch) and
/// the provenance are written, and the image is tagged once verified.
/// Returns its wall time.
fn attested_build_on_podman(service: &PodmanService, base: &str, pid: u32, work: &Path) -> f64 {
    let _cache = BuildCache;
    let mut images = PodmanImages::default();
    let tag = format!("localhost/imgctl-test/e2e-podman-attest:{pid}");
    images.add(&tag);
    let dir = work.join("podman-attest");
    let spec = crate::common::repo_root().join("tests/fixtures/specs/on-top.yaml");
    let started = Instant::now();
    let out = imgctl_on(
        service,
        work,
        &[
            "build",
            "--spec",
            spec.to_str().unwrap(),
            "--base-image",
            base,
            "--imgctl-binary",
            work.join("imgctl").to_str().unwrap(),
            "--tag",
            &tag,
            "--verify",
            "--expect-gpus",
            "0",
            "--attest",
            dir.to_str().unwrap(),
        ],
    );
    let attest_s = started.elapsed().as_secs_f64();
    let (_, stderr) = texts(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "build --attest on Podman:\n{stderr}"
    );
    let read = |file: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{file}: {e}\n{stderr}"))
    };
    assert_eq!(read("verify.intoto.json")["predicate"]["passed"], true);
    let sbom = read("sbom.cdx.json").to_string();
    assert!(
        sbom.contains("pkg:pypi/torch@2.7.0"),
        "no torch in the SBOM"
    );
    let provenance = read("provenance.intoto.json");
    assert!(
        provenance["subject"]
            .as_array()
            .is_some_and(|s| !s.is_empty()),
        "{provenance}"
    );
    assert!(podman(&["image", "exists", &tag]).status.success());
    attest_s
}
