//! uv, the resolver locks are made with: finding it (the set-up venv's
//! `$IMGCTL_VENV/bin/uv`, then `uv` on PATH) and checking its version, running
//! `uv pip compile` with a clean configuration (no uv.toml, no `UV_*` setting
//! that changes what is resolved), and turning its failures into one-line
//! errors (no network, TLS, a conflict, no matching release).
//!
//! It knows nothing of specs or lock files: [`super::resolve`] builds the
//! arguments and reads the output.
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use super::LockError;
use crate::image::specs::compat;

/// The uv that scripts/setup.sh installs (scripts/requirements-test.txt pins
/// it), the one the bundled locks were made with.
pub const UV_VERSION: &str = "0.13.8";

/// The oldest uv imgctl locks with: the manylinux platforms up to glibc 2.40
/// came with uv 0.5 (astral-sh/uv#9234, November 2024), `--default-index` and
/// `--index` with 0.4.23; 0.6 (February 2025) has both.
pub const MIN_UV: (u64, u64) = (0, 6);

/// uv settings from the environment that are kept: where the cache is, and
/// how to talk to the network. Every other `UV_*` variable is removed, since
/// it could change what is resolved (an index, constraints, pre-releases, a
/// cut-off date, a torch backend).
const KEPT_UV_VARIABLES: &[&str] = &[
    "UV_CACHE_DIR",
    "UV_NO_CACHE",
    "UV_HTTP_TIMEOUT",
    "UV_HTTP_RETRIES",
    "UV_REQUEST_TIMEOUT",
    "UV_CONCURRENT_DOWNLOADS",
    "UV_NATIVE_TLS",
    "UV_INSECURE_HOST",
    "UV_KEYRING_PROVIDER",
    "UV_OFFLINE",
];

/// A uv that can lock.
#[derive(Debug, Clone)]
pub struct Uv {
    /// The program (`/…/.venv/bin/uv`, or `uv` found on PATH, as a path).
    pub program: PathBuf,
    /// Its version (`0.13.8`).
    pub version: String,
}

/// Finds uv: `bin/uv` of the venvs [`crate::sys::venv::candidates`] names
/// (`IMGCTL_VENV`, `VIRTUAL_ENV`, the venv scripts/setup.sh made), else
/// `uv` on PATH; checks that it runs and is new enough.
pub fn find_uv() -> Result<Uv, LockError> {
    let mut tried = Vec::new();
    let mut found = None;
    for venv in crate::sys::venv::candidates() {
        let p = venv.join("bin").join("uv");
        tried.push(p.display().to_string());
        if is_executable(&p) {
            found = Some(p);
            break;
        }
    }
    if found.is_none() {
        tried.push("uv on PATH".to_string());
        found = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("uv"))
                .find(|p| is_executable(p))
        });
    }
    let Some(program) = found else {
        return Err(LockError::NoUv { tried });
    };
    let shown = program.display().to_string();
    let out = Command::new(&program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LockError::CannotRunUv {
            program: shown.clone(),
            why: e.to_string(),
        })?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let version = text
        .strip_prefix("uv ")
        .and_then(|r| r.split_whitespace().next())
        .filter(|_| out.status.success());
    let Some(version) = version else {
        let err = String::from_utf8_lossy(&out.stderr);
        let why = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("it printed no version")
            .trim()
            .to_string();
        return Err(LockError::CannotRunUv {
            program: shown,
            why,
        });
    };
    let key = compat::version_key(version);
    let (major, minor) = (
        key.first().copied().unwrap_or(0),
        key.get(1).copied().unwrap_or(0),
    );
    if (major, minor) < MIN_UV {
        return Err(LockError::OldUv {
            program: shown,
            version: version.to_string(),
        });
    }
    Ok(Uv {
        program,
        version: version.to_string(),
    })
}

/// A regular file with an execute bit.
fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Pid of the running uv, for the Ctrl-C handler (0: none).
static UV_PID: AtomicU32 = AtomicU32::new(0);

/// Runs uv with `args`, `stdin` on its standard input; `on_line` sees the
/// command line first (`$ uv …  (stdin: …)`, for `-v`), then uv's stderr
/// lines; returns its stdout. `indexes` and `target` (`CPython 3.10 on
/// linux_x86_64 glibc 2.35, binary wheels only`) word its failures.
pub fn run(
    uv: &Uv,
    args: &[String],
    stdin: &str,
    indexes: &str,
    target: &str,
    on_line: &mut dyn FnMut(&str),
) -> Result<String, LockError> {
    on_line(&format!(
        "$ {} {}  (stdin: {})",
        uv.program.display(),
        args.join(" "),
        stdin.trim_end().replace('\n', ", ")
    ));
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = Arc::clone(&interrupted);
        // A second handler cannot be set; the first one (this command's) stays.
        let _ = ctrlc::set_handler(move || {
            flag.store(true, Ordering::SeqCst);
            let pid = UV_PID.load(Ordering::SeqCst);
            if pid != 0 {
                // kill(2) with a pid we started and a valid signal.
                let _ = crate::sys::process::kill(pid as i32, libc::SIGINT);
            }
        });
    }
    let mut cmd = Command::new(&uv.program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("UV_") && (!KEPT_UV_VARIABLES.contains(&key) || value.is_empty()) {
            cmd.env_remove(key);
        }
    }
    let mut child = cmd.spawn().map_err(|error| LockError::SpawnUv {
        program: uv.program.display().to_string(),
        error,
    })?;
    UV_PID.store(child.id(), Ordering::SeqCst);
    if let Some(mut input) = child.stdin.take() {
        // uv reads all of it before it resolves; a failure shows in its exit.
        let _ = input.write_all(stdin.as_bytes());
    }
    let mut stdout = child.stdout.take().expect("piped stdout");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let mut err_text = String::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            on_line(&line);
            err_text.push_str(&line);
            err_text.push('\n');
        }
    }
    let status = child.wait();
    UV_PID.store(0, Ordering::SeqCst);
    let out_text = out_reader.join().unwrap_or_default();
    if interrupted.load(Ordering::SeqCst) {
        return Err(LockError::Interrupted);
    }
    let status = status.map_err(|error| LockError::WaitUv { error })?;
    if status.success() {
        return Ok(out_text);
    }
    Err(classify(&err_text, status.code(), indexes, target))
}

/// Phrases of uv's connection failures (reqwest/hyper, as uv prints them).
const NETWORK_PHRASES: &[&str] = &[
    "dns error",
    "failed to lookup address information",
    "tcp connect error",
    "tunnel error",
    "Connection refused",
    "Network is unreachable",
    "operation timed out",
    "error sending request for url",
    "Failed to fetch",
];

/// Phrases of a failed TLS verification.
const TLS_PHRASES: &[&str] = &[
    "invalid peer certificate",
    "UnknownIssuer",
    "certificate verify failed",
    "CERTIFICATE_VERIFY_FAILED",
];

/// One-line error for a failed uv run (that used `indexes` for `target`), from its stderr.
pub fn classify(stderr: &str, code: Option<i32>, indexes: &str, target: &str) -> LockError {
    let indexes = indexes.to_string();
    // uv's chain of causes: `error: …` then `  cause: …` lines.
    let causes: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("cause:"))
        .map(str::trim)
        .collect();
    // The index of the URL uv failed to fetch, when it is one of them.
    let failed_index = causes
        .iter()
        .find_map(|c| c.strip_prefix("Failed to fetch:"))
        .and_then(|url| {
            let url = url.trim().trim_matches('`');
            indexes
                .split(" and ")
                .find(|i| url.starts_with(i.trim_end_matches('/')))
        })
        .map(str::to_string);
    if let Some(line) = stderr
        .lines()
        .find(|l| TLS_PHRASES.iter().any(|p| l.contains(p)))
    {
        let indexes = failed_index.unwrap_or(indexes);
        let cause = line.trim().trim_start_matches("cause:").trim().to_string();
        return LockError::Tls { indexes, cause };
    }
    if NETWORK_PHRASES.iter().any(|p| stderr.contains(p)) {
        let indexes = failed_index.unwrap_or(indexes);
        // The causes after the request that failed, most general first.
        let after = causes
            .iter()
            .position(|c| c.starts_with("error sending request"))
            .map_or(0, |i| i + 1);
        let words: Vec<&str> = causes[after.min(causes.len())..]
            .iter()
            .copied()
            .filter(|c| *c != "client error (Connect)")
            .collect();
        let cause = if words.is_empty() {
            last_line(stderr)
        } else {
            words.join(": ")
        };
        return LockError::Unreachable { indexes, cause };
    }
    if stderr.contains("No solution found when resolving dependencies") {
        let explanation = explanation(stderr);
        if let Some(what) = no_match(&explanation) {
            return LockError::NoMatch {
                what,
                target: target.to_string(),
                indexes,
            };
        }
        return LockError::Conflict { explanation };
    }
    LockError::UvFailed {
        code,
        last: last_line(stderr),
    }
}

/// uv's explanation of a failed resolution, its lines joined: what follows
/// "No solution found", up to a blank line or uv's own hint.
fn explanation(stderr: &str) -> String {
    let mut parts = Vec::new();
    for line in stderr
        .lines()
        .skip_while(|l| !l.contains("No solution found"))
        .skip(1)
    {
        let t = line.trim();
        if t.is_empty() || t.starts_with("hint:") {
            break;
        }
        let t = t
            .trim_start_matches("cause:")
            .trim_start_matches("╰─▶")
            .trim();
        parts.push(t);
    }
    if parts.is_empty() {
        "your requirements are unsatisfiable".to_string()
    } else {
        parts.join(" ")
    }
}

/// The requirement the explanation says has no fitting release, when that is
/// where it starts (`Because there is no version of six==9.9 and …`).
fn no_match(explanation: &str) -> Option<String> {
    use std::sync::OnceLock;
    static RE: OnceLock<regex::Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"^Because (?:there is no version of ([^\s,]+)|([^\s,]+) was not found in the package registry|([^\s,]+) has no (?:usable wheels|wheels with a matching))",
        )
        .expect("static regex")
    });
    let c = re.captures(explanation)?;
    (1..=3)
        .find_map(|i| c.get(i))
        .map(|m| m.as_str().to_string())
}

/// The last non-empty line of `text`, trimmed, without uv's `error:`/`cause:` label.
fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .trim_start_matches("error:")
        .trim_start_matches("cause:")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: &str = "CPython 3.10 on linux_x86_64 glibc 2.35, binary wheels only";

    #[test]
    fn failures_become_one_line() {
        let idx = "https://pypi.org/simple";
        // uv 0.13.8's words (stderr not a terminal), as seen here.
        let proxy = "warning: The requested Python version 3.10 is not available; 3.11.7 will be used to build dependencies instead.\nerror: Request failed after 3 retries in 7.7s\n  cause: Failed to fetch: https://pypi.org/simple/six/\n  cause: error sending request for url (https://pypi.org/simple/six/)\n  cause: client error (Connect)\n  cause: tunnel error: failed to create underlying connection\n  cause: tcp connect error\n  cause: Connection refused (os error 111)\n";
        let e = classify(proxy, Some(2), idx, TARGET);
        assert!(matches!(e, LockError::Unreachable { .. }), "{e:?}");
        assert_eq!(e.to_string(), "cannot reach https://pypi.org/simple: tunnel error: failed to create underlying connection: tcp connect error: Connection refused (os error 111)");
        let dns = "error: Request failed after 3 retries in 11.5s\n  cause: Failed to fetch: https://nonexistent.invalid/simple/six/\n  cause: error sending request for url (https://nonexistent.invalid/simple/six/)\n  cause: client error (Connect)\n  cause: dns error\n  cause: error resolving DNS\n  cause: failed to lookup address information: Name or service not known\n";
        let e = classify(dns, Some(2), idx, TARGET);
        assert!(matches!(e, LockError::Unreachable { .. }), "{e:?}");
        assert!(e.to_string().ends_with(": dns error: error resolving DNS: failed to lookup address information: Name or service not known"), "{e}");
        // Of two indexes, the one that failed is named.
        let two = "https://download.pytorch.org/whl/cu128 and https://pypi.org/simple";
        let torch_dns = dns.replace(
            "https://nonexistent.invalid/simple",
            "https://download.pytorch.org/whl/cu128",
        );
        let e = classify(&torch_dns, Some(2), two, TARGET);
        assert!(matches!(e, LockError::Unreachable { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("cannot reach https://download.pytorch.org/whl/cu128: dns error"),
            "{e}"
        );

        let conflict = "error: No solution found when resolving dependencies\n  cause: Because referencing==0.36.2 depends on attrs>=22.2.0 and you require referencing==0.36.2, we can conclude that you require attrs>=22.2.0.\n         And because you require attrs==21.4.0, we can conclude that your requirements are unsatisfiable.\n";
        let e = classify(conflict, Some(1), idx, TARGET);
        assert!(matches!(e, LockError::Conflict { .. }), "{e:?}");
        assert_eq!(e.to_string(), "uv cannot resolve the pins: Because referencing==0.36.2 depends on attrs>=22.2.0 and you require referencing==0.36.2, we can conclude that you require attrs>=22.2.0. And because you require attrs==21.4.0, we can conclude that your requirements are unsatisfiable.");

        for (stderr, what) in [
            ("error: No solution found when resolving dependencies\n  cause: Because there is no version of six==9.9 and you require six==9.9, we can conclude that your requirements are unsatisfiable.\n", "six==9.9"),
            ("error: No solution found when resolving dependencies\n  cause: Because numpy==1.21.0 has no usable wheels and you require numpy==1.21.0, we can conclude that your requirements are unsatisfiable.\n\nhint: Wheels are required for `numpy` because building from source is disabled for all packages (i.e., with `--no-build`)\n", "numpy==1.21.0"),
            ("error: No solution found when resolving dependencies\n  cause: Because nonexistent-pkg-zzqq was not found in the package registry and you require nonexistent-pkg-zzqq==1.0, we can conclude that your requirements are unsatisfiable.\n", "nonexistent-pkg-zzqq"),
        ] {
            let e = classify(stderr, Some(1), idx, TARGET);
            assert_eq!(e.to_string(), format!("uv finds no {what} for {TARGET}"));
            // The indexes searched travel with it (the hint names them).
            assert!(
                matches!(&e, LockError::NoMatch { indexes, .. } if indexes == idx),
                "{e:?}"
            );
        }

        let tls = "error: Request failed after 3 retries\n  cause: error sending request for url (https://pypi.org/simple/six/)\n  cause: client error (Connect)\n  cause: invalid peer certificate: UnknownIssuer\n";
        let e = classify(tls, Some(2), idx, TARGET);
        assert!(matches!(e, LockError::Tls { .. }), "{e:?}");
        assert_eq!(e.to_string(), "cannot reach https://pypi.org/simple: TLS certificate verification failed (invalid peer certificate: UnknownIssuer)");

        let e = classify("error: something odd\n", Some(2), idx, TARGET);
        assert!(matches!(e, LockError::UvFailed { .. }), "{e:?}");
        assert_eq!(e.to_string(), "uv failed (exit 2): something odd");
    }
}
