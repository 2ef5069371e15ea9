//! Tests of verify --image on the host side (`host.rs`), kept in a file of their own.
use super::*;
use crate::verify::wording::TEST_WORDS;

fn uuid_verdict(
    host: &HostGpus,
    requested: Option<&GpuSelection>,
    container: Option<&[String]>,
) -> CheckResult {
    super::uuid_verdict(host, requested, container, &TEST_WORDS)
}
use crate::verify::context::ExpectGpus;

fn host(uuids: &[&str]) -> HostGpus {
    HostGpus {
        uuids: uuids.iter().map(|s| s.to_string()).collect(),
        driver: Some("550.54.15".into()),
        cuda_driver: Some(12040),
        unavailable: None,
        hung: false,
    }
}

#[test]
fn uuid_comparison() {
    let h = host(&["GPU-a", "GPU-b", "GPU-c"]);
    let all: Vec<String> = h.uuids.clone();
    assert_eq!(
        uuid_verdict(&h, Some(&GpuSelection::All), Some(&all)).status,
        Status::Pass
    );
    assert_eq!(
        uuid_verdict(&h, Some(&GpuSelection::All), Some(&all[..2])).status,
        Status::Fail
    );
    assert_eq!(
        uuid_verdict(&h, Some(&GpuSelection::Count(2)), Some(&all[..2])).status,
        Status::Pass
    );
    let ids = GpuSelection::parse("0,2").unwrap();
    assert_eq!(
        uuid_verdict(&h, Some(&ids), Some(&["GPU-a".into(), "GPU-c".into()])).status,
        Status::Pass
    );
    assert_eq!(
        uuid_verdict(&h, Some(&ids), Some(&["GPU-a".into(), "GPU-b".into()])).status,
        Status::Fail
    );
    assert_eq!(
        uuid_verdict(&h, Some(&GpuSelection::All), Some(&["GPU-z".into()])).status,
        Status::Fail
    );
    assert_eq!(uuid_verdict(&h, None, Some(&[])).status, Status::Skip);
    // No report from the container: nothing to compare (host.container errs).
    assert_eq!(
        uuid_verdict(&h, Some(&GpuSelection::All), None).status,
        Status::Skip
    );
    // A wedged host NVML is an unknown verdict, not "no driver".
    let mut wedged = HostGpus {
        unavailable: Some("NVML initialisation timed out after 30s".into()),
        hung: true,
        ..Default::default()
    };
    assert_eq!(
        uuid_verdict(&wedged, Some(&GpuSelection::All), Some(&all)).status,
        Status::Error
    );
    assert_eq!(
        driver_verdict(&wedged, &HashMap::new()).status,
        Status::Error
    );
    wedged.hung = false;
    assert_eq!(
        uuid_verdict(&wedged, Some(&GpuSelection::All), Some(&all)).status,
        Status::Skip
    );
}

fn container_report(results: Vec<CheckResult>) -> Report {
    Report::new("container", None, Level::Quick, ExpectGpus::Any, results)
}

#[test]
fn the_hosts_view_overrides_the_containers_gpu_claims() {
    // A forged, self-consistent report: every GPU check passes.
    let forged = vec![
        CheckResult::pass("nvml.driver", "driver 580.65"),
        CheckResult::pass("nvml.device_count", "2 GPUs"),
        CheckResult::pass("torch.cuda_available", "CUDA available"),
        CheckResult::pass("func.matmul_bf16", "790 TFLOP/s"),
        CheckResult::pass("torch.version", "2.7.0"),
    ];
    // GPUs were passed in: the container's results stand.
    let kept = overridden_by_host(forged.clone(), None);
    assert!(kept.iter().all(|r| r.status == Status::Pass));
    // None were: every GPU claim fails, the rest stands.
    let got = overridden_by_host(forged, Some("the host has no GPU driver (no libnvidia-ml)"));
    let status: Vec<(&str, Status)> = got.iter().map(|r| (r.id.as_str(), r.status)).collect();
    assert_eq!(
        status,
        [
            ("nvml.driver", Status::Fail),
            ("nvml.device_count", Status::Fail),
            ("torch.cuda_available", Status::Fail),
            ("func.matmul_bf16", Status::Fail),
            ("torch.version", Status::Pass),
        ]
    );
    assert!(
        got[1]
            .message
            .contains("'2 GPUs', but the host passed no GPU into it (the host has no GPU driver"),
        "{}",
        got[1].message
    );
}

#[test]
fn a_container_report_is_trusted_only_when_consistent() {
    let ok = container_report(vec![CheckResult::pass("nvml.driver", "driver 580")]);
    assert_eq!(container_report_problem(0, &ok), None);
    // Exit code against the verdict.
    assert!(container_report_problem(1, &ok)
        .unwrap()
        .contains("exited with 1 but its report says passed"));
    let failed = container_report(vec![CheckResult::fail("nvml.ecc", "3 errors")]);
    assert_eq!(container_report_problem(1, &failed), None);
    assert!(container_report_problem(0, &failed).is_some());
    // A summary that its results do not bear out.
    let mut forged = container_report(Vec::new());
    forged.summary.fail = 5;
    forged.passed = false;
    assert!(container_report_problem(1, &forged)
        .unwrap()
        .contains("no results"));
    let mut lying = failed.clone();
    lying.passed = true;
    lying.summary.fail = 0;
    assert!(container_report_problem(0, &lying)
        .unwrap()
        .contains("contradicts itself"));
    // Another schema.
    let mut future = ok.clone();
    future.schema_version = 99;
    assert!(container_report_problem(0, &future)
        .unwrap()
        .contains("schema 99"));
}

#[test]
fn driver_against_image_labels() {
    let mut labels = HashMap::new();
    labels.insert(label::CUDA_RUNTIME.to_string(), "12.6.77".to_string());
    labels.insert(label::CUDA_BASE.to_string(), "12.4.1".to_string());
    labels.insert(label::DRIVER_MIN.to_string(), "525.60.13".to_string());
    let r = driver_verdict(&host(&["GPU-a"]), &labels);
    assert_eq!(r.status, Status::Pass, "{r:?}");
    assert!(r.message.contains("minor-version"));
    let mut old = host(&["GPU-a"]);
    old.driver = Some("470.82.01".into());
    old.cuda_driver = Some(11040);
    assert_eq!(driver_verdict(&old, &labels).status, Status::Fail);
    assert_eq!(
        driver_verdict(&host(&[]), &HashMap::new()).status,
        Status::Skip
    );
}

#[test]
fn host_uuid_check_gets_the_identity_results_it_compares() {
    let mut opts = Options {
        level: Level::Quick,
        expect: ExpectGpus::Any,
        only: vec!["host".into()],
        skip: vec![],
        timeout: Duration::from_secs(5),
        words: TEST_WORDS,
    };
    let checks = |only: &[&str], skip: &[&str]| ContainerChecks {
        only: only.iter().map(|s| s.to_string()).collect(),
        skip: skip.iter().map(|s| s.to_string()).collect(),
    };
    assert_eq!(
        container_checks(&opts),
        checks(&["nvml.driver", "nvml.identity"], &[])
    );
    opts.only = vec!["torch".into(), "host.gpu_uuids".into()];
    assert_eq!(
        container_checks(&opts),
        checks(&["torch", "nvml.identity"], &[])
    );
    // `--skip nvml` keeps nvml.identity in the container, and only it.
    opts.only = vec![];
    opts.skip = vec!["nvml".into()];
    let c = container_checks(&opts);
    assert!(c.only.is_empty(), "{c:?}");
    assert!(
        c.skip.contains(&"nvml.ecc".to_string()) && c.skip.contains(&"nvml.driver".to_string())
    );
    assert!(!c.skip.iter().any(|x| x == "nvml.identity" || x == "nvml"));
    // host.gpu_uuids skipped: nothing is added.
    opts.skip = vec!["nvml".into(), "host.gpu_uuids".into()];
    assert_eq!(container_checks(&opts), checks(&[], &["nvml"]));
    // Skips that leave the container nothing: it still reports its driver.
    opts.skip = vec!["nvml".into(), "torch".into(), "host.gpu_uuids".into()];
    assert_eq!(container_checks(&opts), checks(&["nvml.driver"], &[]));
}

#[test]
fn the_container_gets_the_selection_without_host_ids() {
    let opts = Options {
        level: Level::Full,
        expect: ExpectGpus::Exactly(0),
        only: vec!["nvml".into(), "host.gpu_uuids".into()],
        skip: vec!["nvml.ecc".into()],
        timeout: Duration::from_secs(5),
        words: TEST_WORDS,
    };
    assert_eq!(
        container_checks(&opts),
        ContainerChecks {
            only: vec!["nvml".into()],
            skip: vec!["nvml.ecc".into()],
        }
    );
}

#[test]
fn pins_from_image_labels() {
    let mut labels = HashMap::new();
    labels.insert(label::TORCH.to_string(), "2.7.0".to_string());
    labels.insert(label::CUDNN.to_string(), "9.5.1.17".to_string());
    let p = pins_from_labels("img", &labels).unwrap();
    assert_eq!(p.torch.as_deref(), Some("2.7.0"));
    assert_eq!(p.cudnn.as_deref(), Some("9.5.1.17"));
    assert!(pins_from_labels("img", &HashMap::new()).is_none());
}

#[test]
fn a_gpu_refusal_for_want_of_a_cdi_spec_says_to_make_one() {
    let no_spec = crate::docker::run::gpu_rejection(
        "setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all".into(),
    );
    let hint = gpu_refusal_hint(&no_spec, &TEST_WORDS);
    assert!(hint.starts_with("make a CDI spec for the GPUs"), "{hint}");
    assert!(hint.contains("<expect_gpus> 0"), "{hint}");
    let no_toolkit =
        crate::docker::run::gpu_rejection("could not select device driver \"nvidia\"".into());
    let hint = gpu_refusal_hint(&no_toolkit, &TEST_WORDS);
    assert!(hint.contains("<toolkit_configure>"), "{hint}");
}

#[test]
fn a_binary_the_image_cannot_start_is_told_from_a_silent_one() {
    // runc on Docker 20.10, runc 1.1+, crun, and a foreign architecture.
    for said in [
        "standard_init_linux.go:228: exec user process caused: no such file or directory",
        "exec /usr/local/bin/imgctl: no such file or directory",
        "crun: execvp `imgctl`: No such file or directory: OCI runtime attempted to invoke a command that was not found",
        "exec /usr/local/bin/imgctl: exec format error",
    ] {
        assert!(cannot_exec(said), "{said}");
    }
    // An imgctl that ran and failed, or printed a missing file of its own.
    for said in [
        "error: unknown check id `x`",
        "error: /data/probe: no such file or directory",
        "",
    ] {
        assert!(!cannot_exec(said), "{said}");
    }
}
