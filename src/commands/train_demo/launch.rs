//! `imgctl train-demo` beyond one process: the worker slots a supervisor
//! starts (`--gpus`, or the hidden `IMGCTL_CPU_RANKS=N`), the supervisor's
//! command line, and a worker's gradient sync ([`worker_sync`]: a world of
//! one, or the rank that torchrun, SLURM, Kubernetes or the supervisor
//! launched).
//!
//! Turns flags and launcher variables into typed options; the work lives in
//! `train::parallel` and `world`. This module must not choose the mode (`super` does) nor
//! train or benchmark.
use std::ffi::OsString;

use tch::Device;

use crate::choices::Preset;
use crate::cli::TrainArgs;
use crate::commands::error::CliError;
use crate::env_vars as ev;
use crate::error::ExitStatus;
use crate::gpus::GpuSelection;
use crate::output::printer;
use crate::train::parallel::supervisor::{self, SupervisorOptions, WorkerSlot};
use crate::train::parallel::{rendezvous_timeout, worker_device, DataParallel};
use crate::train::run::RunError;
use crate::train::session::RunOptions;
use crate::train::sync::GradSync;
use crate::world::agent;
use crate::world::error::LaunchError;
use crate::world::heartbeat;
use crate::world::launch::{resolve_gpus, LaunchInfo, LaunchSource};
use crate::world::{collective_timeout, default_collective_timeout};

/// The gradient sync of this process: a world of one when no launcher set
/// rank variables, else this rank of the job (NCCL on a GPU, TCP on the
/// CPU). Moves `opts.device` to `cuda:LOCAL_RANK` when several GPUs are
/// visible and `--device` was not given or was a bare `cuda` (see
/// [`launcher_device`]).
pub fn worker_sync(args: &TrainArgs, opts: &mut RunOptions) -> anyhow::Result<Box<dyn GradSync>> {
    let launch = LaunchInfo::from_process_env()?;
    if launch.source == LaunchSource::Single {
        return Ok(Box::new(DataParallel::single(opts.device)));
    }
    let timeout = rendezvous_timeout(args.rendezvous_timeout)?;
    // Read before the rendezvous, so a malformed value fails at once. Short
    // runs name a lost node within a minute; long ones leave rank 0 time to
    // write checkpoints and sample grids while the others wait.
    let short_run = args.benchmark || opts.config.preset == Preset::Smoke;
    let collective = collective_timeout(default_collective_timeout(short_run))?;
    let visible = tch::Cuda::device_count().max(0) as usize;
    if let Some(d) = launcher_device(args.device.as_deref(), &launch, visible)? {
        opts.device = d;
    }
    let beat = heartbeat_settings(args.heartbeat, args.heartbeat_timeout)?;
    // A silent peer ends this rank as a lost one does: the torchrun
    // rendezvous-host probe, then the one line and exit 1.
    let fire: heartbeat::FireAction =
        Box::new(|err| crate::output::exit_with(after_lost_peer(err)));
    let dp = DataParallel::init(launch, opts.device, timeout, collective, Some((beat, fire)))?;
    if dp.is_primary() {
        printer().info(format!(
            "data parallel: {} rank{}, {} backend, rendezvous at {}",
            dp.launch().world_size,
            if dp.launch().world_size == 1 { "" } else { "s" },
            dp.backend(),
            dp.rendezvous_address()
        ));
    }
    Ok(Box::new(dp))
}

/// `err` of a rank launched by torchrun, after the run stopped: when it
/// lost a peer, or its agent stopped it, and torchrun's c10d rendezvous
/// store does not answer ([`agent::rendezvous_host_lost`]), this rank's
/// torchrun agent is ended (SIGKILL: its own shutdown would wait on the
/// dead store, for many minutes when the host went silent) and the error
/// becomes the one line that names the rendezvous host; any other error is
/// returned unchanged.
pub fn after_lost_peer(err: anyhow::Error) -> anyhow::Error {
    let Ok(launch) = LaunchInfo::from_process_env() else {
        return err;
    };
    let Some((agent_pid, args, env)) = torchrun_agent() else {
        return err;
    };
    let Some(endpoint) = agent::rendezvous_endpoint(&args, |k| env.get(k).cloned()) else {
        return err;
    };
    let interrupted = matches!(
        err.downcast_ref::<RunError>(),
        Some(RunError::Interrupted { .. })
    );
    let lost = agent::rendezvous_host_lost(
        launch.rank,
        &endpoint,
        &err,
        interrupted,
        agent::RENDEZVOUS_PROBE,
    );
    match lost {
        None => err,
        Some(mut lost) => {
            if let LaunchError::RendezvousHostLost { ended_agent, .. } = &mut lost {
                *ended_agent = crate::sys::process::kill(agent_pid as i32, libc::SIGKILL)
                    .ok()
                    .map(|()| agent_pid);
            }
            lost.into()
        }
    }
}

/// The heartbeat's settings from `--heartbeat` and `--heartbeat-timeout`
/// (seconds; [`heartbeat::Settings::default`] for those not given): each a
/// positive number of seconds up to an hour, the timeout longer than the
/// interval.
pub(crate) fn heartbeat_settings(
    interval: Option<f64>,
    timeout: Option<f64>,
) -> anyhow::Result<heartbeat::Settings> {
    let d = heartbeat::Settings::default();
    let secs = |flag: &str, v: Option<f64>, default: std::time::Duration| match v {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= 3600.0 => {
            Ok(std::time::Duration::from_secs_f64(s))
        }
        Some(s) => Err(usage(
            format!("{flag} {s} is not a number of seconds between 0 and 3600"),
            format!("give seconds such as {flag} {}", default.as_secs_f64()),
        )),
    };
    let interval = secs("--heartbeat", interval, d.interval)?;
    let timeout = secs("--heartbeat-timeout", timeout, d.timeout)?;
    if timeout <= interval {
        return Err(usage(
            format!(
                "--heartbeat-timeout {} is not longer than --heartbeat {}: every peer would be lost between two beats",
                timeout.as_secs_f64(),
                interval.as_secs_f64()
            ),
            "give a timeout of several beats, such as --heartbeat 1 --heartbeat-timeout 5",
        ));
    }
    Ok(heartbeat::Settings { interval, timeout })
}

/// This process's parent when it is torchrun's agent (its command line
/// names `torchrun` or `torch.distributed.run`): its pid, arguments and
/// the `PET_RDZV_*` variables it reads its rendezvous settings from.
fn torchrun_agent() -> Option<(u32, Vec<String>, std::collections::HashMap<String, String>)> {
    let parent = std::os::unix::process::parent_id();
    let split = |bytes: Vec<u8>| -> Vec<String> {
        bytes
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    };
    let args = split(std::fs::read(format!("/proc/{parent}/cmdline")).ok()?);
    if !args
        .iter()
        .any(|a| a.ends_with("torchrun") || a == "torch.distributed.run")
    {
        return None;
    }
    let env = split(std::fs::read(format!("/proc/{parent}/environ")).unwrap_or_default())
        .into_iter()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            k.starts_with("PET_RDZV_")
                .then(|| (k.to_string(), v.to_string()))
        })
        .collect();
    Some((parent, args, env))
}

/// The device of a launched rank when `--device` leaves the choice of
/// GPU to the launcher: no `--device` at all ([`worker_device`]: the CPU
/// without GPUs), or a bare `cuda`/`gpu` in a multi-rank run, which means
/// this rank's GPU (`cuda:LOCAL_RANK` among several visible ones, as
/// torchrun scripts write it), not GPU 0 for every rank. `None`: keep
/// what `--device` said (`cpu`, `cuda:N`).
pub(crate) fn launcher_device(
    arg: Option<&str>,
    launch: &LaunchInfo,
    visible: usize,
) -> anyhow::Result<Option<Device>> {
    match arg.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None => worker_device(launch, visible).map(Some),
        Some("cuda" | "gpu") if launch.world_size > 1 && visible > 0 => {
            worker_device(launch, visible).map(Some)
        }
        _ => Ok(None),
    }
}

/// A usage error (exit 2) with its hint.
pub(super) fn usage(msg: impl Into<String>, hint: impl Into<String>) -> anyhow::Error {
    CliError::usage(msg).with_hint(hint).into()
}

/// The worker slots this process must supervise, if any.
pub(super) fn slots(
    args: &TrainArgs,
    launch: &LaunchInfo,
) -> anyhow::Result<Option<Vec<WorkerSlot>>> {
    // A launcher that started one process (salloc, `srun -n1`) leaves room for --gpus.
    let launched = launch.world_size > 1;
    if let Some(spec) = &args.gpus {
        if launched {
            return Err(usage(
                format!(
                    "--gpus starts its own workers, but this process already is rank {} of {} (set by the launcher's environment)",
                    launch.rank, launch.world_size
                ),
                "drop --gpus when torchrun, srun or a PyTorchJob starts the processes",
            ));
        }
        if args.device.is_some() {
            return Err(usage(
                "--device and --gpus both choose devices",
                "use --gpus to train on several GPUs, --device for one",
            ));
        }
        let req = GpuSelection::parse(spec)?;
        let visible = tch::Cuda::device_count().max(0) as usize;
        let devices = resolve_gpus(&req, visible)?;
        let parent = std::env::var(ev::CUDA_VISIBLE_DEVICES).ok();
        return Ok(Some(supervisor::gpu_slots(&devices, parent.as_deref())));
    }
    if launched {
        return Ok(None);
    }
    match std::env::var(ev::IMGCTL_CPU_RANKS) {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
            Ok(n) if n >= 1 => Ok(Some(vec![WorkerSlot::Cpu; n])),
            _ => Err(usage(
                format!(
                    "{}={v:?} is not a positive number of CPU ranks",
                    ev::IMGCTL_CPU_RANKS
                ),
                format!("unset {} or give a count such as 2", ev::IMGCTL_CPU_RANKS),
            )),
        },
        _ => Ok(None),
    }
}

/// Supervises one worker per slot, each running this command line without
/// `--gpus`, and ends with the workers' status.
pub(super) fn supervise(slots: Vec<WorkerSlot>) -> anyhow::Result<ExitStatus> {
    let opts = supervisor_options(slots, false)?;
    // A clean end of every worker is this command's success; how a failed
    // one maps to an exit code is commands/error's (SupervisorError).
    supervisor::supervise(&opts, &super::events::printed()).map(|_| ExitStatus::Success)
}

/// This executable with this command line as its workers' ([`worker_args`]);
/// `bench`: the benchmark's supervisor, whose workers report as JSON on a
/// captured stdout.
pub(super) fn supervisor_options(
    slots: Vec<WorkerSlot>,
    bench: bool,
) -> anyhow::Result<SupervisorOptions> {
    let mut args = worker_args(std::env::args_os().skip(1).collect(), bench);
    if bench {
        args.push("--json".into());
    }
    Ok(SupervisorOptions {
        program: std::env::current_exe()?,
        args,
        slots,
        grace: supervisor::DEFAULT_GRACE,
        capture_stdout: bench,
        env: vec![],
    })
}

/// A supervisor's command line `args` minus the flags it reads itself, as
/// its workers run it: the table's `launcher` flags (`--gpus`), and for the
/// benchmark's supervisor (`bench`) its `bench_launcher` ones too (`--scaling`,
/// `--compare`, `--plot`, `--json`), each with its value when it takes one
/// ([`TrainArgs::SETTINGS`]).
pub(super) fn worker_args(mut args: Vec<OsString>, bench: bool) -> Vec<OsString> {
    let cmd = <TrainArgs as clap::Args>::augment_args(clap::Command::new("train-demo"));
    for setting in TrainArgs::SETTINGS
        .iter()
        .filter(|s| s.role.stripped(bench))
    {
        let Some(arg) = cmd.get_arguments().find(|a| a.get_id() == setting.id) else {
            continue;
        };
        if let Some(long) = arg.get_long() {
            let takes_value = arg.get_action().takes_values();
            args = supervisor::strip_flag(&args, &format!("--{long}"), takes_value);
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_flags_take_seconds_and_a_timeout_past_the_interval() {
        let ok = heartbeat_settings(None, None).unwrap();
        assert_eq!(ok, heartbeat::Settings::default());
        let s = heartbeat_settings(Some(0.5), Some(2.0)).unwrap();
        assert_eq!(s.interval, std::time::Duration::from_millis(500));
        for (i, t, says) in [
            (Some(0.0), None, "--heartbeat 0 is not a number of seconds"),
            (Some(f64::NAN), None, "--heartbeat NaN is not"),
            (None, Some(-1.0), "--heartbeat-timeout -1 is not"),
            (
                Some(5.0),
                None,
                "--heartbeat-timeout 5 is not longer than --heartbeat 5",
            ),
        ] {
            let e = heartbeat_settings(i, t).unwrap_err();
            let cli = e.downcast_ref::<CliError>().expect("a usage error");
            assert!(e.to_string().starts_with(says), "{e}");
            assert!(!e.to_string().contains('\n'), "{e}");
            let _ = cli;
        }
    }

    #[test]
    fn a_bare_cuda_follows_the_local_rank() {
        // Rank 3 of 4, local rank 3, on a node with 4 GPUs.
        let r3 = LaunchInfo::loopback(3, 4, 29500);
        let dev =
            |arg: Option<&str>, l: &LaunchInfo, visible| launcher_device(arg, l, visible).unwrap();
        assert_eq!(dev(Some("cuda"), &r3, 4), Some(Device::Cuda(3)));
        assert_eq!(dev(Some(" CUDA "), &r3, 4), Some(Device::Cuda(3)));
        assert_eq!(dev(Some("gpu"), &r3, 4), Some(Device::Cuda(3)));
        assert_eq!(dev(None, &r3, 4), Some(Device::Cuda(3)));
        // One GPU visible (a launcher pinned it): that one.
        assert_eq!(dev(Some("cuda"), &r3, 1), Some(Device::Cuda(0)));
        // An explicit choice stays.
        assert_eq!(dev(Some("cuda:1"), &r3, 4), None);
        assert_eq!(dev(Some("cpu"), &r3, 4), None);
        // No GPU: nothing to map (parse_device already refused `cuda`).
        assert_eq!(dev(Some("cuda"), &r3, 0), None);
        assert_eq!(dev(None, &r3, 0), Some(Device::Cpu));
        // A world of one keeps cuda:0.
        assert_eq!(dev(Some("cuda"), &LaunchInfo::loopback(0, 1, 1), 4), None);
        // More ranks on the node than GPUs: a clear error, not GPU 0 twice.
        let e = launcher_device(Some("cuda"), &r3, 2).unwrap_err();
        assert!(e.to_string().contains("local rank 3 needs GPU 3"), "{e}");
    }

    /// A supervisor's workers never see the flags it reads: every
    /// `launcher` row (and with the benchmark every `bench_launcher` row)
    /// goes with its value, every other flag stays as written, and a
    /// worker's command line parses to a rank that does not supervise.
    #[test]
    fn workers_get_every_flag_but_their_supervisors() {
        use clap::Parser;

        use crate::cli::{Cli, Command};
        let cmd = <TrainArgs as clap::Args>::augment_args(clap::Command::new("train-demo"));
        let mut line: Vec<OsString> = vec!["train-demo".into()];
        let mut flags = vec![];
        for s in TrainArgs::SETTINGS {
            let arg = cmd.get_arguments().find(|a| a.get_id() == s.id).unwrap();
            let flag = format!("--{}", arg.get_long().unwrap());
            line.push(flag.clone().into());
            if arg.get_action().takes_values() {
                line.push(format!("value-of-{}", s.id).into());
            }
            flags.push((s, flag));
        }
        for bench in [false, true] {
            let worker = worker_args(line.clone(), bench);
            for (s, flag) in &flags {
                let kept = worker.iter().any(|a| a == flag.as_str());
                assert_eq!(
                    kept,
                    !s.role.stripped(bench),
                    "{flag} (bench {bench}): {worker:?}"
                );
                let value = format!("value-of-{}", s.id);
                let value_kept = worker.iter().any(|a| *a == *value);
                if line.iter().any(|a| *a == *value) {
                    assert_eq!(value_kept, kept, "{value} (bench {bench}): {worker:?}");
                }
            }
        }
        // What a supervisor runs: its workers are ranks, not supervisors.
        let rank = LaunchInfo::loopback(1, 2, 29500);
        for (line, bench) in [
            (
                "train-demo --gpus 2 --steps 3 --channels-last --json",
                false,
            ),
            (
                "train-demo --benchmark --gpus=2 --scaling --plot p.png --json --steps 3",
                true,
            ),
            ("train-demo --benchmark --gpus 2 --compare --steps 3", true),
        ] {
            let args: Vec<OsString> = line.split(' ').map(OsString::from).collect();
            let mut worker = worker_args(args, bench);
            worker.insert(0, "imgctl".into());
            let cli = Cli::try_parse_from(&worker).unwrap_or_else(|e| panic!("{worker:?}: {e}"));
            let Command::TrainDemo(w) = cli.command else {
                panic!("{worker:?}")
            };
            assert!(slots(&w, &rank).unwrap().is_none(), "{worker:?}");
            assert_eq!(w.steps, Some(3), "{worker:?}");
            assert!(!(w.scaling || w.compare) && w.plot.is_none(), "{worker:?}");
        }
    }
}
