//! The history's records, offenders, drift, exclusion list, return to
//! fleet, and appends from many writers at once.
use super::*;

const DAY: f64 = 86_400.0;

fn rec(node: &str, unix: f64, passed: bool, tflops: Option<f64>) -> Record {
    Record {
        v: RECORD_VERSION,
        run: format!("run-{unix}"),
        unix,
        node: node.into(),
        rank: 0,
        state: NodeState::Reported,
        passed,
        failing: if passed {
            vec![]
        } else {
            vec!["nvml.ecc".into()]
        },
        driver: Some("570.86.15".into()),
        gpus: vec![GpuSeen {
            index: 0,
            name: "NVIDIA H200".into(),
            sm: Some("sm_90".into()),
        }],
        figures: tflops
            .map(|v| Figure {
                id: "functional.matmul_bf16".into(),
                gpu: 0,
                model: "NVIDIA H200".into(),
                value: v,
                unit: "TFLOP/s".into(),
            })
            .into_iter()
            .collect(),
    }
}

#[test]
fn a_node_that_failed_two_of_its_last_three_runs_is_a_repeat_offender() {
    let history = [
        rec("sn1", 1.0, true, None),
        rec("sn2", 1.0, false, None),
        rec("sn1", 2.0, true, None),
        rec("sn2", 2.0, true, None),
        rec("sn1", 3.0, false, None),
        rec("sn2", 3.0, false, None),
    ];
    let o = offenders(&history);
    assert_eq!(o.len(), 1, "{o:?}");
    assert_eq!((o[0].node.as_str(), o[0].failed, o[0].of), ("sn2", 2, 3));
    assert_eq!(exclude_list(&o), "sn2");
    let v = verdicts(&o, history.len(), 0);
    assert_eq!(v[0].status, Status::Warn);
    assert_eq!(
        v[0].message,
        "sn2 is a repeat offender: failed in 2 of its last 3 runs (nvml.ecc; nvml.ecc)"
    );
    // Only the last three count: an old failure is forgiven.
    let healed = [
        rec("sn3", 1.0, false, None),
        rec("sn3", 2.0, false, None),
        rec("sn3", 3.0, true, None),
        rec("sn3", 4.0, true, None),
        rec("sn3", 5.0, false, None),
    ];
    assert!(offenders(&healed).is_empty());
    assert_eq!(
        verdicts(&[], 5, 1)[0].message,
        "no repeat offender in 5 recorded node-run(s) (1 unreadable line(s) skipped)"
    );
}

#[test]
fn a_figure_falling_three_percent_a_week_is_named_and_noise_is_not() {
    // GEMM falling 4 % a week over six weekly runs.
    let falling: Vec<Record> = (0..6)
        .map(|w| {
            rec(
                "sn4",
                w as f64 * 7.0 * DAY,
                true,
                Some(700.0 * (1.0 - 0.04 * w as f64)),
            )
        })
        .collect();
    let o = offenders(&falling);
    assert_eq!(o.len(), 1);
    assert!(!o[0].repeat(), "a drift warns, it does not exclude");
    assert!(
        o[0].drifting[0].starts_with("functional.matmul_bf16 GPU 0: -4."),
        "{:?}",
        o[0].drifting
    );
    assert!(
        o[0].drifting[0].contains("over 6 runs (700.0 → 560.0 TFLOP/s)"),
        "{:?}",
        o[0].drifting
    );
    assert_eq!(exclude_list(&o), "");
    // ±2 % noise around a flat line: no drift.
    let noisy: Vec<Record> = (0..6)
        .map(|w| {
            rec(
                "sn5",
                w as f64 * 7.0 * DAY,
                true,
                Some(700.0 * (1.0 + 0.02 * (-1f64).powi(w))),
            )
        })
        .collect();
    assert!(offenders(&noisy).is_empty());
    // Three runs are too few to call a trend.
    assert!(offenders(&falling[..3]).is_empty());
}

#[test]
fn return_to_fleet_passes_inside_the_spread_and_names_what_is_outside() {
    use crate::verify::{ExpectGpus, Level, Report};
    let history: Vec<Record> = [690.0, 700.0, 712.0]
        .iter()
        .enumerate()
        .map(|(i, v)| rec(&format!("sn{i}"), 1.0, true, Some(*v)))
        .chain([rec("bad", 1.0, false, Some(100.0))])
        .collect();
    let node = |tflops: f64| {
        Report::new(
            "host",
            None,
            Level::Full,
            ExpectGpus::Any,
            vec![
                CheckResult::pass("nvml.identity", "NVIDIA H200 GPU-x at 0:18")
                    .gpu(0)
                    .fact("name", "NVIDIA H200"),
                CheckResult::pass("functional.matmul_bf16", "ok")
                    .gpu(0)
                    .value(tflops, "TFLOP/s"),
            ],
        )
    };
    let r = against(&node(701.0), &history);
    assert_eq!(r.status, Status::Pass, "{r:?}");
    let r = against(&node(640.0), &history);
    assert_eq!(r.status, Status::Fail);
    assert_eq!(
        r.message,
        "1 figure(s) outside the fleet's spread: functional.matmul_bf16 GPU 0: 640.0 TFLOP/s, the fleet's NVIDIA H200 recorded 690.0…712.0 TFLOP/s over 3 run(s)"
    );
    // A node with nothing comparable cannot pass.
    let bare = Report::new("host", None, Level::Quick, ExpectGpus::Any, vec![]);
    assert_eq!(against(&bare, &history).status, Status::Error);
}

#[test]
fn appends_from_many_writers_at_once_keep_every_line_whole() {
    let dir = tempfile::tempdir().unwrap();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || {
                for i in 0..25 {
                    // Big records: a torn write would split a line.
                    let mut r = rec(&format!("w{w}"), (w * 100 + i) as f64, true, Some(1.0));
                    r.failing = vec!["x".repeat(5000)];
                    append(&dir, &[r.clone(), r]).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let (records, bad) = read(dir.path()).unwrap();
    assert_eq!((records.len(), bad), (400, 0));
    // A half-written last line (a run killed mid-write) is skipped, not fatal.
    let path = dir.path().join(HISTORY_FILE);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"{\"v\":1,\"run\":\"cut").unwrap();
    assert_eq!(read(dir.path()).unwrap().1, 1);
    // No history yet: nothing, not an error.
    assert_eq!(read(&dir.path().join("none")).unwrap().0.len(), 0);
}

#[test]
fn records_name_nodes_by_scheduler_name_and_tell_shared_hosts_apart() {
    use super::super::NodeEntry;
    let entry = |rank: usize, node: Option<&str>, address: &str| NodeEntry {
        rank,
        host: Some("vm".into()),
        node: node.map(str::to_string),
        address: Some(address.into()),
        state: NodeState::Reported,
        reason: None,
        link_mbs: None,
        link_intact: None,
        link_by: None,
        topology: None,
        probe_port: None,
        software: [("driver".to_string(), "570.86.15".to_string())].into(),
        report: None,
    };
    let mut report = super::super::judge(
        vec![
            entry(0, None, "self"),
            entry(1, None, "10.0.0.2"),
            entry(2, Some("sn3"), "10.0.0.3"),
        ],
        3,
    );
    report.nodes[2].state = NodeState::Lost;
    report.nodes[2].reason = Some("joined, then went silent".into());
    let r = records_of(&report, "run-1", 5.0);
    let names: Vec<&str> = r.iter().map(|x| x.node.as_str()).collect();
    assert_eq!(names, ["vm@rank0", "vm@10.0.0.2", "sn3"]);
    assert!(!r[2].passed);
    assert_eq!(r[2].failing, ["joined, then went silent"]);
    assert_eq!(r[0].driver.as_deref(), Some("570.86.15"));
}
