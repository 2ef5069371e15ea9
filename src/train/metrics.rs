//! Per-step metrics: `OUT/metrics.jsonl` (one JSON object per step) and
//! TensorBoard scalars and sample images under `OUT/tb/`.
//!
//! Owns the record shape and the two sinks; only rank 0 creates a
//! [`MetricsWriter`]. Must not compute anything: the trainer measures.
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
}

/// Writes `metrics.jsonl` and TensorBoard events.
pub struct MetricsWriter {
    jsonl: BufWriter<File>,
    jsonl_path: PathBuf,
    tb: EventWriter,
}

impl MetricsWriter {
    /// Opens the sinks in `out`. When resuming at `resume_step`, lines of
    /// steps after it (written before an interruption and now to be redone)
    /// are dropped from `metrics.jsonl`; a fresh run (`None`) starts it empty.
    pub fn open(out: &Path, resume_step: Option<u64>) -> std::io::Result<Self> {
        let jsonl_path = out.join("metrics.jsonl");
        let mut kept = Vec::new();
        if let Some(step) = resume_step {
            if let Ok(f) = File::open(&jsonl_path) {
                for line in BufReader::new(f).lines() {
                    let line = line?;
                    match serde_json::from_str::<StepRecord>(&line) {
                        Ok(r) if r.step <= step => kept.push(line),
                        _ => {}
                    }
                }
            }
        }
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&jsonl_path)?;
        for line in kept {
            writeln!(file, "{line}")?;
        }
        let tb = EventWriter::create(&out.join("tb"))?;
        Ok(Self {
            jsonl: BufWriter::new(file),
            jsonl_path,
            tb,
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
        )
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

/// Reads `metrics.jsonl` back.
pub fn read_jsonl(path: &Path) -> std::io::Result<Vec<StepRecord>> {
    let f = File::open(path)?;
    BufReader::new(f)
        .lines()
        .map(|l| serde_json::from_str(&l?).map_err(std::io::Error::other))
        .collect()
}
