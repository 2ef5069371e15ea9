//! `imgctl train-demo` beyond one process, and `--benchmark` (needs the
//! `torch` feature; without it train.rs reports the missing feature first).
//!
//! `intercept` runs first in `train-demo`: with `--gpus` (or the hidden
//! `IMGCTL_CPU_RANKS=N`) this process becomes the supervisor of one worker per
//! GPU (CPU rank); with `--benchmark` it measures instead of training (as a
//! worker, or supervising workers, with `--scaling` and `--compare`).
//! Otherwise it returns `None` and train.rs trains, with `worker_sync` as
//! the gradient sync: a world of one, or the rank that torchrun, SLURM,
//! Kubernetes or the supervisor launched. Turns flags into typed options and
//! prints; the work lives in `train::parallel` and `bench`.
#[cfg(feature = "torch")]
pub use imp::{intercept, worker_sync};

#[cfg(feature = "torch")]
mod imp {
    use std::ffi::OsString;

    use tch::Device;

    use crate::bench::{self, reference, report, BenchOptions, BenchReport};
    use crate::cli::TrainArgs;
    use crate::env_vars as ev;
    use crate::output::printer;
    use crate::train::parallel::launch::{parse_gpus, resolve_gpus, LaunchInfo, LaunchSource};
    use crate::train::parallel::supervisor::{self, SupervisorOptions, WorkerSlot};
    use crate::train::parallel::{rendezvous_timeout, worker_device, DataParallel};
    use crate::train::trainer::{GradSync, RunOptions};
    use crate::{CliError, ExitStatus};

    /// The gradient sync of this process: a world of one when no launcher set
    /// rank variables, else this rank of the job (NCCL on a GPU, TCP on the
    /// CPU). Moves `opts.device` to `cuda:LOCAL_RANK` when several GPUs are
    /// visible and `--device` was not given or was a bare `cuda` (see
    /// [`launcher_device`]).
    pub fn worker_sync(
        args: &TrainArgs,
        opts: &mut RunOptions,
    ) -> anyhow::Result<Box<dyn GradSync>> {
        let launch = LaunchInfo::from_process_env()?;
        if launch.source == LaunchSource::Single {
            return Ok(Box::new(DataParallel::single(opts.device)));
        }
        let timeout = rendezvous_timeout(args.rendezvous_timeout)?;
        let visible = tch::Cuda::device_count().max(0) as usize;
        if let Some(d) = launcher_device(args.device.as_deref(), &launch, visible)? {
            opts.device = d;
        }
        let dp = DataParallel::init(launch, opts.device, timeout)?;
        if dp.is_primary() {
            printer().info(format!(
                "data parallel: {} rank{}, {} backend, rendezvous at {}",
                dp.launch().world_size,
                if dp.launch().world_size == 1 { "" } else { "s" },
                dp.backend(),
                dp.rendezvous_address()
            ));
        }
        Ok(Box::new(dp))
    }

    /// The device of a launched rank when `--device` leaves the choice of
    /// GPU to the launcher: no `--device` at all ([`worker_device`]: the CPU
    /// without GPUs), or a bare `cuda`/`gpu` in a multi-rank run, which means
    /// this rank's GPU (`cuda:LOCAL_RANK` among several visible ones, as
    /// torchrun scripts write it), not GPU 0 for every rank. `None`: keep
    /// what `--device` said (`cpu`, `cuda:N`).
    pub(crate) fn launcher_device(
        arg: Option<&str>,
        launch: &LaunchInfo,
        visible: usize,
    ) -> anyhow::Result<Option<Device>> {
        match arg.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
            None => worker_device(launch, visible).map(Some),
            Some("cuda" | "gpu") if launch.world_size > 1 && visible > 0 => {
                worker_device(launch, visible).map(Some)
            }
            _ => Ok(None),
        }
    }

    fn usage(msg: impl Into<String>, hint: impl Into<String>) -> anyhow::Error {
        CliError::usage(msg).with_hint(hint).into()
    }

    /// The worker slots this process must supervise, if any.
    fn slots(args: &TrainArgs, launch: &LaunchInfo) -> anyhow::Result<Option<Vec<WorkerSlot>>> {
        // A launcher that started one process (salloc, `srun -n1`) leaves room for --gpus.
        let launched = launch.world_size > 1;
        if let Some(spec) = &args.gpus {
            if launched {
                return Err(usage(
                    format!(
                        "--gpus starts its own workers, but this process already is rank {} of {} (set by the launcher's environment)",
                        launch.rank, launch.world_size
                    ),
                    "drop --gpus when torchrun, srun or a PyTorchJob starts the processes",
                ));
            }
            if args.device.is_some() {
                return Err(usage(
                    "--device and --gpus both choose devices",
                    "use --gpus to train on several GPUs, --device for one",
                ));
            }
            let req = parse_gpus(spec)?;
            let visible = tch::Cuda::device_count().max(0) as usize;
            let devices = resolve_gpus(&req, visible)?;
            let parent = std::env::var(ev::CUDA_VISIBLE_DEVICES).ok();
            return Ok(Some(supervisor::gpu_slots(&devices, parent.as_deref())));
        }
        if launched {
            return Ok(None);
        }
        match std::env::var(ev::IMGCTL_CPU_RANKS) {
            Ok(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
                Ok(n) if n >= 1 => Ok(Some(vec![WorkerSlot::Cpu; n])),
                _ => Err(usage(
                    format!(
                        "{}={v:?} is not a positive number of CPU ranks",
                        ev::IMGCTL_CPU_RANKS
                    ),
                    format!("unset {} or give a count such as 2", ev::IMGCTL_CPU_RANKS),
                )),
            },
            _ => Ok(None),
        }
    }

    fn check_flags(args: &TrainArgs) -> anyhow::Result<()> {
        if !args.benchmark {
            for (flag, set) in [
                ("--scaling", args.scaling),
                ("--compare", args.compare),
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
        if args.scaling && args.compare {
            return Err(usage(
                "--scaling and --compare are separate benchmarks",
                "run one, then the other",
            ));
        }
        if args.compare {
            // A malformed deadline is a usage error before any work.
            reference::reference_timeout()?;
        }
        Ok(())
    }

    /// Handles `--gpus`, `IMGCTL_CPU_RANKS` and `--benchmark`; `None` means
    /// "train in this process" (train.rs continues).
    pub fn intercept(args: &TrainArgs) -> anyhow::Result<Option<ExitStatus>> {
        check_flags(args)?;
        let launch = LaunchInfo::from_process_env()?;
        let slots = slots(args, &launch)?;
        match (slots, args.benchmark) {
            (Some(slots), false) => {
                let opts = supervisor_options(slots, &["--gpus"], &[], false)?;
                supervisor::supervise_status(&opts).map(Some)
            }
            (Some(slots), true) => supervised_benchmark(args, slots).map(Some),
            (None, true) => {
                if args.scaling {
                    return Err(usage(
                        "--scaling needs several ranks to scale over",
                        "add --gpus all (or --gpus N)",
                    ));
                }
                local_benchmark(args).map(Some)
            }
            (None, false) => Ok(None),
        }
    }

    /// This executable with this command line minus `strip` (flags that take
    /// a value) and `strip_bool`, plus `extra`.
    fn supervisor_options(
        slots: Vec<WorkerSlot>,
        strip: &[&str],
        strip_bool: &[&str],
        capture: bool,
    ) -> anyhow::Result<SupervisorOptions> {
        let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
        for f in strip {
            args = supervisor::strip_flag(&args, f, true);
        }
        for f in strip_bool {
            args = supervisor::strip_flag(&args, f, false);
        }
        if capture {
            args.push("--json".into());
        }
        Ok(SupervisorOptions {
            program: std::env::current_exe()?,
            args,
            slots,
            grace: supervisor::DEFAULT_GRACE,
            capture_stdout: capture,
            env: vec![],
        })
    }

    fn parse_report(stdout: &str) -> anyhow::Result<BenchReport> {
        serde_json::from_str(stdout.trim()).map_err(|e| {
            CliError::failure(format!("rank 0 printed no benchmark report ({e})"))
                .with_hint("run with -v to see the workers' output")
                .into()
        })
    }

    fn supervised_benchmark(
        args: &TrainArgs,
        slots: Vec<WorkerSlot>,
    ) -> anyhow::Result<ExitStatus> {
        let p = printer();
        if args.scaling {
            let mut runs = Vec::new();
            for k in bench::scaling_sizes(slots.len()) {
                p.info(format!(
                    "scaling: benchmarking {k} rank{}",
                    if k == 1 { "" } else { "s" }
                ));
                let mut opts = supervisor_options(
                    slots[..k].to_vec(),
                    &["--gpus"],
                    &["--scaling", "--json"],
                    true,
                )?;
                // The same threads per rank at every size (those of the
                // largest run), or CPU ranks would scale by thread count.
                if std::env::var_os(ev::OMP_NUM_THREADS).is_none() {
                    let t = supervisor::omp_threads(&slots[0], slots.len());
                    opts.env.push((ev::OMP_NUM_THREADS.into(), t.to_string()));
                }
                let out = supervisor::supervise(&opts)?;
                runs.push(parse_report(&out.stdout)?);
            }
            let s = bench::scaling_report(runs);
            if let Some(last) = s.runs.last() {
                p.info(report::bench_table(last));
            }
            p.info(report::scaling_table(&s));
            if args.json {
                p.json(&s)?;
            }
            return Ok(ExitStatus::Success);
        }
        let opts = supervisor_options(slots, &["--gpus"], &["--compare", "--json"], true)?;
        let out = supervisor::supervise(&opts)?;
        let r = parse_report(&out.stdout)?;
        finish_report(args, r)
    }

    fn local_benchmark(args: &TrainArgs) -> anyhow::Result<ExitStatus> {
        let mut run = super::super::train::resolve_options(args)?;
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
        let r = bench::run_rank(&opts, sync)?;
        if !primary {
            return Ok(ExitStatus::Success);
        }
        finish_local(args, &opts, r)
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
        let device = match opts.run.device {
            Device::Cuda(i) => format!("cuda:{i}"),
            _ => "cpu".into(),
        };
        let base = reference::ReferenceArgs {
            batch: r.batch_per_rank,
            image_size: r.image_size,
            channels: opts.run.config.model.in_channels,
            precision: r.precision.clone(),
            device,
            warmup: opts.warmup,
            steps: opts.steps,
            lr: opts.run.config.training.lr,
            seed: opts.run.config.training.seed,
            compile: false,
            matched: false,
            channels_last: opts.run.config.training.channels_last,
        };
        p.info(format!(
            "running the PyTorch reference (eager) with {}",
            reference::python()
        ));
        let mut runs = vec![reference::run(dir.path(), &base)?];
        let compile_note = if matches!(opts.run.device, Device::Cuda(_)) {
            p.info("running the PyTorch reference (torch.compile)");
            runs.push(reference::run(
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
        p.info("running the PyTorch reference (eager, imgctl's recipe)");
        runs.push(reference::run(
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

    fn finish_report(args: &TrainArgs, r: BenchReport) -> anyhow::Result<ExitStatus> {
        let p = printer();
        if args.compare {
            // Supervised run: compare on one device of the same kind.
            let mut run = super::super::train::resolve_options(args)?;
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

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_bare_cuda_follows_the_local_rank() {
            // Rank 3 of 4, local rank 3, on a node with 4 GPUs.
            let r3 = LaunchInfo::loopback(3, 4, 29500);
            let dev = |arg: Option<&str>, l: &LaunchInfo, visible| {
                launcher_device(arg, l, visible).unwrap()
            };
            assert_eq!(dev(Some("cuda"), &r3, 4), Some(Device::Cuda(3)));
            assert_eq!(dev(Some(" CUDA "), &r3, 4), Some(Device::Cuda(3)));
            assert_eq!(dev(Some("gpu"), &r3, 4), Some(Device::Cuda(3)));
            assert_eq!(dev(None, &r3, 4), Some(Device::Cuda(3)));
            // One GPU visible (a launcher pinned it): that one.
            assert_eq!(dev(Some("cuda"), &r3, 1), Some(Device::Cuda(0)));
            // An explicit choice stays.
            assert_eq!(dev(Some("cuda:1"), &r3, 4), None);
            assert_eq!(dev(Some("cpu"), &r3, 4), None);
            // No GPU: nothing to map (parse_device already refused `cuda`).
            assert_eq!(dev(Some("cuda"), &r3, 0), None);
            assert_eq!(dev(None, &r3, 0), Some(Device::Cpu));
            // A world of one keeps cuda:0.
            assert_eq!(dev(Some("cuda"), &LaunchInfo::loopback(0, 1, 1), 4), None);
            // More ranks on the node than GPUs: a clear error, not GPU 0 twice.
            let e = launcher_device(Some("cuda"), &r3, 2).unwrap_err();
            assert!(e.to_string().contains("local rank 3 needs GPU 3"), "{e}");
        }
    }
}
