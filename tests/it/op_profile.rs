//! `train-demo --benchmark --op-profile`: imgctl's step against the PyTorch
//! reference's (imgctl's recipe), operator by operator, both under libtorch's
//! profiler on the CPU. The test that fails when imgctl's step starts issuing
//! an operator kind more often than the reference without a reason written
//! in `imgctl::train::bench::ops::EXPLAINED` (the GPU issue, part 2).
use std::process::Command;

use crate::common::{imgctl_bin, texts};

/// The tiny preset at 16×16: the default model's block kinds (ResNet,
/// attention, down- and upsampling), small enough for seconds a step.
const SMALL: &str =
    "preset: tiny\nmodel:\n  sample_size: 16\ntraining:\n  workers: 1\n  synthetic_images: 64\n";

/// The op profile of two steps of batch 2 in `precision`, with `extra` flags.
fn op_profile(
    dir: &std::path::Path,
    precision: &str,
    extra: &[&str],
) -> (serde_json::Value, String) {
    let cfg = dir.join("small.yaml");
    std::fs::write(&cfg, SMALL).unwrap();
    let out = dir.join("out");
    let mut c = Command::new(imgctl_bin());
    c.args(["train-demo", "--benchmark", "--op-profile", "--config"])
        .arg(&cfg)
        .args([
            "--batch-size",
            "2",
            "--warmup",
            "1",
            "--steps",
            "2",
            "--device",
            "cpu",
        ])
        .args(["--precision", precision, "--json", "--out"])
        .arg(&out)
        .args(extra)
        .env("NO_COLOR", "1")
        .env("OMP_NUM_THREADS", "1")
        .env("IMGCTL_PYTHON", crate::common::venv_python());
    let o = c.output().expect("run imgctl");
    let (stdout, stderr) = texts(&o);
    assert!(o.status.success(), "{stderr}");
    let v = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    // Both traces stay in --out for Perfetto.
    for t in ["imgctl.trace.json", "reference.trace.json"] {
        assert!(out.join(t).is_file(), "no {t} in --out:\n{stderr}");
    }
    (v, stderr)
}

/// The row of `name`.
fn row<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {v}"))
}

#[test]
fn every_operator_imgctl_issues_more_often_than_pytorch_is_explained() {
    for (precision, extra) in [("bf16", &[][..]), ("fp32", &["--channels-last"][..])] {
        let dir = tempfile::tempdir().unwrap();
        let (v, err) = op_profile(dir.path(), precision, extra);
        assert_eq!(v["kind"], "imgctl.op_profile");
        assert_eq!(v["schema_version"], 1);
        if precision == "bf16" {
            assert_eq!(
                v["reference_recipe"], "bf16 weights over fp32 master weights, AdamW fused",
                "{v}"
            );
        }
        // The same model on both sides: as many convolutions and attention
        // calls a step.
        for op in [
            "aten::convolution",
            "aten::scaled_dot_product_attention",
            "aten::native_group_norm",
        ] {
            let r = row(&v, op);
            assert!(r["imgctl_per_step"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["imgctl_per_step"], r["reference_per_step"], "{r}");
        }
        for side in ["imgctl", "reference"] {
            let t = &v[side];
            assert_eq!(t["steps"], 2);
            assert!(t["bytes_allocated_per_step"].as_f64().unwrap() > 1e5, "{t}");
            assert!(t["top_level_ops_per_step"].as_f64().unwrap() > 10.0, "{t}");
        }
        // One flat AdamW against torch's: imgctl issues fewer calls.
        assert!(
            v["imgctl"]["ops_per_step"].as_f64() < v["reference"]["ops_per_step"].as_f64(),
            "{v}"
        );
        assert_eq!(
            v["unexplained"],
            serde_json::json!([]),
            "{precision}: imgctl issues these more often than the reference; remove them from \
             the step or say why in imgctl::train::bench::ops::EXPLAINED:\n{err}"
        );
        let extras: Vec<&serde_json::Value> = v["ops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["imgctl_per_step"].as_f64() > o["reference_per_step"].as_f64())
            .collect();
        assert!(!extras.is_empty(), "the fused QKV's extras are gone? {v}");
        for o in extras {
            assert!(
                o["explanation"].as_str().is_some_and(|s| !s.is_empty()),
                "{o}"
            );
        }
        // The text a person reads: the totals, then the operators.
        assert!(err.contains("imgctl ÷ ref"), "{err}");
        assert!(err.contains("why imgctl issues them"), "{err}");
        assert!(err.contains("(0 unexplained)"), "{err}");
    }
}

#[test]
fn op_profile_refuses_flags_that_do_not_apply() {
    for (flags, needle) in [
        (
            &["--op-profile"][..],
            "--op-profile only applies to a benchmark",
        ),
        (
            &["--benchmark", "--op-profile", "--compare"][..],
            "--compare does not apply",
        ),
        (
            &["--benchmark", "--op-profile", "--gpus", "2"][..],
            "--gpus does not apply",
        ),
    ] {
        let o = Command::new(imgctl_bin())
            .arg("train-demo")
            .args(flags)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let (_, err) = texts(&o);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {err}");
        assert!(
            crate::common::one_error_line(&err).contains(needle),
            "{flags:?}: {err}"
        );
    }
}
