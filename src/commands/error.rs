//! Errors as the user sees them: the one place that gives a core error its
//! exit status, flag names and hint.
//!
//! Core modules return their own error enums; [`advise`] walks an error's
//! chain and asks each command family's table ([`super::advice`]) what it
//! means. A [`CliError`] (built by `commands/` itself) carries its status and
//! hint directly. [`render_error`] prints `error: …`, `  caused by: …` lines, a
//! blank line and `hint: …`.
use std::fmt;

use crate::error::ExitStatus;

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

/// What `commands/` says about one error of a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advice {
    /// The exit status the error maps to.
    pub status: ExitStatus,
    /// The line shown instead of the error's own `Display` (when the user's
    /// words, such as a flag name, belong in it); `None` keeps `Display`.
    pub message: Option<String>,
    /// What to do about it.
    pub hint: Option<String>,
}

impl Advice {
    /// A usage or spec error (exit 2) with `hint`.
    pub fn usage(hint: impl Into<Option<String>>) -> Self {
        Self {
            status: ExitStatus::Usage,
            message: None,
            hint: hint.into(),
        }
    }
    /// A runtime failure (exit 1) with `hint`.
    pub fn failure(hint: impl Into<Option<String>>) -> Self {
        Self {
            status: ExitStatus::Failure,
            message: None,
            hint: hint.into(),
        }
    }
    /// An interruption (exit 130) with `hint`.
    pub fn interrupted(hint: impl Into<Option<String>>) -> Self {
        Self {
            status: ExitStatus::Interrupted,
            message: None,
            hint: hint.into(),
        }
    }
    /// Replaces the error's own line with `message`.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }
}

/// What one error (not its causes) means for the user, if `commands/` knows it.
pub fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    if let Some(e) = err.downcast_ref::<CliError>() {
        return Some(Advice {
            status: e.status,
            message: None,
            hint: e.hint.clone(),
        });
    }
    super::advice::advise(err)
}

/// The exit status an error maps to: that of the first error in its chain
/// that [`advise`] knows, else [`ExitStatus::Failure`].
pub fn status_of(err: &anyhow::Error) -> ExitStatus {
    err.chain()
        .find_map(advise)
        .map_or(ExitStatus::Failure, |a| a.status)
}

/// Renders an error for a terminal: `error:`, `caused by:` lines and a `hint:`
/// (the hint of the first error in the chain that [`advise`] knows).
pub fn render_error(err: &anyhow::Error) -> String {
    let line = |e: &(dyn std::error::Error + 'static)| match advise(e).and_then(|a| a.message) {
        Some(message) => message,
        None => e.to_string(),
    };
    let mut chain = err.chain();
    let mut out = match chain.next() {
        Some(first) => format!("error: {}\n", line(first)),
        None => format!("error: {err}\n"),
    };
    for cause in chain {
        out.push_str(&format!("  caused by: {}\n", line(cause)));
    }
    if let Some(hint) = err.chain().find_map(advise).and_then(|a| a.hint) {
        out.push_str(&format!("\nhint: {hint}\n"));
    }
    out
}

/// A command's outcome as an exit status, printing any error on stderr.
pub fn finish(result: anyhow::Result<ExitStatus>) -> ExitStatus {
    match result {
        Ok(status) => status,
        Err(err) => {
            eprint!("{}", render_error(&err));
            status_of(&err)
        }
    }
}
