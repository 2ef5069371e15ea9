//! The lock's errors: why a file is not a usable lock ([`LockFileError`]) and
//! why a resolution failed ([`LockError`]: finding pip, running it, reading
//! its report, and pip's own failures classified).
//!
//! Each `Display` is the one line the user reads, in the lock's own words; it
//! names no flag and no imgctl command, and carries no hint. The exit status,
//! the command names and the hints are `commands/advice/lock.rs`'s.
use std::path::PathBuf;

/// Why a lock file cannot be used: it cannot be read, or a line is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockFileError {
    /// The file exists but cannot be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error, as text.
        error: String,
    },
    /// A `# input` line without `KEY: VALUE`.
    #[error("line {line}: an input line must be `# input KEY: VALUE`")]
    InputLine {
        /// 1-based line number.
        line: usize,
    },
    /// A `# lock-version:` line whose value is not a number.
    #[error("line {line}: lock-version '{value}' is not a number")]
    Version {
        /// 1-based line number.
        line: usize,
        /// The value as written.
        value: String,
    },
    /// A body line that is not `name==version`.
    #[error("line {line}: '{text}' is not a `name==version` line (a lock holds nothing else: no pip options, URLs, markers or ranges)")]
    NotAPackage {
        /// 1-based line number.
        line: usize,
        /// The line, escaped for one line of output.
        text: String,
    },
    /// A package listed twice (after name normalisation).
    #[error("line {line}: '{name}' is listed twice")]
    Twice {
        /// 1-based line number of the second one.
        line: usize,
        /// The normalised name.
        name: String,
    },
    /// No `# lock-version:` line: not a lock that imgctl wrote.
    #[error("no `# lock-version:` line (not written by imgctl)")]
    NoVersion,
    /// No `# inputs-sha256:` line: not a lock that imgctl wrote.
    #[error("no `# inputs-sha256:` line (not written by imgctl)")]
    NoDigest,
}

/// Why a resolution with pip failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The host has no python3 (or `IMGCTL_PYTHON` names nothing).
    #[error(
        "no Python on this host: `{program}` was not found on PATH; locking resolves with pip"
    )]
    NoPython {
        /// The interpreter tried.
        program: String,
    },
    /// The interpreter exists but cannot be started.
    #[error("cannot run `{program}`: {error}")]
    CannotRunPython {
        /// The interpreter tried.
        program: String,
        /// Why it could not start.
        error: std::io::Error,
    },
    /// `python3 -m pip --version` fails.
    #[error("`{program} -m pip` does not work ({why}); locking resolves with pip")]
    NoPip {
        /// The interpreter.
        program: String,
        /// The last line pip wrote on stderr.
        why: String,
    },
    /// pip is older than [`super::resolve::MIN_PIP`].
    #[error("pip {version} of `{program}` cannot resolve without installing (that needs pip {}.{} or newer)", super::resolve::MIN_PIP.0, super::resolve::MIN_PIP.1)]
    OldPip {
        /// The interpreter.
        program: String,
        /// pip's version.
        version: String,
    },
    /// The temporary folder for pip's report cannot be made.
    #[error("cannot make a temporary folder: {error}")]
    TempDir {
        /// Why.
        error: std::io::Error,
    },
    /// The constraints file of the second pass cannot be written.
    #[error("cannot write {}: {error}", .path.display())]
    WriteConstraints {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// pip succeeded but wrote no report.
    #[error("pip wrote no report ({}): {error}", .path.display())]
    NoReport {
        /// Where the report should be.
        path: PathBuf,
        /// Why it cannot be read.
        error: std::io::Error,
    },
    /// pip's report cannot be understood.
    #[error("pip's report: {0}")]
    BadReport(String),
    /// pip cannot be started.
    #[error("cannot run `{program} -m pip`: {error}")]
    SpawnPip {
        /// The interpreter.
        program: String,
        /// Why.
        error: std::io::Error,
    },
    /// Ctrl-C during the resolution.
    #[error("locking interrupted by Ctrl-C; no lock was written")]
    Interrupted,
    /// Waiting for pip failed.
    #[error("waiting for pip: {error}")]
    WaitPip {
        /// Why.
        error: std::io::Error,
    },
    /// TLS verification failed on the way to an index.
    #[error("cannot reach {indexes}: TLS certificate verification failed")]
    Tls {
        /// The indexes pip used (`A` or `A and B`).
        indexes: String,
    },
    /// An index cannot be reached (DNS, proxy, refused, timeout).
    #[error("cannot reach {indexes}: {cause}")]
    Unreachable {
        /// The indexes pip used.
        indexes: String,
        /// pip's words for the failure.
        cause: String,
    },
    /// The pins contradict each other.
    #[error("pip cannot resolve the pins: {first}")]
    Conflict {
        /// pip's first error line about it.
        first: String,
        /// pip's "The conflict is caused by" lines, trimmed (may be empty).
        causes: Vec<String>,
    },
    /// No release of a requirement has a wheel for the target.
    #[error("pip finds no {what} for {target}")]
    NoMatch {
        /// The requirement (`six==9.9`).
        what: String,
        /// The target (`CPython 3.10 on linux_x86_64 glibc 2.35, binary wheels only`).
        target: String,
        /// The indexes pip used.
        indexes: String,
        /// The versions pip saw with a fitting wheel, in pip's order (empty: none).
        versions: Vec<String>,
    },
    /// Any other pip failure.
    #[error("pip failed (exit {}): {last}", .code.map_or("by a signal".to_string(), |c| c.to_string()))]
    PipFailed {
        /// pip's exit code; `None` when a signal ended it.
        code: Option<i32>,
        /// pip's last error line.
        last: String,
    },
}
