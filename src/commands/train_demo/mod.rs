//! `imgctl train-demo`: turns the flags into [`RunOptions`], runs the
//! single-process training and prints the summary.
//!
//! Multi-GPU launch, launcher environments and the benchmark (`--gpus`,
//! `--benchmark`, …) are handled by train_parallel.rs, called first.
use crate::cli::TrainArgs;
use crate::ExitStatus;

#[cfg(feature = "torch")]
pub use imp::{parse_device, resolve_options, summary_lines};

#[cfg(feature = "torch")]
mod imp {
    use std::path::{Path, PathBuf};

    use anyhow::Context;
    use tch::Device;

    use crate::cli::TrainArgs;
    use crate::env_vars;
    use crate::output::printer;
    use crate::train::checkpoint::{self, DataSource};
    use crate::train::config::{parse_on_off, GradReduce, Overrides, Precision, TrainConfig};
    use crate::train::out_lock::OutLock;
    use crate::train::parallel::launch::LaunchInfo;
    use crate::train::space;
    use crate::train::trainer::{self, DataChoice, RunOptions, TrainSummary};
    use crate::{CliError, ExitStatus};

    /// Default output directory.
    const DEFAULT_OUT: &str = "imgctl-train";
    /// The preset when neither --preset, a config file nor a resumed
    /// checkpoint names one (diffusers' train_unconditional.py model).
    const DEFAULT_PRESET: &str = "default";

    /// Parses `cpu`, `cuda` or `cuda:N`; `None` picks cuda:0 when available,
    /// else the CPU. A CUDA device that is not there is an error (exit 2).
    pub fn parse_device(s: Option<&str>) -> anyhow::Result<Device> {
        let Some(s) = s else {
            return Ok(if tch::Cuda::is_available() {
                Device::Cuda(0)
            } else {
                Device::Cpu
            });
        };
        let d = match s.to_ascii_lowercase().as_str() {
            "cpu" => Device::Cpu,
            "cuda" | "gpu" => Device::Cuda(0),
            other => match other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<usize>().ok())
            {
                Some(i) => Device::Cuda(i),
                None => {
                    return Err(CliError::usage(format!("unknown device `{s}`"))
                        .with_hint("use --device cpu, cuda or cuda:N")
                        .into())
                }
            },
        };
        if let Device::Cuda(i) = d {
            let n = tch::Cuda::device_count();
            if (i as i64) >= n {
                return Err(CliError::usage(format!(
                    "device {s} is not available: libtorch sees {n} CUDA device(s)"
                ))
                .with_hint("use --device cpu, or check the driver with `imgctl verify`")
                .into());
            }
        }
        Ok(d)
    }

    fn env_step(name: &str) -> anyhow::Result<Option<u64>> {
        match std::env::var(name) {
            Ok(v) => v.trim().parse().map(Some).map_err(|_| {
                CliError::usage(format!("{name}={v} is not a step number"))
                    .with_hint(format!("unset {name} or give a positive integer"))
                    .into()
            }),
            Err(_) => Ok(None),
        }
    }

    /// Exit 2 when `out` already holds checkpoints: a new run there would
    /// prune them by step number (deleting its own), mix its samples and
    /// metrics with the old run's, and a later --resume could continue either.
    fn refuse_earlier_run(out: &Path) -> anyhow::Result<()> {
        if let Some((step, _)) = checkpoint::list(out).pop() {
            return Err(CliError::usage(format!(
                "--out {} already holds the checkpoints of a run (up to step {step})",
                out.display()
            ))
            .with_hint("pass --resume to continue it, or choose a new --out")
            .into());
        }
        Ok(())
    }

    /// Whether two paths name the same file (canonical paths when both
    /// resolve, else the paths as written).
    fn same_path(a: &Path, b: &Path) -> bool {
        match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => a == b,
        }
    }

    /// The data to train on: `--data`, else (when resuming) the data the
    /// checkpoint recorded, else the synthetic set. An explicit `--data` that
    /// differs from the checkpoint's is exit 2.
    fn resolve_data(
        flag: Option<&Path>,
        recorded: Option<&DataSource>,
    ) -> anyhow::Result<DataChoice> {
        match (flag, recorded) {
            (None, Some(DataSource::Folder { path })) => Ok(DataChoice::Folder(path.clone())),
            // The recorded folder is gone (data staged per job, e.g. to
            // $TMPDIR, or moved): the folder given now continues the run.
            (Some(d), Some(DataSource::Folder { path })) if !path.exists() => {
                printer().warn(format!(
                    "the checkpoint trained on {}, which no longer exists: continuing on --data {}",
                    path.display(),
                    d.display()
                ));
                Ok(DataChoice::Folder(d.to_path_buf()))
            }
            (Some(d), Some(DataSource::Folder { path })) if !same_path(d, path) => {
                Err(CliError::usage(format!(
                    "--data {} differs from the folder the checkpoint trained on, {}",
                    d.display(),
                    path.display()
                ))
                .with_hint("drop --data to continue on the checkpoint's folder, or start a new --out")
                .into())
            }
            (Some(d), Some(DataSource::Synthetic { .. })) => Err(CliError::usage(format!(
                "--data {}: the checkpoint trained on the synthetic dataset",
                d.display()
            ))
            .with_hint("drop --data to continue on the synthetic dataset, or train on the folder with a new --out")
            .into()),
            (Some(d), _) => Ok(DataChoice::Folder(d.to_path_buf())),
            (None, _) => Ok(DataChoice::Synthetic),
        }
    }

    /// The output directory: `--out`, else [`DEFAULT_OUT`].
    fn out_dir(args: &TrainArgs) -> PathBuf {
        args.out
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_OUT))
    }

    /// Resolves the flags into run options: preset, resumed checkpoint config,
    /// config file and flags (in that order), device, precision, data, output.
    pub fn resolve_options(args: &TrainArgs) -> anyhow::Result<RunOptions> {
        let out = out_dir(args);
        // A benchmark writes nothing under --out.
        if args.resume.is_none() && !args.benchmark {
            refuse_earlier_run(&out)?;
        }
        let resume = if let Some(mode) = args.resume.as_deref() {
            // A damaged newest checkpoint (a disk that filled up, a partial
            // copy) must not block the run: continue from the newest intact one.
            let (intact, damaged) = checkpoint::latest_intact(&out);
            if let (None, Some((dir, why)), false) = (&intact, damaged.first(), mode == "auto") {
                return Err(CliError::usage(format!(
                    "--resume: every checkpoint under {} is damaged (the newest, {}: {why})",
                    out.join(checkpoint::CHECKPOINTS).display(),
                    dir.display()
                ))
                .with_hint("use --resume auto to start the run afresh, or choose a new --out")
                .into());
            }
            for (dir, why) in &damaged {
                let instead = match &intact {
                    Some(d) => format!("resuming from {}", d.display()),
                    None => "no intact checkpoint is left: starting the run afresh".into(),
                };
                printer().warn(format!(
                    "skipping the damaged checkpoint {} ({why}); {instead}",
                    dir.display()
                ));
            }
            match intact {
                Some(dir) => Some(dir),
                // `--resume auto`: a job's first start, or a restart before
                // the first checkpoint, begins the run.
                None if mode == "auto" => None,
                None => {
                    return Err(CliError::usage(format!(
                        "--resume: no checkpoint under {}",
                        out.join(checkpoint::CHECKPOINTS).display()
                    ))
                    .with_hint("pass the --out directory of the run to continue, drop --resume to start afresh, or use --resume auto to do either (restartable jobs)")
                    .into())
                }
            }
        } else {
            None
        };
        let state = resume.as_deref().map(checkpoint::read_state).transpose()?;
        let mut config = match &state {
            Some(state) => {
                if let Some(p) = args.preset.as_deref() {
                    if p != state.config.preset {
                        return Err(CliError::usage(format!(
                            "--preset {p} does not match the checkpoint's preset {}",
                            state.config.preset
                        ))
                        .with_hint("drop --preset when resuming")
                        .into());
                    }
                }
                state.config.clone()
            }
            None => TrainConfig::preset(args.preset.as_deref().unwrap_or(DEFAULT_PRESET))?,
        };
        if let Some(file) = &args.config {
            // A `preset:` in the file applies unless --preset (or the
            // resumed checkpoint) chose the preset.
            let preset_from_flag = args.preset.is_some() || state.is_some();
            config.apply_file(file, preset_from_flag)?;
        }
        let precision = args
            .precision
            .as_deref()
            .map(Precision::parse)
            .transpose()?;
        let grad_reduce = args
            .grad_reduce
            .as_deref()
            .map(GradReduce::parse)
            .transpose()?;
        let overlap_grad_reduce = args
            .overlap_grad_reduce
            .as_deref()
            .map(parse_on_off("--overlap-grad-reduce"))
            .transpose()?;
        if let Some(b) = args.batch_size {
            if b <= 0 {
                return Err(CliError::usage(format!("--batch-size {b} is not positive"))
                    .with_hint("use --batch-size 1 or more")
                    .into());
            }
        }
        config.apply(&Overrides {
            steps: args.steps,
            batch_size: args.batch_size.map(|b| b as usize),
            lr: args.lr,
            seed: args.seed,
            precision,
            grad_reduce,
            channels_last: args.channels_last,
            gradient_checkpointing: args.gradient_checkpointing,
            overlap_grad_reduce,
            bucket_cap_mb: args.bucket_cap_mb,
            checkpoint_every: args.checkpoint_every,
            keep: args.keep,
            sample_every: args.sample_every,
            workers: args.workers,
        });
        config.validate()?;
        let device = parse_device(args.device.as_deref())?;
        crate::train::budget::check_training(&config, device == Device::Cpu)?;
        let (precision, precision_note) = match (config.training.precision, device) {
            (Some(p), _) => (p, None),
            (None, Device::Cuda(i)) => {
                trainer::default_precision(device, trainer::cuda_compute_capability(i))
            }
            (None, _) => trainer::default_precision(device, None),
        };
        let data = resolve_data(
            args.data.as_deref(),
            state.as_ref().and_then(|s| s.data.as_ref()),
        )?;
        // `--resume auto` with --init-from: the weights file starts the run;
        // once a checkpoint exists, the checkpoint continues it.
        let auto = args.resume.as_deref() == Some("auto");
        let init_from = match (&args.init_from, &resume) {
            (Some(f), Some(dir)) if auto => {
                printer().info(format!(
                    "--resume auto: continuing from {}; --init-from {} only starts a run",
                    dir.display(),
                    f.display()
                ));
                None
            }
            _ => args.init_from.clone(),
        };
        if let Some(f) = &init_from {
            if resume.is_some() {
                return Err(
                    CliError::usage("--init-from and --resume both set the weights")
                        .with_hint("drop --init-from when resuming")
                        .into(),
                );
            }
            if !f.is_file() {
                return Err(
                    CliError::usage(format!("--init-from {} is not a file", f.display()))
                        .with_hint("pass a diffusers UNet2DModel .safetensors state dict")
                        .into(),
                );
            }
        }
        Ok(RunOptions {
            config,
            device,
            precision,
            out,
            data,
            init_from,
            finished_ok: auto,
            resume,
            inject_nan_at: env_step(env_vars::IMGCTL_TEST_INJECT_NAN_AT_STEP)?,
            interrupt_after: env_step(env_vars::IMGCTL_TEST_INTERRUPT_AFTER_STEP)?,
            precision_note,
        })
    }

    /// The human summary lines.
    pub fn summary_lines(s: &TrainSummary) -> Vec<String> {
        let mut lines = Vec::new();
        let loss = match (s.first_loss, s.final_loss) {
            (Some(a), Some(b)) => format!(
                "loss {a:.4} at the first step → {b:.4} over the last {} ({:.1}%)",
                (s.final_step - s.start_step).min(10),
                100.0 * b / a
            ),
            _ => "no loss recorded".into(),
        };
        let speed = s
            .img_per_s
            .map_or("n/a".to_string(), |v| format!("{v:.1} img/s"));
        lines.push(format!(
            "trained steps {}..{} in {:.1} s on {} ({}): {loss}, {speed}",
            s.start_step + 1,
            s.final_step,
            s.elapsed_s,
            s.device,
            s.precision
        ));
        if let Some(m) = &s.device_memory {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            let peaks = match (m.peak_allocated_bytes, m.peak_reserved_bytes) {
                (Some(a), Some(r)) => format!(
                    "peak {:.2} GiB allocated, {:.2} GiB reserved by torch's allocator; ",
                    gib(a),
                    gib(r)
                ),
                _ => String::new(),
            };
            lines.push(format!(
                "device memory: {peaks}{:.2} GiB of {:.1} GiB in use on the device after training (CUDA context + allocator reserve)",
                gib(m.used_bytes),
                gib(m.total_bytes)
            ));
        }
        if let Some(g) = s.grad_sync.filter(|g| g.calls > 0) {
            let how = if g.overlapped {
                format!(
                    "overlapped with backward ({:.0}% of them started during it)",
                    100.0 * g.buckets_during_backward as f64 / g.buckets.max(1) as f64
                )
            } else {
                "after backward".to_string()
            };
            let per_step = (g.buckets as f64 / g.calls as f64).round();
            lines.push(format!(
                "gradient all-reduce: {:.1} MB per step in {per_step:.0} bucket{}, {how}",
                g.bytes_per_sync as f64 / 1e6,
                if per_step == 1.0 { "" } else { "s" }
            ));
        }
        if s.skipped_steps > 0 {
            lines.push(format!(
                "fp16: {} step(s) skipped for overflow",
                s.skipped_steps
            ));
        }
        if s.data.unreadable_files > 0 {
            lines.push(format!(
                "data: {} unreadable file(s) skipped",
                s.data.unreadable_files
            ));
        }
        if let Some(c) = &s.checkpoint {
            lines.push(format!("checkpoint: {}", c.display()));
        }
        if let Some(d) = &s.diffusers_model {
            lines.push(format!(
                "diffusers model (EMA): {} (UNet2DModel.from_pretrained)",
                d.display()
            ));
        }
        if let Some(last) = s.samples.last() {
            lines.push(match &s.sample_stats {
                Some(st) => format!(
                    "samples: {} — {} images, DDIM {} steps, EMA weights (neighbour difference {:.3}, saturation {:.3}; training data {:.3}, {:.3})",
                    last.display(),
                    st.images,
                    st.ddim_steps,
                    st.samples.neighbour_diff,
                    st.samples.saturation,
                    st.data.neighbour_diff,
                    st.data.saturation
                ),
                None => format!("samples: {}", last.display()),
            });
        }
        lines.push(format!(
            "metrics: {} (TensorBoard: tensorboard --logdir {})",
            s.metrics.display(),
            s.out_dir.join("tb").display()
        ));
        lines
    }

    /// The warning for a run that fell back to the CPU (no CUDA device, no
    /// `--device`) with a model too large for a CPU demo: the default model
    /// trains at about 1 img/s on a CPU (0.24 img/s measured on 2 cores in a
    /// debug build), so its 1000 × 16 images take hours. `None` for small models.
    pub fn cpu_fallback_warning(config: &TrainConfig) -> Option<String> {
        // The tiny preset's ~1 M parameters train in seconds; warn well above it.
        const LARGE_PARAMS: u64 = 10_000_000;
        let params = config.model.param_count();
        (params >= LARGE_PARAMS).then(|| {
            format!(
                "no CUDA device: the CPU trains the {:.1} M-parameter {} model at a few images \
                 per second; use --preset tiny for a CPU demo, or check the GPU with `imgctl verify`",
                params as f64 / 1e6,
                config.preset
            )
        })
    }

    /// Runs `imgctl train-demo`.
    pub fn run(args: TrainArgs) -> anyhow::Result<ExitStatus> {
        // --gpus, launcher environments and --benchmark (train_parallel.rs).
        if let Some(status) = super::super::train_parallel::intercept(&args)? {
            return Ok(status);
        }
        // The process that writes --out (rank 0; every rank of a launched
        // job sees the launcher's RANK) locks it before reading anything
        // there, and holds the lock until summary.json is written. A folder
        // that does not exist yet holds nothing to read: it is locked after
        // the settings are checked, so a refused command creates nothing.
        let primary = LaunchInfo::from_process_env()?.is_primary();
        let out_path = out_dir(&args);
        let mut _lock = if primary && out_path.exists() {
            Some(OutLock::acquire(&out_path)?)
        } else {
            None
        };
        let mut opts = resolve_options(&args)?;
        if primary && _lock.is_none() {
            _lock = Some(OutLock::acquire(&out_path)?);
        }
        let out = opts.out.clone();
        let sync = super::super::train_parallel::worker_sync(&args, &mut opts)?;
        let primary = sync.rank() == 0;
        if primary && args.device.is_none() && opts.device == Device::Cpu {
            if let Some(line) = cpu_fallback_warning(&opts.config) {
                printer().warn(line);
            }
        }
        if primary {
            if let Some(note) = &opts.precision_note {
                printer().info(note);
            }
        }
        let params = opts.config.model.param_count();
        let summary =
            trainer::run(opts, sync).map_err(|e| space::explain_disk_full(e, &out, params))?;
        // Only rank 0 writes and prints.
        if !primary {
            return Ok(ExitStatus::Success);
        }
        let text = serde_json::to_string_pretty(&summary)?;
        let path = out.join("summary.json");
        checkpoint::write_file_atomic(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
            .map_err(|e| space::explain_disk_full(e, &out, params))?;
        let p = printer();
        for line in summary_lines(&summary) {
            p.info(line);
        }
        if args.json {
            p.json(&summary)?;
        }
        Ok(ExitStatus::Success)
    }
}

/// Runs `imgctl train-demo`.
#[cfg(feature = "torch")]
pub fn run(args: TrainArgs) -> anyhow::Result<ExitStatus> {
    imp::run(args)
}

/// Runs `imgctl train-demo` (unavailable without the `torch` feature).
#[cfg(not(feature = "torch"))]
pub fn run(_args: TrainArgs) -> anyhow::Result<ExitStatus> {
    Err(super::torch_missing("train-demo"))
}

#[cfg(all(test, feature = "torch"))]
mod tests {
    use clap::Parser;

    use super::imp::{cpu_fallback_warning, resolve_options};
    use crate::cli::{Cli, Command, TrainArgs};
    use crate::train::config::TrainConfig;
    use crate::CliError;

    fn train_args(args: &[&str]) -> TrainArgs {
        let cli = Cli::try_parse_from(["imgctl", "train-demo"].iter().chain(args)).unwrap();
        match cli.command {
            Command::TrainDemo(a) => a,
            other => panic!("parsed {other:?}"),
        }
    }

    /// An explicit `--preset default` wins over the config file's `preset:`;
    /// without the flag the file's preset applies, and without either the
    /// default does.
    #[test]
    fn an_explicit_preset_default_is_not_the_flags_default() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, "preset: tiny\n").unwrap();
        let out = dir.path().join("out");
        let (f, o) = (file.to_str().unwrap(), out.to_str().unwrap());
        let preset = |extra: &[&str]| {
            let mut a = vec!["--device", "cpu", "--out", o];
            a.extend_from_slice(extra);
            resolve_options(&train_args(&a)).unwrap().config.preset
        };
        assert_eq!(preset(&["--preset", "default", "--config", f]), "default");
        assert_eq!(preset(&["--config", f]), "tiny");
        assert_eq!(preset(&[]), "default");
        assert_eq!(preset(&["--preset", "tiny"]), "tiny");
    }

    /// Without --resume, an --out that holds checkpoints is exit 2 naming it.
    #[test]
    fn an_out_with_checkpoints_needs_resume() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        crate::train::checkpoint::write_atomic(&out, 3, |d| {
            std::fs::write(d.join(crate::train::checkpoint::STATE_FILE), "{}")?;
            Ok(())
        })
        .unwrap();
        let o = out.to_str().unwrap();
        let e = resolve_options(&train_args(&["--device", "cpu", "--out", o])).unwrap_err();
        let cli = e.downcast_ref::<CliError>().expect("a CliError");
        assert_eq!(cli.status, crate::ExitStatus::Usage, "{e}");
        assert_eq!(
            e.to_string(),
            format!("--out {o} already holds the checkpoints of a run (up to step 3)")
        );
        assert_eq!(
            cli.hint.as_deref(),
            Some("pass --resume to continue it, or choose a new --out")
        );
        // A benchmark writes nothing there, so it may share the folder.
        let bench = train_args(&["--device", "cpu", "--benchmark", "--out", o]);
        assert!(resolve_options(&bench).is_ok());
    }

    #[test]
    fn cpu_fallback_warns_for_the_default_model_only() {
        let default = TrainConfig::preset("default").unwrap();
        let w = cpu_fallback_warning(&default).expect("the default model is large");
        assert!(w.contains("113.7 M-parameter default model"), "{w}");
        assert!(w.contains("--preset tiny"), "{w}");
        assert_eq!(
            cpu_fallback_warning(&TrainConfig::preset("tiny").unwrap()),
            None
        );
    }
}
