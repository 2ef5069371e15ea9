//! The lock's errors: why a file is not a usable lock ([`LockFileError`]) and
//! why a resolution failed ([`LockError`]: finding uv, running it, reading
//! its output, and uv's own failures classified).
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
    /// A body entry that is not `name==version` with sha256 hashes.
    #[error("line {line}: '{text}' is not a `name==version` line with sha256 hashes (a lock holds nothing else: no pip options, URLs, markers or ranges)")]
    NotAPackage {
        /// 1-based line number (where the entry starts).
        line: usize,
        /// The entry (its continued lines joined), escaped for one line of output.
        text: String,
    },
    /// A `# step` line that names no step imgctl knows.
    #[error("line {line}: '{word}' is not a step (a lock has the steps torch and pins)")]
    Step {
        /// 1-based line number.
        line: usize,
        /// The word after `# step`, escaped.
        word: String,
    },
    /// A package before the first `# step` line (format 2 and later).
    #[error("line {line}: a package before the first `# step` line")]
    NoStep {
        /// 1-based line number.
        line: usize,
    },
    /// A package without a hash (format 2 and later).
    #[error("line {line}: '{name}' has no sha256 hash (every package of a lock has one)")]
    NoHash {
        /// 1-based line number.
        line: usize,
        /// The normalised name.
        name: String,
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

/// Why a resolution with uv failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// No uv: neither in the set-up venv nor on PATH.
    #[error("uv was not found ({}); locking resolves with uv", .tried.join(", "))]
    NoUv {
        /// Where it was looked for, in order.
        tried: Vec<String>,
    },
    /// uv exists but cannot be started, or `uv --version` fails.
    #[error("cannot run `{program}` to ask its version: {why}")]
    CannotRunUv {
        /// The program.
        program: String,
        /// Why (the error, or its last line of output).
        why: String,
    },
    /// uv is older than [`super::uv::MIN_UV`].
    #[error("uv {version} (`{program}`) is too old to lock: that needs uv {}.{} or newer", super::uv::MIN_UV.0, super::uv::MIN_UV.1)]
    OldUv {
        /// The program.
        program: String,
        /// Its version.
        version: String,
    },
    /// The base's glibc is older than any manylinux platform uv knows.
    #[error("uv knows no manylinux platform for {platform}")]
    NoPlatform {
        /// The platform (`linux_x86_64 glibc 2.12`).
        platform: String,
    },
    /// The temporary folder for uv's inputs cannot be made.
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
    /// uv's output cannot be understood.
    #[error("uv's output: {0}")]
    BadOutput(String),
    /// uv cannot be started.
    #[error("cannot run `{program}`: {error}")]
    SpawnUv {
        /// The program.
        program: String,
        /// Why.
        error: std::io::Error,
    },
    /// Ctrl-C during the resolution.
    #[error("locking interrupted by Ctrl-C; no lock was written")]
    Interrupted,
    /// Waiting for uv failed.
    #[error("waiting for uv: {error}")]
    WaitUv {
        /// Why.
        error: std::io::Error,
    },
    /// TLS verification failed on the way to an index.
    #[error("cannot reach {indexes}: TLS certificate verification failed ({cause})")]
    Tls {
        /// The indexes uv used (`A` or `A and B`).
        indexes: String,
        /// uv's words for the failure.
        cause: String,
    },
    /// An index cannot be reached (DNS, proxy, refused, timeout).
    #[error("cannot reach {indexes}: {cause}")]
    Unreachable {
        /// The indexes uv used.
        indexes: String,
        /// uv's words for the failure.
        cause: String,
    },
    /// The pins contradict each other.
    #[error("uv cannot resolve the pins: {explanation}")]
    Conflict {
        /// uv's explanation, its lines joined.
        explanation: String,
    },
    /// No release of a requirement has a wheel for the target.
    #[error("uv finds no {what} for {target}")]
    NoMatch {
        /// The requirement or name (`six==9.9`).
        what: String,
        /// The target (`CPython 3.10 on linux_x86_64 glibc 2.35, binary wheels only`).
        target: String,
        /// The indexes uv used.
        indexes: String,
    },
    /// torch's own set, resolved from torch's index with every version held,
    /// disagrees with the whole resolution.
    #[error("torch's index does not serve what the whole resolution chose: {what}")]
    TorchSet {
        /// What differs (`typing-extensions 4.16.0 → missing`).
        what: String,
    },
    /// Any other uv failure.
    #[error("uv failed (exit {}): {last}", .code.map_or("by a signal".to_string(), |c| c.to_string()))]
    UvFailed {
        /// uv's exit code; `None` when a signal ended it.
        code: Option<i32>,
        /// uv's last error line.
        last: String,
    },
}
