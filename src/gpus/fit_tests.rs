//! Each rule of the fit, passing and failing, with its exact reason line;
//! the fleet file's errors; the host's GPUs read through the fake NVML.
use super::*;
use crate::nvml::{fake, FakeGpu, FakeNvml};

/// torch 2.7.0+cu126 as the cu126 profile records it.
fn cu126() -> ImageFacts {
    ImageFacts {
        torch: "2.7.0".into(),
        variant: "cu126".into(),
        cuda_runtime: "12.6.77".into(),
        driver_min: "525.60.13".into(),
        driver_native: "560.35.05".into(),
        nccl: "2.26.2".into(),
        cudnn: "9.5.1.17".into(),
        sass: vec![50, 60, 70, 75, 80, 86, 90],
        ptx: vec![],
        archs_source: "the wheel".into(),
    }
}

fn cu128() -> ImageFacts {
    ImageFacts {
        variant: "cu128".into(),
        cuda_runtime: "12.8.90".into(),
        driver_native: "570.124.06".into(),
        sass: vec![75, 80, 86, 90, 100, 120],
        ptx: vec![120],
        ..cu126()
    }
}

fn group(model: &str, cc: (u32, u32), driver: &str) -> Group {
    Group {
        model: model.into(),
        cc,
        driver: driver.into(),
        nodes: 8,
    }
}

fn rule<'a>(r: &'a FitReport, rule: &str, gpu: &str) -> &'a Reason {
    r.reasons
        .iter()
        .find(|x| x.rule == rule && x.gpu.starts_with(gpu))
        .unwrap_or_else(|| panic!("no {rule} reason for {gpu}: {r:#?}"))
}

#[test]
fn an_h200_fleet_admits_the_cu126_image() {
    let r = judge(&cu126(), &[group("H200", (9, 0), "570.86.15")], &[]);
    assert!(r.admitted, "{r:#?}");
    assert_eq!(
        rule(&r, "arch", "H200").line,
        "H200 (sm_90): the image has sm_90 code"
    );
    assert_eq!(
        rule(&r, "driver", "H200").line,
        "H200 (sm_90): driver 570.86.15 runs CUDA 12.6 natively (≥ 560.35.05)"
    );
    assert_eq!(
        rule(&r, "nccl", "H200").line,
        "H200 (sm_90): NCCL 2.26.2 ≥ 2.15.1 (NCCL 2.15.1 added H100 (sm_90) support)"
    );
}

#[test]
fn a_b200_fleet_refuses_the_cu126_image_and_names_the_profile_that_fits() {
    let alternatives = [
        ("cu126".to_string(), cu126()),
        ("cu128".to_string(), cu128()),
    ];
    let r = judge(
        &cu126(),
        &[group("B200", (10, 0), "570.133.20")],
        &alternatives,
    );
    assert!(!r.admitted);
    let arch = rule(&r, "arch", "B200");
    assert_eq!(arch.level, Level::Fail);
    assert_eq!(
        arch.line,
        "B200 (sm_100) is not in the image's arch list sm_50…sm_90: torch 2.7.0+cu126 has no Blackwell kernels (\"no kernel image is available for execution on the device\"); the cu128 profile fits (torch 2.7.0+cu128, driver ≥ 525.60.13)"
    );
    assert_eq!(arch.image, "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90");
    assert_eq!(arch.fleet, "sm_100");
    assert!(arch.source.contains("developer.nvidia.com/cuda-gpus"));
    // The driver and NCCL hold: only the arch refuses it.
    assert_eq!(r.at(Level::Fail).count(), 1);
    let cu128 = judge(&cu128(), &[group("B200", (10, 0), "570.133.20")], &[]);
    assert!(cu128.admitted, "{cu128:#?}");
}

#[test]
fn an_old_driver_is_refused_with_error_803_named() {
    let r = judge(&cu126(), &[group("H100", (9, 0), "470.82.01")], &[]);
    let d = rule(&r, "driver", "H100");
    assert_eq!(d.level, Level::Fail);
    assert_eq!(
        d.line,
        "H100 (sm_90): driver 470.82.01 is older than 525.60.13, the least that runs the image's CUDA 12.6 (560.35.05 natively): torch would stop with CUDA error 803 or \"the NVIDIA driver on your system is too old\""
    );
    assert_eq!(d.fleet, "driver 470.82.01");
    assert_eq!(d.source, DRIVER_SOURCE);
    assert!(!r.admitted);
}

#[test]
fn a_driver_under_minor_version_compatibility_passes_and_says_so() {
    let r = judge(&cu126(), &[group("H100", (9, 0), "550.54.15")], &[]);
    assert!(r.admitted);
    assert_eq!(
        rule(&r, "driver", "H100").line,
        "H100 (sm_90): driver 550.54.15 runs CUDA 12.6 by minor-version compatibility (≥ 525.60.13; 560.35.05 natively)"
    );
}

#[test]
fn ptx_only_warns_and_needs_the_native_driver() {
    // An sm_121 GPU (DGX Spark's GB10) has no sm_121 SASS in the cu128
    // wheel: its sm_120 code runs there, without a JIT.
    let spark = group("GB10", (12, 1), "580.95.05");
    let r = judge(&cu128(), std::slice::from_ref(&spark), &[]);
    let a = rule(&r, "arch", "GB10");
    // sm_120 SASS runs on sm_121 (same major, lower minor): no JIT needed.
    assert_eq!(a.level, Level::Pass, "{a:#?}");
    let ptx_only = ImageFacts {
        sass: vec![90],
        ptx: vec![90],
        ..cu128()
    };
    let r = judge(&ptx_only, &[group("B200", (10, 0), "570.133.20")], &[]);
    let a = rule(&r, "arch", "B200");
    assert_eq!(a.level, Level::Warn);
    assert_eq!(
        a.line,
        "B200 (sm_100): runs only through PTX JIT of compute_90: every kernel is compiled at its first launch (minutes for a big model; cached after in ~/.nv/ComputeCache)"
    );
    assert!(r.admitted);
    let r = judge(&ptx_only, &[group("B200", (10, 0), "550.54.15")], &[]);
    let a = rule(&r, "arch", "B200");
    assert_eq!(a.level, Level::Fail);
    assert_eq!(
        a.line,
        "B200 (sm_100): the image has only compute_90 PTX for it, and driver 550.54.15 is below 570.124.06, the least that JIT-compiles CUDA 12.8 PTX"
    );
}

#[test]
fn an_nccl_below_the_generations_floor_is_refused() {
    let old = ImageFacts {
        nccl: "2.21.5".into(),
        ..cu128()
    };
    let r = judge(&old, &[group("B200", (10, 0), "570.133.20")], &[]);
    let n = rule(&r, "nccl", "B200");
    assert_eq!(n.level, Level::Fail);
    assert_eq!(
        n.line,
        "B200 (sm_100): the image's NCCL 2.21.5 is below 2.25.1: NCCL 2.25.1 added Blackwell (sm_100) support"
    );
    assert!(n.source.contains("NVIDIA/nccl/releases/tag/v2.25.1-1"));
    // No floor for Ampere: said, not failed.
    let r = judge(&old, &[group("A100", (8, 0), "570.133.20")], &[]);
    assert_eq!(rule(&r, "nccl", "A100").level, Level::Pass);
}

#[test]
fn a_mixed_fleet_is_judged_group_by_group() {
    let fleet = parse_fleet(
        "version: 1\ngpus:\n  - {model: H200, driver: 570.86.15, nodes: 8}\n  - {model: B200, driver: 570.133.20, nodes: 16}\n  - {model: NVIDIA L4, driver: 535.230.02}\n",
    )
    .unwrap();
    assert_eq!(fleet[2].cc, (8, 9));
    assert_eq!(fleet[2].nodes, 1);
    let r = judge(&cu126(), &fleet, &[]);
    assert!(!r.admitted);
    let failed: Vec<&str> = r.at(Level::Fail).map(|x| x.gpu.as_str()).collect();
    assert_eq!(failed, ["B200 (sm_100)"]);
    assert_eq!(
        rule(&r, "arch", "NVIDIA L4").line,
        "NVIDIA L4 (sm_89): runs the image's sm_86 code (binary compatible within major 8)"
    );
    assert_eq!(r.reasons.len(), 9);
}

#[test]
fn a_bad_fleet_file_gets_one_line_naming_the_entry() {
    let cases = [
        (
            "version: 2\ngpus: []\n",
            "version 2 is not one this imgctl reads",
        ),
        ("version: 1\ngpus: []\n", "`gpus` is empty"),
        (
            "version: 1\ngpus: [{model: Z9000, driver: 570.1}]\n",
            "gpus[0] (Z9000): imgctl's table has no GPU model `Z9000`: give its compute_capability",
        ),
        (
            "version: 1\ngpus: [{model: B200, driver: latest}]\n",
            "gpus[0] (B200): driver `latest` is not a driver version",
        ),
        (
            "version: 1\ngpus: [{model: Z9, compute_capability: nine, driver: 570.1}]\n",
            "compute_capability `nine` is not MAJOR.MINOR",
        ),
        (
            "version: 1\ngpus: [{model: B200, driver: 570.1, nodes: 0}]\n",
            "`nodes` is 0",
        ),
        (
            "version: 1\ngpus: [{model: B200, drivers: 570.1}]\n",
            "unknown field `drivers`",
        ),
    ];
    for (text, want) in cases {
        let e = parse_fleet(text).unwrap_err();
        assert!(e.contains(want), "{text:?}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
    let own = parse_fleet(
        "version: 1\ngpus: [{model: Z9, compute_capability: \"12.1\", driver: 580.95.05}]\n",
    )
    .unwrap();
    assert_eq!(own[0].cc, (12, 1));
}

#[test]
fn the_host_is_read_through_nvml_as_a_fleet() {
    // A mixed host: two H200s and a Blackwell GPU, on an old driver.
    let mut f = FakeNvml::healthy(3);
    f.driver = "535.230.02".into();
    f.gpus[2] = FakeGpu {
        name: "NVIDIA B200".into(),
        cc: (10, 0),
        ..FakeGpu::healthy_h200(2)
    };
    let groups = host_groups(fake(f).as_ref()).unwrap();
    assert_eq!(
        groups,
        [
            Group {
                model: "H200".into(),
                cc: (9, 0),
                driver: "535.230.02".into(),
                nodes: 2
            },
            Group {
                model: "B200".into(),
                cc: (10, 0),
                driver: "535.230.02".into(),
                nodes: 1
            },
        ]
    );
    let r = judge(&cu128(), &groups, &[]);
    // 535 runs CUDA 12.8 by minor-version compatibility; the H200s run.
    assert!(r.admitted, "{r:#?}");
    let old = FakeNvml {
        driver: "470.82.01".into(),
        ..FakeNvml::healthy(1)
    };
    let groups = host_groups(fake(old).as_ref()).unwrap();
    let r = judge(&cu126(), &groups, &[]);
    assert_eq!(rule(&r, "driver", "H200").level, Level::Fail);
}

#[test]
fn device_names_find_their_rows_and_no_other() {
    for (name, model) in [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        (
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "RTX PRO 6000 Blackwell",
        ),
        ("NVIDIA GeForce RTX 5090", "RTX 5090"),
        ("NVIDIA GB200", "GB200"),
        ("b200", "B200"),
        ("Tesla V100-SXM2-16GB", "V100"),
    ] {
        assert_eq!(
            archs::gpu_model(name).map(|m| m.model),
            Some(model),
            "{name}"
        );
    }
    assert_eq!(archs::gpu_model("Radeon MI300X"), None);
}

#[test]
fn a_history_becomes_a_fleet_of_models_and_drivers() {
    let h200 = |sm: Option<&str>| ("NVIDIA H200".to_string(), sm.map(str::to_string));
    let nodes = vec![
        (
            "570.86.15".to_string(),
            vec![h200(Some("sm_90")), h200(Some("sm_90"))],
        ),
        ("570.86.15".to_string(), vec![h200(None)]),
        ("550.54.15".to_string(), vec![h200(Some("sm_90"))]),
        (
            "570.133.20".to_string(),
            vec![("NVIDIA B200".to_string(), Some("sm_100".to_string()))],
        ),
        (
            "570.133.20".to_string(),
            vec![("Mystery GPU".to_string(), None)],
        ),
    ];
    let said: Vec<(String, (u32, u32), String, u32)> = groups_of_nodes(nodes.into_iter())
        .into_iter()
        .map(|g| (g.model, g.cc, g.driver, g.nodes))
        .collect();
    assert_eq!(
        said,
        [
            ("H200".to_string(), (9, 0), "570.86.15".to_string(), 2),
            ("H200".to_string(), (9, 0), "550.54.15".to_string(), 1),
            ("B200".to_string(), (10, 0), "570.133.20".to_string(), 1),
        ]
    );
}
