//! `imgctl --version`: clap prints the version; with `-v` beside it, the
//! `engine:` line `build` starts with follows (on stdout, as the version),
//! or one line saying no engine answered. Plain `--version` never reaches
//! the engine, and neither form is an error (exit 0).
//!
//! Part: the command layer (`docs/architecture.md`).
use std::ffi::OsString;

use clap::{Arg, ArgAction, CommandFactory, FromArgMatches};

use crate::cli::{Cli, GlobalArgs};
use crate::output::printer;

/// The global flags given beside `--version`, read again from the command
/// line `args` (the program name first): clap stops reading at `--version`
/// (so `--version -v` has no `-v` for it), and does not say what it read
/// before. `None` when they cannot be read (then the version is all).
pub fn globals_beside_version<I, T>(args: I) -> Option<GlobalArgs>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    // The same command line, with `--version`/`-V` a plain switch that may
    // stand anywhere, no subcommand needed, and nothing else refused.
    let command = Cli::command()
        .disable_version_flag(true)
        .propagate_version(false)
        .subcommand_required(false)
        .arg_required_else_help(false)
        .ignore_errors(true)
        .arg(
            Arg::new("imgctl-version")
                .short('V')
                .long("version")
                .action(ArgAction::SetTrue)
                .global(true),
        );
    let matches = command.try_get_matches_from(args).ok()?;
    GlobalArgs::from_arg_matches(&matches).ok()
}

/// Prints `engine: …` (the line of [`super::engine_line::engine_line`]) for
/// the engine that `build` would reach now (`context`: `--context`), or
/// `engine: none found (WHY)` when none answers. Never an error.
pub fn say_engine(context: Option<&str>) {
    if let Some(name) = context {
        crate::docker::engine::choose_context(name);
    }
    let line = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(async {
            match crate::docker::connect().await {
                Ok(mut engine) => {
                    engine.ask_rootless().await;
                    super::engine_line::engine_line(&engine.info, None)
                }
                Err(e) => {
                    let why = super::error::advise(&e)
                        .and_then(|a| a.message)
                        .unwrap_or_else(|| e.to_string());
                    format!("engine: none found ({why})")
                }
            }
        }),
        Err(e) => format!("engine: none found (cannot start the async runtime: {e})"),
    };
    printer().data(line);
}
