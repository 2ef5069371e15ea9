//! The end-to-end image on Podman (#43), rootful and rootless, a step of
//! `real_image_end_to_end`: the image the Docker engine built, copied into
//! Podman's storage, then `imgctl up` with JupyterLab reached with its
//! token and SSH logged in, a short `train-demo` run inside over SSH, `ps`,
//! `down`; and `build --verify --attest` of a spec that adds files and
//! labels on top of it (tests/fixtures/specs/on-top.yaml: the verify inside
//! needs the image's torch).
//!
//! Both copies are pulled from the e2e test's kept registry, where the
//! Docker engine pushed the image first ([`Pushed`]): a copy from the
//! engine (`skopeo copy docker-daemon:`, `docker save | podman load`)
//! wrote the whole image as a tar into /var/tmp and its layers again into
//! a temporary folder before Podman's storage took them (13 GB of /var/tmp
//! at its peak beside the copy's 6.6 GB, 2026-12-07: a CI machine ran out
//! of disk there); a pull keeps only the compressed layers (3.3 GB) while
//! it unpacks them, and the registry's storage is the one the signed push
//! (`supply.rs`) fills anyway. Rootless: a service run as the test user
//! (`podman::rootless`), the pull as the user into the user's overlay
//! storage (scripts/setup.sh makes it overlay: vfs would store every layer
//! whole), and `up` by default in `keep-id:uid=1000,gid=1000`: the user is
//! the image's `dev` inside, so what `train-demo` writes in /workspace is
//! the user's own on the host.
//! The copy, the containers and the volume go on every path, by guards.
use serde_json::json;

use super::*;
use crate::podman::rootless::{as_user, one_at_a_time, user, user_folder};
use crate::podman::{podman, PodmanService};

/// The Podman a step runs on: root's, or the test user's (rootless).
struct Side {
    service: PodmanService,
    rootless: bool,
}

impl Side {
    /// The Podman CLI on this side's storage (as the test user when rootless,
    /// with the service's containers.conf).
    fn cli(&self, args: &[&str]) -> Output {
        if !self.rootless {
            return podman(args);
        }
        as_user("podman", self.service.dir.path())
            .env(
                "CONTAINERS_CONF",
                self.service.dir.path().join("containers.conf"),
            )
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `rootful` or `rootless`, for messages.
    fn word(&self) -> &'static str {
        if self.rootless {
            "rootless"
        } else {
            "rootful"
        }
    }

    /// Runs imgctl (as root) against this side's service with `HOME` at `home`.
    fn imgctl(&self, home: &Path, args: &[&str]) -> Output {
        crate::podman::on_service(&self.service)
            .args(args)
            .env("HOME", home)
            .output()
            .unwrap()
    }
}

/// Removes, when dropped, the images, workstations (with their home
/// volumes) and build cache it was told about from a [`Side`]'s storage,
/// through its CLI (the service may be gone by then).
struct Leftovers<'a> {
    side: &'a Side,
    images: Vec<String>,
    workstations: Vec<String>,
    /// Remove the untagged images a build on top of the copy left (buildah
    /// keeps each step's image as its cache; they carry the end-to-end
    /// image's labels): they would keep the copy's 6.6 GB of layers.
    build_cache: bool,
}

impl<'a> Leftovers<'a> {
    fn new(side: &'a Side) -> Self {
        Self {
            side,
            images: Vec::new(),
            workstations: Vec::new(),
            build_cache: false,
        }
    }
}

impl Drop for Leftovers<'_> {
    fn drop(&mut self) {
        for name in &self.workstations {
            let _ = self.side.cli(&["rm", "-f", "-t", "1", name]);
            let _ = self
                .side
                .cli(&["volume", "rm", "-f", &format!("{name}-home")]);
        }
        if self.build_cache {
            let left = self.side.cli(&[
                "images",
                "-q",
                "--filter",
                "dangling=true",
                "--filter",
                "label=org.opencontainers.image.title=imgctl-cu124",
            ]);
            for id in texts(&left).0.split_whitespace() {
                let _ = self.side.cli(&["rmi", "-f", id]);
            }
        }
        for image in &self.images {
            let _ = self.side.cli(&["rmi", "-f", image]);
        }
    }
}

/// What a step measured, in seconds.
struct Times {
    copy: f64,
    up: f64,
    jupyter: f64,
    ssh: f64,
    train: f64,
    down: f64,
    attest: f64,
    phases: Value,
}

impl Times {
    fn say(&self, side: &Side, copied_by: &str) {
        eprintln!(
            "e2e on {} Podman: {copied_by} {:.1} s, up to healthy and verified {:.1} s (phases {}), Jupyter {:.1} s, SSH {:.1} s, train-demo (20 steps, CPU) {:.1} s, down {:.1} s, build --verify --attest {:.1} s",
            side.word(),
            self.copy,
            self.up,
            self.phases,
            self.jupyter,
            self.ssh,
            self.train,
            self.down,
            self.attest
        );
    }
}

/// The end-to-end image in the kept registry, for the Podman steps to pull:
/// pushed by the Docker engine under a tag of this run, untagged on the
/// engine when dropped (its layers stay in the registry for the signed
/// push, which then sends only what changed).
pub(super) struct Pushed {
    /// The pushed reference (`127.0.0.1:PORT/imgctl-test/e2e:podman-PID`).
    pub(super) reference: String,
    /// How long the push took, in seconds.
    pub(super) push_s: f64,
    /// The registry, serving while the steps pull.
    _registry: crate::build::LocalRegistry,
}

impl Pushed {
    /// Tags and pushes the end-to-end image to the kept registry.
    pub(super) fn push(pid: u32, work: &Path) -> Self {
        let registry = super::e2e_registry();
        let reference = format!("127.0.0.1:{}/imgctl-test/e2e:podman-{pid}", registry.port);
        let config = work.join("podman-push-config");
        std::fs::create_dir_all(&config).unwrap();
        registry.write_docker_config(&config, "e2e", "e2e-pw");
        docker_ok(&["tag", E2E_TAG, &reference]);
        let started = Instant::now();
        let out = Command::new("docker")
            .arg("--config")
            .arg(&config)
            .args(["push", "-q", &reference])
            .env("DOCKER_API_VERSION", "1.41")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "docker push {reference}: {}",
            texts(&out).1
        );
        Self {
            reference,
            push_s: started.elapsed().as_secs_f64(),
            _registry: registry,
        }
    }

    /// Pulls it into `side`'s storage (`podman pull`, as the user when
    /// rootless) and tags it `local`; the seconds it took.
    fn pull_into(&self, side: &Side, local: &str) -> f64 {
        let started = Instant::now();
        let out = side.cli(&[
            "pull",
            "-q",
            "--tls-verify=false",
            "--creds",
            "e2e:e2e-pw",
            &self.reference,
        ]);
        assert!(
            out.status.success(),
            "podman pull ({}): {}",
            side.word(),
            texts(&out).1
        );
        let out = side.cli(&["tag", &self.reference, local]);
        assert!(out.status.success(), "podman tag: {}", texts(&out).1);
        let out = side.cli(&["rmi", &self.reference]);
        assert!(out.status.success(), "podman untag: {}", texts(&out).1);
        started.elapsed().as_secs_f64()
    }
}

impl Drop for Pushed {
    fn drop(&mut self) {
        let _ = docker(&["rmi", &self.reference]);
    }
}

/// The end-to-end image on rootful Podman, pulled from the kept registry.
pub(super) fn workstation_on_podman(pid: u32, key: &Path, work: &Path, pushed: &Pushed) {
    let side = Side {
        service: PodmanService::rootful(),
        rootless: false,
    };
    let mut left = Leftovers::new(&side);
    let copy = format!("localhost/imgctl-test/e2e-podman:{pid}");
    left.images.push(copy.clone());
    let copy_s = pushed.pull_into(&side, &copy);
    // The image's user (uid 1000) writes the project folder.
    let folder = work.join("podman-project");
    std::fs::create_dir_all(&folder).unwrap();
    std::os::unix::fs::chown(&folder, Some(1000), Some(1000)).unwrap();
    let times = use_it(&side, &mut left, &copy, pid, key, &folder, work, copy_s);
    times.say(&side, "podman pull from the registry");
}

/// The end-to-end image on rootless Podman: a service of the test user,
/// the copy loaded into the user's storage, `up` with its default user
/// namespace (the user is the image's `dev` inside).
pub(super) fn workstation_on_rootless_podman(pid: u32, key: &Path, work: &Path, pushed: &Pushed) {
    let _one = one_at_a_time();
    let side = Side {
        service: PodmanService::rootless(),
        rootless: true,
    };
    let mut left = Leftovers::new(&side);
    let copy = format!("localhost/{E2E_TAG}");
    left.images.push(copy.clone());
    // A copy left by a run that was killed holds an older imgctl.
    let _ = side.cli(&["rmi", "-f", &copy]);
    let copy_s = pushed.pull_into(&side, &copy);
    // The service (the user) must reach the folder; the user owns it, and
    // is the image's uid 1000 inside.
    let (uid, gid, _) = user();
    let project = user_folder(true);
    let folder = project.path().to_path_buf();
    let times = use_it(&side, &mut left, &copy, pid, key, &folder, work, copy_s);
    // train-demo ran as dev (uid 1000 inside): its files are the user's.
    use std::os::unix::fs::MetadataExt;
    let metrics = std::fs::metadata(folder.join("run/metrics.jsonl")).unwrap();
    assert_eq!(
        (metrics.uid(), metrics.gid()),
        (uid, gid),
        "train-demo's metrics are not the user's"
    );
    times.say(&side, "podman pull from the registry as the user");
}

/// `up` of `image` on `side` with `folder` at /workspace, JupyterLab and
/// SSH reached, `train-demo` inside over SSH, `ps`, `down`; then `build
/// --verify --attest` on top of it. `copy_s`: the copy's time, passed on.
#[allow(clippy::too_many_arguments)]
fn use_it(
    side: &Side,
    left: &mut Leftovers,
    image: &str,
    pid: u32,
    key: &Path,
    folder: &Path,
    work: &Path,
    copy_s: f64,
) -> Times {
    let word = side.word();
    let name = format!("imgctl-e2e-podman-{word}-{pid}");
    left.workstations.push(name.clone());
    let home = work.join(format!("podman-home-{word}"));
    let started = Instant::now();
    let out = side.imgctl(
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
            image,
        ],
    );
    let up_s = started.elapsed().as_secs_f64();
    let (stdout, stderr) = texts(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "imgctl up on {word} Podman:\n{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).expect("up --json");
    assert_eq!(report["verify"]["passed"], true, "{stdout}");
    assert_eq!(report["gpus"], "none", "{stdout}");
    // Rootless: by default the user is the image's user inside; rootful:
    // the engine's own namespace.
    let userns = if side.rootless {
        json!("keep-id:uid=1000,gid=1000")
    } else {
        Value::Null
    };
    assert_eq!(report["userns"], userns, "{stdout}");

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
        "id -un; id -u; python -c 'import torch; print(torch.__version__)'",
    );
    let (said, err) = texts(&out);
    assert!(
        out.status.success(),
        "ssh into the {word} Podman workstation: {err}"
    );
    assert_eq!(said.lines().take(2).collect::<Vec<_>>(), ["dev", "1000"]);
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
    let ps = side.imgctl(&home, &["ps", "--json"]);
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
    let out = side.imgctl(&home, &["down", "--volumes", "--time", "10", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    let down_s = started.elapsed().as_secs_f64();
    let gone = side.cli(&["ps", "-a", "-q", "--filter", &format!("name=^{name}$")]);
    assert_eq!(texts(&gone).0.trim(), "", "down left the container");
    assert!(!side
        .cli(&["volume", "exists", &format!("{name}-home")])
        .status
        .success());
    assert!(folder.join("run/metrics.jsonl").exists());

    let attest = attested_build(side, left, image, pid, work);
    Times {
        copy: copy_s,
        up: up_s,
        jupyter: jupyter_s,
        ssh: ssh_s,
        train: train_s,
        down: down_s,
        attest,
        phases: report["seconds"].clone(),
    }
}

/// `build --verify --attest DIR` on `side`, of the on-top spec over the
/// copied image: the verdict (passed), the SBOM (the image's torch) and
/// the provenance are written, and the image is tagged once verified.
/// Returns its wall time.
fn attested_build(side: &Side, left: &mut Leftovers, base: &str, pid: u32, work: &Path) -> f64 {
    left.build_cache = true;
    let word = side.word();
    let tag = format!("localhost/imgctl-test/e2e-podman-attest-{word}:{pid}");
    left.images.push(tag.clone());
    let dir = work.join(format!("podman-attest-{word}"));
    let spec = crate::common::repo_root().join("tests/fixtures/specs/on-top.yaml");
    let started = Instant::now();
    let out = side.imgctl(
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
        "build --attest on {word} Podman:\n{stderr}"
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
    assert!(side.cli(&["image", "exists", &tag]).status.success());
    attest_s
}
