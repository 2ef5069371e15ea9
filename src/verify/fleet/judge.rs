//! The fleet's verdicts from what rank 0 gathered: `fleet.nodes` (every
//! node reported), `fleet.node_checks` (each node's own verify passed),
//! `fleet.software` (the same software everywhere), `fleet.outliers` (no
//! GPU below the fleet median of a metric) and `fleet.links` (no link far
//! slower than the others). Pure: no I/O, no clock.
use std::collections::BTreeMap;

use super::{FleetReport, NodeEntry, NodeState, FLEET_SCHEMA_VERSION};
use crate::verify::report::Summary;
use crate::verify::result::CheckResult;
use crate::verify::run::MEDIAN_FRACTION;

/// A link slower than this share of the fleet's median link is a WARN
/// naming its node: a link trained down (or shaped) to a tenth is far
/// below it, while run-to-run swings of a healthy network (±20 %) stay above.
pub const LINK_FRACTION: f64 = 0.5;

/// How the links are judged: the probe's size and the floor asked for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkRule {
    /// Bytes of each probe.
    pub bytes: u64,
    /// The least MB/s a link must carry; `None`: judged against the median.
    pub floor_mbs: Option<f64>,
}

impl Default for LinkRule {
    fn default() -> Self {
        Self {
            bytes: super::DEFAULT_LINK_MIB << 20,
            floor_mbs: None,
        }
    }
}

/// A probe smaller than this is not timed as a bandwidth: the connection's
/// start (TCP's slow start, the first round trips) is most of its time, so
/// a healthy link would read as slow. It still tells "answered" and
/// "intact".
pub const MIN_TIMED_BYTES: u64 = 8 << 20;

/// Judges the gathered nodes (every rank of `expected`, in rank order),
/// their links by the default [`LinkRule`].
pub fn judge(nodes: Vec<NodeEntry>, expected: usize) -> FleetReport {
    judge_with(nodes, expected, LinkRule::default())
}

/// [`judge`], the links by `rule`.
pub fn judge_with(mut nodes: Vec<NodeEntry>, expected: usize, rule: LinkRule) -> FleetReport {
    nodes.sort_by_key(|n| n.rank);
    let reported: Vec<&NodeEntry> = nodes
        .iter()
        .filter(|n| n.state == NodeState::Reported)
        .collect();
    let mut fleet = vec![nodes_verdict(&nodes, expected)];
    fleet.extend(node_checks(&reported));
    fleet.extend(software(&reported));
    fleet.extend(outliers(&reported));
    fleet.extend(reachable(&nodes));
    fleet.extend(intact(&reported));
    fleet.extend(links(&reported, rule));
    let summary = Summary::of(&fleet);
    FleetReport {
        schema_version: FLEET_SCHEMA_VERSION,
        imgctl_version: env!("CARGO_PKG_VERSION").to_string(),
        nodes_expected: expected,
        passed: summary.passed(),
        summary,
        nodes,
        fleet,
        seconds: 0.0,
        offenders: Vec::new(),
        phases: super::Phases::default(),
    }
}

fn nodes_verdict(nodes: &[NodeEntry], expected: usize) -> CheckResult {
    const ID: &str = "fleet.nodes";
    let bad: Vec<String> = nodes
        .iter()
        .filter(|n| n.state != NodeState::Reported)
        .map(|n| {
            format!(
                "{} {}",
                n.label(),
                n.reason.as_deref().unwrap_or("did not report")
            )
        })
        .collect();
    let ok = nodes.len() - bad.len();
    let r = if bad.is_empty() {
        CheckResult::pass(ID, format!("{ok} of {expected} nodes reported"))
    } else {
        CheckResult::fail(
            ID,
            format!("{ok} of {expected} nodes reported; {}", bad.join("; ")),
        )
        .hint("check the named node: is it up, did the launcher start imgctl there, does it reach rank 0's address?")
    };
    r.measured(format!("{ok} of {expected}"))
        .threshold(format!("{expected} of {expected}"))
}

/// A FAIL per node whose own verify failed; one PASS when none did.
fn node_checks(reported: &[&NodeEntry]) -> Vec<CheckResult> {
    const ID: &str = "fleet.node_checks";
    let mut out = Vec::new();
    for n in reported {
        let Some(report) = &n.report else { continue };
        if !report.passed {
            let failing: Vec<String> = report
                .results
                .iter()
                .filter(|r| r.status.fails_run())
                .map(|r| {
                    // A check run again (the retry) says it failed twice.
                    let twice = if r.facts.contains_key("first_try") {
                        " (failed twice)"
                    } else {
                        ""
                    };
                    format!("{} {}{twice}", r.id, r.subject())
                })
                .collect();
            out.push(
                CheckResult::fail(ID, format!("{}: {} failed", n.label(), failing.join(", ")))
                    .fact("rank", n.rank.to_string())
                    .hint(
                        "the fleet's JSON report has that node's whole report under nodes[].report",
                    ),
            );
        }
    }
    if out.is_empty() {
        out.push(CheckResult::pass(
            ID,
            format!("every node's own checks passed ({})", nodes(reported.len())),
        ));
    }
    out
}

/// The same software on every node: for each fact, the value most nodes
/// have; every node with another is a FAIL naming it.
fn software(reported: &[&NodeEntry]) -> Vec<CheckResult> {
    const ID: &str = "fleet.software";
    let keys: std::collections::BTreeSet<&str> = reported
        .iter()
        .flat_map(|n| n.software.keys().map(String::as_str))
        .collect();
    let mut out = Vec::new();
    for &key in &keys {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for n in reported {
            let v = n.software.get(key).map_or("(none)", String::as_str);
            *counts.entry(v).or_default() += 1;
        }
        if counts.len() < 2 {
            continue;
        }
        // The value most nodes have (on a tie, the one that sorts first);
        // every node with another is named.
        let (common, most) = counts
            .iter()
            .max_by_key(|(v, c)| (**c, std::cmp::Reverse(**v)))
            .map(|(v, c)| (*v, *c))
            .expect("two or more values");
        for n in reported {
            let v = n.software.get(key).map_or("(none)", String::as_str);
            if v != common {
                out.push(
                    CheckResult::fail(
                        ID,
                        format!(
                            "{} has {key} {v}; {most} of {} nodes have {common}",
                            n.label(),
                            reported.len()
                        ),
                    )
                    .fact("rank", n.rank.to_string())
                    .fact("key", key)
                    .hint("run the same image (or install the same versions) on every node"),
                );
            }
        }
    }
    if out.is_empty() {
        let keys: Vec<&str> = keys.into_iter().collect();
        out.push(CheckResult::pass(
            ID,
            format!("the same {} on {}", keys.join(", "), nodes(reported.len())),
        ));
    }
    out
}

/// Every numeric per-GPU result against the fleet median of its check: a
/// GPU below [`MEDIAN_FRACTION`] of it is a WARN naming host, index and UUID.
fn outliers(reported: &[&NodeEntry]) -> Vec<CheckResult> {
    const ID: &str = "fleet.outliers";
    let mut by_check: BTreeMap<&str, Vec<(&NodeEntry, &CheckResult)>> = BTreeMap::new();
    for n in reported {
        let Some(report) = &n.report else { continue };
        for r in &report.results {
            if r.value.is_some() && r.gpu.is_some() && !r.status.fails_run() {
                by_check.entry(r.id.as_str()).or_default().push((n, r));
            }
        }
    }
    let mut out = Vec::new();
    let mut compared = 0usize;
    for (id, rows) in &by_check {
        let values: Vec<f64> = rows.iter().filter_map(|(_, r)| r.value).collect();
        if values.len() < 2 {
            continue;
        }
        compared += 1;
        let m = median(&values);
        for (n, r) in rows {
            let v = r.value.unwrap_or(0.0);
            if v < MEDIAN_FRACTION * m {
                let unit = r.unit.as_deref().unwrap_or("");
                let uuid = uuid_of(n, r.gpu);
                out.push(
                    CheckResult::warn(
                        ID,
                        format!(
                            "{} GPU {} ({uuid}): {id} {v:.1} {unit}, below {:.0}% of the fleet median {m:.1} {unit}",
                            n.label(),
                            r.gpu.unwrap_or(0),
                            MEDIAN_FRACTION * 100.0
                        ),
                    )
                    .measured(format!("{v:.1} {unit}"))
                    .threshold(format!("≥ {:.1} {unit} (90% of the fleet median)", MEDIAN_FRACTION * m))
                    .value(v, unit)
                    .fact("rank", n.rank.to_string())
                    .hint("check that GPU's clocks, power and temperature (nvml.throttle) and drain it if it stays slow"),
                );
            }
        }
    }
    if out.is_empty() {
        out.push(if compared == 0 {
            CheckResult::skip(
                ID,
                "no per-GPU figure to compare across nodes (none measured: no GPU, or only the quick checks ran)",
            )
        } else {
            CheckResult::pass(
                ID,
                format!("every GPU within 90% of the fleet median on {compared} metric(s)"),
            )
        });
    }
    out
}

fn uuid_of(n: &NodeEntry, gpu: Option<u32>) -> String {
    n.report
        .as_ref()
        .and_then(|r| {
            r.results
                .iter()
                .find(|x| x.gpu == gpu && x.facts.contains_key("uuid"))
        })
        .and_then(|x| x.facts.get("uuid").cloned())
        .unwrap_or_else(|| "UUID unknown".to_string())
}

/// Every node that joined answered its link probe, from rank 0 or its
/// group's leader (`fleet.reachable`).
fn reachable(all: &[NodeEntry]) -> Vec<CheckResult> {
    const ID: &str = "fleet.reachable";
    let joined: Vec<&NodeEntry> = all
        .iter()
        .filter(|n| n.rank != 0)
        .filter(|n| {
            n.state == NodeState::Reported
                || n.reason.as_deref().is_some_and(|r| {
                    r.starts_with("lost during the link probe")
                        || r.starts_with("lost while timing its group's links")
                })
        })
        .collect();
    if joined.is_empty() {
        return vec![CheckResult::skip(
            ID,
            "no other node reported: no link to probe",
        )];
    }
    let silent: Vec<String> = joined
        .iter()
        .filter(|n| n.link_mbs.is_none())
        .map(|n| {
            format!(
                "{}: {}",
                n.label(),
                n.reason.as_deref().unwrap_or("no answer")
            )
        })
        .collect();
    let answered = joined.len() - silent.len();
    let r = if silent.is_empty() {
        CheckResult::pass(
            ID,
            format!(
                "every node that reported answered its link probe ({answered} of {})",
                joined.len()
            ),
        )
    } else {
        CheckResult::fail(
            ID,
            format!(
                "{} did not answer its link probe: {}",
                nodes(silent.len()),
                silent.join("; ")
            ),
        )
        .hint("check the named node's network path to rank 0 (routes, firewall, MTU)")
    };
    vec![r
        .measured(format!("{answered} of {}", joined.len()))
        .threshold(format!("{} of {}", joined.len(), joined.len()))]
}

/// The probe's bytes arrived unchanged (`fleet.intact`).
fn intact(reported: &[&NodeEntry]) -> Vec<CheckResult> {
    const ID: &str = "fleet.intact";
    let checked: Vec<&&NodeEntry> = reported
        .iter()
        .filter(|n| n.link_intact.is_some())
        .collect();
    if checked.is_empty() {
        return vec![CheckResult::skip(ID, "no probe answered: nothing to check")];
    }
    let mut out: Vec<CheckResult> = checked
        .iter()
        .filter(|n| n.link_intact == Some(false))
        .map(|n| {
            CheckResult::fail(
                ID,
                format!("the bytes {} sent to {} arrived changed: its checksum of them differs from the sender's", timed_by(n), n.label()),
            )
            .fact("rank", n.rank.to_string())
            .hint("a NIC, cable, switch or the node's memory corrupts data: check `ethtool -S` errors and dmesg, and drain the node")
        })
        .collect();
    if out.is_empty() {
        out.push(CheckResult::pass(
            ID,
            format!(
                "the probe's bytes arrived unchanged at {} (checksum); the all-reduce's sum is checked in fleet.allreduce",
                nodes(checked.len())
            ),
        ));
    }
    out
}

/// The link to each node against the floor asked for, else the median of
/// the links (`fleet.links`: fast enough).
fn links(reported: &[&NodeEntry], rule: LinkRule) -> Vec<CheckResult> {
    const ID: &str = "fleet.links";
    let timed: Vec<(&NodeEntry, f64)> = reported
        .iter()
        .filter_map(|n| n.link_mbs.map(|v| (*n, v)))
        .collect();
    if timed.is_empty() {
        return vec![CheckResult::skip(ID, "one node: no link to time")];
    }
    if rule.bytes < MIN_TIMED_BYTES {
        return vec![CheckResult::skip(
            ID,
            format!(
                "a probe of {} MiB is too small to time a link (the connection's start is most of its time); {} MiB or more times it",
                rule.bytes >> 20,
                MIN_TIMED_BYTES >> 20
            ),
        )];
    }
    if let Some(floor) = rule.floor_mbs {
        return floor_links(&timed, floor);
    }
    let values: Vec<f64> = timed.iter().map(|(_, v)| *v).collect();
    let m = median(&values);
    let mut out = Vec::new();
    if timed.len() >= 2 {
        for (n, v) in &timed {
            if *v < LINK_FRACTION * m {
                out.push(
                    CheckResult::warn(
                        ID,
                        format!(
                            "the link from {} to {} is slow: {v:.0} MB/s, the links' median {m:.0} MB/s",
                            timed_by(n),
                            n.label()
                        ),
                    )
                    .measured(format!("{v:.0} MB/s"))
                    .threshold(format!("≥ {:.0} MB/s (50% of the median link)", LINK_FRACTION * m))
                    .value(*v, "MB/s")
                    .fact("rank", n.rank.to_string())
                    .hint("check that node's network link: its speed (`ethtool`), errors, and what shares it"),
                );
            }
        }
    }
    if out.is_empty() {
        let what = if timed.len() >= 2 {
            "within 50% of their median"
        } else {
            "one link, nothing to compare it with"
        };
        out.push(
            CheckResult::pass(ID, format!("{}; {what}", link_list(&timed, m)))
                .measured(format!("median {m:.0} MB/s"))
                .value(m, "MB/s"),
        );
    }
    out
}

/// Most links a PASS line lists one by one; above, the least, the median
/// and the most.
const LISTED_LINKS: usize = 16;

/// Who timed a node's link: `rank 0`, or its group's leader.
fn timed_by(n: &NodeEntry) -> String {
    format!("rank {}", n.link_by.unwrap_or(0))
}

/// `links from rank 0 in MB/s: rank 1 1611, rank 2 1749`; with leaders,
/// `links in MB/s, timed by rank 0 and 7 group leaders: …`; above
/// [`LISTED_LINKS`], the least, the median and the most.
fn link_list(timed: &[(&NodeEntry, f64)], median: f64) -> String {
    let mut leaders: Vec<usize> = timed.iter().filter_map(|(n, _)| n.link_by).collect();
    leaders.sort_unstable();
    leaders.dedup();
    let head = match leaders.len() {
        0 => "links from rank 0 in MB/s".to_string(),
        1 => "links in MB/s, timed by rank 0 and 1 group leader".to_string(),
        k => format!("links in MB/s, timed by rank 0 and {k} group leaders"),
    };
    if timed.len() <= LISTED_LINKS {
        let all: Vec<String> = timed
            .iter()
            .map(|(n, v)| format!("rank {} {v:.0}", n.rank))
            .collect();
        return format!("{head}: {}", all.join(", "));
    }
    let least = timed.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let most = timed.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    match (least, most) {
        (Some((l, lv)), Some((h, hv))) => format!(
            "{head}: {} links, least {lv:.0} (rank {}), median {median:.0}, most {hv:.0} (rank {})",
            timed.len(),
            l.rank,
            h.rank
        ),
        _ => head,
    }
}

/// Each link against an absolute floor: a FAIL per link below it.
fn floor_links(timed: &[(&NodeEntry, f64)], floor: f64) -> Vec<CheckResult> {
    const ID: &str = "fleet.links";
    const SOURCE: &str = "the floor asked for by the caller";
    let mut out = Vec::new();
    for (n, v) in timed.iter().filter(|(_, v)| *v < floor) {
        let mut r = CheckResult::fail(
            ID,
            format!(
                "the link from {} to {} carries {v:.0} MB/s, below the floor of {floor:.0} MB/s",
                timed_by(n),
                n.label()
            ),
        )
        .measured(format!("{v:.0} MB/s"))
        .threshold(format!("≥ {floor:.0} MB/s"))
        .value(*v, "MB/s")
        .fact("rank", n.rank.to_string())
        .hint("check that node's network link: its speed (`ethtool`), errors, and what shares it");
        r.source = Some(SOURCE.to_string());
        out.push(r);
    }
    if out.is_empty() {
        let all: Vec<String> = timed
            .iter()
            .map(|(n, v)| format!("rank {} {v:.0}", n.rank))
            .collect();
        let mut r = CheckResult::pass(
            ID,
            format!(
                "links from rank 0 in MB/s: {}; every one at least {floor:.0}",
                all.join(", ")
            ),
        )
        .measured(format!(
            "lowest {:.0} MB/s",
            timed.iter().map(|(_, v)| *v).fold(f64::INFINITY, f64::min)
        ))
        .threshold(format!("≥ {floor:.0} MB/s"));
        r.source = Some(SOURCE.to_string());
        out.push(r);
    }
    out
}

/// `1 node`, `3 nodes`.
fn nodes(n: usize) -> String {
    if n == 1 {
        "1 node".to_string()
    } else {
        format!("{n} nodes")
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::context::ExpectGpus;
    use crate::verify::report::Report;
    use crate::verify::result::Level;

    fn node(rank: usize, torch: &str, tflops: f64, link: Option<f64>) -> NodeEntry {
        let results = vec![
            CheckResult::pass("nvml.identity", "H200")
                .gpu(0)
                .fact("uuid", format!("GPU-{rank}")),
            CheckResult::pass("func.matmul_bf16", "ok")
                .gpu(0)
                .value(tflops, "TFLOP/s"),
        ];
        NodeEntry {
            rank,
            host: Some(format!("node{rank}")),
            node: None,
            address: Some(format!("10.0.0.{}", rank + 1)),
            state: NodeState::Reported,
            reason: None,
            link_mbs: link,
            link_intact: None,
            link_by: None,
            topology: None,
            probe_port: None,
            software: [("torch".to_string(), torch.to_string())].into(),
            report: Some(Report::new(
                "host",
                None,
                Level::Full,
                ExpectGpus::Any,
                results,
            )),
        }
    }

    #[test]
    fn a_healthy_fleet_passes() {
        let r = judge(
            vec![
                node(0, "2.7.0", 680.0, None),
                node(1, "2.7.0", 690.0, Some(1000.0)),
                node(2, "2.7.0", 685.0, Some(1100.0)),
            ],
            3,
        );
        assert!(r.passed, "{:#?}", r.fleet);
        assert_eq!(r.summary.warn, 0, "{:#?}", r.fleet);
    }

    #[test]
    fn the_odd_node_slow_gpu_slow_link_and_missing_node_are_named() {
        let mut missing = node(3, "", 0.0, None);
        missing.state = NodeState::Missing;
        missing.host = None;
        missing.address = None;
        missing.report = None;
        missing.software.clear();
        missing.reason = Some("never joined the rendezvous at 10.0.0.1:29500 within 45s".into());
        let r = judge(
            vec![
                node(0, "2.7.0", 680.0, None),
                node(1, "2.7.1", 690.0, Some(100.0)),
                node(2, "2.7.0", 400.0, Some(1100.0)),
                node(4, "2.7.0", 685.0, Some(1000.0)),
                missing,
            ],
            5,
        );
        assert!(!r.passed);
        let text = |id: &str| -> Vec<String> {
            r.fleet
                .iter()
                .filter(|x| x.id == id)
                .map(|x| format!("{} {}", x.status.label(), x.message))
                .collect()
        };
        assert_eq!(
            text("fleet.software"),
            ["FAIL node1 (rank 1, 10.0.0.2) has torch 2.7.1; 3 of 4 nodes have 2.7.0"]
        );
        let o = text("fleet.outliers");
        assert!(
            o.len() == 1 && o[0].starts_with("WARN node2 (rank 2, 10.0.0.3) GPU 0 (GPU-2): func.matmul_bf16 400.0 TFLOP/s, below 90% of the fleet median 682.5"),
            "{o:?}"
        );
        let l = text("fleet.links");
        assert!(
            l.len() == 1
                && l[0].starts_with(
                    "WARN the link from rank 0 to node1 (rank 1, 10.0.0.2) is slow: 100 MB/s"
                ),
            "{l:?}"
        );
        let n = text("fleet.nodes");
        assert!(
            n[0].starts_with("FAIL 4 of 5 nodes reported; rank 3 never joined"),
            "{n:?}"
        );
    }

    /// Reachable, intact and fast enough are three lines, each its own.
    #[test]
    fn answered_intact_and_fast_enough_are_kept_apart() {
        let text = |r: &FleetReport, id: &str| -> Vec<String> {
            r.fleet
                .iter()
                .filter(|x| x.id == id)
                .map(|x| format!("{} {}", x.status.label(), x.message))
                .collect()
        };
        let mut corrupt = node(1, "2.7.0", 690.0, Some(1000.0));
        corrupt.link_intact = Some(false);
        let mut fine = node(2, "2.7.0", 690.0, Some(1100.0));
        fine.link_intact = Some(true);
        let mut cut = node(3, "2.7.0", 690.0, None);
        cut.state = NodeState::Lost;
        cut.reason = Some(
            "lost during the link probe: joined, then died before its report (connection closed)"
                .into(),
        );
        let rule = LinkRule {
            bytes: 16 << 20,
            floor_mbs: Some(1050.0),
        };
        let r = judge_with(
            vec![node(0, "2.7.0", 680.0, None), corrupt, fine, cut],
            4,
            rule,
        );
        assert_eq!(
            text(&r, "fleet.reachable"),
            ["FAIL 1 node did not answer its link probe: node3 (rank 3, 10.0.0.4): lost during the link probe: joined, then died before its report (connection closed)"]
        );
        assert_eq!(
            text(&r, "fleet.intact"),
            ["FAIL the bytes rank 0 sent to node1 (rank 1, 10.0.0.2) arrived changed: its checksum of them differs from the sender's"]
        );
        let links: Vec<&CheckResult> = r.fleet.iter().filter(|x| x.id == "fleet.links").collect();
        assert_eq!(links.len(), 1);
        assert_eq!(
            links[0].message,
            "the link from rank 0 to node1 (rank 1, 10.0.0.2) carries 1000 MB/s, below the floor of 1050 MB/s"
        );
        assert_eq!(
            links[0].source.as_deref(),
            Some("the floor asked for by the caller")
        );
        // A tiny probe still says "answered" and "intact", and times nothing.
        let mut ok = node(1, "2.7.0", 690.0, Some(3.0));
        ok.link_intact = Some(true);
        let tiny = LinkRule {
            bytes: 1 << 20,
            floor_mbs: None,
        };
        let r = judge_with(vec![node(0, "2.7.0", 680.0, None), ok], 2, tiny);
        assert!(r.passed, "{:#?}", r.fleet);
        assert_eq!(
            text(&r, "fleet.links"),
            ["SKIP a probe of 1 MiB is too small to time a link (the connection's start is most of its time); 8 MiB or more times it"]
        );
        assert_eq!(
            text(&r, "fleet.intact"),
            ["PASS the probe's bytes arrived unchanged at 1 node (checksum); the all-reduce's sum is checked in fleet.allreduce"]
        );
        assert_eq!(
            text(&r, "fleet.reachable"),
            ["PASS every node that reported answered its link probe (1 of 1)"]
        );
    }
}
