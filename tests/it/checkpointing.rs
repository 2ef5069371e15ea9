//! Gradient checkpointing (`--gradient-checkpointing`,
//! `training.gradient_checkpointing`): train-demo runs with it give the same
//! losses, gradient norms and weights bit for bit as without, dropout on and
//! off; and `--benchmark --gradient-checkpointing` measures it against the
//! same steps without it in the same run, where a step's peak resident
//! memory per image falls.
#![cfg(feature = "torch")]
use std::path::Path;
use std::process::{Command, Output};

use imgctl::train::checkpoint;
use imgctl::train::metrics::{read_jsonl, StepRecord};
use imgctl::train::model::weights::read_tensors;

use crate::common::{imgctl_bin, texts};

/// `train-demo --preset tiny --device cpu` into `out` with `extra`.
fn train(out: &Path, extra: &[&str]) -> Output {
    Command::new(imgctl_bin())
        .args(["train-demo", "--preset", "tiny", "--device", "cpu"])
        .args(["--sample-every", "0", "--checkpoint-every", "0"])
        .args(["--steps", "4", "--batch-size", "4", "--out"])
        .arg(out)
        .args(extra)
        .env("NO_COLOR", "1")
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("run imgctl")
}

fn ok(out: &Output) {
    let (stdout, stderr) = texts(out);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
}

fn losses(out: &Path) -> Vec<StepRecord> {
    read_jsonl(&out.join("metrics.jsonl")).expect("metrics.jsonl")
}

#[test]
fn checkpointing_trains_bit_identically_with_and_without_dropout() {
    let dir = tempfile::tempdir().unwrap();
    let dropout = dir.path().join("dropout.yaml");
    std::fs::write(&dropout, "model:\n  dropout: 0.1\n").unwrap();
    // The config key turns it on as the flag does.
    let dropout_ckpt = dir.path().join("dropout-ckpt.yaml");
    std::fs::write(
        &dropout_ckpt,
        "model:\n  dropout: 0.1\ntraining:\n  gradient_checkpointing: true\n",
    )
    .unwrap();
    let d = dropout.to_str().unwrap();
    let dc = dropout_ckpt.to_str().unwrap();
    let mut first_losses = Vec::new();
    for (name, plain, ckpt) in [
        ("plain", vec![], vec!["--gradient-checkpointing"]),
        ("dropout", vec!["--config", d], vec!["--config", dc]),
    ] {
        let a_dir = dir.path().join(format!("{name}-plain"));
        let b_dir = dir.path().join(format!("{name}-ckpt"));
        ok(&train(&a_dir, &plain));
        ok(&train(&b_dir, &ckpt));
        let (a, b) = (losses(&a_dir), losses(&b_dir));
        assert_eq!(a.len(), 4, "{name}: {a:?}");
        assert_eq!(a.len(), b.len());
        first_losses.push(a[0].loss);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(
                (x.loss.to_bits(), x.grad_norm.to_bits()),
                (y.loss.to_bits(), y.grad_norm.to_bits()),
                "{name}: step {}: loss {} vs {}, grad norm {} vs {}",
                x.step,
                x.loss,
                y.loss,
                x.grad_norm,
                y.grad_norm
            );
        }
        for file in [
            checkpoint::MODEL_FILE,
            checkpoint::EMA_FILE,
            checkpoint::OPTIMIZER_FILE,
        ] {
            let ta = read_tensors(&a_dir.join("checkpoints/step-000004").join(file)).unwrap();
            let tb = read_tensors(&b_dir.join("checkpoints/step-000004").join(file)).unwrap();
            assert_eq!(ta.len(), tb.len());
            for ((na, va), (nb, vb)) in ta.iter().zip(&tb) {
                assert_eq!(na, nb);
                assert!(va.equal(vb), "{name}: {file}: {na} differs");
            }
        }
    }
    // Dropout really is active: the same weights and batch give another loss.
    assert_ne!(first_losses[0].to_bits(), first_losses[1].to_bits());
}

/// The benchmark with checkpointing alternates rounds without and with it in
/// the same process and reports both: per-image memory must fall (measured
/// on this config, the tiny UNet with two ResNets per block at 32×32,
/// batch 8: 13.8 → 8.4 MiB per image, ratio 0.61; at the default 64×64
/// model, batch 4: 137.4 → 65.7 MiB, ratio 0.48), the throughput ratio is
/// the median of the rounds' ratios, and a benchmark without it compares
/// nothing.
#[test]
fn the_benchmark_compares_checkpointing_off_and_on_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("two-resnets.yaml");
    std::fs::write(
        &cfg,
        "preset: tiny\nmodel:\n  layers_per_block: 2\ntraining:\n  workers: 1\n  synthetic_images: 16\n",
    )
    .unwrap();
    let bench = |extra: &[&str]| -> serde_json::Value {
        let o = Command::new(imgctl_bin())
            .args(["train-demo", "--benchmark", "--config"])
            .arg(&cfg)
            .args(["--device", "cpu", "--batch-size", "8", "--warmup", "1"])
            .args(["--steps", "1", "--json"])
            .args(extra)
            .env("NO_COLOR", "1")
            .env("OMP_NUM_THREADS", "1")
            .output()
            .expect("run imgctl");
        ok(&o);
        let (stdout, _) = texts(&o);
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    };
    let v = bench(&["--gradient-checkpointing"]);
    assert_eq!(v["gradient_checkpointing"], true, "{v}");
    let c = &v["checkpointing_comparison"];
    assert_eq!(c["rounds"], 3, "{c}");
    assert_eq!(c["steps_per_round"], 1, "{c}");
    let rates = |arm: &str| -> Vec<f64> {
        c[arm]["rounds_img_per_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (off, on) = (rates("off"), rates("on"));
    assert_eq!((off.len(), on.len()), (3, 3), "{c}");
    assert!(off.iter().chain(&on).all(|&r| r > 0.0), "{c}");
    let mut ratios: Vec<f64> = on.iter().zip(&off).map(|(n, o)| n / o).collect();
    ratios.sort_by(f64::total_cmp);
    let ratio = c["throughput_ratio"].as_f64().unwrap();
    assert!(
        (ratio - ratios[1]).abs() < 1e-12,
        "median of {ratios:?}: {c}"
    );
    let per_image = |arm: &str| c[arm]["step_memory"]["per_image_bytes"].as_u64().unwrap();
    let (m_off, m_on) = (per_image("off"), per_image("on"));
    assert!(m_off > 4 << 20, "no activations measured without it: {c}");
    assert!(
        (m_on as f64) < 0.75 * m_off as f64,
        "checkpointing saved too little: {m_off} → {m_on} bytes per image: {c}"
    );
    let memory_ratio = c["per_image_memory_ratio"].as_f64().unwrap();
    assert!(
        (memory_ratio - m_on as f64 / m_off as f64).abs() < 1e-12,
        "{c}"
    );
    assert!(
        c["on"]["step_memory"]["max_batch_in_budget"].as_u64()
            > c["off"]["step_memory"]["max_batch_in_budget"].as_u64(),
        "{c}"
    );
    let plain = bench(&[]);
    assert_eq!(plain["gradient_checkpointing"], false);
    assert!(plain["checkpointing_comparison"].is_null(), "{plain}");
}
