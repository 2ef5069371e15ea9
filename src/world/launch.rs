//! Who am I in the job: rank and world size from the launcher's environment,
//! and the `--gpus` selection.
//!
//! Owns the parsing of torchrun / Kubernetes PyTorchJob variables (`RANK`,
//! `LOCAL_RANK`, `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`,
//! and torchrun's `TORCHELASTIC_USE_AGENT_STORE`/`_RUN_ID`/`_RESTART_COUNT`),
//! SLURM variables (`SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NTASKS`, …), and
//! the devices a [`GpuSelection`] (`--gpus`, parsed by [`crate::gpus`]) gives
//! the local workers ([`resolve_gpus`]). It reads the environment through a lookup function so
//! tests can hand it a map; it must not open sockets or start processes.
use super::error::LaunchError;
use crate::env_vars as ev;
use crate::gpus::{GpuId, GpuSelection};

/// torchrun's default rendezvous port (`--master-port`, default 29500:
/// <https://pytorch.org/docs/stable/elastic/run.html>); used under SLURM when
/// `MASTER_PORT` is not set.
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// Which launcher set up this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchSource {
    /// No launcher: one process, world size 1.
    Single,
    /// torchrun, a Kubernetes PyTorchJob, or imgctl's own `--gpus` supervisor
    /// (all set the torchrun variables).
    Torchrun,
    /// `srun` under SLURM.
    Slurm,
}

/// This process's place in a data-parallel job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LaunchInfo {
    /// Global rank, 0-based.
    pub rank: usize,
    /// Rank on this node (selects the GPU when several are visible).
    pub local_rank: usize,
    /// Number of ranks in the job.
    pub world_size: usize,
    /// Number of ranks on this node.
    pub local_world_size: usize,
    /// Host of rank 0's rendezvous server.
    pub master_addr: String,
    /// Port of rank 0's rendezvous server.
    pub master_port: u16,
    /// Where the values came from.
    pub source: LaunchSource,
    /// Set when `MASTER_PORT` is torchrun's agent store, not ours
    /// (`TORCHELASTIC_USE_AGENT_STORE=True`).
    pub agent_store: Option<AgentStore>,
    /// The rendezvous's shared secret, when the environment gives one
    /// ([`super::auth`]); never serialized.
    #[serde(skip)]
    pub token: Option<super::auth::Token>,
}

/// torchrun's elastic agent holds a c10d TCPStore at `MASTER_ADDR:MASTER_PORT`
/// and lends it to its workers; rank 0 then listens on a port of its own and
/// publishes its address in that store under [`AgentStore::address_key`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AgentStore {
    /// `TORCHELASTIC_RUN_ID`.
    pub run_id: String,
    /// `TORCHELASTIC_RESTART_COUNT` (0 when unset).
    pub restart_count: u64,
}

impl AgentStore {
    /// The store key of rank 0's rendezvous address (`ip:port`): namespaced
    /// by job and restart, so a restarted job never reads the address of its
    /// previous attempt. torch's own workers rely on the same count
    /// (`PrefixStore("/worker/attempt_{TORCHELASTIC_RESTART_COUNT}")` in
    /// torch.distributed.rendezvous) to agree across nodes.
    pub fn address_key(&self) -> String {
        format!(
            "imgctl/{}/{}/rendezvous_address",
            self.run_id, self.restart_count
        )
    }
}

impl LaunchInfo {
    /// Rank `rank` of `world` ranks on this host, rendezvous at
    /// 127.0.0.1:`port` (the shape torchrun gives a one-node job; tests use it).
    pub fn loopback(rank: usize, world: usize, port: u16) -> Self {
        Self {
            rank,
            local_rank: rank,
            world_size: world,
            local_world_size: world,
            master_addr: "127.0.0.1".into(),
            master_port: port,
            source: LaunchSource::Torchrun,
            agent_store: None,
            token: None,
        }
    }

    /// A single process: rank 0 of 1.
    pub fn single() -> Self {
        Self {
            rank: 0,
            local_rank: 0,
            world_size: 1,
            local_world_size: 1,
            master_addr: "127.0.0.1".into(),
            master_port: DEFAULT_MASTER_PORT,
            source: LaunchSource::Single,
            agent_store: None,
            token: None,
        }
    }

    /// Whether this process writes outputs (checkpoints, samples, metrics).
    pub fn is_primary(&self) -> bool {
        self.rank == 0
    }

    /// Reads the launch environment of this process.
    pub fn from_process_env() -> anyhow::Result<Self> {
        Self::from_env(|k| std::env::var(k).ok())
    }

    /// Reads the launch environment through `get`: `RANK` set means torchrun
    /// (or a PyTorchJob, or the supervisor; it wins over SLURM's variables,
    /// because torchrun under SLURM sets both); else `SLURM_PROCID` means
    /// srun (a batch script may export `WORLD_SIZE` for other tools: it must
    /// then agree with `SLURM_NTASKS`); none of them: single.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let token = super::auth::Token::from_env(&get)?;
        let with_token = |info: LaunchInfo| LaunchInfo { token, ..info };
        if get(ev::RANK).is_some() {
            return torchrun(&get).map(with_token);
        }
        if get(ev::SLURM_PROCID).is_some() && get(ev::SLURM_NTASKS).is_some() {
            let info = slurm(&get)?;
            if let Some(w) = env_usize(&get, ev::WORLD_SIZE)? {
                if w != info.world_size {
                    return Err(LaunchError::SlurmWorldSize {
                        world: w,
                        ntasks: info.world_size,
                    }
                    .into());
                }
            }
            return Ok(with_token(info));
        }
        if let Some(w) = get(ev::WORLD_SIZE) {
            return Err(LaunchError::WorldSizeWithoutRank { world: w }.into());
        }
        Ok(Self::single())
    }
}

fn env_usize(get: &impl Fn(&str) -> Option<String>, key: &str) -> anyhow::Result<Option<usize>> {
    match get(key) {
        None => Ok(None),
        Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
            LaunchError::NotACount {
                key: key.to_string(),
                value: v,
            }
            .into()
        }),
    }
}

fn env_port(get: &impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<u16>> {
    match get(ev::MASTER_PORT) {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u16>() {
            Ok(p) if p > 0 => Ok(Some(p)),
            _ => Err(LaunchError::BadPort { value: v }.into()),
        },
    }
}

fn check_ranks(info: &LaunchInfo, rank_var: &str, size_var: &str) -> anyhow::Result<()> {
    if info.world_size == 0 {
        return Err(LaunchError::NoRanks {
            size_var: size_var.to_string(),
        }
        .into());
    }
    if info.rank >= info.world_size {
        return Err(LaunchError::RankOutOfRange {
            rank_var: rank_var.to_string(),
            rank: info.rank,
            size_var: size_var.to_string(),
            world: info.world_size,
        }
        .into());
    }
    if info.local_world_size == 0 || info.local_rank >= info.local_world_size {
        return Err(LaunchError::LocalRankOutOfRange {
            local_rank: info.local_rank,
            local_world: info.local_world_size,
        }
        .into());
    }
    Ok(())
}

fn torchrun(get: &impl Fn(&str) -> Option<String>) -> anyhow::Result<LaunchInfo> {
    let missing = |k: &str| -> anyhow::Error { LaunchError::Missing { key: k.to_string() }.into() };
    let rank = env_usize(get, ev::RANK)?.ok_or_else(|| missing(ev::RANK))?;
    let world_size = env_usize(get, ev::WORLD_SIZE)?.ok_or_else(|| missing(ev::WORLD_SIZE))?;
    // A PyTorchJob without torchrun sets no LOCAL_*: one process per pod.
    let local_rank = env_usize(get, ev::LOCAL_RANK)?.unwrap_or(0);
    let local_world_size = env_usize(get, ev::LOCAL_WORLD_SIZE)?.unwrap_or(local_rank + 1);
    let (master_addr, master_port) = if world_size > 1 {
        (
            get(ev::MASTER_ADDR).ok_or_else(|| missing(ev::MASTER_ADDR))?,
            env_port(get)?.ok_or_else(|| missing(ev::MASTER_PORT))?,
        )
    } else {
        (
            get(ev::MASTER_ADDR).unwrap_or_else(|| "127.0.0.1".into()),
            env_port(get)?.unwrap_or(DEFAULT_MASTER_PORT),
        )
    };
    let info = LaunchInfo {
        rank,
        local_rank,
        world_size,
        local_world_size,
        master_addr: master_addr.trim().to_string(),
        master_port,
        source: LaunchSource::Torchrun,
        agent_store: agent_store(get)?,
        token: None,
    };
    check_ranks(&info, ev::RANK, ev::WORLD_SIZE)?;
    Ok(info)
}

/// torchrun's agent store, when it lends it (`TORCHELASTIC_USE_AGENT_STORE`
/// is compared with Python's `str(True)`, as torch/distributed/rendezvous.py does).
fn agent_store(get: &impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<AgentStore>> {
    if get(ev::TORCHELASTIC_USE_AGENT_STORE)
        .as_deref()
        .map(str::trim)
        != Some("True")
    {
        return Ok(None);
    }
    let run_id = get(ev::TORCHELASTIC_RUN_ID).unwrap_or_else(|| "none".into());
    let restart_count = match get(ev::TORCHELASTIC_RESTART_COUNT) {
        None => 0,
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map_err(|_| anyhow::Error::from(LaunchError::BadRestartCount { value: v }))?,
    };
    Ok(Some(AgentStore {
        run_id: run_id.trim().to_string(),
        restart_count,
    }))
}

fn slurm(get: &impl Fn(&str) -> Option<String>) -> anyhow::Result<LaunchInfo> {
    let rank = env_usize(get, ev::SLURM_PROCID)?.unwrap_or(0);
    let world_size = env_usize(get, ev::SLURM_NTASKS)?.unwrap_or(1);
    let local_rank = env_usize(get, ev::SLURM_LOCALID)?.unwrap_or(0);
    // SLURM_NTASKS_PER_NODE is only set with --ntasks-per-node; otherwise the
    // first entry of SLURM_TASKS_PER_NODE ("4(x2),2") gives this layout's width.
    let local_world_size = match env_usize(get, ev::SLURM_NTASKS_PER_NODE) {
        Ok(Some(n)) => n,
        _ => get(ev::SLURM_TASKS_PER_NODE)
            .and_then(|s| first_tasks_per_node(&s))
            .unwrap_or(local_rank + 1),
    }
    .max(local_rank + 1);
    // Task 0 runs on the first node of the step (srun's default block
    // distribution), which is the job's first node unless the step was
    // given a node list of its own. SLURM_LAUNCH_NODE_IPADDR is not rank 0's
    // host: it is where srun ran (a login node after salloc).
    let list = get(ev::SLURM_STEP_NODELIST)
        .map(|l| (ev::SLURM_STEP_NODELIST, l))
        .or_else(|| get(ev::SLURM_JOB_NODELIST).map(|l| (ev::SLURM_JOB_NODELIST, l)));
    let master_addr = match get(ev::MASTER_ADDR) {
        Some(a) => a,
        None => match list {
            Some((var, l)) => first_host(var, &l)?,
            None if world_size == 1 => "127.0.0.1".into(),
            None => return Err(LaunchError::NoSlurmHost.into()),
        },
    };
    let master_port = env_port(get)?.unwrap_or(DEFAULT_MASTER_PORT);
    let info = LaunchInfo {
        rank,
        local_rank,
        world_size,
        local_world_size,
        master_addr: master_addr.trim().to_string(),
        master_port,
        source: LaunchSource::Slurm,
        agent_store: None,
        token: None,
    };
    check_ranks(&info, ev::SLURM_PROCID, ev::SLURM_NTASKS)?;
    Ok(info)
}

/// The first count of a SLURM tasks-per-node string (`"4(x2),2"` → 4).
fn first_tasks_per_node(s: &str) -> Option<usize> {
    let first = s.split(',').next()?;
    first.split('(').next()?.trim().parse().ok()
}

/// The first host of a SLURM compressed host list: `node[01-04,07],gpu5` →
/// `node01`; `a1,b2` → `a1`; `gpu-[3,5]` → `gpu-3` (format: `scontrol show
/// hostnames`). `var` names the variable it came from, for the error.
pub fn first_host(var: &str, nodelist: &str) -> anyhow::Result<String> {
    let bad = || -> anyhow::Error {
        LaunchError::BadNodelist {
            var: var.to_string(),
            nodelist: nodelist.to_string(),
        }
        .into()
    };
    let s = nodelist.trim();
    // The first entry ends at the first comma outside brackets.
    let mut depth = 0i32;
    let mut end = s.len();
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let entry = &s[..end];
    if entry.is_empty() || depth < 0 {
        return Err(bad());
    }
    match entry.find('[') {
        None => Ok(entry.to_string()),
        Some(open) => {
            let close = entry[open..].find(']').ok_or_else(bad)? + open;
            let prefix = &entry[..open];
            let suffix = &entry[close + 1..];
            let range = entry[open + 1..close].split(',').next().ok_or_else(bad)?;
            let lo = range.split('-').next().ok_or_else(bad)?.trim();
            if lo.is_empty() || !lo.chars().all(|c| c.is_ascii_digit()) || prefix.is_empty() {
                return Err(bad());
            }
            Ok(format!("{prefix}{lo}{suffix}"))
        }
    }
}

/// Matches a selection against `visible` CUDA devices and returns the device
/// indices to use, one worker each. Local workers are placed by index: a
/// selection that names UUIDs is refused (CUDA_VISIBLE_DEVICES takes them).
pub fn resolve_gpus(req: &GpuSelection, visible: usize) -> anyhow::Result<Vec<usize>> {
    if let GpuSelection::Devices(ids) = req {
        let uuids: Vec<String> = ids
            .iter()
            .filter_map(|id| match id {
                GpuId::Uuid(u) => Some(u.clone()),
                GpuId::Index(_) => None,
            })
            .collect();
        if !uuids.is_empty() {
            return Err(LaunchError::GpuUuids { uuids }.into());
        }
    }
    if visible == 0 {
        return Err(LaunchError::NoCuda {
            requested: req.to_string(),
        }
        .into());
    }
    match req {
        GpuSelection::All => Ok((0..visible).collect()),
        GpuSelection::Count(n) if *n as usize <= visible => Ok((0..*n as usize).collect()),
        GpuSelection::Count(n) => Err(LaunchError::TooManyGpus {
            requested: *n as usize,
            visible,
        }
        .into()),
        GpuSelection::Devices(ids) => {
            let ids: Vec<usize> = ids
                .iter()
                .filter_map(|id| match id {
                    GpuId::Index(i) => Some(*i as usize),
                    GpuId::Uuid(_) => None,
                })
                .collect();
            if let Some(bad) = ids.iter().find(|&&i| i >= visible) {
                return Err(LaunchError::NoSuchGpu { id: *bad, visible }.into());
            }
            Ok(ids)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn torchrun_vars() {
        let i = LaunchInfo::from_env(env(&[
            ("RANK", "5"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29400"),
        ]))
        .unwrap();
        assert_eq!(
            (i.rank, i.local_rank, i.world_size, i.local_world_size),
            (5, 1, 8, 4)
        );
        assert_eq!((i.master_addr.as_str(), i.master_port), ("10.0.0.1", 29400));
        assert_eq!(i.source, LaunchSource::Torchrun);
    }

    #[test]
    fn pytorchjob_without_local_vars() {
        let i = LaunchInfo::from_env(env(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "job-master-0"),
            ("MASTER_PORT", "23456"),
        ]))
        .unwrap();
        assert_eq!((i.rank, i.local_rank, i.local_world_size), (1, 0, 1));
    }

    #[test]
    fn torchrun_errors() {
        let e = LaunchInfo::from_env(env(&[("RANK", "2"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("MASTER_ADDR is not set"), "{e}");
        let e = LaunchInfo::from_env(env(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("RANK=2 is out of range"), "{e}");
        let e = LaunchInfo::from_env(env(&[("RANK", "0")])).unwrap_err();
        assert!(
            e.to_string().contains("WORLD_SIZE is not set, but RANK is"),
            "{e}"
        );
        let e = LaunchInfo::from_env(env(&[("RANK", "x"), ("WORLD_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("RANK=\"x\""), "{e}");
        let e = LaunchInfo::from_env(env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "70000"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("MASTER_PORT"), "{e}");
    }

    #[test]
    fn slurm_vars() {
        let i = LaunchInfo::from_env(env(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_TASKS_PER_NODE", "2(x2)"),
            ("SLURM_JOB_NODELIST", "gpu[07-08]"),
        ]))
        .unwrap();
        assert_eq!(
            (i.rank, i.local_rank, i.world_size, i.local_world_size),
            (3, 1, 4, 2)
        );
        assert_eq!(i.master_addr, "gpu07");
        assert_eq!(i.master_port, DEFAULT_MASTER_PORT);
        // srun run from a login node after salloc: the launch node is not
        // rank 0's host; the step's first node is.
        let i = LaunchInfo::from_env(env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_NTASKS_PER_NODE", "1"),
            ("SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"),
            ("SLURM_STEP_NODELIST", "b,c"),
            ("SLURM_JOB_NODELIST", "a,b,c"),
            ("MASTER_PORT", "29600"),
        ]))
        .unwrap();
        assert_eq!((i.master_addr.as_str(), i.master_port), ("b", 29600));
        // Without a step list, the job's first node; MASTER_ADDR wins over both.
        let base = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"),
            ("SLURM_JOB_NODELIST", "gpu[3-4]"),
        ];
        let i = LaunchInfo::from_env(env(&base)).unwrap();
        assert_eq!(i.master_addr, "gpu3");
        let i = LaunchInfo::from_env(env(&[&base[..], &[("MASTER_ADDR", "10.9.9.9")]].concat()))
            .unwrap();
        assert_eq!(i.master_addr, "10.9.9.9");
    }

    #[test]
    fn an_sbatch_script_may_export_world_size() {
        let base = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_NODELIST", "n[1-2]"),
        ];
        let i = LaunchInfo::from_env(env(&[&base[..], &[("WORLD_SIZE", "2")]].concat())).unwrap();
        assert_eq!(
            (i.rank, i.world_size, i.source),
            (1, 2, LaunchSource::Slurm)
        );
        let e =
            LaunchInfo::from_env(env(&[&base[..], &[("WORLD_SIZE", "4")]].concat())).unwrap_err();
        assert!(
            e.to_string()
                .contains("WORLD_SIZE=4 disagrees with SLURM_NTASKS=2"),
            "{e}"
        );
        // WORLD_SIZE alone is a half-set launch, not a single process.
        let e = LaunchInfo::from_env(env(&[("WORLD_SIZE", "2")])).unwrap_err();
        assert!(e.to_string().contains("RANK is not"), "{e}");
        assert!(
            matches!(
                e.downcast_ref::<LaunchError>(),
                Some(LaunchError::WorldSizeWithoutRank { world }) if world == "2"
            ),
            "{e:?}"
        );
    }

    #[test]
    fn torchrun_agent_store() {
        let base = [
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "localhost"),
            ("MASTER_PORT", "29500"),
        ];
        let i = LaunchInfo::from_env(env(&base)).unwrap();
        assert_eq!(i.agent_store, None);
        let i = LaunchInfo::from_env(env(&[
            &base[..],
            &[
                ("TORCHELASTIC_USE_AGENT_STORE", "True"),
                ("TORCHELASTIC_RUN_ID", "abc"),
                ("TORCHELASTIC_RESTART_COUNT", "3"),
            ],
        ]
        .concat()))
        .unwrap();
        let a = i.agent_store.unwrap();
        assert_eq!(a.address_key(), "imgctl/abc/3/rendezvous_address");
        let i = LaunchInfo::from_env(env(&[
            &base[..],
            &[("TORCHELASTIC_USE_AGENT_STORE", "False")],
        ]
        .concat()))
        .unwrap();
        assert_eq!(i.agent_store, None);
    }

    #[test]
    fn nodelists() {
        let first = |l: &str| first_host("SLURM_JOB_NODELIST", l);
        assert_eq!(first("node[01-04,07],gpu5").unwrap(), "node01");
        assert_eq!(first("a1,b2").unwrap(), "a1");
        assert_eq!(first("gpu-[3,5]").unwrap(), "gpu-3");
        assert_eq!(first("rack[2-3]-n1").unwrap(), "rack2-n1");
        assert!(first("[1-2]").is_err());
        let e = first_host("SLURM_STEP_NODELIST", "").unwrap_err();
        assert!(e.to_string().starts_with("SLURM_STEP_NODELIST=\"\""), "{e}");
    }

    #[test]
    fn no_launcher_is_single() {
        assert_eq!(
            LaunchInfo::from_env(env(&[])).unwrap(),
            LaunchInfo::single()
        );
    }

    #[test]
    fn gpus_resolution() {
        let resolve = |s: &str, visible| resolve_gpus(&GpuSelection::parse(s).unwrap(), visible);
        assert_eq!(resolve("all", 2).unwrap(), vec![0, 1]);
        assert_eq!(resolve("1", 8).unwrap(), vec![0]);
        assert_eq!(resolve("3,", 4).unwrap(), vec![3]);
        assert_eq!(resolve("device=2", 4).unwrap(), vec![2]);
        assert_eq!(resolve("2,0", 4).unwrap(), vec![2, 0]);
        let e = resolve("9", 1).unwrap_err();
        assert_eq!(e.to_string(), "requested 9 GPUs but only 1 is visible");
        let e = resolve("0,5", 2).unwrap_err();
        assert!(
            e.to_string()
                .contains("GPU 5 requested but only 2 are visible"),
            "{e}"
        );
        let e = resolve("1", 0).unwrap_err();
        assert!(e.to_string().contains("no CUDA device is visible"), "{e}");
        // UUIDs place no local worker, with GPUs or without.
        for visible in [0, 8] {
            let e = resolve("0,GPU-8f3c,MIG-1", visible).unwrap_err();
            assert_eq!(
                e.to_string(),
                "local workers are placed by device index, not by UUID (GPU-8f3c, MIG-1)"
            );
        }
    }
}
