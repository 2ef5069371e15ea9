//! **Data parallelism** (part of `train/`): one process per GPU (or CPU rank),
//! gradients averaged over large flat buckets after backward, parameters
//! broadcast from rank 0.
//!
//! - [`supervisor`]: `--gpus` starts one worker per GPU from this executable.
//! - [`buckets`]: gradient bucketing and the start-of-run parameter broadcast.
//! - [`hooks`] and [`overlap`]: the all-reduce of each bucket starts as soon as
//!   backward has finished its gradients, while backward goes on (DDP's overlap).
//!
//! The job's identity, rendezvous, collectives and the watchdog they use are
//! the world's ([`crate::world`]), shared with `verify --fleet`.
//!
//! [`DataParallel`] ties them together for the trainer: built once per
//! process with [`DataParallel::init`], it is the trainer's [`GradSync`]
//! (parameters broadcast from rank 0 before the first step, flat gradients
//! averaged in buckets during or after every backward). It meets the trainer
//! only through that seam, [`crate::train::sync`]: nothing here imports the
//! trainer or the run. This module must not own the training loop, the data
//! pipeline or any output file besides the opt-in parameter-hash log.
//!
//! Part: the train wing (`docs/architecture.md`).
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tch::{Device, Tensor};

use crate::env_vars as ev;
use crate::train::sync::{backward_then_sync, GradLayout, GradSync, SyncStats};

pub mod buckets;
pub mod hooks;
pub mod overlap;
pub mod supervisor;

use crate::world::heartbeat::{self, Heartbeat};
use crate::world::{collective, rendezvous, tcpstore};
use crate::world::{Backend, Collective, LaunchError, LaunchInfo, RendezvousError, Solo};
pub use buckets::DEFAULT_BUCKET_BYTES;

/// The device a worker trains on, from its launch info and the visible GPUs:
/// none visible → CPU; one visible (a launcher pinned it, e.g. the `--gpus`
/// supervisor or SLURM `--gpus-per-task=1`) → `cuda:0`; several → `cuda:LOCAL_RANK`.
pub fn worker_device(launch: &LaunchInfo, visible_gpus: usize) -> anyhow::Result<Device> {
    match visible_gpus {
        0 => Ok(Device::Cpu),
        1 => Ok(Device::Cuda(0)),
        n if launch.local_rank < n => Ok(Device::Cuda(launch.local_rank)),
        n => Err(LaunchError::LocalRankWithoutGpu {
            local_rank: launch.local_rank,
            visible: n,
        }
        .into()),
    }
}

/// The data-parallel context of one process; the trainer's [`GradSync`].
pub struct DataParallel {
    launch: LaunchInfo,
    device: Device,
    collective: Box<dyn Collective>,
    /// Where rank 0's rendezvous server listened (for messages).
    address: String,
    bucket_bytes: usize,
    hash_log: Option<std::fs::File>,
    /// The flat parameters seen at the first broadcast (shares storage with
    /// the trainer's master weights), for the parameter-hash log.
    params: Option<Tensor>,
    /// The overlapped all-reduce, when [`GradSync::prepare`] asked for it.
    overlap: Option<overlap::Overlap>,
    stats: SyncStats,
    /// This rank's heartbeat thread (several ranks; dropped with the run).
    heartbeat: Option<Heartbeat>,
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
            address: tcpstore::host_port(&launch.master_addr, launch.master_port),
            launch,
            device,
            collective,
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            hash_log,
            params: None,
            overlap: None,
            stats: SyncStats::default(),
            heartbeat: None,
        }
    }

    /// Joins the job described by `launch` on `device`: NCCL for a CUDA
    /// device (also for a world of one), the CPU backend over TCP for CPU
    /// ranks, nothing for a single CPU process. The rendezvous and the
    /// communicator's set-up are bounded by `timeout`, every collective
    /// after them by `collective` ([`crate::world::collective_timeout`]).
    /// With `heartbeat`, every rank of several beats on a thread of its own
    /// from the rendezvous on ([`Heartbeat`]), its beats carrying
    /// [`heartbeat::progress`]; a silent peer is `fire`d within its timeout.
    pub fn init(
        launch: LaunchInfo,
        device: Device,
        timeout: Duration,
        collective: Duration,
        heartbeat: Option<(heartbeat::Settings, heartbeat::FireAction)>,
    ) -> anyhow::Result<Self> {
        let beat = |session: &mut rendezvous::Session| match heartbeat {
            Some((settings, fire)) => {
                Heartbeat::start(session, settings, heartbeat::progress(), fire, true)
            }
            None => Ok(None),
        };
        match device {
            Device::Cuda(index) => {
                let rt = crate::sys::cudart::CudaRuntime::locate()?;
                rt.set_device(index)?;
                let lib = Arc::new(crate::sys::nccl::NcclLibrary::locate()?);
                let l = lib.clone();
                let mut session =
                    rendezvous::rendezvous(&launch, move || Ok(l.unique_id()?.to_vec()), timeout)?;
                let hb = beat(&mut session)?;
                let coll = collective::nccl::NcclCollective::init(
                    lib,
                    &session.payload,
                    session.rank,
                    session.world_size,
                    device,
                    timeout,
                    collective,
                )?;
                let mut dp = Self::with_collective(launch, device, Box::new(coll));
                dp.address = session.address;
                dp.heartbeat = hb;
                Ok(dp)
            }
            _ if launch.world_size == 1 => {
                Ok(Self::with_collective(launch, device, Box::new(Solo)))
            }
            _ => {
                let mut session = rendezvous::rendezvous(&launch, || Ok(Vec::new()), timeout)?;
                let hb = beat(&mut session)?;
                let address = session.address.clone();
                let coll = collective::cpu::CpuCollective::new(session, collective)?;
                let mut dp = Self::with_collective(launch, device, Box::new(coll));
                dp.address = address;
                dp.heartbeat = hb;
                Ok(dp)
            }
        }
    }

    /// Sets the gradient bucket cap (default [`DEFAULT_BUCKET_BYTES`]).
    pub fn set_bucket_bytes(&mut self, bytes: usize) {
        self.bucket_bytes = bytes.max(1);
    }

    /// Where rank 0's rendezvous server listened (`host:port`, IPv6 in brackets).
    pub fn rendezvous_address(&self) -> &str {
        &self.address
    }

    /// The launch information.
    pub fn launch(&self) -> &LaunchInfo {
        &self.launch
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

    /// Waits until every rank gets here.
    pub fn barrier(&mut self) -> anyhow::Result<()> {
        self.collective.barrier()
    }

    /// Counts one gradient sync of `reduced` in `buckets` collective calls
    /// and writes the hash log.
    fn record_sync(&mut self, reduced: &Tensor, buckets: usize, seconds: f64) {
        self.stats.calls += 1;
        self.stats.buckets += buckets as u64;
        self.stats.seconds += seconds;
        self.stats.bytes_per_sync = reduced.numel() * reduced.kind().elt_size_in_bytes();
        if self.hash_log.is_some() {
            // Step k's averaged gradients, and the parameters they update
            // (the result of step k-1): equal on every rank, bit for bit.
            let step = self.stats.calls;
            self.log_hash(&format!("step {step} grads"), reduced);
            if let Some(p) = self.params.as_ref().map(|p| p.shallow_clone()) {
                self.log_hash(&format!("step {step} params-before"), &p);
            }
        }
    }

    fn log_hash(&mut self, label: &str, t: &Tensor) {
        if let Some(f) = &mut self.hash_log {
            let _ = writeln!(f, "{label} {}", buckets::tensors_hash(&[t.shallow_clone()]));
        }
    }
}

impl GradSync for DataParallel {
    fn rank(&self) -> usize {
        self.launch.rank
    }
    fn world_size(&self) -> usize {
        self.launch.world_size
    }
    fn broadcast_params(&mut self, flat_params: &Tensor) -> anyhow::Result<()> {
        // The first broadcast carries the master weights (the trainer then
        // broadcasts the EMA): remember them for the hash log.
        let first = self.params.is_none();
        if first {
            self.params = Some(flat_params.shallow_clone());
        }
        buckets::broadcast_flat(flat_params, self.bucket_bytes, self.collective.as_mut())?;
        if first {
            self.log_hash("start params", &flat_params.shallow_clone());
        }
        Ok(())
    }
    fn prepare(&mut self, layout: GradLayout) -> anyhow::Result<()> {
        // Drop earlier hooks first: clearing them later would remove the new ones.
        self.overlap = None;
        self.stats.overlapped = false;
        self.set_bucket_bytes(layout.bucket_cap_bytes);
        // Overlap needs something to overlap: NCCL (also with one rank, so
        // `--gpus 1` runs the real path) or several CPU ranks.
        if !layout.overlap || self.collective.backend() == Backend::Single {
            return Ok(());
        }
        self.overlap = Some(overlap::Overlap::new(
            layout.params,
            layout.reduce_elem_bytes,
            self.bucket_bytes,
        )?);
        self.stats.overlapped = true;
        Ok(())
    }
    fn backward_and_sync(
        &mut self,
        backward: &mut dyn FnMut() -> anyhow::Result<()>,
        grads: &Tensor,
        reduce_in: Option<&Tensor>,
    ) -> anyhow::Result<()> {
        let Some(ov) = self.overlap.as_mut() else {
            return backward_then_sync(self, backward, grads, reduce_in);
        };
        let step = ov.run(self.collective.as_mut(), grads, reduce_in, backward)?;
        ov.agree_order(self.collective.as_mut(), self.device)?;
        self.stats.buckets_during_backward += step.started_during_backward as u64;
        let reduced = reduce_in.unwrap_or(grads);
        self.record_sync(reduced, step.buckets, step.collective_seconds);
        Ok(())
    }
    fn sync_grads(&mut self, flat_grads: &Tensor) -> anyhow::Result<()> {
        let t = Instant::now();
        let n =
            buckets::all_reduce_avg_flat(flat_grads, self.bucket_bytes, self.collective.as_mut())?;
        self.record_sync(flat_grads, n, t.elapsed().as_secs_f64());
        Ok(())
    }
    fn stats(&self) -> Option<SyncStats> {
        // A single process has nothing to report; one NCCL or CPU rank does
        // (`--gpus 1` runs the real all-reduce path).
        (self.collective.backend() != Backend::Single).then_some(self.stats)
    }
    fn mean_scalars(&mut self, values: &mut [f64]) -> anyhow::Result<()> {
        if self.collective.world_size() == 1 || values.is_empty() {
            return Ok(());
        }
        let host: Vec<f32> = values.iter().map(|&v| v as f32).collect();
        let t = Tensor::from_slice(&host).to_device(self.device);
        self.collective.all_reduce_avg(&t)?;
        let back = Vec::<f32>::try_from(&t.to_device(Device::Cpu))?;
        for (v, b) in values.iter_mut().zip(back) {
            *v = b as f64;
        }
        Ok(())
    }
    fn any_rank(&mut self, local: bool) -> anyhow::Result<bool> {
        if self.collective.world_size() == 1 {
            return Ok(local);
        }
        let t = Tensor::from_slice(&[if local { 1.0f32 } else { 0.0 }]).to_device(self.device);
        self.collective.all_reduce_sum(&t)?;
        Ok(f32::try_from(&t.to_device(Device::Cpu))? > 0.0)
    }
}

impl Drop for DataParallel {
    fn drop(&mut self) {
        if self.hash_log.is_some() {
            if let Some(p) = self.params.as_ref().map(|p| p.shallow_clone()) {
                self.log_hash("final params", &p);
            }
        }
    }
}

/// The rendezvous timeout from `--rendezvous-timeout` (seconds), else the default.
pub fn rendezvous_timeout(secs: Option<f64>) -> anyhow::Result<Duration> {
    match secs {
        None => Ok(rendezvous::DEFAULT_TIMEOUT),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        Some(secs) => Err(RendezvousError::BadTimeout { secs }.into()),
    }
}
