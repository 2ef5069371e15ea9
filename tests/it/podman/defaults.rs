//! `up` on a rootful Podman service started with the package's defaults
//! (#53 F6): no containers.conf of the tests'. On this machine Podman's
//! own default ulimits (nofile 1048576, nproc 4194304) are more than its
//! runtime may set without CAP_SYS_RESOURCE, and crun 1.8 cannot run a
//! container on hybrid cgroups at all. `up` must name the engine and each
//! limit, ask for one the runtime may set, and end on the runtime's own
//! refusal with the containers.conf line that gets past it; with only
//! `runtime = "runc"` in containers.conf it must come up, the limits
//! lowered and said. A host whose runtime takes the defaults comes up at
//! once, and then nothing is said.
use std::process::Output;

use super::*;
use crate::common::one_error_line;

/// `up` of `image` as `name` on `service`, no folder, no verify.
fn up(service: &PodmanService, name: &str, image: &str) -> Output {
    imgctl_on(
        service,
        &[
            "up",
            "--name",
            name,
            "--no-mount",
            "--no-verify",
            "--wait",
            "20",
            "--json",
            image,
        ],
    )
}

/// The workstation's ulimits as Podman made it.
fn ulimits(name: &str) -> String {
    let out = podman(&["inspect", "--format", "{{json .HostConfig.Ulimits}}", name]);
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn up_on_podman_with_the_package_defaults_names_the_engine_the_limits_and_the_runtime() {
    crate::build::ensure_bases();
    load_into_podman(crate::build::BUSYBOX_BASE);
    let mut images = PodmanImages::default();
    let image = tag("defaults");
    images.add(&image);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!(
            "FROM {}\nLABEL io.imgctl.user=dev io.imgctl.uid=1000\nCMD [\"sleep\", \"600\"]\n",
            crate::build::BUSYBOX_BASE
        ),
    )
    .unwrap();
    let out = podman(&["build", "-q", "-t", &image, dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "podman build: {}", texts(&out).1);
    let name = format!("h-podman-it-defaults-{}", std::process::id());
    let _workstation = PodmanWorkstation(name.clone());

    // The package's defaults.
    let service = PodmanService::rootful_with(None);
    let out = up(&service, &name, &image);
    let (_, stderr) = texts(&out);
    let limited = !out.status.success();
    if limited {
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let line = one_error_line(&stderr);
        assert!(
            line.contains("the engine's runtime cannot run containers here")
                && line.contains("cgroups in hybrid mode"),
            "{stderr}"
        );
        assert!(
            stderr.contains(
                "set `runtime = \"runc\"` under [engine] in /etc/containers/containers.conf"
            ),
            "{stderr}"
        );
        // On the way, each of Podman's own limits was named, with Podman's
        // name and never dockerd's advice.
        assert!(
            stderr.contains("Podman's runtime may not set its own default ulimit nofile here"),
            "{stderr}"
        );
        assert!(!stderr.contains("dockerd"), "{stderr}");
        let left = podman(&["ps", "-a", "-q", "--filter", &format!("name=^{name}$")]);
        assert_eq!(texts(&left).0, "", "a container was left");
        let home = podman(&[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("name={name}-home"),
        ]);
        assert_eq!(texts(&home).0, "", "its home volume was left");
    }
    drop(service);

    // runtime = "runc" alone: up comes up, each limit lowered and said.
    let service = PodmanService::rootful_with(Some("[engine]\nruntime = \"runc\"\n"));
    let out = up(&service, &name, &image);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("up --json");
    assert_eq!(report["name"], name.as_str(), "{stdout}");
    if limited {
        for limit in ["nofile", "nproc"] {
            assert!(
                stderr.contains(&format!(
                    "Podman's runtime may not set its own default ulimit {limit} here"
                )),
                "{limit}: {stderr}"
            );
            assert!(
                ulimits(&name).contains(&format!("RLIMIT_{}", limit.to_uppercase())),
                "{limit}"
            );
        }
        assert!(!stderr.contains("dockerd"), "{stderr}");
    }
    let out = imgctl_on(&service, &["down", "--volumes", "--time", "1", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);

    // An image Podman does not hold: the hint names Podman and its CLI
    // (#53 F21: it said `docker images`).
    let missing = up(&service, &name, "imgctl-test/no-such-image:0");
    let (_, stderr) = texts(&missing);
    assert_eq!(missing.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("this Podman engine has no image of that name")
            && stderr.contains("`podman images`")
            && !stderr.contains("docker images"),
        "{stderr}"
    );
}
