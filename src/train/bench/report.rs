//! Human tables (comfy-table) for the benchmark, scaling and comparison
//! reports. Every number carries its unit. Owns formatting only. The tables
//! go to stderr and fit its terminal (or `COLUMNS`): long cells are cut to
//! one line (`-v` wraps them instead; `--json` has everything).
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, ColumnConstraint, Table};

use crate::output::{self, Fit};

use super::reference::CompareReport;
use super::{BenchReport, ScalingReport};

/// A table in the benchmark reports' style, with `header`.
pub(crate) fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(header.iter().map(|h| Cell::new(*h)));
    t
}

/// How the tables meet stderr's width.
pub(crate) fn fit() -> Fit {
    output::stderr_fit()
}

/// Renders `t` fitted to stderr's terminal, its first column never cut.
pub(crate) fn render(mut t: Table, fit: Fit) -> String {
    if let Some(c) = t.column_mut(0) {
        c.set_constraint(ColumnConstraint::ContentWidth);
    }
    output::fit_table(&mut t, fit);
    t.to_string()
}

/// Below this width the benchmark table gives its longest values two rows.
const NARROW: u16 = 100;

/// A right-aligned cell (figures).
pub(crate) fn right(s: String) -> Cell {
    Cell::new(s).set_alignment(CellAlignment::Right)
}

/// `1.23 GiB`.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// `512.0 MiB` below a GiB, else [`gib`]: per-image figures of small models
/// would read `0.00 GiB`.
pub fn size(bytes: u64) -> String {
    if bytes < 1 << 30 {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        gib(bytes)
    }
}

/// Three significant digits for small values, one decimal for large ones.
pub fn num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else if x.abs() >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

/// The benchmark of one world size.
pub fn bench_table(r: &BenchReport) -> String {
    bench_table_fit(r, fit())
}

/// [`bench_table`] for a given fit: below 100 columns the device and
/// step-memory rows split in two, so that no value is cut. The rows come in
/// sections: the run's setup, its timing, its memory, the checkpointing
/// comparison and the FLOPs.
pub fn bench_table_fit(r: &BenchReport, fit: Fit) -> String {
    let narrow = matches!(fit, Fit::Cut(w) if w < NARROW);
    let mut t = table(&["metric", "value"]);
    let mut rows = Rows::default();
    setup_rows(&mut rows, r, narrow);
    timing_rows(&mut rows, r);
    memory_rows(&mut rows, r, narrow);
    checkpointing_rows(&mut rows, r);
    flops_rows(&mut rows, r);
    for (k, v) in rows.0 {
        t.add_row(vec![Cell::new(k), right(v)]);
    }
    render(t, fit)
}

/// The (metric, value) rows of [`bench_table_fit`], in order.
#[derive(Default)]
struct Rows(Vec<(String, String)>);

impl Rows {
    fn add(&mut self, k: &str, v: String) {
        self.0.push((k.to_string(), v));
    }
}

/// Model, device, batch and steps.
fn setup_rows(t: &mut Rows, r: &BenchReport, narrow: bool) {
    let mut row = |k: &str, v: String| t.add(k, v);
    row(
        "model",
        format!(
            "{} ({} params, {}×{})",
            r.preset, r.params, r.image_size, r.image_size
        ),
    );
    let reduce = if r.world_size > 1 && !narrow {
        format!(", gradients reduced in {}", r.grad_reduce)
    } else {
        String::new()
    };
    row(
        "device",
        format!(
            "{} × {} ({}, {}{reduce})",
            r.world_size, r.device_name, r.precision, r.backend
        ),
    );
    if r.world_size > 1 && narrow {
        row("  gradients reduced in", r.grad_reduce.to_string());
    }
    row(
        "batch",
        format!("{} per rank, {} global", r.batch_per_rank, r.global_batch),
    );
    row(
        "steps",
        format!(
            "{} warm-up, {} timed, {} profiled",
            r.warmup_steps, r.timed_steps, r.breakdown_ms.steps
        ),
    );
}

/// Throughput, step time, its breakdown and the gradient buckets.
fn timing_rows(t: &mut Rows, r: &BenchReport) {
    let mut row = |k: &str, v: String| t.add(k, v);
    row("throughput", format!("{} img/s", num(r.img_per_s)));
    row(
        "per device",
        format!("{} img/s", num(r.img_per_s_per_device)),
    );
    row(
        "step time",
        format!(
            "{:.1} ms median ({:.1} mean, {:.1}–{:.1})",
            r.step_ms.median, r.step_ms.mean, r.step_ms.min, r.step_ms.max
        ),
    );
    let b = &r.breakdown_ms;
    let all_reduce = if r.grad_overlap {
        "  all-reduce (exposed)"
    } else {
        "  all-reduce"
    };
    for (name, v) in [
        ("  data", b.data),
        ("  forward", b.forward),
        ("  backward", b.backward),
        (all_reduce, b.all_reduce),
        ("  optimizer", b.optimizer),
    ] {
        let share = if b.total > 0.0 { v / b.total } else { 0.0 };
        row(name, format!("{v:.2} ms ({})", pct(share)));
    }
    row("  profiled total", format!("{:.2} ms", b.total));
    if r.world_size > 1 || r.grad_overlap {
        let overlap = if r.grad_overlap {
            format!(
                "overlapped with backward, {} started during it",
                pct(r.buckets_during_backward)
            )
        } else {
            "after backward".to_string()
        };
        row(
            "gradient buckets",
            format!("{:.0} per step, {overlap}", r.buckets_per_step),
        );
    }
}

/// Peak memories, gradient checkpointing and the step memory per image.
fn memory_rows(t: &mut Rows, r: &BenchReport, narrow: bool) {
    let mut row = |k: &str, v: String| t.add(k, v);
    match &r.memory {
        Some(m) => {
            if let (Some(a), Some(res)) = (m.peak_allocated_bytes, m.peak_reserved_bytes) {
                row(
                    "peak torch memory",
                    format!("{} allocated, {} reserved", gib(a), gib(res)),
                );
            }
            row(
                "peak device memory",
                format!(
                    "{} of {} (baseline {})",
                    gib(m.peak_used_bytes),
                    gib(m.total_bytes),
                    gib(m.baseline_used_bytes)
                ),
            )
        }
        None => row("peak device memory", "n/a (CPU)".into()),
    }
    row(
        "gradient checkpointing",
        if r.gradient_checkpointing {
            "on"
        } else {
            "off"
        }
        .into(),
    );
    if let Some(m) = &r.step_memory {
        if narrow {
            row(
                "step memory",
                format!(
                    "{} peak, {} before the steps",
                    gib(m.peak_bytes),
                    gib(m.before_bytes)
                ),
            );
            row("  per image", size(m.per_image_bytes));
        } else {
            row(
                "step memory",
                format!(
                    "{} peak, {} before the steps, {} per image",
                    gib(m.peak_bytes),
                    gib(m.before_bytes),
                    size(m.per_image_bytes)
                ),
            );
        }
        row(
            "batch in budget",
            format!(
                "{} images in {} (at {} per image)",
                m.max_batch_in_budget,
                gib(m.budget_bytes),
                size(m.per_image_bytes)
            ),
        );
    }
}

/// Checkpointing off against on, when measured.
fn checkpointing_rows(t: &mut Rows, r: &BenchReport) {
    let mut row = |k: &str, v: String| t.add(k, v);
    if let Some(c) = &r.checkpointing_comparison {
        row(
            "checkpointing cost",
            format!(
                "{:.2}× the img/s without it (median of {} rounds)",
                c.throughput_ratio, c.rounds
            ),
        );
        row(
            "  img/s off → on",
            format!("{} → {}", num(c.off.img_per_s), num(c.on.img_per_s)),
        );
        if let (Some(off), Some(on)) = (&c.off.step_memory, &c.on.step_memory) {
            let saved = c
                .per_image_memory_ratio
                .map_or(String::new(), |x| format!(" ({:+.0} %)", 100.0 * (x - 1.0)));
            row(
                "  per image off → on",
                format!(
                    "{} → {}{saved}",
                    size(off.per_image_bytes),
                    size(on.per_image_bytes)
                ),
            );
            row(
                &format!(
                    "  batch in {:.0} GiB",
                    on.budget_bytes as f64 / (1u64 << 30) as f64
                ),
                format!(
                    "{} off → {} on",
                    off.max_batch_in_budget, on.max_batch_in_budget
                ),
            );
        }
    }
}

/// FLOPs per image and MFU.
fn flops_rows(t: &mut Rows, r: &BenchReport) {
    let mut row = |k: &str, v: String| t.add(k, v);
    let f = &r.flops;
    row(
        "FLOPs",
        format!(
            "{:.1} GFLOP/img, {} TFLOP/s per device",
            f.train_flops_per_image / 1e9,
            num(f.achieved_tflops_per_device)
        ),
    );
    match (f.mfu, f.peak_tflops) {
        (Some(m), Some(p)) => row(
            "MFU",
            format!(
                "{} of {p:.1} TFLOP/s ({})",
                pct(m),
                f.peak_kind.as_deref().unwrap_or("")
            ),
        ),
        _ => row("MFU", f.mfu_note.clone().unwrap_or_else(|| "n/a".into())),
    }
}

/// `--scaling`.
pub fn scaling_table(s: &ScalingReport) -> String {
    let mut t = table(&[
        "ranks",
        "img/s",
        "img/s per rank",
        "efficiency",
        "all-reduce share",
    ]);
    for r in &s.rows {
        t.add_row(vec![
            right(r.ranks.to_string()),
            right(num(r.img_per_s)),
            right(num(r.img_per_s_per_device)),
            right(pct(r.efficiency)),
            right(pct(r.all_reduce_share)),
        ]);
    }
    render(t, fit())
}

/// `--compare`. "peak memory (own)" is each run's peak device use minus its
/// use before the model existed, so neither its CUDA context nor memory held
/// by the other process counts: the reference runs while imgctl's benchmark
/// process still holds its memory.
pub fn compare_table(c: &CompareReport) -> String {
    compare_table_fit(c, fit())
}

/// [`compare_table`] for a given fit. Its numbers are never cut: on a
/// narrow terminal the headers take two lines and the run's name wraps
/// (a cut table would wrap instead of cutting), and a run that did not
/// run says why under its name.
pub fn compare_table_fit(c: &CompareReport, fit: Fit) -> String {
    // One-line headers take 80 columns of their own.
    let narrow = matches!(fit, Fit::Cut(w) | Fit::Wrap(w) if w < 120);
    let header: [&str; 5] = if narrow {
        [
            "run",
            "img/s per\ndevice",
            "step ms\n(median)",
            "peak memory\n(own)",
            "imgctl\n÷ this",
        ]
    } else {
        [
            "run",
            "img/s per device",
            "step ms (median)",
            "peak memory (own)",
            "imgctl ÷ this",
        ]
    };
    let mut t = table(&header);
    let i = &c.imgctl;
    t.add_row(vec![
        Cell::new(format!("imgctl ({}, AdamW fused)", i.precision)),
        right(num(i.img_per_s_per_device)),
        right(format!("{:.1}", i.step_ms.median)),
        right(i.memory.as_ref().map_or("n/a".into(), |m| {
            gib(m.peak_used_bytes.saturating_sub(m.baseline_used_bytes))
        })),
        right("1.00×".into()),
    ]);
    for r in &c.pytorch {
        let mode = match r.mode.as_str() {
            "eager_matched" => "eager, imgctl's recipe",
            m => m,
        };
        let label = format!(
            "PyTorch {mode} ({}{}{})",
            r.torch_version.as_deref().unwrap_or("?"),
            r.optimizer
                .as_deref()
                .map_or(String::new(), |o| format!(", {o}")),
            r.recipe
                .as_deref()
                .map_or(String::new(), |o| format!(", {o}"))
        );
        if r.ok {
            let ratio = match r.mode.as_str() {
                "compile" => c.ratio_vs_compile,
                "eager_matched" => c.ratio_vs_matched,
                _ => c.ratio_vs_eager,
            };
            t.add_row(vec![
                Cell::new(label),
                right(num(r.img_per_s.unwrap_or(0.0))),
                right(format!("{:.1}", r.step_ms_median.unwrap_or(0.0))),
                right(r.device_used_peak_bytes.map_or("n/a".into(), |p| {
                    gib(p.saturating_sub(r.device_used_baseline_bytes.unwrap_or(0)))
                })),
                right(ratio.map_or("n/a".into(), |x| format!("{x:.2}×"))),
            ]);
        } else {
            t.add_row(vec![
                Cell::new(format!(
                    "{label}\ndid not run: {}",
                    r.error.as_deref().unwrap_or("unknown error")
                )),
                right("—".into()),
                right("—".into()),
                right("—".into()),
                right("—".into()),
            ]);
        }
    }
    // The figures' columns keep their width; the names wrap.
    for i in 1..5 {
        if let Some(col) = t.column_mut(i) {
            col.set_constraint(ColumnConstraint::ContentWidth);
        }
    }
    let fit = match fit {
        Fit::Cut(w) => Fit::Wrap(w),
        f => f,
    };
    output::fit_table(&mut t, fit);
    let mut s = t.to_string();
    if let Some(n) = &c.compile_note {
        s.push_str(&format!("\ntorch.compile: {n}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::bench::reference::ReferenceRun;
    use crate::train::bench::BenchReport;

    const GIB: u64 = 1 << 30;

    fn imgctl_report() -> BenchReport {
        serde_json::from_value(serde_json::json!({
            "schema_version": 1, "kind": "imgctl.train_benchmark", "preset": "default",
            "params": 113673219, "image_size": 64, "precision": "bf16", "grad_reduce": "fp32",
            "all_reduce_bytes_per_step": 0, "channels_last": false, "cudnn_benchmark": true,
            "device": "cuda:0", "device_name": "NVIDIA H200", "backend": "single",
            "world_size": 1, "batch_per_rank": 64, "global_batch": 64, "warmup_steps": 10,
            "timed_steps": 50, "img_per_s": 3000.0, "img_per_s_per_device": 3000.0,
            "step_ms": {"mean": 21.0, "median": 21.0, "min": 20.0, "max": 22.0},
            "breakdown_ms": {"data": 0.1, "forward": 6.0, "backward": 12.0, "all_reduce": 0.0,
                             "optimizer": 3.0, "total": 21.1, "steps": 5},
            "all_reduce_share": 0.0,
            "memory": {"method": "cudaMemGetInfo", "peak_used_bytes": 20 * GIB,
                       "baseline_used_bytes": GIB / 2, "total_bytes": 140 * GIB},
            "flops": {"train_flops_per_image": 93.1e9, "achieved_tflops_per_device": 279.3,
                      "peak_tflops": 989.4, "peak_kind": "bf16 dense", "peak_source": "datasheet",
                      "mfu": 0.282, "mfu_note": null},
            "last_loss": 0.1
        }))
        .unwrap()
    }

    #[test]
    fn bench_table_fits_80_columns_without_cutting() {
        let mut r = imgctl_report();
        r.world_size = 8;
        r.device_name = "NVIDIA H100 80GB HBM3".into();
        let t = bench_table_fit(&r, Fit::Cut(80));
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        assert!(!t.contains('…'), "{t}");
        assert!(t.contains("gradients reduced in"), "{t}");
        let full = bench_table_fit(&r, Fit::Natural);
        assert!(full.contains(", gradients reduced in fp32)"), "{full}");
    }

    #[test]
    fn checkpointing_rows_give_cost_and_memory_of_both_arms_in_80_columns() {
        use crate::train::bench::checkpointing::{Arm, Comparison};
        use crate::train::bench::StepMemory;
        let mut r = imgctl_report();
        r.gradient_checkpointing = true;
        let arm = |rate: f64, per_image: u64| Arm {
            img_per_s: rate,
            rounds_img_per_s: vec![rate; 3],
            step_memory: Some(StepMemory::new("t", 4 * GIB, 4 * GIB + 64 * per_image, 64)),
        };
        r.checkpointing_comparison = Some(Comparison {
            method: "t".into(),
            rounds: 3,
            steps_per_round: 17,
            off: arm(3000.0, 200 << 20),
            on: arm(2250.0, 50 << 20),
            throughput_ratio: 0.75,
            per_image_memory_ratio: Some(0.25),
        });
        let t = bench_table_fit(&r, Fit::Cut(80));
        assert!(t.lines().all(|l| l.chars().count() <= 80), "{t}");
        assert!(!t.contains('…'), "{t}");
        for want in [
            "0.75× the img/s without it (median of 3 rounds)",
            "3000.0 → 2250.0",
            "200.0 MiB → 50.0 MiB (-75 %)",
            // (24 − 4) GiB at 200 and at 50 MiB per image.
            "102 off → 409 on",
        ] {
            assert!(t.contains(want), "{want}:\n{t}");
        }
    }

    #[test]
    fn compare_memory_is_each_runs_own_not_the_other_process() {
        let eager = ReferenceRun {
            mode: "eager".into(),
            ok: true,
            img_per_s: Some(2500.0),
            step_ms_median: Some(25.6),
            // The reference started while imgctl still held 20 GiB.
            device_used_baseline_bytes: Some(20 * GIB + GIB / 2),
            device_used_peak_bytes: Some(44 * GIB + GIB / 2),
            ..Default::default()
        };
        let c = CompareReport::new(imgctl_report(), vec![eager], None);
        assert!((c.ratio_vs_eager.unwrap() - 1.2).abs() < 1e-12);
        let t = compare_table(&c);
        assert!(t.contains("peak memory (own)"), "{t}");
        // imgctl: 20 − 0.5 GiB; the reference: 44.5 − 20.5 GiB, not 44.5.
        assert!(t.contains(&gib(20 * GIB - GIB / 2)), "{t}");
        assert!(t.contains(&gib(24 * GIB)), "{t}");
        assert!(!t.contains(&gib(44 * GIB + GIB / 2)), "{t}");
        assert!(t.contains("1.20×"), "{t}");
    }

    #[test]
    fn the_compare_table_never_cuts_a_number() {
        let run = |mode: &str, ok: bool| ReferenceRun {
            mode: mode.into(),
            ok,
            img_per_s: ok.then_some(123456.789),
            step_ms_median: ok.then_some(98765.4),
            torch_version: Some("2.7.0+cu126".into()),
            optimizer: Some("AdamW (foreach)".into()),
            recipe: Some("autocast bf16 over fp32 weights".into()),
            device_used_baseline_bytes: Some(GIB),
            device_used_peak_bytes: Some(100 * GIB),
            error: (!ok).then(|| {
                "stopped after 1800 s (IMGCTL_REFERENCE_TIMEOUT to change the limit)".into()
            }),
            ..Default::default()
        };
        let c = CompareReport::new(
            imgctl_report(),
            vec![
                run("eager", true),
                run("compile", false),
                run("eager_matched", true),
            ],
            None,
        );
        for width in [80u16, 100, 120] {
            let t = compare_table_fit(&c, Fit::Cut(width));
            assert!(
                t.lines().all(|l| l.chars().count() <= width as usize),
                "{width}:\n{t}"
            );
            assert!(!t.contains('…'), "{width}:\n{t}");
            for figure in ["123456.8", "98765.4", &gib(99 * GIB), "did not run"] {
                assert!(t.contains(figure), "{figure} at {width}:\n{t}");
            }
        }
    }
}
