//! `imgctl up`, `ps`, `down` and `logs` against the real engine: what a
//! person trips on first (a missing image, an image imgctl did not build, a
//! taken port, `--gpus` on a host whose engine cannot give GPUs, a name that
//! is no workstation) each stops with one error line and a hint, and leaves
//! no container. The workstation itself (JupyterLab with its token, SSH with
//! the key, `ps`, `down`) runs on the end-to-end image in `image_e2e.rs`,
//! which is built there once.
mod kept;
use kept::{token_and_ports_are_kept, two_ups_at_once_get_their_own_ports};
use std::process::Command;

use crate::build::{docker, docker_ok, ensure_bases, test_tag, EngineGuard, BUSYBOX_BASE};
use crate::common::{imgctl, one_error_line, texts};

/// A tiny image that carries the label `up` looks for (the image's user),
/// made from the local busybox base: enough to reach the engine's GPU
/// request, which fails before anything in it runs.
fn labelled_image(guard: &mut EngineGuard, test: &str) -> String {
    labelled_image_with(guard, test, "")
}

/// [`labelled_image`] with `extra` Dockerfile lines (a healthcheck).
pub(crate) fn labelled_image_with(guard: &mut EngineGuard, test: &str, extra: &str) -> String {
    ensure_bases();
    let tag = test_tag(&format!("ws-{test}"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!("FROM {BUSYBOX_BASE}\nLABEL io.imgctl.user=dev io.imgctl.uid=1000\n{extra}CMD [\"sleep\", \"600\"]\n"),
    )
    .unwrap();
    let out = Command::new("docker")
        .args(["build", "-q", "-t", &tag])
        .arg(dir.path())
        .env("DOCKER_BUILDKIT", "0")
        .output()
        .unwrap();
    assert!(out.status.success(), "docker build: {}", texts(&out).1);
    guard.image(&tag);
    tag
}

/// `imgctl up` with `args` (never a real key or this folder): exit code and stderr.
fn up(args: &[&str]) -> (Option<i32>, String) {
    let empty = tempfile::tempdir().unwrap();
    let mut full = vec!["up", "--no-mount", "--no-verify", "--wait", "20"];
    full.extend_from_slice(args);
    let out = Command::new(crate::common::imgctl_bin())
        .args(&full)
        .env("HOME", empty.path())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (out.status.code(), texts(&out).1)
}

fn containers_named(name: &str) -> String {
    docker_ok(&["ps", "-a", "-q", "--filter", &format!("name=^/{name}$")])
}

#[test]
fn up_refuses_what_a_new_user_trips_on_with_one_line_and_leaves_nothing() {
    let mut guard = EngineGuard::default();
    let name = format!("imgctl-it-ws-{}", std::process::id());

    // A missing image.
    let (code, err) = up(&["--name", &name, "imgctl-test/no-such-image:missing"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(one_error_line(&err).contains("not found"), "{err}");
    // The hint names the engine and its own CLI (#53 F21).
    assert!(
        err.contains(
            "hint: this Docker engine has no image of that name: build it with `imgctl build`"
        ),
        "{err}"
    );

    // An image imgctl did not build: nothing in it starts JupyterLab or SSH.
    ensure_bases();
    let (code, err) = up(&["--name", &name, BUSYBOX_BASE]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        one_error_line(&err).contains("was not built by imgctl"),
        "{err}"
    );
    assert!(err.contains("hint: build one with `imgctl build`"), "{err}");

    // A taken port, asked for by name: refused before the engine is asked.
    let held = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = held.local_addr().unwrap().port().to_string();
    let image = labelled_image(&mut guard, "refusals");
    let (code, err) = up(&["--name", &name, "--jupyter-port", &port, &image]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        one_error_line(&err).contains(&format!(
            "--jupyter-port {port}: port {port} on 127.0.0.1 is taken"
        )),
        "{err}"
    );
    assert!(err.contains("hint: free it"), "{err}");

    // --gpus on an engine that cannot give GPUs (no NVIDIA Container Toolkit here).
    let (code, err) = up(&["--name", &name, "--gpus", "all", &image]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        one_error_line(&err)
            .contains("--gpus all: the Docker engine cannot give the container GPUs"),
        "{err}"
    );
    assert!(err.contains("NVIDIA Container Toolkit"), "{err}");
    assert_eq!(
        containers_named(&name),
        "",
        "a refused up left its container"
    );

    // Bad values of up's own flags: usage errors naming the flag.
    for (args, words) in [
        (
            vec!["--shm-size", "lots"],
            "--shm-size \"lots\" is not a size",
        ),
        (
            vec!["--listen", "localhost:80"],
            "--listen \"localhost:80\" is not an IP address",
        ),
        (vec!["--name", "a/b"], "--name a/b is not a container name"),
        (vec!["--gpus", "0"], "--gpus 0 asks for no GPU"),
    ] {
        let mut full = args.clone();
        full.push(&image);
        let (code, err) = up(&full);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(one_error_line(&err).contains(words), "{args:?}: {err}");
    }

    let out = imgctl(&["up", "--wait", "0", &image]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_error_line(&texts(&out).1).contains("--wait 0 is not a number of seconds"));

    // down and logs touch only workstations.
    // Nor its home volume: the failed ups' containers took theirs along.
    assert!(
        !docker(&["volume", "inspect", &format!("{name}-home")])
            .status
            .success(),
        "a failed up left the volume {name}-home"
    );
    let out = imgctl(&["down", &name]);
    assert_eq!(out.status.code(), Some(2));
    assert!(one_error_line(&texts(&out).1).contains(&format!("no workstation named {name}")));
    let other = format!("imgctl-it-not-ws-{}", std::process::id());
    guard.container(&other);
    docker_ok(&["create", "--name", &other, &image]);
    for cmd in ["down", "logs"] {
        let out = imgctl(&[cmd, &other]);
        let (_, err) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            one_error_line(&err).contains("not an imgctl workstation"),
            "{cmd}: {err}"
        );
    }
    assert_ne!(
        containers_named(&other),
        "",
        "down removed a container that is no workstation"
    );
    let _ = docker(&["rm", "-f", &other]);
}

/// A prefix of a workstation's id is no name (#40 P9: `down 4a12` removed
/// the workstation whose id starts so): down and logs refuse it, and the
/// workstation stays.
fn an_id_prefix_is_no_name(name: &str) {
    let id = docker_ok(&["inspect", "--format", "{{.Id}}", name]);
    for command in ["down", "logs"] {
        let out = imgctl(&[command, &id.trim()[..12]]);
        let (_, err) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {err}");
        assert!(err.contains("no workstation named"), "{command}: {err}");
    }
    assert_ne!(containers_named(name), "", "a prefix of its id removed it");
}

#[test]
fn up_without_gpus_flag_starts_without_gpus_on_this_engine_and_down_removes_it() {
    // The labelled busybox image has no healthcheck: up counts it healthy
    // once it runs; its `sleep` keeps it up. --no-verify: no imgctl inside.
    let mut guard = EngineGuard::default();
    let image = labelled_image(&mut guard, "auto");
    let name = format!("imgctl-it-ws-auto-{}", std::process::id());
    guard.container(&name);
    let root = tempfile::tempdir().unwrap();
    // A colon in the folder's name (#40 P10: a `Binds` string split it,
    // and the engine refused "invalid mode: /workspace").
    let mounted = root.path().join("col:on");
    std::fs::create_dir(&mounted).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let key = folder.path().join("k.pub");
    std::fs::write(
        &key,
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTheTest test@imgctl\n",
    )
    .unwrap();
    let out = imgctl(&[
        "up",
        "--name",
        &name,
        "--mount",
        mounted.to_str().unwrap(),
        "--ssh-key",
        key.to_str().unwrap(),
        "--no-verify",
        "--json",
        &image,
    ]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("starts without GPUs"), "{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("up --json");
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["gpus"], "none", "{stdout}");
    assert_eq!(
        report["workspace"],
        mounted.canonicalize().unwrap().to_str().unwrap()
    );
    let url = report["jupyter"]["open"].as_str().unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.contains("/lab?token="),
        "{url}"
    );
    let token = url.rsplit('=').next().unwrap();
    assert_eq!(token.len(), 32, "{url}");
    assert!(
        report["ssh"]["open"]
            .as_str()
            .unwrap()
            .starts_with("ssh -p "),
        "{stdout}"
    );
    // What the engine was told: /dev/shm, the ulimits, loopback only, the folder.
    verify_inside_expects_no_gpu(&name);
    let host = docker_ok(&["inspect", "--format", "{{json .HostConfig}}", &name]);
    let host: serde_json::Value = serde_json::from_str(&host).unwrap();
    assert_eq!(host["ShmSize"], 16_i64 << 30);
    // The stack NCCL wants, and memlock unless this engine may not raise
    // it (a dockerd with a low hard limit of its own: then it says so).
    let ulimits = host["Ulimits"].to_string();
    assert!(ulimits.contains("\"stack\""), "{host}");
    assert!(
        ulimits.contains("\"memlock\"") || memlock_said(&stderr),
        "{ulimits}\n{stderr}"
    );
    for (_, bindings) in host["PortBindings"].as_object().unwrap() {
        assert_eq!(bindings[0]["HostIp"], "127.0.0.1", "{host}");
    }
    assert_eq!(host["Mounts"][0]["Type"], "bind", "{host}");
    assert_eq!(host["Mounts"][0]["Target"], "/workspace", "{host}");
    assert_eq!(
        host["Mounts"][0]["Source"],
        mounted.canonicalize().unwrap().to_str().unwrap()
    );

    an_id_prefix_is_no_name(&name);

    // A second up of the same name prints the same addresses, starts nothing.
    let again = imgctl(&[
        "up",
        "--name",
        &name,
        "--mount",
        mounted.to_str().unwrap(),
        "--json",
        &image,
    ]);
    let (again_out, again_err) = texts(&again);
    let again: serde_json::Value = serde_json::from_str(&again_out).unwrap();
    assert_eq!(again["already_up"], true);
    assert_eq!(again["jupyter"]["open"], report["jupyter"]["open"]);
    assert!(!again_err.contains("other settings"), "{again_err}");
    other_settings_are_named(&name, &image, &mounted);

    // ps lists it (JSON with its URL, and a table), -q its name alone.
    let ps = imgctl(&["ps", "--json"]);
    let ps: serde_json::Value = serde_json::from_str(&texts(&ps).0).unwrap();
    let row = ps["workstations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == name.as_str())
        .cloned();
    let row = row.unwrap_or_else(|| panic!("{name} not in ps: {ps}"));
    assert_eq!(row["state"], "running");
    assert_eq!(row["jupyter"]["open"], report["jupyter"]["open"]);
    let quiet = imgctl(&["-q", "ps"]);
    assert!(
        texts(&quiet).0.lines().any(|l| l == name),
        "{}",
        texts(&quiet).0
    );

    // down: the container is gone, the folder and its files stay.
    std::fs::write(mounted.join("notes.txt"), "kept").unwrap();
    let out = imgctl(&["down", "--time", "1", &name]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    assert_eq!(containers_named(&name), "");
    home_volume_was_kept(&name, &texts(&out).1);
    assert_eq!(
        std::fs::read_to_string(mounted.join("notes.txt")).unwrap(),
        "kept"
    );
    token_and_ports_are_kept(&name, &image, &mounted, &key, &report);

    two_ups_at_once_get_their_own_ports(&mut guard, folder.path(), &key, &image);
}

/// `down` without `--volumes` kept the home volume (#45 item 4) and said
/// so; it is removed here.
fn home_volume_was_kept(name: &str, said: &str) {
    assert!(said.contains(&format!("removed {name}")), "{said}");
    assert!(
        said.contains(&format!("the home volume {name}-home are kept")),
        "{said}"
    );
    // #53 F8: the printed `down --volumes NAME` works with the container
    // gone; the volume `up` made says whose home it is.
    let home = format!("{name}-home");
    let labels = docker_ok(&["volume", "inspect", "--format", "{{json .Labels}}", &home]);
    assert!(
        labels.contains(&format!("\"io.imgctl.workstation.home-of\":\"{name}\""))
            && labels.contains("io.imgctl.workstation.owner-uid"),
        "{labels}"
    );
    let out = imgctl(&["down", "--volumes", name]);
    let (_, err) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "removed the home volume {home} of {name} (its container was already gone)"
        )),
        "{err}"
    );
    assert!(!docker(&["volume", "inspect", &home]).status.success());
    // With nothing left, it is no workstation (a usage error, as before).
    let out = imgctl(&["down", "--volumes", name]);
    assert_eq!(out.status.code(), Some(2), "{}", texts(&out).1);
    assert!(texts(&out)
        .1
        .contains(&format!("no workstation named {name}")));
    // A volume of that name that `up` did not label, or another user's.
    docker_ok(&["volume", "create", &home]);
    let out = imgctl(&["down", "--volumes", name]);
    let (_, err) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("has no label saying it is") && err.contains("--volumes --force"),
        "{err}"
    );
    docker_ok(&["volume", "rm", &home]);
    docker_ok(&[
        "volume",
        "create",
        "--label",
        &format!("io.imgctl.workstation.home-of={name}"),
        "--label",
        "io.imgctl.workstation.owner-uid=4242",
        "--label",
        "io.imgctl.workstation.owner=alice",
        &home,
    ]);
    let out = imgctl(&["down", "--volumes", name]);
    let (_, err) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("alice (uid 4242)"), "{err}");
    assert!(docker(&["volume", "inspect", &home]).status.success());
    let out = imgctl(&["down", "--volumes", "--all-users", "--force", name]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    assert!(!docker(&["volume", "inspect", &home]).status.success());
}

/// A workstation removed from outside while `up` waits for its healthcheck
/// is said in words (it printed the engine's raw 404), exit 1.
#[test]
fn a_workstation_removed_during_the_wait_is_named_not_a_raw_404() {
    let mut guard = EngineGuard::default();
    let tag = labelled_image_with(
        &mut guard,
        "never-healthy",
        "HEALTHCHECK --interval=1s --retries=100 CMD false\n",
    );
    let name = format!("imgctl-it-ws-gone-{}", std::process::id());
    guard.container(&name);
    let empty = tempfile::tempdir().unwrap();
    let child = Command::new(crate::common::imgctl_bin())
        .args([
            "up",
            "--no-mount",
            "--no-verify",
            "--wait",
            "60",
            "--name",
            &name,
            &tag,
        ])
        .env("HOME", empty.path())
        .env("NO_COLOR", "1")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // Running, its healthcheck not passed yet: up is waiting for it.
    let health = |n: &str| {
        let out = Command::new("docker")
            .args(["inspect", "--format", "{{.State.Health.Status}}", n])
            .output()
            .unwrap();
        texts(&out).0.trim().to_string()
    };
    while health(&name) != "starting" {
        assert!(
            std::time::Instant::now() < deadline,
            "up started no container"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    docker_ok(&["rm", "-f", &name]);
    let out = child.wait_with_output().unwrap();
    let (_, err) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        one_error_line(&err).contains("was removed from outside while imgctl waited"),
        "{err}"
    );
    assert!(!err.contains("404"), "{err}");
}

/// `down` and `logs` without a name (#45 F15) take the workstation `up`
/// starts for the current folder (`imgctl-FOLDER`); in a folder that has
/// none, one line names the name looked for.
#[test]
fn down_and_logs_default_to_this_folders_workstation() {
    let mut guard = EngineGuard::default();
    let image = labelled_image(&mut guard, "folder");
    let root = tempfile::tempdir().unwrap();
    let folder = root.path().join(format!("f15-{}", std::process::id()));
    std::fs::create_dir(&folder).unwrap();
    let name = format!("imgctl-f15-{}", std::process::id());
    guard.container(&name);
    let home = tempfile::tempdir().unwrap();
    // A key in ~/.ssh: `up` turns SSH on with it (published port, kept host
    // key), which a restarted workstation must not count as a difference.
    std::fs::create_dir(home.path().join(".ssh")).unwrap();
    let keygen = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(home.path().join(".ssh/id_ed25519"))
        .status()
        .unwrap();
    assert!(keygen.success());
    let here = |args: &[&str], dir: &std::path::Path| {
        Command::new(crate::common::imgctl_bin())
            .args(args)
            .current_dir(dir)
            .env("HOME", home.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    // Nothing started for this folder yet: the name up would give is named.
    for command in ["down", "logs"] {
        let out = here(&[command], &folder);
        let (_, err) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{command}: {err}");
        assert!(
            one_error_line(&err).contains(&format!(
                "no workstation named {name}, the name `imgctl up` gives this folder"
            )),
            "{command}: {err}"
        );
    }
    let out = here(&["up", "--no-verify", "--wait", "20", &image], &folder);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    assert!(texts(&out).0.contains(&format!("{name} is up")), "{out:?}");
    let out = here(&["logs"], &folder);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    // Stopped (docker stop, a reboot), it starts again with up (#45 F16):
    // the same container, its token kept.
    let token = |n: &str| {
        docker_ok(&[
            "inspect",
            "--format",
            "{{range .Config.Env}}{{println .}}{{end}}",
            n,
        ])
        .lines()
        .find(|l| l.starts_with("JUPYTER_TOKEN="))
        .map(str::to_string)
    };
    let (id, before) = (
        docker_ok(&["inspect", "--format", "{{.Id}}", &name]),
        token(&name),
    );
    docker_ok(&["stop", "-t", "1", &name]);
    let out = here(&["up", "--no-verify", "--wait", "20", &image], &folder);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("{name} is stopped (")), "{stderr}");
    assert!(
        stderr.contains("starting it again with its token, keys and folder"),
        "{stderr}"
    );
    // Stopped, it publishes no port; what it was made with is no difference.
    assert!(!stderr.contains("other settings"), "{stderr}");
    assert!(stdout.contains(&format!("{name} is up in ")), "{stdout}");
    assert_eq!(
        docker_ok(&["inspect", "--format", "{{.Id}} {{.State.Running}}", &name]),
        format!("{id} true")
    );
    assert_eq!(token(&name), before);
    let out = here(&["down", "--volumes", "--time", "1"], &folder);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    assert!(
        texts(&out).1.contains(&format!("removed {name}")),
        "{out:?}"
    );
    assert_eq!(containers_named(&name), "");
}

/// Whether `up` said that Docker may not raise memlock: now, or (said once
/// per engine, #53 F11) at an earlier test's `up`, which left its mark in
/// the state folder.
fn memlock_said(stderr: &str) -> bool {
    let said_before = std::env::var_os("HOME")
        .map(|h| std::path::PathBuf::from(h).join(".local/state/imgctl/said"))
        .and_then(|d| std::fs::read_dir(d).ok())
        .is_some_and(|mut d| d.next().is_some());
    stderr.contains("Docker may not raise the ulimit memlock=-1 here") || said_before
}

/// A second `up` of a running workstation with other settings (#45 F5):
/// each difference is named, with how to apply it; nothing is changed.
fn other_settings_are_named(name: &str, image: &str, mounted: &std::path::Path) {
    // #53 F9: no IMAGE and no --shm-size is no other setting (the image is
    // not imgctl/cu124:latest, /dev/shm is 16g either way).
    let plain = imgctl(&["up", "--name", name, "--mount", mounted.to_str().unwrap()]);
    assert_eq!(plain.status.code(), Some(0), "{}", texts(&plain).1);
    assert!(
        !texts(&plain).1.contains("other settings"),
        "{}",
        texts(&plain).1
    );
    let other = imgctl(&[
        "up",
        "--name",
        name,
        "--no-mount",
        "--shm-size",
        "1g",
        "--no-verify",
        image,
    ]);
    let (_, err) = texts(&other);
    assert_eq!(other.status.code(), Some(0), "{err}");
    for words in [
        "runs with other settings than these, and nothing was changed",
        "--shm-size: it has 16g, asked 1g",
        "folder at /workspace: it has ",
        ", asked none mounted",
        &format!("`imgctl down {name}` (the folder is kept)"),
    ] {
        assert!(err.contains(words), "{words}: {err}");
    }
}

/// verify inside expects what up's quick verify expected (#45 F12): this
/// engine gave no GPU, so the retry without them says 0, once.
fn verify_inside_expects_no_gpu(name: &str) {
    let env = docker_ok(&["inspect", "--format", "{{json .Config.Env}}", name]);
    assert!(env.contains("\"IMGCTL_EXPECT_GPUS=0\""), "{env}");
    assert_eq!(env.matches("IMGCTL_EXPECT_GPUS=").count(), 1, "{env}");
}

/// #50 H2: on a shared engine, `ps`, `down` and `logs` act on the caller's
/// own workstations. Another user's (labelled by hand here, as that user's
/// imgctl labels it) is hidden, refused by name, and removed only with
/// `--all-users` and `--force` (no terminal to ask on); one of unknown
/// owner (an older imgctl's) is listed and never swept by `down --all`.
/// The test is its own user through `SUDO_UID` (honoured for root only), so
/// that its `down --all` cannot touch the suite's other workstations.
#[test]
fn down_all_removes_only_the_caller_s_workstations() {
    let mut guard = EngineGuard::default();
    let image = labelled_image(&mut guard, "owners");
    let pid = std::process::id();
    let me = (60_000 + pid % 5_000).to_string();
    let (mine, alice, old) = (
        format!("imgctl-own-me-{pid}"),
        format!("imgctl-own-alice-{pid}"),
        format!("imgctl-own-old-{pid}"),
    );
    for n in [&mine, &alice, &old] {
        guard.container(n);
    }
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(crate::common::imgctl_bin())
            .args(args)
            .env("HOME", home.path())
            .env("SUDO_UID", &me)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let (o, e) = texts(&out);
        (out.status.code(), o, e)
    };
    let (code, _, err) = run(&[
        "up",
        "--no-mount",
        "--no-verify",
        "--wait",
        "20",
        "--name",
        &mine,
        &image,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let labels = docker_ok(&["inspect", "--format", "{{json .Config.Labels}}", &mine]);
    assert!(
        labels.contains(&format!("\"io.imgctl.workstation.owner-uid\":\"{me}\"")),
        "{labels}"
    );
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &alice,
        "-e",
        "JUPYTER_TOKEN=alices-secret",
        "--label",
        "io.imgctl.workstation=true",
        "--label",
        "io.imgctl.workstation.owner-uid=4242",
        "--label",
        "io.imgctl.workstation.owner=alice",
        &image,
    ]);
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &old,
        "--label",
        "io.imgctl.workstation=true",
        &image,
    ]);
    // ps: mine and the unknown owner's, not alice's (and it says so).
    let (code, out, err) = run(&["ps", "-a"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&mine) && out.contains(&old), "{out}");
    assert!(!out.contains(&alice), "{out}");
    assert!(
        out.contains("owner unknown") && out.contains("OWNER"),
        "{out}"
    );
    // At least alice's (other tests' workstations, root's, may be running too).
    assert!(
        err.contains("of other users on this engine") && err.contains("not shown"),
        "{err}"
    );
    // --all-users shows hers, without her token.
    let (code, out, err) = run(&["ps", "-a", "--all-users", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let hers = v["workstations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == alice.as_str())
        .unwrap_or_else(|| panic!("{out}"))
        .clone();
    assert_eq!(hers["owner"]["name"], "alice");
    assert_eq!(hers["yours"], false);
    assert!(!out.contains("alices-secret"), "{out}");
    // By name, hers is refused by down, logs and up alike.
    for args in [
        vec!["down", alice.as_str()],
        vec!["logs", alice.as_str()],
        vec![
            "up",
            "--no-mount",
            "--no-verify",
            "--name",
            alice.as_str(),
            image.as_str(),
        ],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            one_error_line(&err).contains(&format!(
                "{alice} is alice (uid 4242)'s workstation, not yours"
            )),
            "{args:?}: {err}"
        );
    }
    // down --all: mine only.
    let (code, _, err) = run(&["down", "--all", "--time", "1"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(&format!("removed {mine}")), "{err}");
    assert!(
        err.contains("of unknown owner (started by an older imgctl"),
        "{err}"
    );
    assert_eq!(containers_named(&mine), "");
    assert_ne!(containers_named(&alice), "");
    assert_ne!(containers_named(&old), "");
    // --all-users with no terminal to ask on: refused, unless --force.
    let (code, _, err) = run(&["down", "--all-users", &alice]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        one_error_line(&err).contains("no terminal to ask on; nothing was removed"),
        "{err}"
    );
    assert_ne!(containers_named(&alice), "");
    let (code, _, err) = run(&["down", "--all-users", "--force", &alice]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(containers_named(&alice), "");
    // The unknown owner's goes when named.
    let (code, _, err) = run(&["down", "--force", &old]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(containers_named(&old), "");
}
