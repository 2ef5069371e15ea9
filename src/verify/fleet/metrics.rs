//! The fleet's report in Prometheus' text format (`verify --fleet --metrics
//! FILE`), for a node exporter's textfile collector to publish: one gauge
//! per node and check (`imgctl_verify_check_failed`, and the measured
//! value beside it), the nodes' states and links, the fleet's own verdicts.
//! Label values come from the nodes (outside input) and are escaped as the
//! format says (backslash, double quote, line feed).
use std::fmt::Write as _;

use super::{history, FleetReport, NodeState};

/// A label value, escaped for the text format.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `name{k="v",…} value`.
fn line(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    let labels: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
        .collect();
    let value = if value.is_finite() {
        format!("{value}")
    } else {
        "NaN".to_string()
    };
    if labels.is_empty() {
        let _ = writeln!(out, "{name} {value}");
    } else {
        let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
    }
}

fn head(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

/// The text of one fleet run, ended at `unix` seconds.
pub fn prometheus(report: &FleetReport, unix: f64) -> String {
    let mut out = String::new();
    let b = |x: bool| if x { 1.0 } else { 0.0 };
    head(
        &mut out,
        "imgctl_fleet_passed",
        "1 when the last fleet verify passed.",
    );
    line(&mut out, "imgctl_fleet_passed", &[], b(report.passed));
    head(
        &mut out,
        "imgctl_fleet_last_run_timestamp_seconds",
        "When the last fleet verify ended.",
    );
    line(
        &mut out,
        "imgctl_fleet_last_run_timestamp_seconds",
        &[],
        unix.floor(),
    );
    head(
        &mut out,
        "imgctl_fleet_nodes_expected",
        "Nodes the launcher started.",
    );
    line(
        &mut out,
        "imgctl_fleet_nodes_expected",
        &[],
        report.nodes_expected as f64,
    );
    head(
        &mut out,
        "imgctl_fleet_check_failed",
        "1 when a fleet verdict (fleet.nodes, fleet.links, ...) failed.",
    );
    let mut ids: Vec<&str> = report.fleet.iter().map(|r| r.id.as_str()).collect();
    ids.dedup();
    for id in ids {
        let failed = report
            .fleet
            .iter()
            .any(|r| r.id == id && r.status.fails_run());
        line(
            &mut out,
            "imgctl_fleet_check_failed",
            &[("check", id)],
            b(failed),
        );
    }
    let names = history::node_names(&report.nodes);
    head(
        &mut out,
        "imgctl_fleet_node_up",
        "1 when the node reported; 0 when it never joined or was lost.",
    );
    for (n, name) in report.nodes.iter().zip(&names) {
        let rank = n.rank.to_string();
        line(
            &mut out,
            "imgctl_fleet_node_up",
            &[("node", name), ("rank", &rank)],
            b(n.state == NodeState::Reported),
        );
    }
    head(
        &mut out,
        "imgctl_fleet_link_megabytes_per_second",
        "Rank 0 to the node, 10^6 bytes a second.",
    );
    for (n, name) in report.nodes.iter().zip(&names) {
        if let Some(mbs) = n.link_mbs {
            let rank = n.rank.to_string();
            line(
                &mut out,
                "imgctl_fleet_link_megabytes_per_second",
                &[("node", name), ("rank", &rank)],
                mbs,
            );
        }
    }
    head(
        &mut out,
        "imgctl_verify_check_failed",
        "1 when the node's check failed (FAIL or ERROR), per node, check and subject.",
    );
    let mut values = String::new();
    for (n, name) in report.nodes.iter().zip(&names) {
        let Some(r) = &n.report else { continue };
        let rank = n.rank.to_string();
        for x in &r.results {
            let subject = x.subject();
            let labels = [
                ("node", name.as_str()),
                ("rank", rank.as_str()),
                ("check", x.id.as_str()),
                ("subject", subject.as_str()),
            ];
            line(
                &mut out,
                "imgctl_verify_check_failed",
                &labels,
                b(x.status.fails_run()),
            );
            if let Some(v) = x.value {
                let unit = x.unit.as_deref().unwrap_or("");
                let mut with_unit = labels.to_vec();
                with_unit.push(("unit", unit));
                line(&mut values, "imgctl_verify_check_value", &with_unit, v);
            }
        }
    }
    if !values.is_empty() {
        head(
            &mut out,
            "imgctl_verify_check_value",
            "The node's measured value of a check, in its unit.",
        );
        out.push_str(&values);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::fleet::NodeEntry;
    use crate::verify::result::CheckResult;
    use crate::verify::{ExpectGpus, Level, Report};

    #[test]
    fn a_fleet_reads_as_gauges_and_outside_names_are_escaped() {
        let node = |rank: usize, host: &str, passed: bool| NodeEntry {
            rank,
            host: Some(host.into()),
            node: None,
            address: Some(format!("10.0.0.{rank}")),
            state: NodeState::Reported,
            reason: None,
            link_mbs: (rank > 0).then_some(905.5),
            link_intact: None,
            link_by: None,
            topology: None,
            probe_port: None,
            software: Default::default(),
            report: Some(Report::new(
                "host",
                None,
                Level::Full,
                ExpectGpus::Any,
                vec![if passed {
                    CheckResult::pass("func.matmul_bf16", "ok")
                        .gpu(0)
                        .value(700.0, "TFLOP/s")
                } else {
                    CheckResult::fail("nvml.ecc", "uncorrectable errors").gpu(1)
                }],
            )),
        };
        let report =
            crate::verify::fleet::judge(vec![node(0, "a", true), node(1, "b\"\n\\", false)], 2);
        let text = prometheus(&report, 1_765_000_000.5);
        assert!(text.contains("imgctl_fleet_passed 0\n"), "{text}");
        assert!(
            text.contains("imgctl_fleet_last_run_timestamp_seconds 1765000000\n"),
            "{text}"
        );
        assert!(
            text.contains("imgctl_fleet_check_failed{check=\"fleet.node_checks\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("imgctl_fleet_node_up{node=\"a\",rank=\"0\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("imgctl_verify_check_failed{node=\"b\\\"\\n\\\\\",rank=\"1\",check=\"nvml.ecc\",subject=\"gpu1\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("imgctl_verify_check_value{node=\"a\",rank=\"0\",check=\"func.matmul_bf16\",subject=\"gpu0\",unit=\"TFLOP/s\"} 700\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "imgctl_fleet_link_megabytes_per_second{node=\"b\\\"\\n\\\\\",rank=\"1\"} 905.5\n"
            ),
            "{text}"
        );
        // Every sample line belongs to a family declared above it.
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(text.contains(&format!("# TYPE {name} gauge")), "{l}");
        }
    }
}
