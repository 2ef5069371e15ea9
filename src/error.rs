//! Exit statuses and the user-facing error type.
//!
//! Core code returns `anyhow::Error`s; a [`CliError`] anywhere in the chain
//! chooses the exit code and carries the hint. [`exit`] renders an error as
//! `error: …`, `  caused by: …` lines, a blank line and `hint: …`, on stderr.
use std::fmt;

/// How a command ended; the numeric value is the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// Everything passed (0).
    Success,
    /// A check, build or training run failed (1).
    Failure,
    /// A usage or spec error (2).
    Usage,
    /// Interrupted by Ctrl-C / SIGINT (130).
    Interrupted,
}

impl ExitStatus {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Interrupted => 130,
        }
    }
}

/// An error meant for the user: a one-line message, an exit status and a hint.
#[derive(Debug)]
pub struct CliError {
    /// What went wrong, naming the cause.
    pub message: String,
    /// What to do about it.
    pub hint: Option<String>,
    /// The exit status this error maps to.
    pub status: ExitStatus,
}

impl CliError {
    /// A usage or spec error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: None,
            status: ExitStatus::Usage,
        }
    }
    /// A runtime failure (exit 1).
    pub fn failure(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: None,
            status: ExitStatus::Failure,
        }
    }
    /// An interruption by Ctrl-C (exit 130).
    pub fn interrupted(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: None,
            status: ExitStatus::Interrupted,
        }
    }
    /// Adds a hint line.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// `text` as it may appear inside an error message: unchanged when it is one
/// line of printable text, else quoted and escaped like Rust's `{:?}` (`"a\nb"`),
/// so a value from input can never start a line of its own or send terminal
/// escape sequences.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        std::borrow::Cow::Owned(format!("{text:?}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// `text` with every control character written as its escape (`\n`, `\u{1b}`)
/// and nothing else changed: for values quoted inside a message that already
/// quotes them.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        std::borrow::Cow::Owned(
            text.chars()
                .map(|c| {
                    if c.is_control() {
                        c.escape_debug().to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect(),
        )
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The exit status an error maps to: that of the first [`CliError`] in its chain,
/// else [`ExitStatus::Failure`].
pub fn status_of(err: &anyhow::Error) -> ExitStatus {
    err.chain()
        .find_map(|e| e.downcast_ref::<CliError>())
        .map_or(ExitStatus::Failure, |e| e.status)
}

/// Renders an error for a terminal: `error:`, `caused by:` lines and a `hint:`.
pub fn render_error(err: &anyhow::Error) -> String {
    let mut out = format!("error: {err}\n");
    for cause in err.chain().skip(1) {
        out.push_str(&format!("  caused by: {cause}\n"));
    }
    if let Some(hint) = err
        .chain()
        .find_map(|e| e.downcast_ref::<CliError>())
        .and_then(|e| e.hint.as_ref())
    {
        out.push_str(&format!("\nhint: {hint}\n"));
    }
    out
}

/// Maps a command's outcome to a process exit code, printing any error on stderr.
pub fn exit(result: anyhow::Result<ExitStatus>) -> std::process::ExitCode {
    let status = match result {
        Ok(status) => status,
        Err(err) => {
            eprint!("{}", render_error(&err));
            status_of(&err)
        }
    };
    if crate::verify::check::abandoned_threads() > 0 {
        // A check is still stuck inside a driver call: the libraries' exit
        // handlers could wait on it forever. Flush, then leave without them.
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: _exit ends the process at once; every output is flushed above.
        unsafe { libc::_exit(i32::from(status.code())) };
    }
    std::process::ExitCode::from(status.code())
}
