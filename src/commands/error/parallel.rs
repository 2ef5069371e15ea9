//! What data parallelism's errors mean for the user of `imgctl train-demo`
//! (and of `verify`'s NCCL check): their exit status, the flag names in their
//! lines (`--gpus`, `--rendezvous-timeout`), and the hints (the launcher's
//! variables, the GPU selection, NCCL and the CUDA runtime).
//!
//! Covers [`LaunchError`], [`RendezvousError`], [`CollectiveError`],
//! [`HeartbeatError`] and [`WatchdogError`] of `world`, [`SupervisorError`] of `train::parallel`,
//! and [`NcclError`] and [`CudaError`] of `sys` (those two also without the
//! `torch` feature).

use super::advice::Advice;
use crate::sys::cudart::CudaError;
use crate::sys::nccl::NcclError;
#[cfg(feature = "torch")]
use crate::train::parallel::supervisor::{SupervisorError, WorkerEnd};
#[cfg(feature = "torch")]
use crate::world::heartbeat::HeartbeatError;
#[cfg(feature = "torch")]
use crate::world::watchdog::WatchdogError;
#[cfg(feature = "torch")]
use crate::world::{CollectiveError, LaunchError, RendezvousError};

/// The hint of a rendezvous that timed out (here, or at rank 0).
#[cfg(feature = "torch")]
const TIMEOUT_HINT: &str =
    "start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT; \
     raise --rendezvous-timeout (IMGCTL_RENDEZVOUS_TIMEOUT) if ranks start slowly";

/// The hint of a launch that sets some of torchrun's variables.
#[cfg(feature = "torch")]
const LAUNCH_VARS: &str =
    "a data-parallel launch needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT \
     (torchrun and Kubernetes PyTorchJob set them all)";

/// The hint of an NCCL that is missing or unusable.
const NCCL_MISSING_HINT: &str =
    "NCCL comes with the PyTorch CUDA wheel (nvidia-nccl-cu12, file libnccl.so.2); \
     use an image built by `imgctl build`, or train on one device without --gpus";

/// Advice for the errors of `world`, `train::parallel`, `sys::nccl` and `sys::cudart`.
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    if let Some(e) = err.downcast_ref::<NcclError>() {
        return Some(nccl_error(e));
    }
    if let Some(e) = err.downcast_ref::<CudaError>() {
        return Some(cuda_error(e));
    }
    #[cfg(feature = "torch")]
    {
        if let Some(e) = err.downcast_ref::<LaunchError>() {
            return Some(launch_error(e));
        }
        if let Some(e) = err.downcast_ref::<RendezvousError>() {
            return Some(rendezvous_error(e));
        }
        if let Some(e) = err.downcast_ref::<CollectiveError>() {
            return Some(collective_error(e));
        }
        if let Some(e) = err.downcast_ref::<SupervisorError>() {
            return Some(supervisor_error(e));
        }
        if let Some(e) = err.downcast_ref::<HeartbeatError>() {
            return Some(heartbeat_error(e));
        }
        if let Some(e) = err.downcast_ref::<WatchdogError>() {
            return Some(watchdog_error(e));
        }
    }
    None
}

/// A silent peer the heartbeat named (which ends the rank).
#[cfg(feature = "torch")]
fn heartbeat_error(e: &HeartbeatError) -> Advice {
    match e {
        HeartbeatError::Lost { peer, .. } => Advice::failure(format!(
            "rank {peer} stopped, hung or lost its network; a launcher that restarts \
             (torchrun --max-restarts, a requeued SLURM job) goes on with --resume auto; \
             --heartbeat-timeout sets how long silence may last"
        )),
    }
}

/// The collective watchdog's warning and its firing (which ends the rank).
#[cfg(feature = "torch")]
fn watchdog_error(e: &WatchdogError) -> Advice {
    match e {
        WatchdogError::Off { .. } => Advice::failure(None),
        WatchdogError::Fired { .. } => Advice::failure(
            "the failing rank's own log names the cause; NCCL_DEBUG=INFO shows NCCL's view"
                .to_string(),
        ),
    }
}

fn nccl_error(e: &NcclError) -> Advice {
    match e {
        NcclError::Load { .. } | NcclError::MissingSymbol { .. } => {
            Advice::failure(NCCL_MISSING_HINT.to_string())
        }
        NcclError::NotMapped => Advice::failure(
            "a CUDA build of libtorch loads libnccl.so.2 (libtorch_cuda.so links it); \
             a CPU-only libtorch has no NCCL"
                .to_string(),
        ),
        NcclError::Call { .. } => {
            Advice::failure("set NCCL_DEBUG=INFO for NCCL's own diagnostics".to_string())
        }
    }
}

fn cuda_error(e: &CudaError) -> Advice {
    match e {
        CudaError::Load { .. } => Advice::failure(
            "libtorch's CUDA wheels ship it (libcudart.so.12 in nvidia-cuda-runtime-cu12, \
             libcudart.so.13 in nvidia-cuda-runtime); use a CUDA build of torch, or train on the CPU"
                .to_string(),
        ),
        CudaError::MissingSymbol { .. } | CudaError::MemGetInfo { .. } => Advice::failure(None),
        CudaError::SetDevice { .. } => {
            Advice::failure("check CUDA_VISIBLE_DEVICES and `imgctl verify`".to_string())
        }
    }
}

/// The hint of every rendezvous-token error.
#[cfg(feature = "torch")]
const TOKEN_HINT: &str = "set the same IMGCTL_RENDEZVOUS_TOKEN (or IMGCTL_RENDEZVOUS_TOKEN_FILE) on every rank, or on none";

#[cfg(feature = "torch")]
fn launch_error(e: &LaunchError) -> Advice {
    let usage = |hint: &str| Advice::usage(hint.to_string());
    match e {
        LaunchError::RendezvousHostLost { .. } => Advice::failure(
            "start the job again with an --rdzv-endpoint on a live node; --resume auto continues from the last checkpoint"
                .to_string(),
        ),
        LaunchError::SlurmWorldSize { .. } => {
            usage("drop WORLD_SIZE from the batch script, or set it to $SLURM_NTASKS")
        }
        LaunchError::WorldSizeWithoutRank { .. } => {
            usage(&format!("{LAUNCH_VARS}; unset WORLD_SIZE for one process"))
        }
        LaunchError::NotACount { key, .. } => {
            usage(&format!("set {key} to a number, as torchrun and SLURM do"))
        }
        LaunchError::BadPort { .. } => {
            usage("set MASTER_PORT to a free port on rank 0's host, e.g. 29500")
        }
        LaunchError::NoRanks { size_var } => {
            usage(&format!("set {size_var} to the number of processes"))
        }
        LaunchError::RankOutOfRange { .. } => {
            usage("every process needs a distinct rank below the world size")
        }
        LaunchError::LocalRankOutOfRange { .. } => {
            usage("check LOCAL_RANK/LOCAL_WORLD_SIZE (or SLURM_LOCALID/SLURM_NTASKS_PER_NODE)")
        }
        LaunchError::Missing { .. } => usage(LAUNCH_VARS),
        LaunchError::BadRestartCount { .. } => usage("torchrun sets it; do not override it"),
        LaunchError::BadToken { .. } => usage(TOKEN_HINT),
        LaunchError::NoSlurmHost | LaunchError::BadNodelist { .. } => {
            usage("export MASTER_ADDR=<first node> in the batch script")
        }
        LaunchError::GpuUuids { uuids } => usage(&format!(
            "CUDA_VISIBLE_DEVICES takes UUIDs: CUDA_VISIBLE_DEVICES={} with --gpus all, or device indices (--gpus 0,2)",
            uuids.join(",")
        ))
        .with_message(format!(
            "--gpus names GPUs by UUID ({}); train-demo places its workers by device index",
            uuids.join(", ")
        )),
        LaunchError::NoCuda { requested } => usage(
            "omit --gpus to train on the CPU, or start CPU ranks through the environment \
             (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); in a container, run it with --gpus all",
        )
        .with_message(format!(
            "--gpus {requested} needs CUDA GPUs, but no CUDA device is visible to libtorch"
        )),
        LaunchError::TooManyGpus { visible, .. } => usage(&format!(
            "use --gpus all or a count up to {visible}; check CUDA_VISIBLE_DEVICES"
        )),
        LaunchError::NoSuchGpu { .. } => {
            usage("device ids count from 0 among the visible GPUs (CUDA_VISIBLE_DEVICES)")
        }
        LaunchError::LocalRankWithoutGpu { .. } => {
            usage("start at most one rank per visible GPU on each node (LOCAL_WORLD_SIZE)")
        }
    }
}

#[cfg(feature = "torch")]
fn rendezvous_error(e: &RendezvousError) -> Advice {
    match e {
        RendezvousError::BadTimeout { secs } => Advice::usage(
            "e.g. --rendezvous-timeout 300 (or IMGCTL_RENDEZVOUS_TIMEOUT=300)".to_string(),
        )
        .with_message(format!(
            "--rendezvous-timeout {secs} is not a positive number of seconds"
        )),
        RendezvousError::TimedOut { .. } | RendezvousError::RootGaveUp { .. } => {
            Advice::failure(TIMEOUT_HINT.to_string())
        }
        RendezvousError::PortInUse { port, .. } => Advice::usage(format!(
            "choose a free port (MASTER_PORT={}) or stop the process holding it \
             (`ss -ltnp 'sport = :{port}'`)",
            port.wrapping_add(1).max(1024),
        )),
        RendezvousError::Store { timeout, .. } => Advice::failure(format!(
            "TORCHELASTIC_USE_AGENT_STORE=True says torchrun's c10d store is at \
             MASTER_ADDR:MASTER_PORT; run under torchrun (not with its variables copied), \
             or raise --rendezvous-timeout (now {})",
            crate::world::timeouts::fmt_secs(*timeout)
        )),
        RendezvousError::BadAgentAddress { .. } => {
            Advice::failure("another program wrote that key; restart the job".to_string())
        }
        RendezvousError::Token { .. } => Advice::usage(TOKEN_HINT.to_string()),
        RendezvousError::Refused { .. } => Advice::usage(
            "start every rank with the same WORLD_SIZE and a distinct RANK".to_string(),
        ),
    }
}

#[cfg(feature = "torch")]
fn collective_error(e: &CollectiveError) -> Advice {
    match e {
        CollectiveError::Kind(_)
        | CollectiveError::NotContiguous
        | CollectiveError::WrongDevice { .. }
        | CollectiveError::Diverged { .. }
        | CollectiveError::NcclIdLength { .. } => Advice::failure(None),
        CollectiveError::PeerTimeout { .. } => {
            Advice::failure("another rank is stuck or much slower; check its output".to_string())
        }
        CollectiveError::PeerLost { .. } => Advice::failure(None),
        CollectiveError::NcclInitTimeout { .. } => Advice::failure(
            "check that every rank reached NCCL set-up; NCCL_DEBUG=INFO shows the transport"
                .to_string(),
        ),
    }
}

#[cfg(feature = "torch")]
fn supervisor_error(e: &SupervisorError) -> Advice {
    match e {
        SupervisorError::Interrupted { .. } => Advice::interrupted(None),
        SupervisorError::WorkerFailed {
            rank,
            end,
            worker_hint,
            ..
        } => {
            let hint = match worker_hint {
                Some(h) => format!("{h} (rank {rank}'s own hint)"),
                None => {
                    format!("the lines prefixed [rank {rank}] above are that worker's own output")
                }
            };
            match end {
                WorkerEnd::Code(2) => Advice::usage(hint),
                // A worker that stopped on an interrupt of its own (exit 130).
                WorkerEnd::Code(130) => Advice::interrupted(hint),
                WorkerEnd::Code(_) | WorkerEnd::Signal(_) => Advice::failure(hint),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::commands::error::{render_error, status_of};
    use crate::error::ExitStatus;

    fn text(e: impl Into<anyhow::Error>) -> (String, ExitStatus) {
        let e = e.into();
        (render_error(&e), status_of(&e))
    }

    #[test]
    fn sys_errors_keep_their_hints_without_torch_too() {
        let (t, s) = text(CudaError::SetDevice {
            index: 3,
            error: "CUDA error 101 (invalid device ordinal)".into(),
        });
        assert_eq!(
            t,
            "error: cudaSetDevice(3) failed with CUDA error 101 (invalid device ordinal)\n\n\
             hint: check CUDA_VISIBLE_DEVICES and `imgctl verify`\n"
        );
        assert_eq!(s, ExitStatus::Failure);
        let (t, _) = text(NcclError::NotMapped);
        assert!(
            t.ends_with("(libtorch_cuda.so links it); a CPU-only libtorch has no NCCL\n"),
            "{t}"
        );
        let (t, _) = text(CudaError::MemGetInfo {
            error: "CUDA error 2".into(),
        });
        assert_eq!(t, "error: cudaMemGetInfo failed with CUDA error 2\n");
    }

    #[test]
    fn an_nccl_that_fails_to_load_or_to_run_says_what_to_do() {
        let (t, s) = text(NcclError::Load {
            path: "/nonexistent/libnccl.so.2".into(),
            why: "cannot open shared object file".into(),
        });
        assert!(
            t.contains("hint: NCCL comes with the PyTorch CUDA wheel"),
            "{t}"
        );
        assert_eq!(s, ExitStatus::Failure);
        let (t, s) = text(NcclError::MissingSymbol {
            path: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
            name: "ncclGetVersion".into(),
            why: "undefined symbol: ncclGetVersion".into(),
        });
        assert!(
            t.contains("hint: NCCL comes with the PyTorch CUDA wheel"),
            "{t}"
        );
        assert_eq!(s, ExitStatus::Failure);
        let (t, s) = text(NcclError::Call {
            call: "ncclCommInitAll".into(),
            code: 4,
            text: "invalid argument (run with NCCL_DEBUG=WARN for details)".into(),
        });
        assert!(t.contains("hint: set NCCL_DEBUG=INFO"), "{t}");
        assert_eq!(s, ExitStatus::Failure);
    }

    #[cfg(feature = "torch")]
    #[test]
    fn the_gpu_selection_speaks_of_the_flag() {
        use crate::gpus::GpuSelection;
        use crate::world::launch::resolve_gpus;
        let resolve = |s: &str, visible| resolve_gpus(&GpuSelection::parse(s).unwrap(), visible);
        let e = resolve("device=1", 0).unwrap_err();
        assert_eq!(
            render_error(&e),
            "error: --gpus device=1 needs CUDA GPUs, but no CUDA device is visible to libtorch\n\n\
             hint: omit --gpus to train on the CPU, or start CPU ranks through the environment \
             (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); in a container, run it with --gpus all\n"
        );
        let e = resolve("3", 2).unwrap_err();
        assert_eq!(
            render_error(&e),
            "error: requested 3 GPUs but only 2 are visible\n\n\
             hint: use --gpus all or a count up to 2; check CUDA_VISIBLE_DEVICES\n"
        );
        let e = resolve("GPU-a,GPU-b", 2).unwrap_err();
        assert_eq!(
            render_error(&e),
            "error: --gpus names GPUs by UUID (GPU-a, GPU-b); train-demo places its workers by device index\n\n\
             hint: CUDA_VISIBLE_DEVICES takes UUIDs: CUDA_VISIBLE_DEVICES=GPU-a,GPU-b with --gpus all, \
             or device indices (--gpus 0,2)\n"
        );
        assert_eq!(status_of(&e), ExitStatus::Usage);
    }

    #[cfg(feature = "torch")]
    #[test]
    fn a_half_set_launch_is_a_usage_error() {
        let (t, s) = text(LaunchError::WorldSizeWithoutRank { world: "2".into() });
        assert!(t.contains("RANK is not"), "{t}");
        assert_eq!(s, ExitStatus::Usage);
    }

    #[cfg(feature = "torch")]
    #[test]
    fn rendezvous_hints_name_the_timeout_flag() {
        let e = crate::train::parallel::rendezvous_timeout(Some(-1.0)).unwrap_err();
        assert_eq!(
            render_error(&e),
            "error: --rendezvous-timeout -1 is not a positive number of seconds\n\n\
             hint: e.g. --rendezvous-timeout 300 (or IMGCTL_RENDEZVOUS_TIMEOUT=300)\n"
        );
        assert_eq!(status_of(&e), ExitStatus::Usage);
        let (t, s) = text(RendezvousError::TimedOut {
            timeout: Duration::from_millis(2500),
            what: "1 of 2 ranks arrived".into(),
        });
        assert_eq!(
            t,
            "error: rendezvous timed out after 2.5 s: 1 of 2 ranks arrived\n\n\
             hint: start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT; \
             raise --rendezvous-timeout (IMGCTL_RENDEZVOUS_TIMEOUT) if ranks start slowly\n"
        );
        assert_eq!(s, ExitStatus::Failure);
        let (t, s) = text(RendezvousError::PortInUse {
            port: 29500,
            addr: "127.0.0.1:29500".into(),
        });
        assert!(
            t.ends_with(
                "hint: choose a free port (MASTER_PORT=29501) or stop the process holding it \
                 (`ss -ltnp 'sport = :29500'`)\n"
            ),
            "{t}"
        );
        assert_eq!(s, ExitStatus::Usage);
    }

    #[cfg(feature = "torch")]
    #[test]
    fn a_rank_whose_rank_0_gave_up_fails_with_the_timeout_hint() {
        let (t, s) = text(RendezvousError::RootGaveUp {
            rank: 1,
            address: "127.0.0.1:29500".into(),
            msg: "rank 0 gave up after 2 s: 2 of 3 ranks arrived at 127.0.0.1:29500 (missing ranks: 2)".into(),
        });
        assert_eq!(
            t,
            "error: rendezvous failed: rank 1 reached rank 0 at 127.0.0.1:29500, but rank 0 gave up after 2 s: \
             2 of 3 ranks arrived at 127.0.0.1:29500 (missing ranks: 2)\n\n\
             hint: start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT; \
             raise --rendezvous-timeout (IMGCTL_RENDEZVOUS_TIMEOUT) if ranks start slowly\n"
        );
        assert_eq!(s, ExitStatus::Failure);
    }

    #[cfg(feature = "torch")]
    #[test]
    fn a_failed_worker_passes_on_its_exit_status() {
        let failed = |end| SupervisorError::WorkerFailed {
            rank: 1,
            world_size: 2,
            end,
            said: None,
            worker_hint: None,
            others: vec![(0, WorkerEnd::Signal(15))],
        };
        let (t, s) = text(failed(WorkerEnd::Code(130)));
        assert_eq!(
            t,
            "error: worker rank 1 of 2 failed: it exited with code 130; stopped the others \
             (rank 0 was killed by signal 15 (SIGTERM))\n\n\
             hint: the lines prefixed [rank 1] above are that worker's own output\n"
        );
        assert_eq!(s, ExitStatus::Interrupted);
        assert_eq!(text(failed(WorkerEnd::Signal(9))).1, ExitStatus::Failure);
        let (t, s) = text(SupervisorError::Interrupted {
            ends: vec![WorkerEnd::Code(0), WorkerEnd::Code(130)],
        });
        assert_eq!(
            t,
            "error: interrupted: 2 workers stopped (rank 0 exited with code 0, rank 1 exited with code 130)\n"
        );
        assert_eq!(s, ExitStatus::Interrupted);
    }

    #[cfg(feature = "torch")]
    #[test]
    fn a_worker_that_exits_2_is_a_usage_error_with_its_own_hint() {
        let (t, s) = text(SupervisorError::WorkerFailed {
            rank: 1,
            world_size: 2,
            end: WorkerEnd::Code(2),
            said: Some("disk on fire".into()),
            worker_hint: Some("call 112".into()),
            others: vec![(0, WorkerEnd::Signal(15))],
        });
        assert!(
            t.starts_with("error: worker rank 1 of 2 failed: it exited with code 2: disk on fire; stopped the others (rank 0 "),
            "{t}"
        );
        assert!(t.contains("hint: call 112 (rank 1's own hint)"), "{t}");
        assert_eq!(s, ExitStatus::Usage);
        // Without a hint of its own, exit 2 is still a usage error.
        let (_, s) = text(SupervisorError::WorkerFailed {
            rank: 0,
            world_size: 2,
            end: WorkerEnd::Code(2),
            said: None,
            worker_hint: None,
            others: vec![(1, WorkerEnd::Signal(9))],
        });
        assert_eq!(s, ExitStatus::Usage);
    }
}
