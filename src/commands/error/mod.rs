//! Errors as the user sees them: the one place that gives a core error its
//! exit status, flag names and hint.
//!
//! Core modules return their own error enums; [`advise`] walks an error's
//! chain and asks each core area's table (one file per area here: `docker`,
//! `lock`, …) what it means. Each table matches every variant of its area's
//! enums, so a new variant without advice does not compile. A [`CliError`] (built by `commands/` itself) carries its status and
//! hint directly. [`render_error`] prints `error: …`, `  caused by: …` lines, a
//! blank line and `hint: …`.
//!
//! Part: the command layer (`docs/architecture.md`).
use crate::error::ExitStatus;

mod advice;
mod bench;
mod build;
mod docker;
mod gpus;
mod lock;
mod parallel;
mod sbom;
mod sign;
mod spec;
mod train;
mod verify;
mod workstation;

pub use advice::{Advice, CliError};

/// What one error (not its causes) means for the user, if `commands/` knows it.
pub fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    if let Some(e) = err.downcast_ref::<CliError>() {
        return Some(Advice {
            status: e.status,
            message: None,
            hint: e.hint.clone(),
        });
    }
    let tables: &[fn(&(dyn std::error::Error + 'static)) -> Option<Advice>] = &[
        lock::advise,
        docker::advise,
        build::advise,
        gpus::advise,
        spec::advise,
        train::advise,
        bench::advise,
        verify::advise,
        parallel::advise,
        workstation::advise,
        sbom::advise,
        sign::advise,
    ];
    tables.iter().find_map(|table| table(err))
}

/// The exit status an error maps to: that of the first error in its chain
/// that [`advise`] knows, else [`ExitStatus::Failure`].
pub fn status_of(err: &anyhow::Error) -> ExitStatus {
    err.chain()
        .find_map(advise)
        .map_or(ExitStatus::Failure, |a| a.status)
}

/// [`render_error`] and [`status_of`] together: the command layer's
/// [`crate::output::ErrorRenderer`], for the paths that end the process
/// without returning (a signal, the collective watchdog).
pub fn render_fatal(err: &anyhow::Error) -> (String, ExitStatus) {
    (render_error(err), status_of(err))
}

/// Renders an error for a terminal: `error:`, `caused by:` lines and a `hint:`
/// (the hint of the first error in the chain that [`advise`] knows).
pub fn render_error(err: &anyhow::Error) -> String {
    let line = |e: &(dyn std::error::Error + 'static)| {
        let text = match advise(e).and_then(|a| a.message) {
            Some(message) => message,
            None => e.to_string(),
        };
        engine_neutral(&text)
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

/// `text` with bollard's words for an engine's error answer (`Docker
/// responded with status code 500: …`, also for Podman's answers, and also
/// where a line quotes such an error) made the engine's: `the engine
/// answered 500: …`.
fn engine_neutral(text: &str) -> String {
    text.replace("Docker responded with status code ", "the engine answered ")
}

/// The labels of a rendered error coloured as cargo colours them: `error`
/// bold red, `hint` bold cyan (the text itself stays plain).
pub fn colour_labels(text: &str) -> String {
    text.lines()
        .map(|l| {
            if let Some(rest) = l.strip_prefix("error:") {
                format!("\x1b[1;31merror\x1b[0m:{rest}")
            } else if let Some(rest) = l.strip_prefix("hint:") {
                format!("\x1b[1;36mhint\x1b[0m:{rest}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + if text.ends_with('\n') { "\n" } else { "" }
}

/// A command's outcome as an exit status, printing any error on stderr.
pub fn finish(result: anyhow::Result<ExitStatus>) -> ExitStatus {
    let status = match result {
        Ok(status) => status,
        Err(err) => {
            let p = crate::output::printer();
            let text = p.fit_text(&render_error(&err));
            p.stderr_text(if p.color { colour_labels(&text) } else { text });
            status_of(&err)
        }
    };
    // Data that never reached stdout is a failure, whatever the command
    // decided (`--json > /dev/full` used to exit 0 with nothing written).
    match crate::output::stdout_failure() {
        Some(why) if status == ExitStatus::Success => {
            crate::output::printer().stderr_text(format!(
                "error: cannot write the output to stdout: {why}\n\nhint: check where stdout goes (a full disk, a closed pipe)\n"
            ));
            ExitStatus::Failure
        }
        _ => status,
    }
}
