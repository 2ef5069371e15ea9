//! Resolution with pip's own resolver, on the host: `pip install --dry-run
//! --report` for the spec's Python and platform, binary wheels only, into an
//! empty target, so nothing is installed and the host's packages play no part.
//!
//! pip evaluates environment markers (`exceptiongroup; python_version <
//! "3.11"`) with the running interpreter, not `--python-version`
//! (<https://github.com/pypa/pip/issues/10050>), so a host python3 of another
//! minor would lock the wrong set. imgctl therefore runs pip through a small
//! bootstrap ([`bootstrap`]) that gives pip's marker evaluation the image's
//! environment (CPython X.Y on Linux x86_64), and checks pip's report for it.
//!
//! This file owns finding a usable python3/pip, the pip command line, and
//! turning pip's failures into one-line errors (no network, a conflict, no
//! matching release). It writes only into a temporary folder.
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use super::{LockError, LockInputs};
use crate::spec::compat;
use crate::spec::normalize_name;

/// The oldest pip with `install --dry-run --report` (pip 22.2 release notes,
/// <https://pip.pypa.io/en/stable/news/#v22-2>).
pub const MIN_PIP: (u64, u64) = (22, 2);

/// A python3 with a usable pip.
#[derive(Debug, Clone)]
pub struct Python {
    /// The interpreter (`python3`, or `IMGCTL_PYTHON`).
    pub program: String,
    /// pip's version (`23.2.1`).
    pub pip_version: String,
}

/// Finds the host's python3 (`IMGCTL_PYTHON` or `python3` on PATH) and checks
/// that its pip can resolve without installing (pip >= 22.2).
pub fn find_python() -> Result<Python, LockError> {
    let program =
        std::env::var(crate::env_vars::IMGCTL_PYTHON).unwrap_or_else(|_| "python3".to_string());
    let out = match Command::new(&program)
        .args(["-m", "pip", "--version"])
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LockError::NoPython { program })
        }
        Err(error) => return Err(LockError::CannotRunPython { program, error }),
    };
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let version = text
        .strip_prefix("pip ")
        .and_then(|r| r.split_whitespace().next())
        .filter(|_| out.status.success());
    let Some(version) = version else {
        let err = String::from_utf8_lossy(&out.stderr);
        let why = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .to_string();
        return Err(LockError::NoPip { program, why });
    };
    let key = compat::version_key(version);
    if (
        key.first().copied().unwrap_or(0),
        key.get(1).copied().unwrap_or(0),
    ) < MIN_PIP
    {
        return Err(LockError::OldPip {
            program,
            version: version.to_string(),
        });
    }
    Ok(Python {
        program,
        pip_version: version.to_string(),
    })
}

/// The indexes a resolution uses: the spec's, or a mirror of PyPI
/// (`--pip-index-url`), which also serves torch when the spec takes torch
/// from PyPI, as in the image build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indexes {
    /// Where torch comes from.
    pub torch: String,
    /// Where the other pins come from.
    pub pip: String,
}

impl Indexes {
    /// The indexes of `inputs`, through `mirror` when given.
    pub fn new(inputs: &LockInputs, mirror: Option<&str>) -> Indexes {
        let mirror = mirror.map(|m| m.trim_end_matches('/').to_string());
        let torch = match &mirror {
            Some(m) if inputs.torch_index == compat::PYPI_INDEX => m.clone(),
            _ => inputs.torch_index.clone(),
        };
        Indexes {
            torch,
            pip: mirror.unwrap_or_else(|| inputs.pip_index.clone()),
        }
    }
}

/// The Python program (`python3 -c PROGRAM pip-args…`) that runs pip with
/// the marker environment of the image: CPython `python` (`3.10`) on Linux
/// [`super::ARCH`]. The patch level is unknown from a spec and taken as `.0`
/// (a `python_full_version` marker then sees the oldest release of the minor).
/// Keys: PEP 508 environment markers (<https://peps.python.org/pep-0508/#environment-markers>).
pub fn bootstrap(python: &str) -> String {
    format!(
        r#"import sys
env = {{"implementation_name": "cpython", "implementation_version": "{python}.0", "os_name": "posix", "platform_machine": "{arch}", "platform_python_implementation": "CPython", "platform_release": "", "platform_system": "Linux", "platform_version": "", "python_full_version": "{python}.0", "python_version": "{python}", "sys_platform": "linux"}}
import pip._vendor.packaging.markers as markers
markers.default_environment = lambda: dict(env)
from pip._internal.cli.main import main
sys.exit(main(sys.argv[1:]))
"#,
        arch = super::ARCH
    )
}

/// The pip arguments (after `install`'s program, see [`bootstrap`]) that
/// resolve `requirements` for the lock's Python and platform into `report`,
/// with nothing installed (a throwaway `target`).
pub fn pip_args(
    inputs: &LockInputs,
    index: &str,
    extra_index: Option<&str>,
    constraints: Option<&Path>,
    target: &Path,
    report: &Path,
    requirements: &[String],
) -> Vec<String> {
    let mut a: Vec<String> = [
        "install",
        "--dry-run",
        "--ignore-installed",
        "--no-input",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--report",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push(report.display().to_string());
    a.push("--target".into());
    a.push(target.display().to_string());
    // The image's interpreter: CPython of the spec's minor (its ABI follows).
    a.extend(["--implementation".into(), "cp".into()]);
    a.extend(["--python-version".into(), inputs.python.clone()]);
    for tag in inputs.platform.pip_tags() {
        a.push("--platform".into());
        a.push(tag);
    }
    // pip requires binary-only resolution for a foreign --platform/--python-version.
    a.push("--only-binary=:all:".into());
    a.extend(["--index-url".into(), index.to_string()]);
    if let Some(extra) = extra_index {
        a.extend(["--extra-index-url".into(), extra.to_string()]);
    }
    if let Some(c) = constraints {
        a.extend(["--constraint".into(), c.display().to_string()]);
    }
    a.extend(requirements.iter().cloned());
    a
}

/// Resolves the full package set of `inputs`: torch from its index (as the
/// image's torch layer does), then every pin with torch's set held (as the
/// image's pip layer does). `requirements` are the pins as the spec writes
/// them. `on_line` sees pip's progress lines (`Collecting …`). Returns
/// (name, version) pairs, names as published.
pub fn resolve(
    python: &Python,
    inputs: &LockInputs,
    requirements: &[String],
    mirror: Option<&str>,
    on_line: &mut dyn FnMut(&str),
) -> Result<Vec<(String, String)>, LockError> {
    let idx = Indexes::new(inputs, mirror);
    let dir = tempfile::Builder::new()
        .prefix("imgctl-lock-")
        .tempdir()
        .map_err(|error| LockError::TempDir { error })?;
    let mut all = vec![inputs.torch.clone()];
    all.extend(requirements.iter().cloned());
    // One `pip install --dry-run --report` pass, named `tag` in the temporary folder.
    let mut pass = |tag: &str,
                    index: &str,
                    extra: Option<&str>,
                    constraints: Option<&Path>,
                    reqs: &[String]|
     -> Result<Vec<(String, String)>, LockError> {
        let report = dir.path().join(format!("{tag}.json"));
        let target = dir.path().join(tag);
        let args = pip_args(inputs, index, extra, constraints, &target, &report, reqs);
        let indexes = match extra {
            Some(e) => format!("{index} and {e}"),
            None => index.to_string(),
        };
        run_pip(python, &args, inputs, &indexes, on_line)?;
        read_report(&report, &inputs.python)
    };
    if idx.torch == idx.pip {
        return pass("all", &idx.pip, None, None, &all);
    }
    // Two indexes: torch and what it needs come from torch's index alone,
    // then the pins resolve from the pip index with that set held; torch's
    // index is extra there only so that pip can find the torch it holds.
    let torch_set = pass(
        "torch",
        &idx.torch,
        None,
        None,
        std::slice::from_ref(&inputs.torch),
    )?;
    let constraints = dir.path().join("torch-constraints.txt");
    let text: String = torch_set
        .iter()
        .map(|(n, v)| format!("{}=={v}\n", normalize_name(n)))
        .collect();
    if let Err(error) = std::fs::write(&constraints, text) {
        return Err(LockError::WriteConstraints {
            path: constraints,
            error,
        });
    }
    pass("pins", &idx.pip, Some(&idx.torch), Some(&constraints), &all)
}

/// The (name, version) pairs pip's installation report would install.
pub fn read_report(path: &Path, python: &str) -> Result<Vec<(String, String)>, LockError> {
    let text = std::fs::read_to_string(path).map_err(|error| LockError::NoReport {
        path: path.to_path_buf(),
        error,
    })?;
    parse_report(&text, python).map_err(LockError::BadReport)
}

/// Parses pip's installation report
/// (<https://pip.pypa.io/en/stable/reference/installation-report/>) and checks
/// that pip evaluated markers for Python `python` (its `environment`).
pub fn parse_report(text: &str, python: &str) -> Result<Vec<(String, String)>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if let Some(seen) = v
        .get("environment")
        .and_then(|e| e.get("python_version"))
        .and_then(|p| p.as_str())
    {
        if seen != python {
            return Err(format!(
                "pip evaluated markers for Python {seen}, not {python} (this pip's internals differ from what imgctl patches)"
            ));
        }
    }
    let install = v
        .get("install")
        .and_then(|i| i.as_array())
        .ok_or("no `install` list")?;
    install
        .iter()
        .map(|item| {
            let meta = item.get("metadata").ok_or("an item without metadata")?;
            let name = meta.get("name").and_then(|n| n.as_str());
            let version = meta.get("version").and_then(|n| n.as_str());
            match (name, version) {
                (Some(n), Some(v)) => Ok((n.to_string(), v.to_string())),
                _ => Err("an item without metadata.name/version".to_string()),
            }
        })
        .collect()
}

/// Pid of the running pip, for the Ctrl-C handler (0: none).
static PIP_PID: AtomicU32 = AtomicU32::new(0);

/// Runs pip; its stdout lines go to `on_line`, its failure becomes one line.
fn run_pip(
    python: &Python,
    args: &[String],
    inputs: &LockInputs,
    indexes: &str,
    on_line: &mut dyn FnMut(&str),
) -> Result<(), LockError> {
    crate::output::printer().verbose(format!(
        "$ {} -c <imgctl's marker bootstrap> {}",
        python.program,
        args.join(" ")
    ));
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        let flag = Arc::clone(&interrupted);
        // A second handler cannot be set; the first one (this command's) stays.
        let _ = ctrlc::set_handler(move || {
            flag.store(true, Ordering::SeqCst);
            let pid = PIP_PID.load(Ordering::SeqCst);
            if pid != 0 {
                // kill(2) with a pid we started and a valid signal.
                let _ = crate::sys::process::kill(pid as i32, libc::SIGINT);
            }
        });
    }
    let mut cmd = Command::new(&python.program);
    cmd.arg("-c")
        .arg(bootstrap(&inputs.python))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The resolution must not depend on the host's pip configuration beyond
    // network settings (proxy, certificates, timeouts): the indexes are given
    // on the command line, and these settings, from the environment or a
    // pip.conf, would change what is found.
    for (key, value) in [
        ("PIP_EXTRA_INDEX_URL", ""),
        ("PIP_FIND_LINKS", ""),
        ("PIP_CONSTRAINT", ""),
        ("PIP_REQUIREMENT", ""),
        ("PIP_NO_INDEX", "false"),
        ("PIP_PRE", "false"),
        ("PIP_NO_DEPS", "false"),
        ("PIP_NO_BINARY", ":none:"),
        ("PIP_REQUIRE_VIRTUALENV", "false"),
        ("PIP_USER", "false"),
    ] {
        cmd.env(key, value);
    }
    cmd.env_remove("PIP_INDEX_URL");
    let mut child = cmd.spawn().map_err(|error| LockError::SpawnPip {
        program: python.program.clone(),
        error,
    })?;
    PIP_PID.store(child.id(), Ordering::SeqCst);
    let mut stderr = child.stderr.take().expect("piped stderr");
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut out_text = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            on_line(&line);
            out_text.push_str(&line);
            out_text.push('\n');
        }
    }
    let status = child.wait();
    PIP_PID.store(0, Ordering::SeqCst);
    let err_text = err_reader.join().unwrap_or_default();
    for line in err_text.lines() {
        crate::output::printer().verbose(line);
    }
    if interrupted.load(Ordering::SeqCst) {
        return Err(LockError::Interrupted);
    }
    let status = status.map_err(|error| LockError::WaitPip { error })?;
    if status.success() {
        return Ok(());
    }
    Err(classify(
        &err_text,
        &out_text,
        status.code(),
        inputs,
        indexes,
    ))
}

/// Phrases of pip/urllib3 connection failures.
const NETWORK_PHRASES: &[&str] = &[
    "Cannot connect to proxy",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "No address associated with hostname",
    "Connection refused",
    "Network is unreachable",
    "ProxyError",
    "ConnectTimeoutError",
    "ReadTimeoutError",
    "Read timed out",
    "NewConnectionError",
];

/// One-line error for a failed pip run (that used `indexes`, for messages), from its output.
pub fn classify(
    stderr: &str,
    stdout: &str,
    code: Option<i32>,
    inputs: &LockInputs,
    indexes: &str,
) -> LockError {
    let indexes = indexes.to_string();
    let all = format!("{stdout}\n{stderr}");
    let target = format!(
        "CPython {} on {}, binary wheels only",
        inputs.python,
        inputs.platform.canonical()
    );
    if all.contains("SSLError") || all.contains("CERTIFICATE_VERIFY_FAILED") {
        return LockError::Tls { indexes };
    }
    if let Some(phrase) = NETWORK_PHRASES.iter().find(|p| all.contains(**p)) {
        let cause = excerpt(&all, phrase);
        return LockError::Unreachable { indexes, cause };
    }
    let errors: Vec<&str> = all
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ERROR: "))
        .collect();
    if all.contains("ResolutionImpossible") || all.contains("conflicting dependencies") {
        let first = errors
            .iter()
            .find(|l| l.starts_with("Cannot install"))
            .or(errors.first())
            .copied()
            .unwrap_or("the pins conflict")
            .to_string();
        let causes: Vec<String> = all
            .lines()
            .skip_while(|l| !l.contains("The conflict is caused by"))
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_string())
            .collect();
        return LockError::Conflict { first, causes };
    }
    if let Some(what) = errors
        .iter()
        .find_map(|l| l.strip_prefix("No matching distribution found for "))
    {
        let versions = errors
            .iter()
            .find_map(|l| l.split_once("(from versions: "))
            .map(|(_, v)| v.trim_end_matches(')').to_string())
            .unwrap_or_default();
        let versions = if versions.is_empty() || versions == "none" {
            Vec::new()
        } else {
            versions.split(", ").map(str::to_string).collect()
        };
        return LockError::NoMatch {
            what: what.to_string(),
            target,
            indexes,
            versions,
        };
    }
    let last = errors
        .last()
        .copied()
        .or_else(|| stderr.lines().rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("no output")
        .trim()
        .to_string();
    LockError::PipFailed { code, last }
}

/// `phrase` and what follows it on its line, up to a quote or 120 characters.
fn excerpt(text: &str, phrase: &str) -> String {
    let Some(start) = text.find(phrase) else {
        return phrase.to_string();
    };
    let rest = &text[start..];
    let end = rest.find(['\'', '"', '\n']).unwrap_or(rest.len()).min(120);
    let mut s = rest[..end]
        .trim_end_matches([',', ' ', ':', '('])
        .to_string();
    if s.is_empty() {
        s = phrase.to_string();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> LockInputs {
        let text = "schema_version: 1\nname: t\nbase_image: nvidia/cuda:12.4.1-base-ubuntu22.04\ncuda: \"12.4.1\"\npython: \"3.10\"\ntorch:\n  version: \"2.7.0\"\n  variant: cu126\n  index: https://pypi.org/simple\npip: [six==1.16.0]\nuser:\n  name: dev\napt: []\nports: []\n";
        LockInputs::of(&crate::spec::validate::validate(text, None).unwrap())
    }

    /// The error line and the hint the user reads.
    fn message(e: LockError) -> (String, String) {
        let text = crate::commands::error::render_error(&e.into());
        let (line, hint) = text.split_once("\n\nhint: ").unwrap();
        (
            line.strip_prefix("error: ").unwrap().to_string(),
            hint.trim_end().to_string(),
        )
    }

    #[test]
    fn the_command_line_pins_python_and_platform() {
        let i = inputs();
        let a = pip_args(
            &i,
            "https://pypi.org/simple",
            None,
            None,
            Path::new("/t"),
            Path::new("/r.json"),
            &["six==1.16.0".into()],
        );
        let s = a.join(" ");
        for needle in [
            "install --dry-run --ignore-installed",
            "--report /r.json --target /t",
            "--implementation cp --python-version 3.10",
            "--platform manylinux_2_35_x86_64",
            "--platform manylinux2014_x86_64",
            "--only-binary=:all:",
            "--index-url https://pypi.org/simple six==1.16.0",
        ] {
            assert!(s.contains(needle), "{needle} not in {s}");
        }
        assert!(!s.contains("--extra-index-url"));
    }

    #[test]
    fn a_mirror_serves_pypis_torch_too() {
        let i = inputs();
        let idx = Indexes::new(&i, Some("https://mirror.example/simple/"));
        assert_eq!(idx.torch, "https://mirror.example/simple");
        assert_eq!(idx.pip, "https://mirror.example/simple");
        let mut cu128 = i.clone();
        cu128.torch_index = "https://download.pytorch.org/whl/cu128".into();
        let idx = Indexes::new(&cu128, Some("https://mirror.example/simple"));
        assert_eq!(idx.torch, "https://download.pytorch.org/whl/cu128");
    }

    #[test]
    fn reports_parse() {
        let r = r#"{"version":"1","environment":{"python_version":"3.10"},"install":[{"metadata":{"name":"PyYAML","version":"6.0.2"}},{"metadata":{"name":"six","version":"1.16.0"}}]}"#;
        assert_eq!(
            parse_report(r, "3.10").unwrap(),
            [
                ("PyYAML".to_string(), "6.0.2".to_string()),
                ("six".into(), "1.16.0".into())
            ]
        );
        assert!(parse_report(r, "3.11")
            .unwrap_err()
            .contains("markers for Python 3.10"));
        assert!(parse_report("{}", "3.10").is_err());
    }

    #[test]
    fn failures_become_one_line() {
        let i = inputs();
        let idx = "https://pypi.org/simple";
        // pip 23.2's words, as seen with no DNS.
        let net = "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution')': /simple/torch/\nERROR: Could not find a version that satisfies the requirement torch==2.7.0 (from versions: none)\nERROR: No matching distribution found for torch==2.7.0\n";
        let (m, h) = message(classify(net, "", Some(1), &i, idx));
        assert_eq!(m, "cannot reach https://pypi.org/simple: Failed to establish a new connection: [Errno -3] Temporary failure in name resolution");
        assert!(h.contains("HTTPS_PROXY"), "{h}");

        let conflict = "ERROR: Cannot install python-dateutil==2.9.0.post0 and six==1.4.0 because these package versions have conflicting dependencies.\n\nThe conflict is caused by:\n    The user requested six==1.4.0\n    python-dateutil 2.9.0.post0 depends on six>=1.5\n\nTo fix this you could try to:\n\nERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts\n";
        let (m, h) = message(classify(conflict, "", Some(1), &i, idx));
        assert_eq!(m, "pip cannot resolve the pins: Cannot install python-dateutil==2.9.0.post0 and six==1.4.0 because these package versions have conflicting dependencies.");
        assert!(
            h.contains("python-dateutil 2.9.0.post0 depends on six>=1.5"),
            "{h}"
        );

        let missing = "ERROR: Could not find a version that satisfies the requirement six==9.9 (from versions: 1.15.0, 1.16.0, 1.17.0)\nERROR: No matching distribution found for six==9.9\n";
        let (m, h) = message(classify(missing, "", Some(1), &i, idx));
        assert_eq!(
            m,
            "pip finds no six==9.9 for CPython 3.10 on linux_x86_64 glibc 2.35, binary wheels only"
        );
        assert!(h.contains("1.17.0"), "{h}");

        let (m, _) = message(classify("ERROR: something odd\n", "", Some(2), &i, idx));
        assert_eq!(m, "pip failed (exit 2): something odd");
    }
}
