//! Multi-node runs and faults across real addresses: each "node" is a network
//! namespace with its own loopback, and the two are joined by a veth pair on
//! a private /24 (10.231.X.1 and 10.231.X.2; no other address, no route to
//! the host). Ranks run inside with `ip netns exec`. A two-node run (torchrun's
//! c10d rendezvous, SLURM variables) matches one process with the same global
//! batch; a node killed or cut off mid-run stops the other within the
//! collective timeout, naming the lost rank; `--resume auto` then continues
//! from the last checkpoint and ends bit-identical to an uninterrupted run.
//!
//! Creating namespaces needs root (CAP_NET_ADMIN) and iproute2; without them
//! every test prints `SKIPPED: …` and returns. Every namespace, and every
//! process in it, is removed when its fixture drops, also when a test panics.
#![cfg(feature = "torch")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::common::imgctl_bin;
use crate::parallel::{assert_close, assert_ranks_agree, final_model, tensors, train};

mod failures;
mod silent;

/// The prefix of every namespace these tests create (`imgctl-mn-PID-N-a`).
const NS_PREFIX: &str = "imgctl-mn-";

/// The small config of `parallel.rs`, with a progress line at every step so
/// a test can see a run under way.
const NODE_CONFIG: &str = "preset: tiny\nmodel:\n  sample_size: 16\ntraining:\n  workers: 1\n  \
                           synthetic_images: 64\n  log_every: 1\n";

/// How long any one wait of these tests may last before it fails (a debug
/// build on a busy 2-core machine takes about 0.8 s per two-rank step).
pub(crate) const PATIENCE: Duration = Duration::from_secs(240);

/// Two network namespaces ("nodes") joined by a veth pair; dropping it kills
/// every process inside and deletes both.
pub(crate) struct Nodes {
    pub(crate) names: Vec<String>,
    /// The third octet of this fixture's 10.231.X.0/24.
    subnet: usize,
    /// Made by [`Nodes::star`]: node A's side is the bridge `br0`.
    star: bool,
}

/// The fixture counter (namespace names and subnets).
static NEXT: AtomicUsize = AtomicUsize::new(0);

impl Nodes {
    /// Two nodes, or why they cannot be made here (the test then skips).
    pub(crate) fn new() -> Result<Self, String> {
        remove_stale_namespaces();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let mut nodes = Self {
            names: Vec::new(),
            subnet: 1 + n % 250,
            star: false,
        };
        nodes.add_namespaces(n, &["a", "b"])?;
        // The pair is made inside the namespaces: the host's own network
        // namespace never sees it.
        let (a, b) = (nodes.names[0].clone(), nodes.names[1].clone());
        nodes.ip(
            &a,
            &[
                "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", &b,
            ],
        );
        for (i, ns) in [a, b].iter().enumerate() {
            let addr = format!("{}/24", nodes.addr(i));
            nodes.ip(ns, &["addr", "add", &addr, "dev", "eth0"]);
            nodes.ip(ns, &["link", "set", "lo", "up"]);
            nodes.ip(ns, &["link", "set", "eth0", "up"]);
        }
        Ok(nodes)
    }

    /// `count` nodes on one link layer: node A holds a bridge `br0` with
    /// its address, and every other node's `eth0` is paired with a port
    /// `pI` of that bridge (so [`Nodes::shape`] can slow one node's link).
    pub(crate) fn star(count: usize) -> Result<Self, String> {
        remove_stale_namespaces();
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let mut nodes = Self {
            names: Vec::new(),
            subnet: 1 + n % 250,
            star: true,
        };
        // `a` … `z`, then `n26`, `n27`, … (a 64-node fleet).
        let sides: Vec<String> = (0..count)
            .map(|i| match u8::try_from(i) {
                Ok(b) if b < 26 => ((b'a' + b) as char).to_string(),
                _ => format!("n{i}"),
            })
            .collect();
        let sides: Vec<&str> = sides.iter().map(String::as_str).collect();
        nodes.add_namespaces(n, &sides)?;
        let hub = nodes.names[0].clone();
        nodes.ip(&hub, &["link", "add", "br0", "type", "bridge"]);
        nodes.ip(
            &hub,
            &[
                "addr",
                "add",
                &format!("{}/24", nodes.addr(0)),
                "dev",
                "br0",
            ],
        );
        nodes.ip(&hub, &["link", "set", "lo", "up"]);
        nodes.ip(&hub, &["link", "set", "br0", "up"]);
        for i in 1..count {
            let ns = nodes.names[i].clone();
            let port = format!("p{i}");
            nodes.ip(
                &hub,
                &[
                    "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &ns,
                ],
            );
            nodes.ip(&hub, &["link", "set", &port, "master", "br0"]);
            nodes.ip(&hub, &["link", "set", &port, "up"]);
            nodes.ip(
                &ns,
                &[
                    "addr",
                    "add",
                    &format!("{}/24", nodes.addr(i)),
                    "dev",
                    "eth0",
                ],
            );
            nodes.ip(&ns, &["link", "set", "lo", "up"]);
            nodes.ip(&ns, &["link", "set", "eth0", "up"]);
        }
        Ok(nodes)
    }

    /// Slows what node A sends to node `i` (a star's port `pI`) to `rate`
    /// (`tc` token bucket, e.g. `100mbit`).
    pub(crate) fn shape(&self, i: usize, rate: &str) {
        assert!(
            self.star && i > 0,
            "only a star's other nodes can be shaped"
        );
        let o = Command::new("tc")
            .args([
                "-n",
                &self.names[0],
                "qdisc",
                "add",
                "dev",
                &format!("p{i}"),
            ])
            .args([
                "root", "tbf", "rate", rate, "burst", "64kb", "latency", "400ms",
            ])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "tc: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Adds one namespace per side (`imgctl-mn-PID-N-SIDE`).
    fn add_namespaces(&mut self, n: usize, sides: &[&str]) -> Result<(), String> {
        for side in sides {
            let name = format!("{NS_PREFIX}{}-{n}-{side}", std::process::id());
            match Command::new("ip").args(["netns", "add", &name]).output() {
                Err(e) => return Err(format!("cannot run `ip` ({e}); install iproute2")),
                Ok(o) if !o.status.success() => {
                    return Err(format!(
                        "`ip netns add` was refused (needs root or CAP_NET_ADMIN): {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    ))
                }
                Ok(_) => self.names.push(name),
            }
        }
        Ok(())
    }

    /// Runs `ip -n NS ARGS…`; a failure panics (the fixture's drop cleans up).
    fn ip(&self, ns: &str, args: &[&str]) {
        let o = Command::new("ip")
            .arg("-n")
            .arg(ns)
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "ip -n {ns} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// The address of node `i` (0 is node A).
    pub(crate) fn addr(&self, i: usize) -> String {
        format!("10.231.{}.{}", self.subnet, i + 1)
    }

    /// `program` to be run on node `i`, with a clean launch environment.
    pub(crate) fn command(&self, i: usize, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[i]])
            .arg(program)
            .env("NO_COLOR", "1")
            .env("OMP_NUM_THREADS", "1");
        for k in LAUNCH_VARS {
            c.env_remove(k);
        }
        c
    }

    /// Cuts node `i` off: its end of the link goes down (no FIN, no RST:
    /// the other side only sees silence).
    pub(crate) fn cut(&self, i: usize) {
        let dev = if self.star && i == 0 { "br0" } else { "eth0" };
        self.ip(&self.names[i], &["link", "set", dev, "down"]);
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for ns in &self.names {
            kill_everything_in(ns);
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

/// SIGKILL to every process in namespace `ns` (a launcher's workers may have
/// left its process group: torchrun starts each in a session of its own).
pub(crate) fn kill_everything_in(ns: &str) {
    let Ok(o) = Command::new("ip").args(["netns", "pids", ns]).output() else {
        return;
    };
    for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
        if let Ok(pid) = pid.parse::<i32>() {
            // SAFETY: SIGKILL to a process inside a namespace this test made.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Deletes the namespaces of earlier test processes that died without
/// cleaning up (their pid is in the name).
fn remove_stale_namespaces() {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(NS_PREFIX)
            .and_then(|r| r.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            kill_everything_in(&name);
            let _ = Command::new("ip").args(["netns", "del", &name]).output();
        }
    }
}

/// Every variable a launcher sets; none may leak in from the test's environment.
pub(crate) const LAUNCH_VARS: [&str; 19] = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "IMGCTL_CPU_RANKS",
    "IMGCTL_COLLECTIVE_TIMEOUT",
    "IMGCTL_PARAM_HASH_DIR",
];

/// The fixture, or `None` after printing why the test skips.
fn nodes_or_skip() -> Option<Nodes> {
    match Nodes::new() {
        Ok(n) => Some(n),
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            None
        }
    }
}

/// A process started on a node: its stderr lines arrive on a channel. On
/// drop it is killed (its process group too) and reaped.
pub(crate) struct Proc {
    what: String,
    child: Child,
    rx: Receiver<String>,
    lines: Vec<String>,
}

impl Proc {
    pub(crate) fn spawn(what: &str, mut c: Command) -> Self {
        use std::os::unix::process::CommandExt;
        let mut child = c
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            what: what.into(),
            child,
            rx,
            lines: Vec::new(),
        }
    }

    /// Waits for a stderr line that satisfies `pred`.
    pub(crate) fn wait_for_line(&mut self, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match self
                .rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(l) => {
                    self.lines.push(l.clone());
                    if pred(&l) {
                        return l;
                    }
                }
                Err(e) => panic!("{}: no such line ({e:?}):\n{}", self.what, self.text()),
            }
        }
    }

    /// Waits until the process ends (at most `limit`), then for the rest of
    /// its stderr; `None` when it is still running at `limit`.
    pub(crate) fn wait_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // The pipe closes when the last holder exits; a leftover child of
        // the process must not keep this waiting.
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Ok(l) = self
            .rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.lines.push(l);
        }
        Some(status)
    }

    /// [`Proc::wait_within`] that fails the test past [`PATIENCE`].
    pub(crate) fn wait(&mut self) -> ExitStatus {
        self.wait_within(PATIENCE)
            .unwrap_or_else(|| panic!("{} did not end:\n{}", self.what, self.text()))
    }

    /// SIGKILL, as a node that dies would.
    pub(crate) fn kill(&mut self) {
        // SAFETY: SIGKILL to the child this test started (`ip netns exec`
        // execs the program, so this is imgctl itself).
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGKILL);
        }
    }

    /// Its process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGSTOP: the process hangs with its sockets open (a silent node).
    pub(crate) fn stop(&self) {
        // SAFETY: a signal to the child this test started (imgctl itself).
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGSTOP);
        }
    }

    /// The stderr lines so far.
    pub(crate) fn text(&self) -> String {
        self.lines.join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: SIGKILL to the process group of the child this test
            // started (it leads its own group, `process_group(0)`).
            unsafe {
                libc::kill(-(self.child.id() as i32), libc::SIGKILL);
            }
        }
        let _ = self.child.wait();
    }
}

/// The config file of these tests in `dir`.
pub(crate) fn node_config(dir: &Path) -> PathBuf {
    let p = dir.join("node.yaml");
    std::fs::write(&p, NODE_CONFIG).unwrap();
    p
}

/// `train-demo` arguments: `steps` steps of batch 2 per rank into `out`.
pub(crate) fn train_args(dir: &Path, out: &Path, steps: u64, extra: &[&str]) -> Vec<String> {
    let cfg = node_config(dir);
    let mut v: Vec<String> = [
        "train-demo",
        "--config",
        cfg.to_str().unwrap(),
        "--device",
        "cpu",
        "--steps",
        &steps.to_string(),
        "--batch-size",
        "2",
        "--sample-every",
        "0",
        "--seed",
        "7",
        "--out",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// Rank `rank` of 2 on node `rank` (rank 0 on node A), from torchrun's
/// variables set by hand, rendezvous at node A's `port`.
fn start_rank(
    nodes: &Nodes,
    rank: usize,
    port: u16,
    args: &[String],
    envs: &[(&str, &str)],
) -> Proc {
    let mut c = nodes.command(rank, &imgctl_bin());
    c.args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", "2")
        .env("LOCAL_RANK", "0")
        .env("LOCAL_WORLD_SIZE", "1")
        .env("MASTER_ADDR", nodes.addr(0))
        .env("MASTER_PORT", port.to_string());
    for (k, v) in envs {
        c.env(k, v);
    }
    Proc::spawn(&format!("rank {rank} on node {rank}"), c)
}

/// The `error: …` lines of a stderr text.
pub(crate) fn error_lines(err: &str) -> Vec<&str> {
    err.lines()
        .map(|l| l.trim_start())
        .filter(|l| l.starts_with("error: "))
        .collect()
}

/// The network changes no bit: the two-node run's weights and hash log are
/// those of two CPU ranks on one host (loopback, imgctl's own supervisor).
pub(crate) fn assert_same_as_two_ranks_on_one_host(
    dir: &Path,
    out: &Path,
    hashes: &Path,
    steps: u64,
) {
    let host = train(dir, "one-host", Some(2), 2, steps);
    assert!(
        tensors(&final_model(out, steps)) == tensors(&final_model(&host, steps)),
        "two nodes and two ranks on one host trained different weights"
    );
    let log = |d: &Path| std::fs::read_to_string(d.join("rank-0.txt")).unwrap();
    assert_eq!(log(hashes), log(&dir.join("one-host-hashes")), "hash logs");
}

/// Two nodes under torchrun's multi-node rendezvous (c10d store on node A,
/// one rank per node): the same weights as one process with the double batch,
/// and both ranks' hash logs identical.
#[test]
fn two_nodes_under_torchrun_c10d_match_one_process_with_the_double_batch() {
    let Some(torchrun) = crate::parallel::torchrun_or_skip() else {
        return;
    };
    let Some(nodes) = nodes_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let hashes = dir.path().join("hashes");
    std::fs::create_dir_all(&hashes).unwrap();
    let steps = 3;
    let out = dir.path().join("two-nodes");
    let args = train_args(dir.path(), &out, steps, &[]);
    let endpoint = format!("{}:29400", nodes.addr(0));
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| {
            let mut c = nodes.command(i, &torchrun);
            c.args([
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--rdzv-backend",
                "c10d",
            ])
            .args(["--rdzv-endpoint", &endpoint, "--rdzv-id", "imgctl-mn"])
            .args([
                "--node-rank",
                &i.to_string(),
                "--local-addr",
                &nodes.addr(i),
            ])
            // torch guesses whether this node hosts the store by its
            // hostname, which the namespaces share: say it.
            .args([
                "--rdzv-conf",
                if i == 0 { "is_host=1" } else { "is_host=0" },
            ])
            .args(["--max-restarts", "0", "--no-python"])
            .arg(imgctl_bin())
            .args(&args)
            .env("IMGCTL_PARAM_HASH_DIR", &hashes)
            .env("IMGCTL_RENDEZVOUS_TIMEOUT", "120");
            Proc::spawn(&format!("torchrun on node {i}"), c)
        })
        .collect();
    let status: Vec<ExitStatus> = procs.iter_mut().map(Proc::wait).collect();
    let err = format!("{}\n---\n{}", procs[0].text(), procs[1].text());
    assert!(status.iter().all(ExitStatus::success), "{err}");
    // imgctl's rank 0 served at its node's own address, on a port of its own
    // (torchrun's agent store holds MASTER_PORT).
    let at = err
        .lines()
        .find_map(|l| {
            l.split("data parallel: 2 ranks, cpu backend, rendezvous at ")
                .nth(1)
        })
        .unwrap_or_else(|| panic!("no rendezvous line:\n{err}"));
    let at: std::net::SocketAddr = at.trim().parse().unwrap_or_else(|e| panic!("{at}: {e}"));
    assert!(
        [nodes.addr(0), nodes.addr(1)].contains(&at.ip().to_string()),
        "rank 0 served at {at}, not at a node's address:\n{err}"
    );
    assert_ranks_agree(&hashes, steps as usize, &err);
    assert_same_as_two_ranks_on_one_host(dir.path(), &out, &hashes, steps);
    let one = train(dir.path(), "one-process", None, 4, steps);
    assert_close(
        &final_model(&out, steps),
        &final_model(&one, steps),
        "2 nodes × batch 2 under torchrun against 1 process × batch 4",
    );
}

/// Two nodes started as srun would (SLURM_PROCID, SLURM_NTASKS, …; MASTER_ADDR
/// of node A, MASTER_PORT unset so torchrun's default 29500): the same result.
#[test]
fn two_nodes_under_slurm_variables_match_one_process_with_the_double_batch() {
    let Some(nodes) = nodes_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let hashes = dir.path().join("hashes");
    std::fs::create_dir_all(&hashes).unwrap();
    let steps = 3;
    let out = dir.path().join("two-nodes");
    let args = train_args(dir.path(), &out, steps, &[]);
    let mut procs: Vec<Proc> = (0..2)
        .map(|i| {
            let mut c = nodes.command(i, &imgctl_bin());
            c.args(&args)
                .env("SLURM_PROCID", i.to_string())
                .env("SLURM_NTASKS", "2")
                .env("SLURM_LOCALID", "0")
                .env("SLURM_NTASKS_PER_NODE", "1")
                .env("SLURM_TASKS_PER_NODE", "1(x2)")
                .env("MASTER_ADDR", nodes.addr(0))
                .env("IMGCTL_PARAM_HASH_DIR", &hashes);
            Proc::spawn(&format!("srun task {i}"), c)
        })
        .collect();
    let status: Vec<ExitStatus> = procs.iter_mut().map(Proc::wait).collect();
    let err = format!("{}\n---\n{}", procs[0].text(), procs[1].text());
    assert!(status.iter().all(ExitStatus::success), "{err}");
    assert!(
        procs[0].text().contains(&format!(
            "data parallel: 2 ranks, cpu backend, rendezvous at {}:29500",
            nodes.addr(0)
        )),
        "{err}"
    );
    assert_ranks_agree(&hashes, steps as usize, &err);
    assert_same_as_two_ranks_on_one_host(dir.path(), &out, &hashes, steps);
    let one = train(dir.path(), "one-process", None, 4, steps);
    assert_close(
        &final_model(&out, steps),
        &final_model(&one, steps),
        "2 nodes × batch 2 under SLURM against 1 process × batch 4",
    );
}

/// The surviving rank's verdict after a fault: it ended non-zero within
/// `limit` of `since`, with exactly one `error:` line, naming the lost rank.
fn assert_stopped_naming(p: &mut Proc, since: Instant, limit: Duration, lost: usize) -> Duration {
    let status = p.wait_within(limit + PATIENCE);
    let took = since.elapsed();
    let err = p.text();
    let status = status.unwrap_or_else(|| panic!("{} did not stop:\n{err}", p.what));
    assert!(
        !status.success(),
        "{} ended well after the fault:\n{err}",
        p.what
    );
    assert!(
        took <= limit,
        "{} stopped {took:?} after the fault, past the collective timeout ({limit:?}):\n{err}",
        p.what
    );
    let errors = error_lines(&err);
    assert_eq!(errors.len(), 1, "{}: one error line:\n{err}", p.what);
    assert!(
        errors[0].contains(&format!("rank {lost}")),
        "{}: the error line does not name rank {lost}:\n{err}",
        p.what
    );
    eprintln!("{} stopped {took:?} after the fault: {}", p.what, errors[0]);
    took
}

/// Checkpoint step folders under `out`, sorted.
pub(crate) fn checkpoints(out: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(out.join("checkpoints"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("step-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs both ranks of `args` to the end on the two nodes; returns rank 0's stderr.
fn run_both(nodes: &Nodes, port: u16, args: &[String], envs: &[(&str, &str)]) -> String {
    let mut a = start_rank(nodes, 0, port, args, envs);
    let mut b = start_rank(nodes, 1, port, args, envs);
    let (sa, sb) = (a.wait(), b.wait());
    let err = format!("{}\n---\n{}", a.text(), b.text());
    assert!(sa.success() && sb.success(), "{err}");
    a.text()
}

/// Node B is SIGKILLed after the first checkpoints; the job restarted with
/// `--resume auto` continues from the last complete checkpoint and ends with
/// the very weights of an uninterrupted two-node run.
#[test]
fn a_restarted_job_resumes_from_the_last_checkpoint_and_matches_an_uninterrupted_run() {
    let Some(nodes) = nodes_or_skip() else { return };
    let dir = tempfile::tempdir().unwrap();
    let steps = 10;
    let extra = ["--checkpoint-every", "2", "--resume", "auto"];
    let envs = [("IMGCTL_COLLECTIVE_TIMEOUT", "30")];
    // The uninterrupted run.
    let whole = dir.path().join("whole");
    let whole_hashes = dir.path().join("whole-hashes");
    std::fs::create_dir_all(&whole_hashes).unwrap();
    let args = train_args(dir.path(), &whole, steps, &extra);
    let h = whole_hashes.to_str().unwrap();
    run_both(
        &nodes,
        29500,
        &args,
        &[envs[0], ("IMGCTL_PARAM_HASH_DIR", h)],
    );
    // The interrupted one: node B dies once step 2's checkpoint is written.
    let part = dir.path().join("part");
    let args = train_args(dir.path(), &part, steps, &extra);
    let mut a = start_rank(&nodes, 0, 29501, &args, &envs);
    let mut b = start_rank(&nodes, 1, 29501, &args, &envs);
    a.wait_for_line(|l| l.starts_with("step 3/"));
    b.kill();
    let killed = Instant::now();
    assert!(b.wait_within(Duration::from_secs(10)).is_some());
    assert_stopped_naming(&mut a, killed, Duration::from_secs(30), 1);
    drop((a, b));
    let saved = checkpoints(&part);
    let last = saved
        .last()
        .cloned()
        .unwrap_or_else(|| panic!("no checkpoint in {}", part.display()));
    let last_step: u64 = last["step-".len()..].parse().unwrap();
    assert!(
        (2..steps).contains(&last_step),
        "the kill came too late (checkpoints {saved:?}): the run had ended"
    );
    // The restart: the same command on both nodes.
    let part_hashes = dir.path().join("part-hashes");
    std::fs::create_dir_all(&part_hashes).unwrap();
    let h = part_hashes.to_str().unwrap();
    let err = run_both(
        &nodes,
        29502,
        &args,
        &[envs[0], ("IMGCTL_PARAM_HASH_DIR", h)],
    );
    assert!(
        err.contains(&format!(
            "resuming from {} (step {last_step})",
            part.join("checkpoints").join(&last).display()
        )),
        "not resumed from {last}:\n{err}"
    );
    assert!(
        tensors(&final_model(&part, steps)) == tensors(&final_model(&whole, steps)),
        "the resumed run's weights differ from the uninterrupted run's"
    );
    let final_line = |d: &Path, r: usize| {
        let t = std::fs::read_to_string(d.join(format!("rank-{r}.txt"))).unwrap();
        t.lines().last().unwrap().to_string()
    };
    for r in 0..2 {
        assert_eq!(
            final_line(&part_hashes, r),
            final_line(&whole_hashes, r),
            "rank {r}"
        );
    }
    // One metrics line per step, the redone steps not twice.
    let metrics = std::fs::read_to_string(part.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), steps as usize, "{metrics}");
}
