//! `imgctl render`: print (or write) the Dockerfile for a spec.
//!
//! Turns the clap args into a spec source and render options, renders, and
//! writes the Dockerfile to stdout or `-o FILE`; notes go to stderr.
use crate::cli::RenderArgs;
use crate::commands::error::CliError;
use crate::error::ExitStatus;
use crate::image::render::{self, RenderOptions};
use crate::image::specs;
use crate::output::printer;

/// Runs `imgctl render`.
pub fn run(args: RenderArgs) -> anyhow::Result<ExitStatus> {
    let src = super::image_args::spec_source(&args.image);
    let opts = RenderOptions::from_args(&args.image)?;
    let loaded = specs::load(&src)?;
    let rendered = render::render(&loaded, &opts)?;
    let p = printer();
    for note in &rendered.notes {
        p.info(format!("note: {note}"));
    }
    match super::lock::build_line(&rendered.lock, &loaded) {
        (true, line) => p.warn(line),
        (false, line) => p.info(line),
    }
    match &args.output {
        Some(path) => {
            crate::sys::fs::write_file_atomic(path, rendered.dockerfile.as_bytes())
                .map_err(|e| CliError::failure(format!("cannot write {}: {e}", path.display())))?;
            p.info(format!(
                "wrote {} ({} profile)",
                path.display(),
                loaded.name
            ));
        }
        None => {
            // The Dockerfile ends with a newline already; print it byte for byte.
            p.data_bytes(rendered.dockerfile.as_bytes());
        }
    }
    Ok(ExitStatus::Success)
}
