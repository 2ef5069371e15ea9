//! The PyTorch reference run for `--compare`: the embedded
//! `scripts/bench_reference.py`, fed with imgctl's own model config and
//! batches, run by [`python`] (`$IMGCTL_PYTHON`, else the set-up venv's, else `python3`).
//!
//! The script is compiled into the binary (`include_str!`) and written to a
//! temporary directory, so `--compare` works from an installed binary or inside
//! an image, not only from a checkout. This module owns the hand-off (config
//! file, batch file, the JSON the script prints); it must not time anything
//! itself.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::env_vars as ev;
use crate::train::data::{build_batch, PermCache, StreamSpec};
use crate::train::session::{open_dataset, RunOptions};

/// The reference run cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    /// The interpreter cannot be started (exit 2).
    #[error("cannot run the PyTorch reference with `{python}`: {error}")]
    Spawn {
        /// The interpreter ([`python`]).
        python: String,
        /// Why not.
        error: std::io::Error,
    },
    /// The interpreter runs but cannot import what the reference needs
    /// (checked before imgctl's half of `--compare` runs; exit 2).
    #[error("the PyTorch reference's interpreter `{python}` cannot import {missing}: {why}")]
    Imports {
        /// The interpreter ([`python`]).
        python: String,
        /// What failed to import (`torch, diffusers`).
        missing: String,
        /// Python's last line (`ModuleNotFoundError: No module named 'torch'`).
        why: String,
    },
}

/// The reference script, as shipped in the repository.
pub const SCRIPT: &str = include_str!("../../../scripts/bench_reference.py");

/// Distinct batches handed to the reference (cycled through; enough that the
/// data is not one repeated batch, small enough to write quickly).
pub const REFERENCE_BATCHES: usize = 4;

/// How long one reference run may take before it is stopped (the default
/// model's first torch.compile takes minutes; 30 min bounds a stuck run).
/// `$IMGCTL_REFERENCE_TIMEOUT` (seconds) overrides it.
pub const REFERENCE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The reference deadline: `$IMGCTL_REFERENCE_TIMEOUT` seconds, else
/// [`REFERENCE_TIMEOUT`]; a malformed value is a usage error (exit 2).
pub fn reference_timeout() -> anyhow::Result<Duration> {
    ev::seconds(ev::IMGCTL_REFERENCE_TIMEOUT, REFERENCE_TIMEOUT)
}

/// What the script reports (its JSON, one object).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReferenceRun {
    /// `eager` (diffusers' recipe), `compile`, or `eager_matched` (imgctl's
    /// recipe: fused AdamW, and in bf16 bf16 weights over fp32 master weights).
    pub mode: String,
    /// Whether it ran.
    pub ok: bool,
    /// Why not.
    #[serde(default)]
    pub error: Option<String>,
    /// Images per second.
    #[serde(default)]
    pub img_per_s: Option<f64>,
    /// Mean step wall time.
    #[serde(default)]
    pub step_ms_mean: Option<f64>,
    /// Median step wall time.
    #[serde(default)]
    pub step_ms_median: Option<f64>,
    /// torch.cuda.max_memory_allocated.
    #[serde(default)]
    pub peak_allocated_bytes: Option<u64>,
    /// torch.cuda.max_memory_reserved.
    #[serde(default)]
    pub peak_reserved_bytes: Option<u64>,
    /// torch.cuda.mem_get_info (total − free), the same measure imgctl reports.
    #[serde(default)]
    pub device_used_peak_bytes: Option<u64>,
    /// The same measure before the model was built (the script's CUDA context
    /// plus memory other processes hold, imgctl's included).
    #[serde(default)]
    pub device_used_baseline_bytes: Option<u64>,
    /// The model and inputs ran in channels-last layout.
    #[serde(default)]
    pub channels_last: Option<bool>,
    /// diffusers' gradient checkpointing was on.
    #[serde(default)]
    pub gradient_checkpointing: Option<bool>,
    /// torch.backends.cudnn.benchmark was on.
    #[serde(default)]
    pub cudnn_benchmark: Option<bool>,
    /// Parameters of the diffusers model (must equal imgctl's).
    #[serde(default)]
    pub params: Option<i64>,
    /// torch.__version__.
    #[serde(default)]
    pub torch_version: Option<String>,
    /// diffusers.__version__.
    #[serde(default)]
    pub diffusers_version: Option<String>,
    /// The device name torch reports.
    #[serde(default)]
    pub device_name: Option<String>,
    /// Warm-up seconds (includes torch.compile's compilation).
    #[serde(default)]
    pub warmup_s: Option<f64>,
    /// Loss of the last timed step.
    #[serde(default)]
    pub last_loss: Option<f64>,
    /// The optimizer implementation torch chose ("AdamW foreach" on CUDA).
    #[serde(default)]
    pub optimizer: Option<String>,
    /// How the precision is realised (`autocast bf16, fp32 weights`, `bf16
    /// weights over fp32 master weights`, `fp32`).
    #[serde(default)]
    pub recipe: Option<String>,
    /// Wall time of the whole reference process (interpreter start, imports,
    /// warm-up, timed steps), seconds, as imgctl measured it; up to the kill
    /// for a run past its deadline.
    #[serde(default)]
    pub wall_s: Option<f64>,
}

/// The interpreter: `$IMGCTL_PYTHON`; else `$IMGCTL_VENV/bin/python` when it
/// exists (the venv scripts/setup.sh made, with torch and diffusers;
/// `.cargo/config.toml` points IMGCTL_VENV at the repository's `.venv`, so
/// `cargo run` finds it); else the Python of the venv whose libtorch this
/// process runs on (a release binary started from anywhere: the venv
/// `make build` linked it against); else `python3` from PATH (inside an
/// image built by imgctl, where torch is the system Python's).
pub fn python() -> String {
    let own = crate::sys::procmaps::mapped_library("libtorch_cpu.so")
        .and_then(|lib| venv_python_of(&lib))
        .map(|p| p.to_string_lossy().into_owned());
    python_from(|k| std::env::var(k).ok(), own)
}

fn python_from(get: impl Fn(&str) -> Option<String>, own_venv: Option<String>) -> String {
    let set = |k: &str| get(k).filter(|s| !s.trim().is_empty());
    if let Some(p) = set(ev::IMGCTL_PYTHON) {
        return p;
    }
    if let Some(v) = set(ev::IMGCTL_VENV) {
        let py = Path::new(&v).join("bin").join("python");
        if py.exists() {
            return py.to_string_lossy().into_owned();
        }
    }
    own_venv.unwrap_or_else(|| "python3".into())
}

/// The `bin/python` of the venv that holds `libtorch` (a path such as
/// `VENV/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so`), when it
/// exists; None for a libtorch outside a venv (a standalone download).
pub fn venv_python_of(libtorch: &Path) -> Option<PathBuf> {
    // FILE → torch/lib → torch → site-packages → python3.X → lib → VENV
    let venv = libtorch.ancestors().nth(6)?;
    let site = libtorch.ancestors().nth(3)?;
    if site.file_name()? != "site-packages" {
        return None;
    }
    let py = venv.join("bin").join("python");
    py.exists().then_some(py)
}

/// What the reference script imports; checked before any benchmarking.
const REFERENCE_IMPORTS: &str = "torch, diffusers";

/// Checks that [`python`] starts and imports torch and diffusers, so that
/// `--compare` fails in seconds, before imgctl's half runs, rather than after.
pub fn check_imports() -> anyhow::Result<String> {
    let py = python();
    let out = Command::new(&py)
        .args(["-c", &format!("import {REFERENCE_IMPORTS}")])
        .stdin(Stdio::null())
        .output()
        .map_err(|error| ReferenceError::Spawn {
            python: py.clone(),
            error,
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(ReferenceError::Imports {
            python: py,
            missing: REFERENCE_IMPORTS.into(),
            why: stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("it exited without saying why")
                .trim()
                .to_string(),
        }
        .into());
    }
    Ok(py)
}

/// Writes the script, the diffusers config and `REFERENCE_BATCHES` batches of
/// `batch` images from the run's data (same stream as imgctl's rank 0 of a
/// one-rank run) into `dir`.
pub fn prepare(dir: &Path, run: &RunOptions, batch: usize) -> anyhow::Result<()> {
    std::fs::write(dir.join("bench_reference.py"), SCRIPT)?;
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&run.config.model.to_diffusers_json())?,
    )?;
    let data = open_dataset(&run.data, &run.config)?;
    let spec = StreamSpec {
        seed: run.config.training.seed,
        batch_size: batch,
        rank: 0,
        world_size: 1,
        start_position: 0,
    };
    let mut cache = PermCache::default();
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("batches.bin"))?);
    for k in 0..REFERENCE_BATCHES as u64 {
        let b = build_batch(&data, &spec, k, &mut cache);
        for v in &b.images {
            f.write_all(&v.to_le_bytes())?;
        }
        for v in &b.noise {
            f.write_all(&v.to_le_bytes())?;
        }
        for v in &b.timesteps {
            f.write_all(&v.to_le_bytes())?;
        }
    }
    f.flush()?;
    Ok(())
}

/// Settings of one reference run.
#[derive(Debug, Clone)]
pub struct ReferenceArgs {
    /// Images per step.
    pub batch: usize,
    /// Image side.
    pub image_size: u32,
    /// Input channels.
    pub channels: i64,
    /// fp32, fp16, bf16.
    pub precision: String,
    /// `cuda` or `cpu`.
    pub device: String,
    /// Warm-up steps.
    pub warmup: u64,
    /// Timed steps.
    pub steps: u64,
    /// Peak learning rate.
    pub lr: f64,
    /// Seed.
    pub seed: u64,
    /// Wrap the model in torch.compile.
    pub compile: bool,
    /// Train with imgctl's recipe (`--recipe imgctl`) instead of diffusers'.
    pub matched: bool,
    /// Channels-last memory layout for the model and its inputs.
    pub channels_last: bool,
    /// diffusers' `enable_gradient_checkpointing()`.
    pub gradient_checkpointing: bool,
    /// Profile the timed steps and write their Chrome trace here
    /// (`--op-profile`).
    pub op_profile: Option<PathBuf>,
}

impl ReferenceArgs {
    /// The reference run that mirrors `opts` with `batch` images a step:
    /// the same model input, precision, device, steps, learning rate, seed,
    /// layout and checkpointing; eager, diffusers' recipe, not profiled.
    pub fn for_run(opts: &super::BenchOptions, batch: usize) -> anyhow::Result<Self> {
        let run = &opts.run;
        let training = &run.config.training;
        Ok(Self {
            batch,
            image_size: run.config.image_size()?,
            channels: run.config.model.in_channels,
            precision: run.precision.name().into(),
            device: match run.device {
                tch::Device::Cuda(i) => format!("cuda:{i}"),
                _ => "cpu".into(),
            },
            warmup: opts.warmup,
            steps: opts.steps,
            lr: training.lr,
            seed: training.seed,
            compile: false,
            matched: false,
            channels_last: training.channels_last,
            gradient_checkpointing: training.gradient_checkpointing,
            op_profile: None,
        })
    }
}

/// Runs the script prepared in `dir` and parses its JSON. A missing
/// interpreter is an error (exit 2); a script that ran but could not train
/// (no diffusers, compile unavailable) comes back as `ok: false` with the
/// reason. Either way the process's wall time is in [`ReferenceRun::wall_s`].
pub fn run(dir: &Path, a: &ReferenceArgs) -> anyhow::Result<ReferenceRun> {
    let started = Instant::now();
    let mut r = run_process(dir, a)?;
    r.wall_s = Some(started.elapsed().as_secs_f64());
    Ok(r)
}

fn run_process(dir: &Path, a: &ReferenceArgs) -> anyhow::Result<ReferenceRun> {
    let timeout = reference_timeout()?;
    let py = python();
    let mut cmd = Command::new(&py);
    cmd.arg(dir.join("bench_reference.py"))
        .arg("--unet-config")
        .arg(dir.join("config.json"))
        .arg("--data")
        .arg(dir.join("batches.bin"))
        .args(["--batches", &REFERENCE_BATCHES.to_string()])
        .args(["--batch-size", &a.batch.to_string()])
        .args(["--image-size", &a.image_size.to_string()])
        .args(["--channels", &a.channels.to_string()])
        .args(["--precision", &a.precision])
        .args(["--device", &a.device])
        .args(["--warmup", &a.warmup.to_string()])
        .args(["--steps", &a.steps.to_string()])
        .args(["--lr", &a.lr.to_string()])
        .args(["--seed", &a.seed.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if a.compile {
        cmd.arg("--compile");
    }
    // The reference on the CPU gets the threads imgctl's run got (the same
    // choice, in this process): a ratio of equals.
    if a.device == "cpu" && std::env::var_os(crate::env_vars::OMP_NUM_THREADS).is_none() {
        cmd.env(
            crate::env_vars::OMP_NUM_THREADS,
            tch::get_num_threads().to_string(),
        );
    }
    if a.matched {
        cmd.args(["--recipe", "imgctl"]);
    }
    if a.channels_last {
        cmd.arg("--channels-last");
    }
    if a.gradient_checkpointing {
        cmd.arg("--gradient-checkpointing");
    }
    if let Some(trace) = &a.op_profile {
        cmd.arg("--op-profile").arg(trace);
    }
    let child = cmd.spawn().map_err(|error| ReferenceError::Spawn {
        python: py.clone(),
        error,
    })?;
    let pid = child.id();
    let deadline = Instant::now() + timeout;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let mode = if a.compile {
        "compile"
    } else if a.matched {
        "eager_matched"
    } else {
        "eager"
    };
    let out = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(r) => break r?,
            Err(_) if Instant::now() >= deadline => {
                // kill(2) on our own child.
                let _ = crate::sys::process::kill(pid as i32, libc::SIGKILL);
                // Reap it, so no zombie is left behind.
                let _ = rx.recv_timeout(Duration::from_secs(5));
                // A run that overstays is a result (not ok), so the other
                // modes are still compared.
                let secs = timeout.as_secs_f64();
                return Ok(ReferenceRun {
                    mode: mode.into(),
                    ok: false,
                    error: Some(format!(
                        "stopped after {} s ({} to change the limit)",
                        if secs.fract() == 0.0 {
                            format!("{secs:.0}")
                        } else {
                            format!("{secs:.1}")
                        },
                        ev::IMGCTL_REFERENCE_TIMEOUT
                    )),
                    ..Default::default()
                });
            }
            Err(_) => {}
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    match line.map(serde_json::from_str::<ReferenceRun>) {
        Some(Ok(r)) => Ok(r),
        _ => {
            // A crash is a result (not ok) too: imgctl's own figures are
            // still reported, and the caller decides the exit status.
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            Ok(ReferenceRun {
                mode: mode.into(),
                ok: false,
                error: Some(format!(
                    "`{py}` printed no result ({}): {}",
                    out.status,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )),
                ..Default::default()
            })
        }
    }
}

/// `--compare`: imgctl's report, the reference runs and the ratios.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CompareReport {
    /// [`super::SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `imgctl.train_compare`.
    pub kind: String,
    /// imgctl's run.
    pub imgctl: super::BenchReport,
    /// The reference runs (eager, and compile where it was attempted).
    pub pytorch: Vec<ReferenceRun>,
    /// imgctl img/s per device ÷ PyTorch eager img/s.
    pub ratio_vs_eager: Option<f64>,
    /// imgctl img/s per device ÷ PyTorch torch.compile img/s.
    pub ratio_vs_compile: Option<f64>,
    /// imgctl img/s per device ÷ PyTorch eager with imgctl's recipe: the
    /// framework alone, the training recipe held equal.
    #[serde(default)]
    pub ratio_vs_matched: Option<f64>,
    /// Why torch.compile was not run, when it was not.
    pub compile_note: Option<String>,
}

impl CompareReport {
    /// Assembles the report and its ratios (per device: the reference runs on one device).
    pub fn new(
        imgctl: super::BenchReport,
        pytorch: Vec<ReferenceRun>,
        compile_note: Option<String>,
    ) -> Self {
        let ratio = |mode: &str| {
            pytorch
                .iter()
                .find(|r| r.mode == mode && r.ok)
                .and_then(|r| r.img_per_s)
                .filter(|v| *v > 0.0)
                .map(|v| imgctl.img_per_s_per_device / v)
        };
        Self {
            schema_version: super::SCHEMA_VERSION,
            kind: "imgctl.train_compare".into(),
            ratio_vs_eager: ratio("eager"),
            ratio_vs_compile: ratio("compile"),
            ratio_vs_matched: ratio("eager_matched"),
            imgctl,
            pytorch,
            compile_note,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interpreter_prefers_imgctl_python_then_the_venv() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().to_string_lossy().into_owned();
        let env = |pairs: &'static [(&'static str, &'static str)], venv: &str| {
            let venv = venv.to_string();
            move |k: &str| {
                if k == ev::IMGCTL_VENV {
                    return Some(venv.clone());
                }
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        // A venv without bin/python does not count.
        assert_eq!(python_from(env(&[], &venv), None), "python3");
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/python"), "").unwrap();
        assert_eq!(
            python_from(env(&[], &venv), None),
            dir.path().join("bin/python").to_string_lossy()
        );
        assert_eq!(
            python_from(env(&[("IMGCTL_PYTHON", "/opt/py")], &venv), None),
            "/opt/py"
        );
        assert_eq!(python_from(|_| None, None), "python3");
        // Started from anywhere (no IMGCTL_VENV), the venv of its own libtorch.
        assert_eq!(
            python_from(|_| None, Some("/v/bin/python".into())),
            "/v/bin/python"
        );
    }

    #[test]
    fn the_venv_of_a_libtorch_is_found_only_where_a_venv_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir
            .path()
            .join("lib/python3.11/site-packages/torch/lib/libtorch_cpu.so");
        assert_eq!(venv_python_of(&lib), None, "no bin/python yet");
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/python"), "").unwrap();
        assert_eq!(venv_python_of(&lib), Some(dir.path().join("bin/python")));
        // A standalone libtorch (libtorch/lib/libtorch_cpu.so) has no venv.
        assert_eq!(
            venv_python_of(&dir.path().join("opt/libtorch/lib/libtorch_cpu.so")),
            None
        );
    }
}
