//! The image's entrypoint script, run on the host: settings refused before anything
//! starts, services run and stopped, users and homes.
use super::*;

#[test]
fn entrypoint_refuses_bad_settings_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let key = fresh_public_key(dir.path());
    let private = std::fs::read_to_string(dir.path().join("id_ed25519")).unwrap();
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (
            vec![("IMGCTL_MODE", "bogus")],
            "IMGCTL_MODE='bogus' is not a mode; use one of: jupyter, ssh, both, none",
        ),
        (vec![("IMGCTL_MODE", "")], "IMGCTL_MODE='' is not a mode"),
        (
            vec![("JUPYTER_TOKEN", "")],
            "JUPYTER_TOKEN is set but empty",
        ),
        (
            vec![("JUPYTER_TOKEN", "has space")],
            "JUPYTER_TOKEN may only hold",
        ),
        (
            vec![("JUPYTER_TOKEN", "x")],
            "JUPYTER_TOKEN has 1 characters, too few to resist guessing; use at least 16 (e.g. openssl rand -hex 24), or unset it to get a generated 48-character token",
        ),
        (
            vec![("JUPYTER_TOKEN", "fifteen-chars-x")],
            "JUPYTER_TOKEN has 15 characters, too few",
        ),
        (
            vec![("JUPYTER_PASSWORD", "")],
            "JUPYTER_PASSWORD is set but empty",
        ),
        (
            vec![("SSH_AUTHORIZED_KEYS", "ssh-ed25519 AAAAnot-base64!! x")],
            "SSH_AUTHORIZED_KEYS line 1 is not a valid SSH public key",
        ),
        (
            vec![("SSH_AUTHORIZED_KEYS", private.as_str())],
            "SSH_AUTHORIZED_KEYS line 1 is a PRIVATE key",
        ),
        (
            vec![("IMGCTL_MODE", "ssh")],
            "IMGCTL_MODE=ssh but sshd cannot start: no authorized key given",
        ),
    ];
    for (env, message) in cases {
        let out = check_entrypoint(&env, &[]);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {stderr}{stdout}");
        assert!(
            stderr.contains(&format!("imgctl-entrypoint: error: {message}")),
            "{env:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{env:?}: one line: {stderr}");
    }
    // A malformed line after a good one is still caught, with its line number.
    let two = format!("{key}\nssh-rsa AAAA-broken");
    let out = check_entrypoint(&[("SSH_AUTHORIZED_KEYS", &two)], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(texts(&out)
        .1
        .contains("SSH_AUTHORIZED_KEYS line 2 is not a valid SSH public key"));
    // A mounted key file is validated the same way.
    let mounted = dir.path().join("authorized_keys");
    std::fs::write(&mounted, "# comment\n\nnot a key at all\n").unwrap();
    let out = check_entrypoint(
        &[("IMGCTL_AUTHORIZED_KEYS_FILE", mounted.to_str().unwrap())],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(texts(&out).1.contains(&format!(
        "{} line 3 is not a valid SSH public key",
        mounted.display()
    )));
}

#[test]
fn entrypoint_accepts_good_settings() {
    let dir = tempfile::tempdir().unwrap();
    let key = fresh_public_key(dir.path());
    let plan = |env: &[(&str, &str)], args: &[&str]| {
        let out = check_entrypoint(env, args);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{env:?}: {stderr}");
        stderr
    };
    assert!(plan(&[("SSH_AUTHORIZED_KEYS", &key)], &[]).contains("mode=both jupyter=yes ssh=yes"));
    let keys = format!("# mine\n{key}\n\n{key}\r\n");
    assert!(plan(
        &[("SSH_AUTHORIZED_KEYS", &keys), ("IMGCTL_MODE", "ssh")],
        &[]
    )
    .contains("jupyter=no ssh=yes"));
    // No key: sshd is skipped, and the log says why.
    let s = plan(&[], &[]);
    assert!(
        s.contains("ssh=no (sshd not started: no authorized key given"),
        "{s}"
    );
    assert!(plan(&[("IMGCTL_MODE", "none")], &[]).contains("jupyter=no ssh=no"));
    // A token of 16 characters is long enough.
    assert!(plan(&[("JUPYTER_TOKEN", "sixteen-chars-xy")], &[]).contains("jupyter=yes"));
    // A command passes through; service settings do not matter then.
    let s = plan(&[("JUPYTER_TOKEN", "")], &["python", "train.py"]);
    assert!(s.contains("would run: python train.py"), "{s}");
    // But a bogus mode is refused even then.
    assert_eq!(
        check_entrypoint(&[("IMGCTL_MODE", "bogus")], &["true"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn entrypoint_refuses_an_unknown_user_as_root() {
    if !running_as_root() {
        eprintln!("skipped: the user check applies to a root container, and this test is not root");
        return;
    }
    let message = "imgctl-entrypoint: error: IMGCTL_USER='nosuch' is not a user of this image, and the workload would run as root; name an existing user, or leave IMGCTL_USER as the image sets it\n";
    // Validation alone, for the services and for a command.
    for args in [&[][..], &["python", "train.py"]] {
        let out = check_entrypoint(&[("IMGCTL_USER", "nosuch")], args);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr, message, "{args:?}");
    }
    // For real: the command does not run (it would have printed uid 0).
    let run = |user: &str| {
        let dir = tempfile::tempdir().unwrap();
        Command::new("sh")
            .arg(entrypoint())
            .args(["id", "-u"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("IMGCTL_USER", user)
            .env("IMGCTL_RUN_DIR", dir.path().join("run"))
            .output()
            .unwrap()
    };
    let out = run("nosuch");
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "the command ran: {stdout}");
    assert_eq!(stderr, message);
    // An option-like name is no user either, and a newline cannot split the line.
    let out = check_entrypoint(&[("IMGCTL_USER", "--help\nx")], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(texts(&out)
        .1
        .starts_with("imgctl-entrypoint: error: IMGCTL_USER='--help?x' is not a user"));
    assert_eq!(texts(&out).1.lines().count(), 1);
    // An existing user runs the command with its uid.
    let out = run(SERVICE_USER);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    let uid = Command::new("id")
        .args(["-u", SERVICE_USER])
        .output()
        .unwrap();
    assert_eq!(texts(&out).0, texts(&uid).0);
}

/// Starts the entrypoint for real with a stand-in `jupyter` on PATH, and
/// checks the token handling, the services list, the healthcheck, and that
/// SIGTERM stops everything promptly.
#[test]
fn entrypoint_runs_services_and_stops_on_sigterm() {
    let scratch = Scratch::new();
    let (dir, run, ws, path) = (&scratch.dir, &scratch.run, &scratch.ws, &scratch.path);
    // The stand-in records how it was started, then waits to be stopped.
    let record = scratch.stand_in(
        "jupyter",
        "echo stand-in: TERM >&2; exit 0",
        "args=%s\\ntoken=%s\\npwd=%s\\n",
        "\"$*\" \"$JUPYTER_TOKEN\" \"$(pwd)\"",
    );
    let port = free_port();
    let mut child = Command::new("sh")
        .arg(entrypoint())
        .env_clear()
        .env("PATH", path)
        .env("IMGCTL_MODE", "jupyter")
        .env("IMGCTL_USER", SERVICE_USER)
        .env("IMGCTL_RUN_DIR", run)
        .env("IMGCTL_WORKSPACE", ws)
        .env("IMGCTL_JUPYTER_PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rec = started(&record, "jupyter");
    assert!(
        rec.contains(&format!("--ip=0.0.0.0 --port={port} --no-browser")),
        "{rec}"
    );
    assert!(
        rec.contains(&format!("--ServerApp.root_dir={}", ws.display())),
        "{rec}"
    );
    let token = rec
        .lines()
        .find_map(|l| l.strip_prefix("token="))
        .unwrap()
        .to_string();
    assert_eq!(token.len(), 48, "a generated 192-bit hex token: {rec}");
    assert!(
        !rec.lines().next().unwrap().contains(&token),
        "the token stays out of argv"
    );
    assert_eq!(
        std::fs::read_to_string(run.join("services")).unwrap(),
        "jupyter\n"
    );

    // The healthcheck probes what was started: nothing listens on the port yet.
    let health = |services: &Path| {
        Command::new("sh")
            .arg(repo_root().join("images/healthcheck.sh"))
            .env("IMGCTL_RUN_DIR", services)
            .env("IMGCTL_JUPYTER_PORT", port.to_string())
            .output()
            .unwrap()
    };
    let out = health(run);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // Something answering GET /api with 200 on that port makes it healthy.
    let server = answer_once(port);
    let out = health(run);
    server.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // No services file (a passed-through command) is healthy.
    assert_eq!(health(&dir.path().join("nothing")).status.code(), Some(0));
    // sshd is healthy while a socket listens on its port (read from /proc, no connection).
    let ssh_dir = dir.path().join("ssh-run");
    std::fs::create_dir_all(&ssh_dir).unwrap();
    std::fs::write(ssh_dir.join("services"), "sshd\n").unwrap();
    let ssh_health = |port: u16| {
        Command::new("sh")
            .arg(repo_root().join("images/healthcheck.sh"))
            .env("IMGCTL_RUN_DIR", &ssh_dir)
            .env("IMGCTL_SSH_PORT", port.to_string())
            .output()
            .unwrap()
    };
    let ssh_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ssh_port = ssh_listener.local_addr().unwrap().port();
    let out = ssh_health(ssh_port);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    drop(ssh_listener);
    let out = ssh_health(ssh_port);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(texts(&out)
        .0
        .contains(&format!("sshd: nothing listens on port {ssh_port}")));

    // docker stop: SIGTERM to the entrypoint stops the service and exits 0, quickly.
    let t0 = Instant::now();
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "not stopped within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let stopped = t0.elapsed();
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = texts(&out);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stopped < Duration::from_secs(5),
        "stopping took {stopped:?}:\n{stderr}"
    );
    // The generated token is printed exactly once.
    assert_eq!(stderr.matches(&token).count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "http://127.0.0.1:{port}/lab?token={token} (generated token"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("stopping (SIGTERM)"), "{stderr}");
}

/// When a service dies, the entrypoint stops and exits with its status.
#[test]
fn entrypoint_exits_when_a_service_dies() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    open_to_all(dir.path());
    std::fs::write(bin.join("jupyter"), "#!/bin/sh\nsleep 0.3\nexit 7\n").unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("jupyter"))
        .status()
        .unwrap();
    let out = Command::new("sh")
        .arg(entrypoint())
        .env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("IMGCTL_MODE", "jupyter")
        .env("JUPYTER_TOKEN", "fixed-token-0123456789")
        .env("IMGCTL_USER", SERVICE_USER)
        .env("IMGCTL_RUN_DIR", dir.path().join("run"))
        .env("IMGCTL_WORKSPACE", dir.path())
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("exited with status 7"), "{stderr}");
    assert!(
        !stderr.contains("fixed-token-0123456789"),
        "a given token is never printed: {stderr}"
    );
}

/// Root's Python runs nothing the image's user can write (reliability and
/// security III, N2). Started as root (`--user 0`), the healthcheck and the
/// entrypoint's password hashing run in /workspace, the user's folder: a
/// planted `urllib/` or `jupyter_server/` there, or on a PYTHONPATH, used to
/// run as root within one healthcheck interval.
#[test]
fn root_run_python_imports_nothing_from_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("workspace");
    let bin = dir.path().join("bin");
    let run = dir.path().join("run");
    let marker = dir.path().join("planted-code-ran");
    for d in [&ws, &bin, &run] {
        std::fs::create_dir_all(d).unwrap();
    }
    open_to_all(dir.path());
    // What the user plants: packages that shadow the ones root's Python imports.
    let payload = format!(
        "import os\nopen({:?}, 'a').write(__name__ + ' as uid ' + str(os.getuid()) + '\\n')\n",
        marker.display().to_string()
    );
    for package in ["urllib", "jupyter_server"] {
        std::fs::create_dir_all(ws.join(package)).unwrap();
        std::fs::write(ws.join(package).join("__init__.py"), &payload).unwrap();
    }
    let python3 = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v python3"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::os::unix::fs::symlink(python3.trim(), bin.join("python")).unwrap();
    // A stand-in jupyter that exits at once: the entrypoint then stops.
    std::fs::write(bin.join("jupyter"), "#!/bin/sh\nexit 0\n").unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("jupyter"))
        .status()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // The healthcheck, as Docker runs it: in the WORKDIR, with a PYTHONPATH
    // the environment could carry.
    std::fs::write(run.join("services"), "jupyter\n").unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let health = Command::new("sh")
        .arg(repo_root().join("images/healthcheck.sh"))
        .current_dir(&ws)
        .env("PATH", &path)
        .env("PYTHONPATH", &ws)
        .env("IMGCTL_RUN_DIR", &run)
        .env("IMGCTL_JUPYTER_PORT", port.to_string())
        .output()
        .unwrap();
    let planted = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        planted.is_empty(),
        "the healthcheck ran code planted in the workspace:\n{planted}"
    );
    // Nothing listens: unhealthy, having imported the real urllib.
    assert_eq!(health.status.code(), Some(1), "{health:?}");
    assert!(texts(&health).0.contains("jupyter: "), "{health:?}");

    // The entrypoint hashes JUPYTER_PASSWORD before starting JupyterLab.
    let out = Command::new("sh")
        .arg(entrypoint())
        .env_clear()
        .current_dir(&ws)
        .env("PATH", &path)
        .env("PYTHONPATH", &ws)
        .env("IMGCTL_MODE", "jupyter")
        .env("IMGCTL_USER", SERVICE_USER)
        .env("IMGCTL_RUN_DIR", &run)
        .env("IMGCTL_WORKSPACE", &ws)
        .env("IMGCTL_JUPYTER_PORT", port.to_string())
        .env("JUPYTER_TOKEN", "a-token-long-enough-0123")
        .env("JUPYTER_PASSWORD", "correct horse")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    let planted = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        planted.is_empty(),
        "code planted in the workspace ran:\n{planted}\nentrypoint: {stderr}"
    );
}

/// Two settings that used to fail without a word (reliability and security
/// III): a HOME the user cannot write (a read-only root with a root-owned
/// `--tmpfs /home/dev`) ended JupyterLab in a Python traceback; it is now one
/// line naming the mount that works. And IMGCTL_USER, read only when the
/// container starts as root, says so when it is ignored.
#[test]
fn entrypoint_names_an_unwritable_home_and_an_ignored_user() {
    let home = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = check_entrypoint(
        &[
            ("IMGCTL_MODE", "jupyter"),
            ("IMGCTL_HOME_DIR", home.path().to_str().unwrap()),
        ],
        &[],
    );
    let (_, stderr) = texts(&out);
    if running_as_root() {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let uid = texts(
            &Command::new("id")
                .args(["-u", SERVICE_USER])
                .output()
                .unwrap(),
        )
        .0
        .trim()
        .to_string();
        assert!(
            stderr.contains(&format!(
                "imgctl-entrypoint: error: HOME {} (owned by uid 0) is not writable by uid {uid}, and JupyterLab writes its runtime files there; mount a writable one: --tmpfs {}:uid={uid},gid=",
                home.path().display(),
                home.path().display()
            )),
            "{stderr}"
        );
        // Started as another user, the entrypoint says IMGCTL_USER is ignored.
        let out = Command::new("setpriv")
            .args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "sh"])
            .arg(entrypoint())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("IMGCTL_ENTRYPOINT_CHECK_ONLY", "1")
            .env("IMGCTL_MODE", "none")
            .env("IMGCTL_USER", "dev")
            .env("IMGCTL_RUN_DIR", "/nonexistent")
            .current_dir("/")
            .output()
            .unwrap();
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains(
                "imgctl-entrypoint: IMGCTL_USER=dev is ignored: the container runs as uid "
            ),
            "{stderr}"
        );
    } else {
        // Not root: the folder is this user's own, so writable.
        assert_eq!(out.status.code(), Some(0), "{stderr}");
    }
}

/// `IMGCTL_TENSORBOARD=1` (what `imgctl up --tensorboard` sets): TensorBoard
/// over the workspace as the image's user, listed for the healthcheck, which
/// probes its `/data/environment`; bad values are refused before anything
/// starts; an image without tensorboard says so.
#[test]
fn entrypoint_serves_tensorboard_when_asked() {
    let scratch = Scratch::new();
    let (bin, run, ws, path) = (&scratch.bin, &scratch.run, &scratch.ws, &scratch.path);
    let with_path = |env: &[(&'static str, &'static str)]| -> Vec<(&str, String)> {
        let mut v: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.to_string())).collect();
        v.push(("PATH", path.clone()));
        v
    };
    let check = |env: Vec<(&str, String)>, args: &[&str]| {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        check_entrypoint(&env, args)
    };
    // No tensorboard on PATH: one line, exit 2 (checked before the stand-in exists).
    let bare = format!("{}:/usr/bin:/bin", bin.display());
    let out = check_entrypoint(&[("IMGCTL_TENSORBOARD", "1"), ("PATH", bare.as_str())], &[]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("IMGCTL_TENSORBOARD=1 but this image has no tensorboard"),
        "{stderr}"
    );
    let record = scratch.stand_in(
        "tensorboard",
        "exit 0",
        "args=%s\\npwd=%s\\nuser=%s\\n",
        "\"$*\" \"$(pwd)\" \"$(id -un)\"",
    );
    for (env, message) in [
        (
            vec![("IMGCTL_TENSORBOARD", "yes")],
            "IMGCTL_TENSORBOARD='yes' is not 0 or 1",
        ),
        (
            vec![
                ("IMGCTL_TENSORBOARD", "1"),
                ("IMGCTL_TENSORBOARD_PORT", "0"),
            ],
            "IMGCTL_TENSORBOARD_PORT=0 is not a port number (1-65535)",
        ),
        (
            vec![("IMGCTL_TENSORBOARD_PORT", "http")],
            "IMGCTL_TENSORBOARD_PORT='http' is not a port number",
        ),
    ] {
        let out = check(with_path(&env), &[]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(message), "{env:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{env:?}: {stderr}");
    }
    let out = check(
        with_path(&[("IMGCTL_TENSORBOARD", "1"), ("IMGCTL_MODE", "none")]),
        &[],
    );
    assert!(
        texts(&out).1.contains("jupyter=no tensorboard=yes ssh=no"),
        "{out:?}"
    );
    // A passed-through command starts no service, TensorBoard included.
    let out = check(with_path(&[("IMGCTL_TENSORBOARD", "1")]), &["true"]);
    assert!(texts(&out).1.contains("would run: true"), "{out:?}");

    // Started for real: as the image's user, over the workspace, on the port.
    let port = free_port();
    let child = Command::new("sh")
        .arg(entrypoint())
        .env_clear()
        .env("PATH", path)
        .env("IMGCTL_MODE", "none")
        .env("IMGCTL_TENSORBOARD", "1")
        .env("IMGCTL_TENSORBOARD_PORT", port.to_string())
        .env("IMGCTL_USER", SERVICE_USER)
        .env("IMGCTL_RUN_DIR", run)
        .env("IMGCTL_WORKSPACE", ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rec = started(&record, "tensorboard");
    assert!(
        rec.contains(&format!(
            "args=--logdir {} --port {port} --bind_all",
            ws.display()
        )),
        "{rec}"
    );
    assert!(rec.contains(&format!("pwd={}", ws.display())), "{rec}");
    assert_eq!(
        std::fs::read_to_string(run.join("services")).unwrap(),
        "tensorboard\n"
    );
    let health = || {
        Command::new("sh")
            .arg(repo_root().join("images/healthcheck.sh"))
            .env("IMGCTL_RUN_DIR", run)
            .env("IMGCTL_TENSORBOARD_PORT", port.to_string())
            .output()
            .unwrap()
    };
    assert_eq!(health().status.code(), Some(1), "nothing answers yet");
    let server = answer_once(port);
    let out = health();
    let asked = server.join().unwrap();
    assert!(asked.starts_with("GET /data/environment "), "{asked}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "TensorBoard: port {port}, --logdir {}",
            ws.display()
        )),
        "{stderr}"
    );
}

/// A scratch machine for the entrypoint's services: `bin/` (stand-ins,
/// first on `path`), `run/` (its state) and `workspace/`, open to the
/// image's user.
pub(super) struct Scratch {
    dir: tempfile::TempDir,
    pub(super) bin: std::path::PathBuf,
    pub(super) run: std::path::PathBuf,
    pub(super) ws: std::path::PathBuf,
    pub(super) path: String,
}

impl Scratch {
    pub(super) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (bin, run, ws) = (
            dir.path().join("bin"),
            dir.path().join("run"),
            dir.path().join("workspace"),
        );
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        open_to_all(dir.path());
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Scratch {
            dir,
            bin,
            run,
            ws,
            path,
        }
    }

    /// Puts a stand-in `name` in `bin/`: on start it writes `record` (the
    /// printf of `fields` over `values`, atomically), then waits to be
    /// stopped, running `on_term` on SIGTERM. Returns the record's path.
    fn stand_in(
        &self,
        name: &str,
        on_term: &str,
        fields: &str,
        values: &str,
    ) -> std::path::PathBuf {
        let record = self.dir.path().join(format!("{name}.txt"));
        let script = format!(
            "#!/bin/sh\ntrap '{on_term}' TERM\nprintf '{fields}' {values} > {r}.tmp\nmv {r}.tmp {r}\nwhile :; do sleep 0.1; done\n",
            r = record.display()
        );
        std::fs::write(self.bin.join(name), script).unwrap();
        Command::new("chmod")
            .arg("+x")
            .arg(self.bin.join(name))
            .status()
            .unwrap();
        record
    }
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Waits (20 s at most) for a stand-in's record, and reads it.
fn started(record: &Path, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !record.exists() {
        assert!(
            Instant::now() < deadline,
            "the stand-in {name} never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(record).unwrap()
}

/// Answers one request on `port` with `200 {}`; the thread returns the request.
fn answer_once(port: u16) -> std::thread::JoinHandle<String> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        let Ok((mut s, _)) = listener.accept() else {
            return String::new();
        };
        let mut buf = [0u8; 1024];
        let n = std::io::Read::read(&mut s, &mut buf).unwrap_or(0);
        let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}");
        String::from_utf8_lossy(&buf[..n]).to_string()
    })
}
