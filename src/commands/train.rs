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
    use std::path::PathBuf;

    use tch::Device;

    use crate::cli::TrainArgs;
    use crate::env_vars;
    use crate::output::printer;
    use crate::train::checkpoint;
    use crate::train::config::{parse_on_off, GradReduce, Overrides, Precision, TrainConfig};
    use crate::train::trainer::{self, DataChoice, RunOptions, TrainSummary};
    use crate::{CliError, ExitStatus};

    /// Default output directory.
    const DEFAULT_OUT: &str = "imgctl-train";

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

    /// Resolves the flags into run options: preset, resumed checkpoint config,
    /// config file and flags (in that order), device, precision, data, output.
    pub fn resolve_options(args: &TrainArgs) -> anyhow::Result<RunOptions> {
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_OUT));
        let resume = if args.resume {
            match checkpoint::latest(&out) {
                Some(dir) => Some(dir),
                None => {
                    return Err(CliError::usage(format!(
                        "--resume: no checkpoint under {}",
                        out.join(checkpoint::CHECKPOINTS).display()
                    ))
                    .with_hint("pass the --out directory of the run to continue, or drop --resume to start afresh")
                    .into())
                }
            }
        } else {
            None
        };
        let mut config = match &resume {
            Some(dir) => checkpoint::read_state(dir)?.config,
            None => TrainConfig::preset(&args.preset)?,
        };
        if resume.is_some() && args.preset != "default" && args.preset != config.preset {
            return Err(CliError::usage(format!(
                "--preset {} does not match the checkpoint's preset {}",
                args.preset, config.preset
            ))
            .with_hint("drop --preset when resuming")
            .into());
        }
        if let Some(file) = &args.config {
            // A `preset:` in the file applies unless --preset chose another one.
            let preset_from_flag = args.preset != "default" || resume.is_some();
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
            overlap_grad_reduce,
            bucket_cap_mb: args.bucket_cap_mb,
            checkpoint_every: args.checkpoint_every,
            keep: args.keep,
            sample_every: args.sample_every,
            workers: args.workers,
        });
        config.validate()?;
        let device = parse_device(args.device.as_deref())?;
        let precision = config.training.precision.unwrap_or(match device {
            Device::Cpu => Precision::Fp32,
            _ => Precision::Bf16,
        });
        let data = match &args.data {
            Some(d) => DataChoice::Folder(d.clone()),
            None => DataChoice::Synthetic,
        };
        if let Some(f) = &args.init_from {
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
            init_from: args.init_from.clone(),
            resume,
            inject_nan_at: env_step(env_vars::IMGCTL_TEST_INJECT_NAN_AT_STEP)?,
            interrupt_after: env_step(env_vars::IMGCTL_TEST_INTERRUPT_AFTER_STEP)?,
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
            lines.push(format!(
                "device memory: {:.2} GiB of {:.1} GiB in use after training (CUDA context + torch's allocator reserve, which holds the peak)",
                m.used_bytes as f64 / (1u64 << 30) as f64,
                m.total_bytes as f64 / (1u64 << 30) as f64
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
            lines.push(format!(
                "gradient all-reduce: {:.1} MB per step in {:.0} buckets, {how}",
                g.bytes_per_sync as f64 / 1e6,
                g.buckets as f64 / g.calls as f64
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
            lines.push(format!("samples: {}", last.display()));
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
        let mut opts = resolve_options(&args)?;
        let out = opts.out.clone();
        let sync = super::super::train_parallel::worker_sync(&args, &mut opts)?;
        let primary = sync.rank() == 0;
        if primary && args.device.is_none() && opts.device == Device::Cpu {
            if let Some(line) = cpu_fallback_warning(&opts.config) {
                printer().warn(line);
            }
        }
        let summary = trainer::run(opts, sync)?;
        // Only rank 0 writes and prints.
        if !primary {
            return Ok(ExitStatus::Success);
        }
        let text = serde_json::to_string_pretty(&summary)?;
        std::fs::write(out.join("summary.json"), &text)?;
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
    use super::imp::cpu_fallback_warning;
    use crate::train::config::TrainConfig;

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
