//! `OUT/loss.png`: the run's curves for people — loss (raw and smoothed),
//! learning rate and gradient norm against the step, and on a watched GPU
//! run the GPUs' utilisation and memory — drawn from
//! `metrics.jsonl` by [`crate::plot`]. Reads the metrics file only; must not
//! touch the model or the run's state, so it can be redrawn at any time.
use std::path::{Path, PathBuf};

use super::events::{Events, RunEvent};
use super::gpu_watch::load_of;
use super::metrics::{read_jsonl, StepRecord};
use crate::plot::{lines_png, Panel, Series, PALETTE};

/// The file name of the curves, next to `metrics.jsonl`.
pub const LOSS_PNG: &str = "loss.png";

/// Smoothing of the bold curves: an exponential moving average with this
/// weight on the past, debiased at the start (TensorBoard's scalar smoothing).
pub const SMOOTHING: f64 = 0.9;

/// `values` smoothed by a debiased exponential moving average (`weight` on the
/// past); non-finite values are skipped and keep the last smoothed value.
pub fn smooth(values: &[(f64, f64)], weight: f64) -> Vec<(f64, f64)> {
    let mut avg = 0.0;
    let mut n = 0i32;
    let mut out = Vec::with_capacity(values.len());
    for &(x, y) in values {
        if !y.is_finite() {
            continue;
        }
        n += 1;
        avg = weight * avg + (1.0 - weight) * y;
        out.push((x, avg / (1.0 - weight.powi(n))));
    }
    out
}

/// The GPU panel's two lines, in percent against the step: utilisation
/// (the mean of the GPUs read) and memory used (the fullest GPU's, as a
/// share of its memory); both empty when no step carries a reading.
fn gpu_lines(records: &[StepRecord]) -> [Vec<(f64, f64)>; 2] {
    let mut util = Vec::new();
    let mut memory = Vec::new();
    for r in records {
        let Some(load) = load_of(&r.gpus) else {
            continue;
        };
        if let Some(u) = load.utilization_pct {
            util.push((r.step as f64, u));
        }
        if let (Some(used), Some(total)) = (load.memory_used_bytes, load.memory_total_bytes) {
            if total > 0 {
                memory.push((r.step as f64, used as f64 / total as f64 * 100.0));
            }
        }
    }
    [util, memory]
}

/// Draws `out/loss.png` from `records` (steps in order). Skipped fp16 steps
/// carry no gradient norm and are left out of that panel. A fourth panel
/// shows the GPUs when steps carry readings.
pub fn draw(out: &Path, records: &[StepRecord]) -> std::io::Result<PathBuf> {
    let path = out.join(LOSS_PNG);
    let loss: Vec<(f64, f64)> = records.iter().map(|r| (r.step as f64, r.loss)).collect();
    let lr: Vec<(f64, f64)> = records.iter().map(|r| (r.step as f64, r.lr)).collect();
    let grad: Vec<(f64, f64)> = records
        .iter()
        .filter(|r| !r.skipped)
        .map(|r| (r.step as f64, r.grad_norm))
        .collect();
    let loss_smooth = smooth(&loss, SMOOTHING);
    let grad_smooth = smooth(&grad, SMOOTHING);
    let line = |label, points, color, faint| Series {
        label,
        points,
        color,
        faint,
    };
    let mut panels = vec![
        Panel {
            title: "loss (MSE of the predicted noise)",
            series: vec![
                line("raw", &loss, PALETTE[0], true),
                line("smoothed", &loss_smooth, PALETTE[0], false),
            ],
            log_y: true,
            y_zero: false,
            x_ticks: None,
        },
        Panel {
            title: "learning rate",
            series: vec![line("lr", &lr, PALETTE[1], false)],
            log_y: false,
            y_zero: false,
            x_ticks: None,
        },
        Panel {
            title: "gradient norm (L2, before clipping)",
            series: vec![
                line("raw", &grad, PALETTE[2], true),
                line("smoothed", &grad_smooth, PALETTE[2], false),
            ],
            log_y: true,
            y_zero: false,
            x_ticks: None,
        },
    ];
    let [util, memory] = gpu_lines(records);
    let several = records.iter().any(|r| r.gpus.len() > 1);
    let (util_label, memory_label) = if several {
        ("utilisation (mean)", "memory used (fullest GPU)")
    } else {
        ("utilisation", "memory used")
    };
    if !util.is_empty() || !memory.is_empty() {
        panels.push(Panel {
            title: "GPU (% of time a kernel ran; % of its memory)",
            series: vec![
                line(util_label, &util, PALETTE[3], false),
                line(memory_label, &memory, PALETTE[4], false),
            ],
            log_y: false,
            y_zero: true,
            x_ticks: None,
        });
    }
    let last = records.last().map_or(0, |r| r.step);
    lines_png(&path, &format!("train-demo: {last} steps"), "step", &panels)?;
    Ok(path)
}

/// Redraws `out/loss.png` from `out/metrics.jsonl`.
pub fn redraw(out: &Path) -> std::io::Result<PathBuf> {
    draw(out, &read_jsonl(&out.join("metrics.jsonl"))?)
}

/// [`redraw`] for a run: a failure is a warning (once per run: `warned`),
/// never the run's end, the numbers being in metrics.jsonl and TensorBoard
/// either way.
pub fn redraw_warned(out: &Path, warned: &mut bool, events: Events) -> Option<PathBuf> {
    match redraw(out) {
        Ok(path) => Some(path),
        Err(e) => {
            if !std::mem::replace(warned, true) {
                events(&RunEvent::Warning(format!(
                    "could not draw {}: {e}",
                    out.join(LOSS_PNG).display()
                )));
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_is_debiased_and_skips_gaps() {
        let s = smooth(&[(1.0, 2.0), (2.0, f64::NAN), (3.0, 2.0)], 0.9);
        assert_eq!(s.len(), 2);
        assert!(
            (s[0].1 - 2.0).abs() < 1e-12,
            "a constant stays constant from the first step: {s:?}"
        );
        assert!((s[1].1 - 2.0).abs() < 1e-12);
    }

    #[test]
    fn draws_the_three_panels_from_records() {
        let dir = tempfile::tempdir().unwrap();
        let records: Vec<StepRecord> = (1..=300)
            .map(|step| StepRecord {
                step,
                loss: 1.0 / (1.0 + step as f64 / 30.0) + 0.02 * ((step % 7) as f64),
                lr: 1e-4 * (step as f64 / 300.0).min(1.0),
                grad_norm: if step == 5 {
                    f64::INFINITY
                } else {
                    0.5 + 0.1 * ((step % 5) as f64)
                },
                loss_scale: 1.0,
                img_per_s: 10.0,
                skipped: step == 5,
                gpus: Vec::new(),
            })
            .collect();
        let path = draw(dir.path(), &records).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        assert_eq!(img.height(), 34 + 3 * 250);
        // Each panel's bold colour is present.
        for color in [PALETTE[0], PALETTE[1], PALETTE[2]] {
            let n = img
                .pixels()
                .filter(|p| p.0 == [color.0, color.1, color.2])
                .count();
            assert!(n > 200, "{color:?}: {n} pixels");
        }
    }

    #[test]
    fn a_gpu_panel_joins_when_steps_carry_readings() {
        use crate::train::gpu_watch::GpuSample;
        let dir = tempfile::tempdir().unwrap();
        let reading = |step: u64| {
            (0..2)
                .map(|index| GpuSample {
                    index,
                    rank: index as usize,
                    utilization_pct: Some(if step < 20 { 35 } else { 95 + index }),
                    memory_used_bytes: Some((40 + step.min(60) / 3 + index as u64 * 4) << 30),
                    memory_total_bytes: Some(150_754_820_096),
                    power_w: Some(650.0),
                    temperature_c: Some(70),
                    sm_clock_mhz: Some(1980),
                    throttle_reasons: Some(Vec::new()),
                })
                .collect()
        };
        let records: Vec<StepRecord> = (1..=200)
            .map(|step| StepRecord {
                step,
                loss: 1.0 / (1.0 + step as f64 / 30.0),
                lr: 1e-4,
                grad_norm: 0.5,
                loss_scale: 1.0,
                img_per_s: 10.0,
                skipped: false,
                gpus: if step % 5 == 1 {
                    reading(step)
                } else {
                    Vec::new()
                },
            })
            .collect();
        let path = draw(dir.path(), &records).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        assert_eq!(img.height(), 34 + 4 * 250);
        for color in [PALETTE[3], PALETTE[4]] {
            let n = img
                .pixels()
                .filter(|p| p.0 == [color.0, color.1, color.2])
                .count();
            assert!(n > 200, "{color:?}: {n} pixels");
        }
        let [util, memory] = gpu_lines(&records);
        assert_eq!(util.len(), 40);
        assert_eq!(util[0], (1.0, 35.0));
        assert_eq!(util[39], (196.0, 95.5));
        // The fullest GPU (GPU 1): 44 GiB + 196/3 capped at 60/3 = 64 GiB.
        let share = (64u64 << 30) as f64 / 150_754_820_096.0 * 100.0;
        assert!((memory[39].1 - share).abs() < 1e-9, "{:?}", memory[39]);
    }
}
