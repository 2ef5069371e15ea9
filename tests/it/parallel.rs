//! Data-parallel training and the benchmark, on the CPU: 2 CPU ranks against
//! one process with the double batch, bit-identical ranks, rendezvous and
//! launch errors, the NCCL loader, the supervisor, and the benchmark report.
#![cfg(feature = "torch")]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::common::{imgctl_bin, one_error_line, texts};

mod bench;
mod failures;
mod launchers;

/// A tiny model at 16×16 with one loader thread: a step takes milliseconds.
const SMALL_CONFIG: &str =
    "preset: tiny\nmodel:\n  sample_size: 16\ntraining:\n  workers: 1\n  synthetic_images: 64\n";

fn small_config(dir: &Path) -> PathBuf {
    let p = dir.join("small.yaml");
    std::fs::write(&p, SMALL_CONFIG).unwrap();
    p
}

/// imgctl with a clean launch environment (no inherited rank variables).
fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(imgctl_bin());
    c.args(args)
        .env("NO_COLOR", "1")
        .env("OMP_NUM_THREADS", "1");
    for k in [
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "TORCHELASTIC_USE_AGENT_STORE",
        "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_RESTART_COUNT",
        "IMGCTL_CPU_RANKS",
        "IMGCTL_RENDEZVOUS_TIMEOUT",
        "IMGCTL_PARAM_HASH_DIR",
        "IMGCTL_REFERENCE_TIMEOUT",
    ] {
        c.env_remove(k);
    }
    c
}

fn run(c: &mut Command) -> Output {
    c.output().expect("run imgctl")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every tensor of a safetensors file, as f32.
pub(crate) fn tensors(path: &Path) -> Vec<(String, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<(String, Vec<f32>)> = st
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let v = view
                .data()
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (name, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

pub(crate) fn train(
    dir: &Path,
    name: &str,
    ranks: Option<usize>,
    batch: usize,
    steps: u64,
) -> PathBuf {
    train_with(dir, name, ranks, batch, steps, &[])
}

/// [`train`] with `extra` flags; parameter hashes go to `DIR/NAME-hashes`.
fn train_with(
    dir: &Path,
    name: &str,
    ranks: Option<usize>,
    batch: usize,
    steps: u64,
    extra: &[&str],
) -> PathBuf {
    let cfg = small_config(dir);
    let out = dir.join(name);
    let hashes = dir.join(format!("{name}-hashes"));
    std::fs::create_dir_all(&hashes).unwrap();
    let mut c = cmd(&[
        "train-demo",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        &steps.to_string(),
        "--batch-size",
        &batch.to_string(),
        "--sample-every",
        "0",
        "--seed",
        "7",
        "--out",
        out.to_str().unwrap(),
    ]);
    c.args(extra);
    c.env("IMGCTL_PARAM_HASH_DIR", &hashes);
    if let Some(n) = ranks {
        c.env("IMGCTL_CPU_RANKS", n.to_string());
    }
    let o = run(&mut c);
    let (_, err) = texts(&o);
    assert!(o.status.success(), "{name} failed:\n{err}");
    out
}

pub(crate) fn final_model(out: &Path, steps: u64) -> PathBuf {
    out.join("checkpoints")
        .join(format!("step-{steps:06}"))
        .join("model.safetensors")
}

/// Relative L2 distance of two parameter sets: `‖a − b‖ / ‖b‖` over all
/// parameters, and the worst single tensor's own `‖a − b‖ / ‖b‖` with its name.
/// (Element-wise ratios are meaningless for weights whose gradient is a
/// near-cancellation: Adam normalises each element's update, so a 1e-7
/// difference in such a gradient moves that one weight visibly.)
pub(crate) fn relative_l2(
    a: &[(String, Vec<f32>)],
    b: &[(String, Vec<f32>)],
) -> (f64, f64, String) {
    assert_eq!(a.len(), b.len());
    let (mut num, mut den) = (0.0f64, 0.0f64);
    let mut worst = (0.0f64, String::new());
    for ((na, va), (nb, vb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        assert_eq!(va.len(), vb.len(), "{na}");
        let d: f64 = va
            .iter()
            .zip(vb)
            .map(|(x, y)| (*x as f64 - *y as f64).powi(2))
            .sum();
        let n: f64 = vb.iter().map(|y| (*y as f64).powi(2)).sum();
        num += d;
        den += n;
        let r = (d / n.max(1e-30)).sqrt();
        if r > worst.0 {
            worst = (r, na.clone());
        }
    }
    ((num / den.max(1e-30)).sqrt(), worst.0, worst.1)
}

pub(crate) fn assert_close(a: &Path, b: &Path, what: &str) {
    let (global, tensor, name) = relative_l2(&tensors(a), &tensors(b));
    assert!(
        global <= 1e-5,
        "{what}: parameters differ by {global:e} (relative L2 over all parameters)"
    );
    // Per tensor the bound is looser: a small tensor that starts at zero (a
    // GroupNorm bias) moves by Adam's m/sqrt(v), which turns ulp-level
    // differences of the summation order (2 × 2 against 1 × 4) into relative
    // differences of about 1e-4. Measured: 1.69e-4 on an AMD EPYC without
    // AVX-512 (the same libtorch gave under 1e-4 on an earlier machine).
    assert!(
        tensor <= 1e-3,
        "{what}: tensor {name} differs by {tensor:e} (relative L2)"
    );
}

#[test]
fn two_cpu_ranks_match_one_process_with_the_double_batch_and_agree_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let steps = 3;
    let two = train(dir.path(), "two-ranks", Some(2), 2, steps);
    let one = train(dir.path(), "one-rank", None, 4, steps);
    assert_close(
        &final_model(&two, steps),
        &final_model(&one, steps),
        "2 ranks × batch 2 against 1 × batch 4",
    );
    // Every rank logged the same hashes: start, grads and params per step, final.
    let h0 = std::fs::read_to_string(dir.path().join("two-ranks-hashes/rank-0.txt")).unwrap();
    let h1 = std::fs::read_to_string(dir.path().join("two-ranks-hashes/rank-1.txt")).unwrap();
    assert_eq!(h0.lines().count(), 2 + 2 * steps as usize, "{h0}");
    assert!(
        h0.lines().last().unwrap().starts_with("final params "),
        "{h0}"
    );
    assert_eq!(h0, h1, "ranks hold different parameters or gradients");
    // Only rank 0 wrote outputs: one metrics file, one line per step.
    let metrics = std::fs::read_to_string(two.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), steps as usize, "{metrics}");
}

#[test]
fn resume_with_another_world_size_continues_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    // 4 steps on 2 ranks, against 2 steps on 2 ranks then 2 more on 1 rank
    // with the double batch: the same global batches, so the same weights.
    let whole = train(dir.path(), "whole", Some(2), 2, 4);
    let cfg = small_config(dir.path());
    let part = dir.path().join("part");
    let first = run(cmd(&[
        "train-demo",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        "4",
        "--batch-size",
        "2",
        "--sample-every",
        "0",
        "--seed",
        "7",
        "--out",
        part.to_str().unwrap(),
    ])
    .env("IMGCTL_CPU_RANKS", "2")
    .env("IMGCTL_TEST_INTERRUPT_AFTER_STEP", "2"));
    assert_eq!(first.status.code(), Some(130), "{}", texts(&first).1);
    let resumed = run(&mut cmd(&[
        "train-demo",
        "--resume",
        "--batch-size",
        "4",
        "--sample-every",
        "0",
        "--out",
        part.to_str().unwrap(),
    ]));
    assert!(resumed.status.success(), "{}", texts(&resumed).1);
    assert_close(
        &final_model(&part, 4),
        &final_model(&whole, 4),
        "2 steps on 2 ranks resumed on 1 rank against 4 steps on 2 ranks",
    );
}

/// The arguments of a 1-step CPU training of the small config into `DIR/NAME`.
fn small_train_args(dir: &Path, name: &str, steps: &str) -> Vec<String> {
    let cfg = small_config(dir);
    [
        "train-demo",
        "--config",
        cfg.to_str().unwrap(),
        "--device",
        "cpu",
        "--steps",
        steps,
        "--batch-size",
        "2",
        "--sample-every",
        "0",
        "--seed",
        "7",
        "--out",
        dir.join(name).to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The hash logs of rank 0 and rank 1 under `dir` are equal and complete.
pub(crate) fn assert_ranks_agree(hashes: &Path, steps: usize, err: &str) {
    let h0 = std::fs::read_to_string(hashes.join("rank-0.txt"))
        .unwrap_or_else(|e| panic!("rank 0 wrote no hashes ({e}):\n{err}"));
    let h1 = std::fs::read_to_string(hashes.join("rank-1.txt"))
        .unwrap_or_else(|e| panic!("rank 1 wrote no hashes ({e}):\n{err}"));
    assert_eq!(h0.lines().count(), 2 + 2 * steps, "{h0}\n{err}");
    assert_eq!(h0, h1, "ranks hold different parameters or gradients");
}

/// The set-up venv's torchrun, or None after a `SKIPPED:` line when it is missing.
pub(crate) fn torchrun_or_skip() -> Option<PathBuf> {
    let torchrun = crate::common::venv().join("bin/torchrun");
    if !torchrun.exists() {
        eprintln!(
            "SKIPPED: {} does not exist (run scripts/setup.sh)",
            torchrun.display()
        );
        return None;
    }
    Some(torchrun)
}

/// The venv's NCCL wheel (nvidia-nccl-cu12, pinned by torch 2.7.0's wheel).
fn wheel_nccl() -> PathBuf {
    let lib = crate::common::venv().join("lib");
    let py = std::fs::read_dir(&lib)
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/setup.sh)", lib.display()))
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .expect("a python3.x folder in the venv");
    py.path().join("site-packages/nvidia/nccl/lib/libnccl.so.2")
}

/// A supervised 2-rank training that runs until stopped, its stderr lines,
/// and the worker pids once rank 0 is training.
struct LongRun {
    child: std::process::Child,
    lines: Vec<String>,
    rx: std::sync::mpsc::Receiver<String>,
    pids: [i32; 2],
    deadline: Instant,
    _dir: tempfile::TempDir,
    out: PathBuf,
}

impl LongRun {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cfg = small_config(dir.path());
        let out = dir.path().join("run");
        let mut child = cmd(&[
            "-v",
            "train-demo",
            "--config",
            cfg.to_str().unwrap(),
            "--steps",
            "100000",
            "--batch-size",
            "2",
            "--sample-every",
            "0",
            "--checkpoint-every",
            "0",
            "--out",
            out.to_str().unwrap(),
        ])
        .env("IMGCTL_CPU_RANKS", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut run = Self {
            child,
            lines: Vec::new(),
            rx,
            pids: [0; 2],
            deadline: Instant::now() + Duration::from_secs(180),
            _dir: dir,
            out,
        };
        // Wait for both pids and for training to be under way on rank 0.
        loop {
            let line = run
                .rx
                .recv_timeout(run.deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("no training progress:\n{}", run.lines.join("\n")));
            for (r, pid) in run.pids.iter_mut().enumerate() {
                let tag = format!("started rank {r} of 2 (pid ");
                if let Some(rest) = line.split(&tag).nth(1) {
                    *pid = rest.split(',').next().unwrap().parse().unwrap();
                }
            }
            let training = line.starts_with("[rank 0] training ");
            run.lines.push(line);
            if training && run.pids.iter().all(|&p| p > 0) {
                return run;
            }
        }
    }

    /// Waits for the supervisor to end; returns its status, all stderr and
    /// the directory that holds `out` (alive until dropped).
    fn finish(mut self) -> (std::process::ExitStatus, String, tempfile::TempDir) {
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= self.deadline {
                let _ = self.child.kill();
                panic!("the supervisor did not stop:\n{}", self.lines.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        while let Ok(l) = self.rx.recv_timeout(Duration::from_secs(5)) {
            self.lines.push(l);
        }
        for pid in self.pids {
            // SAFETY: signal 0 only checks that the pid exists.
            let alive = unsafe { libc::kill(pid, 0) } == 0;
            assert!(!alive, "worker pid {pid} is still running");
        }
        let dir = std::mem::replace(&mut self._dir, tempfile::tempdir().unwrap());
        (status, self.lines.join("\n"), dir)
    }
}

/// A one-step tiny run over 2 CPU ranks with `extra` flags and `envs`.
fn two_rank_tiny_step(dir: &Path, extra: &[&str], envs: &[(&str, &str)]) -> Output {
    let out = dir.join("out");
    let mut args = vec![
        "train-demo",
        "--preset",
        "tiny",
        "--steps",
        "1",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut c = cmd(&args);
    c.env("IMGCTL_CPU_RANKS", "2");
    for (k, v) in envs {
        c.env(k, v);
    }
    run(&mut c)
}

fn json(o: &Output) -> serde_json::Value {
    let (out, err) = texts(o);
    assert!(o.status.success(), "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
}

/// A short benchmark of the small config (`steps` timed after one warm-up)
/// over `ranks` CPU ranks (one process without), with `extra` flags.
fn small_bench(dir: &Path, ranks: Option<usize>, steps: &str, extra: &[&str]) -> serde_json::Value {
    let cfg = small_config(dir);
    let mut args = vec![
        "train-demo",
        "--benchmark",
        "--config",
        cfg.to_str().unwrap(),
        "--batch-size",
        "2",
        "--warmup",
        "1",
        "--steps",
        steps,
        "--json",
    ];
    args.extend_from_slice(extra);
    let mut c = cmd(&args);
    if let Some(n) = ranks {
        c.env("IMGCTL_CPU_RANKS", n.to_string());
    }
    json(&run(&mut c))
}

/// [`small_bench`] over two CPU ranks, two timed steps.
fn two_rank_bench(dir: &Path, extra: &[&str]) -> serde_json::Value {
    small_bench(dir, Some(2), "2", extra)
}

/// [`two_rank_bench`] in bf16.
fn bf16_two_rank_bench(dir: &Path, extra: &[&str]) -> serde_json::Value {
    two_rank_bench(dir, &[&["--precision", "bf16"], extra].concat())
}

/// `train-demo --benchmark --compare` on the small config (batch 2, one
/// warm-up step, `steps` timed), with `extra` flags and `envs`.
fn compare(dir: &Path, steps: &str, extra: &[&str], envs: &[(&str, &str)]) -> Output {
    let cfg = small_config(dir);
    let mut args = vec![
        "train-demo",
        "--benchmark",
        "--compare",
        "--config",
        cfg.to_str().unwrap(),
        "--batch-size",
        "2",
        "--warmup",
        "1",
        "--steps",
        steps,
        "--json",
    ];
    args.extend_from_slice(extra);
    let mut c = cmd(&args);
    c.env("IMGCTL_PYTHON", crate::common::venv_python());
    for (k, v) in envs {
        c.env(k, v);
    }
    run(&mut c)
}

#[test]
fn the_overlapped_all_reduce_gives_the_sequential_result_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let steps = 3;
    // Small buckets: the tiny model's gradients fill dozens of them, so most
    // all-reduces can start while backward is still running.
    for precision in ["fp32", "bf16"] {
        let mut finals = Vec::new();
        let mut hashes = Vec::new();
        for overlap in ["on", "off"] {
            let name = format!("{precision}-{overlap}");
            let out = train_with(
                dir.path(),
                &name,
                Some(2),
                2,
                steps,
                &[
                    "--precision",
                    precision,
                    "--overlap-grad-reduce",
                    overlap,
                    "--bucket-cap-mb",
                    "0.02",
                ],
            );
            finals.push(tensors(&final_model(&out, steps)));
            let h = dir.path().join(format!("{name}-hashes"));
            let h0 = std::fs::read_to_string(h.join("rank-0.txt")).unwrap();
            let h1 = std::fs::read_to_string(h.join("rank-1.txt")).unwrap();
            assert_eq!(
                h0, h1,
                "{name}: ranks hold different parameters or gradients"
            );
            assert_eq!(h0.lines().count(), 2 + 2 * steps as usize, "{h0}");
            hashes.push(h0);
        }
        // Same averaged gradients at every step, same final weights, bit for bit.
        assert_eq!(
            hashes[0], hashes[1],
            "{precision}: overlap changed the gradients"
        );
        assert!(
            finals[0] == finals[1],
            "{precision}: overlap changed the weights"
        );
    }
    // The training summary says how the all-reduce ran.
    let cfg = small_config(dir.path());
    let summary = json(&run(cmd(&[
        "train-demo",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--sample-every",
        "0",
        "--bucket-cap-mb",
        "0.02",
        "--out",
        dir.path().join("summary").to_str().unwrap(),
        "--json",
    ])
    .env("IMGCTL_CPU_RANKS", "2")));
    let g = &summary["grad_sync"];
    assert_eq!(g["overlapped"], true, "{summary}");
    assert_eq!(g["calls"], 2, "{summary}");
    // Every parameter in fp32, plus the gaps that align each one (under 5 %).
    let (bytes, params) = (
        g["bytes_per_sync"].as_u64().unwrap(),
        summary["params"].as_u64().unwrap(),
    );
    assert!(
        bytes >= 4 * params && bytes * 100 <= 4 * params * 105,
        "{summary}"
    );
    // The benchmark says how the all-reduce ran.
    let bench = |overlap: &str| {
        two_rank_bench(
            dir.path(),
            &["--bucket-cap-mb", "0.02", "--overlap-grad-reduce", overlap],
        )
    };
    let on = bench("on");
    assert_eq!(on["grad_overlap"], true, "{on}");
    let buckets = on["buckets_per_step"].as_f64().unwrap();
    assert!(buckets > 10.0, "{on}");
    // Buckets reduced during backward: a share in [0, 1] (how much depends on
    // timing, so not asserted further; the closing note reports it).
    let during = on["buckets_during_backward"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&during), "{on}");
    let off = bench("off");
    assert_eq!(off["grad_overlap"], false, "{off}");
    assert_eq!(off["buckets_during_backward"].as_f64(), Some(0.0), "{off}");
    // Bad values are usage errors that name the flag (--overlap-grad-reduce's
    // values are clap's to check: tests/it/cli.rs).
    for (flag, value) in [("--overlap-grad-reduce", "maybe"), ("--bucket-cap-mb", "0")] {
        let bad = run(&mut cmd(&["train-demo", flag, value, "--steps", "1"]));
        assert_eq!(bad.status.code(), Some(2), "{}", texts(&bad).1);
        let err = texts(&bad).1;
        assert!(
            err.contains(flag) || err.contains(&flag[2..].replace('-', "_")),
            "{err}"
        );
    }
}
