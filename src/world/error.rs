//! The errors of data parallelism: [`LaunchError`] (the launcher's
//! variables, the GPU selection, the worker's device), [`RendezvousError`]
//! (ranks meeting at rank 0) and [`CollectiveError`] (buffers, diverged or
//! silent peers, NCCL set-up).
//!
//! Each line says what went wrong in the job's own terms (variables, ranks,
//! addresses); it names no flag and no `imgctl` command: `commands/error/`
//! gives every variant its exit status, the flag names and the hint. A leaf
//! besides [`super::timeouts`]: it must not import the modules that return these.
use std::time::Duration;

use tch::{Device, Kind};

use super::timeouts::fmt_secs;

/// ` on HOST` when a peer's host is known, else nothing (messages).
pub(crate) fn on_host(host: &Option<String>) -> String {
    host.as_ref()
        .map(|h| format!(" on {h}"))
        .unwrap_or_default()
}

/// `is` or `are`, for "only N … visible".
fn is_are(n: usize) -> &'static str {
    if n == 1 {
        "is"
    } else {
        "are"
    }
}

/// A launch environment or a GPU selection this process cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// torchrun's rendezvous host went away (with a peer, or the agent
    /// stopped this rank): no restart can follow (exit 1; see [`super::agent`]).
    #[error(
        "rank {rank} {}, and torchrun's rendezvous store at {store_at} does not answer{}: the rendezvous host is gone, so torchrun cannot restart the job{}",
        match .lost {
            Some((peer, host)) => format!("lost rank {peer}{}", on_host(host)),
            None => "was stopped by its torchrun agent".to_string(),
        },
        if .lost.is_some() { " either" } else { "" },
        .ended_agent.map(|pid| format!(" (ended its agent, pid {pid}, which would wait for the store)")).unwrap_or_default()
    )]
    RendezvousHostLost {
        /// This rank.
        rank: usize,
        /// The rank lost and its address, when a collective said so.
        lost: Option<(usize, Option<String>)>,
        /// `host:port` of torchrun's store (`MASTER_ADDR:MASTER_PORT`).
        store_at: String,
        /// The pid of the torchrun agent this rank ended, if it did.
        ended_agent: Option<u32>,
    },
    /// A batch script's `WORLD_SIZE` that is not srun's task count.
    #[error("WORLD_SIZE={world} disagrees with SLURM_NTASKS={ntasks} under srun")]
    SlurmWorldSize {
        /// `WORLD_SIZE`.
        world: usize,
        /// `SLURM_NTASKS`.
        ntasks: usize,
    },
    /// `WORLD_SIZE` without `RANK`, outside srun: half a launch.
    #[error("WORLD_SIZE={world} is set, but RANK is not (and this is no srun task)")]
    WorldSizeWithoutRank {
        /// The value of `WORLD_SIZE`.
        world: String,
    },
    /// A rank variable that is no non-negative integer.
    #[error("{key}={value:?} is not a non-negative integer")]
    NotACount {
        /// The variable.
        key: String,
        /// Its value.
        value: String,
    },
    /// `MASTER_PORT` that is no TCP port.
    #[error("MASTER_PORT={value:?} is not a TCP port (1-65535)")]
    BadPort {
        /// Its value.
        value: String,
    },
    /// A world size of 0.
    #[error("{size_var}=0: a job needs at least one rank")]
    NoRanks {
        /// The variable that said so (`WORLD_SIZE`, `SLURM_NTASKS`).
        size_var: String,
    },
    /// A rank at or past the world size.
    #[error("{rank_var}={rank} is out of range for {size_var}={world} (ranks are 0..{})", .world - 1)]
    RankOutOfRange {
        /// The rank's variable.
        rank_var: String,
        /// The rank.
        rank: usize,
        /// The world size's variable.
        size_var: String,
        /// The world size (at least 1).
        world: usize,
    },
    /// A local rank at or past the ranks of this node.
    #[error("local rank {local_rank} is out of range for {local_world} ranks on this node")]
    LocalRankOutOfRange {
        /// The local rank.
        local_rank: usize,
        /// The ranks on this node.
        local_world: usize,
    },
    /// A torchrun variable missing beside `RANK`.
    #[error("{key} is not set, but RANK is")]
    Missing {
        /// The variable.
        key: String,
    },
    /// The rendezvous token cannot be read (both variables set, an
    /// unreadable or empty file).
    #[error("invalid rendezvous token: {why}")]
    BadToken {
        /// Why (never the token).
        why: String,
    },
    /// `TORCHELASTIC_RESTART_COUNT` that is no count.
    #[error("TORCHELASTIC_RESTART_COUNT={value:?} is not a non-negative integer")]
    BadRestartCount {
        /// Its value.
        value: String,
    },
    /// Under SLURM, nothing names rank 0's host.
    #[error(
        "cannot find rank 0's host under SLURM: MASTER_ADDR, SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are all unset"
    )]
    NoSlurmHost,
    /// A SLURM node list that does not parse.
    #[error("{var}={nodelist:?} is not a SLURM host list")]
    BadNodelist {
        /// The variable it came from.
        var: String,
        /// Its value.
        nodelist: String,
    },
    /// A GPU selection that names devices by UUID: local workers are placed
    /// by index.
    #[error("local workers are placed by device index, not by UUID ({})", .uuids.join(", "))]
    GpuUuids {
        /// The UUIDs in the selection.
        uuids: Vec<String>,
    },
    /// GPUs asked for where libtorch sees none.
    #[error(
        "GPU selection {requested} needs CUDA GPUs, but no CUDA device is visible to libtorch"
    )]
    NoCuda {
        /// The selection (`all`, a count, a list).
        requested: String,
    },
    /// More GPUs asked for than are visible.
    #[error("requested {requested} GPUs but only {visible} {} visible", is_are(*.visible))]
    TooManyGpus {
        /// The count asked for.
        requested: usize,
        /// The visible devices (at least 1).
        visible: usize,
    },
    /// A device id past the visible devices.
    #[error("GPU {id} requested but only {visible} {} visible (ids 0..{})", is_are(*.visible), .visible - 1)]
    NoSuchGpu {
        /// The id asked for.
        id: usize,
        /// The visible devices (at least 1).
        visible: usize,
    },
    /// More ranks on this node than visible GPUs.
    #[error("local rank {local_rank} needs GPU {local_rank} but only {visible} GPUs are visible on this node")]
    LocalRankWithoutGpu {
        /// The local rank.
        local_rank: usize,
        /// The visible devices.
        visible: usize,
    },
}

/// Ranks that did not meet.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    /// A rendezvous timeout that is no positive number of seconds.
    #[error("rendezvous timeout {secs} is not a positive number of seconds")]
    BadTimeout {
        /// The seconds given.
        secs: f64,
    },
    /// The deadline passed; `what` names what was waited for.
    #[error("rendezvous timed out after {}: {what}", fmt_secs(*.timeout))]
    TimedOut {
        /// The rendezvous timeout.
        timeout: Duration,
        /// What was waited for.
        what: String,
    },
    /// Rank 0's port is taken.
    #[error("MASTER_PORT {port} is already in use on this host: rank 0 cannot listen for {addr}")]
    PortInUse {
        /// `MASTER_PORT`.
        port: u16,
        /// `host:port` rank 0 would listen for.
        addr: String,
    },
    /// torchrun's agent store could not be used.
    #[error("rendezvous failed: {cause}")]
    Store {
        /// What went wrong, with its causes.
        cause: String,
        /// The rendezvous timeout.
        timeout: Duration,
    },
    /// The agent store's key holds something that is no address.
    #[error(
        "key {key:?} in torchrun's agent store at {store_at} holds {text:?}, not rank 0's address"
    )]
    BadAgentAddress {
        /// The key.
        key: String,
        /// `host:port` of the store.
        store_at: String,
        /// What the key holds.
        text: String,
    },
    /// Rank 0 refused this rank (a misconfigured job).
    #[error("rendezvous failed: {msg}")]
    Refused {
        /// Rank 0's reason.
        msg: String,
    },
    /// The ranks do not share the rendezvous token: a rank without it, or
    /// with another, or a rank 0 that could not prove it (not this job's).
    #[error("rendezvous failed: {msg}")]
    Token {
        /// What was refused, and by whom.
        msg: String,
    },
    /// This rank reached rank 0, which then gave up waiting for the others.
    #[error("rendezvous failed: rank {rank} reached rank 0 at {address}, but {msg}")]
    RootGaveUp {
        /// This rank.
        rank: usize,
        /// `host:port` of rank 0.
        address: String,
        /// Rank 0's reason.
        msg: String,
    },
}

/// A collective that cannot run, or whose ranks do not agree.
#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    /// A buffer of an element type the collectives do not carry.
    #[error("collective buffers must be f32 or bf16, got {0:?}")]
    Kind(Kind),
    /// A buffer with gaps.
    #[error("collective buffers must be contiguous")]
    NotContiguous,
    /// A buffer on another device than the communicator.
    #[error("collective buffer is on {buffer:?}, the communicator on {comm:?}")]
    WrongDevice {
        /// The buffer's device.
        buffer: Device,
        /// The communicator's device.
        comm: Device,
    },
    /// Ranks called different operations (or lengths, or kinds).
    #[error("ranks diverged: rank 0 called {ours}, rank {peer} called {theirs}")]
    Diverged {
        /// Rank 0's call.
        ours: String,
        /// The rank that called something else.
        peer: usize,
        /// Its call.
        theirs: String,
    },
    /// A peer did not answer a CPU collective in time.
    #[error("rank {rank} waited {} for rank {peer}{} in a CPU {op} and gave up", fmt_secs(*.timeout), on_host(.host))]
    PeerTimeout {
        /// This rank.
        rank: usize,
        /// The silent rank.
        peer: usize,
        /// Its address, when known.
        host: Option<String>,
        /// The collective timeout.
        timeout: Duration,
        /// The operation (`all-reduce`, `broadcast`, `barrier`).
        op: &'static str,
    },
    /// A peer's connection broke during a CPU collective (it exited, or
    /// its node went away and its kernel reset the connection).
    #[error("rank {rank}: the connection to rank {peer}{} broke during a CPU {op} (did rank {peer} exit?)", on_host(.host))]
    PeerLost {
        /// This rank.
        rank: usize,
        /// The rank whose connection broke.
        peer: usize,
        /// Its address, when known.
        host: Option<String>,
        /// The operation (`all-reduce`, `broadcast`, `barrier`).
        op: &'static str,
        /// What the socket said.
        #[source]
        error: std::io::Error,
    },
    /// The rendezvous payload is no NCCL unique id.
    #[error("rendezvous delivered a {len}-byte NCCL id, expected {expected}")]
    NcclIdLength {
        /// Bytes delivered.
        len: usize,
        /// Bytes of an NCCL unique id.
        expected: usize,
    },
    /// `ncclCommInitRank` did not return in time.
    #[error(
        "NCCL communicator set-up timed out after {}: rank {rank} of {world_size} waited in ncclCommInitRank for the other ranks",
        fmt_secs(*.timeout)
    )]
    NcclInitTimeout {
        /// This rank.
        rank: usize,
        /// The ranks.
        world_size: usize,
        /// The set-up timeout.
        timeout: Duration,
    },
}
