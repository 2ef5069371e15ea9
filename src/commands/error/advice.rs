//! The two shapes of what the user is told: [`CliError`], built by
//! `commands/` itself, and [`Advice`], what a table says about a core error.
//! A leaf: the tables and the renderer import it, it imports neither.
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
    /// A missing tool (exit 3) with `hint` (how to install it).
    pub fn missing_tool(hint: impl Into<Option<String>>) -> Self {
        Self {
            status: ExitStatus::MissingTool,
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
