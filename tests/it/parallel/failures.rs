//! What goes wrong in a data-parallel run and how it is said: bad GPU selections,
//! NCCL missing or without a GPU, dying and failing workers, Ctrl-C, bad timeouts
//! and heartbeat flags.
use super::*;

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

/// `--heartbeat 0`, nonsense or a timeout not past the interval: one line,
/// exit 2, before anything is started (also without a launcher).
#[test]
fn bad_heartbeat_flags_are_one_line_usage_errors() {
    for (args, needle) in [
        (
            &["--heartbeat", "0"][..],
            "--heartbeat 0 is not a number of seconds between 0 and 3600",
        ),
        (
            &["--heartbeat-timeout", "-3"][..],
            "--heartbeat-timeout -3 is not a number of seconds",
        ),
        (
            &["--heartbeat", "2", "--heartbeat-timeout", "1"][..],
            "--heartbeat-timeout 1 is not longer than --heartbeat 2",
        ),
        (
            &["--heartbeat", "soon"][..],
            "invalid value 'soon' for '--heartbeat <SECS>'",
        ),
    ] {
        let mut all = vec!["train-demo", "--preset", "tiny"];
        all.extend(args);
        let o = run(&mut cmd(&all));
        let (_, err) = texts(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        let errors = err.lines().filter(|l| l.starts_with("error: ")).count();
        assert_eq!(errors, 1, "{args:?}: {err}");
    }
}

/// `--gpus` on one host (CPU ranks here, `IMGCTL_CPU_RANKS=2`): worker 1
/// SIGSTOPped mid-run is named by rank 0's heartbeat, and the supervisor
/// stops the job naming rank 0's line (the stopped worker too: SIGCONT
/// beside its SIGTERM), with the default 30-minute collective timeout.
#[test]
fn a_stopped_worker_is_named_by_the_heartbeat_and_the_supervisor_stops_the_job() {
    use crate::multinode::Proc;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut c = cmd(&[
        "train-demo",
        "--preset",
        "tiny",
        "--steps",
        "100000",
        "--checkpoint-every",
        "0",
        "--sample-every",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    c.env("IMGCTL_CPU_RANKS", "2");
    let mut p = Proc::spawn("the supervisor", c);
    // Training has begun (progress lines come every 100 steps).
    p.wait_for_line(|l| l.starts_with("[rank 0] training "));
    std::thread::sleep(std::time::Duration::from_secs(2));
    // Worker 1: the supervisor's child with RANK=1.
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", p.id())).unwrap_or_default();
    let worker = children
        .split_whitespace()
        .find(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            env.split(|&b| b == 0).any(|kv| kv == b"RANK=1")
        })
        .expect("worker 1 among the supervisor's children");
    // SAFETY: SIGSTOP to a worker of the supervisor this test started.
    unsafe {
        libc::kill(worker.parse().unwrap(), libc::SIGSTOP);
    }
    let stopped = std::time::Instant::now();
    let status = p.wait();
    let took = stopped.elapsed();
    let err = p.text();
    assert_eq!(status.code(), Some(1), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].starts_with("error: worker rank 0 of 2 failed: it exited with code 1: rank 0: no heartbeat from rank 1 on 127.0.0.1 for "),
        "{err}"
    );
    // The heartbeat's 5 s and a step; the stopped worker, sent SIGCONT
    // beside its SIGTERM, ends at once (not after the 10 s grace).
    assert!(
        took < std::time::Duration::from_secs(12),
        "{took:?}:\n{err}"
    );
    eprintln!(
        "a stopped worker under --gpus: the job ended {took:?} after: {}",
        errors[0]
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
