//! `--read-every N`: the loss and gradient norm come back to the host every
//! N steps (one synchronisation per window); the metrics, the loss curve and
//! the NaN guard are the same as reading every step.
#![cfg(feature = "torch")]

use std::path::Path;
use std::process::{Command, Output};

use imgctl::train::metrics::{read_jsonl, StepRecord};

use crate::common::{imgctl_bin, texts};

fn train(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(imgctl_bin());
    cmd.args(["train-demo", "--preset", "tiny", "--device", "cpu"])
        .args(["--sample-every", "0", "--batch-size", "2", "--out"])
        .arg(out)
        .args(extra)
        .env("NO_COLOR", "1")
        .env("OMP_NUM_THREADS", "1")
        .env_remove("IMGCTL_TEST_INJECT_NAN_AT_STEP")
        .env_remove("IMGCTL_TEST_INTERRUPT_AFTER_STEP");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run imgctl")
}

fn records(out: &Path) -> Vec<StepRecord> {
    read_jsonl(&out.join("metrics.jsonl")).expect("metrics.jsonl")
}

#[test]
fn reading_every_third_step_keeps_every_steps_record() {
    let dir = tempfile::tempdir().unwrap();
    let (every1, every3) = (dir.path().join("r1"), dir.path().join("r3"));
    let steps = ["--steps", "7", "--checkpoint-every", "0"];
    let o = train(&every1, &[&steps[..], &["--read-every", "1"]].concat(), &[]);
    assert!(o.status.success(), "{}", texts(&o).1);
    let o = train(&every3, &[&steps[..], &["--read-every", "3"]].concat(), &[]);
    assert!(o.status.success(), "{}", texts(&o).1);
    let (a, b) = (records(&every1), records(&every3));
    assert_eq!(b.len(), 7);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.step, y.step);
        assert_eq!(x.loss, y.loss, "step {}: the same math, read later", x.step);
        assert_eq!(x.grad_norm, y.grad_norm);
        assert!(y.loss.is_finite() && y.img_per_s > 0.0, "{y:?}");
    }
}

#[test]
fn a_nan_inside_a_read_window_is_named_at_the_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = train(
        &out,
        &[
            "--steps",
            "8",
            "--checkpoint-every",
            "8",
            "--read-every",
            "4",
        ],
        &[("IMGCTL_TEST_INJECT_NAN_AT_STEP", "2")],
    );
    let (_, stderr) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the loss became NaN at step 2"), "{stderr}");
    // Step 1, resolved by the same read, is in the metrics; nothing after.
    let recs = records(&out);
    assert_eq!(
        recs.iter().map(|r| r.step).collect::<Vec<_>>(),
        [1],
        "{recs:?}"
    );
    assert!(imgctl::train::checkpoint::list(&out).is_empty());
}

#[test]
fn an_interrupt_between_reads_reads_back_before_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = train(
        &out,
        &[
            "--steps",
            "6",
            "--checkpoint-every",
            "0",
            "--read-every",
            "4",
        ],
        &[("IMGCTL_TEST_INTERRUPT_AFTER_STEP", "2")],
    );
    let (_, stderr) = texts(&o);
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    let steps: Vec<u64> = imgctl::train::checkpoint::list(&out)
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(steps, [2], "{stderr}");
    let recs = records(&out);
    assert_eq!(recs.iter().map(|r| r.step).collect::<Vec<_>>(), [1, 2]);
    assert!(recs.iter().all(|r| r.loss.is_finite()), "{recs:?}");
}
