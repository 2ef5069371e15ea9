//! The NCCL collective for data-parallel training: one communicator per rank
//! (one GPU per process), joined with `ncclCommInitRank` from the unique id
//! the rendezvous delivered, all-reducing and broadcasting flat gradient and
//! parameter buffers in place.
//!
//! Loading `libnccl.so.2` and its raw entry points belong to the shared shim
//! [`crate::sys::nccl`], handing a tensor to it to [`crate::sys::nccl_tensors`];
//! this module bounds communicator set-up by a timeout,
//! and keeps the calling thread's CUDA device. Collectives run on CUDA stream
//! 0 (the legacy default stream), which orders them with torch's kernels (tch
//! has no stream API), except the overlapped gradient all-reduce: it runs on
//! a non-blocking stream of its own ([`crate::sys::cudart::CommStream`]), ordered
//! after the backward kernels that wrote each bucket and before the optimizer
//! by CUDA events, so backward keeps computing while NCCL reduces. Every
//! collective queued is followed by a [`crate::world::watchdog::Watchdog`] (a CUDA event
//! after it), which ends the rank when one never completes. A failed call leaves the communicator to be aborted,
//! not destroyed, when the collective is dropped (see
//! [`crate::sys::nccl::Communicator`]). This module must not decide which backend a
//! run uses.
use std::sync::mpsc::{self, SendError};
use std::sync::Arc;
use std::time::Duration;

use tch::{Device, Tensor};

use super::{check_buffer, Backend, Collective, Elem};
use crate::sys::cudart::{CommStream, CudaRuntime, Marker};
use crate::sys::nccl::{Communicator, NcclLibrary, RedOp, AVG_MIN_VERSION, UNIQUE_ID_BYTES};
use crate::sys::nccl_tensors;
use crate::world::error::CollectiveError;
use crate::world::watchdog::{self, Watchdog};

/// An NCCL communicator over one GPU per rank.
pub struct NcclCollective {
    /// Watches every collective queued (declared first: dropped, and its
    /// thread stopped, before the communicator it probes).
    watchdog: Watchdog,
    rt: Arc<CudaRuntime>,
    comm: Communicator,
    rank: usize,
    world_size: usize,
    device: Device,
    version: i32,
    /// The stream of the overlapped all-reduce, made by the first `begin_async`.
    stream: Option<CommStream>,
    /// Buckets summed on that stream and still to be divided by the world
    /// size (NCCL < 2.10, which has no ncclAvg), after `wait_async`.
    to_divide: Vec<Tensor>,
}

impl std::fmt::Debug for NcclCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclCollective")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("device", &self.device)
            .finish()
    }
}

impl NcclCollective {
    /// Joins the communicator `id` as `rank` of `world_size` on `device` (the
    /// current CUDA device must already be `device`). Blocks until every rank
    /// has joined, at most `timeout`.
    pub fn init(
        lib: Arc<NcclLibrary>,
        id: &[u8],
        rank: usize,
        world_size: usize,
        device: Device,
        timeout: Duration,
        watch_timeout: Duration,
    ) -> anyhow::Result<Self> {
        let uid: [u8; UNIQUE_ID_BYTES] =
            id.try_into().map_err(|_| CollectiveError::NcclIdLength {
                len: id.len(),
                expected: UNIQUE_ID_BYTES,
            })?;
        let version = lib.version()?;
        // One runtime for the set-up thread, the watchdog and the comm stream.
        let rt = Arc::new(CudaRuntime::locate()?);
        let setup_rt = rt.clone();
        // ncclCommInitRank blocks until all ranks joined: run it on a helper
        // thread so that a rank that never comes turns into a timeout error.
        let (tx, rx) = mpsc::channel();
        let dev_index = match device {
            Device::Cuda(i) => Some(i),
            _ => None,
        };
        std::thread::spawn(move || {
            // The helper thread must use the same device as the caller: NCCL
            // binds the communicator to the current device, and a failure to
            // select it must not silently bind GPU 0.
            let selected = match dev_index {
                Some(i) => setup_rt.set_device(i),
                None => Ok(()),
            };
            let joined =
                selected.and_then(|()| Communicator::init_rank(&lib, world_size, &uid, rank));
            if let Err(SendError(Ok(late))) = tx.send(joined) {
                // The caller timed out and is gone: do not wait for the others.
                late.abort();
            }
        });
        let joined = rx
            .recv_timeout(timeout)
            .map_err(|_| CollectiveError::NcclInitTimeout {
                rank,
                world_size,
                timeout,
            })?;
        let comm = joined?;
        let probe = comm.async_error_probe();
        let watch_rt = rt.clone();
        let watchdog = Watchdog::start(
            watch_timeout,
            watchdog::POLL,
            Box::new(move || {
                // Poll on the rank's own device: a thread's first CUDA call
                // would otherwise create a context on GPU 0.
                match dev_index {
                    Some(i) => watch_rt
                        .set_device(i)
                        .map_err(|e| format!("rank {rank} cannot select cuda:{i} for it: {e}")),
                    None => Ok(()),
                }
            }),
            Some(Box::new(move || probe.check())),
            watchdog::exit_rank(rank, world_size),
        )?;
        Ok(Self {
            watchdog,
            rt,
            comm,
            rank,
            world_size,
            device,
            version,
            stream: None,
            to_divide: Vec::new(),
        })
    }

    /// The NCCL version code in use.
    pub fn version(&self) -> i32 {
        self.version
    }

    /// The NCCL library this collective uses.
    pub fn library(&self) -> &Arc<NcclLibrary> {
        self.comm.library()
    }

    fn reduce(&self, buf: &Tensor, op: RedOp) -> anyhow::Result<()> {
        self.reduce_on(None, buf, op)
    }

    /// All-reduces `buf` in place on `stream` (`None`: the legacy default stream).
    fn reduce_on(
        &self,
        stream: Option<&CommStream>,
        buf: &Tensor,
        op: RedOp,
    ) -> anyhow::Result<()> {
        let elem = check_buffer(buf, Some(self.device))?;
        nccl_tensors::all_reduce_in_place(&self.comm, stream, buf, op)?;
        self.watch("all-reduce", buf, elem, stream)
    }

    /// Has the watchdog follow the collective just queued on `stream`
    /// (`None`: the legacy default stream).
    fn watch(
        &self,
        what: &str,
        buf: &Tensor,
        elem: Elem,
        stream: Option<&CommStream>,
    ) -> anyhow::Result<()> {
        let mb = (buf.numel() * elem.size()) as f64 / 1e6;
        let marker = Marker::record(&self.rt, stream).inspect_err(|_| {
            // The collective is queued but cannot be followed: tear the
            // communicator down with an abort, which does not wait for it.
            self.comm.mark_failed();
        })?;
        self.watchdog
            .track(format!("NCCL {what} of {mb:.1} MB"), Box::new(marker));
        Ok(())
    }
}

impl Drop for NcclCollective {
    fn drop(&mut self) {
        // Leaving with a collective still pending (an error elsewhere while a
        // peer is gone): ncclCommDestroy would wait for it forever, and the
        // watchdog stops with this collective. Abort instead.
        if self.watchdog.any_unfinished() {
            self.comm.mark_failed();
        }
    }
}

impl Collective for NcclCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world_size
    }
    fn backend(&self) -> Backend {
        Backend::Nccl
    }
    fn all_reduce_sum(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        self.reduce(buf, RedOp::Sum)
    }
    fn all_reduce_avg(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        if self.version >= AVG_MIN_VERSION {
            self.reduce(buf, RedOp::Avg)
        } else {
            self.reduce(buf, RedOp::Sum)?;
            let mut b = buf.shallow_clone();
            let _ = b.g_div_scalar_(self.world_size as f64);
            Ok(())
        }
    }
    fn broadcast(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        let elem = check_buffer(buf, Some(self.device))?;
        nccl_tensors::broadcast_in_place(&self.comm, buf, 0)?;
        self.watch("broadcast", buf, elem, None)
    }
    fn begin_async(&mut self) -> anyhow::Result<()> {
        let Device::Cuda(index) = self.device else {
            anyhow::bail!("an NCCL collective on {:?}", self.device);
        };
        self.rt.set_device(index)?;
        if self.stream.is_none() {
            self.stream = Some(CommStream::new(self.rt.clone())?);
        }
        Ok(())
    }
    fn all_reduce_avg_async(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        let Some(stream) = &self.stream else {
            return self.all_reduce_avg(buf);
        };
        stream.wait_for_compute()?;
        if self.version >= AVG_MIN_VERSION {
            return self.reduce_on(Some(stream), buf, RedOp::Avg);
        }
        // NCCL < 2.10 has no ncclAvg: sum on the comm stream now, divide on
        // the compute stream in `wait_async` (waiting here would stall backward).
        self.reduce_on(Some(stream), buf, RedOp::Sum)?;
        self.to_divide.push(buf.shallow_clone());
        Ok(())
    }
    fn wait_async(&mut self) -> anyhow::Result<()> {
        if let Some(s) = &self.stream {
            s.compute_waits()?;
        }
        for mut b in self.to_divide.drain(..) {
            let _ = b.g_div_scalar_(self.world_size as f64);
        }
        Ok(())
    }
    fn barrier(&mut self) -> anyhow::Result<()> {
        // NCCL has no barrier: all-reduce one element, then wait for it.
        let t = Tensor::zeros([1], (tch::Kind::Float, self.device));
        self.all_reduce_sum(&t)?;
        // Reading the element back waits for the stream, and returns a CUDA
        // error where tch::Cuda::synchronize would panic.
        let _ = t.f_to_device(Device::Cpu)?;
        Ok(())
    }
}
