//! Charts as PNG files, for people who would rather look than read: the
//! training curves (`loss.png`) and the benchmark's scaling and comparison
//! charts.
//!
//! Lines, grids and bars are drawn by plotters' bitmap backend into a buffer;
//! text comes from font8x8's public-domain 8×8 glyphs, so no system font (and
//! no font file) is needed. Files are written atomically (a temporary file,
//! then a rename), so a reader never sees half a picture. A leaf: it knows
//! nothing of training or benchmarks, only of series and bars.
use std::path::Path;

use plotters::prelude::*;

/// A colour as red, green, blue.
pub type Rgb = (u8, u8, u8);

/// Colours that stay apart for common colour blindness (Okabe–Ito palette).
pub const PALETTE: [Rgb; 6] = [
    (0, 114, 178),
    (213, 94, 0),
    (0, 158, 115),
    (204, 121, 167),
    (230, 159, 0),
    (86, 180, 233),
];

/// One line of a panel.
#[derive(Debug, Clone)]
pub struct Series<'a> {
    /// The legend entry.
    pub label: &'a str,
    /// `(x, y)` points in x order; non-finite points are skipped.
    pub points: &'a [(f64, f64)],
    /// The line's colour.
    pub color: Rgb,
    /// A thin, pale line (raw values under a smoothed curve) instead of a bold one.
    pub faint: bool,
}

/// One chart of a figure: its title and its lines over a shared x axis.
#[derive(Debug, Clone)]
pub struct Panel<'a> {
    /// The title above the chart (says what y is and in which unit).
    pub title: &'a str,
    /// The lines.
    pub series: Vec<Series<'a>>,
    /// A logarithmic y axis (for values that fall over decades, like a loss).
    pub log_y: bool,
    /// The y axis starts at zero (rates, percentages) instead of at the data.
    pub y_zero: bool,
    /// Ticks at these x values (the measured rank counts) instead of round ones.
    pub x_ticks: Option<&'a [f64]>,
}

/// One bar of a bar chart.
#[derive(Debug, Clone)]
pub struct Bar<'a> {
    /// The name under the bar.
    pub label: &'a str,
    /// Its height (non-negative).
    pub value: f64,
    /// Its colour.
    pub color: Rgb,
}

const WIDTH: u32 = 960;
const PANEL_HEIGHT: u32 = 250;
const TITLE_HEIGHT: u32 = 34;
const LEFT: i32 = 84;
const RIGHT: i32 = 24;
const PANEL_TOP: i32 = 26;
const PANEL_BOTTOM: i32 = 34;
const TEXT: Rgb = (40, 40, 40);
const GRID: Rgb = (225, 225, 225);

/// A piece of text to paint once plotters is done with the buffer.
struct Label {
    x: i32,
    y: i32,
    text: String,
    scale: i32,
    color: Rgb,
    anchor: Anchor,
}

#[derive(Clone, Copy)]
enum Anchor {
    Left,
    Center,
    Right,
}

/// Writes a figure of `panels` stacked over one x axis named `x_label`.
pub fn lines_png(
    path: &Path,
    title: &str,
    x_label: &str,
    panels: &[Panel<'_>],
) -> std::io::Result<()> {
    let height = TITLE_HEIGHT + PANEL_HEIGHT * panels.len().max(1) as u32;
    let mut buf = vec![255u8; (WIDTH * height * 3) as usize];
    let mut labels = vec![Label {
        x: WIDTH as i32 / 2,
        y: 9,
        text: title.to_string(),
        scale: 2,
        color: TEXT,
        anchor: Anchor::Center,
    }];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (WIDTH, height)).into_drawing_area();
        for (i, panel) in panels.iter().enumerate() {
            let top = TITLE_HEIGHT as i32 + i as i32 * PANEL_HEIGHT as i32;
            draw_panel(&root, top, panel, x_label, &mut labels).map_err(plot_error)?;
        }
        root.present().map_err(plot_error)?;
    }
    paint_labels(&mut buf, WIDTH, height, &labels);
    save_png(path, buf, WIDTH, height)
}

/// Writes a bar chart of `bars` with the y axis named `y_label`; each bar
/// carries its value above it.
pub fn bars_png(path: &Path, title: &str, y_label: &str, bars: &[Bar<'_>]) -> std::io::Result<()> {
    let height = TITLE_HEIGHT + PANEL_HEIGHT + 40;
    let mut buf = vec![255u8; (WIDTH * height * 3) as usize];
    let mut labels = vec![
        Label {
            x: WIDTH as i32 / 2,
            y: 9,
            text: title.to_string(),
            scale: 2,
            color: TEXT,
            anchor: Anchor::Center,
        },
        Label {
            x: LEFT,
            y: TITLE_HEIGHT as i32 + 8,
            text: y_label.to_string(),
            scale: 1,
            color: TEXT,
            anchor: Anchor::Left,
        },
    ];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (WIDTH, height)).into_drawing_area();
        let top = TITLE_HEIGHT as i32 + PANEL_TOP;
        let area = root.clone().shrink(
            (LEFT, top),
            (WIDTH as i32 - LEFT - RIGHT, height as i32 - top - 40),
        );
        let max = bars
            .iter()
            .map(|b| b.value)
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        let ticks = nice_ticks(0.0, if max > 0.0 { max * 1.12 } else { 1.0 }, 5);
        let y_hi = *ticks.last().unwrap_or(&1.0);
        let n = bars.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&area)
            .build_cartesian_2d(0.0..n, 0.0..y_hi)
            .map_err(plot_error)?;
        for t in &ticks {
            grid_line(&mut chart, (0.0, *t), (n, *t)).map_err(plot_error)?;
            let (x, y) = chart.backend_coord(&(0.0, *t));
            labels.push(tick_label(
                x - 6,
                y - 4,
                format_number(*t, tick_step(&ticks)),
                Anchor::Right,
            ));
        }
        axes(&mut chart, (0.0, 0.0), (n, y_hi)).map_err(plot_error)?;
        for (i, bar) in bars.iter().enumerate() {
            let (x0, x1) = (i as f64 + 0.2, i as f64 + 0.8);
            let value = if bar.value.is_finite() {
                bar.value.max(0.0)
            } else {
                0.0
            };
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(x0, 0.0), (x1, value)],
                    rgb(bar.color).filled(),
                )))
                .map_err(plot_error)?;
            let (cx, base) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
            let (_, top_px) = chart.backend_coord(&(i as f64 + 0.5, value));
            labels.push(tick_label(
                cx,
                base + 8,
                bar.label.to_string(),
                Anchor::Center,
            ));
            labels.push(Label {
                x: cx,
                y: top_px - 12,
                text: format_number(bar.value, tick_step(&ticks) / 10.0),
                scale: 1,
                color: TEXT,
                anchor: Anchor::Center,
            });
        }
        root.present().map_err(plot_error)?;
    }
    paint_labels(&mut buf, WIDTH, height, &labels);
    save_png(path, buf, WIDTH, height)
}

type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

fn draw_panel(
    root: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    top: i32,
    panel: &Panel<'_>,
    x_label: &str,
    labels: &mut Vec<Label>,
) -> Result<(), String> {
    let y_of = |y: f64| if panel.log_y { y.log10() } else { y };
    let points = |s: &Series<'_>| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite() && (!panel.log_y || *y > 0.0))
            .map(|&(x, y)| (x, y_of(y)))
            .collect()
    };
    let all: Vec<(f64, f64)> = panel.series.iter().flat_map(points).collect();
    let (x_lo, x_hi) = span(all.iter().map(|p| p.0));
    let (y_lo, y_hi) = span(all.iter().map(|p| p.1).chain(panel.y_zero.then_some(0.0)));
    let x_ticks = match panel.x_ticks {
        Some(t) if !t.is_empty() => t.to_vec(),
        _ => nice_ticks(x_lo, x_hi, 8),
    };
    let y_ticks = if panel.log_y {
        log_ticks(y_lo, y_hi)
    } else {
        nice_ticks(y_lo, y_hi, 5)
    };
    let (x_lo, x_hi) = (
        x_lo.min(x_ticks[0]),
        x_hi.max(*x_ticks.last().unwrap_or(&x_hi)),
    );
    // Measured points on the edges keep their markers whole.
    let pad = if panel.x_ticks.is_some() {
        (x_hi - x_lo) * 0.04
    } else {
        0.0
    };
    let (x_lo, x_hi) = (x_lo - pad, x_hi + pad);
    let (y_lo, y_hi) = if panel.log_y {
        (y_lo, y_hi)
    } else {
        (y_ticks[0], *y_ticks.last().unwrap_or(&y_hi))
    };

    labels.push(Label {
        x: LEFT,
        y: top + 8,
        text: panel.title.to_string(),
        scale: 1,
        color: TEXT,
        anchor: Anchor::Left,
    });
    let area = root.clone().shrink(
        (LEFT, top + PANEL_TOP),
        (
            WIDTH as i32 - LEFT - RIGHT,
            PANEL_HEIGHT as i32 - PANEL_TOP - PANEL_BOTTOM,
        ),
    );
    let mut chart = ChartBuilder::on(&area)
        .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)
        .map_err(|e| e.to_string())?;
    let y_step = tick_step(&y_ticks);
    for &t in y_ticks
        .iter()
        .filter(|t| **t >= y_lo - 1e-12 && **t <= y_hi + 1e-12)
    {
        grid_line(&mut chart, (x_lo, t), (x_hi, t))?;
        let (x, y) = chart.backend_coord(&(x_lo, t));
        let text = if panel.log_y {
            format_number(10f64.powf(t), 10f64.powf(t))
        } else {
            format_number(t, y_step)
        };
        labels.push(tick_label(x - 6, y - 4, text, Anchor::Right));
    }
    let x_step = tick_step(&x_ticks);
    for &t in x_ticks.iter().filter(|t| **t >= x_lo && **t <= x_hi) {
        grid_line(&mut chart, (t, y_lo), (t, y_hi))?;
        let (x, y) = chart.backend_coord(&(t, y_lo));
        labels.push(tick_label(
            x,
            y + 6,
            format_number(t, x_step),
            Anchor::Center,
        ));
    }
    let (x_end, y_end) = chart.backend_coord(&(x_hi, y_lo));
    labels.push(tick_label(
        x_end,
        y_end + 18,
        x_label.to_string(),
        Anchor::Right,
    ));
    axes(&mut chart, (x_lo, y_lo), (x_hi, y_hi))?;

    let mut legend_x = WIDTH as i32 - RIGHT;
    for s in panel.series.iter().rev() {
        let pts = points(s);
        let style = if s.faint {
            rgb(blend(s.color, 0.35)).stroke_width(1)
        } else {
            rgb(s.color).stroke_width(2)
        };
        if pts.len() <= 32 && !s.faint {
            // Few measurements: mark each one, so a line between two is not
            // read as data.
            let marker = rgb(s.color).filled();
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 4, marker)))
                .map_err(|e| e.to_string())?;
        }
        chart
            .draw_series(LineSeries::new(pts, style))
            .map_err(|e| e.to_string())?;
        let width = s.label.chars().count() as i32 * 8;
        labels.push(Label {
            x: legend_x,
            y: top + 8,
            text: s.label.to_string(),
            scale: 1,
            color: if s.faint {
                blend(s.color, 0.5)
            } else {
                s.color
            },
            anchor: Anchor::Right,
        });
        legend_x -= width + 24;
    }
    Ok(())
}

fn grid_line(chart: &mut Chart<'_, '_>, from: (f64, f64), to: (f64, f64)) -> Result<(), String> {
    chart
        .draw_series(std::iter::once(PathElement::new(vec![from, to], rgb(GRID))))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn axes(chart: &mut Chart<'_, '_>, lo: (f64, f64), hi: (f64, f64)) -> Result<(), String> {
    let style = rgb(TEXT);
    chart
        .draw_series([
            PathElement::new(vec![(lo.0, lo.1), (hi.0, lo.1)], style),
            PathElement::new(vec![(lo.0, lo.1), (lo.0, hi.1)], style),
        ])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn tick_label(x: i32, y: i32, text: String, anchor: Anchor) -> Label {
    Label {
        x,
        y,
        text,
        scale: 1,
        color: TEXT,
        anchor,
    }
}

fn rgb(c: Rgb) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

/// `c` mixed with white: `amount` 1 keeps it, 0 gives white.
fn blend(c: Rgb, amount: f64) -> Rgb {
    let mix = |v: u8| (255.0 - (255.0 - f64::from(v)) * amount).round() as u8;
    (mix(c.0), mix(c.1), mix(c.2))
}

fn plot_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("drawing the chart failed: {e}"))
}

/// The smallest and largest of `values`, widened when they are equal or absent.
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 * hi.abs().max(1.0) {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        return (lo - pad, hi + pad);
    }
    (lo, hi)
}

/// About `count` round tick values (1, 2 or 5 × 10^k apart) covering `lo..=hi`.
pub fn nice_ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        (lo - 1.0, lo + 1.0)
    };
    let raw = (hi - lo) / count.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).floor() * step;
    let mut ticks = Vec::new();
    let mut t = first;
    while t < hi + step * 0.999 && ticks.len() < 64 {
        ticks.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    ticks
}

/// Ticks for a log10 axis spanning `lo..=hi` (in log10 units): every decade,
/// and 2× and 5× within a decade when the axis spans less than two decades.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let few = hi - lo < 2.0;
    for k in (lo.floor() as i32)..=(hi.ceil() as i32) {
        for m in [1.0f64, 2.0, 5.0] {
            if m > 1.0 && !few {
                continue;
            }
            let t = f64::from(k) + m.log10();
            if t >= lo - 1e-9 && t <= hi + 1e-9 {
                ticks.push(t);
            }
        }
    }
    if ticks.is_empty() {
        ticks.push(lo);
    }
    ticks
}

fn tick_step(ticks: &[f64]) -> f64 {
    match ticks {
        [a, b, ..] => (b - a).abs(),
        _ => 1.0,
    }
}

/// `value` with as many decimals as a tick `step` needs; large and tiny
/// values in scientific form (`2.5e-4`), thousands as `12k`.
pub fn format_number(value: f64, step: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let abs = value.abs();
    if abs >= 1e6 || (abs < 1e-3 && step.abs() < 1e-4) {
        // As many significant digits as tell neighbouring ticks apart.
        let digits = (abs.log10().floor() - step.abs().max(abs * 1e-6).log10().floor())
            .clamp(0.0, 6.0) as usize;
        let text = format!("{value:.digits$e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.trim_end_matches('0').trim_end_matches('.')
        } else {
            mantissa
        };
        return format!("{mantissa}e{exponent}");
    }
    if abs >= 1e4 && step >= 1000.0 {
        return format!("{}k", format_number(value / 1000.0, step / 1000.0));
    }
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{value:.decimals$}")
}

/// Paints `labels` into an RGB buffer with font8x8's glyphs.
fn paint_labels(buf: &mut [u8], width: u32, height: u32, labels: &[Label]) {
    use font8x8::UnicodeFonts;
    for label in labels {
        let advance = 8 * label.scale;
        let total = label.text.chars().count() as i32 * advance;
        let x0 = match label.anchor {
            Anchor::Left => label.x,
            Anchor::Center => label.x - total / 2,
            Anchor::Right => label.x - total,
        };
        for (i, ch) in label.text.chars().enumerate() {
            let glyph = font8x8::BASIC_FONTS
                .get(ch)
                .or_else(|| font8x8::LATIN_FONTS.get(ch))
                .or_else(|| font8x8::BASIC_FONTS.get('?'))
                .unwrap_or([0; 8]);
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) == 0 {
                        continue;
                    }
                    for dy in 0..label.scale {
                        for dx in 0..label.scale {
                            let x = x0 + i as i32 * advance + col * label.scale + dx;
                            let y = label.y + row as i32 * label.scale + dy;
                            if x >= 0 && y >= 0 && (x as u32) < width && (y as u32) < height {
                                let at = ((y as u32 * width + x as u32) * 3) as usize;
                                buf[at..at + 3].copy_from_slice(&[
                                    label.color.0,
                                    label.color.1,
                                    label.color.2,
                                ]);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Writes an RGB buffer as a PNG, atomically.
fn save_png(path: &Path, buf: Vec<u8>, width: u32, height: u32) -> std::io::Result<()> {
    let image = image::RgbImage::from_raw(width, height, buf)
        .ok_or_else(|| std::io::Error::other("the chart buffer has the wrong size"))?;
    crate::sys::fs::write_atomic(path, |tmp| {
        image
            .save_with_format(tmp, image::ImageFormat::Png)
            .map_err(|e| std::io::Error::other(e.to_string()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 1000.0, 5),
            vec![0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]
        );
        let t = nice_ticks(0.013, 0.87, 5);
        assert_eq!(t.first(), Some(&0.0));
        assert!(*t.last().unwrap() >= 0.87);
        assert_eq!(format_number(0.2, 0.2), "0.2");
        assert_eq!(format_number(1200.0, 200.0), "1200");
        assert_eq!(format_number(25000.0, 5000.0), "25k");
        assert_eq!(format_number(0.00025, 0.00005), "2.5e-4");
        assert_eq!(format_number(0.000105, 0.000005), "1.05e-4");
        assert_eq!(format_number(0.0001, 0.000005), "1e-4");
        assert_eq!(format_number(0.5, 0.5), "0.5");
        assert_eq!(log_ticks(-1.3, 0.0).len(), 4); // 0.05 0.1 0.2 0.5 1 within 10^-1.3..10^0
    }

    /// Pixels of `color` (within a tolerance) in the PNG at `path`.
    fn count(path: &Path, color: Rgb) -> usize {
        let img = image::open(path).unwrap().to_rgb8();
        img.pixels()
            .filter(|p| {
                (i32::from(p[0]) - i32::from(color.0)).abs() < 8
                    && (i32::from(p[1]) - i32::from(color.1)).abs() < 8
                    && (i32::from(p[2]) - i32::from(color.2)).abs() < 8
            })
            .count()
    }

    #[test]
    fn a_line_figure_has_its_lines_text_and_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loss.png");
        let loss: Vec<(f64, f64)> = (0..200)
            .map(|i| (f64::from(i), 1.0 / (1.0 + f64::from(i) / 20.0)))
            .collect();
        let lr: Vec<(f64, f64)> = (0..200).map(|i| (f64::from(i), 1e-4)).collect();
        let panels = [
            Panel {
                title: "loss (MSE)",
                series: vec![Series {
                    label: "raw",
                    points: &loss,
                    color: PALETTE[0],
                    faint: false,
                }],
                log_y: true,
                y_zero: false,
                x_ticks: None,
            },
            Panel {
                title: "learning rate",
                series: vec![Series {
                    label: "lr",
                    points: &lr,
                    color: PALETTE[1],
                    faint: false,
                }],
                log_y: false,
                y_zero: false,
                x_ticks: None,
            },
        ];
        lines_png(&path, "train-demo", "step", &panels).unwrap();
        let img = image::open(&path).unwrap();
        assert_eq!(
            (img.width(), img.height()),
            (WIDTH, TITLE_HEIGHT + 2 * PANEL_HEIGHT)
        );
        assert!(count(&path, PALETTE[0]) > 300, "the loss line is drawn");
        assert!(count(&path, PALETTE[1]) > 300, "the lr line is drawn");
        assert!(count(&path, TEXT) > 1000, "axes and text are drawn");
        assert!(!dir.path().join(".loss.png.tmp").exists());
    }

    #[test]
    fn bars_are_as_tall_as_their_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("compare.png");
        let bars = [
            Bar {
                label: "imgctl",
                value: 100.0,
                color: PALETTE[0],
            },
            Bar {
                label: "eager",
                value: 50.0,
                color: PALETTE[1],
            },
        ];
        bars_png(&path, "img/s", "images per second", &bars).unwrap();
        let (a, b) = (count(&path, PALETTE[0]), count(&path, PALETTE[1]));
        let ratio = a as f64 / b as f64;
        assert!(
            (ratio - 2.0).abs() < 0.1,
            "bar areas {a} and {b} should be 2:1"
        );
    }
}
