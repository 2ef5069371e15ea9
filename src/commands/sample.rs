//! `imgctl sample`: loads a train-demo checkpoint (EMA weights by default)
//! and writes a PNG grid of generated images.
use crate::cli::SampleArgs;
use crate::error::ExitStatus;

/// Runs `imgctl sample`.
#[cfg(feature = "torch")]
pub fn run(args: SampleArgs) -> anyhow::Result<ExitStatus> {
    use tch::nn::VarStore;

    use crate::commands::error::CliError;
    use crate::output::printer;
    use crate::train::checkpoint;
    use crate::train::images::{grid_columns, write_grid_png};
    use crate::train::model::{weights, UNet2DModel};
    use crate::train::schedule::DdpmSchedule;

    let started = std::time::Instant::now();
    let sampler = args.sampler;
    DdpmSchedule::inference_timesteps(args.steps as i64)?;
    if args.num <= 0 {
        return Err(
            CliError::usage(format!("--num {} is not positive", args.num))
                .with_hint("ask for at least one image")
                .into(),
        );
    }
    let dir = checkpoint::resolve(&args.checkpoint)?;
    let state = checkpoint::read_state(&dir)?;
    let device = super::train_demo::options::parse_device(args.device.as_deref())?;
    // Fail on an unwritable output before spending time sampling.
    check_out_png(&args.out)?;
    let weights_file = dir.join(if args.no_ema {
        checkpoint::MODEL_FILE
    } else {
        checkpoint::EMA_FILE
    });
    let cfg = &state.config.model;
    // A checkpoint's model is checked as strictly as a --config's before
    // anything is built from it (a zero head dimension divided by zero).
    cfg.validate().map_err(|e| {
        e.context(format!(
            "the model in {}",
            dir.join(checkpoint::STATE_FILE).display()
        ))
    })?;
    crate::train::budget::check_sampling(cfg, args.num, device == tch::Device::Cpu)?;
    if let tch::Device::Cuda(index) = device {
        if let Some(free) = crate::train::session::cuda_free_bytes(index) {
            crate::train::budget::check_device_sampling(cfg, args.num, index, free)?;
        }
    }
    let vs = VarStore::new(device);
    let model = UNet2DModel::try_new(&vs.root(), cfg)?;
    weights::load_diffusers_state_dict(&vs, &weights_file)?;
    let (h, w) = cfg.sample_size.hw();
    let p = printer();
    p.info(format!(
        "sampling {} image(s) with {sampler} in {} steps from {} ({} weights, step {})",
        args.num,
        args.steps,
        dir.display(),
        if args.no_ema { "raw" } else { "EMA" },
        state.step
    ));
    // A step bar on a terminal; nothing otherwise, nor with --json.
    let bar = if args.json {
        indicatif::ProgressBar::hidden()
    } else {
        p.progress(
            args.steps as u64,
            "{spinner} [{elapsed_precise}] [{bar:25}] denoising step {pos}/{len}",
        )
    };
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    // Off a terminal (a notebook, `ssh host imgctl sample`, a log), a plain
    // line at each tenth of the steps, so a long run is never silent (#53 F19).
    let lines = !args.json && !p.interactive;
    let denoising = std::time::Instant::now();
    let mut said = 0u64;
    let steps = args.steps as u64;
    let images = DdpmSchedule::new(device).sample_observed(
        |x, t| model.forward(x, t),
        args.num,
        [cfg.in_channels, h, w],
        sampler,
        args.steps as i64,
        args.seed,
        device,
        |done| {
            bar.set_position(done);
            if lines && tenth_due(done, steps, &mut said) {
                p.info(format!(
                    "denoising step {done}/{steps} ({:.1} s)",
                    denoising.elapsed().as_secs_f64()
                ));
            }
        },
    );
    bar.finish_and_clear();
    let images = images?;
    let (width, height) = write_grid_png(&images, &args.out, None)?;
    p.info(format!("wrote {}", args.out.display()));
    if args.json {
        let n = args.num as usize;
        let columns = grid_columns(n).clamp(1, n);
        p.json(&SampleReport {
            schema_version: SAMPLE_REPORT_VERSION,
            png: args.out.clone(),
            count: n,
            grid: GridShape {
                columns,
                rows: n.div_ceil(columns),
            },
            width,
            height,
            tile: [h, w],
            sampler: sampler.to_string(),
            steps: args.steps,
            seed: args.seed,
            checkpoint: dir,
            checkpoint_step: state.step,
            weights: if args.no_ema { "raw" } else { "ema" },
            device: crate::train::session::device_name(device),
            seconds: started.elapsed().as_secs_f64(),
        })?;
    }
    Ok(ExitStatus::Success)
}

/// Whether `done` of `steps` passed a tenth not yet said (`said` holds the
/// last tenth said, and is moved on).
#[cfg_attr(not(feature = "torch"), allow(dead_code))]
fn tenth_due(done: u64, steps: u64, said: &mut u64) -> bool {
    let tenth = done * 10 / steps.max(1);
    if tenth > *said {
        *said = tenth;
        return true;
    }
    false
}

/// Version of the `sample --json` layout.
#[cfg(feature = "torch")]
pub const SAMPLE_REPORT_VERSION: u32 = 1;

/// What `imgctl sample --json` prints: the PNG it wrote and how.
#[cfg(feature = "torch")]
#[derive(Debug, serde::Serialize)]
struct SampleReport {
    /// Version of this layout.
    schema_version: u32,
    /// The PNG grid written (as given to --out).
    png: std::path::PathBuf,
    /// Images in the grid.
    count: usize,
    /// Tiles across and down.
    grid: GridShape,
    /// Width of the PNG in pixels.
    width: u32,
    /// Height of the PNG in pixels.
    height: u32,
    /// Height and width of one generated image (before enlargement).
    tile: [i64; 2],
    /// The sampler.
    sampler: String,
    /// Denoising steps.
    steps: usize,
    /// The seed.
    seed: u64,
    /// The checkpoint directory the weights came from.
    checkpoint: std::path::PathBuf,
    /// The training step of that checkpoint.
    checkpoint_step: u64,
    /// `ema` or `raw`.
    weights: &'static str,
    /// The device that sampled.
    device: String,
    /// Wall time of the whole command (loading, sampling, writing), seconds.
    seconds: f64,
}

/// Columns and rows of a sample grid.
#[cfg(feature = "torch")]
#[derive(Debug, serde::Serialize)]
struct GridShape {
    columns: usize,
    rows: usize,
}

/// Checks that `out` names a PNG file that can be created: a `.png`
/// extension (the grid is always PNG), not a directory, in a directory this
/// process can write (probed by creating and removing a file there). Exit 2
/// otherwise.
#[cfg(feature = "torch")]
fn check_out_png(out: &std::path::Path) -> anyhow::Result<()> {
    use crate::commands::error::CliError;
    let cannot = |why: String, hint: &str| -> anyhow::Error {
        CliError::usage(format!("cannot write {}: {why}", out.display()))
            .with_hint(hint.to_string())
            .into()
    };
    if out.is_dir() {
        return Err(cannot(
            "it is a directory".into(),
            "name a file inside it, e.g. --out DIR/grid.png",
        ));
    }
    let is_png = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if !is_png {
        return Err(cannot(
            "the grid is written as PNG, and the name does not end in .png".into(),
            "name the --out file *.png",
        ));
    }
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if !parent.is_dir() {
        return Err(cannot(
            format!("{} is not a directory", parent.display()),
            "create the directory first or choose another --out",
        ));
    }
    let probe = parent.join(format!(".imgctl-write-test-{}", std::process::id()));
    let written = std::fs::write(&probe, b"ok");
    // Removed whether or not the write worked (a full disk creates it empty).
    let removed = std::fs::remove_file(&probe);
    written.and(removed).map_err(|e| {
        cannot(
            format!("{} is not writable ({e})", parent.display()),
            "choose a writable --out location",
        )
    })?;
    Ok(())
}

/// Runs `imgctl sample` (unavailable without the `torch` feature).
#[cfg(not(feature = "torch"))]
pub fn run(_args: SampleArgs) -> anyhow::Result<ExitStatus> {
    Err(super::torch_missing("sample"))
}

#[cfg(test)]
mod tests {
    use super::tenth_due;

    #[test]
    fn a_line_is_due_at_each_tenth_once() {
        let mut said = 0;
        let due: Vec<u64> = (1..=50).filter(|d| tenth_due(*d, 50, &mut said)).collect();
        assert_eq!(due, vec![5, 10, 15, 20, 25, 30, 35, 40, 45, 50]);
        // Fewer steps than tenths: every step once, the last included.
        let mut said = 0;
        let due: Vec<u64> = (1..=3).filter(|d| tenth_due(*d, 3, &mut said)).collect();
        assert_eq!(due, vec![1, 2, 3]);
    }
}
