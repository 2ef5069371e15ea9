//! `verify --fleet --history DIR [--exclude-file FILE]`, `--metrics FILE`
//! and `verify --against-history DIR`: the fleet's memory in words. The records, the
//! offenders and the spread are [`crate::verify::fleet::history`]'s.
use std::path::Path;

use crate::commands::error::CliError;
use crate::verify::report::Report;

/// `flag DIR` must be a folder, or not exist yet (it is made).
pub fn check_dir(flag: &str, dir: &Path) -> Result<(), CliError> {
    let shown = crate::error::printable(&dir.display().to_string()).into_owned();
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(
            CliError::usage(format!("{flag} {shown} is not a folder")).with_hint(format!(
                "{flag} takes a folder (shared by the fleet's runs); its file is verdicts.jsonl"
            )),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CliError::usage(format!("{flag} {shown}: {e}"))
            .with_hint(format!("{flag} takes a folder you can read and write"))),
    }
}

#[cfg(feature = "torch")]
mod with_torch {
    use super::*;
    use crate::output::printer;
    use crate::verify::fleet::history;
    use crate::verify::fleet::FleetReport;

    /// Appends this run to DIR, names the offenders in the report (a
    /// `fleet.history` verdict each, and `offenders` in the JSON), and
    /// writes the exclusion file.
    pub fn record(
        dir: &Path,
        exclude: Option<&Path>,
        report: &mut FleetReport,
    ) -> anyhow::Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let run = format!(
            "{}-{}-{}",
            now.as_secs(),
            std::process::id(),
            crate::sys::net::hostname()
        );
        let records = history::records_of(report, &run, now.as_secs_f64());
        history::append(dir, &records).map_err(|e| {
            CliError::failure(format!(
                "--history {}: could not record this run: {e}",
                dir.display()
            ))
            .with_hint("the folder must be writable by rank 0 (on a shared filesystem, by every node that may be rank 0)")
        })?;
        let (all, skipped) = history::read(dir).map_err(|e| {
            CliError::failure(format!(
                "--history {}: could not read it back: {e}",
                dir.display()
            ))
            .with_hint("verdicts.jsonl must be a regular file under 256 MiB")
        })?;
        let offenders = history::offenders(&all);
        for r in history::verdicts(&offenders, all.len(), skipped) {
            report.push(r);
        }
        if let Some(path) = exclude {
            let list = history::exclude_list(&offenders);
            crate::sys::fs::write_atomic(path, |tmp| std::fs::write(tmp, format!("{list}\n")))
                .map_err(|e| {
                    CliError::failure(format!("--exclude-file {}: {e}", path.display()))
                        .with_hint("pass a file path in a writable folder")
                })?;
            printer().info(format!(
                "wrote {} repeat offender(s) to {} (sbatch --exclude=\"$(cat {})\")",
                offenders.iter().filter(|o| o.repeat()).count(),
                path.display(),
                path.display()
            ));
        }
        report.offenders = offenders;
        Ok(())
    }

    /// `--metrics FILE`: the report in Prometheus' text format, written
    /// whole (a textfile collector never reads half a file).
    pub fn metrics(path: &Path, report: &FleetReport) -> anyhow::Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let text = crate::verify::fleet::metrics::prometheus(report, now.as_secs_f64());
        crate::sys::fs::write_atomic(path, |tmp| std::fs::write(tmp, &text)).map_err(|e| {
            CliError::failure(format!("--metrics {}: {e}", path.display()))
                .with_hint("pass a file path in a writable folder (the textfile collector's, e.g. /var/lib/node_exporter/textfile_collector/imgctl.prom)")
                .into()
        })
    }

    /// Return to fleet: this node's figures against the history's spread,
    /// one more verdict in `report`.
    pub fn against(dir: &Path, report: &mut Report) -> anyhow::Result<()> {
        check_dir("--against-history", dir)?;
        let (records, _) = history::read(dir).map_err(|e| {
            CliError::usage(format!("--against-history {}: {e}", dir.display()))
                .with_hint("pass the folder `verify --fleet --history DIR` records in")
        })?;
        if records.is_empty() {
            return Err(CliError::usage(format!(
                "--against-history {}: no run is recorded there",
                dir.display()
            ))
            .with_hint("record the fleet first: `imgctl verify --fleet --history DIR`")
            .into());
        }
        report.results.push(history::against(report, &records));
        report.recount();
        Ok(())
    }
}

#[cfg(feature = "torch")]
pub use with_torch::{against, metrics, record};

/// Without the torch feature there is no fleet, so no history to read.
#[cfg(not(feature = "torch"))]
pub fn against(_: &Path, _: &mut Report) -> anyhow::Result<()> {
    Err(
        CliError::usage("--against-history needs an imgctl built with the torch feature")
            .with_hint("build imgctl with its default features")
            .into(),
    )
}
