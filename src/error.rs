//! Exit statuses, and the escaping that keeps input from forging lines in a
//! message. A leaf: it knows no command, flag or core module; what an error
//! means for the user (its exit status and hint) is decided by the command
//! layer's error tables (`commands/error/`).

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
    /// A tool imgctl needs is not installed (3): uv, for `lock`.
    MissingTool,
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
            ExitStatus::MissingTool => 3,
            ExitStatus::Interrupted => 130,
        }
    }
}

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
