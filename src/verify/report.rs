//! The [`Report`] of a verify run (what `--json` prints, and what the host
//! reads back from a container) and its rendering: a table (comfy-table, readable without colour,
//! thresholds next to measured values), JUnit XML (one test case per check
//! per subject) and the one-line summary. JSON is the serde form of
//! [`Report`] itself. This module computes no verdicts and does no I/O
//! besides returning strings.
use comfy_table::{presets, Cell, CellAlignment, Color, ColumnConstraint, Table, Width};

use serde::{Deserialize, Serialize};

use super::context::ExpectGpus;
use super::registry::{registry, HOST_DESCRIPTIONS, HOST_IDS};
use super::result::{CheckResult, Level, Scope, Status};
use super::wording::Wording;
use crate::output::{self, Fit};

/// Version of the JSON report layout (`--json`); bump on incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// A whole verify run: what the JSON report holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The imgctl that produced it.
    pub imgctl_version: String,
    /// Where the checks ran: `host`, or `container` (of `image`).
    pub context: String,
    /// The image, for `verify --image`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// quick or full.
    pub level: Level,
    /// `any` or a count.
    pub expect_gpus: String,
    /// For `verify --image`: how the container's GPUs were asked for
    /// (`cdi`, `runtime`, or `none` when none were).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_api: Option<String>,
    /// Every result, in run order.
    pub results: Vec<CheckResult>,
    /// Counts per status.
    pub summary: Summary,
    /// True when no result is FAIL or ERROR.
    pub passed: bool,
}

/// Counts per status.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// PASS results.
    pub pass: usize,
    /// WARN results.
    pub warn: usize,
    /// FAIL results.
    pub fail: usize,
    /// SKIP results.
    pub skip: usize,
    /// ERROR results.
    pub error: usize,
}

impl Summary {
    /// The counts of `results`.
    pub fn of(results: &[CheckResult]) -> Self {
        let mut s = Self::default();
        for r in results {
            s.add(r.status);
        }
        s
    }
    /// Counts one more verdict.
    pub fn add(&mut self, status: Status) {
        match status {
            Status::Pass => self.pass += 1,
            Status::Warn => self.warn += 1,
            Status::Fail => self.fail += 1,
            Status::Skip => self.skip += 1,
            Status::Error => self.error += 1,
        }
    }
    /// True when nothing is FAIL or ERROR.
    pub fn passed(&self) -> bool {
        self.fail == 0 && self.error == 0
    }
}

/// `<testsuite name="NAME" tests=… failures=… errors=… skipped=…` (the
/// caller closes the tag, with a `time` attribute if it has one).
pub fn testsuite_open(name: &str, tests: usize, s: &Summary) -> String {
    format!(
        "  <testsuite name=\"{name}\" tests=\"{tests}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\"",
        s.fail, s.error, s.skip
    )
}

impl Report {
    /// Builds a report from results, computing the summary and verdict.
    pub fn new(
        context: &str,
        image: Option<String>,
        level: Level,
        expect: ExpectGpus,
        results: Vec<CheckResult>,
    ) -> Self {
        let mut r = Self {
            schema_version: SCHEMA_VERSION,
            imgctl_version: env!("CARGO_PKG_VERSION").to_string(),
            context: context.to_string(),
            image,
            level,
            expect_gpus: expect.as_arg(),
            gpu_api: None,
            results,
            summary: Summary::default(),
            passed: true,
        };
        r.recount();
        r
    }
    /// Recomputes the summary and verdict after results changed.
    pub fn recount(&mut self) {
        let s = Summary::of(&self.results);
        self.passed = s.passed();
        self.summary = s;
    }
}

/// One row of `verify --list-checks`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckInfo {
    /// Stable id.
    pub id: &'static str,
    /// `quick` or `full`.
    pub level: &'static str,
    /// `node`, `gpu` or `host` (with --image only).
    pub scope: &'static str,
    /// What it checks.
    pub description: String,
}

/// Every check, in run order, host-side checks last; `words` fills the
/// descriptions that name a flag.
pub fn check_list(words: &Wording) -> Vec<CheckInfo> {
    let mut rows: Vec<CheckInfo> = registry()
        .iter()
        .map(|c| CheckInfo {
            id: c.id(),
            level: match c.level() {
                Level::Quick => "quick",
                Level::Full => "full",
            },
            scope: match c.scope() {
                Scope::Node => "node",
                Scope::PerGpu => "gpu",
            },
            description: words.fill(c.description()),
        })
        .collect();
    rows.extend(
        HOST_IDS
            .iter()
            .zip(HOST_DESCRIPTIONS)
            .map(|(id, description)| CheckInfo {
                id,
                level: "quick",
                scope: "host",
                description: description.to_string(),
            }),
    );
    rows
}

/// An empty table: box-drawing borders with `color`, ASCII without, and
/// ASCII in a notebook cell too: a browser draws box-drawing characters from
/// a fallback font, wider than the monospace ones, and the notebook's output
/// area then wrapped a row fitted to its width (the browser test's
/// screenshot).
fn new_table(color: bool) -> Table {
    let mut t = Table::new();
    t.load_preset(if color && !crate::output::in_notebook() {
        presets::UTF8_FULL_CONDENSED
    } else {
        presets::ASCII_FULL_CONDENSED
    });
    if color {
        // Colour through comfy-table, which knows escapes take no columns
        // (raw escapes in a cell were counted, and cut, when wrapping).
        t.enforce_styling();
    }
    t
}

/// The check list as a table, wrapped to the width in `fit`.
pub fn check_list_table(rows: &[CheckInfo], color: bool, fit: Fit) -> String {
    let mut t = new_table(color);
    t.set_header(vec!["check", "level", "on", "what it checks"]);
    for r in rows {
        t.add_row(vec![r.id, r.level, r.scope, r.description.as_str()]);
    }
    output::fit_table(&mut t, fit);
    format!("{t}\n")
}

/// Below this width the table has no measured, expected and threshold
/// columns: WARN, FAIL and ERROR rows show them under the table instead. (At
/// 100 columns three text columns of about 20 each cut nearly every message.)
const NARROW: u16 = 110;
/// Below this width the subject (`gpu1`) joins the check id.
const MEDIUM: u16 = 120;
/// The share of the width that the measured and the threshold columns may
/// take at most, so that the details keep the rest.
const MEASURED_PERCENT: u16 = 22;
/// See [`MEASURED_PERCENT`].
const THRESHOLD_PERCENT: u16 = 18;

/// A source without the datasheet's quoted figures: the text up to the end
/// of the URL after `datasheet: `, or all of it.
fn without_quote(source: &str) -> &str {
    let Some(at) = source
        .find("datasheet: https://")
        .map(|i| i + "datasheet: ".len())
    else {
        return source;
    };
    let url_end = source[at..].find(' ').map_or(source.len(), |i| at + i);
    &source[..url_end]
}

/// The numbered sources of the expected values a table shows, in order of
/// first use: `[1]` in a cell, the source under the table.
#[derive(Default)]
struct Sources(Vec<String>);

impl Sources {
    /// `≈ 682.8 TFLOP/s [1]` for a result with an expected value or a
    /// reason for none; numbers its source on first use.
    fn cell(&mut self, r: &CheckResult) -> Option<String> {
        let label = output::outside(&r.expected_label()?).into_owned();
        let Some(source) = &r.source else {
            return Some(label);
        };
        let n = match self.0.iter().position(|s| s == source) {
            Some(i) => i + 1,
            None => {
                self.0.push(source.clone());
                self.0.len()
            }
        };
        Some(format!("{label} [{n}]"))
    }
    /// `[1] …`, one wrapped line per source; `full: false` leaves out
    /// what the datasheet's page says in parentheses (its URL stays).
    fn render(&self, width: Option<u16>, full: bool) -> String {
        let mut out = String::new();
        for (i, s) in self.0.iter().enumerate() {
            let s = if full { s.as_str() } else { without_quote(s) };
            let line = format!("[{}] {}", i + 1, output::outside(s));
            out.push_str(&output::wrap_text(&line, width));
            out.push('\n');
        }
        out
    }
}

/// The results as a table. `color` colours the status column (the label
/// stays, so it reads the same without colour); `fit` says how it meets the
/// terminal's width: below 120 and 110 columns, fewer columns (the
/// measured values and thresholds then follow the table); [`Fit::Cut`] also
/// shortens paths and cuts each row to one line, [`Fit::Wrap`] (`-v`) wraps
/// the full text instead. A shortened table ends with a note naming
/// `words.full_view`.
pub fn table(report: &Report, color: bool, fit: Fit, words: &Wording) -> String {
    let (width, full) = match fit {
        Fit::Cut(w) => (Some(w), false),
        Fit::Wrap(w) => (Some(w), true),
        Fit::Natural => (None, true),
    };
    let all_node = report.results.iter().all(|r| r.gpu.is_none());
    let fold_subject = width.is_some_and(|w| w < MEDIUM);
    let narrow = width.is_some_and(|w| w < NARROW);
    // Every text a result holds may come from a container (`--image`):
    // escaped ([`output::outside`]) before it meets the table or a line.
    let short = |s: &str| {
        let s = output::outside(s);
        if !full {
            output::shorten_paths(&s)
        } else {
            s.into_owned()
        }
    };
    let mut t = new_table(color);
    t.set_header(vec![
        "check",
        "on",
        "status",
        "measured",
        "expected",
        "threshold",
        "details",
    ]);
    let mut sources = Sources::default();
    // A SKIP whose reason is the row above's says so (#53 F23: on a host
    // without a driver 14 NVML rows repeated one reason).
    let mut above: Option<(Status, &str)> = None;
    for r in &report.results {
        let repeated = r.status == Status::Skip
            && !r.message.is_empty()
            && above == Some((Status::Skip, r.message.as_str()));
        above = Some((r.status, r.message.as_str()));
        let mut status = Cell::new(r.status.label()).set_alignment(CellAlignment::Center);
        if color {
            status = status.fg(match r.status {
                Status::Pass => Color::Green,
                Status::Warn => Color::Yellow,
                Status::Fail | Status::Error => Color::Red,
                Status::Skip => Color::DarkGrey,
            });
        }
        let id = output::outside(&r.id);
        let check = match (fold_subject, r.gpu) {
            (true, Some(_)) => format!("{id} {}", r.subject()),
            _ => id.into_owned(),
        };
        t.add_row(vec![
            Cell::new(check),
            Cell::new(r.subject()),
            status,
            Cell::new(short(r.measured.as_deref().unwrap_or(""))),
            Cell::new(if narrow {
                String::new()
            } else {
                sources.cell(r).unwrap_or_default()
            }),
            Cell::new(short(r.threshold.as_deref().unwrap_or(""))),
            // Narrow, the measured column is hidden: its value leads the
            // details, where the row's cut leaves it in view.
            Cell::new(match (&r.measured, narrow) {
                _ if repeated => "(as above)".to_string(),
                (Some(m), true) if !m.is_empty() => short(&format!("{m}: {}", r.message)),
                _ => short(&r.message),
            }),
        ]);
    }
    let mut hide = Vec::new();
    // A column that says `node` on every row says nothing.
    if fold_subject || (width.is_some() && all_node) {
        hide.push(1);
    }
    if narrow {
        hide.extend([3, 4, 5]);
    }
    for i in hide {
        if let Some(c) = t.column_mut(i) {
            c.set_constraint(ColumnConstraint::Hidden);
        }
    }
    // The id, the verdict and the expected value (at most `≤ 1100.0
    // TFLOP/s peak [9]`) are never cut.
    for i in [0, 2, 4].into_iter().filter(|&i| i != 4 || !narrow) {
        if let Some(c) = t.column_mut(i) {
            c.set_constraint(ColumnConstraint::ContentWidth);
        }
    }
    if !narrow && width.is_some() {
        for (i, percent) in [(3, MEASURED_PERCENT), (5, THRESHOLD_PERCENT)] {
            if let Some(c) = t.column_mut(i) {
                c.set_constraint(ColumnConstraint::UpperBoundary(Width::Percentage(percent)));
            }
        }
    }
    let cut = output::fit_table(&mut t, fit);
    let mut out = t.to_string();
    out.push('\n');
    let notable = |r: &&CheckResult| r.status != Status::Pass && r.status != Status::Skip;
    if narrow {
        // The threshold stays next to the measured value, under the table:
        // for every row with `-v`, else for WARN, FAIL and ERROR.
        for r in report.results.iter().filter(|r| full || notable(r)) {
            let expected = sources.cell(r);
            if r.measured.is_none() && r.threshold.is_none() && expected.is_none() {
                continue;
            }
            let both = [
                ("measured", r.measured.as_deref().map(short)),
                ("expected", expected),
                ("threshold", r.threshold.as_deref().map(short)),
            ]
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| format!("{k} {v}")))
            .collect::<Vec<_>>()
            .join(", ");
            let line = format!("{} {}: {both}", output::outside(&r.id), r.subject());
            out.push_str(&output::wrap_text(&line, width));
            out.push('\n');
        }
    }
    for r in report
        .results
        .iter()
        .filter(notable)
        .filter(|r| r.hint.is_some())
    {
        let line = format!(
            "hint ({} {}): {}",
            output::outside(&r.id),
            r.subject(),
            output::outside(r.hint.as_deref().unwrap_or(""))
        );
        out.push_str(&output::wrap_text(&line, width));
        out.push('\n');
    }
    out.push_str(&sources.render(width, full));
    if cut || (narrow && !full) {
        out.push_str(&format!(
            "(shortened to fit the terminal; {} show every column in full)\n",
            words.full_view
        ));
    }
    out.push_str(&output::wrap_text(&summary_line(report), width));
    out.push('\n');
    out
}

/// `verify: FAILED — 12 pass, 1 warn, 1 fail, 3 skip, 0 error (exit 1)`.
pub fn summary_line(report: &Report) -> String {
    let s = &report.summary;
    let verdict = if report.passed { "passed" } else { "FAILED" };
    let why = if report.passed {
        String::new()
    } else {
        " (a FAIL or an ERROR fails the run; an ERROR means the verdict is unknown)".to_string()
    };
    format!(
        "verify {verdict}: {} pass, {} warn, {} fail, {} skip, {} error{why}",
        s.pass, s.warn, s.fail, s.skip, s.error
    )
}

/// Escapes text for XML attributes and content.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn details(r: &CheckResult) -> String {
    let mut lines = vec![r.message.clone()];
    if let Some(m) = &r.measured {
        lines.push(format!("measured: {m}"));
    }
    if let Some(e) = r.expected_label() {
        let source = r.source.as_deref().unwrap_or("");
        lines.push(format!("expected: {e} ({source})"));
    }
    if let Some(t) = &r.threshold {
        lines.push(format!("threshold: {t}"));
    }
    if let Some(h) = &r.hint {
        lines.push(format!("hint: {h}"));
    }
    lines.join("\n")
}

/// JUnit XML: one `<testcase>` per check per subject; SKIP is `<skipped/>`,
/// FAIL `<failure>`, ERROR `<error>`; WARN passes with its text in `<system-out>`.
pub fn junit(report: &Report) -> String {
    let s = &report.summary;
    let total_ms: u64 = report.results.iter().map(|r| r.duration_ms).sum();
    let secs = total_ms as f64 / 1000.0;
    let mut out = String::new();
    out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"imgctl verify\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{secs:.3}\">\n",
        report.results.len(),
        s.fail,
        s.error,
        s.skip
    ));
    let suite = match &report.image {
        Some(image) => format!("imgctl.verify[{}]", xml_escape(image)),
        None => format!("imgctl.verify.{}", report.context),
    };
    out.push_str(&testsuite_open(&suite, report.results.len(), s));
    out.push_str(&format!(" time=\"{secs:.3}\">\n"));
    out.push_str(&testcases(&report.results));
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// The `<testcase>` elements of `results`, one per check per subject.
pub fn testcases(results: &[CheckResult]) -> String {
    let mut out = String::new();
    for r in results {
        let class = r.id.split('.').next().unwrap_or("verify");
        let name = format!("{}[{}]", r.id, r.subject());
        out.push_str(&format!(
            "    <testcase classname=\"imgctl.{}\" name=\"{}\" time=\"{:.3}\"",
            xml_escape(class),
            xml_escape(&name),
            r.duration_ms as f64 / 1000.0
        ));
        let msg = xml_escape(&r.message);
        match r.status {
            Status::Pass if r.measured.is_none() && r.source.is_none() => out.push_str("/>\n"),
            // A measured PASS keeps its figure and what it should be.
            Status::Pass => out.push_str(&format!(
                ">\n      <system-out>{}</system-out>\n    </testcase>\n",
                xml_escape(&details(r))
            )),
            Status::Warn => out.push_str(&format!(
                ">\n      <system-out>WARN: {}</system-out>\n    </testcase>\n",
                xml_escape(&details(r))
            )),
            Status::Skip => out.push_str(&format!(
                ">\n      <skipped message=\"{msg}\"/>\n    </testcase>\n"
            )),
            Status::Fail => out.push_str(&format!(
                ">\n      <failure message=\"{msg}\" type=\"FAIL\">{}</failure>\n    </testcase>\n",
                xml_escape(&details(r))
            )),
            Status::Error => out.push_str(&format!(
                ">\n      <error message=\"{msg}\" type=\"ERROR\">{}</error>\n    </testcase>\n",
                xml_escape(&details(r))
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::wording::TEST_WORDS;

    fn sample() -> Report {
        Report::new(
            "host",
            None,
            Level::Quick,
            ExpectGpus::Any,
            vec![
                CheckResult::pass("nvml.driver", "driver 580.159.03")
                    .measured("driver 580.159.03 / CUDA 13.0"),
                CheckResult::fail("nvml.ecc", "2 uncorrectable <errors> & more")
                    .gpu(1)
                    .measured("2 errors")
                    .threshold("0 errors")
                    .hint("drain"),
                CheckResult::skip("nvml.nvlink", "no NVLink").gpu(0),
                CheckResult::error("nvml.throttle", "timed out after 2s").gpu(0),
                CheckResult::warn("nvml.pcie", "x8 of x16")
                    .gpu(0)
                    .hint("reseat"),
            ],
        )
    }

    #[test]
    fn a_skip_repeating_the_reason_above_says_so() {
        let why = "no NVIDIA driver: libnvidia-ml.so.1 not found";
        let report = Report::new(
            "host",
            None,
            Level::Quick,
            ExpectGpus::Exactly(0),
            vec![
                CheckResult::skip("nvml.ecc", why),
                CheckResult::skip("nvml.pcie", why),
                CheckResult::skip("nvml.nvlink", why),
                CheckResult::skip("nvml.clocks", "another reason"),
            ],
        );
        let t = table(&report, false, Fit::Natural, &TEST_WORDS);
        assert_eq!(t.matches(why).count(), 1, "{t}");
        assert_eq!(t.matches("(as above)").count(), 2, "{t}");
        assert!(t.contains("another reason"), "{t}");
        // The JSON keeps every row's own words.
        assert!(report.results.iter().filter(|r| r.message == why).count() == 3);
    }

    #[test]
    fn table_has_thresholds_and_plain_labels() {
        let t = table(&sample(), false, Fit::Natural, &TEST_WORDS);
        assert!(t.contains(" FAIL "), "{t}");
        assert!(t.contains("0 errors"));
        assert!(t.contains("hint (nvml.ecc gpu1): drain"));
        assert!(!t.contains('\x1b'));
        assert!(t.contains("verify FAILED: 1 pass, 1 warn, 1 fail, 1 skip, 1 error"));
    }

    #[test]
    fn cut_tables_fit_80_100_and_120_columns() {
        let mut report = sample();
        report.results[0].measured =
            Some("9.5.1 from /root/.cache/imgctl/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9".into());
        report.recount();
        for width in [80u16, 100, 120] {
            let plain = table(&report, false, Fit::Cut(width), &TEST_WORDS);
            for line in plain.lines() {
                assert!(
                    line.chars().count() <= width as usize,
                    "{width}: {line:?}\n{plain}"
                );
            }
            assert!(plain.contains("nvml.ecc"), "{plain}");
            assert!(plain.contains(" FAIL "), "{plain}");
            assert!(!plain.contains("/root/.cache"), "{plain}");
            // The threshold of a failure is shown at every width.
            assert!(plain.contains("0 errors"), "{width}:\n{plain}");
            // The note under it quotes the words handed in.
            assert!(plain.contains(TEST_WORDS.full_view), "{plain}");
        }
        // Colour comes from comfy-table: the status label stays whole.
        let coloured = table(&report, true, Fit::Cut(80), &TEST_WORDS);
        assert!(coloured.contains("FAIL"), "{coloured}");
        // Natural: every column, full text, as piped output always was.
        let full = table(&report, false, Fit::Natural, &TEST_WORDS);
        assert!(full.contains("/root/.cache/imgctl"), "{full}");
        assert!(full.contains("| on "), "{full}");
    }

    /// A full-level report as an H200 and an unknown GPU would give it.
    fn measured_sample() -> Report {
        use crate::gpus::expected::{expected, Metric};
        Report::new(
            "host",
            None,
            Level::Full,
            ExpectGpus::Any,
            vec![
                CheckResult::pass("func.matmul_bf16", "bf16 8192³ matmul 686.3 TFLOP/s")
                    .gpu(0)
                    .measured("686.3 TFLOP/s")
                    .threshold("≥ 494.8 TFLOP/s (50% of NVIDIA H200 datasheet 989.5 TFLOP/s)")
                    .value(686.3, "TFLOP/s")
                    .expect(expected(Metric::Bf16Matmul, "NVIDIA H200")),
                CheckResult::fail(
                    "func.mem_bandwidth",
                    "device copy 1.20 TB/s is below the floor",
                )
                .gpu(0)
                .measured("1.20 TB/s (read+write)")
                .threshold("≥ 3.4 TB/s (70% of NVIDIA H200 datasheet 4.8 TB/s)")
                .value(1.2, "TB/s")
                .expect(expected(Metric::MemCopy, "NVIDIA H200")),
                CheckResult::pass("func.matmul_bf16", "bf16 8192³ matmul 150.2 TFLOP/s")
                    .gpu(1)
                    .measured("150.2 TFLOP/s")
                    .value(150.2, "TFLOP/s")
                    .expect(expected(Metric::Bf16Matmul, "NVIDIA GeForce RTX 4090")),
            ],
        )
    }

    #[test]
    fn expected_values_stand_beside_the_measured_ones_with_their_sources() {
        let report = measured_sample();
        let words = &TEST_WORDS;
        let full = table(&report, false, Fit::Natural, words);
        let row = full
            .lines()
            .find(|l| l.contains("686.3 TFLOP/s"))
            .unwrap_or_else(|| panic!("{full}"));
        // Measured, then expected, then the floor: one row.
        let (m, e, f) = (
            row.find("686.3 TFLOP/s").unwrap(),
            row.find("≈ 682.8 TFLOP/s [1]")
                .unwrap_or_else(|| panic!("{row}")),
            row.find("≥ 494.8").unwrap(),
        );
        assert!(m < e && e < f, "{row}");
        assert!(full.contains("≈ 4.2 TB/s [2]"), "{full}");
        assert!(full.contains("no reference [3]"), "{full}");
        assert!(
            full.contains("[1] 69% of the H200 datasheet's 989.5 TFLOP/s bf16 dense, the share a healthy H200 reached (686.3 of 989.5 TFLOP/s, bench/results/2026-11-30-h200.md); datasheet: https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM"),
            "{full}"
        );
        assert!(
            full.contains(
                "[3] no reference for \"NVIDIA GeForce RTX 4090\": imgctl's table knows "
            ),
            "{full}"
        );
        for width in [80u16, 100, 120] {
            let cut = table(&report, false, Fit::Cut(width), words);
            for line in cut.lines() {
                assert!(
                    line.chars().count() <= width as usize,
                    "{width}: {line:?}\n{cut}"
                );
            }
            // The cut view keeps the datasheet's address, not its quote.
            assert!(cut.contains("data-center/h200/"), "{width}:\n{cut}");
            assert!(!cut.contains("H200 SXM: BF16"), "{width}:\n{cut}");
            if width < 110 {
                assert!(!cut.lines().nth(1).unwrap().contains("expected"), "{cut}");
                // #29 item 3.10: a passing row keeps its measured value in
                // view, leading the details, though the column is hidden.
                let pass_row = cut
                    .lines()
                    .find(|l| l.contains("PASS") && l.contains("gpu0"))
                    .unwrap_or_else(|| panic!("{width}:\n{cut}"));
                assert!(pass_row.contains("686.3 TFLOP/s"), "{width}:\n{cut}");
                // The failure's figures follow the table, expected among them.
                let flat = cut.split_whitespace().collect::<Vec<_>>().join(" ");
                assert!(
                    flat.contains("func.mem_bandwidth gpu0: measured 1.20 TB/s (read+write), expected ≈ 4.2 TB/s [1], threshold ≥ 3.4 TB/s"),
                    "{width}:\n{cut}"
                );
            } else {
                assert!(cut.contains("≈ 682.8 TFLOP/s"), "{width}:\n{cut}");
            }
        }
        let json = serde_json::to_value(&report).unwrap();
        let bf16 = &json["results"][0];
        assert!(
            (bf16["expected"].as_f64().unwrap() - 682.755).abs() < 1e-6,
            "{bf16}"
        );
        assert_eq!(bf16["expected_basis"], "typical");
        assert!(
            bf16["source"].as_str().unwrap().contains("bench/results/"),
            "{bf16}"
        );
        let unknown = &json["results"][2];
        assert!(unknown.get("expected").is_none(), "{unknown}");
        assert!(
            unknown["source"]
                .as_str()
                .unwrap()
                .starts_with("no reference for"),
            "{unknown}"
        );
        let x = junit(&report);
        assert!(
            x.contains("expected: ≈ 682.8 TFLOP/s (69% of the H200 datasheet"),
            "{x}"
        );
        assert!(
            x.contains(
                "expected: no reference (no reference for &quot;NVIDIA GeForce RTX 4090&quot;"
            ),
            "{x}"
        );
    }

    #[test]
    fn junit_marks_each_kind() {
        let x = junit(&sample());
        assert!(x.contains("tests=\"5\" failures=\"1\" errors=\"1\" skipped=\"1\""));
        assert!(x.contains("name=\"nvml.ecc[gpu1]\""));
        assert!(x.contains("<failure message=\"2 uncorrectable &lt;errors&gt; &amp; more\""));
        assert!(x.contains("<skipped message=\"no NVLink\"/>"));
        assert!(x.contains("<error message=\"timed out after 2s\""));
        assert!(x.contains("<system-out>WARN: x8 of x16"));
    }
}
