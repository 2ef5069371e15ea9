//! The fleet report for people and CI: a table with one row per node, then
//! the fleet's verdicts, each on its line (fits 100 columns), and JUnit XML
//! (a test suite per node with its checks, and one for the fleet's
//! verdicts). JSON is the serde form of [`FleetReport`]. Strings only.
use comfy_table::{presets, Cell, CellAlignment, Table};

use super::{FleetReport, NodeState};
use crate::output::{self, Fit};
use crate::verify::report::{testcases, testsuite_open, xml_escape};
use crate::verify::result::Status;

/// The table and the verdict lines, wrapped to the width in `fit`.
pub fn table(report: &FleetReport, fit: Fit) -> String {
    let width = match fit {
        Fit::Cut(w) | Fit::Wrap(w) => Some(w),
        Fit::Natural => None,
    };
    let mut t = Table::new();
    t.load_preset(presets::ASCII_FULL_CONDENSED);
    t.set_header(vec![
        "rank",
        "node",
        "state",
        "checks",
        "link MB/s",
        "torch",
        "driver",
    ]);
    for n in &report.nodes {
        let checks = match &n.report {
            // `5 pass`, `4 pass, 1 fail`: the counts that are not zero.
            Some(r) => {
                let s = &r.summary;
                let parts: Vec<String> = [
                    (s.pass, "pass"),
                    (s.warn, "warn"),
                    (s.fail + s.error, "fail"),
                ]
                .iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, w)| format!("{n} {w}"))
                .collect();
                if parts.is_empty() {
                    "nothing ran".to_string()
                } else {
                    parts.join(", ")
                }
            }
            // Why is in the fleet.nodes line under the table.
            None => "-".to_string(),
        };
        let state = match n.state {
            NodeState::Reported if n.report.as_ref().is_some_and(|r| !r.passed) => "FAILED",
            NodeState::Reported => "ok",
            NodeState::Missing => "MISSING",
            NodeState::Lost => "LOST",
        };
        let link = match (n.rank, n.link_mbs) {
            (0, _) => "(rank 0)".to_string(),
            (_, Some(v)) => format!("{v:.0}"),
            (_, None) => "-".to_string(),
        };
        // `2.7.0+cu126 (CUDA 12.6)`: the version; --json has the rest.
        let get = |k: &str| {
            n.software
                .get(k)
                .and_then(|v| v.split_whitespace().next())
                .map_or("-".into(), |v| output::outside(v).into_owned())
        };
        // A peer's host name and software are its own words: escaped, so a
        // forged report cannot drive the terminal or forge a row.
        let host = match (&n.host, &n.address) {
            (Some(h), Some(a)) if a != "self" => format!("{h} {a}"),
            (Some(h), _) => h.clone(),
            (None, Some(a)) => a.clone(),
            (None, None) => "-".to_string(),
        };
        let host = output::outside(&host).into_owned();
        t.add_row(vec![
            Cell::new(n.rank).set_alignment(CellAlignment::Right),
            Cell::new(host),
            Cell::new(state),
            Cell::new(checks),
            Cell::new(link).set_alignment(CellAlignment::Right),
            Cell::new(get("torch")),
            Cell::new(get("driver")),
        ]);
    }
    output::fit_table(&mut t, fit);
    let mut out = t.to_string();
    out.push('\n');
    for r in &report.fleet {
        let line = format!(
            "{:<5} {}: {}",
            r.status.label(),
            r.id,
            output::outside(&r.message)
        );
        out.push_str(&output::wrap_text(&line, width));
        out.push('\n');
        if r.status != Status::Pass && r.status != Status::Skip {
            if let Some(h) = &r.hint {
                let h = output::outside(h);
                out.push_str(&output::wrap_text(&format!("      hint: {h}"), width));
                out.push('\n');
            }
        }
    }
    if let Some(line) = phases_line(report) {
        out.push_str(&output::wrap_text(&line, width));
        out.push('\n');
    }
    out.push_str(&output::wrap_text(&summary_line(report), width));
    out.push('\n');
    out
}

/// `rank 0's time: joined 1.5s, its checks 0.4s, reports 0.1s (297kB),
/// links 0.4s (8 groups: 14 timed by rank 0, 49 by leaders), all-reduce
/// 1.6s`, each figure and its unit one word (as the summary line's `(4.1s)`)
/// so that a narrow terminal never wraps between them; none for a fleet of
/// one.
pub fn phases_line(report: &FleetReport) -> Option<String> {
    let p = &report.phases;
    if report.nodes_expected < 2 {
        return None;
    }
    Some(format!(
        "rank 0's time: joined {:.1}s, its checks {:.1}s, reports {:.1}s ({}kB), links {:.1}s ({} group{}: {} timed by rank 0, {} by leaders), all-reduce {:.1}s",
        p.join_s,
        p.checks_s,
        p.reports_s,
        p.report_bytes.div_ceil(1000),
        p.links_s,
        p.groups,
        if p.groups == 1 { "" } else { "s" },
        p.links_by_root,
        p.links_by_leaders,
        p.all_reduce_s
    ))
}

/// `fleet verify passed: 3 of 3 nodes, 5 pass, 0 warn, 0 fail (4.1 s)`.
pub fn summary_line(report: &FleetReport) -> String {
    let s = &report.summary;
    let reported = report
        .nodes
        .iter()
        .filter(|n| n.state == NodeState::Reported)
        .count();
    format!(
        "fleet verify {}: {reported} of {} nodes reported; {} pass, {} warn, {} fail, {} skip ({:.1}s)",
        if report.passed { "passed" } else { "FAILED" },
        report.nodes_expected,
        s.pass,
        s.warn,
        s.fail + s.error,
        s.skip,
        report.seconds
    )
}

/// JUnit XML: a suite per node (its checks; a node without a report is one
/// failed case saying why) and a suite for the fleet's verdicts.
pub fn junit(report: &FleetReport) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"imgctl verify --fleet\" time=\"{:.3}\">\n",
        report.seconds
    ));
    for n in &report.nodes {
        let name = xml_escape(&format!("imgctl.fleet.{}", n.label()));
        match &n.report {
            Some(r) => {
                out.push_str(&testsuite_open(&name, r.results.len(), &r.summary));
                out.push_str(">\n");
                out.push_str(&testcases(&r.results));
            }
            None => {
                out.push_str(&format!(
                    "  <testsuite name=\"{name}\" tests=\"1\" failures=\"1\" errors=\"0\" skipped=\"0\">\n"
                ));
                let why = xml_escape(n.reason.as_deref().unwrap_or("did not report"));
                out.push_str(&format!(
                    "    <testcase classname=\"imgctl.fleet\" name=\"node[rank {}]\">\n      <failure message=\"{why}\" type=\"FAIL\">{why}</failure>\n    </testcase>\n",
                    n.rank
                ));
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str(&testsuite_open(
        "imgctl.fleet",
        report.fleet.len(),
        &report.summary,
    ));
    out.push_str(">\n");
    out.push_str(&testcases(&report.fleet));
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::fleet::{judge, Phases};

    #[test]
    fn the_phases_line_keeps_each_figure_with_its_unit_at_80_columns() {
        let mut report = judge(Vec::new(), 64);
        report.phases = Phases {
            join_s: 4.71,
            checks_s: 0.93,
            reports_s: 0.12,
            links_s: 2.94,
            all_reduce_s: 2.06,
            groups: 8,
            links_by_root: 14,
            links_by_leaders: 49,
            report_bytes: 296_116,
        };
        let line = phases_line(&report).unwrap();
        assert_eq!(
            line,
            "rank 0's time: joined 4.7s, its checks 0.9s, reports 0.1s (297kB), links 2.9s (8 groups: 14 timed by rank 0, 49 by leaders), all-reduce 2.1s"
        );
        let wrapped = output::wrap_text(&line, Some(80));
        for l in wrapped.lines() {
            let first = l.split_whitespace().next().unwrap_or_default();
            assert!(!matches!(first, "s" | "s," | "kB)"), "{wrapped}");
        }
        // A fleet of one has nothing to say about a tree.
        assert_eq!(phases_line(&judge(Vec::new(), 1)), None);
    }
}
