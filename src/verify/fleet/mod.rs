//! Fleet verify (`imgctl verify --fleet`): one process per node, started by
//! the launcher (torchrun `--nnodes N`, `srun` one task per node, a
//! Kubernetes indexed Job) with the env contract of train-demo. Every node
//! runs its own checks; rank 0 gathers the reports over the same rendezvous
//! as training ([`crate::world::rendezvous`]), times the link to
//! each node with real bytes, and judges the fleet ([`judge`]): nodes that
//! never joined or died, software that differs between nodes, numbers below
//! the fleet's median, slow links.
//!
//! This file owns the run and the wire format after the rendezvous; judging
//! lives in `judge.rs`, the table and JUnit in `render.rs`. It prints
//! nothing: the command layer renders the [`FleetReport`].
//!
//! Part: the verify wing (`docs/architecture.md`).
use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::report::Report;
use crate::sys::net::read_exact_by;
use crate::world::auth::{Nonce, Token, MAC_BYTES};
use crate::world::error::RendezvousError;
use crate::world::heartbeat::{self, Heartbeat};
use crate::world::launch::LaunchInfo;
use crate::world::rendezvous::{self, Links};

mod allreduce;
pub mod groups;
pub mod history;
mod judge;
pub mod metrics;
mod probe;
pub mod render;
#[cfg(test)]
mod sim;
mod tree;

pub use judge::{judge, LINK_FRACTION};

/// Version of the fleet JSON layout; bump on incompatible change.
pub const FLEET_SCHEMA_VERSION: u32 = 1;

/// Default bound on every wait of a fleet run (`--fleet-timeout`): joining,
/// each node's report, each link probe. Well under a minute, so a lost node
/// is named quickly; a full-level run on many GPUs may need more.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(45);

/// Default bytes sent to each node to time its link (`--link-mib`).
pub const DEFAULT_LINK_MIB: u64 = 16;

/// Largest report a node may send (a report of a 8-GPU full run is ~40 KiB).
const MAX_REPORT_BYTES: u32 = 16 << 20;

/// What one node sends rank 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeReport {
    /// The node's rank in the launcher's world.
    pub rank: usize,
    /// Its host name (`/proc/sys/kernel/hostname`).
    pub host: String,
    /// Its name at the scheduler (`SLURMD_NODENAME`, or `NODE_NAME` as a
    /// Kubernetes Job sets it from the downward API), when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The software that must be the same on every node: `imgctl`, `torch`,
    /// `cudart`, `cublas`, `cudnn`, `nccl`, `driver`, `pins`.
    pub software: BTreeMap<String, String>,
    /// Where it sits in the network (`SLURM_TOPOLOGY_ADDR`), when the
    /// scheduler says: its group in the tree ([`groups`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// The port its leader times its link on (`tree`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_port: Option<u16>,
    /// Its verify report.
    pub report: Report,
}

/// One node as rank 0 saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeEntry {
    /// Rank.
    pub rank: usize,
    /// Host name, when the node reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Its name at the scheduler, when it reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The address rank 0 saw it connect from (`self` for rank 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `reported`, `missing` (never joined) or `lost` (joined, then died or hung).
    pub state: NodeState,
    /// Why it is missing or lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Rank 0 → this node, MB/s (10^6 bytes), when timed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_mbs: Option<f64>,
    /// Whether the probe's bytes arrived unchanged (the node's checksum of
    /// them is rank 0's), when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_intact: Option<bool>,
    /// The rank that timed its link, when not rank 0: its group's leader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_by: Option<usize>,
    /// Where it sits in the network (`SLURM_TOPOLOGY_ADDR`), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// Its probe port (not in the JSON).
    #[serde(skip)]
    pub probe_port: Option<u16>,
    /// Its software facts.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub software: BTreeMap<String, String>,
    /// Its report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
}

impl FleetReport {
    /// Adds a fleet verdict, keeping the summary and `passed` in step.
    pub fn push(&mut self, r: super::result::CheckResult) {
        self.summary.add(r.status);
        self.passed = self.summary.passed();
        self.fleet.push(r);
    }
}

impl NodeEntry {
    /// `vm (rank 1, 10.231.1.2)`, or `rank 2` for a node that never reported.
    pub fn label(&self) -> String {
        match (&self.host, &self.address) {
            (Some(h), Some(a)) => format!("{h} (rank {}, {a})", self.rank),
            (Some(h), None) => format!("{h} (rank {})", self.rank),
            (None, Some(a)) => format!("rank {} ({a})", self.rank),
            (None, None) => format!("rank {}", self.rank),
        }
    }
}

/// A node's state at the end of a fleet run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// It sent its report.
    Reported,
    /// It never joined the rendezvous.
    Missing,
    /// It joined, then died or hung before its report or its link probe.
    Lost,
}

/// The fleet's report: what `--json` prints on rank 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FleetReport {
    /// [`FLEET_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The imgctl of rank 0.
    pub imgctl_version: String,
    /// The world size the launcher set.
    pub nodes_expected: usize,
    /// Every node, by rank.
    pub nodes: Vec<NodeEntry>,
    /// The fleet's own verdicts (`fleet.nodes`, `fleet.software`,
    /// `fleet.outliers`, `fleet.links`, `fleet.node_checks`).
    pub fleet: Vec<super::result::CheckResult>,
    /// Counts of the fleet verdicts.
    pub summary: super::report::Summary,
    /// True when no fleet verdict is FAIL or ERROR.
    pub passed: bool,
    /// Seconds from the start of rank 0's run to its verdict.
    pub seconds: f64,
    /// With a history (`--history`): the nodes it names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offenders: Vec<history::Offender>,
    /// Where rank 0's time went.
    #[serde(default)]
    pub phases: Phases,
}

/// Where rank 0's time went, in seconds, and the tree it used: what grows
/// with the fleet shows here first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Phases {
    /// From the start until every node joined (or the wait ended).
    pub join_s: f64,
    /// Rank 0's own checks.
    pub checks_s: f64,
    /// Reading the other nodes' reports after its own checks.
    pub reports_s: f64,
    /// Timing the links, through the tree.
    pub links_s: f64,
    /// The all-reduce.
    pub all_reduce_s: f64,
    /// Groups in the tree (`--group-size`).
    pub groups: usize,
    /// Links rank 0 timed itself.
    pub links_by_root: usize,
    /// Links the groups' leaders timed.
    pub links_by_leaders: usize,
    /// Bytes of the reports rank 0 read.
    pub report_bytes: u64,
}

/// How a fleet run is bounded and what it sends.
#[derive(Debug, Clone, Copy)]
pub struct FleetOptions {
    /// Bound of each wait (join, report, probe).
    pub timeout: Duration,
    /// Bytes per link probe.
    pub link_bytes: u64,
    /// The least MB/s a link must carry (`--link-floor`); without it, a
    /// link is judged against the fleet's median.
    pub link_floor_mbs: Option<f64>,
    /// The heartbeat: a node that joined, then went silent, is named within
    /// its timeout, whatever wait rank 0 was in.
    pub heartbeat: heartbeat::Settings,
    /// Nodes in a group of the tree that times the links (`--group-size`,
    /// [`groups`]); 1 times every link from rank 0.
    pub group_size: usize,
}

/// What a fleet run ends with on this process.
#[derive(Debug)]
pub enum FleetOutcome {
    /// Rank 0: the fleet's report.
    Root(Box<FleetReport>),
    /// Another rank: its report was delivered, and rank 0's verdict.
    Leaf {
        /// Where rank 0 was.
        address: String,
        /// Whether the fleet passed, as rank 0 judged it.
        passed: bool,
    },
}

/// The software facts of this node, from its report and `imgctl` (the
/// binary's identity, [`imgctl_identity`]).
pub fn software_facts(report: &Report, imgctl: String) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("imgctl".to_string(), imgctl);
    for (key, id) in [
        ("driver", "nvml.driver"),
        ("torch", "torch.version"),
        ("cudart", "torch.cudart_loaded"),
        ("cublas", "torch.cublas_loaded"),
        ("cudnn", "torch.cudnn_loaded"),
        ("nccl", "torch.nccl_loaded"),
    ] {
        let found = report.results.iter().find(|r| r.id == id);
        let value = match found.and_then(|r| r.measured.as_deref()) {
            // `2.7.0+cu126 (CUDA 12.6) from /path`: the version, not where.
            Some(m) => m.split(" from ").next().unwrap_or(m).trim().to_string(),
            None => "n/a".to_string(),
        };
        out.insert(key.to_string(), value);
    }
    if let Some(pins) = std::env::var_os(crate::env_vars::IMGCTL_VERIFY_PINS) {
        out.insert(
            "pins".to_string(),
            format!("sha256:{}", short_sha(pins.to_string_lossy().as_bytes())),
        );
    }
    out
}

/// `0.1.0 (sha256:1a2b3c4d5e6f)`: the version and the running binary's
/// digest, so two builds of one version differ too. The binary is hashed as
/// it is read, never held whole in memory.
pub fn imgctl_identity() -> String {
    let version = env!("CARGO_PKG_VERSION");
    let digest = std::fs::File::open("/proc/self/exe").and_then(|mut f| {
        let mut h = sha2::Sha256::default();
        std::io::copy(&mut f, &mut h)?;
        Ok(short_hex(&sha2::Digest::finalize(h)))
    });
    match digest {
        Ok(d) => format!("{version} (sha256:{d})"),
        Err(_) => version.to_string(),
    }
}

fn short_sha(bytes: &[u8]) -> String {
    short_hex(&<sha2::Sha256 as sha2::Digest>::digest(bytes))
}

/// The first 6 bytes of a digest in hex.
fn short_hex(digest: &[u8]) -> String {
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// Runs this node's part of a fleet verify: meets the others, runs `local`
/// (this node's checks), and on rank 0 gathers, probes and judges.
pub fn run(
    info: &LaunchInfo,
    options: FleetOptions,
    local: impl FnOnce() -> Report,
) -> anyhow::Result<FleetOutcome> {
    run_with(info, options, local, imgctl_identity)
}

/// [`run`], with this node's imgctl identity from `identity` (the
/// simulation of a large fleet in one process names its nodes' binary
/// once, not by hashing it on every simulated node).
pub fn run_with(
    info: &LaunchInfo,
    options: FleetOptions,
    local: impl FnOnce() -> Report,
    identity: fn() -> String,
) -> anyhow::Result<FleetOutcome> {
    let start = Instant::now();
    // Hashing the binary takes seconds in a debug build: it runs while this
    // node waits for the others, not inside the bound on its report.
    let identity = std::thread::spawn(identity);
    let identity = move || {
        identity
            .join()
            .unwrap_or_else(|_| env!("CARGO_PKG_VERSION").into())
    };
    if info.rank != 0 {
        return run_leaf(info, options, local, identity);
    }
    open_files_for(info.world_size)?;
    let mut gathered = rendezvous::rendezvous_whoever_comes(info, options.timeout)?;
    let mut phases = Phases {
        join_s: start.elapsed().as_secs_f64(),
        ..Phases::default()
    };
    // A node silent for the heartbeat's timeout is lost: its reason kept,
    // its stream shut, so that whatever wait rank 0 is in ends at once.
    heartbeat::note(0, heartbeat::Phase::Verifying);
    let silent: Arc<Mutex<BTreeMap<usize, String>>> = Arc::default();
    let shut: BTreeMap<usize, TcpStream> = (gathered.peers.iter().enumerate())
        .filter_map(|(r, p)| Some((r, p.as_ref()?.0.try_clone().ok()?)))
        .collect();
    let heard = silent.clone();
    let _beat = Heartbeat::start_fleet_root(
        &mut gathered,
        info.token.clone(),
        options.heartbeat,
        Box::new(move |rank, err| {
            let Some(s) = shut.get(&rank) else { return };
            // A node whose connection closed died: the wait on it says so
            // at once. Only a silent one, its connection open, is named so.
            if closed(s) {
                return;
            }
            let line = err.to_string();
            let line = line.strip_prefix("rank 0: ").unwrap_or(&line);
            let mut heard = heard.lock().unwrap_or_else(|e| e.into_inner());
            heard.insert(rank, format!("joined, then went silent: {line}"));
            let _ = s.shutdown(std::net::Shutdown::Both);
        }),
    )?;
    let silence = |rank: usize, why: String| {
        let heard = silent.lock().unwrap_or_else(|e| e.into_inner());
        heard.get(&rank).cloned().unwrap_or(why)
    };
    // Every node starts its checks when the session reaches it, as this one
    // does now, and takes about as long as this one: their reports are due
    // one bound after this node's own checks end (a full level on many GPUs
    // takes minutes; the wait to join has already used its bound).
    let checks = Instant::now();
    let report = local();
    let own = NodeReport {
        rank: 0,
        host: crate::sys::net::hostname(),
        node: scheduler_node_name(),
        software: software_facts(&report, identity()),
        topology: topology_address(),
        probe_port: None,
        report,
    };
    phases.checks_s = checks.elapsed().as_secs_f64();
    let reading = Instant::now();
    let reports_due = Instant::now() + options.timeout;
    let mut nodes = vec![entry(own, Some("self".to_string()))];
    let mut streams: Vec<(usize, TcpStream)> = Vec::new();
    for (rank, peer) in gathered.peers.into_iter().enumerate().skip(1) {
        let Some((mut stream, addr)) = peer else {
            nodes.push(absent(
                rank,
                None,
                NodeState::Missing,
                format!(
                    "never joined the rendezvous at {} within {}",
                    gathered.address,
                    super::check::fmt_secs(options.timeout)
                ),
            ));
            continue;
        };
        let address = Some(addr.ip().to_string());
        match read_report(&mut stream, reports_due, rank) {
            Ok((r, bytes)) => {
                phases.report_bytes += bytes;
                nodes.push(entry(r, address));
                streams.push((rank, stream));
            }
            Err(why) => nodes.push(absent(rank, address, NodeState::Lost, silence(rank, why))),
        }
    }
    phases.reports_s = reading.elapsed().as_secs_f64();
    let timing = Instant::now();
    let tree = groups::groups(
        &(nodes.iter())
            .filter(|n| n.state == NodeState::Reported)
            .map(|n| (n.rank, n.topology.clone()))
            .collect::<Vec<_>>(),
        options.group_size,
    );
    let tally = tree::time_links(&mut nodes, &mut streams, &tree, &options, &silence);
    phases.links_s = timing.elapsed().as_secs_f64();
    phases.groups = tree.len();
    phases.links_by_root = tally.direct;
    phases.links_by_leaders = tally.by_leaders;
    // Every node at once, when every node is still here.
    let everyone = streams.len() + 1 == info.world_size
        && nodes.iter().all(|n| n.state == NodeState::Reported);
    let all_reduce = if everyone && info.world_size > 1 {
        let reducing = Instant::now();
        let (r, back) = allreduce::all_reduce_root(streams, info.world_size, options);
        phases.all_reduce_s = reducing.elapsed().as_secs_f64();
        streams = back;
        r
    } else {
        super::result::CheckResult::skip(
            allreduce::ALL_REDUCE_ID,
            if info.world_size == 1 {
                "one node: nothing to all-reduce across"
            } else {
                "not every node is here: the all-reduce needs them all"
            },
        )
    };
    // A node silent during the all-reduce (or after it): the heartbeat shut
    // its stream, so the all-reduce saw a broken connection; the heartbeat's
    // reason is the true one.
    let mut all_reduce = all_reduce;
    {
        let heard = silent.lock().unwrap_or_else(|e| e.into_inner());
        for node in nodes.iter_mut().filter(|n| n.state == NodeState::Reported) {
            if let Some(why) = heard.get(&node.rank) {
                node.state = NodeState::Lost;
                node.reason = Some(why.clone());
                if !matches!(
                    all_reduce.status,
                    super::result::Status::Pass | super::result::Status::Skip
                ) {
                    all_reduce = super::result::CheckResult::error(
                        allreduce::ALL_REDUCE_ID,
                        format!("rank {} went silent during the all-reduce", node.rank),
                    );
                }
            }
        }
    }
    let mut report = judge::judge_with(
        nodes,
        info.world_size,
        judge::LinkRule {
            bytes: options.link_bytes,
            floor_mbs: options.link_floor_mbs,
        },
    );
    report.push(all_reduce);
    report.seconds = start.elapsed().as_secs_f64();
    report.phases = phases;
    for (rank, stream) in &mut streams {
        let proof = info.token.as_ref().zip(gathered.nonces[*rank].as_ref());
        let _ = send_verdict(stream, report.passed, proof);
    }
    Ok(FleetOutcome::Root(Box::new(report)))
}

/// Rank 0 holds two sockets a node (its link and its heartbeat): raises
/// the soft limit on open files for them, or says in one line why it
/// cannot (a fleet of 10,000 needs about 20,300; many systems start at 1,024).
fn open_files_for(world: usize) -> anyhow::Result<()> {
    let need = 2 * world as u64 + 256;
    let got = crate::sys::process::raise_open_files(need);
    if got < need {
        anyhow::bail!(
            "fleet verify: rank 0 of {world} nodes needs about {need} open files (a link and a heartbeat a node), and this process may open {got}: raise the limit on open files to {need} (ulimit in the job script, LimitNOFILE= for a systemd unit)"
        );
    }
    Ok(())
}

/// Whether the peer of `s` has closed it (or reset it), without reading
/// anything the owner of the stream still has to read.
fn closed(s: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let readable = crate::sys::net::poll_readable(&[s.as_raw_fd()], Duration::ZERO);
    readable.is_ok_and(|r| r[0]) && !matches!(s.peek(&mut [0u8; 1]), Ok(n) if n > 0)
}

/// The report in `body` from the node that joined as `rank`: it must parse
/// and be that rank's (see [`matches_hello`]); else why not. Pure: the fuzz
/// target `wire_messages` drives it.
pub fn parse_report(body: &[u8], rank: usize) -> Result<NodeReport, String> {
    let r = serde_json::from_slice(body)
        .map_err(|e| format!("sent a report imgctl cannot read: {e}"))?;
    matches_hello(r, rank)
}

/// `r` when it is the report of `rank`, the rank its connection joined as;
/// else why it is refused (a forged or confused peer must not stand in for
/// another node, nor crash rank 0).
fn matches_hello(r: NodeReport, rank: usize) -> Result<NodeReport, String> {
    if r.rank == rank {
        Ok(r)
    } else {
        Err(format!(
            "joined as rank {rank}, then sent a report for rank {} (a forged or misconfigured node)",
            r.rank
        ))
    }
}

/// This node's name at its scheduler: `SLURMD_NODENAME` (srun), else
/// `NODE_NAME` (a Kubernetes Job's downward API); the name `--exclude` and
/// a drain take.
fn scheduler_node_name() -> Option<String> {
    [crate::env_vars::SLURMD_NODENAME, crate::env_vars::NODE_NAME]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .map(|v| v.trim().to_string())
        .find(|v| !v.is_empty() && v.len() <= 253)
}

/// Where this node sits in the network at its scheduler
/// (`SLURM_TOPOLOGY_ADDR`, `s0.s3.node17`), when it says.
fn topology_address() -> Option<String> {
    std::env::var(crate::env_vars::SLURM_TOPOLOGY_ADDR)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty() && v.len() <= 253)
}

fn entry(r: NodeReport, address: Option<String>) -> NodeEntry {
    NodeEntry {
        rank: r.rank,
        host: Some(r.host),
        node: r.node,
        address,
        state: NodeState::Reported,
        reason: None,
        link_mbs: None,
        link_intact: None,
        link_by: None,
        topology: r.topology,
        probe_port: r.probe_port,
        software: r.software,
        report: Some(r.report),
    }
}

fn absent(rank: usize, address: Option<String>, state: NodeState, why: String) -> NodeEntry {
    NodeEntry {
        rank,
        host: None,
        node: None,
        address,
        state,
        reason: Some(why),
        link_mbs: None,
        link_intact: None,
        link_by: None,
        topology: None,
        probe_port: None,
        software: BTreeMap::new(),
        report: None,
    }
}

/// Another rank: joins, runs its checks, sends its report, answers the
/// probe and waits for the verdict.
fn run_leaf(
    info: &LaunchInfo,
    options: FleetOptions,
    local: impl FnOnce() -> Report,
    identity: impl FnOnce() -> String,
) -> anyhow::Result<FleetOutcome> {
    // Rank 0 goes on without the absent once its own wait ends; a node that
    // started before it must outwait that, or it would give up first.
    let mut session = rendezvous::rendezvous(info, || Ok(Vec::new()), 2 * options.timeout)?;
    // A rank 0 that goes silent ends this node with the line naming it.
    heartbeat::note(0, heartbeat::Phase::Verifying);
    let _beat = Heartbeat::start(
        &mut session,
        options.heartbeat,
        heartbeat::progress(),
        heartbeat::exit_rank(),
        false,
    )?;
    let Links::Leaf(mut stream) = session.links else {
        anyhow::bail!("fleet verify: rank {} got no link to rank 0", info.rank);
    };
    let listener = tree::listen(&stream);
    let report = local();
    let mine = NodeReport {
        rank: info.rank,
        host: crate::sys::net::hostname(),
        node: scheduler_node_name(),
        software: software_facts(&report, identity()),
        topology: topology_address(),
        probe_port: listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.port()),
        report,
    };
    let body = serde_json::to_vec(&mine)?;
    stream.set_write_timeout(Some(options.timeout))?;
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream.write_all(&frame).map_err(|e| {
        anyhow::anyhow!(
            "rank {} could not send its report to rank 0 at {} ({e}): rank 0 stopped waiting for it",
            info.rank,
            session.address
        )
    })?;
    // Rank 0 waits for every report, then probes each link in turn: the
    // wait for the verdict is bounded by all of that.
    let bound = options.timeout * (2 + info.world_size as u32);
    let passed = loop {
        let mut tag = [0u8; 1];
        let deadline = Instant::now() + bound;
        read_exact_by(&mut stream, &mut tag, deadline)
            .map_err(|e| anyhow::anyhow!("rank 0 at {} went away: {e}", session.address))?;
        match tag[0] {
            PROBE => probe::answer(&mut stream, Instant::now() + options.timeout)?,
            EXPECT => tree::expect(&mut stream, listener.as_ref(), options.timeout)?,
            GROUP => tree::lead(&mut stream, info.world_size, options.timeout)?,
            ALL_REDUCE => {
                stream = allreduce::all_reduce_leaf(
                    stream,
                    info.rank,
                    info.world_size,
                    options,
                    &session.address,
                )?;
                stream.set_read_timeout(Some(bound))?;
            }
            VERDICT => {
                let mut v = [0u8; 1];
                read_exact_by(&mut stream, &mut v, deadline)?;
                if let Some(auth) = &session.auth {
                    let mut tag = [0u8; MAC_BYTES];
                    read_exact_by(&mut stream, &mut tag, deadline)?;
                    if !auth.token.verify(b"verdict", &[&auth.nonces[0], &v], &tag) {
                        anyhow::bail!(RendezvousError::Token {
                            msg: format!(
                                "the verdict from rank 0 at {} does not prove the rendezvous token: it was not sent by this job's rank 0",
                                session.address
                            )
                        });
                    }
                }
                break v[0] == 1;
            }
            other => anyhow::bail!("fleet verify: rank 0 sent an unknown message ({other})"),
        }
    };
    Ok(FleetOutcome::Leaf {
        address: session.address,
        passed,
    })
}

/// Message tags from rank 0 after the reports.
const PROBE: u8 = 1;
const VERDICT: u8 = 2;
const ALL_REDUCE: u8 = 3;
/// To a member: its leader will time its link ([`tree`]).
const EXPECT: u8 = 4;
/// To a leader: time your members' links ([`tree`]).
const GROUP: u8 = 5;

/// Reads a node's report, the whole message before `deadline` (a peer that
/// drips it cannot hold rank 0 past its bound).
fn read_report(
    stream: &mut TcpStream,
    deadline: Instant,
    rank: usize,
) -> Result<(NodeReport, u64), String> {
    let body = read_frame(stream, deadline, MAX_REPORT_BYTES, "report")?;
    parse_report(&body, rank).map(|r| (r, body.len() as u64))
}

/// A length (u32, little-endian) and that many bytes, at most `max`, all
/// before `deadline` (a peer that drips them cannot hold the reader past
/// it); else why not, naming the message as `what`.
fn read_frame(
    stream: &mut TcpStream,
    deadline: Instant,
    max: u32,
    what: &str,
) -> Result<Vec<u8>, String> {
    let mut len = [0u8; 4];
    read_exact_by(stream, &mut len, deadline).map_err(|e| lost(&e))?;
    let len = u32::from_le_bytes(len);
    if len > max {
        return Err(format!("sent a {what} of {len} bytes (at most {max})"));
    }
    let mut body = vec![0u8; len as usize];
    read_exact_by(stream, &mut body, deadline).map_err(|e| lost(&e))?;
    Ok(body)
}

fn lost(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            "joined, then sent no report in time (hung or cut off)".to_string()
        }
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
            "joined, then died before its report (connection closed)".to_string()
        }
        _ => format!("joined, then its connection failed: {e}"),
    }
}

/// The verdict, and with a rendezvous token its MAC bound to the node's
/// hello nonce (a process that is not rank 0 cannot tell a node "passed").
fn send_verdict(
    stream: &mut TcpStream,
    passed: bool,
    proof: Option<(&Token, &Nonce)>,
) -> std::io::Result<()> {
    let mut message = vec![VERDICT, u8::from(passed)];
    if let Some((token, nonce)) = proof {
        message.extend_from_slice(&token.mac(b"verdict", &[nonce, &message[1..]]));
    }
    stream.write_all(&message)
}
