//! `OUT/loss.png`: the run's curves for people — loss (raw and smoothed),
//! learning rate and gradient norm against the step — drawn from
//! `metrics.jsonl` by [`crate::plot`]. Reads the metrics file only; must not
//! touch the model or the run's state, so it can be redrawn at any time.
use std::path::{Path, PathBuf};

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

/// Draws `out/loss.png` from `records` (steps in order). Skipped fp16 steps
/// carry no gradient norm and are left out of that panel.
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
    let panels = [
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
    let last = records.last().map_or(0, |r| r.step);
    lines_png(&path, &format!("train-demo: {last} steps"), "step", &panels)?;
    Ok(path)
}

/// Redraws `out/loss.png` from `out/metrics.jsonl`.
pub fn redraw(out: &Path) -> std::io::Result<PathBuf> {
    draw(out, &read_jsonl(&out.join("metrics.jsonl"))?)
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
}
