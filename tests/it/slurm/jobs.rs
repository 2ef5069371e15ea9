//! The SLURM example job script under sbatch: it trains on both nodes, and a
//! requeued job resumes from its last checkpoint.
use super::*;

/// `TRAIN_ARGS` for the example script: the tests' tiny CPU run.
fn example_train_args(dir: &Path, steps: u64, checkpoint_every: u64) -> String {
    let cfg = crate::multinode::node_config(dir);
    format!(
        "--config {} --device cpu --batch-size 2 --steps {steps} --checkpoint-every {checkpoint_every} \
         --sample-every 0 --seed 7",
        cfg.display()
    )
}

/// `sbatch` of `examples/slurm-two-node.sbatch` itself from `dir` (the node
/// shape the file asks for, 8 GPUs and 8 CPUs a task, overridden on the
/// command line for this CPU cluster; no container: `IMAGE=`); its job id.
fn submit_example(
    cluster: &Cluster,
    dir: &Path,
    sbatch_args: &[&str],
    envs: &[(&str, &str)],
) -> String {
    let bin = imgctl_bin();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = cluster.in_node(0, "sbatch");
    c.current_dir(dir)
        .args([
            "--parsable",
            "--ntasks-per-node=1",
            "--cpus-per-task=1",
            "--gpus-per-node=0",
        ])
        .args(sbatch_args)
        .arg(repo_root().join("examples/slurm-two-node.sbatch"))
        .env("IMAGE", "")
        .env("PATH", path);
    for (k, v) in envs {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "sbatch: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        cluster.logs()
    );
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    id.split(';').next().unwrap().to_string()
}

/// The example's log (`#SBATCH --output=imgctl-ddp-%j.log`, in the
/// submission directory).
fn example_log(dir: &Path, id: &str) -> String {
    std::fs::read_to_string(dir.join(format!("imgctl-ddp-{id}.log"))).unwrap_or_default()
}

/// The example a user copies, submitted with sbatch: the job completes,
/// its line names both nodes and the rendezvous at the first node on the
/// job's own port, and it trains the weights of two ranks on one host.
#[test]
fn sbatch_of_the_two_node_example_trains_on_both_nodes() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hashes = dir.path().join("hashes");
    std::fs::create_dir_all(&hashes).unwrap();
    let steps = 3;
    let out = dir.path().join("run");
    let started = Instant::now();
    let id = submit_example(
        &cluster,
        dir.path(),
        &[],
        &[
            ("OUT", out.to_str().unwrap()),
            ("TRAIN_ARGS", &example_train_args(dir.path(), steps, steps)),
            ("IMGCTL_PARAM_HASH_DIR", hashes.to_str().unwrap()),
        ],
    );
    let state = cluster.wait_for_job(&id, PATIENCE);
    let log = example_log(dir.path(), &id);
    assert_eq!(state, "COMPLETED", "{log}\n{}", cluster.logs());
    eprintln!(
        "sbatch example: job {id} ended in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let port = 29500 + id.parse::<u64>().unwrap() % 1000;
    assert!(
        log.contains(&format!(
            "imgctl DDP: 2 ranks on 2 nodes, rendezvous at sn1:{port}, out {}",
            out.display()
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "data parallel: 2 ranks, cpu backend, rendezvous at sn1:{port}"
        )),
        "{log}"
    );
    assert_eq!(cluster.job_field(&id, "NodeList"), "sn[1-2]");
    crate::parallel::assert_ranks_agree(&hashes, steps as usize, &log);
    crate::multinode::assert_same_as_two_ranks_on_one_host(dir.path(), &out, &hashes, steps);
}

/// The example submitted with `--requeue` and requeued by `scontrol requeue`
/// once a checkpoint is written: SLURM stops both ranks (SIGTERM; rank 0
/// saves the step it finishes), starts the batch script again, and
/// `--resume auto` continues from the last checkpoint to the weights of an
/// uninterrupted run.
#[test]
fn a_requeued_example_job_resumes_from_the_last_checkpoint() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let steps = 16;
    let out = dir.path().join("run");
    let id = submit_example(
        &cluster,
        dir.path(),
        &["--requeue", "--open-mode=append"],
        &[
            ("OUT", out.to_str().unwrap()),
            ("TRAIN_ARGS", &example_train_args(dir.path(), steps, 2)),
        ],
    );
    let deadline = Instant::now() + PATIENCE;
    while crate::multinode::checkpoints(&out).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no checkpoint:\n{}\n{}",
            example_log(dir.path(), &id),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    cluster.client("scontrol", &["requeue", &id]);
    // A requeued job may start again 120 s later (BeginTime); the admin's
    // way to let it start now.
    let deadline = Instant::now() + PATIENCE;
    while cluster.job_field(&id, "JobState") != "PENDING" {
        assert!(
            Instant::now() < deadline,
            "{}",
            example_log(dir.path(), &id)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let saved = crate::multinode::checkpoints(&out);
    let last = saved.last().cloned().unwrap();
    let last_step: u64 = last["step-".len()..].parse().unwrap();
    assert!(
        last_step < steps,
        "the requeue came too late (checkpoints {saved:?})"
    );
    cluster.client(
        "scontrol",
        &["update", &format!("jobid={id}"), "StartTime=now"],
    );
    let state = cluster.wait_for_job(&id, PATIENCE);
    let log = example_log(dir.path(), &id);
    assert_eq!(state, "COMPLETED", "{log}\n{}", cluster.logs());
    assert_eq!(cluster.job_field(&id, "Restarts"), "1", "{log}");
    assert!(log.contains("DUE TO JOB REQUEUE"), "{log}");
    // SLURM signalled both tasks; task 0 alone says what the signal does.
    assert_eq!(
        log.matches("interrupt: finishing step ").count(),
        1,
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "resuming from {} (step {last_step})",
            out.join("checkpoints").join(&last).display()
        )),
        "not resumed from {last}:\n{log}"
    );
    let whole = crate::parallel::train(dir.path(), "whole", Some(2), 2, steps);
    assert!(
        crate::parallel::tensors(&crate::parallel::final_model(&out, steps))
            == crate::parallel::tensors(&crate::parallel::final_model(&whole, steps)),
        "the requeued run's weights differ from an uninterrupted run's:\n{log}"
    );
    eprintln!("requeued job {id}, resumed from step {last_step}:\n{log}");
}

/// Waits until `pred` holds for the example's log (polled); how long after
/// `since` that was. Fails the test past [`PATIENCE`].
fn wait_for_log(
    cluster: &Cluster,
    dir: &Path,
    id: &str,
    since: Instant,
    pred: impl Fn(&str) -> bool,
) -> Duration {
    let start = Instant::now();
    while !pred(&example_log(dir, id)) {
        assert!(
            start.elapsed() < PATIENCE,
            "not in the log:\n{}\n{}",
            example_log(dir, id),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    since.elapsed()
}

/// The example job whose rank 1 is SIGSTOPped on node B once a checkpoint
/// is written (a hung process, its sockets open; the default 30-minute
/// collective timeout): rank 0's heartbeat names it, srun
/// `--kill-on-bad-exit` ends the step (slurmstepd's SIGKILL reaches the
/// stopped task), and the script's retry runs the next step in the same
/// allocation, which resumes from the last checkpoint and completes the
/// job: one allocation, no requeue, COMPLETED with exit 0.
#[test]
fn a_stopped_rank_fails_the_step_and_the_next_step_resumes() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let steps = 40;
    let out = dir.path().join("run");
    let id = submit_example(
        &cluster,
        dir.path(),
        &["--requeue", "--open-mode=append"],
        &[
            ("OUT", out.to_str().unwrap()),
            ("TRAIN_ARGS", &example_train_args(dir.path(), steps, 4)),
        ],
    );
    // Written checkpoints (`step-000004`; not one being written).
    let saved = || -> Vec<u64> {
        crate::multinode::checkpoints(&out)
            .iter()
            .filter_map(|c| c["step-".len()..].parse().ok())
            .collect()
    };
    let deadline = Instant::now() + PATIENCE;
    while saved().is_empty() {
        assert!(
            Instant::now() < deadline,
            "no checkpoint:\n{}\n{}",
            example_log(dir.path(), &id),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let worker = crate::elastic::worker_in(&cluster.nodes().names[1]).expect("rank 1 on node B");
    // SAFETY: SIGSTOP to the imgctl task of the job this test submitted.
    unsafe {
        libc::kill(worker, libc::SIGSTOP);
    }
    let stopped = Instant::now();
    let first_saved = saved()[0];
    let b = cluster.nodes().addr(1);
    let w = |pred: &dyn Fn(&str) -> bool| wait_for_log(&cluster, dir.path(), &id, stopped, pred);
    let lost = format!("error: rank 0: no heartbeat from rank 1 on {b} for ");
    let named = w(&|log| log.contains(&lost));
    let retried = w(&|log| {
        log.lines().any(|l| {
            l.starts_with("imgctl DDP: the step failed (exit ")
                && l.ends_with("; step retry 1 of 2 from the last checkpoint")
        })
    });
    w(&|log| log.contains("\nresuming from "));
    let log = example_log(dir.path(), &id);
    let line = log
        .lines()
        .find(|l| l.starts_with("resuming from "))
        .unwrap();
    let resumed: u64 = line
        .rsplit("(step ")
        .next()
        .unwrap()
        .trim_end_matches(')')
        .parse()
        .unwrap();
    // The first step after the resume (the first step may have logged it too).
    let first = format!("step {}/", resumed + 1);
    let training = w(&|log| {
        log.split_once("\nresuming from ")
            .is_some_and(|(_, after)| after.lines().any(|l| l.starts_with(&first)))
    });
    let state = cluster.wait_for_job(&id, PATIENCE);
    let log = example_log(dir.path(), &id);
    assert_eq!(state, "COMPLETED", "{log}\n{}", cluster.logs());
    assert_eq!(cluster.job_field(&id, "ExitCode"), "0:0", "{log}");
    assert_eq!(cluster.job_field(&id, "Restarts"), "0", "{log}");
    // The step resumed from a checkpoint written before the stop, or one
    // rank 0 wrote after it.
    assert!(
        resumed >= first_saved && resumed < steps,
        "resumed from step {resumed} (step {first_saved} saved at the stop):\n{log}"
    );
    assert!(
        log.contains(&format!(
            "resuming from {} (step {resumed})",
            out.join("checkpoints")
                .join(format!("step-{resumed:06}"))
                .display()
        )),
        "{log}"
    );
    assert_eq!(log.matches("step retry ").count(), 1, "{log}");
    assert_eq!(saved().last(), Some(&steps), "{log}");
    assert!(
        named <= Duration::from_secs(12),
        "named after {named:?}:\n{log}"
    );
    eprintln!(
        "a stopped rank under sbatch: named {named:?} after the stop, the step's retry {:?}, \
         training again (step {}) {training:?} (resumed step {resumed})",
        retried,
        resumed + 1
    );
}
