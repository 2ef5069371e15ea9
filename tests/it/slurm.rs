//! imgctl under a real SLURM cluster: Debian's `slurmctld`, `slurmd` and
//! `munged` (slurm-wlm 22.05, munge 0.5), started by the [`Cluster`] fixture
//! with a generated `slurm.conf`. Each of the two nodes is a network
//! namespace of [`Nodes`] (one `slurmd` each, `slurmctld` on node A, one
//! `munged` on the host serving both through its socket file), and every
//! process of a node runs in a private mount namespace whose `/etc/hosts`
//! names the nodes (`sn1`, `sn2`), so that imgctl finds rank 0's host from
//! `SLURM_STEP_NODELIST` as on a real cluster. Jobs are submitted with the
//! real `srun`, `sbatch`, `scancel` and `scontrol`.
//!
//! Needs root and the packages (scripts/setup.sh installs them); without
//! them every test prints `SKIPPED: …` and returns. Dropping the fixture
//! cancels every job, kills every daemon (and waits for it), every process
//! of both nodes, deletes the namespaces and the state directory, also when
//! a test panics.
#![cfg(feature = "torch")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{imgctl_bin, repo_root};
use crate::multinode::{kill_everything_in, Nodes, Proc, LAUNCH_VARS, PATIENCE};

mod history;
mod jobs;
mod scale;

/// The programs the fixture runs; a missing one skips the tests.
const PROGRAMS: [&str; 11] = [
    "munged",
    "slurmctld",
    "slurmd",
    "srun",
    "sbatch",
    "scontrol",
    "scancel",
    "sinfo",
    "squeue",
    "nsenter",
    "unshare",
];

/// Nodes of the usual cluster (`sn1`, `sn2`; node `i` is `sn{i+1}`).
const NODES: usize = 2;

/// Nodes under one leaf switch of a cluster with a topology ([`Cluster::start_with`]).
const SWITCH_NODES: usize = 8;

/// How long a node stays unanswered before slurmctld sets it DOWN and ends
/// its jobs (`SlurmdTimeout`); short, so a test of a lost node ends soon.
const SLURMD_TIMEOUT_S: u64 = 10;

/// A two-node SLURM cluster; dropping it stops everything it started.
pub(crate) struct Cluster {
    nodes: Nodes,
    /// The node names (`sn1`, …).
    names: Vec<String>,
    /// Whether `slurm.conf` has a tree topology (leaf switches of
    /// [`SWITCH_NODES`] nodes under one spine).
    topology: bool,
    dir: tempfile::TempDir,
    /// `slurm.conf`, exported to every client as `SLURM_CONF`.
    conf: PathBuf,
    /// The nodes' `/etc/hosts`.
    hosts: PathBuf,
    /// slurmctld and the slurmds (stopped first), then munged.
    daemons: Vec<(String, Child)>,
}

/// `program`'s path, searched in PATH and the sbin directories.
fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs: Vec<&str> = path.split(':').chain(["/usr/sbin", "/sbin"]).collect();
    dirs.iter()
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

impl Cluster {
    /// Starts the cluster and waits until both nodes are idle, or says why
    /// it cannot run here (the test then skips).
    pub(crate) fn start() -> Result<Self, String> {
        Self::start_with(NODES, false)
    }

    /// `count` nodes on one bridge ([`Nodes::star`]); with `topology`,
    /// SLURM's tree plugin puts each [`SWITCH_NODES`] under a leaf switch
    /// (`s1`, `s2`, …) under the spine `top`, so every task gets its
    /// `SLURM_TOPOLOGY_ADDR` (`top.s2.sn9`).
    pub(crate) fn start_with(count: usize, topology: bool) -> Result<Self, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("SLURM's daemons and network namespaces need root".into());
        }
        if let Some(p) = PROGRAMS.iter().find(|p| which(p).is_none()) {
            return Err(format!(
                "`{p}` is not installed (scripts/setup.sh installs slurmctld, slurmd, slurm-client and munge)"
            ));
        }
        let nodes = if count == 2 {
            Nodes::new()?
        } else {
            Nodes::star(count)?
        };
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut cluster = Self {
            names: (1..=count).map(|i| format!("sn{i}")).collect(),
            topology,
            conf: dir.path().join("slurm.conf"),
            hosts: dir.path().join("hosts"),
            nodes,
            dir,
            daemons: Vec::new(),
        };
        cluster.start_munged();
        cluster.write_config();
        let d = cluster.dir.path().to_path_buf();
        let conf = cluster.conf.to_str().unwrap().to_string();
        let mut ctl = cluster.in_node(0, "slurmctld");
        ctl.args(["-D", "-i", "-f", &conf]);
        cluster.spawn_daemon("slurmctld", ctl, &d.join("slurmctld.out"));
        for (i, name) in cluster.names.clone().iter().enumerate() {
            let mut c = cluster.in_node(i, "slurmd");
            c.args(["-D", "-N", name, "-f", &conf]);
            cluster.spawn_daemon(
                &format!("slurmd {name}"),
                c,
                &d.join(format!("slurmd-{name}.out")),
            );
        }
        cluster.wait_until_idle();
        Ok(cluster)
    }

    /// munged with a fresh key and its own socket, log, pid and seed files.
    fn start_munged(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let d = self.dir.path().to_path_buf();
        // munged wants its key private and every directory above its socket
        // searchable by all (tempdir makes 0700).
        let m = d.join("munge");
        std::fs::create_dir(&m).unwrap();
        for p in [&d, &m] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o711)).unwrap();
        }
        let mut key = vec![0u8; 1024];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut key)
            .unwrap();
        std::fs::write(m.join("key"), &key).unwrap();
        std::fs::set_permissions(m.join("key"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut c = Command::new(which("munged").unwrap());
        c.arg("-F")
            .arg(format!("--socket={}", m.join("socket").display()));
        for (flag, file) in [
            ("key-file", "key"),
            ("pid-file", "pid"),
            ("log-file", "log"),
            ("seed-file", "seed"),
        ] {
            c.arg(format!("--{flag}={}", m.join(file).display()));
        }
        self.spawn_daemon("munged", c, &m.join("out"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !m.join("socket").exists() {
            assert!(
                Instant::now() < deadline,
                "munged made no socket:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `slurm.conf` (its own ports, state, spool, logs and munge socket) and
    /// the nodes' hosts file.
    fn write_config(&self) {
        let d = self.dir.path();
        for n in &self.names {
            std::fs::create_dir_all(d.join(format!("spool-{n}"))).unwrap();
        }
        std::fs::create_dir_all(d.join("state")).unwrap();
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let hostname = hostname.trim();
        let mut hosts = "127.0.0.1 localhost\n".to_string();
        let mut node_lines = String::new();
        for (i, n) in self.names.iter().enumerate() {
            hosts += &format!("{} {n}\n", self.nodes.addr(i));
            node_lines += &format!(
                "NodeName={n} NodeAddr={} CPUs=2 State=UNKNOWN\n",
                self.nodes.addr(i)
            );
        }
        std::fs::write(&self.hosts, hosts).unwrap();
        let topology = if self.topology {
            let mut t = String::new();
            let leaves = self.names.len().div_ceil(SWITCH_NODES);
            for (i, chunk) in self.names.chunks(SWITCH_NODES).enumerate() {
                t += &format!("SwitchName=s{} Nodes={}\n", i + 1, chunk.join(","));
            }
            t += &format!("SwitchName=top Switches=s[1-{leaves}]\n");
            std::fs::write(d.join("topology.conf"), t).unwrap();
            "TopologyPlugin=topology/tree\n".to_string()
        } else {
            String::new()
        };
        let d = d.display();
        // slurmctld only runs on a host named in SlurmctldHost: this one,
        // at node A's address. No cgroups (task/none, proctrack/linuxproc),
        // no accounting database.
        let conf = format!(
            "ClusterName=imgctl\n\
             SlurmctldHost={hostname}({addr})\n\
             SlurmctldPort=6817\nSlurmdPort=6818\n\
             AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={d}/munge/socket\n\
             SlurmUser=root\nSlurmdUser=root\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool-%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd-%n.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\nMpiDefault=none\nSwitchType=switch/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
             SchedulerType=sched/builtin\nReturnToService=2\n\
             SlurmctldTimeout=30\nSlurmdTimeout={SLURMD_TIMEOUT_S}\nInactiveLimit=0\n\
             KillWait=5\nMinJobAge=600\n\
             {topology}{node_lines}\
             PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
            addr = self.nodes.addr(0),
        );
        std::fs::write(&self.conf, conf).unwrap();
    }

    /// Starts a daemon in the foreground, its output in `log`.
    fn spawn_daemon(&mut self, what: &str, mut c: Command, log: &Path) {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(log).unwrap();
        let child = c
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        // munged last: the slurm daemons use it until they are stopped.
        if what == "munged" {
            self.daemons.push((what.into(), child));
        } else {
            self.daemons.insert(0, (what.into(), child));
        }
    }

    /// `program` on node `i`: in its network namespace, in a private mount
    /// namespace with the nodes' `/etc/hosts`, with `SLURM_CONF` set and no
    /// launcher variable of the test's own environment.
    pub(crate) fn in_node(&self, i: usize, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net=/run/netns/{}", self.nodes.names[i]))
            .args(["unshare", "--mount", "--propagation", "private"])
            .args(["sh", "-c", "mount --bind \"$0\" /etc/hosts && exec \"$@\""])
            .arg(&self.hosts)
            .arg(program);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SLURM_") {
                c.env_remove(k);
            }
        }
        for k in LAUNCH_VARS {
            c.env_remove(k);
        }
        c.env("SLURM_CONF", &self.conf)
            .env("NO_COLOR", "1")
            .env("OMP_NUM_THREADS", "1");
        c
    }

    /// A SLURM client command on node A, run to its end; its stdout.
    pub(crate) fn client(&self, program: &str, args: &[&str]) -> String {
        let o = self.in_node(0, program).args(args).output().unwrap();
        assert!(
            o.status.success(),
            "{program} {}: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits until slurmctld reports both nodes idle.
    fn wait_until_idle(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let o = self
                .in_node(0, "sinfo")
                .args(["-h", "-N", "-o", "%N %T"])
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&o.stdout);
            if said.lines().filter(|l| l.ends_with(" idle")).count() == self.names.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the nodes did not become idle ({said}):\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The daemons' logs, for failure messages.
    pub(crate) fn logs(&self) -> String {
        let mut s = String::new();
        for name in [
            "munge/out",
            "slurmctld.log",
            "slurmctld.out",
            "slurmd-sn1.log",
            "slurmd-sn2.log",
        ] {
            let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            s += &format!("--- {name} (last lines)\n");
            for l in tail.iter().rev() {
                s += l;
                s.push('\n');
            }
        }
        s
    }

    /// One field of `scontrol show job -o ID` (`JobState`, `Restarts`, …).
    pub(crate) fn job_field(&self, id: &str, field: &str) -> String {
        let said = self.client("scontrol", &["show", "job", "-o", id]);
        said.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{field}=")))
            .unwrap_or_else(|| panic!("no {field} in {said}"))
            .to_string()
    }

    /// Waits until job `id` ends (any state but PENDING, RUNNING, CONFIGURING,
    /// COMPLETING, REQUEUED); returns that state.
    pub(crate) fn wait_for_job(&self, id: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let state = self.job_field(id, "JobState");
            if ![
                "PENDING",
                "RUNNING",
                "CONFIGURING",
                "COMPLETING",
                "REQUEUED",
            ]
            .contains(&state.as_str())
            {
                return state;
            }
            assert!(
                Instant::now() < deadline,
                "job {id} still {state} after {limit:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The fixture's node namespaces.
    pub(crate) fn nodes(&self) -> &Nodes {
        &self.nodes
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Every job, then every daemon (waited for), then whatever is left
        // on the nodes (job steps, batch scripts); Nodes deletes the
        // namespaces and TempDir the files.
        if let Ok(mut c) = self.in_node(0, "scancel").args(["--user", "root"]).spawn() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for (_, child) in &mut self.daemons {
            // SAFETY: SIGKILL to the process group of a daemon this fixture
            // started (it leads its own group).
            unsafe {
                libc::kill(-(child.id() as i32), libc::SIGKILL);
            }
            let _ = child.wait();
        }
        for ns in &self.nodes.names {
            kill_everything_in(ns);
        }
    }
}

/// The fixture, or `None` after printing why the test skips.
fn cluster_or_skip() -> Option<Cluster> {
    match Cluster::start() {
        Ok(c) => Some(c),
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

/// srun's `--label` prefix (`0: `) taken off a line: the task and the rest.
fn unlabel(line: &str) -> Option<(usize, &str)> {
    let (task, rest) = line.trim_start().split_once(": ")?;
    Some((task.parse().ok()?, rest))
}

/// The `error:` lines task `task` wrote (srun `--label`).
fn task_errors(text: &str, task: usize) -> Vec<String> {
    text.lines()
        .filter_map(unlabel)
        .filter(|(t, l)| *t == task && l.trim_start().starts_with("error: "))
        .map(|(_, l)| l.trim_start().to_string())
        .collect()
}

/// `srun -N 2 --ntasks-per-node 1 --label ARGS…` on node A, as a [`Proc`].
fn srun(
    cluster: &Cluster,
    what: &str,
    srun_args: &[&str],
    args: &[String],
    envs: &[(&str, &str)],
) -> Proc {
    let mut c = cluster.in_node(0, "srun");
    c.args(["-N", "2", "--ntasks-per-node", "1", "--label"])
        .args(srun_args)
        .arg(imgctl_bin())
        .args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    Proc::spawn(what, c)
}

/// `srun -N 2 --ntasks-per-node 1 imgctl train-demo` (SLURM_PROCID, the node
/// list's first host as rank 0's, found by name through the nodes' hosts):
/// the same weights and hash logs as two ranks on one host, and the weights
/// of one process with the double batch.
#[test]
fn srun_on_two_nodes_matches_one_process_with_the_double_batch() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hashes = dir.path().join("hashes");
    std::fs::create_dir_all(&hashes).unwrap();
    let steps = 3;
    let out = dir.path().join("two-nodes");
    let args = crate::multinode::train_args(dir.path(), &out, steps, &[]);
    let h = hashes.to_str().unwrap();
    // Each task runs on its own node: in its own namespace, at its address.
    let said = cluster.client(
        "srun",
        &[
            "-N",
            "2",
            "--ntasks-per-node",
            "1",
            "--label",
            "ip",
            "-4",
            "-o",
            "addr",
            "show",
            "eth0",
        ],
    );
    for i in 0..2 {
        let inet = format!("inet {}/24", cluster.nodes().addr(i));
        assert!(
            said.lines()
                .any(|l| l.starts_with(&format!("{i}: ")) && l.contains(&inet)),
            "task {i} is not on node {i}:\n{said}"
        );
    }
    let started = Instant::now();
    let mut p = srun(
        &cluster,
        "srun train-demo",
        &["--kill-on-bad-exit=1"],
        &args,
        &[("IMGCTL_PARAM_HASH_DIR", h)],
    );
    let status = p.wait();
    let err = p.text();
    assert!(status.success(), "{err}\n{}", cluster.logs());
    eprintln!(
        "srun train-demo on two nodes: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Rank 0 served at sn1 (SLURM_STEP_NODELIST=sn[1-2]), torchrun's port.
    assert!(
        err.contains("0: data parallel: 2 ranks, cpu backend, rendezvous at sn1:29500"),
        "{err}"
    );
    crate::parallel::assert_ranks_agree(&hashes, steps as usize, &err);
    crate::multinode::assert_same_as_two_ranks_on_one_host(dir.path(), &out, &hashes, steps);
    let one = crate::parallel::train(dir.path(), "one-process", None, 4, steps);
    crate::parallel::assert_close(
        &crate::parallel::final_model(&out, steps),
        &crate::parallel::final_model(&one, steps),
        "srun on 2 nodes × batch 2 against 1 process × batch 4",
    );
}

/// `srun` of `imgctl verify` on both nodes: each node runs its own checks
/// and passes without GPUs when none are expected, and fails with one line
/// each when the default (a GPU) is expected.
#[test]
fn srun_of_verify_checks_each_node() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let args = |a: &[&str]| -> Vec<String> { a.iter().map(|s| s.to_string()).collect() };
    let mut p = srun(
        &cluster,
        "srun verify",
        &[],
        &args(&["verify", "--expect-gpus", "0"]),
        &[],
    );
    let status = p.wait();
    let text = p.text();
    assert!(status.success(), "{text}");
    for task in 0..2 {
        assert!(task_errors(&text, task).is_empty(), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("{task}: verify passed: "))),
            "task {task} did not pass:\n{text}"
        );
    }
    let mut p = srun(
        &cluster,
        "srun verify (a GPU expected)",
        &[],
        &args(&["verify"]),
        &[],
    );
    let status = p.wait();
    let text = p.text();
    assert!(!status.success(), "{text}");
    for task in 0..2 {
        assert_eq!(task_errors(&text, task).len(), 1, "task {task}:\n{text}");
    }
}

/// `srun` of `imgctl verify --fleet` on two nodes: rank 0 (on sn1, from the
/// step's node list) gathers both reports into one passing fleet table;
/// rank 1 reports to it and exits with the fleet's verdict.
#[test]
fn srun_of_fleet_verify_reports_both_nodes() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let args: Vec<String> = [
        "verify",
        "--fleet",
        "--expect-gpus",
        "0",
        "--fleet-timeout",
        "60",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = srun(
        &cluster,
        "srun verify --fleet",
        &["--kill-on-bad-exit=0"],
        &args,
        &[],
    );
    let status = p.wait();
    let text = p.text();
    assert!(status.success(), "{text}");
    assert!(
        text.contains("0: fleet verify passed: 2 of 2 nodes reported"),
        "{text}"
    );
    assert!(text.contains("PASS  fleet.software: the same "), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("1: ") && l.contains("reported to rank 0 at sn1:")),
        "{text}"
    );
}

/// `srun train-demo` of a long run on both nodes, started; returns once
/// rank 0 has logged step 2.
fn start_long_run(cluster: &Cluster, dir: &Path, timeout_s: &str) -> Proc {
    let out = dir.join("run");
    let args = crate::multinode::train_args(dir, &out, 100_000, &["--checkpoint-every", "0"]);
    let mut p = srun(
        cluster,
        "srun train-demo",
        &["--kill-on-bad-exit=1"],
        &args,
        &[("IMGCTL_COLLECTIVE_TIMEOUT", timeout_s)],
    );
    p.wait_for_line(|l| l.starts_with("0: step 2/"));
    p
}

/// `scancel` of a running two-node job: SLURM signals every task (SIGTERM),
/// the ranks agree to stop after the same step, rank 0 saves it, and every
/// rank has ended well within the collective timeout, each with one line.
#[test]
fn scancel_mid_run_stops_every_rank_within_the_collective_timeout() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let timeout = Duration::from_secs(20);
    let mut p = start_long_run(&cluster, dir.path(), "20");
    let id = cluster.client("squeue", &["-h", "-o", "%i"]);
    let id = id.trim();
    cluster.client("scancel", &[id]);
    let cancelled = Instant::now();
    let status = p.wait_within(timeout + PATIENCE);
    let took = cancelled.elapsed();
    let text = p.text();
    let status = status.unwrap_or_else(|| panic!("srun did not end:\n{text}"));
    assert!(!status.success(), "{text}");
    assert!(
        took <= timeout,
        "srun ended {took:?} after scancel:\n{text}"
    );
    let errors: Vec<Vec<String>> = (0..2).map(|task| task_errors(&text, task)).collect();
    for (task, e) in errors.iter().enumerate() {
        assert_eq!(e.len(), 1, "task {task}: one error line:\n{text}");
    }
    // Both stopped after the same step, which rank 0 saved.
    let step: u64 = errors[1][0]
        .strip_prefix("error: interrupted at step ")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("task 1: {}", errors[1][0]));
    let saved = dir.path().join(format!("run/checkpoints/step-{step:06}"));
    assert_eq!(
        errors[0][0],
        format!(
            "error: interrupted at step {step}; checkpoint {}",
            saved.display()
        )
    );
    assert!(saved.join("model.safetensors").exists(), "{text}");
    assert_eq!(
        text.matches("interrupt: finishing step ").count(),
        1,
        "{text}"
    );
    eprintln!("scancel → srun (every rank) ended in {took:?}:\n{text}");
}

/// Node B dies mid-run (its slurmd, its job step and rank 1 SIGKILLed): rank
/// 0 on node A stops within the collective timeout with one line naming
/// rank 1 and its host, and srun ends.
#[test]
fn a_killed_slurmd_stops_the_other_rank_naming_the_lost_rank_and_host() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let timeout = Duration::from_secs(20);
    let mut p = start_long_run(&cluster, dir.path(), "20");
    kill_everything_in(&cluster.nodes().names[1]);
    let killed = Instant::now();
    // srun hears from node A's slurmstepd when rank 0 has exited.
    p.wait_for_line(|l| l.contains("sn1: task 0: Exited with exit code 1"));
    let took = killed.elapsed();
    let status = p.wait_within(Duration::from_secs(SLURMD_TIMEOUT_S) * 6);
    let ended = killed.elapsed();
    let text = p.text();
    assert!(
        took <= timeout,
        "rank 0 stopped {took:?} after the kill:\n{text}"
    );
    let errors = task_errors(&text, 0);
    assert_eq!(errors.len(), 1, "rank 0: one error line:\n{text}");
    let lost = format!("rank 1 on {}", cluster.nodes().addr(1));
    assert!(
        errors[0].contains(&lost),
        "not naming {lost}: {}",
        errors[0]
    );
    // srun ends once slurmctld has declared node B down (SlurmdTimeout).
    let status = status.unwrap_or_else(|| panic!("srun did not end:\n{text}\n{}", cluster.logs()));
    assert!(!status.success(), "{text}");
    assert!(text.contains("srun: error: Node failure on sn2"), "{text}");
    let sinfo = cluster.client("sinfo", &["-h", "-N", "-n", "sn2", "-o", "%T"]);
    assert!(sinfo.starts_with("down"), "sn2 is {sinfo}");
    eprintln!(
        "slurmd of sn2 killed: rank 0 exited {took:?} after, srun {ended:?} after: {}",
        errors[0]
    );
}

/// Rank 1 SIGSTOPped mid-run on node B (its slurmd alive, its sockets
/// open), with a 30-minute collective timeout: rank 0's heartbeat names it
/// within 5 s and a step, and srun (`--kill-on-bad-exit`) ends the job.
#[test]
fn a_stopped_rank_is_named_by_the_heartbeat_and_srun_ends() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut p = start_long_run(&cluster, dir.path(), "1800");
    let ns = &cluster.nodes().names[1];
    let o = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    let mut stopped = 0;
    for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "imgctl" {
            // SAFETY: SIGSTOP to the imgctl task of the job this test started.
            unsafe {
                libc::kill(pid.parse().unwrap(), libc::SIGSTOP);
            }
            stopped += 1;
        }
    }
    assert_eq!(stopped, 1, "one imgctl task on node B");
    let at = Instant::now();
    p.wait_for_line(|l| l.contains("sn1: task 0: Exited with exit code 1"));
    let took = at.elapsed();
    let status = p.wait_within(Duration::from_secs(60));
    let text = p.text();
    let errors = task_errors(&text, 0);
    assert_eq!(errors.len(), 1, "rank 0: one error line:\n{text}");
    let said = format!(
        "no heartbeat from rank 1 on {} for ",
        cluster.nodes().addr(1)
    );
    assert!(errors[0].contains(&said), "{}", errors[0]);
    assert!(took <= Duration::from_secs(12), "{took:?}:\n{text}");
    let status = status.unwrap_or_else(|| panic!("srun did not end:\n{text}"));
    assert!(!status.success(), "{text}");
    eprintln!(
        "a stopped rank under srun: rank 0 out {took:?} after the stop: {}",
        errors[0]
    );
}

/// Two tasks on each node (`srun -N 2 --ntasks-per-node 2`: SLURM_LOCALID 0
/// and 1 on each, SLURM_TASKS_PER_NODE `2(x2)`): four ranks whose weights
/// and hash logs are those of four ranks on one host.
#[test]
fn srun_with_two_tasks_per_node_matches_four_ranks_on_one_host() {
    let Some(cluster) = cluster_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let hashes = dir.path().join("hashes");
    std::fs::create_dir_all(&hashes).unwrap();
    let steps = 2;
    let out = dir.path().join("four");
    let args = crate::multinode::train_args(dir.path(), &out, steps, &[]);
    let mut c = cluster.in_node(0, "srun");
    c.args(["-N", "2", "--ntasks-per-node", "2", "--label"])
        .args(["--kill-on-bad-exit=1"])
        .arg(imgctl_bin())
        .args(&args)
        .env("IMGCTL_PARAM_HASH_DIR", &hashes);
    let mut p = Proc::spawn("srun of four tasks", c);
    let status = p.wait();
    let text = p.text();
    assert!(status.success(), "{text}\n{}", cluster.logs());
    assert!(
        text.contains("0: data parallel: 4 ranks, cpu backend, rendezvous at sn1:29500"),
        "{text}"
    );
    let one_host = crate::parallel::train(dir.path(), "one-host", Some(4), 2, steps);
    assert!(
        crate::parallel::tensors(&crate::parallel::final_model(&out, steps))
            == crate::parallel::tensors(&crate::parallel::final_model(&one_host, steps)),
        "four tasks on two nodes and four ranks on one host trained different weights"
    );
    let log =
        |d: &Path, r: usize| std::fs::read_to_string(d.join(format!("rank-{r}.txt"))).unwrap();
    for r in 0..4 {
        assert_eq!(
            log(&hashes, r),
            log(&dir.path().join("one-host-hashes"), r),
            "rank {r}'s hash log"
        );
    }
}
