//! Reaching the engine and the registry as the docker CLI does, against the
//! real engine: docker contexts (a context store in a temporary
//! `DOCKER_CONFIG` whose context reaches the engine through a symlink to its
//! socket), the `engine:` line of `imgctl build`, a push whose credentials
//! come from a credential helper beside a stale `auths` entry, malformed
//! `DOCKER_HOST` values, and a fake engine (an HTTP server on a unix socket
//! in a temporary folder) whose endless answers imgctl must refuse.
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::build::{busybox_spec, ensure_bases, test_tag, EngineGuard, LocalRegistry, DEAD_SOCKET};
use crate::common::{imgctl_bin, texts};

/// The engine's socket on this machine: `DOCKER_HOST`'s when it is a
/// unix:// one, else the local socket.
fn engine_socket() -> PathBuf {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if h.starts_with("unix://") => PathBuf::from(h.trim_start_matches("unix://")),
        _ => PathBuf::from("/var/run/docker.sock"),
    }
}

/// The folder of a context (as `docker context create` writes it): the
/// SHA-256 of its name.
fn context_dir(config: &Path, name: &str) -> PathBuf {
    use sha2::Digest as _;
    let id: String = sha2::Sha256::digest(name.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    config.join("contexts").join("meta").join(id)
}

fn add_context(config: &Path, name: &str, host: &str) {
    let dir = context_dir(config, name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("meta.json"),
        format!(
            r#"{{"Name":"{name}","Metadata":{{}},"Endpoints":{{"docker":{{"Host":"{host}","SkipTLSVerify":false}}}}}}"#
        ),
    )
    .unwrap();
}

/// A docker config folder with contexts `imgctl-it-live` (the engine, through
/// a symlink to its socket in the folder), `imgctl-it-dead` (a socket nothing
/// listens on) and `imgctl-it-ssh`, and `currentContext` set to `current`.
struct Store {
    dir: tempfile::TempDir,
    live_address: String,
}

impl Store {
    fn new(current: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("engine.sock");
        std::os::unix::fs::symlink(engine_socket(), &socket).unwrap();
        let live_address = format!("unix://{}", socket.display());
        add_context(dir.path(), "imgctl-it-live", &live_address);
        add_context(dir.path(), "imgctl-it-dead", DEAD_SOCKET);
        add_context(dir.path(), "imgctl-it-ssh", "ssh://imgctl@gpu-box.invalid");
        std::fs::write(
            dir.path().join("config.json"),
            format!(r#"{{"currentContext": "{current}"}}"#),
        )
        .unwrap();
        Self { dir, live_address }
    }

    fn path(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }
}

/// Runs imgctl with `DOCKER_CONFIG` at `store`, no `DOCKER_HOST` nor
/// `DOCKER_CONTEXT` but those of `env`.
fn imgctl_in(store: &Store, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(imgctl_bin());
    cmd.args(args)
        .env("NO_COLOR", "1")
        .env("DOCKER_CONFIG", store.path())
        .env_remove("DOCKER_HOST")
        .env_remove("DOCKER_CONTEXT")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run imgctl")
}

/// `verify --image` of an image no engine has: exit 2 naming the image when
/// an engine answered, exit 1 naming the address when none did.
const NO_IMAGE: [&str; 5] = [
    "verify",
    "--image",
    "imgctl-test/none:absent",
    "--expect-gpus",
    "0",
];

fn first_error(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_default()
}

#[test]
fn contexts_choose_the_engine_as_the_docker_cli_does() {
    ensure_bases();
    let store = Store::new("imgctl-it-live");
    let mut guard = EngineGuard::default();
    let tag = test_tag("context");
    guard.image(&tag);
    let spec = busybox_spec();
    let spec = spec.to_str().unwrap();

    // currentContext: the build reaches the engine through the context's
    // socket and says so on stderr; --json keeps stdout the report alone.
    let out = imgctl_in(
        &store,
        &["build", "--spec", spec, "--tag", &tag, "--json"],
        &[],
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "build failed:\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("stdout is the report alone");
    assert_eq!(report["tags"], serde_json::json!([tag]));
    let engine = stderr
        .lines()
        .find(|l| l.starts_with("engine: "))
        .unwrap_or_else(|| panic!("no engine line:\n{stderr}"));
    assert!(
        engine.starts_with("engine: Docker ")
            && engine.contains(&format!(
                " at {} (context imgctl-it-live), builder ",
                store.live_address
            )),
        "{engine}"
    );
    assert!(engine.contains(" (API 1."), "{engine}");
    // -q hides it (the cached rebuild says nothing but the report).
    let out = imgctl_in(&store, &["build", "--spec", spec, "--tag", &tag, "-q"], &[]);
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "quiet build failed:\n{stderr}");
    assert!(!stderr.contains("engine:"), "{stderr}");

    // --context beats DOCKER_HOST and DOCKER_CONTEXT: the engine answered,
    // since it is the image that is missing.
    let dead = [
        ("DOCKER_HOST", DEAD_SOCKET),
        ("DOCKER_CONTEXT", "imgctl-it-dead"),
    ];
    let mut args = vec!["--context", "imgctl-it-live"];
    args.extend(NO_IMAGE);
    let out = imgctl_in(&store, &args, &dead);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        first_error(&stderr).contains("imgctl-test/none:absent"),
        "{stderr}"
    );

    // DOCKER_HOST beats DOCKER_CONTEXT (docker 28 does the same).
    let out = imgctl_in(
        &store,
        &NO_IMAGE,
        &[
            ("DOCKER_HOST", DEAD_SOCKET),
            ("DOCKER_CONTEXT", "imgctl-it-live"),
        ],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        first_error(&stderr).starts_with(&format!(
            "error: cannot connect to the Docker engine at {DEAD_SOCKET}: "
        )),
        "{stderr}"
    );

    // DOCKER_CONTEXT beats currentContext; the line and the hint name the context.
    let out = imgctl_in(&store, &NO_IMAGE, &[("DOCKER_CONTEXT", "imgctl-it-dead")]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        first_error(&stderr).starts_with(&format!(
            "error: cannot connect to the Docker engine at {DEAD_SOCKET} (context imgctl-it-dead): "
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nhint: check that the engine of context `imgctl-it-dead` runs"),
        "{stderr}"
    );

    // The context `default` is DOCKER_HOST, even over currentContext.
    let out = imgctl_in(
        &store,
        &[&["--context", "default"][..], &NO_IMAGE].concat(),
        &[("DOCKER_HOST", DEAD_SOCKET)],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        first_error(&stderr).contains(&format!("at {DEAD_SOCKET} (context default): ")),
        "{stderr}"
    );

    // An unknown name: a usage error listing the contexts there are.
    // (After the subcommand too: the flag is global.)
    let out = imgctl_in(
        &store,
        &[&NO_IMAGE[..], &["--context", "nope"]].concat(),
        &[],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.lines().next(),
        Some("error: --context nope: no such Docker context; the contexts are: default, imgctl-it-dead, imgctl-it-live, imgctl-it-ssh"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nhint: pass one of them to --context"),
        "{stderr}"
    );
    let out = imgctl_in(&store, &NO_IMAGE, &[("DOCKER_CONTEXT", "nope")]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: no Docker context `nope` (DOCKER_CONTEXT); the contexts are: default, "
        ),
        "{stderr}"
    );

    // ssh:// is refused in one line, before any connection.
    let out = imgctl_in(
        &store,
        &[&["--context", "imgctl-it-ssh"][..], &NO_IMAGE].concat(),
        &[],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.lines().next(),
        Some("error: cannot use the Docker engine at ssh://imgctl@gpu-box.invalid (context imgctl-it-ssh): ssh:// engines are not supported"),
        "{stderr}"
    );
}

#[test]
fn a_malformed_docker_host_is_a_usage_error_naming_it() {
    // No engine is asked: the setting is refused before any connection.
    let store = Store::new("default");
    for (host, why) in [
        (
            "tcp://127.0.0.1:99999",
            "the port 99999 is not between 1 and 65535",
        ),
        ("tcp://:0", "it names no host (tcp://HOST:PORT)"),
        ("tcp://127.0.0.1:abc", "the port `abc` is not a number"),
    ] {
        let out = imgctl_in(&store, &NO_IMAGE, &[("DOCKER_HOST", host)]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{host}: {stderr}");
        assert_eq!(
            stderr.lines().next(),
            Some(format!("error: DOCKER_HOST={host} is not an engine address: {why}").as_str()),
            "{stderr}"
        );
        assert!(
            stderr.contains(
                "\nhint: set DOCKER_HOST to unix:///PATH/TO/docker.sock or tcp://HOST:PORT"
            ),
            "{stderr}"
        );
        assert!(!stderr.contains("start the engine"), "{stderr}");
    }
}

/// `--version -v`: the version, then the engine line `build` says (here by
/// a context, and with `--context` given before the subcommand's place),
/// or one line saying none answered; exit 0 either way. Plain `--version`
/// connects to nothing: a socket that never answers is not even dialled.
#[test]
fn version_with_v_names_the_engine_or_says_none_was_found() {
    let store = Store::new("imgctl-it-live");
    let version = format!("imgctl {}", env!("CARGO_PKG_VERSION"));
    let server = crate::build::docker_ok(&["version", "--format", "{{.Server.Version}}"]);
    let wanted = format!("engine: Docker {} (API 1.", server.trim());
    for args in [&["--version", "-v"][..], &["-v", "--version"], &["-vV"]] {
        let out = imgctl_in(&store, args, &[]);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{args:?}: {stdout}");
        assert_eq!(lines[0], version);
        assert!(
            lines[1].starts_with(&wanted)
                && lines[1].ends_with(&format!(
                    " at {} (context imgctl-it-live)",
                    store.live_address
                )),
            "{args:?}: {stdout}"
        );
    }
    // --context, and DOCKER_HOST: as for build.
    let out = imgctl_in(
        &store,
        &["--context", "imgctl-it-dead", "--version", "-v"],
        &[],
    );
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.lines().nth(1).is_some_and(|l| l.starts_with(&format!(
            "engine: none found (cannot connect to the Docker engine at {DEAD_SOCKET} (context imgctl-it-dead): "
        ))),
        "{stdout}"
    );
    let out = imgctl_in(
        &store,
        &["--version", "-v"],
        &[("DOCKER_HOST", DEAD_SOCKET)],
    );
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(stdout.lines().next(), Some(version.as_str()), "{stdout}");
    assert!(
        stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with(&format!(
                "engine: none found (cannot connect to the Docker engine at {DEAD_SOCKET}: "
            ))),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert_eq!(stderr, "", "the version is not an error");
    // Plain --version: no connection at all (the socket's backlog stays empty).
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("never-answers.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let host = format!("unix://{}", socket.display());
    let out = imgctl_in(&store, &["--version"], &[("DOCKER_HOST", &host)]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(texts(&out).0.trim(), version);
    assert_eq!(
        listener.accept().map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock),
        "plain --version connected to the engine"
    );
}

/// Installs an executable `docker-credential-<name>` in `dir` (through
/// install(1), so that no forked test thread holds it open for writing when
/// it runs: ETXTBSY).
fn install_helper(dir: &Path, name: &str, body: &str) {
    let source = dir.join(format!("{name}.sh"));
    std::fs::write(&source, format!("#!/bin/sh\nread -r server\n{body}\n")).unwrap();
    let status = Command::new("install")
        .arg("-m")
        .arg("0755")
        .arg(&source)
        .arg(dir.join(format!("docker-credential-{name}")))
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn push_takes_the_credential_helper_over_a_stale_auths_entry() {
    use base64::Engine as _;
    ensure_bases();
    let registry = LocalRegistry::start("pusher", "s3cret-pw");
    let mut guard = EngineGuard::default();
    let server = format!("127.0.0.1:{}", registry.port);
    let tag = format!("{server}/imgctl-test/helper-push:{}", std::process::id());
    guard.image(&tag);
    let spec = busybox_spec();
    let spec = spec.to_str().unwrap();

    let helpers = tempfile::tempdir().unwrap();
    let pid = std::process::id();
    let (fresh, empty) = (format!("imgctl-it-{pid}"), format!("imgctl-it-{pid}-empty"));
    install_helper(
        helpers.path(),
        &fresh,
        &format!(
            r#"[ "$server" = "{server}" ] || {{ echo "asked for $server"; exit 3; }}
printf '{{"ServerURL":"%s","Username":"pusher","Secret":"s3cret-pw"}}' "$server""#
        ),
    );
    install_helper(
        helpers.path(),
        &empty,
        "echo 'credentials not found in native keychain'; exit 1",
    );
    let path = format!(
        "{}:{}",
        helpers.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let config = tempfile::tempdir().unwrap();
    // A stale password from an earlier `docker login`, beside the helper.
    let stale = base64::engine::general_purpose::STANDARD.encode("pusher:stale-pw");
    let write_config = |helper: &str| {
        std::fs::write(
            config.path().join("config.json"),
            format!(
                r#"{{"auths": {{"{server}": {{"auth": "{stale}"}}}}, "credHelpers": {{"{server}": "{helper}"}}}}"#
            ),
        )
        .unwrap();
    };
    let env = [
        ("DOCKER_CONFIG", config.path().to_str().unwrap()),
        ("PATH", path.as_str()),
        ("SOURCE_DATE_EPOCH", "1700000000"),
    ];
    let build = |args: &[&str]| {
        let mut cmd = Command::new(imgctl_bin());
        cmd.args(["build", "--spec", spec, "--tag", &tag, "--push"])
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run imgctl")
    };

    // The helper's credentials, not the stale entry's: pushed.
    write_config(&fresh);
    let out = build(&["--json"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "push failed:\n{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["pushed"], serde_json::json!([tag]));
    let (status, body) = registry.get(
        "/v2/imgctl-test/helper-push/tags/list",
        "pusher",
        "s3cret-pw",
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&format!("\"{pid}\"")), "{body}");

    // A helper without credentials for the registry: anonymous (the stale
    // entry is not used either), refused, and the hint names the helper.
    write_config(&empty);
    let out = build(&[]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        first_error(&stderr).contains(&format!("pushing {tag} to {server} failed")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "hint: docker-credential-{empty} (named in {}) has no credentials for {server}",
            config.path().join("config.json").display()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("stale-pw") && !stderr.contains("s3cret"),
        "a secret leaked: {stderr}"
    );
}

/// How the fake engine answers a request.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// As a Docker 20.10 engine would (`/_ping`, `/version`; 404 otherwise).
    Normal,
    /// An endless body (a JSON string that never ends, without a newline),
    /// chunked or until the connection closes, at most [`FAKE_ENDLESS`].
    Endless { chunked: bool },
    /// `101 Switching Protocols` (a BuildKit session), then silence until
    /// the client closes.
    Upgrade,
}

/// The most an endless answer of the fake engine sends (so that an imgctl
/// that reads it all, as before, cannot take the machine's memory).
const FAKE_ENDLESS: u64 = 1 << 30;

/// An HTTP/1.1 server on a unix socket that answers as a Docker engine,
/// except where `answer` says otherwise; it counts the bytes of the endless
/// bodies it wrote and logs the requests.
struct FakeEngine {
    dir: tempfile::TempDir,
    served: std::sync::Arc<std::sync::atomic::AtomicU64>,
    requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl FakeEngine {
    fn start(answer: fn(&str, &str) -> Answer) -> Self {
        use std::sync::{Arc, Mutex};
        let dir = tempfile::tempdir().unwrap();
        let listener =
            std::os::unix::net::UnixListener::bind(dir.path().join("engine.sock")).unwrap();
        let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (counter, log) = (Arc::clone(&served), Arc::clone(&requests));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (counter, log) = (Arc::clone(&counter), Arc::clone(&log));
                std::thread::spawn(move || {
                    let _ = serve_fake(conn, answer, &counter, &log);
                });
            }
        });
        Self {
            dir,
            served,
            requests,
        }
    }

    fn address(&self) -> String {
        format!("unix://{}", self.dir.path().join("engine.sock").display())
    }

    fn served(&self) -> u64 {
        self.served.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Serves the requests of one connection.
fn serve_fake(
    conn: std::os::unix::net::UnixStream,
    answer: fn(&str, &str) -> Answer,
    served: &std::sync::atomic::AtomicU64,
    log: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    use std::io::{BufRead as _, Read as _, Write as _};
    let mut reader = std::io::BufReader::new(conn.try_clone()?);
    let mut out = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or_default().to_string(),
            parts.next().unwrap_or_default().to_string(),
        );
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header)?;
            if header.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        std::io::copy(&mut (&mut reader).take(length as u64), &mut std::io::sink())?;
        log.lock().unwrap().push(format!("{method} {path}"));
        let path = path.split('?').next().unwrap_or_default();
        match answer(&method, path) {
            Answer::Normal => {
                let unversioned = path
                    .splitn(3, '/')
                    .nth(2)
                    .filter(|_| path.starts_with("/v1."));
                let (status, body) = match unversioned.map(|p| format!("/{p}")).as_deref().unwrap_or(path) {
                    "/_ping" => ("200 OK", "OK".to_string()),
                    "/version" => (
                        "200 OK",
                        r#"{"Version":"20.10.24","ApiVersion":"1.41","MinAPIVersion":"1.12","Os":"linux","Arch":"amd64","KernelVersion":"6.1.0"}"#.to_string(),
                    ),
                    _ => ("404 Not Found", r#"{"message":"no such thing"}"#.to_string()),
                };
                write!(
                    out,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nApi-Version: 1.41\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )?;
            }
            Answer::Upgrade => {
                write!(
                    out,
                    "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"
                )?;
                std::io::copy(&mut reader, &mut std::io::sink())?;
                return Ok(());
            }
            Answer::Endless { chunked } => {
                let coding = if chunked {
                    "Transfer-Encoding: chunked\r\n"
                } else {
                    "Connection: close\r\n"
                };
                write!(
                    out,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{coding}\r\n"
                )?;
                let mut piece = b"{\"Version\":\"".to_vec();
                piece.resize(64 * 1024, b'x');
                let mut sent = 0;
                while sent < FAKE_ENDLESS {
                    if chunked {
                        write!(out, "{:x}\r\n", piece.len())?;
                    }
                    out.write_all(&piece)?;
                    if chunked {
                        out.write_all(b"\r\n")?;
                    }
                    sent += piece.len() as u64;
                    served.fetch_add(piece.len() as u64, std::sync::atomic::Ordering::SeqCst);
                    piece.fill(b'x');
                }
                return Ok(());
            }
        }
    }
}

/// Runs imgctl against `engine` and samples its peak resident memory
/// (VmHWM) while it runs; returns its output, the peak in bytes, and how
/// long it took.
fn imgctl_against(
    engine: &FakeEngine,
    args: &[&str],
    buildkit: &str,
) -> (Output, u64, std::time::Duration) {
    let started = std::time::Instant::now();
    let mut child = Command::new(imgctl_bin())
        .args(args)
        .env("NO_COLOR", "1")
        .env("DOCKER_HOST", engine.address())
        .env_remove("DOCKER_CONTEXT")
        .env_remove("DOCKER_API_VERSION")
        .env("DOCKER_BUILDKIT", buildkit)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    // Reading the pipes after the end is fine: imgctl prints little here
    // (the test fails, rather than hangs, past a minute).
    while child.try_wait().unwrap().is_none() {
        if let Some(kb) = std::fs::read_to_string(&status).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        }) {
            peak = kb * 1024;
        }
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out, peak, started.elapsed())
}

#[test]
fn an_engine_that_streams_an_endless_answer_is_refused_in_one_line() {
    // /version itself, until the connection closes; an image's inspect,
    // chunked; the classic builder's JSON stream (bollard's decoder) and
    // BuildKit's (imgctl's own, src/docker/build/raw.rs), a message without
    // an end.
    let endless_version = |_: &str, path: &str| {
        if path.ends_with("/version") {
            Answer::Endless { chunked: false }
        } else {
            Answer::Normal
        }
    };
    let endless_inspect = |_: &str, path: &str| {
        if path.contains("/images/") && path.ends_with("/json") {
            Answer::Endless { chunked: true }
        } else {
            Answer::Normal
        }
    };
    let endless_build = |method: &str, path: &str| {
        if method == "POST" && path.ends_with("/build") {
            Answer::Endless { chunked: true }
        } else if method == "POST" && path.ends_with("/session") {
            Answer::Upgrade
        } else {
            Answer::Normal
        }
    };
    let spec = busybox_spec();
    let build = [
        "build",
        "--spec",
        spec.to_str().unwrap(),
        "--tag",
        "imgctl-test/fake:x",
    ];
    // How the fake answers, imgctl's arguments, DOCKER_BUILDKIT, the refusal.
    type Case<'a> = (fn(&str, &str) -> Answer, &'a [&'a str], &'a str, &'a str);
    let cases: [Case; 4] = [
        (
            endless_version,
            &NO_IMAGE,
            "0",
            "its answer to GET /version passed 16 MiB",
        ),
        (
            endless_inspect,
            &NO_IMAGE,
            "0",
            "its answer to GET /v1.41/images/imgctl-test/none:absent/json passed 16 MiB",
        ),
        (
            endless_build,
            &build,
            "0",
            "a message of its stream for POST /v1.41/build passed 1 MiB",
        ),
        (
            endless_build,
            &build,
            "1",
            "a message of its stream for POST /v1.41/build passed 16 MiB",
        ),
    ];
    for (answer, args, buildkit, what) in cases {
        let engine = FakeEngine::start(answer);
        let (out, peak, took) = imgctl_against(&engine, args, buildkit);
        let (_, stderr) = texts(&out);
        let requests = engine.requests.lock().unwrap().join(", ");
        let context = format!(
            "{what}: {} after {took:?}, requests {requests}",
            &stderr[..stderr.len().min(600)]
        );
        assert_eq!(out.status.code(), Some(1), "{context}");
        assert_eq!(
            first_error(&stderr),
            format!(
                "error: the Docker engine at {} sent more than imgctl reads: {what}",
                engine.address()
            ),
            "{context}"
        );
        assert_eq!(stderr.matches("error:").count(), 1, "{context}");
        assert!(
            stderr.contains(&format!(
                "\nhint: check that {} is a Docker engine",
                engine.address()
            )),
            "{context}"
        );
        assert!(took < std::time::Duration::from_secs(30), "{context}");
        // It stopped reading soon after the limit: not the fake's whole GiB.
        assert!(
            engine.served() < 64 << 20,
            "{} bytes served; {context}",
            engine.served()
        );
        assert!(peak < 1 << 30, "peak resident {peak} bytes; {context}");
    }
}
