//! Checkpoints and resuming: a resumed run matches an uninterrupted one, damaged or
//! wrong checkpoints are skipped or refused, and nothing non-finite is saved.
use super::*;

/// `--resume auto` is what a job restarted on failure runs: the first start
/// begins the run, a restart continues it.
#[test]
fn resume_auto_starts_a_run_then_continues_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = ["--steps", "2", "--batch-size", "2", "--resume", "auto"];
    let (_, first) = assert_code(&train(&out, &args, &[]), 0);
    assert!(!first.contains("resuming from"), "{first}");
    assert_eq!(checkpoint_steps(&out), vec![2]);
    let args = ["--steps", "3", "--batch-size", "2", "--resume", "auto"];
    let (_, again) = assert_code(&train(&out, &args, &[]), 0);
    assert!(again.contains("resuming from"), "{again}");
    assert!(checkpoint_steps(&out).contains(&3));
    // Requeued once more after its last checkpoint: the run is complete,
    // its outputs are written again, nothing trains.
    std::fs::remove_dir_all(out.join("unet")).unwrap();
    let (_, done) = assert_code(&train(&out, &args, &[]), 0);
    assert!(
        done.contains("is complete (checkpoint at step 3 of 3)"),
        "{done}"
    );
    assert!(out.join("unet/config.json").is_file());
    // --init-from starts the run only: a restart continues the checkpoint.
    let init = out.join("checkpoints/step-000003/model.safetensors");
    let fine = dir.path().join("fine");
    let tune = [
        "--steps",
        "1",
        "--batch-size",
        "2",
        "--resume",
        "auto",
        "--init-from",
        init.to_str().unwrap(),
    ];
    assert_code(&train(&fine, &tune, &[]), 0);
    let tune2 = [&["--steps", "2"][..], &tune[2..]].concat();
    let (_, err) = assert_code(&train(&fine, &tune2, &[]), 0);
    assert!(
        err.contains("--init-from") && err.contains("only starts a run"),
        "{err}"
    );
    // A plain --resume still insists on a checkpoint.
    let empty = dir.path().join("empty");
    let (_, err) = assert_code(&train(&empty, &["--steps", "1", "--resume"], &[]), 2);
    assert!(err.contains("--resume auto"), "{err}");
}

/// 6 steps straight equal 3 steps, an interruption, and 3 resumed steps:
/// losses, gradient norms and final weights bit for bit; also with dropout
/// (0.1), whose masks must not restart from the first step's on resume.
#[test]
fn train_resume_matches_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let dropout = dir.path().join("dropout.yaml");
    std::fs::write(&dropout, "model:\n  dropout: 0.1\n").unwrap();
    let mut first_losses = Vec::new();
    for (name, extra) in [
        ("plain", vec![]),
        ("dropout", vec!["--config", dropout.to_str().unwrap()]),
    ] {
        let straight = dir.path().join(format!("{name}-straight"));
        let resumed = dir.path().join(format!("{name}-resumed"));
        let mut common = vec![
            "--steps",
            "6",
            "--batch-size",
            "4",
            "--checkpoint-every",
            "0",
        ];
        common.extend(extra);
        assert_code(&train(&straight, &common, &[]), 0);

        let o = train(
            &resumed,
            &common,
            &[("IMGCTL_TEST_INTERRUPT_AFTER_STEP", "3")],
        );
        let (_, stderr) = assert_code(&o, 130);
        assert!(stderr.contains("interrupted at step 3"), "{stderr}");
        assert!(stderr.contains("--resume"), "{stderr}");
        assert_eq!(checkpoint_steps(&resumed), vec![3]);
        let state = checkpoint::read_state(&checkpoint::latest(&resumed).unwrap()).unwrap();
        assert_eq!(
            (state.step, state.samples_seen, state.optimizer_step),
            (3, 12, 3)
        );

        // The config (dropout included) comes back from the checkpoint.
        let args = [
            "--steps",
            "6",
            "--batch-size",
            "4",
            "--checkpoint-every",
            "0",
            "--resume",
        ];
        let (_, stderr) = assert_code(&train(&resumed, &args, &[]), 0);
        assert!(stderr.contains("resuming from"), "{stderr}");

        let a = losses(&straight);
        let b = losses(&resumed);
        assert_eq!(b.len(), 6, "{name}: {b:?}");
        first_losses.push(a[0].loss);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.step, y.step);
            assert_eq!(
                x.loss.to_bits(),
                y.loss.to_bits(),
                "{name}: loss at step {}",
                x.step
            );
            assert_eq!(
                x.grad_norm.to_bits(),
                y.grad_norm.to_bits(),
                "{name}: grad norm at step {}",
                x.step
            );
            assert_eq!(x.lr.to_bits(), y.lr.to_bits());
        }
        for file in [
            checkpoint::MODEL_FILE,
            checkpoint::EMA_FILE,
            checkpoint::OPTIMIZER_FILE,
        ] {
            let ta = read_tensors(&straight.join("checkpoints/step-000006").join(file)).unwrap();
            let tb = read_tensors(&resumed.join("checkpoints/step-000006").join(file)).unwrap();
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

/// A truncated newest checkpoint (a disk that filled up, a partial copy)
/// does not block `--resume auto` (which would restart and fail in a loop):
/// the run continues from the newest intact checkpoint with a warning naming
/// the damaged one, which is set aside, and ends at the requested step.
#[test]
fn train_resume_skips_a_damaged_newest_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let first = [
        "--steps",
        "4",
        "--batch-size",
        "2",
        "--checkpoint-every",
        "2",
    ];
    assert_code(&train(&out, &first, &[]), 0);
    assert_eq!(checkpoint_steps(&out), vec![2, 4]);
    let (old, newest) = (
        out.join("checkpoints/step-000002"),
        out.join("checkpoints/step-000004"),
    );
    let model = newest.join("model.safetensors");
    let len = std::fs::metadata(&model).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&model)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let again = [
        "--steps",
        "6",
        "--batch-size",
        "2",
        "--resume",
        "auto",
        "--json",
    ];
    let (stdout, stderr) = assert_code(&train(&out, &again, &[]), 0);
    assert!(
        stderr.contains(&format!(
            "warning: skipping the damaged checkpoint {} (model.safetensors is truncated or damaged ({} bytes, its header needs {len})); resuming from {}",
            newest.display(),
            len / 2,
            old.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("(step 2)"), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (
            summary["start_step"].as_u64(),
            summary["final_step"].as_u64()
        ),
        (Some(2), Some(6))
    );
    assert_eq!(checkpoint_steps(&out), vec![2, 4, 6]);
    assert!(out
        .join("checkpoints/step-000004.damaged/model.safetensors")
        .is_file());
    // A plain --resume with nothing intact says so (exit 2), naming the damage.
    let lone = dir.path().join("lone");
    assert_code(
        &train(&lone, &["--steps", "1", "--batch-size", "2"], &[]),
        0,
    );
    std::fs::write(lone.join("checkpoints/step-000001/ema.safetensors"), b"").unwrap();
    let (_, stderr) = assert_code(&train(&lone, &["--steps", "2", "--resume"], &[]), 2);
    assert!(
        stderr.contains("is damaged (the newest,")
            && stderr.contains("ema.safetensors is truncated (0 bytes, no header)"),
        "{stderr}"
    );
}

/// The data folder is recorded in the checkpoint: --resume without --data
/// continues on it (and the interrupt hint names it), an explicit --data that
/// differs is exit 2, as is --data on a checkpoint of the synthetic set, and
/// an explicit --preset that differs from the checkpoint's.
#[test]
fn train_resume_keeps_the_data_folder() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for (i, shade) in [10u8, 90, 170, 250].iter().enumerate() {
        write_png(&data.join(format!("{i}.png")), 40, 36, *shade);
    }
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    write_png(&other.join("x.png"), 32, 32, 5);
    let d = data.to_str().unwrap();

    let out = dir.path().join("run");
    let common = [
        "--steps",
        "3",
        "--batch-size",
        "2",
        "--checkpoint-every",
        "0",
    ];
    let mut first = common.to_vec();
    first.extend(["--data", d]);
    let o = train(&out, &first, &[("IMGCTL_TEST_INTERRUPT_AFTER_STEP", "1")]);
    let (_, stderr) = assert_code(&o, 130);
    assert!(
        stderr.contains(&format!(
            "continue with `imgctl train-demo --resume --out {} --data {d}`",
            out.display()
        )),
        "{stderr}"
    );
    let state = checkpoint::read_state(&checkpoint::latest(&out).unwrap()).unwrap();
    assert_eq!(
        state.data,
        Some(checkpoint::DataSource::Folder {
            path: data.canonicalize().unwrap()
        })
    );

    let mut resume = common.to_vec();
    resume.push("--resume");
    let mut wrong = resume.clone();
    wrong.extend(["--data", other.to_str().unwrap()]);
    let (_, stderr) = assert_code(&train(&out, &wrong, &[]), 2);
    assert!(
        stderr.contains("differs from the folder the checkpoint trained on")
            && stderr.contains("hint:"),
        "{stderr}"
    );
    // train() passes --preset tiny; an explicit --preset default conflicts.
    let mut preset = vec![
        "train-demo",
        "--device",
        "cpu",
        "--out",
        out.to_str().unwrap(),
    ];
    preset.extend(["--preset", "default", "--resume", "--steps", "3"]);
    let (_, stderr) = assert_code(&run_env(&preset, &[]), 2);
    assert!(
        stderr.contains("--preset default does not match the checkpoint's preset tiny"),
        "{stderr}"
    );

    let mut same = resume.clone();
    same.push("--json");
    let (stdout, _) = assert_code(&train(&out, &same, &[]), 0);
    let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s["data"]["source"], "folder", "{s}");
    assert_eq!(s["data"]["images"], 4, "{s}");
    assert_eq!(
        s["data"]["path"].as_str().map(Path::new),
        Some(data.canonicalize().unwrap().as_path())
    );
    assert_eq!(
        (s["start_step"].as_u64(), s["final_step"].as_u64()),
        (Some(1), Some(3))
    );

    // The folder moved (data staged per job): the folder given now continues.
    let moved = dir.path().join("moved");
    std::fs::rename(&data, &moved).unwrap();
    let args = [
        "--steps",
        "4",
        "--batch-size",
        "2",
        "--resume",
        "--data",
        moved.to_str().unwrap(),
    ];
    let (_, stderr) = assert_code(&train(&out, &args, &[]), 0);
    assert!(
        stderr.contains("which no longer exists: continuing on --data"),
        "{stderr}"
    );
    std::fs::rename(&moved, &data).unwrap();

    // A synthetic run's checkpoint does not continue on a folder.
    let synth = dir.path().join("synth");
    assert_code(
        &train(&synth, &["--steps", "1", "--batch-size", "2"], &[]),
        0,
    );
    let (_, stderr) = assert_code(
        &train(&synth, &["--steps", "2", "--resume", "--data", d], &[]),
        2,
    );
    assert!(
        stderr.contains("the checkpoint trained on the synthetic dataset"),
        "{stderr}"
    );
}

/// `--resume` checks every EMA and optimizer tensor against the model's shape
/// and dtype (reliability and security III, N3): a transposed tensor used to
/// panic (exit 101), a `[1]`-shaped one silently replaced the EMA (exit 0).
#[test]
fn resume_refuses_tensors_of_the_wrong_shape_or_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    assert_code(&train(&out, &["--steps", "1", "--batch-size", "2"], &[]), 0);
    let ck = checkpoint::latest(&out).unwrap();
    let original: Vec<(String, Vec<(String, Tensor)>)> =
        [checkpoint::EMA_FILE, checkpoint::OPTIMIZER_FILE]
            .iter()
            .map(|f| (f.to_string(), read_tensors(&ck.join(f)).unwrap()))
            .collect();
    // The first 2-D tensor of each file, changed three ways.
    type Change = fn(&Tensor) -> Tensor;
    let changes: [(&str, Change); 3] = [
        ("transposed", |t| t.transpose(0, 1).contiguous()),
        ("one element", |t| {
            Tensor::from_slice(&[0.5f32]).to_kind(t.kind())
        }),
        ("integer", |t| t.to_kind(Kind::Int)),
    ];
    for (file, tensors) in &original {
        let (victim, _) = tensors
            .iter()
            .find(|(_, t)| t.dim() == 2 && t.size()[0] != t.size()[1])
            .expect("a non-square 2-D tensor");
        for (what, change) in changes {
            let changed: Vec<(String, Tensor)> = tensors
                .iter()
                .map(|(n, t)| {
                    (
                        n.clone(),
                        if n == victim {
                            change(t)
                        } else {
                            t.shallow_clone()
                        },
                    )
                })
                .collect();
            write_tensors(&ck.join(file), &changed, None).unwrap();
            let o = train(
                &out,
                &["--steps", "2", "--batch-size", "2", "--resume"],
                &[],
            );
            let (_, stderr) = assert_code(&o, 2);
            let line = stderr.lines().next().unwrap_or_default();
            assert!(
                line.contains(&format!("has `{victim}` in {file} as "))
                    && line.contains("but the model's is"),
                "{file}, {what}: {stderr}"
            );
            assert!(
                stderr.contains("hint: the checkpoint is damaged or from another model"),
                "{stderr}"
            );
        }
        write_tensors(&ck.join(file), tensors, None).unwrap();
    }
    // Restored, the checkpoint resumes.
    assert_code(
        &train(
            &out,
            &["--steps", "2", "--batch-size", "2", "--resume"],
            &[],
        ),
        0,
    );
}

/// Checkpoint files, state and weights survive a save/load in-process, and
/// the model file loads strictly into diffusers' UNet2DModel with config.json.
#[test]
fn train_checkpoint_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    assert_code(&train(&out, &["--steps", "2", "--batch-size", "2"], &[]), 0);
    let ck = checkpoint::latest(&out).unwrap();
    for f in [
        checkpoint::MODEL_FILE,
        checkpoint::EMA_FILE,
        checkpoint::OPTIMIZER_FILE,
        checkpoint::STATE_FILE,
        checkpoint::CONFIG_FILE,
    ] {
        assert!(ck.join(f).is_file(), "{f} missing in {}", ck.display());
    }
    let state = checkpoint::read_state(&ck).unwrap();
    assert_eq!(state.step, 2);
    assert_eq!(state.world_size, 1);
    assert_eq!(state.config.preset, Preset::Tiny);

    // Load into a fresh trainer, save again: identical tensors.
    let config = TrainConfig::preset(Preset::Tiny);
    let mut t = Trainer::new(
        config,
        Device::Cpu,
        Precision::Fp32,
        None,
        Box::new(SingleProcess),
    )
    .unwrap();
    let loaded = t.load_checkpoint(&ck).unwrap();
    assert_eq!(loaded.step, 2);
    assert_eq!(t.step, 2);
    let again = dir.path().join("again");
    let ck2 = t.save_checkpoint(&again, 0, None).unwrap();
    for f in [
        checkpoint::MODEL_FILE,
        checkpoint::EMA_FILE,
        checkpoint::OPTIMIZER_FILE,
    ] {
        let a = read_tensors(&ck.join(f)).unwrap();
        let b = read_tensors(&ck2.join(f)).unwrap();
        assert_eq!(a.len(), b.len(), "{f}");
        for ((na, va), (nb, vb)) in a.iter().zip(&b) {
            assert_eq!(na, nb);
            assert!(va.equal(vb), "{f}: {na}");
        }
    }
    // EMA differs from the raw weights after two updates (decay > 0 at step 2).
    let m = read_tensors(&ck.join(checkpoint::MODEL_FILE)).unwrap();
    let e = read_tensors(&ck.join(checkpoint::EMA_FILE)).unwrap();
    assert!(m.iter().zip(&e).any(|((_, a), (_, b))| !a.equal(b)));

    // diffusers loads the checkpoint strictly.
    let script = r#"
import json, sys, torch
from diffusers import UNet2DModel
from safetensors.torch import load_file
d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))
m = UNet2DModel.from_config(cfg)
sd = load_file(d + "/model.safetensors")
m.load_state_dict(sd, strict=True)
y = m(torch.zeros(1, 3, 32, 32), torch.tensor([10])).sample
assert torch.isfinite(y).all()
# The final EMA export loads with from_pretrained and equals ema.safetensors.
ema = load_file(d + "/ema.safetensors")
m2 = UNet2DModel.from_pretrained(sys.argv[2])
for k, v in m2.state_dict().items():
    assert torch.equal(v, ema[k]), k
print("ok", sum(p.numel() for p in m.parameters()))
"#;
    let o = Command::new(crate::common::venv_python())
        .arg("-c")
        .arg(script)
        .arg(&ck)
        .arg(out.join("unet"))
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&o);
    assert!(
        o.status.success(),
        "diffusers could not load the checkpoint:\n{stderr}"
    );
    assert_eq!(stdout.trim(), format!("ok {}", t.param_count()));
}

/// A damaged `metrics.jsonl` never blocks the resume of an intact checkpoint
/// (reliability and security III, N18): invalid UTF-8 in it, or a folder in
/// its place, used to stop `--resume`. It is moved aside with a warning and
/// the readable steps are kept.
#[test]
fn a_damaged_metrics_log_does_not_block_resume() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    assert_code(&train(&out, &["--steps", "2", "--batch-size", "2"], &[]), 0);
    let log = out.join("metrics.jsonl");
    let good = std::fs::read(&log).unwrap();
    // Invalid UTF-8 between the two good lines.
    let mut damaged = Vec::new();
    let first_end = good.iter().position(|b| *b == b'\n').unwrap() + 1;
    damaged.extend_from_slice(&good[..first_end]);
    damaged.extend_from_slice(b"\xff\xfe not a record\n");
    damaged.extend_from_slice(&good[first_end..]);
    std::fs::write(&log, &damaged).unwrap();
    let (_, stderr) = assert_code(
        &train(
            &out,
            &["--steps", "3", "--batch-size", "2", "--resume"],
            &[],
        ),
        0,
    );
    assert!(
        stderr.contains(
            "warning: metrics.jsonl was damaged (1 line(s) are not step records): moved to "
        ) && stderr.contains("metrics.jsonl.damaged"),
        "{stderr}"
    );
    let steps: Vec<u64> = read_jsonl(&log).unwrap().iter().map(|r| r.step).collect();
    assert_eq!(steps, [1, 2, 3]);
    assert_eq!(
        std::fs::read(out.join("metrics.jsonl.damaged")).unwrap(),
        damaged
    );
    // A folder in its place.
    std::fs::remove_file(&log).unwrap();
    std::fs::create_dir(&log).unwrap();
    let (_, stderr) = assert_code(
        &train(
            &out,
            &["--steps", "4", "--batch-size", "2", "--resume"],
            &[],
        ),
        0,
    );
    assert!(
        stderr.contains("metrics.jsonl was damaged (is a folder, not a regular file): moved to ")
            && stderr.contains("metrics.jsonl.damaged.1"),
        "{stderr}"
    );
    let steps: Vec<u64> = read_jsonl(&log).unwrap().iter().map(|r| r.step).collect();
    assert_eq!(steps, [4]);
}

/// Non-finite weights are never saved as good (reliability and security III,
/// N4): an lr of 1e300 overflows the weights while the loss still reads
/// finite; the run used to end with exit 0 and an all-NaN checkpoint and
/// `unet/` export, and a later NaN loss named such a checkpoint as the last
/// good one.
#[test]
fn non_finite_weights_are_never_saved() {
    let dir = tempfile::tempdir().unwrap();
    // The run ends before the loss check could fire.
    let out = dir.path().join("fresh");
    let (_, stderr) = assert_code(
        &train(
            &out,
            &["--steps", "1", "--batch-size", "2", "--lr", "1e300"],
            &[],
        ),
        1,
    );
    assert!(
        stderr.contains("error: the weights hold NaN or infinite values at step 1 (fp32); nothing of this state is saved")
            && stderr.contains("no checkpoint was written before it"),
        "{stderr}"
    );
    assert!(checkpoint_steps(&out).is_empty());
    assert!(!out.join("unet").exists(), "an export of NaN weights");
    // Resumed with the bad lr: the last good checkpoint named is the finite one.
    let out = dir.path().join("resumed");
    assert_code(&train(&out, &["--steps", "2", "--batch-size", "2"], &[]), 0);
    let (_, stderr) = assert_code(
        &train(
            &out,
            &[
                "--steps",
                "4",
                "--batch-size",
                "2",
                "--lr",
                "1e300",
                "--checkpoint-every",
                "1",
                "--resume",
            ],
            &[],
        ),
        1,
    );
    assert!(
        stderr.contains("at step 3 (fp32)")
            && stderr.contains(&format!(
                "the last good checkpoint is {}",
                out.join("checkpoints/step-000002").display()
            )),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: resume with a lower --lr"),
        "{stderr}"
    );
    assert_eq!(checkpoint_steps(&out), vec![2]);
    for (_, t) in read_tensors(
        &out.join("checkpoints/step-000002")
            .join(checkpoint::MODEL_FILE),
    )
    .unwrap()
    {
        assert!(t.isfinite().all().int64_value(&[]) != 0);
    }
}

/// A NaN loss stops the run with exit 1, naming the step and the last good
/// checkpoint, which stays on disk; nothing is written for the bad step.
#[test]
fn train_nan_guard_keeps_the_last_good_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = train(
        &out,
        &[
            "--steps",
            "8",
            "--batch-size",
            "2",
            "--checkpoint-every",
            "2",
        ],
        &[("IMGCTL_TEST_INJECT_NAN_AT_STEP", "5")],
    );
    let (_, stderr) = assert_code(&o, 1);
    assert!(stderr.contains("NaN at step 5"), "{stderr}");
    assert!(stderr.contains("step-000004"), "{stderr}");
    // Already fp32: only a lower lr helps (resuming unchanged replays the NaN).
    assert!(
        stderr.contains("hint: resume with a lower --lr") && !stderr.contains("--precision fp32"),
        "{stderr}"
    );
    assert_eq!(checkpoint_steps(&out), vec![2, 4]);
    let recs = losses(&out);
    assert_eq!(recs.last().unwrap().step, 4);
    // bf16 keeps the same guard.
    let out16 = dir.path().join("bf16");
    let o = train(
        &out16,
        &["--steps", "4", "--batch-size", "2", "--precision", "bf16"],
        &[("IMGCTL_TEST_INJECT_NAN_AT_STEP", "2")],
    );
    let (_, stderr) = assert_code(&o, 1);
    assert!(
        stderr.contains("NaN at step 2") && stderr.contains("bf16"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: start again with --precision fp32 or a lower --lr"),
        "{stderr}"
    );
}

/// An error once training has started (here the sample grid cannot be
/// written: a folder sits where the PNG goes) saves a checkpoint of the last
/// step first, so the run continues from there.
#[test]
fn train_an_error_after_the_first_step_saves_a_checkpoint_first() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    std::fs::create_dir_all(out.join("samples/step-000002.png/in-the-way")).unwrap();
    let args = [
        "--steps",
        "4",
        "--batch-size",
        "2",
        "--checkpoint-every",
        "100",
    ];
    let (_, stderr) = assert_code(
        &train_sampling(&out, &[&args[..], &["--sample-every", "2"]].concat()),
        1,
    );
    assert!(stderr.contains("error: writing "), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "saved the checkpoint of step 2 before stopping: {}",
            out.join("checkpoints/step-000002").display()
        )),
        "{stderr}"
    );
    assert_eq!(checkpoint_steps(&out), vec![2]);
    std::fs::remove_dir_all(out.join("samples/step-000002.png")).unwrap();
    let resumed = [&args[..], &["--resume", "auto"]].concat();
    let (_, stderr) = assert_code(&train(&out, &resumed, &[]), 0);
    assert!(stderr.contains("(step 2)"), "{stderr}");
    assert_eq!(checkpoint_steps(&out), vec![2, 4]);
}
