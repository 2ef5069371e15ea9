//! The benchmark's pictures: `--scaling` as img/s and efficiency against the
//! rank count, `--compare` as bars of imgctl against each PyTorch reference
//! (per device, as the ratios are). Drawn by [`crate::plot`]; reads finished
//! reports only and measures nothing.
use std::path::Path;

use super::reference::CompareReport;
use super::ScalingReport;
use crate::plot::{bars_png, lines_png, Bar, Panel, Series, PALETTE};

/// Draws `--scaling`'s chart: total img/s (with the ideal line, 1 rank's
/// img/s × ranks) and the scaling efficiency, against the rank count.
pub fn scaling_png(path: &Path, s: &ScalingReport) -> std::io::Result<()> {
    let total: Vec<(f64, f64)> = s
        .rows
        .iter()
        .map(|r| (r.ranks as f64, r.img_per_s))
        .collect();
    let base = s.rows.first().map_or(0.0, |r| r.img_per_s_per_device);
    let ideal: Vec<(f64, f64)> = s
        .rows
        .iter()
        .map(|r| (r.ranks as f64, base * r.ranks as f64))
        .collect();
    let efficiency: Vec<(f64, f64)> = s
        .rows
        .iter()
        .map(|r| (r.ranks as f64, 100.0 * r.efficiency))
        .collect();
    let ranks: Vec<f64> = s.rows.iter().map(|r| r.ranks as f64).collect();
    let device = s.runs.first().map_or("", |r| r.device.as_str());
    let precision = s.runs.first().map_or("", |r| r.precision.as_str());
    let panels = [
        Panel {
            title: "images per second, all ranks",
            series: vec![
                Series {
                    label: "ideal",
                    points: &ideal,
                    color: PALETTE[1],
                    faint: true,
                },
                Series {
                    label: "measured",
                    points: &total,
                    color: PALETTE[0],
                    faint: false,
                },
            ],
            log_y: false,
            y_zero: true,
            x_ticks: Some(&ranks),
        },
        Panel {
            title: "scaling efficiency (%)",
            series: vec![Series {
                label: "efficiency",
                points: &efficiency,
                color: PALETTE[2],
                faint: false,
            }],
            log_y: false,
            y_zero: true,
            x_ticks: Some(&ranks),
        },
    ];
    lines_png(
        path,
        &format!("train-demo scaling: {device}, {precision}"),
        "ranks",
        &panels,
    )
}

/// Draws `--compare`'s chart: img/s per device of imgctl and of each
/// reference that ran.
pub fn compare_png(path: &Path, c: &CompareReport) -> std::io::Result<()> {
    let names: Vec<(String, f64)> =
        std::iter::once(("imgctl".to_string(), c.imgctl.img_per_s_per_device))
            .chain(c.pytorch.iter().filter(|r| r.ok).filter_map(|r| {
                let name = match r.mode.as_str() {
                    "eager" => "PyTorch eager (diffusers' recipe)".to_string(),
                    "eager_matched" => "PyTorch eager (imgctl's recipe)".to_string(),
                    "compile" => "torch.compile".to_string(),
                    other => other.to_string(),
                };
                r.img_per_s.map(|v| (name, v))
            }))
            .collect();
    let bars: Vec<Bar<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, (label, value))| Bar {
            label,
            value: *value,
            color: PALETTE[i % PALETTE.len()],
        })
        .collect();
    let title = format!(
        "train-demo against PyTorch: {}, {}, batch {}",
        c.imgctl.device, c.imgctl.precision, c.imgctl.batch_per_rank
    );
    bars_png(path, &title, "images per second per device", &bars)
}
