//! `imgctl train-demo --benchmark`: the benchmark's flags, a benchmark in
//! this process (one rank, or a launched rank), one supervised across the
//! `--gpus` workers (`--scaling` over 1, 2, 4 … N ranks), and `--compare`
//! with the PyTorch reference.
//!
//! Turns flags into [`BenchOptions`] and prints the reports; the measuring
//! lives in `crate::train::bench`. This module must not choose the mode (`super`
//! does) nor train.
use tch::Device;

use super::launch::{supervisor_options, usage, worker_sync};
use super::options::resolve_options;
use anyhow::Context as _;

use crate::cli::TrainArgs;
use crate::commands::error::CliError;
use crate::env_vars as ev;
use crate::error::ExitStatus;
use crate::output::printer;
use crate::train::bench::{self, charts, reference, report, BenchOptions, BenchReport};
use crate::train::parallel::supervisor::{self, WorkerSlot};

/// Refuses benchmark flags without `--benchmark`, and training-only flags
/// with it (exit 2), before any work.
pub(super) fn check_flags(args: &TrainArgs) -> anyhow::Result<()> {
    if !args.benchmark {
        for (flag, set) in [
            ("--scaling", args.scaling),
            ("--compare", args.compare),
            ("--op-profile", args.op_profile),
            ("--warmup", args.warmup.is_some()),
        ] {
            if set {
                return Err(usage(
                    format!("{flag} only applies to a benchmark"),
                    format!("add --benchmark: imgctl train-demo --benchmark {flag} …"),
                ));
            }
        }
    }
    if args.benchmark {
        for (flag, set) in [
            ("--resume", args.resume.is_some()),
            ("--init-from", args.init_from.is_some()),
        ] {
            if set {
                return Err(usage(
                    format!("{flag} does not apply to --benchmark (it measures a fresh model and writes nothing)"),
                    format!("drop {flag}"),
                ));
            }
        }
    }
    if args.plot.is_some() && !(args.scaling || args.compare) {
        return Err(usage(
            "--plot draws the chart of --scaling or --compare",
            "add --benchmark --scaling (or --compare), or drop --plot",
        ));
    }
    if let Some(path) = &args.plot {
        crate::commands::output_files::check_output_file("--plot", path)?;
    }
    if args.scaling && args.compare {
        return Err(usage(
            "--scaling and --compare are separate benchmarks",
            "run one, then the other",
        ));
    }
    if args.op_profile {
        for (flag, set) in [
            ("--scaling", args.scaling),
            ("--compare", args.compare),
            ("--gpus", args.gpus.is_some()),
            ("--plot", args.plot.is_some()),
        ] {
            if set {
                return Err(usage(
                    format!(
                        "--op-profile compares one process's step; {flag} does not apply to it"
                    ),
                    format!("drop {flag}, or run --op-profile on its own"),
                ));
            }
        }
    }
    if args.compare || args.op_profile {
        // A malformed deadline, or an interpreter without torch and
        // diffusers, is a usage error before any work.
        reference::reference_timeout()?;
        reference::check_imports()?;
    }
    Ok(())
}

/// The benchmark in this process (a single one, or a launched rank).
pub(super) fn local(args: &TrainArgs) -> anyhow::Result<ExitStatus> {
    if args.scaling {
        return Err(usage(
            "--scaling needs several ranks to scale over",
            "add --gpus all (or --gpus N)",
        ));
    }
    let mut run = resolve_options(args)?;
    let sync = worker_sync(args, &mut run)?;
    let primary = sync.rank() == 0;
    let (warmup, steps) = bench::default_steps(run.device);
    let steps = args.steps.unwrap_or(steps).max(1);
    let opts = BenchOptions {
        warmup: args.warmup.unwrap_or(warmup),
        steps,
        profile_steps: (steps / 5).clamp(3, 20),
        run,
    };
    if primary {
        printer().info(format!(
            "benchmark: {} warm-up + {} timed + {} profiled steps",
            opts.warmup, opts.steps, opts.profile_steps
        ));
    }
    let r = bench::run_rank(&opts, sync, &super::events::printed())?;
    if !primary {
        return Ok(ExitStatus::Success);
    }
    finish_local(args, &opts, r)
}

/// The benchmark across the supervised `slots` (`--scaling`: at every size).
pub(super) fn supervised(args: &TrainArgs, slots: Vec<WorkerSlot>) -> anyhow::Result<ExitStatus> {
    let p = printer();
    if args.scaling {
        let mut runs = Vec::new();
        for k in bench::scaling_sizes(slots.len()) {
            p.info(format!(
                "scaling: benchmarking {k} rank{}",
                if k == 1 { "" } else { "s" }
            ));
            let mut opts = supervisor_options(slots[..k].to_vec(), true)?;
            // The same threads per rank at every size (those of the
            // largest run), or CPU ranks would scale by thread count.
            if std::env::var_os(ev::OMP_NUM_THREADS).is_none() {
                let t = supervisor::omp_threads(&slots[0], slots.len());
                opts.env.push((ev::OMP_NUM_THREADS.into(), t.to_string()));
            }
            let out = supervisor::supervise(&opts, &super::events::printed())?;
            runs.push(parse_report(&out.stdout)?);
        }
        let s = bench::scaling_report(runs);
        if let Some(last) = s.runs.last() {
            p.info(report::bench_table(last));
        }
        p.info(report::scaling_table(&s));
        if let Some(path) = chart_path(args, "scaling.png")? {
            charts::scaling_png(&path, &s)
                .with_context(|| format!("writing the chart {}", path.display()))?;
            p.info(format!("chart: {}", path.display()));
        }
        if args.json {
            p.json(&s)?;
        }
        return Ok(ExitStatus::Success);
    }
    let opts = supervisor_options(slots, true)?;
    let out = supervisor::supervise(&opts, &super::events::printed())?;
    let r = parse_report(&out.stdout)?;
    finish_report(args, r)
}

/// Where the chart goes: `--plot`, else `name` in `--out` (created), else nowhere.
fn chart_path(args: &TrainArgs, name: &str) -> anyhow::Result<Option<std::path::PathBuf>> {
    if let Some(path) = &args.plot {
        return Ok(Some(path.clone()));
    }
    match &args.out {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            Ok(Some(dir.join(name)))
        }
        None => Ok(None),
    }
}

fn parse_report(stdout: &str) -> anyhow::Result<BenchReport> {
    serde_json::from_str(stdout.trim()).map_err(|e| {
        CliError::failure(format!("rank 0 printed no benchmark report ({e})"))
            .with_hint("run with -v to see the workers' output")
            .into()
    })
}

fn finish_local(
    args: &TrainArgs,
    opts: &BenchOptions,
    r: BenchReport,
) -> anyhow::Result<ExitStatus> {
    if !args.compare {
        return finish_report(args, r);
    }
    let p = printer();
    p.info(report::bench_table(&r));
    let dir = tempfile::tempdir()?;
    reference::prepare(dir.path(), &opts.run, r.batch_per_rank)?;
    let base = reference::ReferenceArgs::for_run(opts, r.batch_per_rank)?;
    let mut runs = vec![run_reference(
        &format!("eager, with {}", reference::python()),
        dir.path(),
        &base,
    )?];
    let compile_note = if matches!(opts.run.device, Device::Cuda(_)) {
        runs.push(run_reference(
            "torch.compile",
            dir.path(),
            &reference::ReferenceArgs {
                compile: true,
                ..base.clone()
            },
        )?);
        None
    } else {
        Some("not run on the CPU (inductor's CPU code generation takes minutes on small machines; the comparison that matters is on a GPU)".to_string())
    };
    // The same framework comparison with the training recipe held equal:
    // diffusers' script runs autocast over fp32 weights and torch's
    // default AdamW; imgctl runs bf16 weights over fp32 master weights
    // and a fused AdamW.
    runs.push(run_reference(
        "eager, imgctl's recipe",
        dir.path(),
        &reference::ReferenceArgs {
            matched: true,
            ..base
        },
    )?);
    if let Some(eager) = runs.first() {
        if let (true, Some(n)) = (eager.ok, eager.params) {
            if n != r.params {
                p.warn(format!(
                    "the reference model has {n} parameters, imgctl's {}: the architectures differ",
                    r.params
                ));
            }
        }
    }
    let eager_failed = runs.first().filter(|e| !e.ok).map(|e| {
        e.error
            .clone()
            .unwrap_or_else(|| "it gave no reason".into())
    });
    let c = reference::CompareReport::new(r, runs, compile_note);
    p.info(report::compare_table(&c));
    if let Some(path) = chart_path(args, "compare.png")? {
        charts::compare_png(&path, &c)
            .with_context(|| format!("writing the chart {}", path.display()))?;
        p.info(format!("chart: {}", path.display()));
    }
    if args.json {
        p.json(&c)?;
    }
    // A comparison without its reference is no comparison: imgctl's own
    // figures are printed above, and the run fails.
    if let Some(why) = eager_failed {
        return Err(CliError::failure(format!(
            "the PyTorch reference did not run, so there is no comparison: {why}"
        ))
        .with_hint(format!(
            "imgctl's own figures are above; the reference ran with {} (set IMGCTL_PYTHON \
             to a Python with torch and diffusers, e.g. the venv of scripts/setup.sh), \
             or raise {}",
            reference::python(),
            ev::IMGCTL_REFERENCE_TIMEOUT
        ))
        .into());
    }
    Ok(ExitStatus::Success)
}

/// Runs one reference program, showing what runs and for how long: a
/// spinner with the elapsed time on a terminal, a start line otherwise; an
/// end line with its wall time (also in the report's `wall_s`) after.
pub(super) fn run_reference(
    label: &str,
    dir: &std::path::Path,
    a: &reference::ReferenceArgs,
) -> anyhow::Result<reference::ReferenceRun> {
    let p = printer();
    let what = format!("running the PyTorch reference ({label})");
    let spinner = p.spinner(what.clone());
    if !p.interactive {
        p.info(&what);
    }
    let started = std::time::Instant::now();
    let r = reference::run(dir, a);
    spinner.finish_and_clear();
    let secs = match &r {
        Ok(run) => run.wall_s,
        Err(_) => None,
    }
    .unwrap_or_else(|| started.elapsed().as_secs_f64());
    let outcome = match &r {
        Ok(run) if run.ok => "finished",
        _ => "did not run",
    };
    p.info(format!(
        "PyTorch reference ({label}): {outcome} after {secs:.1} s"
    ));
    r
}

fn finish_report(args: &TrainArgs, r: BenchReport) -> anyhow::Result<ExitStatus> {
    let p = printer();
    if args.compare {
        // Supervised run: compare on one device of the same kind.
        let mut run = resolve_options(args)?;
        if let Device::Cuda(_) = run.device {
            run.device = Device::Cuda(0);
        }
        let (warmup, steps) = bench::default_steps(run.device);
        let opts = BenchOptions {
            warmup: args.warmup.unwrap_or(warmup),
            steps: args.steps.unwrap_or(steps).max(1),
            profile_steps: 0,
            run,
        };
        return finish_local(args, &opts, r);
    }
    // A supervised rank 0 hands its JSON to the supervisor, which prints the table.
    if std::env::var_os(ev::IMGCTL_SUPERVISED).is_none() {
        p.info(report::bench_table(&r));
    }
    if args.json {
        p.json(&r)?;
    }
    Ok(ExitStatus::Success)
}
