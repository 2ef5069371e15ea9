//! What goes where: data to stdout, everything human to stderr.
//!
//! One process-wide [`Printer`] set up from the global flags. Progress bars
//! are drawn only on a terminal; elsewhere, long work prints plain lines.
//! `NO_COLOR` and `--color never` turn colour off.
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::GlobalArgs;

/// Output settings shared by every command.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    /// 0 normal, 1+ more detail (`-v`).
    pub verbose: u8,
    /// Suppress informational lines (`-q`).
    pub quiet: bool,
    /// Whether stderr is a terminal (progress bars, spinners).
    pub interactive: bool,
    /// Whether colour may be used.
    pub color: bool,
}

static PRINTER: OnceLock<Printer> = OnceLock::new();

/// Sets up the process-wide printer from the global flags (first call wins).
pub fn init(global: &GlobalArgs) {
    let interactive = std::io::stderr().is_terminal();
    let color = match global.color.as_str() {
        "always" => true,
        "never" => false,
        _ => interactive && std::env::var_os(crate::env_vars::NO_COLOR).is_none(),
    };
    let _ = PRINTER.set(Printer {
        verbose: global.verbose,
        quiet: global.quiet,
        interactive,
        color,
    });
}

/// The process-wide printer (plain, non-interactive defaults before [`init`]).
pub fn printer() -> Printer {
    *PRINTER.get_or_init(|| Printer {
        verbose: 0,
        quiet: false,
        interactive: false,
        color: false,
    })
}

impl Printer {
    /// An informational line on stderr (hidden by `-q`).
    pub fn info(&self, msg: impl AsRef<str>) {
        if !self.quiet {
            eprintln!("{}", msg.as_ref());
        }
    }
    /// A warning on stderr (always shown).
    pub fn warn(&self, msg: impl AsRef<str>) {
        if self.color {
            eprintln!("\x1b[33mwarning\x1b[0m: {}", msg.as_ref());
        } else {
            eprintln!("warning: {}", msg.as_ref());
        }
    }
    /// A detail line on stderr, shown with `-v`.
    pub fn verbose(&self, msg: impl AsRef<str>) {
        if self.verbose > 0 {
            eprintln!("{}", msg.as_ref());
        }
    }
    /// Machine-readable data on stdout, alone.
    pub fn data(&self, text: impl AsRef<str>) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", text.as_ref());
        let _ = out.flush();
    }
    /// Serializes `value` as pretty JSON on stdout.
    pub fn json<T: serde::Serialize>(&self, value: &T) -> anyhow::Result<()> {
        self.data(serde_json::to_string_pretty(value)?);
        Ok(())
    }
    /// A progress bar of `len` steps on a terminal; hidden otherwise (callers
    /// print plain lines through [`Printer::info`] when `!interactive`).
    pub fn progress(&self, len: u64, template: &str) -> ProgressBar {
        if !self.interactive || self.quiet {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        bar.set_style(style);
        bar
    }
    /// A spinner with a message on a terminal; hidden otherwise.
    pub fn spinner(&self, msg: impl Into<String>) -> ProgressBar {
        if !self.interactive || self.quiet {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message(msg.into());
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    }
}

/// Checks, before any work, that `path` (the value of `flag`, e.g. `--junit`)
/// can take a report file: it is not a directory, its parent folder exists,
/// and the file (when it exists) or the folder is writable. A usage error
/// (exit 2) naming the cause otherwise, so that a long build or verify run
/// does not end with its result lost.
pub fn check_output_file(flag: &str, path: &std::path::Path) -> Result<(), crate::CliError> {
    use crate::error::printable;
    let shown = printable(&path.display().to_string()).into_owned();
    let hint = format!("{flag} takes the path of a file to write, in an existing writable folder");
    let usage = |m: String| crate::CliError::usage(m).with_hint(hint.clone());
    if path.as_os_str().is_empty() {
        return Err(usage(format!("{flag} is empty")));
    }
    if path.is_dir() {
        return Err(usage(format!(
            "{flag} {shown} is a directory; it takes a file path (e.g. {shown}/report)"
        )));
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        let what = if parent.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        return Err(usage(format!(
            "{flag} {shown}: its folder {} {what}",
            printable(&parent.display().to_string())
        )));
    }
    let target = if path.exists() { path } else { parent };
    if !writable(target) {
        return Err(usage(format!(
            "{flag} {shown}: {} is not writable",
            printable(&target.display().to_string())
        )));
    }
    Ok(())
}

/// Whether this process may write `path` (access(2) with `W_OK`).
fn writable(path: &std::path::Path) -> bool {
    crate::sys::fs::writable(path)
}
