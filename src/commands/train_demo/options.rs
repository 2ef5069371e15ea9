//! `imgctl train-demo`'s flags → [`RunOptions`]: the preset, a resumed
//! checkpoint's config, the config file and the flags (in that order), the
//! device ([`parse_device`], also `imgctl sample`'s), the precision, the data
//! and the output directory.
//!
//! [`resolve_options`] sets the knobs through `TrainArgs::apply_knobs` and
//! destructures the other flags ([`TrainRunFlags`]) field by field, so a new
//! one fails to compile until it is handled here or named as the mode
//! choice's (`super`, `super::launch`, `super::bench`). This module reads
//! flags, checkpoints' state and the environment's test knobs; it must not
//! launch, train or print anything but warnings about the options.
use std::path::{Path, PathBuf};

use tch::Device;

use crate::cli::{TrainArgs, TrainRunFlags};
use crate::commands::error::CliError;
use crate::env_vars;
use crate::output::printer;
use crate::train::checkpoint::{self, DataSource};
use crate::train::config::{GroupNormKernel, Preset, TrainConfig};
use crate::train::session::{self, DataChoice, RunOptions};

/// Default output directory.
const DEFAULT_OUT: &str = "imgctl-train";
/// The preset when neither --preset, a config file nor a resumed
/// checkpoint names one (diffusers' train_unconditional.py model).
const DEFAULT_PRESET: Preset = Preset::Default;

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
fn resolve_data(flag: Option<&Path>, recorded: Option<&DataSource>) -> anyhow::Result<DataChoice> {
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
pub(super) fn out_dir(args: &TrainArgs) -> PathBuf {
    args.out
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_OUT))
}

/// Resolves the flags into run options: preset, resumed checkpoint config,
/// config file and flags (in that order), device, precision, data, output.
pub fn resolve_options(args: &TrainArgs) -> anyhow::Result<RunOptions> {
    // Every flag but the knobs by name, without `..`: a new one must be
    // handled here or named below as the mode choice's. The knobs are
    // `apply_knobs`'s (the table in cli/train_demo.rs).
    let TrainRunFlags {
        preset,
        config: config_file,
        out: _, // out_dir
        data,
        device,
        init_from,
        resume: resume_flag,
        benchmark,
        // The mode choice's (mod.rs, launch.rs, bench.rs), not the run's.
        gpus: _,
        scaling: _,
        compare: _,
        op_profile: _,
        plot: _,
        warmup: _,
        rendezvous_timeout: _,
        heartbeat: _,
        heartbeat_timeout: _,
        json: _,
        print_config,
    } = args.run_flags();
    let out = out_dir(args);
    // A benchmark, and --print-config, write nothing under --out.
    if resume_flag.is_none() && !benchmark && !print_config {
        refuse_earlier_run(&out)?;
    }
    let resume = resume_checkpoint(&out, resume_flag.as_deref())?;
    let state = resume.as_deref().map(checkpoint::read_state).transpose()?;
    let mut config = base_config(*preset, state.as_ref())?;
    if let Some(file) = config_file {
        // A `preset:` in the file applies unless --preset (or the
        // resumed checkpoint) chose the preset.
        let preset_from_flag = preset.is_some() || state.is_some();
        config.apply_file(file, preset_from_flag)?;
    }
    if let Some(b) = args.batch_size {
        if b <= 0 {
            return Err(CliError::usage(format!("--batch-size {b} is not positive"))
                .with_hint("use --batch-size 1 or more")
                .into());
        }
    }
    args.apply_knobs(&mut config.training).map_err(|e| {
        CliError::usage(format!("--{}: {}", e.id.replace('_', "-"), e.why))
            .with_hint("`imgctl train-demo --help` gives each flag's values")
    })?;
    config.validate()?;
    let device = parse_device(device.as_deref())?;
    check_groupnorm(&config, device)?;
    crate::train::budget::check_training(&config, device == Device::Cpu)?;
    let (precision, precision_note) = match (config.training.precision, device) {
        (Some(p), _) => (p, None),
        (None, Device::Cuda(i)) => {
            session::default_precision(device, session::cuda_compute_capability(i))
        }
        (None, _) => session::default_precision(device, None),
    };
    // The note says why a GPU trains in fp32; the flag that changes it is ours to name.
    let precision_note = precision_note.map(|note| {
        format!("{note} (--precision fp16 uses fp16 tensor cores where the GPU has them, from compute capability 7.0)")
    });
    let data = resolve_data(
        data.as_deref(),
        state.as_ref().and_then(|s| s.data.as_ref()),
    )?;
    // `--resume auto` with --init-from: the weights file starts the run;
    // once a checkpoint exists, the checkpoint continues it.
    let auto = resume_flag.as_deref() == Some("auto");
    let init_from = resolve_init_from(init_from.as_deref(), resume.as_deref(), auto, &config)?;
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
        resume_flag: "--resume",
    })
}

/// `--groupnorm fused` needs what its kernels read: a CUDA device and
/// channels-last activations. Anything else is a usage error, never a
/// silent fall-back to ATen.
fn check_groupnorm(config: &TrainConfig, device: Device) -> anyhow::Result<()> {
    if config.training.groupnorm != GroupNormKernel::Fused {
        return Ok(());
    }
    if !device.is_cuda() {
        return Err(CliError::usage(
            "--groupnorm fused runs CUDA kernels, and this run is on the CPU",
        )
        .with_hint("drop --groupnorm fused (or use --groupnorm aten) on the CPU, or train on a GPU")
        .into());
    }
    if !config.training.channels_last {
        return Err(CliError::usage(
            "--groupnorm fused reads channels-last (NHWC) activations, and this run is NCHW",
        )
        .with_hint("add --channels-last (or channels_last: true under training: in the config)")
        .into());
    }
    Ok(())
}

/// The checkpoint `--resume` continues from: the newest intact one under
/// `out` (damaged newer ones are skipped with a warning); `None` without
/// `--resume`, or with `--resume auto` when there is none.
fn resume_checkpoint(out: &Path, resume_flag: Option<&str>) -> anyhow::Result<Option<PathBuf>> {
    let Some(mode) = resume_flag else {
        return Ok(None);
    };
    // A damaged newest checkpoint (a disk that filled up, a partial
    // copy) must not block the run: continue from the newest intact one.
    let (intact, damaged) = checkpoint::latest_intact(out);
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
        Some(dir) => Ok(Some(dir)),
        // `--resume auto`: a job's first start, or a restart before
        // the first checkpoint, begins the run.
        None if mode == "auto" => Ok(None),
        None => Err(CliError::usage(format!(
            "--resume: no checkpoint under {}",
            out.join(checkpoint::CHECKPOINTS).display()
        ))
        .with_hint("pass the --out directory of the run to continue, drop --resume to start afresh, or use --resume auto to do either (restartable jobs)")
        .into()),
    }
}

/// The configuration a run starts from: the resumed checkpoint's (when
/// `--preset`, if given, agrees with it) or the preset's.
fn base_config(
    preset: Option<Preset>,
    state: Option<&checkpoint::State>,
) -> anyhow::Result<TrainConfig> {
    Ok(match state {
        Some(state) => {
            if let Some(p) = preset {
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
        None => TrainConfig::preset(preset.unwrap_or(DEFAULT_PRESET)),
    })
}

/// The `--init-from` weights file this run starts from, checked against
/// the model before `--out` is set up; `None` when resuming with `--resume
/// auto` (the checkpoint continues the run).
fn resolve_init_from(
    init_from: Option<&Path>,
    resume: Option<&Path>,
    auto: bool,
    config: &TrainConfig,
) -> anyhow::Result<Option<PathBuf>> {
    let init_from = match (init_from, resume) {
        (Some(f), Some(dir)) if auto => {
            printer().info(format!(
                "--resume auto: continuing from {}; --init-from {} only starts a run",
                dir.display(),
                f.display()
            ));
            None
        }
        _ => init_from.map(Path::to_path_buf),
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
        // The weights must fit the model before --out is set up: a refused
        // --init-from leaves nothing behind.
        crate::train::model::weights::check_diffusers_state_dict(&config.model, f)?;
    }
    Ok(init_from)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::resolve_options;
    use crate::cli::{Cli, Command, TrainArgs};
    use crate::commands::error::CliError;
    use crate::train::config::Preset;

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
        assert_eq!(
            preset(&["--preset", "default", "--config", f]),
            Preset::Default
        );
        assert_eq!(preset(&["--config", f]), Preset::Tiny);
        assert_eq!(preset(&[]), Preset::Default);
        assert_eq!(preset(&["--preset", "tiny"]), Preset::Tiny);
    }

    /// The flags win over the config file, which wins over the preset.
    #[test]
    fn flags_win_over_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, "training:\n  steps: 7\n  lr: 0.01\n").unwrap();
        let out = dir.path().join("out");
        let (f, o) = (file.to_str().unwrap(), out.to_str().unwrap());
        let args = [
            "--device", "cpu", "--preset", "tiny", "--out", o, "--config", f,
        ];
        let t = |extra: &[&str]| {
            let a: Vec<&str> = args.iter().chain(extra).copied().collect();
            resolve_options(&train_args(&a)).unwrap().config.training
        };
        assert_eq!((t(&[]).steps, t(&[]).lr), (7, 0.01));
        let flagged = t(&["--steps", "3", "--overlap-grad-reduce", "off"]);
        assert_eq!((flagged.steps, flagged.lr), (3, 0.01));
        assert!(!flagged.overlap_grad_reduce);
        assert_eq!(flagged.batch_size, 8);
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
        assert_eq!(cli.status, crate::error::ExitStatus::Usage, "{e}");
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
    fn groupnorm_fused_on_cuda_needs_channels_last() {
        use crate::train::config::{GroupNormKernel, TrainConfig};
        let mut c = TrainConfig::preset(Preset::Tiny);
        c.training.groupnorm = GroupNormKernel::Fused;
        let e = super::check_groupnorm(&c, tch::Device::Cuda(0)).unwrap_err();
        assert!(e.downcast_ref::<CliError>().is_some());
        assert_eq!(
            crate::commands::error::status_of(&e),
            crate::error::ExitStatus::Usage
        );
        assert_eq!(
            e.to_string(),
            "--groupnorm fused reads channels-last (NHWC) activations, and this run is NCHW"
        );
        c.training.channels_last = true;
        super::check_groupnorm(&c, tch::Device::Cuda(0)).unwrap();
        c.training.groupnorm = GroupNormKernel::Aten;
        super::check_groupnorm(&c, tch::Device::Cpu).unwrap();
    }
}
