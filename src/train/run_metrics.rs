//! Rank 0's metrics files at the start of a run ([`open_metrics`]), with the
//! output directory's clean-up before them; split from [`super::run`].
use anyhow::Context;

use super::checkpoint;
use super::events::{Events, RunEvent};
use super::metrics::MetricsWriter;
use super::session::RunOptions;

/// Rank 0's output directory once every rank has its weights: stale
/// temporaries removed, damaged checkpoints set aside (out of the way of
/// pruning and later resumes), and the metrics files opened, continued from
/// `start_step` on a resume (a damaged metrics.jsonl moved aside, warned).
pub fn open_metrics(
    opts: &RunOptions,
    start_step: u64,
    events: Events,
) -> anyhow::Result<MetricsWriter> {
    checkpoint::remove_stale_temporaries(&opts.out);
    // Every rank has loaded its checkpoint (the broadcast of
    // session::start): a damaged one now goes out of the way of pruning and
    // later resumes.
    for aside in checkpoint::set_aside_damaged(&opts.out).with_context(|| {
        format!(
            "setting aside damaged checkpoints in {}",
            opts.out.display()
        )
    })? {
        events(&RunEvent::Note(format!(
            "the damaged checkpoint is kept as {}",
            aside.display()
        )));
    }
    let writer = MetricsWriter::open(&opts.out, opts.resume.as_ref().map(|_| start_step))
        .with_context(|| format!("opening metrics files in {}", opts.out.display()))?;
    if let Some((aside, why)) = &writer.set_aside {
        events(&RunEvent::Warning(format!(
            "metrics.jsonl was damaged ({why}): moved to {}; a new one keeps its readable steps up to {start_step}",
            aside.display()
        )));
    }
    Ok(writer)
}
