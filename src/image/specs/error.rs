//! What can go wrong loading a spec: [`SpecError`].
//!
//! The messages name the spec and the problem in the spec's own words; they
//! name no command-line flag and give no hint. `commands/` (its advice table)
//! gives each variant its exit status, the flag names and the hint.
use super::validate::Problem;

/// A spec that cannot be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The spec file cannot be opened or read.
    #[error("cannot read spec {shown}: {error}")]
    Unreadable {
        /// The file, printable.
        shown: String,
        /// Why not.
        error: std::io::Error,
    },
    /// The spec path is a directory.
    #[error("spec {shown} is a directory, not a spec file")]
    IsDirectory {
        /// The path, printable.
        shown: String,
    },
    /// The spec file is larger than [`super::MAX_SPEC_BYTES`].
    #[error("spec {shown} is larger than {max_kib} KiB, the most a spec file may be")]
    TooLarge {
        /// The file, printable.
        shown: String,
        /// The limit in KiB.
        max_kib: u64,
    },
    /// The spec file is not UTF-8 text.
    #[error("spec {shown} is not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 {
        /// The file, printable.
        shown: String,
        /// Where the first invalid byte is.
        offset: usize,
    },
    /// No bundled profile matches the CUDA version asked for.
    #[error("unknown CUDA version '{cuda}': no bundled profile for it (valid: {valid})")]
    UnknownCuda {
        /// The version asked for.
        cuda: String,
        /// The versions that select a bundled profile, comma-separated.
        valid: String,
    },
    /// The spec holds no YAML content.
    #[error("spec {origin} is empty")]
    Empty {
        /// Where the spec was read, printable.
        origin: String,
    },
    /// The spec has problems, every one listed.
    #[error("{}", problems_message(origin, problems, |p| p.to_string()))]
    Problems {
        /// Where the spec was read (not yet made printable).
        origin: String,
        /// Every problem, in the order of the schema's fields.
        problems: Vec<Problem>,
    },
}

/// `spec X has N problems` and one indented line per problem, each written by
/// `line` (the core's words, or `commands/`'s with flag names).
pub fn problems_message(
    origin: &str,
    problems: &[Problem],
    line: impl Fn(&Problem) -> String,
) -> String {
    let n = problems.len();
    let mut msg = format!(
        "spec {} has {n} problem{}",
        crate::error::printable(origin),
        if n == 1 { "" } else { "s" }
    );
    for p in problems {
        msg.push_str(&format!("\n  {}", line(p)));
    }
    msg
}
