//! The `imgctl` binary: parse, set up the printer, run, and end the process
//! with the command's exit code.
#![deny(unsafe_code)]
use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = match imgctl::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => return version(&e),
        Err(e) => e.exit(),
    };
    imgctl::output::init(cli.global.verbose, cli.global.quiet, cli.global.color);
    // The words of the paths that cannot return an error (a signal, the
    // collective watchdog) come from the command layer's tables.
    imgctl::output::set_error_renderer(imgctl::commands::error::render_fatal);
    let status = imgctl::commands::error::finish(imgctl::commands::dispatch(cli));
    if imgctl::verify::check::abandoned_threads() > 0 {
        // A check is still stuck inside a driver call: the libraries' exit
        // handlers could wait on it forever. Flush, then leave without them.
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // _exit ends the process at once; every output is flushed above.
        imgctl::sys::process::exit_now(status);
    }
    std::process::ExitCode::from(status.code())
}

/// `--version`: clap's line; with `-v` beside it, the engine's line too
/// (never an error: exit 0 whether an engine answers or not).
fn version(shown: &clap::Error) -> std::process::ExitCode {
    let _ = shown.print();
    if let Some(globals) = imgctl::commands::version::globals_beside_version(std::env::args_os()) {
        if globals.verbose > 0 {
            imgctl::output::init(globals.verbose, globals.quiet, globals.color);
            imgctl::commands::version::say_engine(globals.context.as_deref());
        }
    }
    std::process::ExitCode::SUCCESS
}
