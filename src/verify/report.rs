//! Rendering a [`Report`]: a table (comfy-table, readable without colour,
//! thresholds next to measured values), JUnit XML (one test case per check
//! per subject) and the one-line summary. JSON is the serde form of
//! [`Report`] itself. This module computes no verdicts and does no I/O
//! besides returning strings.
use comfy_table::{presets, Cell, CellAlignment, ContentArrangement, Table};

use super::{CheckResult, Report, Status};

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
    pub description: &'static str,
}

/// Every check, in run order, host-side checks last.
pub fn check_list() -> Vec<CheckInfo> {
    let mut rows: Vec<CheckInfo> = super::registry()
        .iter()
        .map(|c| CheckInfo {
            id: c.id(),
            level: match c.level() {
                super::Level::Quick => "quick",
                super::Level::Full => "full",
            },
            scope: match c.scope() {
                super::Scope::Node => "node",
                super::Scope::PerGpu => "gpu",
            },
            description: c.description(),
        })
        .collect();
    rows.extend(
        super::host::IDS
            .iter()
            .zip(super::host::DESCRIPTIONS)
            .map(|(id, description)| CheckInfo {
                id,
                level: "quick",
                scope: "host",
                description,
            }),
    );
    rows
}

/// An empty table: box-drawing borders with `color`, ASCII without; fitted
/// to the terminal's width with `wrap`.
fn new_table(color: bool, wrap: bool) -> Table {
    let mut t = Table::new();
    t.load_preset(if color {
        presets::UTF8_FULL_CONDENSED
    } else {
        presets::ASCII_FULL_CONDENSED
    });
    if wrap {
        t.set_content_arrangement(ContentArrangement::Dynamic);
    }
    t
}

/// The check list as a table.
pub fn check_list_table(rows: &[CheckInfo], color: bool, wrap: bool) -> String {
    let mut t = new_table(color, wrap);
    t.set_header(vec!["check", "level", "on", "what it checks"]);
    for r in rows {
        t.add_row(vec![r.id, r.level, r.scope, r.description]);
    }
    format!("{t}\n")
}

/// The results as a table. `color` adds ANSI colour to the status column
/// (the label stays, so it reads the same without colour); `wrap` fits the
/// table to the terminal's width.
pub fn table(report: &Report, color: bool, wrap: bool) -> String {
    let mut t = new_table(color, wrap);
    t.set_header(vec![
        "check",
        "on",
        "status",
        "measured",
        "threshold",
        "details",
    ]);
    for r in &report.results {
        let status = if color {
            let code = match r.status {
                Status::Pass => "32",
                Status::Warn => "33",
                Status::Fail | Status::Error => "31",
                Status::Skip => "2",
            };
            format!("\x1b[{code}m{}\x1b[0m", r.status.label())
        } else {
            r.status.label().to_string()
        };
        t.add_row(vec![
            Cell::new(&r.id),
            Cell::new(r.subject()),
            Cell::new(status).set_alignment(CellAlignment::Center),
            Cell::new(r.measured.as_deref().unwrap_or("")),
            Cell::new(r.threshold.as_deref().unwrap_or("")),
            Cell::new(&r.message),
        ]);
    }
    let mut out = t.to_string();
    out.push('\n');
    let hints: Vec<&CheckResult> = report
        .results
        .iter()
        .filter(|r| r.status != Status::Pass && r.status != Status::Skip && r.hint.is_some())
        .collect();
    for r in hints {
        out.push_str(&format!(
            "hint ({} {}): {}\n",
            r.id,
            r.subject(),
            r.hint.as_deref().unwrap_or("")
        ));
    }
    out.push_str(&summary_line(report));
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
    out.push_str(&format!(
        "  <testsuite name=\"{suite}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{secs:.3}\">\n",
        report.results.len(),
        s.fail,
        s.error,
        s.skip
    ));
    for r in &report.results {
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
            Status::Pass => out.push_str("/>\n"),
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
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{ExpectGpus, Level};

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
    fn table_has_thresholds_and_plain_labels() {
        let t = table(&sample(), false, false);
        assert!(t.contains(" FAIL "), "{t}");
        assert!(t.contains("0 errors"));
        assert!(t.contains("hint (nvml.ecc gpu1): drain"));
        assert!(!t.contains('\x1b'));
        assert!(t.contains("verify FAILED: 1 pass, 1 warn, 1 fail, 1 skip, 1 error"));
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
