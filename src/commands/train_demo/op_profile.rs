//! `imgctl train-demo --benchmark --op-profile`: imgctl's training step
//! against the PyTorch reference's with imgctl's recipe, operator by operator
//! (calls and bytes allocated per step), both under libtorch's profiler.
//!
//! Resolves the flags, runs imgctl's profiled steps and then the reference's
//! (`bench_reference.py --recipe imgctl --op-profile`), and prints the
//! comparison; the counting lives in `crate::train::bench::ops`. One process only:
//! the comparison is of one step, not of a data-parallel job.
use anyhow::Context as _;
use comfy_table::Cell;

use super::bench::run_reference;
use super::launch::{usage, worker_sync};
use super::options::resolve_options;
use crate::cli::TrainArgs;
use crate::commands::error::CliError;
use crate::error::ExitStatus;
use crate::output::printer;
use crate::train::bench::ops::{self, OpProfileReport, Tally};
use crate::train::bench::report::{num, right, table};
use crate::train::bench::{self, reference, BenchOptions};

/// Profiled steps on each side unless `--steps` says otherwise (every step
/// issues the same operators; a few show that they do).
pub const DEFAULT_STEPS: u64 = 3;

/// Operators listed in the text table beyond the extras (the rest are in
/// `--json`, or with `-v`).
const SHOWN: usize = 12;

/// Runs the op profile in this process.
pub(super) fn run(args: &TrainArgs) -> anyhow::Result<ExitStatus> {
    let mut run = resolve_options(args)?;
    let sync = worker_sync(args, &mut run)?;
    if sync.world_size() > 1 {
        return Err(usage(
            "--op-profile compares one process's step, and this is one rank of a job",
            "run it without a launcher: imgctl train-demo --benchmark --op-profile",
        ));
    }
    let (warmup, _) = bench::default_steps(run.device);
    let opts = BenchOptions {
        warmup: args.warmup.unwrap_or(warmup),
        steps: args.steps.unwrap_or(DEFAULT_STEPS).max(1),
        profile_steps: 0,
        run,
    };
    let p = printer();
    let scratch = tempfile::tempdir()?;
    let dir = match &args.out {
        Some(out) => {
            std::fs::create_dir_all(out)
                .with_context(|| format!("cannot create {}", out.display()))?;
            out.clone()
        }
        None => scratch.path().to_path_buf(),
    };
    let (own_trace, ref_trace) = (
        dir.join("imgctl.trace.json"),
        dir.join("reference.trace.json"),
    );
    p.info(format!(
        "op profile: {} warm-up + {} profiled steps of imgctl, then of the PyTorch reference (imgctl's recipe)",
        opts.warmup, opts.steps
    ));
    let own = ops::profile_rank(&opts, sync, &super::events::printed(), &own_trace)?;
    let (reference, recipe) = reference_tally(&opts, scratch.path(), &ref_trace)?;
    let r = OpProfileReport::new(setup_line(&opts), recipe, own, reference);
    p.info(summary_table(&r));
    p.info(ops_table(&r, p.verbose > 0));
    if args.out.is_some() {
        p.info(format!(
            "traces: {} and {} (chrome://tracing or ui.perfetto.dev)",
            own_trace.display(),
            ref_trace.display()
        ));
    }
    if !r.unexplained.is_empty() {
        p.warn(format!(
            "imgctl issues {} more often than the reference, and crate::train::bench::ops::EXPLAINED does not say why",
            r.unexplained.join(", ")
        ));
    }
    if args.json {
        p.json(&r)?;
    }
    Ok(ExitStatus::Success)
}

/// Runs the reference's profiled steps (its data and config written to
/// `scratch`, its trace to `trace`) and reads the trace: the tally, and the
/// recipe it reported.
fn reference_tally(
    opts: &BenchOptions,
    scratch: &std::path::Path,
    trace: &std::path::Path,
) -> anyhow::Result<(Tally, String)> {
    let batch = opts.run.config.training.batch_size;
    reference::prepare(scratch, &opts.run, batch)?;
    let a = reference::ReferenceArgs {
        matched: true,
        op_profile: Some(trace.to_path_buf()),
        ..reference::ReferenceArgs::for_run(opts, batch)?
    };
    let run = run_reference("eager, imgctl's recipe, profiled", scratch, &a)?;
    if !run.ok {
        return Err(CliError::failure(format!(
            "the PyTorch reference did not run, so there is nothing to compare: {}",
            run.error.as_deref().unwrap_or("it gave no reason")
        ))
        .with_hint(format!(
            "it ran with {} (set IMGCTL_PYTHON to a Python with torch and diffusers)",
            reference::python()
        ))
        .into());
    }
    let recipe = format!(
        "{}, {}",
        run.recipe.as_deref().unwrap_or("?"),
        run.optimizer.as_deref().unwrap_or("?")
    );
    Ok((ops::tally_trace(trace, opts.steps)?, recipe))
}

/// What both sides ran, in one line.
fn setup_line(opts: &BenchOptions) -> String {
    let cfg = &opts.run.config;
    let tr = &cfg.training;
    format!(
        "preset {}, {}, batch {}, {}{}{}",
        cfg.preset.name(),
        opts.run.precision.name(),
        tr.batch_size,
        crate::train::session::device_name(opts.run.device),
        if tr.channels_last {
            ", channels-last"
        } else {
            ""
        },
        if tr.gradient_checkpointing {
            ", gradient checkpointing"
        } else {
            ""
        },
    )
}

/// A row of [`summary_table`]: its label, the figure, and its format.
type SummaryRow = (&'static str, fn(&Tally) -> f64, fn(f64) -> String);

/// The totals per step of both sides and their ratio.
pub fn summary_table(r: &OpProfileReport) -> String {
    let mut t = table(&["per step", "imgctl", "reference", "imgctl ÷ ref"]);
    let rows: [SummaryRow; 4] = [
        ("operator calls", |t| t.ops_per_step, num),
        ("top-level calls", |t| t.top_level_ops_per_step, num),
        ("allocations", |t| t.allocations_per_step, num),
        (
            "bytes allocated",
            |t| t.bytes_allocated_per_step,
            |b| bench::report::size(b as u64),
        ),
    ];
    for (label, get, fmt) in rows {
        let (a, b) = (get(&r.imgctl), get(&r.reference));
        let ratio = if b > 0.0 {
            format!("{:.2}×", a / b)
        } else {
            "-".into()
        };
        t.add_row(vec![
            Cell::new(label),
            right(fmt(a)),
            right(fmt(b)),
            right(ratio),
        ]);
    }
    format!(
        "{}\nreference: {}\n{}",
        r.setup,
        r.reference_recipe,
        bench::report::render(t, bench::report::fit())
    )
}

/// Calls a step: whole numbers without decimals (`41`), else [`num`].
fn calls(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        num(x)
    }
}

/// Mebibytes with one decimal.
fn mib(bytes: f64) -> String {
    format!("{:.1}", bytes / f64::from(1u32 << 20))
}

/// The operators: every extra, then the largest other differences; below
/// the table, why imgctl issues each extra.
pub fn ops_table(r: &OpProfileReport, all: bool) -> String {
    let mut t = table(&[
        "operator",
        "imgctl/step",
        "ref/step",
        "MiB imgctl",
        "MiB ref",
        "extra",
    ]);
    let mut shown = 0;
    let mut rest = 0;
    let mut reasons = Vec::new();
    for o in &r.ops {
        let differs = o.imgctl_per_step != o.reference_per_step;
        if !all && !o.is_extra() && (shown >= SHOWN || !differs) {
            rest += 1;
            continue;
        }
        if !o.is_extra() {
            shown += 1;
        }
        let extra = match (&o.explanation, o.is_extra()) {
            (Some(why), _) => {
                reasons.push(format!("  {}: {why}", o.name));
                "why ↓"
            }
            (None, true) => "UNEXPLAINED",
            (None, false) => "",
        };
        t.add_row(vec![
            Cell::new(&o.name),
            right(calls(o.imgctl_per_step)),
            right(calls(o.reference_per_step)),
            right(mib(o.imgctl_bytes_per_step)),
            right(mib(o.reference_bytes_per_step)),
            Cell::new(extra),
        ]);
    }
    let extras = r.ops.iter().filter(|o| o.is_extra()).count();
    let mut text = format!(
        "{}\n{extras} operator kinds issued more often by imgctl ({} unexplained); {rest} more rows with --json or -v\n",
        bench::report::render(t, bench::report::fit()),
        r.unexplained.len(),
    );
    if !reasons.is_empty() {
        text.push_str(
            "why imgctl issues them (bytes: allocated inside the operator and what it calls):\n",
        );
        text.push_str(&reasons.join("\n"));
    }
    text
}
