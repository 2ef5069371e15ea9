//! Verdict paths driven through the fake NVML backend.
use std::time::{Duration, Instant};

use super::*;
use crate::nvml::{self, FakeNvml, NvmlErr, PcieLink, RemappedRows};

fn opts(expect: ExpectGpus, only: &[&str]) -> Options {
    Options {
        level: Level::Quick,
        expect,
        only: only.iter().map(|s| s.to_string()).collect(),
        skip: Vec::new(),
        timeout: Duration::from_secs(10),
        words: super::wording::TEST_WORDS,
    }
}

fn run_fake(fake: FakeNvml, expect: ExpectGpus, only: &[&str]) -> Report {
    run_local_in(
        NvmlState::Ready(nvml::fake(fake)),
        &opts(expect, only),
        Pins::torch_2_7_0_cu126(),
        false,
    )
}

fn find<'a>(r: &'a Report, id: &str, gpu: Option<u32>) -> &'a CheckResult {
    r.results
        .iter()
        .find(|x| x.id == id && x.gpu == gpu)
        .unwrap_or_else(|| panic!("no result {id} {gpu:?} in {:#?}", r.results))
}

#[test]
fn healthy_node_passes_every_nvml_check() {
    let r = run_fake(FakeNvml::healthy(2), ExpectGpus::Exactly(2), &["nvml"]);
    assert!(
        r.passed,
        "{}",
        report::table(
            &r,
            false,
            crate::output::Fit::Natural,
            &super::wording::TEST_WORDS
        )
    );
    for x in &r.results {
        // Retired pages are NotSupported on Hopper: SKIP with the reason, never PASS.
        if x.id == "nvml.retired_pages" {
            assert_eq!(x.status, Status::Skip);
            assert!(x.message.contains("not supported"), "{}", x.message);
        } else {
            assert_eq!(x.status, Status::Pass, "{x:?}");
        }
    }
    assert_eq!(find(&r, "nvml.identity", Some(1)).gpu, Some(1));
}

#[test]
fn ecc_errors_fail_only_that_gpu_and_the_run() {
    let mut f = FakeNvml::healthy(2);
    if let Ok(e) = &mut f.gpus[1].ecc {
        e.uncorrected_volatile = 3;
    }
    let r = run_fake(f, ExpectGpus::Any, &["nvml.ecc"]);
    assert_eq!(find(&r, "nvml.ecc", Some(0)).status, Status::Pass);
    let bad = find(&r, "nvml.ecc", Some(1));
    assert_eq!(bad.status, Status::Fail);
    assert!(bad.message.contains("3 uncorrectable"));
    assert_eq!(bad.threshold.as_deref(), Some("ECC on, 0 uncorrectable"));
    assert!(!r.passed);
}

#[test]
fn ecc_disabled_or_historic_errors_warn() {
    let mut f = FakeNvml::healthy(2);
    if let Ok(e) = &mut f.gpus[0].ecc {
        e.enabled = false;
    }
    if let Ok(e) = &mut f.gpus[1].ecc {
        e.uncorrected_aggregate = 1;
    }
    let r = run_fake(f, ExpectGpus::Any, &["nvml.ecc"]);
    assert_eq!(find(&r, "nvml.ecc", Some(0)).status, Status::Warn);
    assert_eq!(find(&r, "nvml.ecc", Some(1)).status, Status::Warn);
    assert!(r.passed);
}

#[test]
fn pending_or_failed_remap_fails() {
    let mut f = FakeNvml::healthy(3);
    f.gpus[1].remapped = Ok(RemappedRows {
        uncorrected: 1,
        pending: true,
        ..Default::default()
    });
    f.gpus[2].remapped = Ok(RemappedRows {
        failed: true,
        ..Default::default()
    });
    let r = run_fake(f, ExpectGpus::Any, &["nvml.remapped_rows"]);
    assert_eq!(find(&r, "nvml.remapped_rows", Some(0)).status, Status::Pass);
    let p = find(&r, "nvml.remapped_rows", Some(1));
    assert_eq!(p.status, Status::Fail);
    assert!(p.message.contains("pending"));
    assert_eq!(find(&r, "nvml.remapped_rows", Some(2)).status, Status::Fail);
}

#[test]
fn pending_page_retirement_fails() {
    let mut f = FakeNvml::healthy(1);
    f.gpus[0].retired = Ok(nvml::RetiredPages {
        double_bit: 1,
        pending: true,
        ..Default::default()
    });
    let r = run_fake(f, ExpectGpus::Any, &["nvml.retired_pages"]);
    assert_eq!(find(&r, "nvml.retired_pages", Some(0)).status, Status::Fail);
}

#[test]
fn degraded_pcie_link_warns() {
    let mut f = FakeNvml::healthy(3);
    // Width x8 of x16: never a power-saving state.
    f.gpus[0].pcie = Ok(PcieLink {
        gen: 5,
        max_gen: 5,
        width: 8,
        max_width: 16,
    });
    // Gen1 while idle: ASPM power saving, not a fault.
    f.gpus[1].pcie = Ok(PcieLink {
        gen: 1,
        max_gen: 5,
        width: 16,
        max_width: 16,
    });
    // Gen3 while busy (not idle): degraded.
    f.gpus[2].pcie = Ok(PcieLink {
        gen: 3,
        max_gen: 5,
        width: 16,
        max_width: 16,
    });
    f.gpus[2].throttle = Ok(0);
    let r = run_fake(f, ExpectGpus::Any, &["nvml.pcie"]);
    let w = find(&r, "nvml.pcie", Some(0));
    assert_eq!(w.status, Status::Warn);
    assert_eq!(w.measured.as_deref(), Some("Gen5 x8"));
    assert_eq!(w.threshold.as_deref(), Some("Gen5 x16"));
    assert_eq!(find(&r, "nvml.pcie", Some(1)).status, Status::Pass);
    assert_eq!(find(&r, "nvml.pcie", Some(2)).status, Status::Warn);
}

#[test]
fn throttle_beyond_idle_and_power_cap_warns() {
    let mut f = FakeNvml::healthy(3);
    f.gpus[0].throttle = Ok(0x1 | 0x4); // idle + sw power cap: benign
    f.gpus[1].throttle = Ok(0x40); // hw thermal slowdown
    f.gpus[2].throttle = Err(NvmlErr::NotSupported("NVML_ERROR_NOT_SUPPORTED".into()));
    let r = run_fake(f, ExpectGpus::Any, &["nvml.throttle"]);
    assert_eq!(find(&r, "nvml.throttle", Some(0)).status, Status::Pass);
    let w = find(&r, "nvml.throttle", Some(1));
    assert_eq!(w.status, Status::Warn);
    assert!(w.message.contains("hw_thermal_slowdown"), "{}", w.message);
    // NotSupported is SKIP with its reason, never PASS.
    let s = find(&r, "nvml.throttle", Some(2));
    assert_eq!(s.status, Status::Skip);
    assert!(s.message.contains("not supported"));
}

#[test]
fn missing_gpu_fails_the_count() {
    let r = run_fake(
        FakeNvml::healthy(7),
        ExpectGpus::Exactly(8),
        &["nvml.device_count"],
    );
    let c = find(&r, "nvml.device_count", None);
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.message.contains("found 7 GPU(s), expected = 8"),
        "{}",
        c.message
    );
    assert_eq!(c.threshold.as_deref(), Some("= 8 GPU(s)"));
    assert!(!r.passed);
}

#[test]
fn lost_gpu_fails_count_and_its_own_checks() {
    let mut f = FakeNvml::healthy(2);
    f.gpus[1].lost = true;
    let r = run_fake(
        f,
        ExpectGpus::Exactly(2),
        &["nvml.device_count", "nvml.ecc"],
    );
    let c = find(&r, "nvml.device_count", None);
    assert_eq!(c.status, Status::Fail);
    assert!(
        c.message.contains("1 of 2 GPUs unreachable"),
        "{}",
        c.message
    );
    assert_eq!(find(&r, "nvml.ecc", Some(1)).status, Status::Fail);
    assert_eq!(find(&r, "nvml.ecc", Some(0)).status, Status::Pass);
}

#[test]
fn count_mismatch_with_expectation_fails_any_accepts_one() {
    let r = run_fake(
        FakeNvml::healthy(2),
        ExpectGpus::Exactly(4),
        &["nvml.device_count"],
    );
    assert_eq!(find(&r, "nvml.device_count", None).status, Status::Fail);
    let r = run_fake(
        FakeNvml::healthy(1),
        ExpectGpus::Any,
        &["nvml.device_count"],
    );
    assert_eq!(find(&r, "nvml.device_count", None).status, Status::Pass);
    let r = run_fake(
        FakeNvml::healthy(0),
        ExpectGpus::Any,
        &["nvml.device_count"],
    );
    assert_eq!(find(&r, "nvml.device_count", None).status, Status::Fail);
}

#[test]
fn hung_call_hits_its_deadline_and_verify_moves_on() {
    let mut f = FakeNvml::healthy(2);
    f.hang_on = Some("ecc");
    let mut o = opts(ExpectGpus::Any, &["nvml.ecc", "nvml.temperature"]);
    o.timeout = Duration::from_millis(200);
    let start = Instant::now();
    let r = run_local(NvmlState::Ready(nvml::fake(f)), &o, Pins::default());
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    let first = find(&r, "nvml.ecc", Some(0));
    assert_eq!(first.status, Status::Error);
    assert_eq!(first.message, "timed out after 0.2s");
    // NVML is wedged from then on: the rest of its checks are not tried (one
    // deadline, not one per check and GPU), and none of them passes.
    for (id, g) in [
        ("nvml.ecc", 1),
        ("nvml.temperature", 0),
        ("nvml.temperature", 1),
    ] {
        let e = find(&r, id, Some(g));
        assert_eq!(e.status, Status::Error, "{e:?}");
        assert_eq!(
            e.message,
            "not evaluated: NVML hung earlier in this run (nvml.ecc on gpu0 timed out after 0.2s)"
        );
    }
    assert!(!r.passed, "an ERROR (unknown verdict) fails the run");
}

#[test]
fn a_hang_costs_one_deadline_not_one_per_check_and_gpu() {
    let mut f = FakeNvml::healthy(8);
    f.hang_on = Some("temperature");
    let mut o = opts(ExpectGpus::Any, &["nvml"]);
    o.timeout = Duration::from_millis(300);
    let start = Instant::now();
    let r = run_local(NvmlState::Ready(nvml::fake(f)), &o, Pins::default());
    // 8 GPUs × 7 later NVML checks would be 17 s of deadlines one by one.
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    // What ran before the hang keeps its verdict.
    assert_eq!(find(&r, "nvml.ecc", Some(7)).status, Status::Pass);
    assert_eq!(find(&r, "nvml.processes", Some(3)).status, Status::Error);
    assert!(!r.passed);
}

#[test]
fn a_count_short_of_the_expectation_fails_even_when_not_selected() {
    // NVML is up but sees no GPU: `--only nvml.ecc` must not pass on a SKIP.
    let r = run_fake(FakeNvml::healthy(0), ExpectGpus::Any, &["nvml.ecc"]);
    let c = find(&r, "nvml.device_count", None);
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.message.contains("reported although not selected"),
        "{}",
        c.message
    );
    assert!(!r.passed);
    let r = run_fake(FakeNvml::healthy(2), ExpectGpus::Exactly(4), &["nvml.ecc"]);
    assert_eq!(find(&r, "nvml.device_count", None).status, Status::Fail);
    assert!(!r.passed);
    // When it is met, nothing is added.
    let r = run_fake(FakeNvml::healthy(2), ExpectGpus::Any, &["nvml.ecc"]);
    assert!(r.results.iter().all(|x| x.id == "nvml.ecc"));
    assert!(r.passed);
}

#[test]
fn no_driver_fails_with_one_clear_line_unless_none_expected() {
    let state = NvmlState::Unavailable("no NVIDIA driver: libnvidia-ml.so.1 not found".into());
    let r = run_local(
        state.clone(),
        &opts(ExpectGpus::Any, &["nvml"]),
        Pins::default(),
    );
    let d = find(&r, "nvml.driver", None);
    assert_eq!(d.status, Status::Fail);
    assert_eq!(d.message, "no NVIDIA driver: libnvidia-ml.so.1 not found");
    assert!(!r.passed);
    assert!(r
        .results
        .iter()
        .filter(|x| x.id != "nvml.driver")
        .all(|x| x.status == Status::Skip));
    let r = run_local(
        state,
        &opts(ExpectGpus::Exactly(0), &["nvml"]),
        Pins::default(),
    );
    assert!(r.passed);
    assert!(
        r.results.iter().all(|x| x.status == Status::Skip),
        "{:#?}",
        r.results
    );
}

#[test]
fn hot_gpu_power_cap_processes_mig_nvlink_topology() {
    // Another process than this test's own: the check leaves out its
    // caller's pid, and in a fresh container this test ran as pid 4242.
    let other = 4242 + u32::from(std::process::id() == 4242);
    let mut f = FakeNvml::healthy(2);
    f.gpus[0].temperature = 90; // ≥ slowdown 87
    f.gpus[1].temperature = 80; // within 10 °C
    f.gpus[0].power_mw = 700_000; // at the limit
    f.gpus[1].power_limit_mw = 500_000; // lowered below default
    f.gpus[0].processes = vec![nvml::GpuProcess {
        pid: other,
        used_bytes: Some(1 << 30),
    }];
    f.gpus[1].mig = Ok((true, true));
    f.gpus[1].nvlink = Ok(vec![true, true, false, true]);
    f.p2p.insert((0, 1), Err("ChipsetNotSupported".into()));
    let r = run_fake(f, ExpectGpus::Any, &["nvml"]);
    assert_eq!(find(&r, "nvml.temperature", Some(0)).status, Status::Fail);
    assert_eq!(find(&r, "nvml.temperature", Some(1)).status, Status::Warn);
    assert_eq!(find(&r, "nvml.power", Some(0)).status, Status::Warn);
    assert_eq!(find(&r, "nvml.power", Some(1)).status, Status::Warn);
    let p = find(&r, "nvml.processes", Some(0));
    assert_eq!(p.status, Status::Warn);
    assert!(p.message.contains(&format!("pid {other}")), "{}", p.message);
    assert_eq!(find(&r, "nvml.modes", Some(1)).status, Status::Warn);
    let l = find(&r, "nvml.nvlink", Some(1));
    assert_eq!(l.status, Status::Warn);
    assert!(l.message.contains("link(s) 2 down"));
    assert_eq!(find(&r, "nvml.topology", None).status, Status::Warn);
}

#[test]
fn inside_a_container_no_visible_process_is_not_a_pass() {
    let run = |in_container| {
        run_local_in(
            NvmlState::Ready(nvml::fake(FakeNvml::healthy(1))),
            &opts(ExpectGpus::Any, &["nvml.processes"]),
            Pins::default(),
            in_container,
        )
    };
    let host = run(false);
    assert_eq!(host.context, "host");
    assert_eq!(find(&host, "nvml.processes", Some(0)).status, Status::Pass);
    let inside = run(true);
    assert_eq!(inside.context, "container");
    let p = find(&inside, "nvml.processes", Some(0));
    assert_eq!(p.status, Status::Skip);
    assert!(p.message.contains("only this container's processes"));
}

#[test]
fn all_nvlinks_down_warns_when_there_are_peers() {
    let mut f = FakeNvml::healthy(2);
    f.gpus[0].nvlink = Ok(vec![false; 18]);
    let r = run_fake(f, ExpectGpus::Any, &["nvml.nvlink"]);
    let l = find(&r, "nvml.nvlink", Some(0));
    assert_eq!(l.status, Status::Warn, "{l:?}");
    assert!(l
        .message
        .contains("all 18 NVLink links are down although 1 peer"));
    assert_eq!(find(&r, "nvml.nvlink", Some(1)).status, Status::Pass);
    // One GPU alone: its links have nothing to connect to.
    let mut f = FakeNvml::healthy(1);
    f.gpus[0].nvlink = Ok(vec![false; 18]);
    let r = run_fake(f, ExpectGpus::Any, &["nvml.nvlink"]);
    assert_eq!(find(&r, "nvml.nvlink", Some(0)).status, Status::Skip);
}

#[test]
fn temperature_without_a_slowdown_threshold_is_still_shown() {
    let mut f = FakeNvml::healthy(1);
    f.gpus[0].slowdown = Err(NvmlErr::NotSupported("NVML_ERROR_NOT_SUPPORTED".into()));
    let r = run_fake(f, ExpectGpus::Any, &["nvml.temperature"]);
    let t = find(&r, "nvml.temperature", Some(0));
    assert_eq!(t.status, Status::Skip);
    assert_eq!(t.measured.as_deref(), Some("34 °C"));
    assert!(t
        .message
        .starts_with("34 °C; the slowdown threshold is not reported"));
}

#[test]
fn median_rule_warns_a_slow_gpu_above_the_floor() {
    let mk = |g: u32, v: f64| {
        CheckResult::pass("func.matmul_bf16", "ok")
            .gpu(g)
            .value(v, "TFLOP/s")
    };
    let mut results = vec![mk(0, 790.0), mk(1, 785.0), mk(2, 700.0), mk(3, 795.0)];
    apply_node_median(&mut results);
    assert_eq!(results[0].status, Status::Pass);
    assert_eq!(results[2].status, Status::Warn);
    assert!(results[2]
        .message
        .contains("below 90% of the node median 787.5 TFLOP/s"));
    assert!(results[2]
        .threshold
        .as_deref()
        .unwrap()
        .contains("708.8 TFLOP/s"));
}

#[test]
fn selection_by_id_prefix_and_unknown_ids() {
    let o = Options {
        level: Level::Quick,
        expect: ExpectGpus::Any,
        only: vec!["nvml".into()],
        skip: vec!["nvml.ecc".into()],
        timeout: Duration::from_secs(1),
        words: super::wording::TEST_WORDS,
    };
    assert!(selected("nvml.pcie", Level::Quick, &o));
    assert!(!selected("nvml.ecc", Level::Quick, &o));
    assert!(!selected("torch.version", Level::Quick, &o));
    let quick = Options {
        only: vec![],
        skip: vec![],
        ..o.clone()
    };
    assert!(!selected("func.matmul_bf16", Level::Full, &quick));
    let named = Options {
        only: vec!["func.matmul_bf16".into()],
        ..quick
    };
    assert!(selected("func.matmul_bf16", Level::Full, &named));
    assert_eq!(
        unknown_patterns(&[
            "nvml".into(),
            "nvml.eccc".into(),
            "torch.cudnn_loaded".into()
        ]),
        vec!["nvml.eccc".to_string()]
    );
}

#[test]
fn ids_are_unique_and_dotted() {
    let ids = all_ids();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len());
    assert!(ids.iter().all(|i| i.contains('.')));
}

#[test]
fn expect_parsing() {
    assert_eq!(ExpectGpus::parse("any"), Ok(ExpectGpus::Any));
    assert_eq!(ExpectGpus::parse("0"), Ok(ExpectGpus::Exactly(0)));
    assert!(ExpectGpus::parse("-1").is_err());
    assert!(ExpectGpus::parse("two").is_err());
}

/// `--level`'s values are the report's (serde) names (the container's
/// command line spells them too: `commands::verify`'s tests).
#[test]
fn level_names_are_one_spelling() {
    use clap::ValueEnum;
    for level in Level::value_variants() {
        let name = level.to_possible_value().unwrap().get_name().to_string();
        assert_eq!(serde_json::to_string(level).unwrap(), format!("\"{name}\""));
        assert_eq!(serde_yaml::from_str::<Level>(&name).unwrap(), *level);
    }
}

#[cfg(feature = "torch")]
#[test]
fn torch_count_mismatch_names_cuda_visible_devices() {
    // Real libtorch on this CPU machine sees 0 GPUs; the fake NVML says 2.
    let r = run_fake(
        FakeNvml::healthy(2),
        ExpectGpus::Any,
        &["torch.device_count"],
    );
    let c = find(&r, "torch.device_count", None);
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(c.message.contains("CUDA_VISIBLE_DEVICES"), "{}", c.message);
    assert_eq!(c.measured.as_deref(), Some("torch 0, NVML 2"));
}

#[test]
fn nvml_verdict_is_reported_even_when_not_selected() {
    // Seen on an H200 with --check-timeout 0.0005: nvmlInit outran the deadline,
    // every selected check was SKIP, and the run must not pass.
    let hung = NvmlState::Hung("NVML initialisation timed out after 0.0005s".into());
    let r = run_local(hung, &opts(ExpectGpus::Any, &["nvml.ecc"]), Pins::default());
    let d = find(&r, "nvml.driver", None);
    assert_eq!(d.status, Status::Error);
    assert!(d.message.contains("timed out"), "{}", d.message);
    assert!(!r.passed);
    let hung = NvmlState::Hung("NVML initialisation timed out after 0.0005s".into());
    let r = run_local(
        hung,
        &opts(ExpectGpus::Exactly(0), &["nvml.ecc"]),
        Pins::default(),
    );
    assert!(
        !r.passed,
        "a wedged driver is an unknown verdict even with --expect-gpus 0"
    );
    let none = NvmlState::Unavailable("no NVIDIA driver: libnvidia-ml.so.1 not found".into());
    let r = run_local(none, &opts(ExpectGpus::Any, &["nvml.ecc"]), Pins::default());
    assert_eq!(find(&r, "nvml.driver", None).status, Status::Fail);
    assert!(!r.passed);
    let none = NvmlState::Unavailable("no NVIDIA driver: libnvidia-ml.so.1 not found".into());
    let r = run_local(
        none,
        &opts(ExpectGpus::Exactly(0), &["nvml.ecc"]),
        Pins::default(),
    );
    assert!(r.passed);
    assert!(r.results.iter().all(|x| x.id != "nvml.driver"));
}

#[cfg(feature = "torch")]
#[test]
fn torch_arch_against_the_real_libtorch_cuda() {
    // The venv's cu126 wheel carries sm_50 … sm_90 (torch._C._cuda_getArchFlags()
    // prints "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90").
    let mut f = FakeNvml::healthy(3);
    f.gpus[1].cc = (8, 9); // Ada: runs sm_86 code
    f.gpus[2].cc = (10, 0); // Blackwell: nothing in a cu126 wheel runs on it
    let r = run_fake(f, ExpectGpus::Any, &["torch.arch"]);
    let h200 = find(&r, "torch.arch", Some(0));
    assert_eq!(h200.status, Status::Pass, "{h200:?}");
    assert_eq!(
        h200.threshold.as_deref(),
        Some("in [sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90]")
    );
    let ada = find(&r, "torch.arch", Some(1));
    assert_eq!(ada.status, Status::Pass);
    assert!(ada.message.contains("sm_86"), "{}", ada.message);
    let blackwell = find(&r, "torch.arch", Some(2));
    assert_eq!(blackwell.status, Status::Fail, "{blackwell:?}");
    assert!(blackwell.message.contains("sm_100"));
}

#[cfg(feature = "torch")]
#[test]
fn torch_driver_compat_with_the_real_torch_cuda_version() {
    // The loaded torch targets CUDA 12.6 (its version.py).
    let mut f = FakeNvml::healthy(1);
    f.driver = "550.54.15".into();
    f.cuda_driver = 12040;
    let r = run_fake(f, ExpectGpus::Any, &["torch.driver_compat"]);
    let c = find(&r, "torch.driver_compat", None);
    assert_eq!(c.status, Status::Pass, "{c:?}");
    assert!(c.message.contains("minor-version compatibility"));
    let mut old = FakeNvml::healthy(1);
    old.driver = "470.82.01".into();
    old.cuda_driver = 11040;
    let r = run_fake(old, ExpectGpus::Any, &["torch.driver_compat"]);
    assert_eq!(find(&r, "torch.driver_compat", None).status, Status::Fail);
}

#[test]
fn a_containers_results_cannot_drive_the_terminal() {
    // `verify --image` reads its results back from the container: outside
    // input, like a registry's. Escapes in any field reached the table raw.
    let evil = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\r\n| forged | PASS |\u{202e}";
    let json = serde_json::json!({
        "id": evil, "gpu": 0, "status": "fail", "message": evil,
        "measured": evil, "threshold": evil, "expected": 1.0, "unit": evil,
        "source": evil, "hint": evil,
    });
    let result: CheckResult = serde_json::from_value(json).unwrap();
    let report = Report::new(
        "container",
        Some("img:1".into()),
        Level::Quick,
        ExpectGpus::Any,
        vec![result],
    );
    for fit in [
        crate::output::Fit::Natural,
        crate::output::Fit::Wrap(200),
        crate::output::Fit::Cut(200),
        crate::output::Fit::Cut(90),
    ] {
        let t = report::table(&report, true, fit, &super::wording::TEST_WORDS);
        let raw: Vec<char> = t
            .chars()
            .filter(|c| c.is_control() && *c != '\n' || *c == '\u{202e}')
            .collect();
        // Colour stays imgctl's own (the status cell), never the input's.
        assert!(
            raw.iter().all(|c| *c == '\x1b') && !t.contains("\x1b]") && !t.contains("\x1b[2J"),
            "{fit:?}: {raw:?}\n{t}"
        );
        assert!(!t.contains("\x1b[31mred"), "{t}");
        assert!(t.contains("\\u{1b}]0;pwned"), "{fit:?}\n{t}");
        assert!(
            !t.lines().any(|l| l.starts_with("| forged")),
            "a forged row:\n{t}"
        );
    }
}
