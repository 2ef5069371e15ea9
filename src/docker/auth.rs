//! Registry credentials from the docker client's config, for `--push`, in
//! the docker CLI's order.
//!
//! It owns matching a registry host against the config's keys, decoding the
//! base64 `user:password` pairs of `auths`, and asking a credential helper
//! (the `docker-credential-<name> get` protocol of docker-credential-helpers).
//! As in the docker CLI, a helper configured for the registry
//! (`credHelpers[host]`), else the default helper (`credsStore`), is the only
//! source when there is one: an `auths` entry beside it is not read (it is a
//! leftover of an earlier `docker login`), and a helper that has no
//! credentials for the registry (its "credentials not found" reply) means an
//! anonymous push. Only without a helper are `auths` entries used. A helper
//! runs in a process group of its own and has [`HELPER_DEADLINE`] to answer;
//! past it the group is killed (a hung helper, or a child of it holding its
//! stdout, would otherwise hang the push forever). It never calls the docker
//! CLI and never prints a secret. A reply longer than
//! [`super::tail::OUTPUT_TAIL`] is refused as soon as it passes it, and of
//! stderr only that much is kept (an error quotes its end). Reading the config
//! is [`super::config`]'s.
use std::ffi::OsStr;
use std::io::Write;
use std::process::{Command, Stdio};

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use serde::Deserialize;

use super::config::{AuthEntry, DockerConfig};
use super::tail::{excerpt, Tail, OUTPUT_TAIL};
use super::DockerError;

/// The key Docker Hub's credentials are stored under in config.json (the
/// docker CLI's `registry.IndexServer`).
pub const DOCKER_HUB_INDEX: &str = "https://index.docker.io/v1/";

/// What a helper prints (on stdout, exiting non-zero) when it holds nothing
/// for the server (docker-credential-helpers' `credentials.errCredentialsNotFoundMessage`).
pub const HELPER_NOT_FOUND: &str = "credentials not found in native keychain";

/// The registry host of an image reference: the first path component when it
/// looks like a host (has a `.` or `:`, or is `localhost`), else Docker Hub.
pub fn registry_of(reference: &str) -> String {
    match reference.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_string()
        }
        _ => "docker.io".to_string(),
    }
}

/// `https://host/v1/` → `host`, the way the docker CLI matches `auths` keys.
fn normalize_host(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

fn is_hub(host: &str) -> bool {
    matches!(
        host,
        "docker.io" | "index.docker.io" | "registry-1.docker.io"
    )
}

/// Whether config key `key` names the registry `server` (as given to helpers).
fn same_registry(key: &str, server: &str) -> bool {
    let (key, server) = (normalize_host(key), normalize_host(server));
    key == server || (is_hub(key) && is_hub(server))
}

/// What the config gives for one registry.
#[derive(Debug, Default)]
pub struct Lookup {
    /// The credentials to push with; `None` pushes anonymously.
    pub credentials: Option<DockerCredentials>,
    /// The helper program asked (`docker-credential-<name>`), when the
    /// config names one for the registry.
    pub helper: Option<String>,
}

impl DockerConfig {
    /// The helper for `server`: `credHelpers[host]`, else `credsStore`.
    pub fn helper_for(&self, server: &str) -> Option<&str> {
        self.cred_helpers
            .iter()
            .find(|(k, _)| same_registry(k, server))
            .map(|(_, v)| v.as_str())
            .or(self.creds_store.as_deref())
            .filter(|h| !h.is_empty())
    }

    /// Credentials for `registry` (as returned by [`registry_of`]), helpers
    /// found on the process's PATH.
    pub fn credentials_for(&self, registry: &str) -> Result<Lookup, DockerError> {
        self.credentials_with(registry, None)
    }

    /// Credentials for `registry`: from its helper when the config names one
    /// (`credHelpers[host]`, then `credsStore`; "not found" is anonymous),
    /// else from its `auths` entry, else none. `path` is the PATH the helper
    /// is looked up in (`None`: the process's).
    pub fn credentials_with(
        &self,
        registry: &str,
        path: Option<&OsStr>,
    ) -> Result<Lookup, DockerError> {
        self.credentials_within(registry, path, HELPER_DEADLINE)
    }

    /// [`Self::credentials_with`], a helper given `deadline` to answer.
    fn credentials_within(
        &self,
        registry: &str,
        path: Option<&OsStr>,
        deadline: std::time::Duration,
    ) -> Result<Lookup, DockerError> {
        let server = if is_hub(registry) {
            DOCKER_HUB_INDEX.to_string()
        } else {
            registry.to_string()
        };
        if let Some(helper) = self.helper_for(&server) {
            let program = format!("docker-credential-{helper}");
            return Ok(Lookup {
                credentials: from_helper(&program, &server, path, deadline)?,
                helper: Some(program),
            });
        }
        let entry = self.auths.iter().find(|(k, _)| same_registry(k, &server));
        let credentials = match entry {
            Some((key, entry)) if entry.auth.is_some() || entry.identity_token.is_some() => {
                Some(decode_entry(key, entry, &server)?)
            }
            _ => None,
        };
        Ok(Lookup {
            credentials,
            helper: None,
        })
    }
}

fn decode_entry(
    key: &str,
    entry: &AuthEntry,
    server: &str,
) -> Result<DockerCredentials, DockerError> {
    let mut creds = DockerCredentials {
        serveraddress: Some(server.to_string()),
        identitytoken: entry.identity_token.clone(),
        ..Default::default()
    };
    if let Some(auth) = &entry.auth {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| DockerError::AuthNotBase64 {
                key: key.to_string(),
                error: e.to_string(),
            })?;
        let text = String::from_utf8(raw).map_err(|_| DockerError::AuthNotUtf8 {
            key: key.to_string(),
        })?;
        let (user, pass) =
            text.split_once(':')
                .ok_or_else(|| DockerError::AuthNotUserPassword {
                    key: key.to_string(),
                })?;
        creds.username = Some(user.to_string());
        creds.password = Some(pass.to_string());
    }
    Ok(creds)
}

#[derive(Deserialize)]
struct HelperReply {
    #[serde(rename = "Username", default)]
    username: String,
    #[serde(rename = "Secret", default)]
    secret: String,
}

/// How long a credential helper may take to answer (`get`, its output
/// closed and its process ended), after which its whole process group is
/// killed and the push fails. A helper answers from a keychain or a file in
/// well under a second; 30 s leaves room for a slow keychain to unlock,
/// while a hung helper, or one that leaves a child holding its stdout (the
/// reply then never ends), cannot stall `build --push` forever.
pub const HELPER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// How often the end of a helper that closed its output is looked for.
const HELPER_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// What a helper printed and how it ended.
struct HelperOutput {
    status: std::process::ExitStatus,
    /// The reply (at most [`OUTPUT_TAIL`]).
    stdout: Vec<u8>,
    /// The last [`OUTPUT_TAIL`] bytes of stderr.
    stderr: String,
}

/// Runs `program get` with `server` on its stdin, in a process group of its
/// own (so that its children can be killed with it), and collects its
/// output. Past `deadline` the group is killed:
/// [`DockerError::CredentialHelperTimeout`].
fn run_helper(
    program: &str,
    server: &str,
    path: Option<&OsStr>,
    deadline: std::time::Duration,
) -> Result<HelperOutput, DockerError> {
    use std::os::unix::process::CommandExt as _;
    let started = std::time::Instant::now();
    let run_failed = |e: std::io::Error| DockerError::CredentialHelperRun {
        program: program.to_string(),
        error: e.to_string(),
    };
    let mut command = Command::new(program);
    command
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // A helper left behind by an imgctl that died (Ctrl-C) dies with it.
    crate::sys::process::kill_child_with_parent(&mut command);
    if let Some(path) = path {
        // The child's PATH is also where the program is looked up.
        command.env("PATH", path);
    }
    let mut child = command.spawn().map_err(run_failed)?;
    // Its own group: the group's id is the helper's pid.
    let group = child.id();
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exits without reading its input is judged by its reply.
        let _ = stdin.write_all(server.as_bytes());
    }
    // Each pipe is read on a thread of its own, until every process holding
    // it has closed it; the threads are not joined, so that a pipe held open
    // by a process outside the group cannot hold this call past the deadline.
    // A reply past OUTPUT_TAIL is refused at once; of stderr, the last
    // OUTPUT_TAIL bytes are kept.
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Pipe::Stdout(read_reply(stdout)));
        });
    }
    if let Some(stderr) = child.stderr.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Pipe::Stderr(read_tail(stderr)));
        });
    }
    drop(tx);
    let kill = |child: &mut std::process::Child| {
        // The helper is not reaped yet (a zombie at worst), so its pid, the
        // group's id, cannot have been reused.
        let _ = crate::sys::process::kill_process_group(group);
        let _ = child.wait();
    };
    let timed_out = |child: &mut std::process::Child| {
        kill(child);
        DockerError::CredentialHelperTimeout {
            program: program.to_string(),
            server: server.to_string(),
            seconds: deadline.as_secs(),
        }
    };
    let (mut stdout, mut stderr) = (None, None);
    while stdout.is_none() || stderr.is_none() {
        let left = deadline.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(Pipe::Stdout(None)) => {
                kill(&mut child);
                return Err(DockerError::CredentialHelperReplyTooLarge {
                    program: program.to_string(),
                    server: server.to_string(),
                    limit: OUTPUT_TAIL,
                });
            }
            Ok(Pipe::Stdout(Some(bytes))) => stdout = Some(bytes),
            Ok(Pipe::Stderr(text)) => stderr = Some(text),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return Err(timed_out(&mut child)),
            // A reader ended without a word (it cannot): judge what came.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // Both pipes are closed; the helper may still run.
    let status = loop {
        match child.try_wait().map_err(run_failed)? {
            Some(status) => break status,
            None if started.elapsed() >= deadline => return Err(timed_out(&mut child)),
            None => std::thread::sleep(HELPER_POLL),
        }
    };
    Ok(HelperOutput {
        status,
        stdout: stdout.unwrap_or_default(),
        stderr: stderr.unwrap_or_default(),
    })
}

/// What a reader thread of [`run_helper`] sends when its pipe closes.
enum Pipe {
    /// The reply; `None` when it passed [`OUTPUT_TAIL`] (reading stopped).
    Stdout(Option<Vec<u8>>),
    /// The last [`OUTPUT_TAIL`] bytes of stderr, as text.
    Stderr(String),
}

/// Reads a helper's reply to its end, or `None` as soon as it passes
/// [`OUTPUT_TAIL`] (no reply of the protocol is that long).
fn read_reply(mut pipe: impl std::io::Read) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => return Some(bytes),
            Ok(n) if bytes.len() + n > OUTPUT_TAIL => return None,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Some(bytes),
        }
    }
}

/// Reads a pipe to its end, keeping its last [`OUTPUT_TAIL`] bytes.
fn read_tail(mut pipe: impl std::io::Read) -> String {
    let mut tail = Tail::new(OUTPUT_TAIL);
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => tail.push(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    tail.into_text()
}

/// Asks `program get` (the credential-helper protocol: the server on stdin,
/// `{"Username","Secret"}` on stdout), within `deadline`. `Ok(None)` when the
/// helper holds nothing for the server: its "credentials not found" reply,
/// or an empty one.
fn from_helper(
    program: &str,
    server: &str,
    path: Option<&OsStr>,
    deadline: std::time::Duration,
) -> Result<Option<DockerCredentials>, DockerError> {
    let out = run_helper(program, server, path, deadline)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        if stdout.trim() == HELPER_NOT_FOUND {
            return Ok(None);
        }
        let said: &str = if stdout.trim().is_empty() {
            &out.stderr
        } else {
            &stdout
        };
        return Err(DockerError::CredentialHelper {
            program: program.to_string(),
            server: server.to_string(),
            status: out.status.to_string(),
            output: excerpt(said),
        });
    }
    let reply: HelperReply =
        serde_json::from_slice(&out.stdout).map_err(|e| DockerError::CredentialHelperReply {
            program: program.to_string(),
            error: e.to_string(),
        })?;
    if reply.username.is_empty() && reply.secret.is_empty() {
        return Ok(None);
    }
    // "<token>" as the user name means the secret is an identity token (protocol).
    Ok(Some(if reply.username == "<token>" {
        DockerCredentials {
            identitytoken: Some(reply.secret),
            serveraddress: Some(server.to_string()),
            ..Default::default()
        }
    } else {
        DockerCredentials {
            username: Some(reply.username),
            password: Some(reply.secret),
            serveraddress: Some(server.to_string()),
            ..Default::default()
        }
    }))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;
    use crate::docker::config::load_config;

    fn config(json: &str) -> DockerConfig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, json).unwrap();
        load_config(&path).unwrap()
    }

    /// A folder holding `docker-credential-<name>` scripts (`sh` bodies that
    /// read the server from stdin into `$server`), and the PATH that puts it
    /// first. The scripts are installed by `install(1)`, so that no test
    /// thread's fork holds them open for writing when they run (ETXTBSY).
    struct Helpers {
        dir: tempfile::TempDir,
    }

    impl Helpers {
        fn new(scripts: &[(&str, &str)]) -> Self {
            let dir = tempfile::tempdir().unwrap();
            for (name, body) in scripts {
                let source = dir.path().join(format!("{name}.txt"));
                std::fs::write(&source, format!("#!/bin/sh\nread -r server\n{body}\n")).unwrap();
                let status = Command::new("install")
                    .arg("-m")
                    .arg("0755")
                    .arg(&source)
                    .arg(dir.path().join(format!("docker-credential-{name}")))
                    .status()
                    .unwrap();
                assert!(status.success());
            }
            Self { dir }
        }

        fn path(&self) -> OsString {
            let mut path = self.dir.path().as_os_str().to_owned();
            if let Some(rest) = std::env::var_os("PATH") {
                path.push(":");
                path.push(rest);
            }
            path
        }
    }

    /// Replies alice/pw for `expected` and fails otherwise.
    fn replies(expected: &str, user: &str) -> String {
        format!(
            r#"[ "$server" = "{expected}" ] || {{ echo "asked for $server"; exit 3; }}
printf '{{"ServerURL":"%s","Username":"{user}","Secret":"pw-from-helper"}}' "$server""#
        )
    }

    fn user(lookup: &Lookup) -> Option<&str> {
        lookup.credentials.as_ref()?.username.as_deref()
    }

    #[test]
    fn registry_host_of_references() {
        assert_eq!(registry_of("imgctl:dev"), "docker.io");
        assert_eq!(registry_of("me/imgctl:dev"), "docker.io");
        assert_eq!(registry_of("ghcr.io/me/imgctl:dev"), "ghcr.io");
        assert_eq!(registry_of("localhost:5000/imgctl"), "localhost:5000");
        assert_eq!(registry_of("localhost/imgctl"), "localhost");
    }

    #[test]
    fn decodes_auths_for_hub_and_private_registries() {
        // "alice:s3cr:et" and "bob:pw" in base64.
        let cfg = config(
            r#"{"auths": {
                "https://index.docker.io/v1/": {"auth": "YWxpY2U6czNjcjpldA=="},
                "registry.example.com:5000": {"auth": "Ym9iOnB3"}
            }}"#,
        );
        let hub = cfg.credentials_for("docker.io").unwrap();
        let creds = hub.credentials.as_ref().unwrap();
        assert_eq!(creds.username.as_deref(), Some("alice"));
        assert_eq!(creds.password.as_deref(), Some("s3cr:et"));
        assert_eq!(creds.serveraddress.as_deref(), Some(DOCKER_HUB_INDEX));
        assert!(hub.helper.is_none());
        let private = cfg.credentials_for("registry.example.com:5000").unwrap();
        assert_eq!(user(&private), Some("bob"));
        assert!(cfg
            .credentials_for("ghcr.io")
            .unwrap()
            .credentials
            .is_none());
    }

    #[test]
    fn bad_auth_is_an_error_naming_the_entry() {
        let cfg = config(r#"{"auths": {"ghcr.io": {"auth": "not base64!"}}}"#);
        let err = cfg.credentials_for("ghcr.io").unwrap_err().to_string();
        assert!(err.contains("ghcr.io") && err.contains("base64"), "{err}");
    }

    #[test]
    fn a_helper_wins_over_a_stale_auths_entry() {
        let helpers = Helpers::new(&[("imgctl-fresh", &replies("ghcr.io", "from-helper"))]);
        // "stale:old" in base64, beside the helper for the same host.
        let cfg = config(
            r#"{"auths": {"ghcr.io": {"auth": "c3RhbGU6b2xk"}},
                "credHelpers": {"ghcr.io": "imgctl-fresh"}}"#,
        );
        let found = cfg
            .credentials_with("ghcr.io", Some(&helpers.path()))
            .unwrap();
        assert_eq!(user(&found), Some("from-helper"));
        let creds = found.credentials.as_ref().unwrap();
        assert_eq!(creds.password.as_deref(), Some("pw-from-helper"));
        assert_eq!(creds.serveraddress.as_deref(), Some("ghcr.io"));
        assert_eq!(
            found.helper.as_deref(),
            Some("docker-credential-imgctl-fresh")
        );
    }

    #[test]
    fn cred_helpers_come_before_creds_store_and_creds_store_before_auths() {
        let helpers = Helpers::new(&[
            ("imgctl-per-host", &replies("ghcr.io", "per-host")),
            ("imgctl-store", &replies("quay.io", "store")),
            ("imgctl-hub", &replies(DOCKER_HUB_INDEX, "hub")),
        ]);
        let path = helpers.path();
        let cfg = config(
            r#"{"auths": {"ghcr.io": {"auth": "c3RhbGU6b2xk"}, "quay.io": {"auth": "c3RhbGU6b2xk"}},
                "credsStore": "imgctl-store",
                "credHelpers": {"ghcr.io": "imgctl-per-host", "index.docker.io": "imgctl-hub"}}"#,
        );
        let per_host = cfg.credentials_with("ghcr.io", Some(&path)).unwrap();
        assert_eq!(user(&per_host), Some("per-host"));
        let store = cfg.credentials_with("quay.io", Some(&path)).unwrap();
        assert_eq!(user(&store), Some("store"));
        // Docker Hub is asked for under its index URL, as the docker CLI does.
        let hub = cfg.credentials_with("docker.io", Some(&path)).unwrap();
        assert_eq!(user(&hub), Some("hub"));
    }

    #[test]
    fn a_helper_without_credentials_means_anonymous_not_the_auths_entry() {
        let helpers = Helpers::new(&[(
            "imgctl-empty",
            &format!("echo '{HELPER_NOT_FOUND}'; exit 1"),
        )]);
        let cfg = config(
            r#"{"auths": {"ghcr.io": {"auth": "c3RhbGU6b2xk"}}, "credsStore": "imgctl-empty"}"#,
        );
        let found = cfg
            .credentials_with("ghcr.io", Some(&helpers.path()))
            .unwrap();
        assert!(found.credentials.is_none(), "{found:?}");
        assert_eq!(
            found.helper.as_deref(),
            Some("docker-credential-imgctl-empty")
        );
    }

    #[test]
    fn a_token_reply_is_an_identity_token() {
        let helpers = Helpers::new(&[(
            "imgctl-token",
            r#"printf '{"Username":"<token>","Secret":"tok"}'"#,
        )]);
        let cfg = config(r#"{"credsStore": "imgctl-token"}"#);
        let found = cfg
            .credentials_with("ghcr.io", Some(&helpers.path()))
            .unwrap();
        let creds = found.credentials.unwrap();
        assert_eq!(creds.identitytoken.as_deref(), Some("tok"));
        assert!(creds.username.is_none() && creds.password.is_none());
    }

    /// Whether process `pid` runs (a zombie, reaped by no one in a
    /// container without an init, counts as gone).
    fn runs(pid: &str) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|stat| {
            stat.rsplit(") ")
                .next()
                .is_some_and(|s| !s.starts_with('Z'))
        })
    }

    #[test]
    fn a_hung_helper_or_one_whose_child_holds_stdout_is_killed_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let pids = dir.path().display();
        let helpers = Helpers::new(&[
            // Never answers.
            (
                "imgctl-hang",
                &format!("sleep 1000 & echo $! > {pids}/hang.pid; wait"),
            ),
            // Answers and exits, but a child keeps its stdout open.
            (
                "imgctl-fork",
                &format!(
                    r#"printf '{{"Username":"u","Secret":"s"}}'
sleep 1000 & echo $! > {pids}/fork.pid
exit 0"#
                ),
            ),
        ]);
        let path = helpers.path();
        for name in ["hang", "fork"] {
            let cfg = config(&format!(r#"{{"credsStore": "imgctl-{name}"}}"#));
            let started = std::time::Instant::now();
            let err = cfg
                .credentials_within("ghcr.io", Some(&path), std::time::Duration::from_secs(1))
                .unwrap_err();
            let took = started.elapsed();
            assert!(
                matches!(err, DockerError::CredentialHelperTimeout { seconds: 1, .. }),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!("docker-credential-imgctl-{name} get did not answer for ghcr.io within 1 s; it was killed")
            );
            assert!(took < std::time::Duration::from_secs(5), "{name}: {took:?}");
            // The helper's child went with its process group.
            let pid = std::fs::read_to_string(dir.path().join(format!("{name}.pid"))).unwrap();
            let gone = (0..100).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                !runs(&pid)
            });
            assert!(gone, "{name}: sleep {} still runs", pid.trim());
        }
        // The deadline is what a real push waits.
        assert_eq!(HELPER_DEADLINE, std::time::Duration::from_secs(30));
    }

    #[test]
    fn a_helper_printing_100_mb_is_refused_quickly_with_a_short_error() {
        let flood = "head -c 100000000 /dev/zero | tr '\\0' x";
        let helpers = Helpers::new(&[
            // A 100 MB reply, exiting 0 and exiting 1.
            ("imgctl-flood-ok", flood),
            ("imgctl-flood-fail", &format!("{flood}; exit 1")),
            // 100 MB on stderr, then its last words.
            (
                "imgctl-flood-stderr",
                &format!("{{ {flood}; echo ' keychain locked'; }} >&2; exit 1"),
            ),
        ]);
        let path = helpers.path();
        let ask = |helper: &str| {
            let started = std::time::Instant::now();
            let err = config(&format!(r#"{{"credsStore": "{helper}"}}"#))
                .credentials_with("ghcr.io", Some(&path))
                .unwrap_err();
            let took = started.elapsed();
            assert!(
                took < std::time::Duration::from_secs(10),
                "{helper}: {took:?}"
            );
            err
        };
        for helper in ["imgctl-flood-ok", "imgctl-flood-fail"] {
            let err = ask(helper);
            assert!(
                matches!(err, DockerError::CredentialHelperReplyTooLarge { .. }),
                "{err:?}"
            );
            assert_eq!(
                err.to_string(),
                format!("docker-credential-{helper} get replied with more than 64 KiB for ghcr.io; it was killed")
            );
        }
        let err = ask("imgctl-flood-stderr").to_string();
        assert!(
            err.starts_with(
                "docker-credential-imgctl-flood-stderr get failed for ghcr.io (exit status: 1): …x"
            ),
            "{}",
            &err[..200.min(err.len())]
        );
        assert!(
            err.ends_with("x keychain locked"),
            "{}",
            &err[err.len().saturating_sub(200)..]
        );
        assert!(err.len() < 1000, "{} bytes", err.len());
    }

    #[test]
    fn other_helper_failures_are_one_line_errors() {
        let helpers = Helpers::new(&[
            (
                "imgctl-broken",
                "echo 'keychain locked'; echo 'try again' >&2; exit 4",
            ),
            ("imgctl-quiet", "echo 'no dbus' >&2; exit 1"),
            ("imgctl-garbage", "echo 'not json'"),
        ]);
        let path = helpers.path();
        let ask = |helper: &str| {
            config(&format!(r#"{{"credsStore": "{helper}"}}"#))
                .credentials_with("ghcr.io", Some(&path))
                .unwrap_err()
                .to_string()
        };
        let err = ask("imgctl-broken");
        assert_eq!(
            err,
            "docker-credential-imgctl-broken get failed for ghcr.io (exit status: 4): keychain locked"
        );
        let err = ask("imgctl-quiet");
        assert!(err.ends_with("(exit status: 1): no dbus"), "{err}");
        let err = ask("imgctl-garbage");
        assert!(
            err.starts_with("docker-credential-imgctl-garbage replied with something other than"),
            "{err}"
        );
        let err = ask("imgctl-absent");
        assert!(
            err.starts_with("cannot run the credential helper docker-credential-imgctl-absent: "),
            "{err}"
        );
        for err in [ask("imgctl-broken"), ask("imgctl-absent")] {
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
