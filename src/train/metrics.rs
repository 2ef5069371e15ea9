//! Per-step metrics: `OUT/metrics.jsonl` (one JSON object per step, with
//! the GPUs' reading when a new one came during the step) and TensorBoard
//! scalars and sample images under `OUT/tb/`.
//!
//! Owns the record shape and the two sinks; only rank 0 creates a
//! [`MetricsWriter`]. Must not compute anything: the trainer measures.
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::gpu_watch::GpuSample;
use super::tensorboard::EventWriter;

/// One optimizer step, as logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Optimizer steps completed (1-based).
    pub step: u64,
    /// Mean-squared error of the noise prediction (unscaled).
    pub loss: f64,
    /// Learning rate used by this step.
    pub lr: f64,
    /// Global gradient L2 norm before clipping (unscaled).
    pub grad_norm: f64,
    /// Loss scale (1 outside fp16).
    pub loss_scale: f64,
    /// Images per second over this step, all ranks together.
    pub img_per_s: f64,
    /// Whether the update was skipped (fp16 overflow).
    pub skipped: bool,
    /// The GPUs' reading taken during this step (every few seconds, on a
    /// watched GPU run; absent from the other steps and from older files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuSample>,
}

/// Writes `metrics.jsonl` and TensorBoard events.
pub struct MetricsWriter {
    jsonl: BufWriter<File>,
    jsonl_path: PathBuf,
    tb: EventWriter,
    /// A damaged `metrics.jsonl` found when resuming, moved aside: where it
    /// went and what was wrong with it (the caller warns).
    pub set_aside: Option<(PathBuf, String)>,
}

/// The largest `metrics.jsonl` read back when resuming (256 MiB: about two
/// million steps' lines).
pub const MAX_METRICS_BYTES: u64 = 256 << 20;

/// The lines of `metrics.jsonl` up to `step` that a resumed run keeps, and
/// what was damaged in it, if anything: a side log that cannot be read, is
/// not a regular file, or holds lines that are not records (invalid UTF-8,
/// broken JSON) besides a last line cut short, is set aside whole and never
/// blocks the resume of an intact checkpoint.
fn kept_lines(path: &Path, step: u64) -> (Vec<String>, Option<String>) {
    let bytes = match crate::sys::fs::read_regular(path, MAX_METRICS_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Vec::new(), None),
        Err(e) => return (Vec::new(), Some(e.to_string())),
    };
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let mut kept = Vec::new();
    let mut bad = 0usize;
    for (i, line) in lines.iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        match std::str::from_utf8(line).ok().and_then(|text| {
            serde_json::from_str::<StepRecord>(text)
                .ok()
                .map(|r| (text, r))
        }) {
            Some((text, r)) if r.step <= step => kept.push(text.to_string()),
            Some(_) => {}
            // A last line without its newline: a write cut short, not damage.
            None if i + 1 == lines.len() => {}
            None => bad += 1,
        }
    }
    let damage = (bad > 0).then(|| format!("{bad} line(s) are not step records"));
    (kept, damage)
}

/// A name beside `path` that does not exist yet: `NAME.damaged`, then
/// `NAME.damaged.1`, …
fn aside_name(path: &Path) -> PathBuf {
    let free = |p: &Path| std::fs::symlink_metadata(p).is_err();
    let base = path.with_extension("jsonl.damaged");
    if free(&base) {
        return base;
    }
    (1..)
        .map(|n| path.with_extension(format!("jsonl.damaged.{n}")))
        .find(|p| free(p))
        .unwrap_or(base)
}

impl MetricsWriter {
    /// Opens the sinks in `out`. When resuming at `resume_step`, lines of
    /// steps after it (written before an interruption and now to be redone)
    /// are dropped from `metrics.jsonl`; a fresh run (`None`) starts it empty.
    pub fn open(out: &Path, resume_step: Option<u64>) -> std::io::Result<Self> {
        let jsonl_path = out.join("metrics.jsonl");
        let mut kept = Vec::new();
        let mut set_aside = None;
        if let Some(step) = resume_step {
            let (lines, damage) = kept_lines(&jsonl_path, step);
            kept = lines;
            if let Some(why) = damage {
                let aside = aside_name(&jsonl_path);
                std::fs::rename(&jsonl_path, &aside)?;
                set_aside = Some((aside, why));
            }
        } else if std::fs::symlink_metadata(&jsonl_path).is_ok_and(|m| !m.is_file()) {
            // A fresh run in a folder whose metrics.jsonl is a folder (or a FIFO).
            let aside = aside_name(&jsonl_path);
            std::fs::rename(&jsonl_path, &aside)?;
            set_aside = Some((aside, "it is not a regular file".to_string()));
        }
        let mut file = crate::sys::fs::open_nofollow(
            OpenOptions::new().create(true).write(true).truncate(true),
            &jsonl_path,
        )?;
        for line in kept {
            writeln!(file, "{line}")?;
        }
        let tb = EventWriter::create(&out.join("tb"))?;
        Ok(Self {
            jsonl: BufWriter::new(file),
            jsonl_path,
            tb,
            set_aside,
        })
    }

    /// Path of `metrics.jsonl`.
    pub fn jsonl_path(&self) -> &Path {
        &self.jsonl_path
    }

    /// Path of the TensorBoard event file.
    pub fn tb_path(&self) -> &Path {
        self.tb.path()
    }

    /// Appends one step to both sinks.
    pub fn record(&mut self, r: &StepRecord) -> std::io::Result<()> {
        let line = serde_json::to_string(r).map_err(std::io::Error::other)?;
        writeln!(self.jsonl, "{line}")?;
        self.tb.scalars(
            r.step as i64,
            &[
                ("train/loss", r.loss as f32),
                ("train/lr", r.lr as f32),
                ("train/grad_norm", r.grad_norm as f32),
                ("train/loss_scale", r.loss_scale as f32),
                ("train/img_per_s", r.img_per_s as f32),
            ],
        )?;
        if r.gpus.is_empty() {
            return Ok(());
        }
        let scalars = gpu_scalars(&r.gpus);
        let named: Vec<(&str, f32)> = scalars.iter().map(|(t, v)| (t.as_str(), *v)).collect();
        self.tb.scalars(r.step as i64, &named)
    }

    /// Adds a sample grid (PNG bytes) to TensorBoard.
    pub fn image(&mut self, step: u64, png: &[u8]) -> std::io::Result<()> {
        self.tb.png(step as i64, "samples", png)
    }

    /// Flushes both sinks.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.jsonl.flush()?;
        self.tb.flush()
    }
}

/// The TensorBoard scalars of a GPU reading, per GPU by NVML's index
/// (`gpu0/utilization_pct`, `gpu0/memory_used_gib`, `gpu0/power_w`,
/// `gpu0/temperature_c`, `gpu0/sm_clock_mhz`); what NVML did not answer is left out.
pub fn gpu_scalars(reading: &[GpuSample]) -> Vec<(String, f32)> {
    const GIB: f64 = (1u64 << 30) as f64;
    let mut out = Vec::new();
    for s in reading {
        let values = [
            ("utilization_pct", s.utilization_pct.map(f64::from)),
            (
                "memory_used_gib",
                s.memory_used_bytes.map(|b| b as f64 / GIB),
            ),
            ("power_w", s.power_w),
            ("temperature_c", s.temperature_c.map(f64::from)),
            ("sm_clock_mhz", s.sm_clock_mhz.map(f64::from)),
        ];
        for (name, v) in values {
            if let Some(v) = v {
                out.push((format!("gpu{}/{name}", s.index), v as f32));
            }
        }
    }
    out
}

/// Reads `metrics.jsonl` back.
pub fn read_jsonl(path: &Path) -> std::io::Result<Vec<StepRecord>> {
    let f = File::open(path)?;
    BufReader::new(f)
        .lines()
        .map(|l| serde_json::from_str(&l?).map_err(std::io::Error::other))
        .collect()
}
