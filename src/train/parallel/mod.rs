//! Data parallelism: one process per GPU (or CPU rank), gradients averaged
//! over large flat buckets after backward, parameters broadcast from rank 0.
//!
//! - [`launch`]: rank/world size from torchrun, SLURM or Kubernetes variables; `--gpus`.
//! - [`supervisor`]: `--gpus` starts one worker per GPU from this executable.
//! - [`rendezvous`]: ranks meet at rank 0's TCP server (NCCL unique id, CPU links).
//! - [`collective`]: the [`Collective`] trait; backends [`nccl`] (GPUs) and [`cpu`] (TCP).
//! - [`buckets`]: gradient bucketing and the start-of-run parameter broadcast.
//!
//! [`DataParallel`] ties them together for the trainer: build it once per
//! process with [`DataParallel::init`], call [`DataParallel::broadcast_parameters`]
//! before the first step and [`DataParallel::sync_gradients`] after each
//! backward. This module must not own the training loop, the data pipeline or
//! any output file besides the opt-in parameter-hash log.
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tch::{Device, Tensor};

use crate::env_vars as ev;
use crate::CliError;

pub mod buckets;
pub mod collective;
pub mod cpu;
pub mod cudart;
pub mod launch;
pub mod nccl;
pub mod rendezvous;
pub mod supervisor;

pub use buckets::{GradBuckets, DEFAULT_BUCKET_BYTES};
pub use collective::{Backend, Collective, Solo};
pub use launch::{LaunchInfo, LaunchSource};

/// The device a worker trains on, from its launch info and the visible GPUs:
/// none visible → CPU; one visible (a launcher pinned it, e.g. the `--gpus`
/// supervisor or SLURM `--gpus-per-task=1`) → `cuda:0`; several → `cuda:LOCAL_RANK`.
pub fn worker_device(launch: &LaunchInfo, visible_gpus: usize) -> anyhow::Result<Device> {
    match visible_gpus {
        0 => Ok(Device::Cpu),
        1 => Ok(Device::Cuda(0)),
        n if launch.local_rank < n => Ok(Device::Cuda(launch.local_rank)),
        n => Err(CliError::usage(format!(
            "local rank {} needs GPU {} but only {n} GPUs are visible on this node",
            launch.local_rank, launch.local_rank
        ))
        .with_hint("start at most one rank per visible GPU on each node (LOCAL_WORLD_SIZE)")
        .into()),
    }
}

/// Cumulative time spent in gradient synchronisation.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct SyncStats {
    /// Number of [`DataParallel::sync_gradients`] calls.
    pub calls: u64,
    /// Host time spent in them (enqueue time only on GPUs unless the caller synchronises).
    pub seconds: f64,
    /// Bytes all-reduced per call.
    pub bytes_per_call: usize,
}

/// The data-parallel context of one process.
pub struct DataParallel {
    launch: LaunchInfo,
    device: Device,
    collective: Box<dyn Collective>,
    buckets: Option<GradBuckets>,
    bucket_bytes: usize,
    hash_log: Option<std::fs::File>,
    stats: SyncStats,
}

impl std::fmt::Debug for DataParallel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataParallel")
            .field("launch", &self.launch)
            .field("device", &self.device)
            .field("backend", &self.collective.backend())
            .finish()
    }
}

impl DataParallel {
    /// A world of one (no communication).
    pub fn single(device: Device) -> Self {
        Self::with_collective(LaunchInfo::single(), device, Box::new(Solo))
    }

    /// Wraps an existing collective (tests, custom launchers).
    pub fn with_collective(
        launch: LaunchInfo,
        device: Device,
        collective: Box<dyn Collective>,
    ) -> Self {
        let hash_log = std::env::var_os(ev::IMGCTL_PARAM_HASH_DIR).and_then(|d| {
            let p = PathBuf::from(d).join(format!("rank-{}.txt", launch.rank));
            std::fs::File::create(p).ok()
        });
        Self {
            launch,
            device,
            collective,
            buckets: None,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            hash_log,
            stats: SyncStats::default(),
        }
    }

    /// Joins the job described by `launch` on `device`: NCCL for a CUDA
    /// device (also for a world of one), the CPU backend over TCP for CPU
    /// ranks, nothing for a single CPU process. Every wait is bounded by `timeout`.
    pub fn init(launch: LaunchInfo, device: Device, timeout: Duration) -> anyhow::Result<Self> {
        match device {
            Device::Cuda(index) => {
                let rt = cudart::CudaRuntime::locate()?;
                rt.set_device(index)?;
                let lib = Arc::new(nccl::NcclLibrary::locate()?);
                let l = lib.clone();
                let session =
                    rendezvous::rendezvous(&launch, move || Ok(l.unique_id()?.to_vec()), timeout)?;
                let coll = nccl::NcclCollective::init(
                    lib,
                    &session.payload,
                    session.rank,
                    session.world_size,
                    device,
                    timeout,
                )?;
                Ok(Self::with_collective(launch, device, Box::new(coll)))
            }
            _ if launch.world_size == 1 => {
                Ok(Self::with_collective(launch, device, Box::new(Solo)))
            }
            _ => {
                let session = rendezvous::rendezvous(&launch, || Ok(Vec::new()), timeout)?;
                let coll = cpu::CpuCollective::new(session, cpu::COLLECTIVE_TIMEOUT)?;
                Ok(Self::with_collective(launch, device, Box::new(coll)))
            }
        }
    }

    /// Sets the gradient bucket cap (default [`DEFAULT_BUCKET_BYTES`]); takes
    /// effect before the first [`DataParallel::sync_gradients`].
    pub fn set_bucket_bytes(&mut self, bytes: usize) {
        self.bucket_bytes = bytes.max(1);
        self.buckets = None;
    }

    /// The launch information.
    pub fn launch(&self) -> &LaunchInfo {
        &self.launch
    }
    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.launch.rank
    }
    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.launch.world_size
    }
    /// Whether this rank writes outputs (rank 0).
    pub fn is_primary(&self) -> bool {
        self.launch.rank == 0
    }
    /// The device this rank trains on.
    pub fn device(&self) -> Device {
        self.device
    }
    /// The collective engine.
    pub fn backend(&self) -> Backend {
        self.collective.backend()
    }
    /// The collective itself (benchmarks, custom reductions).
    pub fn collective(&mut self) -> &mut dyn Collective {
        self.collective.as_mut()
    }
    /// Gradient-sync statistics so far.
    pub fn stats(&self) -> SyncStats {
        self.stats
    }
    /// Bytes per gradient bucket (empty before the first sync).
    pub fn bucket_layout(&self) -> Vec<usize> {
        self.buckets
            .as_ref()
            .map(|b| b.bucket_bytes())
            .unwrap_or_default()
    }

    fn layout(&mut self, params: &[Tensor]) -> &mut GradBuckets {
        let cap = self.bucket_bytes;
        self.buckets
            .get_or_insert_with(|| GradBuckets::new(params, cap))
    }

    /// Copies rank 0's parameters (and any other state tensors, e.g. EMA
    /// weights or optimizer moments after a resume) to every rank.
    pub fn broadcast_parameters(&mut self, params: &[Tensor]) -> anyhow::Result<()> {
        if self.world_size() == 1 {
            return Ok(());
        }
        let mut b = GradBuckets::new(params, self.bucket_bytes);
        b.broadcast_params(params, self.collective.as_mut())
    }

    /// Averages the gradients of `params` over all ranks (after backward,
    /// before clipping and the optimizer step). The same list, in the same
    /// order, on every rank and every step.
    pub fn sync_gradients(&mut self, params: &[Tensor]) -> anyhow::Result<()> {
        if self.world_size() == 1 {
            return Ok(());
        }
        let t = Instant::now();
        // Take the layout out to borrow the collective alongside it.
        self.layout(params);
        let mut buckets = self.buckets.take().expect("layout just built");
        let res = buckets.all_reduce_avg(params, self.collective.as_mut());
        self.stats.bytes_per_call = buckets.bucket_bytes().iter().sum();
        self.buckets = Some(buckets);
        self.stats.calls += 1;
        self.stats.seconds += t.elapsed().as_secs_f64();
        res
    }

    /// Waits until every rank gets here.
    pub fn barrier(&mut self) -> anyhow::Result<()> {
        self.collective.barrier()
    }

    /// With `IMGCTL_PARAM_HASH_DIR` set: appends `step <hash>` to this rank's
    /// `rank-N.txt` there, so tests can prove every rank holds the same bits.
    pub fn record_param_hash(&mut self, step: u64, params: &[Tensor]) -> anyhow::Result<()> {
        if let Some(f) = &mut self.hash_log {
            writeln!(f, "{step} {}", buckets::tensors_hash(params))?;
        }
        Ok(())
    }
}

/// The rendezvous timeout from `--rendezvous-timeout` (seconds), else the default.
pub fn rendezvous_timeout(secs: Option<f64>) -> anyhow::Result<Duration> {
    match secs {
        None => Ok(rendezvous::DEFAULT_TIMEOUT),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(CliError::usage(format!(
            "--rendezvous-timeout {s} is not a positive number of seconds"
        ))
        .with_hint("e.g. --rendezvous-timeout 300 (or IMGCTL_RENDEZVOUS_TIMEOUT=300)")
        .into()),
    }
}
