//! The image's workstation, step by step of `real_image_end_to_end`: its services
//! (JupyterLab, SSH) by hand and through `imgctl up`, hardened, with no path to root
//! and clean stops.
use super::*;

/// Both services of a default container, ports on loopback only: SSH with
/// the key as dev (no password, no root), JupyterLab with its token, and
/// every process dev's.
pub(super) fn workstation_services(
    guard: &mut EngineGuard,
    image: &str,
    name: &str,
    key: &Path,
    public: &str,
) {
    let (image, name) = (image.to_string(), name.to_string());
    // Both services, ports on loopback only.
    guard.container(&name);
    let started = Instant::now();
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &name,
        "-e",
        &format!("SSH_AUTHORIZED_KEYS={public}"),
        "-e",
        &format!("JUPYTER_TOKEN={TOKEN}"),
        "-p",
        "127.0.0.1::22",
        "-p",
        "127.0.0.1::8888",
        &image,
    ]);
    wait_healthy(&name, started);
    let to_healthy = started.elapsed();
    eprintln!(
        "e2e: docker run to healthy: {:.1} s",
        to_healthy.as_secs_f64()
    );

    // SSH with the fresh key, as the non-root user.
    let ssh_port = host_port(&name, "22/tcp");
    let out = ssh(
        key,
        ssh_port,
        &[],
        "id -un; id -u; python -c 'import torch; print(torch.__version__)'; imgctl --version",
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "ssh login failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.first(), Some(&"dev"), "{stdout}");
    assert_ne!(lines.get(1), Some(&"0"), "logged in as root: {stdout}");
    assert!(
        stdout.contains("2.7.0") && stdout.contains("imgctl "),
        "{stdout}"
    );
    // Password login is refused: the server offers public keys only.
    let out = ssh(
        key,
        ssh_port,
        &[
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
            "-o",
            "PubkeyAuthentication=no",
        ],
        "true",
    );
    let (_, stderr) = texts(&out);
    assert!(!out.status.success(), "password login was not refused");
    assert!(stderr.contains("Permission denied"), "{stderr}");
    let offered = stderr.split("Permission denied").nth(1).unwrap_or_default();
    assert!(
        !offered.contains("password") && !offered.contains("keyboard"),
        "{stderr}"
    );
    // Root may not log in, even with the right key.
    let root = Command::new("ssh")
        .arg("-i")
        .arg(key)
        .args([
            "-p",
            &ssh_port.to_string(),
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
        ])
        .args([
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "IdentitiesOnly=yes",
            "root@127.0.0.1",
            "true",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!root.status.success(), "root login was accepted");

    // JupyterLab's API: 403 without the token, 200 with it.
    let jupyter_port = host_port(&name, "8888/tcp");
    assert_eq!(http_status(jupyter_port, "/api/status", None), 403);
    assert_eq!(
        http_status(jupyter_port, "/api/status", Some("wrong-token")),
        403
    );
    assert_eq!(http_status(jupyter_port, "/api/status", Some(TOKEN)), 200);
    assert_eq!(http_status(jupyter_port, "/api/contents", Some(TOKEN)), 200);
    // #53 F24: the Lab's page carries the news pop-up's plugin as disabled
    // (/etc/jupyter/labconfig/page_config.json, read whatever venv runs it).
    let (status, page) = super::http_get(jupyter_port, "/lab", Some(TOKEN));
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("@jupyterlab/apputils-extension:announcements"),
        "the Lab's page config does not disable the announcements: {}",
        page.chars().take(2000).collect::<String>()
    );

    // imgctl inside the running container.
    let exec = docker_ok(&["exec", &name, "imgctl", "--version"]);
    assert!(exec.starts_with("imgctl "), "{exec}");
    // The image runs as its user from the start (reliability issue, item 4):
    // every process of the container, and `docker exec`, is dev's.
    let exec_user = docker_ok(&["exec", &name, "id", "-un"]);
    assert_eq!(exec_user.trim(), "dev", "docker exec lands as {exec_user}");
    let owners = docker_ok(&["exec", &name, "ps", "-eo", "user="]);
    assert!(
        owners.lines().all(|u| u.trim() == "dev"),
        "processes not run by dev:\n{owners}"
    );
}

/// `imgctl up` on the real image (issue 29, item 1): the folder at
/// /workspace, JupyterLab with the generated token (and without it refused),
/// SSH with the given key, the quick verify inside passed; `ps` lists it,
/// `down` leaves no container and the folder's files.
pub(super) fn workstation_up(guard: &mut EngineGuard, pid: u32, key: &Path, work: &Path) {
    let name = format!("imgctl-e2e-up-{pid}");
    guard.container(&name);
    let folder = work.join("project");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("hello.txt"), "from the host\n").unwrap();
    // The image's user (uid 1000) owns the folder, as on a workstation.
    let chown = Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(&folder)
        .status()
        .unwrap();
    assert!(chown.success());
    let started = Instant::now();
    let out = Command::new(imgctl_bin())
        .args(["up", "--name", &name, "--json", "--tensorboard", "--mount"])
        .arg(&folder)
        .arg("--ssh-key")
        .arg(key.with_extension("pub"))
        .arg(E2E_TAG)
        .env("NO_COLOR", "1")
        // The workstation's host key and its known_hosts line (#45 F4) go
        // to this HOME, not the machine's.
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "imgctl up failed:\n{stderr}");
    eprintln!(
        "e2e: imgctl up to healthy and verified: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // No warning (the folder is dev's), bar the memlock one of an engine
    // whose own limit is low (this machine's 20.10: 8 MiB hard).
    assert!(
        stderr
            .lines()
            .filter(|l| l.starts_with("warning:"))
            .all(|l| l.contains("may not raise the ulimit memlock=-1")),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).expect("up --json");
    // Where the first minute goes (#45 item 6).
    eprintln!("e2e: imgctl up phases: {}", report["seconds"]);
    assert!(
        report["seconds"]["container"].as_f64().unwrap() > 0.0,
        "{stdout}"
    );
    assert!(
        report["seconds"]["verify"].as_f64().unwrap() > 0.0,
        "{stdout}"
    );
    assert_eq!(report["verify"]["passed"], true, "{stdout}");
    assert!(
        report["verify"]["summary"]["pass"].as_u64().unwrap() > 0,
        "{stdout}"
    );
    let url = report["jupyter"]["open"].as_str().unwrap().to_string();
    let token = url.rsplit("token=").next().unwrap().to_string();
    let jupyter_port = report["jupyter"]["port"].as_u64().unwrap() as u16;
    assert_eq!(http_status(jupyter_port, "/api/status", None), 403);
    assert_eq!(http_status(jupyter_port, "/api/status", Some(&token)), 200);
    // The folder is /workspace, and dev writes there.
    assert_eq!(
        http_status(jupyter_port, "/api/contents/hello.txt", Some(&token)),
        200
    );
    let ssh_port = report["ssh"]["port"].as_u64().unwrap() as u16;
    assert_eq!(
        report["ssh"]["open"],
        format!(
            "ssh -p {ssh_port} -i {} -o HostKeyAlias={name}.imgctl dev@127.0.0.1",
            key.display()
        ),
        "{stdout}"
    );
    // That line works the first time, with strict host key checking.
    super::idle::ssh_known(work, &name, ssh_port, key, "true");
    let out = ssh(
        key,
        ssh_port,
        &[],
        "cat /workspace/hello.txt; echo written >/workspace/out.txt; df -k /dev/shm | tail -1",
    );
    let (said, err) = texts(&out);
    assert!(out.status.success(), "ssh into the workstation: {err}");
    assert!(said.starts_with("from the host"), "{said}");
    // /dev/shm is 16 GiB, not Docker's 64 MB.
    let shm_kib: u64 = said
        .lines()
        .last()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(shm_kib, 16 * 1024 * 1024, "{said}");
    assert_eq!(
        std::fs::read_to_string(folder.join("out.txt")).unwrap(),
        "written\n"
    );
    ssh_sessions_keep_the_image_environment(&name, key, ssh_port);
    ssh_config_block_forwards_a_port(&name, work, &token);
    tensorboard_shows_a_run(&name, &report);
    super::browser::browser_runs_the_notebook(&report, &token);
    super::browser::kernel_runs_the_cells(&name);

    // Listed, then removed: no container, the folder kept.
    let ps = crate::common::imgctl(&["ps", "--json"]);
    assert!(texts(&ps).0.contains(&name), "{}", texts(&ps).0);
    // A training run inside when down comes (#45 F1): named, sent SIGTERM,
    // and it saves its checkpoint before the workstation goes.
    docker_ok(&[
        "exec",
        "-d",
        &name,
        "imgctl",
        "train-demo",
        "--preset",
        "tiny",
        "--device",
        "cpu",
        "--steps",
        "100000",
        "--out",
        "/workspace/long",
    ]);
    let started = Instant::now();
    // A step recorded: the run is in its loop, where SIGTERM saves a checkpoint.
    let metrics = folder.join("long/metrics.jsonl");
    while std::fs::metadata(&metrics).map_or(0, |m| m.len()) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "the run inside never began"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let out = crate::common::imgctl(&["down", "--volumes", "--time", "120", &name]);
    let (_, said) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("still running: ") && said.contains("train-demo"),
        "{said}"
    );
    assert!(said.contains("the work ended in"), "{said}");
    let saved = std::fs::read_dir(folder.join("long/checkpoints"))
        .map(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("step-"))
        })
        .unwrap_or(false);
    assert!(saved, "no checkpoint after down: {said}");
    let left = docker_ok(&["ps", "-a", "-q", "--filter", &format!("name=^/{name}$")]);
    assert!(left.is_empty(), "down left {left}");
    assert!(folder.join("out.txt").exists());
}

/// `up --print-ssh-config` (#53, VS Code Remote-SSH): the block alone on
/// stdout; `ssh -F` with it reaches the workstation by its alias, the kept
/// host key checked strictly, and forwards a port (`-L`) to JupyterLab,
/// which answers through it.
fn ssh_config_block_forwards_a_port(name: &str, work: &Path, token: &str) {
    let out = Command::new(imgctl_bin())
        .args(["up", "--name", name, "--print-ssh-config"])
        .env("NO_COLOR", "1")
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    let (block, err) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let host = format!("{name}.imgctl");
    assert!(block.starts_with(&format!("Host {host}\n")), "{block}");
    assert!(
        block.contains("  HostKeyAlias ") && block.contains("  IdentityFile "),
        "{block}"
    );
    let config = work.join("ssh_config");
    std::fs::write(&config, &block).unwrap();
    let local = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let known = work.join("home/.ssh/known_hosts");
    let mut forward = Command::new("ssh")
        .arg("-F")
        .arg(&config)
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known.display()))
        .args(["-N", "-L", &format!("{local}:127.0.0.1:8888"), &host])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        let answered = TcpStream::connect(("127.0.0.1", local)).is_ok();
        if answered {
            break http_status(local, "/api/status", Some(token));
        }
        if let Ok(Some(exit)) = forward.try_wait() {
            let mut err = String::new();
            let _ = forward.stderr.take().unwrap().read_to_string(&mut err);
            panic!("ssh -F {} -L ended ({exit}): {err}", config.display());
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the forward never listened"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = forward.kill();
    let _ = forward.wait();
    assert_eq!(status, 200, "JupyterLab through ssh -L");
}

/// Kubernetes' restricted profile with a read-only root file system.
pub(super) fn hardened_workstation(
    guard: &mut EngineGuard,
    image: &str,
    pid: u32,
    key: &Path,
    public: &str,
) {
    let image = image.to_string();
    // Kubernetes' restricted profile and a read-only root file system: the
    // user's uid, every capability dropped, no privilege escalation, writable
    // /tmp and HOME only. JupyterLab and SSH still work.
    let hardened = format!("imgctl-e2e-hardened-{pid}");
    guard.container(&hardened);
    let started = Instant::now();
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &hardened,
        "--read-only",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/home/dev:uid=1000,gid=1000",
        "--user",
        "1000:1000",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "-e",
        &format!("SSH_AUTHORIZED_KEYS={public}"),
        "-e",
        &format!("JUPYTER_TOKEN={TOKEN}"),
        "-p",
        "127.0.0.1::22",
        "-p",
        "127.0.0.1::8888",
        &image,
    ]);
    wait_healthy(&hardened, started);
    let out = ssh(
        key,
        host_port(&hardened, "22/tcp"),
        &[],
        "id -un; touch /tmp/ok && echo writable",
    );
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success(),
        "ssh into the hardened container: {stderr}"
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["dev", "writable"],
        "{stdout}"
    );
    let port = host_port(&hardened, "8888/tcp");
    assert_eq!(http_status(port, "/api/status", None), 403);
    assert_eq!(http_status(port, "/api/status", Some(TOKEN)), 200);
    docker_ok(&["rm", "-f", &hardened]);
}

/// No path from dev to root, `docker stop` within its limit, bad settings
/// refused at once, and the guard removing every container.
pub(super) fn no_path_to_root_and_clean_stops(
    mut guard: EngineGuard,
    image: &str,
    name: &str,
    pid: u32,
) {
    let (image, name) = (image.to_string(), name.to_string());
    // No path from the user to root through the root entrypoint's state
    // (reliability issue, item 3): /run/imgctl is root's, so the user cannot
    // plant a symlink where root writes the authorized keys at the next start.
    let run_dir = docker_ok(&[
        "exec",
        "--user",
        "dev",
        &name,
        "stat",
        "-c",
        "%U %a",
        "/run/imgctl",
    ]);
    assert_eq!(run_dir.trim(), "root 755", "/run/imgctl: {run_dir}");
    let plant = docker(&[
        "exec",
        "--user",
        "dev",
        &name,
        "ln",
        "-sf",
        "/root/.bashrc",
        "/run/imgctl/authorized_keys",
    ]);
    assert!(
        !plant.status.success(),
        "the user replaced root's authorized_keys with a symlink"
    );
    // The user's own key file is read with the user's rights: a symlink there
    // to /etc/shadow stops the next start with one line, and nothing of the
    // file reaches the log (root used to quote its first line).
    docker_ok(&[
        "exec",
        "--user",
        "dev",
        &name,
        "sh",
        "-c",
        "rm -f ~/.ssh/authorized_keys && ln -s /etc/shadow ~/.ssh/authorized_keys",
    ]);

    // docker stop: services end on SIGTERM well within the 10 s before SIGKILL.
    let stop_started = Instant::now();
    docker_ok(&["stop", &name]);
    let stop = stop_started.elapsed();
    eprintln!("e2e: docker stop: {:.1} s", stop.as_secs_f64());
    assert!(stop < STOP_LIMIT, "docker stop took {stop:?}");
    let exit = inspect(&name, "{{.State.ExitCode}}");
    assert_ne!(exit, "137", "the container had to be killed");
    let restart = docker(&["start", "-a", &name]);
    let (out, err) = texts(&restart);
    assert_eq!(restart.status.code(), Some(2), "{out}{err}");
    assert!(
        err.contains("/home/dev/.ssh/authorized_keys exists but dev cannot read it"),
        "{err}"
    );
    let logs = docker(&["logs", &name]);
    let (out, err) = texts(&logs);
    assert!(
        !out.contains("root:") && !err.contains("root:"),
        "/etc/shadow leaked into the log:\n{out}{err}"
    );

    // Bad settings stop the container at once, with a line naming the cause.
    for (env, needle) in [
        (vec!["IMGCTL_MODE=bogus"], "IMGCTL_MODE"),
        (vec!["JUPYTER_TOKEN="], "JUPYTER_TOKEN"),
        (
            vec!["SSH_AUTHORIZED_KEYS=ssh-ed25519 AAAAnot-a-key user@host"],
            "SSH_AUTHORIZED_KEYS",
        ),
    ] {
        let bad = format!("imgctl-e2e-bad-{pid}-{}", needle.to_ascii_lowercase());
        let (code, logs) = run_bad(&mut guard, &image, &bad, &env);
        assert_ne!(code, 0, "{env:?} was accepted:\n{logs}");
        let line = logs
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or_else(|| panic!("{env:?}: no error line:\n{logs}"));
        assert!(line.contains(needle), "{env:?}: {line}");
    }
    drop(guard);
    // The guard removed the containers it was given.
    assert!(
        !docker(&["inspect", &name]).status.success(),
        "container {name} was left"
    );
}

/// `up --tensorboard` (#45 item 2): a short training run inside writes its
/// events under /workspace, and the TensorBoard that `up` published on
/// 127.0.0.1 lists the run's `train/loss` within its reload interval.
fn tensorboard_shows_a_run(name: &str, report: &Value) {
    let port = report["tensorboard"]["port"]
        .as_u64()
        .unwrap_or_else(|| panic!("no tensorboard in up --json: {report}")) as u16;
    assert_eq!(
        report["tensorboard"]["open"],
        format!("http://127.0.0.1:{port}/"),
        "{report}"
    );
    let train = docker(&[
        "exec",
        name,
        "imgctl",
        "train-demo",
        "--preset",
        "tiny",
        "--device",
        "cpu",
        "--steps",
        "3",
        "--out",
        "/workspace/tb-run",
    ]);
    assert!(train.status.success(), "{}", texts(&train).1);
    let started = Instant::now();
    loop {
        let (status, body) = super::http_get(port, "/data/plugin/scalars/tags", None);
        if status == 200 && body.contains("tb-run") && body.contains("train/loss") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "TensorBoard never listed tb-run's train/loss: HTTP {status} {body}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!(
        "e2e: TensorBoard listed the run {:.1} s after it ended",
        started.elapsed().as_secs_f64()
    );
}

/// An SSH session has the environment `docker exec` has (#45 F2): the
/// image's pins, the proxy's CA bundle, the locale; never the Jupyter token.
fn ssh_sessions_keep_the_image_environment(name: &str, key: &Path, port: u16) {
    let show = "for v in IMGCTL_VERIFY_PINS SSL_CERT_FILE REQUESTS_CA_BUNDLE PIP_CERT LANG VIRTUAL_ENV; do printf '%s=%s\\n' $v \"$(printenv $v)\"; done; printf 'token=%s\\n' \"${JUPYTER_TOKEN:-}\"";
    let exec = docker_ok(&["exec", name, "sh", "-c", show]);
    let out = ssh(key, port, &[], show);
    let (over_ssh, err) = texts(&out);
    assert!(out.status.success(), "{err}");
    assert!(exec.contains("IMGCTL_VERIFY_PINS={"), "{exec}");
    let without_token = |s: &str| {
        s.lines()
            .filter(|l| !l.starts_with("token="))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(without_token(over_ssh.trim()), without_token(exec.trim()));
    assert!(
        over_ssh.contains("token=\n") || over_ssh.trim_end().ends_with("token="),
        "{over_ssh}"
    );
}
