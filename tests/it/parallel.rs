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

#[test]
fn rendezvous_times_out_naming_the_missing_ranks() {
    let port = free_port().to_string();
    let o = run(cmd(&[
        "train-demo",
        "--preset",
        "tiny",
        "--rendezvous-timeout",
        "1",
    ])
    .env("RANK", "0")
    .env("WORLD_SIZE", "2")
    .env("MASTER_ADDR", "127.0.0.1")
    .env("MASTER_PORT", &port));
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "rendezvous timed out after 1 s: 1 of 2 ranks arrived at 127.0.0.1:{port} (missing ranks: 1)"
        )),
        "{err}"
    );
    assert!(err.contains("hint: "), "{err}");
    // A non-zero rank with nobody at MASTER_PORT, timeout from the environment.
    let o = run(cmd(&["train-demo", "--preset", "tiny"])
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port)
        .env("IMGCTL_RENDEZVOUS_TIMEOUT", "1"));
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("rendezvous timed out after 1 s: rank 1 could not reach rank 0"),
        "{err}"
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

/// The real torchrun of the set-up venv (scripts/setup.sh installs torch
/// there) launches two CPU ranks: its elastic agent holds MASTER_PORT with
/// its own c10d TCPStore, so rank 0 must publish a port of its own there.
#[test]
fn torchrun_launches_two_cpu_ranks_through_its_agent_store() {
    let Some(torchrun) = torchrun_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hashes = dir.path().join("hashes");
    std::fs::create_dir_all(&hashes).unwrap();
    let mut c = Command::new(&torchrun);
    c.args(["--standalone", "--nproc-per-node=2", "--no-python"])
        .arg(imgctl_bin())
        .args(small_train_args(dir.path(), "run", "2"))
        .env("NO_COLOR", "1")
        .env("OMP_NUM_THREADS", "1")
        .env("IMGCTL_PARAM_HASH_DIR", &hashes)
        .env("IMGCTL_RENDEZVOUS_TIMEOUT", "120");
    for k in [
        "RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "IMGCTL_CPU_RANKS",
    ] {
        c.env_remove(k);
    }
    let o = run(&mut c);
    let (out, err) = texts(&o);
    assert!(o.status.success(), "torchrun failed:\n{out}\n{err}");
    // Rank 0 serves at the address it reached torchrun's store from (the
    // loopback here, `--standalone`), on a port of its own.
    let at = err
        .lines()
        .find_map(|l| l.strip_prefix("data parallel: 2 ranks, cpu backend, rendezvous at "))
        .unwrap_or_else(|| panic!("no rendezvous line:\n{err}"));
    let at: std::net::SocketAddr = at.trim().parse().unwrap_or_else(|e| panic!("{at}: {e}"));
    assert!(at.ip().is_loopback(), "{at}");
    assert!(!err.contains("already in use"), "{err}");
    // Rank 0's summary names the all-reduce.
    assert!(err.contains("gradient all-reduce: "), "{err}");
    assert!(err.contains(", overlapped with backward ("), "{err}");
    assert!(!err.contains(" 1 buckets"), "{err}");
    assert_ranks_agree(&hashes, 2, &err);
    let metrics = std::fs::read_to_string(dir.path().join("run/metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 2, "only rank 0 writes: {metrics}");
}

/// imgctl's TCPStore client against PyTorch's own TCPStore server: what one
/// writes, the other reads (keys, framing, the `/` key prefix), and a wait
/// for a key nobody writes ends at its deadline.
#[test]
fn the_store_client_speaks_pytorchs_tcpstore_protocol() {
    use imgctl::world::tcpstore::StoreClient;
    let script = "import datetime, sys, torch.distributed as d\n\
                  s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False, \
                  timeout=datetime.timedelta(seconds=60))\n\
                  s.set('from_python', b'hello')\n\
                  print(s.port, flush=True)\n\
                  print(s.get('imgctl/run/0/rendezvous_address').decode(), flush=True)\n";
    let mut py = Command::new(crate::common::venv_python())
        .args(["-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(py.stdout.take().unwrap()).lines();
    let port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut c = StoreClient::connect("127.0.0.1", port, deadline).unwrap();
    assert_eq!(
        c.wait_get("from_python", deadline).unwrap().as_deref(),
        Some(&b"hello"[..])
    );
    let soon = Instant::now() + Duration::from_millis(300);
    assert_eq!(c.wait_get("nobody/writes/this", soon).unwrap(), None);
    // A fresh connection (the one above gave up in the middle of a WAIT).
    let mut c = StoreClient::connect("127.0.0.1", port, deadline).unwrap();
    c.set("imgctl/run/0/rendezvous_address", b"127.0.0.1:29601")
        .unwrap();
    assert_eq!(lines.next().unwrap().unwrap().trim(), "127.0.0.1:29601");
    assert!(py.wait().unwrap().success());
}

/// Under torchrun's agent store, a rank whose rank 0 never publishes its
/// port gives up at its deadline, naming the key and the store it waited on.
#[test]
fn a_rank_waiting_on_the_agent_store_names_what_it_waited_for() {
    let script = "import datetime, time, torch.distributed as d\n\
                  s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False, \
                  timeout=datetime.timedelta(seconds=60))\n\
                  print(s.port, flush=True)\n\
                  time.sleep(60)\n";
    let mut py = Command::new(crate::common::venv_python())
        .args(["-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(py.stdout.take().unwrap()).lines();
    let port = lines.next().unwrap().unwrap().trim().to_string();
    let o = run(cmd(&["train-demo", "--preset", "tiny", "--device", "cpu"])
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port)
        .env("TORCHELASTIC_USE_AGENT_STORE", "True")
        .env("TORCHELASTIC_RUN_ID", "job7")
        .env("TORCHELASTIC_RESTART_COUNT", "2")
        .env("IMGCTL_RENDEZVOUS_TIMEOUT", "1"));
    let _ = py.kill();
    let _ = py.wait();
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "error: rendezvous timed out after 1 s: rank 1 waited for rank 0 to publish its \
             rendezvous address under key \"imgctl/job7/2/rendezvous_address\" in torchrun's agent \
             store at 127.0.0.1:{port}"
        )),
        "{err}"
    );
}

/// A rank that arrived is told which rank rank 0 gave up on, not that the
/// connection closed.
#[test]
fn a_rank_that_arrived_learns_which_rank_did_not() {
    let port = free_port().to_string();
    let rank = |r: &str, timeout: &str| {
        cmd(&["train-demo", "--preset", "tiny", "--device", "cpu"])
            .env("RANK", r)
            .env("WORLD_SIZE", "3")
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", &port)
            .env("IMGCTL_RENDEZVOUS_TIMEOUT", timeout)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let root = rank("0", "3");
    let one = rank("1", "60");
    let o1 = one.wait_with_output().unwrap();
    let o0 = root.wait_with_output().unwrap();
    let (_, err) = texts(&o1);
    assert_eq!(o1.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "error: rendezvous failed: rank 1 reached rank 0 at 127.0.0.1:{port}, \
             but rank 0 gave up after 3 s: 2 of 3 ranks arrived at 127.0.0.1:{port} (missing ranks: 2)"
        )),
        "{err}"
    );
    assert!(!err.contains("failed to fill whole buffer"), "{err}");
    assert_eq!(o0.status.code(), Some(1), "{}", texts(&o0).1);
}

/// Two CPU ranks meet over IPv6 (MASTER_ADDR=::1) and train in agreement.
#[test]
fn two_ranks_train_over_ipv6() {
    if let Err(e) = TcpListener::bind("[::1]:0") {
        eprintln!("SKIPPED: no IPv6 loopback here ({e})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hashes = dir.path().join("hashes");
    std::fs::create_dir_all(&hashes).unwrap();
    let port = TcpListener::bind("[::1]:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let args = small_train_args(dir.path(), "v6", "1");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let spawn = |r: &str| {
        cmd(&args)
            .env("RANK", r)
            .env("WORLD_SIZE", "2")
            .env("MASTER_ADDR", "::1")
            .env("MASTER_PORT", &port)
            .env("IMGCTL_PARAM_HASH_DIR", &hashes)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("0"), spawn("1"));
    let (o0, o1) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let err = format!("{}\n{}", texts(&o0).1, texts(&o1).1);
    assert!(o0.status.success() && o1.status.success(), "{err}");
    assert!(
        err.contains(&format!("rendezvous at [::1]:{port}")),
        "{err}"
    );
    assert_ranks_agree(&hashes, 1, &err);
}

#[test]
fn a_taken_master_port_is_named() {
    let hold = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hold.local_addr().unwrap().port().to_string();
    let o = run(cmd(&["train-demo", "--preset", "tiny"])
        .env("RANK", "0")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", &port));
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("error: MASTER_PORT {port} is already in use")),
        "{err}"
    );
}

#[test]
fn bad_gpu_selections_are_usage_errors() {
    for (arg, needle) in [
        (
            "0,,1",
            "--gpus \"0,,1\" is a malformed GPU list: entry 2 is empty",
        ),
        (
            "two",
            "--gpus \"two\" is not `all`, a count or a list of device ids",
        ),
        ("0,1,0", "--gpus \"0,1,0\" lists GPU 0 twice"),
        (
            "-1",
            "--gpus \"-1\" is not `all`, a count or a list of device ids",
        ),
        (
            "0,-1",
            "--gpus \"0,-1\" is a malformed GPU list: \"-1\" is not a device index or a GPU-/MIG- UUID",
        ),
        ("0", "--gpus 0 asks for no GPU"),
        // The grammar is verify's too; UUIDs are not the workers' (before any GPU is looked for).
        (
            "GPU-8f3c0000-1111",
            "--gpus names GPUs by UUID (GPU-8f3c0000-1111); train-demo places its workers by device index",
        ),
    ] {
        let o = run(&mut cmd(&["train-demo", "--preset", "tiny", "--gpus", arg]));
        let (_, err) = texts(&o);
        assert_eq!(o.status.code(), Some(2), "{arg}: {err}");
        assert!(err.contains(needle), "{arg}: {err}");
    }
}

#[test]
fn gpus_without_a_gpu_is_a_clear_error() {
    let visible = tch::Cuda::device_count();
    let o = run(&mut cmd(&["train-demo", "--preset", "tiny", "--gpus", "9"]));
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    if visible == 0 {
        assert!(
            err.contains("--gpus 9 needs CUDA GPUs, but no CUDA device is visible"),
            "{err}"
        );
        assert!(err.contains("omit --gpus to train on the CPU"), "{err}");
    } else {
        assert!(
            err.contains(&format!("requested 9 GPUs but only {visible}")),
            "{err}"
        );
    }
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

#[test]
fn nccl_loads_from_the_wheel_and_from_libtorch_and_reports_its_version() {
    use imgctl::sys::nccl::{version_string, NcclLibrary};
    let path = wheel_nccl();
    let lib = NcclLibrary::open(&path).unwrap();
    assert_eq!(lib.version().unwrap(), 22602);
    assert_eq!(version_string(lib.version().unwrap()), "2.26.2");
    // libtorch_cuda links libnccl.so.2, so it is mapped in this very process.
    let mapped = NcclLibrary::locate().unwrap();
    assert!(
        mapped.path().to_string_lossy().ends_with("libnccl.so.2"),
        "{}",
        mapped.path().display()
    );
    assert_eq!(mapped.version().unwrap(), 22602);
}

#[test]
fn missing_nccl_is_a_clear_error() {
    use imgctl::sys::nccl::NcclLibrary;
    let dir = tempfile::tempdir().unwrap();
    let e = NcclLibrary::open(&dir.path().join("libnccl.so.2")).unwrap_err();
    let text = imgctl::commands::error::render_error(&e);
    assert!(
        text.starts_with("error: NCCL is missing: cannot load "),
        "{text}"
    );
    assert!(
        text.contains("hint: NCCL comes with the PyTorch CUDA wheel"),
        "{text}"
    );
    // A file that is not a shared library at all.
    let fake = dir.path().join("libnccl.so.2");
    std::fs::write(&fake, b"not an ELF file").unwrap();
    let e = NcclLibrary::open(&fake).unwrap_err();
    assert!(e.to_string().contains("NCCL is missing"), "{e}");
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

#[test]
fn a_dying_worker_is_reported_by_rank_and_the_rest_are_stopped() {
    let run = LongRun::start();
    // SAFETY: SIGKILL to the rank-1 worker this test's imgctl started.
    unsafe {
        libc::kill(run.pids[1], libc::SIGKILL);
    }
    let (status, err, _) = run.finish();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: worker rank 1 of 2 failed: it was killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    assert!(err.contains("stopped the others (rank 0 "), "{err}");
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

#[test]
fn a_malformed_collective_timeout_is_a_usage_error_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let o = two_rank_tiny_step(dir.path(), &[], &[("IMGCTL_COLLECTIVE_TIMEOUT", "soon")]);
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("IMGCTL_COLLECTIVE_TIMEOUT=\"soon\" is not a positive number of seconds"),
        "{err}"
    );
}

/// A worker that fails on bad input: the supervisor's one error line names
/// the worker's own error, its hint is the worker's, and the worker's error
/// block is not printed a second time; exit 2 as the worker's.
#[test]
fn a_failed_worker_is_reported_with_its_own_error() {
    let dir = tempfile::tempdir().unwrap();
    let o = two_rank_tiny_step(dir.path(), &["--data", "/nonexistent"], &[]);
    let (_, err) = texts(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // One error line, the supervisor's own.
    let last = one_error_line(&err);
    assert!(
        last.starts_with("error: worker rank ")
            && last.contains(
                " of 2 failed: it exited with code 2: cannot read the data folder /nonexistent"
            ),
        "{err}"
    );
    assert!(
        err.contains("hint: pass a readable directory of PNG or JPEG images to --data (rank "),
        "{err}"
    );
    assert!(!err.contains("last lines of rank"), "printed twice:\n{err}");
    // A worker's block appears once, live, with its prefix (the other rank
    // may be stopped before it gets to print its own).
    let blocks: Vec<usize> = (0..2)
        .map(|r| {
            err.matches(&format!(
                "[rank {r}] error: cannot read the data folder /nonexistent"
            ))
            .count()
        })
        .collect();
    assert!(
        blocks.iter().all(|&n| n <= 1) && blocks.iter().sum::<usize>() >= 1,
        "{err}"
    );
}

#[test]
fn ctrl_c_reaches_rank_0_which_saves_a_checkpoint() {
    let run = LongRun::start();
    // SAFETY: SIGINT to the supervisor this test started (as Ctrl-C would).
    unsafe {
        libc::kill(run.child.id() as i32, libc::SIGINT);
    }
    let out = run.out.clone();
    let (status, err, _dir) = run.finish();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("[rank 0] error: interrupted at step "),
        "{err}"
    );
    assert!(
        err.contains("error: interrupted: 2 workers stopped"),
        "{err}"
    );
    let saved: Vec<_> = std::fs::read_dir(out.join("checkpoints"))
        .unwrap_or_else(|e| panic!("no checkpoints ({e}):\n{err}"))
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .collect();
    assert_eq!(saved.len(), 1, "{err}");
}

fn json(o: &Output) -> serde_json::Value {
    let (out, err) = texts(o);
    assert!(o.status.success(), "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
}

#[test]
fn cpu_benchmark_reports_a_sane_json() {
    let dir = tempfile::tempdir().unwrap();
    let v = small_bench(dir.path(), None, "3", &[]);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["kind"], "imgctl.train_benchmark");
    assert_eq!(v["world_size"], 1);
    assert_eq!(v["global_batch"], 2);
    assert_eq!(v["timed_steps"], 3);
    assert_eq!(v["device_name"], "cpu");
    assert!(v["img_per_s"].as_f64().unwrap() > 0.0, "{v}");
    let b = &v["breakdown_ms"];
    for k in ["data", "forward", "backward", "optimizer"] {
        assert!(b[k].as_f64().unwrap() >= 0.0, "{k}: {v}");
    }
    // One rank all-reduces nothing: only the call's own overhead shows.
    let total = b["total"].as_f64().unwrap();
    assert!(b["all_reduce"].as_f64().unwrap() < 0.05 * total, "{v}");
    assert!(b["forward"].as_f64().unwrap() > 0.0 && b["backward"].as_f64().unwrap() > 0.0);
    assert!(v["memory"].is_null(), "no device memory on the CPU");
    assert!(v["flops"]["mfu"].is_null());
    assert!(v["flops"]["train_flops_per_image"].as_f64().unwrap() > 0.0);
    assert!(v["last_loss"].as_f64().unwrap().is_finite());
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

#[test]
fn bf16_gradients_are_reduced_in_fp32_unless_bf16_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let fp32 = bf16_two_rank_bench(dir.path(), &[]);
    let bf16 = bf16_two_rank_bench(dir.path(), &["--grad-reduce", "bf16"]);
    let params = fp32["params"].as_u64().unwrap();
    assert_eq!(fp32["world_size"], 2, "{fp32}");
    assert_eq!(fp32["precision"], "bf16");
    assert_eq!(fp32["grad_reduce"], "fp32", "DDP's numerics by default");
    // The flat buffer reduced holds every parameter plus the gaps that start
    // each one on a 128-element boundary (under 5 % here).
    let padded = |v: &serde_json::Value, elem: u64| {
        let bytes = v["all_reduce_bytes_per_step"].as_u64().unwrap();
        assert_eq!(bytes % elem, 0, "{v}");
        let n = bytes / elem;
        assert!(
            n >= params && n * 100 <= params * 105,
            "{n} elements for {params} parameters"
        );
        n
    };
    let n32 = padded(&fp32, 4);
    assert_eq!(bf16["grad_reduce"], "bf16");
    assert_eq!(
        padded(&bf16, 2),
        n32,
        "bf16 halves the bytes of the same buffer"
    );
    for v in [&fp32, &bf16] {
        assert!(v["last_loss"].as_f64().unwrap().is_finite(), "{v}");
    }
    // Training with the fp32 reduction keeps the ranks bit-identical.
    train_with(dir.path(), "bf16", Some(2), 2, 2, &["--precision", "bf16"]);
    let hashes = dir.path().join("bf16-hashes");
    let h0 = std::fs::read_to_string(hashes.join("rank-0.txt")).unwrap();
    let h1 = std::fs::read_to_string(hashes.join("rank-1.txt")).unwrap();
    assert_eq!(h0.lines().count(), 2 + 2 * 2, "{h0}");
    assert_eq!(h0, h1, "ranks hold different parameters or gradients");
    let bad = run(&mut cmd(&[
        "train-demo",
        "--grad-reduce",
        "fp8",
        "--steps",
        "1",
    ]));
    assert_eq!(bad.status.code(), Some(2), "{}", texts(&bad).1);
    assert!(texts(&bad).1.contains("fp8"), "{}", texts(&bad).1);
}

#[test]
fn cpu_scaling_benchmark_over_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("scaling.png");
    let v = small_bench(
        dir.path(),
        Some(2),
        "3",
        &["--scaling", "--plot", chart.to_str().unwrap()],
    );
    assert_eq!(v["kind"], "imgctl.train_scaling");
    // The chart: img/s and efficiency panels against the rank count.
    let png = image::open(&chart).expect("the --plot chart").to_rgb8();
    assert_eq!((png.width(), png.height()), (960, 34 + 2 * 250));
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!(rows[0]["ranks"], 1);
    assert_eq!(rows[1]["ranks"], 2);
    assert!((rows[0]["efficiency"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    assert!(rows[1]["efficiency"].as_f64().unwrap() > 0.0);
    let two = &v["runs"][1];
    assert_eq!(two["backend"], "cpu");
    assert_eq!(two["global_batch"], 4);
    assert!(
        two["breakdown_ms"]["all_reduce"].as_f64().unwrap() > 0.0,
        "{two}"
    );
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
fn compare_runs_the_pytorch_reference_on_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cmp");
    let v = json(&compare(
        dir.path(),
        "3",
        &["--precision", "bf16", "--out", out.to_str().unwrap()],
        &[],
    ));
    assert_eq!(v["kind"], "imgctl.train_compare");
    // The bar chart lands in --out by default.
    assert!(
        image::open(out.join("compare.png")).is_ok(),
        "no OUT/compare.png"
    );
    let eager = &v["pytorch"][0];
    assert_eq!(eager["mode"], "eager");
    assert_eq!(eager["ok"], true, "{eager}");
    assert_eq!(eager["params"], v["imgctl"]["params"], "same architecture");
    // torch's own choice of AdamW implementation is named (a loop on the
    // CPU), and diffusers' recipe: autocast over fp32 weights.
    assert_eq!(eager["optimizer"], "AdamW for-loop", "{eager}");
    assert_eq!(eager["recipe"], "autocast bf16, fp32 weights", "{eager}");
    assert!(v["ratio_vs_eager"].as_f64().unwrap() > 0.0);
    assert!(eager["last_loss"].as_f64().unwrap().is_finite());
    // The same framework with imgctl's recipe: fused AdamW, bf16 weights
    // over fp32 master weights.
    let matched = &v["pytorch"][1];
    assert_eq!(matched["mode"], "eager_matched", "{v}");
    assert_eq!(matched["ok"], true, "{matched}");
    assert_eq!(matched["optimizer"], "AdamW fused", "{matched}");
    assert_eq!(
        matched["recipe"], "bf16 weights over fp32 master weights",
        "{matched}"
    );
    assert!(matched["last_loss"].as_f64().unwrap().is_finite());
    assert!(v["ratio_vs_matched"].as_f64().unwrap() > 0.0);
    // Each reference's wall time, as imgctl measured it.
    for r in [eager, matched] {
        assert!(r["wall_s"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn compare_fails_when_the_reference_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let py = dir.path().join("python");
    // A Python without torch (the system python3 without its site-packages)
    // is refused before imgctl's half runs (#29 item 3.4), naming the
    // interpreter, what it lacks and IMGCTL_PYTHON.
    std::fs::write(&py, "#!/bin/sh\nexec python3 -S \"$@\"\n").unwrap();
    let mut perm = std::fs::metadata(&py).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&py, perm).unwrap();
    let started = std::time::Instant::now();
    let o = compare(
        dir.path(),
        "1",
        &[],
        &[("IMGCTL_PYTHON", py.to_str().unwrap())],
    );
    let (out, err) = texts(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let line = crate::common::one_error_line(&err);
    assert!(
        line.contains(&format!(
            "`{}` cannot import torch, diffusers: ModuleNotFoundError",
            py.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("hint: point IMGCTL_PYTHON at a Python with torch and diffusers"),
        "{err}"
    );
    assert!(
        out.is_empty() && !err.contains("img/s"),
        "imgctl's half ran:\n{err}"
    );
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
    // One that imports fine, then crashes without a result: its last words,
    // after imgctl's own figures.
    std::fs::write(
        &py,
        "#!/bin/sh\ncase \"$1\" in -c) exit 0;; esac\necho 'Segmentation fault' >&2\nexit 139\n",
    )
    .unwrap();
    let o = compare(
        dir.path(),
        "1",
        &[],
        &[("IMGCTL_PYTHON", py.to_str().unwrap())],
    );
    let (out, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: the PyTorch reference did not run"),
        "{err}"
    );
    assert!(
        err.contains("printed no result (exit status: 139): Segmentation fault"),
        "{err}"
    );
    assert!(
        err.contains("hint: imgctl's own figures are above"),
        "{err}"
    );
    // imgctl's own figures are still there (table on stderr, JSON on stdout).
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(v["imgctl"]["img_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["pytorch"][0]["ok"], false, "{v}");
}

/// `--channels-last` and `--gradient-checkpointing` both reach the
/// reference (so `--compare` stays like for like), and channels-last trains
/// alike.
#[test]
fn channels_last_trains_alike_and_reaches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let v = json(&compare(
        dir.path(),
        "2",
        &["--channels-last", "--gradient-checkpointing"],
        &[],
    ));
    assert_eq!(v["imgctl"]["channels_last"], true, "{v}");
    assert_eq!(v["imgctl"]["gradient_checkpointing"], true, "{v}");
    assert_eq!(v["imgctl"]["cudnn_benchmark"], false, "not on the CPU");
    let eager = &v["pytorch"][0];
    assert_eq!(eager["ok"], true, "{eager}");
    assert_eq!(
        eager["channels_last"], true,
        "the flag reaches the reference"
    );
    assert_eq!(
        eager["gradient_checkpointing"], true,
        "the flag reaches the reference"
    );
    // The same run with and without channels-last: the same losses (the
    // layout changes the kernels' summation order, not the maths).
    let losses = |name: &str, extra: &[&str]| -> Vec<f64> {
        let out = train_with(dir.path(), name, None, 2, 4, extra);
        std::fs::read_to_string(out.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"]
                    .as_f64()
                    .unwrap()
            })
            .collect()
    };
    let (a, b) = (losses("nchw", &[]), losses("nhwc", &["--channels-last"]));
    assert_eq!(a.len(), 4);
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-4 * x.abs(), "{a:?} vs {b:?}");
    }
}

#[test]
fn a_reference_run_past_its_deadline_is_reported_not_ok() {
    let dir = tempfile::tempdir().unwrap();
    // Importing torch alone takes longer than 0.3 s. imgctl's figures are
    // still printed, but without its reference the comparison fails (exit 1).
    let o = compare(dir.path(), "2", &[], &[("IMGCTL_REFERENCE_TIMEOUT", "0.3")]);
    let (out, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: the PyTorch reference did not run, so there is no comparison: "),
        "{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let eager = &v["pytorch"][0];
    assert_eq!(eager["mode"], "eager");
    assert_eq!(eager["ok"], false, "{eager}");
    let why = eager["error"].as_str().unwrap();
    assert!(
        why.contains("stopped after") && why.contains("IMGCTL_REFERENCE_TIMEOUT"),
        "{why}"
    );
    // Its wall time up to the kill is reported, and without a terminal
    // each reference gets a start line and an end line with that time.
    let wall = eager["wall_s"].as_f64().unwrap();
    assert!(wall >= 0.3, "{eager}");
    assert!(
        err.contains("running the PyTorch reference (eager, with ")
            && err.contains("PyTorch reference (eager, with ")
            && err.contains(&format!("): did not run after {wall:.1} s")),
        "{err}"
    );
    assert!(
        v["ratio_vs_eager"].is_null(),
        "no ratio without a reference: {v}"
    );
    assert!(v["imgctl"]["img_per_s"].as_f64().unwrap() > 0.0);
    let bad = compare(
        dir.path(),
        "2",
        &[],
        &[("IMGCTL_REFERENCE_TIMEOUT", "soon")],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", texts(&bad).1);
    assert!(
        texts(&bad).1.contains("IMGCTL_REFERENCE_TIMEOUT"),
        "{}",
        texts(&bad).1
    );
}

/// The `imgctl train-demo …` command lines of the examples parse with imgctl's own CLI.
#[test]
fn the_launcher_examples_run_valid_imgctl_commands() {
    use clap::Parser;
    let root = crate::common::repo_root();
    let manifest = std::fs::read_to_string(root.join("examples/k8s-pytorchjob.yaml")).unwrap();
    let mut pods = 0;
    for doc in serde_yaml::Deserializer::from_str(&manifest) {
        let v = serde_yaml::Value::deserialize(doc).unwrap();
        if v["kind"] != "PyTorchJob" {
            continue;
        }
        for role in ["Master", "Worker"] {
            let spec = &v["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"];
            let c = &spec["containers"][0];
            assert_eq!(c["name"], "pytorch", "{role}: the operator needs this name");
            assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], 1, "{role}");
            // Kubernetes' restricted profile, with a read-only root file system
            // and writable /tmp and HOME (what the image's user writes).
            assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{role}");
            assert_eq!(spec["securityContext"]["runAsUser"], 1000, "{role}");
            let sec = &c["securityContext"];
            assert_eq!(sec["allowPrivilegeEscalation"], false, "{role}");
            assert_eq!(sec["readOnlyRootFilesystem"], true, "{role}");
            assert_eq!(sec["capabilities"]["drop"][0], "ALL", "{role}");
            let mounts: Vec<&str> = c["volumeMounts"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|m| m["mountPath"].as_str().unwrap())
                .collect();
            for path in ["/tmp", "/home/dev", "/out"] {
                assert!(mounts.contains(&path), "{role}: {path} is not mounted");
            }
            let args: Vec<String> = c["args"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            assert_eq!(&args[..2], ["imgctl", "train-demo"], "{role}");
            imgctl::cli::Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{role}: {e}"));
            pods += 1;
        }
    }
    assert_eq!(pods, 2);
    // The SLURM script: join the continuation lines of the srun command.
    let script = std::fs::read_to_string(root.join("examples/slurm-two-node.sbatch")).unwrap();
    let joined = script.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.trim_start().starts_with("srun ") && l.contains("imgctl train-demo"))
        .expect("an srun … imgctl train-demo line");
    // The training flags are the script's default `train_args=(…)`, and in
    // the container the output directory is /out.
    let defaults = script
        .lines()
        .find_map(|l| l.strip_prefix("train_args=("))
        .and_then(|l| l.strip_suffix(')'))
        .expect("a train_args=(…) line");
    let line = line
        .replace("\"${train_args[@]}\"", defaults)
        .replace("\"$out\"", "/out");
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "imgctl").unwrap();
    imgctl::cli::Cli::try_parse_from(&words[at..]).unwrap_or_else(|e| panic!("sbatch: {e}"));
    assert!(script.contains("#SBATCH --nodes=2"));
    // All GPUs of a node visible to its tasks (NCCL's P2P needs them), the
    // rank's own picked from SLURM_LOCALID; a pyxis image URI (`registry#image`).
    assert!(script.contains("#SBATCH --gpus-per-node=8"));
    assert!(!script.contains("#SBATCH --gpus-per-task"));
    assert!(script.contains("IMAGE='registry.example.com#imgctl:cu124'"));
    assert!(!script.contains("SLURM_LAUNCH_NODE_IPADDR"));
    // Both restart: the first start begins the run, a restart continues it.
    assert!(line.contains("--resume auto"), "{line}");
    assert_eq!(manifest.matches("\"--resume\", \"auto\"").count(), 2);
}

/// Without a GPU the NCCL path fails with a clear error (selecting the rank's
/// device fails first, naming CUDA's reason), not a hang, a crash, or a
/// communicator silently bound to another device.
#[test]
fn nccl_without_a_gpu_fails_cleanly() {
    use imgctl::sys::nccl::NcclLibrary;
    use imgctl::world::collective::nccl::NcclCollective;
    if tch::Cuda::device_count() > 0 {
        // On a GPU machine the same call succeeds; this test is about CPU machines.
        return;
    }
    let lib = std::sync::Arc::new(NcclLibrary::locate().unwrap());
    // The unique id needs no GPU (NCCL's bootstrap is host networking).
    let id = lib.unique_id().unwrap();
    assert!(id.iter().any(|&b| b != 0));
    let e = NcclCollective::init(
        lib,
        &id,
        0,
        1,
        tch::Device::Cuda(0),
        Duration::from_secs(30),
        Duration::from_secs(30),
    )
    .unwrap_err();
    assert!(e.to_string().contains("cudaSetDevice(0) failed"), "{e:#}");
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

/// One CPU rank says "1 rank", and, as its backend is the single one (no
/// collective runs), reports no all-reduce. One NCCL rank (`--gpus 1`) runs
/// the real all-reduce and reports it (`grad_sync`): found missing on the
/// H200, where a one-rank NCCL summary had `grad_sync: null`; that path needs
/// a GPU (the device check's `nccl_world1` stage).
#[test]
fn one_cpu_rank_says_one_rank_and_reports_no_all_reduce() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_config(dir.path());
    let out = dir.path().join("one");
    let o = cmd(&[
        "train-demo",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        "2",
        "--sample-every",
        "0",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ])
    .env("IMGCTL_CPU_RANKS", "1")
    .output()
    .unwrap();
    let (stdout, stderr) = texts(&o);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("data parallel: 1 rank, single backend"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("--json summary");
    assert!(v["grad_sync"].is_null(), "{stdout}");
}
