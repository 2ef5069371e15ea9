//! Running a container to completion, with GPU device requests (the Engine API
//! equivalent of `docker run --gpus`), and removing it on every path.
//!
//! The device request for a [`GpuSelection`] is [`super::cdi`]'s (the
//! runtime's or CDI's, re-exported here as [`device_request`]); this owns
//! [`run_to_completion`] (and [`run_to_completion_with`], which tells a
//! watcher each [`ContainerPhase`]) and the [`ContainerGuard`] that force-removes the
//! container when dropped (error, panic) or on Ctrl-C. A SIGKILL leaves no
//! time for that: every container carries the pid of the imgctl that started
//! it and the boot id of its host, and the next run removes the ones whose
//! imgctl is gone ([`remove_stale`]). It knows nothing of verify's checks:
//! callers pass the command and read stdout/stderr back, bounded (the last
//! [`STDOUT_LIMIT`] of stdout, the last [`OUTPUT_TAIL`] of stderr).
use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    KillContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions,
    WaitContainerOptions,
};
use futures_util::StreamExt;

use super::tail::{Tail, OUTPUT_TAIL};
use super::DockerError;
use crate::gpus::GpuSelection;

pub use super::cdi::{device_request, GpuRequestRejected, Refusal, PODMAN_HAS_NO_RUNTIME_HOOK};

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    /// Image reference.
    pub image: String,
    /// Entrypoint override (None: the image's).
    pub entrypoint: Option<Vec<String>>,
    /// Command (arguments after the entrypoint).
    pub cmd: Vec<String>,
    /// `K=V` environment entries.
    pub env: Vec<String>,
    /// GPUs to request; None requests none.
    pub gpus: Option<GpuSelection>,
    /// How the GPUs are asked for.
    pub gpu_api: super::cdi::GpuApi,
    /// Bind mounts (`/host:/container:ro`).
    pub binds: Vec<String>,
    /// Container labels (tests find leftovers by them).
    pub labels: HashMap<String, String>,
    /// How long the container may run before it is killed.
    pub timeout: Duration,
}

/// The most of a container's stdout kept: its last 16 MiB. The stdout is
/// what the caller reads back whole (verify's JSON report, well under 1 MiB
/// for many GPUs), so it gets more room than stderr's [`OUTPUT_TAIL`].
pub const STDOUT_LIMIT: usize = 16 * 1024 * 1024;

/// What a finished container left (bounded: see [`STDOUT_LIMIT`] and
/// [`OUTPUT_TAIL`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutput {
    /// Exit code of its main process.
    pub exit_code: i64,
    /// Its stdout: the last [`STDOUT_LIMIT`] bytes of it.
    pub stdout: String,
    /// How many bytes of stdout came before those (0: all of it is there).
    pub stdout_cut: u64,
    /// Its stderr: the last [`OUTPUT_TAIL`] bytes of it.
    pub stderr: String,
    /// How many bytes of stderr came before those (0: all of it is there).
    pub stderr_cut: u64,
    /// How its GPUs were asked for ([`super::cdi::GpuApi::Cdi`] or
    /// [`super::cdi::GpuApi::Runtime`]); None: no GPU was.
    pub gpu_api: Option<super::cdi::GpuApi>,
}

/// Label every container imgctl starts carries.
pub const LABEL_MANAGED: &str = "io.imgctl.managed";
/// Label: the pid of the imgctl process that started the container.
pub const LABEL_PID: &str = "io.imgctl.pid";
/// Label: the boot id of the host that process runs on, so that a run on
/// another client of a shared engine never judges this host's pids.
pub const LABEL_BOOT: &str = "io.imgctl.boot";

/// This host's boot id (`/proc/sys/kernel/random/boot_id`).
fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Whether process `pid` exists on this host (a signal-0 probe; EPERM means
/// it exists under another user).
fn process_exists(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // Signal 0 only checks that the process exists.
    match crate::sys::process::kill(pid, 0) {
        Ok(()) => true,
        Err(e) => e.raw_os_error() == Some(libc::EPERM),
    }
}

/// Whether a container with `labels` was left by an imgctl of this host that
/// no longer runs (killed before its guard could remove it).
fn is_stale(labels: &HashMap<String, String>, boot: &str) -> bool {
    let Some(pid) = labels.get(LABEL_PID).and_then(|p| p.parse::<i32>().ok()) else {
        return false;
    };
    labels.get(LABEL_MANAGED).map(String::as_str) == Some("true")
        && labels.get(LABEL_BOOT).map(String::as_str) == Some(boot)
        && pid != std::process::id() as i32
        && !process_exists(pid)
}

/// Removes the containers that imgctl runs of this host left behind when
/// they were killed (SIGKILL leaves no time to clean up); returns how many.
/// Containers of live imgctl processes, and of other hosts, are left alone.
pub async fn remove_stale(docker: &bollard::Docker) -> anyhow::Result<usize> {
    let Some(boot) = boot_id() else {
        return Ok(0);
    };
    let mut filters = HashMap::new();
    filters.insert("label".to_string(), vec![format!("{LABEL_MANAGED}=true")]);
    let opts = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    let mut removed = 0;
    for c in docker.list_containers(Some(opts)).await? {
        let (Some(id), Some(labels)) = (c.id, c.labels) else {
            continue;
        };
        if is_stale(&labels, &boot) {
            remove_container(docker, &id).await?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Force-removes a container when dropped, unless [`ContainerGuard::removed`]
/// says it is already gone. Drop runs on error returns and panics; it uses its
/// own thread and runtime, because it may run inside (or after) the caller's.
pub struct ContainerGuard {
    id: Option<String>,
}

impl ContainerGuard {
    /// Guards container `id`.
    pub fn new(id: String) -> Self {
        Self { id: Some(id) }
    }
    /// Disarms the guard: the container stays (a workstation that came up).
    pub fn keep(mut self) {
        self.id = None;
    }
    /// Removes the container now (force) and disarms the guard.
    pub async fn remove(&mut self, docker: &bollard::Docker) -> anyhow::Result<()> {
        if let Some(id) = self.id.take() {
            remove_container(docker, &id).await?;
        }
        Ok(())
    }
}

/// Force-removes container `id` with its anonymous volumes; one already gone is fine.
pub(crate) async fn remove_container(docker: &bollard::Docker, id: &str) -> anyhow::Result<()> {
    let opts = RemoveContainerOptions {
        force: true,
        v: true,
        ..Default::default()
    };
    match docker.remove_container(id, Some(opts)).await {
        Ok(()) => Ok(()),
        // Already gone.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        // Someone else is removing it (`docker rm -f` from outside): as gone.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            message,
        }) if message.contains("already in progress") => Ok(()),
        Err(e) => Err(
            DockerError::of_engine(&e, |error| DockerError::RemoveContainer {
                id: id.to_string(),
                error,
            })
            .into(),
        ),
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let handle = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let engine = super::connect().await.ok()?;
                remove_container(&engine.docker, &id).await.ok()
            })
        });
        let _ = handle.join();
    }
}

/// The labels of a local image; an image the engine does not have is a usage
/// error (exit 2) naming it.
pub async fn image_labels(
    docker: &bollard::Docker,
    image: &str,
) -> anyhow::Result<HashMap<String, String>> {
    match docker.inspect_image(image).await {
        Ok(inspect) => Ok(inspect
            .config
            .and_then(|c| c.labels)
            .unwrap_or_default()
            .into_iter()
            .collect()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Err(DockerError::ImageNotFound {
            image: image.to_string(),
        }
        .into()),
        Err(e) if e.to_string().contains("invalid reference format") => {
            Err(DockerError::InvalidImageReference {
                image: image.to_string(),
            }
            .into())
        }
        Err(e) => Err(
            DockerError::of_engine(&e, |error| DockerError::InspectImage {
                image: image.to_string(),
                error,
            })
            .into(),
        ),
    }
}

/// Whether an engine error is the "no GPU runtime" refusal of a device request.
pub fn is_gpu_rejection(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("could not select device driver")
        || m.contains("nvidia-container-cli")
        || m.contains("unknown runtime")
        || super::cdi::is_unresolvable(msg)
}

/// The engine's GPU refusal `msg`, with how to make a CDI spec when it
/// found none for the names asked for.
pub fn gpu_rejection(msg: String) -> GpuRequestRejected {
    if super::cdi::is_unresolvable(&msg) {
        return GpuRequestRejected::new(
            Refusal::NoCdiSpec,
            super::cdi::no_spec(&msg, &super::cdi::cdi_kind()),
        );
    }
    GpuRequestRejected::new(Refusal::NoRuntime, msg)
}

/// A step of [`run_to_completion_with`], told to its watcher as it starts,
/// or a note on the way that the watcher words (this module prints nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerPhase {
    /// Creating the container (after removing those left by killed runs).
    Create,
    /// This many containers left by imgctl runs that were killed were removed
    /// (before creating; at least one).
    StaleRemoved(usize),
    /// Looking for containers left by killed imgctl runs failed (the error);
    /// the run goes on.
    StaleUnchecked(String),
    /// Starting it.
    Start,
    /// Waiting for its main process to end.
    Run,
    /// Reading its stdout and stderr.
    Collect,
    /// Removing it (on every path, error or not).
    Remove,
}

/// Creates the container, starts it, waits for it (at most `req.timeout`),
/// collects its output, and removes it, on every path: success, error, timeout,
/// panic (the guard), and Ctrl-C, SIGTERM or SIGHUP (an interrupted error, exit 130).
/// A GPU request the engine cannot serve fails with [`GpuRequestRejected`] in
/// the error chain, so callers can retry without GPUs. Its notes (containers
/// of killed runs removed) go unsaid: a command that has someone to tell uses
/// [`run_to_completion_with`].
pub async fn run_to_completion(
    docker: &bollard::Docker,
    req: RunRequest,
) -> anyhow::Result<RunOutput> {
    run_to_completion_with(docker, req, &|_| {}).await
}

/// [`run_to_completion`], telling `phase` of each step as it starts (a
/// command shows it as a spinner's message; this module prints no progress).
pub async fn run_to_completion_with(
    docker: &bollard::Docker,
    req: RunRequest,
    phase: &(dyn Fn(ContainerPhase) + Sync),
) -> anyhow::Result<RunOutput> {
    phase(ContainerPhase::Create);
    match remove_stale(docker).await {
        Ok(0) => {}
        Ok(n) => phase(ContainerPhase::StaleRemoved(n)),
        Err(e) => phase(ContainerPhase::StaleUnchecked(format!("{e:#}"))),
    }
    let labels = managed_labels(&req.labels);
    let request = super::cdi::gpu_request(docker, req.gpus.as_ref(), req.gpu_api).await?;
    let gpu_api = request.as_ref().map(|r| r.api);
    let host_config = HostConfig {
        binds: (!req.binds.is_empty()).then(|| req.binds.clone()),
        ..Default::default()
    };
    let body = ContainerCreateBody {
        image: Some(req.image.clone()),
        entrypoint: req.entrypoint.clone(),
        cmd: Some(req.cmd.clone()),
        env: (!req.env.is_empty()).then(|| req.env.clone()),
        labels: Some(labels),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        host_config: Some(host_config),
        ..Default::default()
    };
    // Listen for Ctrl-C, SIGTERM and SIGHUP from before the container exists,
    // so none slips between its creation and the wait below.
    let mut interrupt = super::Termination::install()?;
    let created = super::libpod::create_with_gpus(docker, None, body, request).await?;
    let created = created.map_err(|e| create_error(&e, &req.image))?;
    let mut guard = ContainerGuard::new(created.id.clone());
    let outcome = tokio::select! {
        r = drive(docker, &created.id, &req, phase) => r,
        sig = interrupt.recv() => Err(DockerError::Interrupted { signal: sig }.into()),
    };
    phase(ContainerPhase::Remove);
    let removed = guard.remove(docker).await;
    // The container is gone: a later signal may end the process as usual.
    interrupt.exit_on_next();
    let mut out = outcome?;
    removed?;
    out.gpu_api = gpu_api;
    Ok(out)
}

/// `labels` with the ones every container imgctl runs carries: managed,
/// this process's pid and this host's boot id (so a later run can remove
/// what a killed one left, [`remove_stale`]).
pub(super) fn managed_labels(labels: &HashMap<String, String>) -> HashMap<String, String> {
    let mut labels = labels.clone();
    labels.insert(LABEL_MANAGED.into(), "true".into());
    labels.insert(LABEL_PID.into(), std::process::id().to_string());
    if let Some(boot) = boot_id() {
        labels.insert(LABEL_BOOT.into(), boot);
    }
    labels
}

/// The error of a create the engine refused: too large an answer, GPUs it
/// cannot give ([`GpuRequestRejected`]), no such image, or its words.
pub(super) fn create_error(e: &bollard::errors::Error, image: &str) -> anyhow::Error {
    if let Some(too_much) = super::transport::too_much(e) {
        return DockerError::EngineTooMuch(too_much).into();
    }
    let msg = super::transport::words(e);
    if is_gpu_rejection(&msg) {
        anyhow::Error::new(gpu_rejection(msg))
    } else if msg.contains("No such image")
        || msg.contains("image not known")
        || msg.contains("404")
    {
        DockerError::NoImageForContainer {
            image: image.to_string(),
        }
        .into()
    } else {
        DockerError::CreateContainer {
            image: image.to_string(),
            message: msg,
        }
        .into()
    }
}

async fn drive(
    docker: &bollard::Docker,
    id: &str,
    req: &RunRequest,
    phase: &(dyn Fn(ContainerPhase) + Sync),
) -> anyhow::Result<RunOutput> {
    phase(ContainerPhase::Start);
    if let Err(e) = docker.start_container(id, None).await {
        if let Some(too_much) = super::transport::too_much(&e) {
            return Err(DockerError::EngineTooMuch(too_much).into());
        }
        let msg = super::transport::words(&e);
        if is_gpu_rejection(&msg) {
            return Err(gpu_rejection(msg).into());
        }
        return Err(DockerError::StartContainer {
            image: req.image.clone(),
            message: msg,
        }
        .into());
    }
    let wait = async {
        let mut s = docker.wait_container(id, Some(WaitContainerOptions::default()));
        match s.next().await {
            Some(Ok(r)) => Ok(r.status_code),
            // bollard reports a non-zero exit as this error; it is still an exit code.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(e)) => Err(DockerError::of_engine(&e, |error| {
                DockerError::WaitContainer { error }
            })),
            None => Err(DockerError::WaitStreamClosed),
        }
    };
    phase(ContainerPhase::Run);
    let exit_code = match tokio::time::timeout(req.timeout, wait).await {
        Ok(code) => code?,
        Err(_) => {
            let _ = docker
                .kill_container(
                    id,
                    Some(KillContainerOptions {
                        signal: "KILL".into(),
                    }),
                )
                .await;
            return Err(DockerError::Timeout {
                seconds: req.timeout.as_secs(),
            }
            .into());
        }
    };
    phase(ContainerPhase::Collect);
    let mut logs = docker.logs(
        id,
        Some(LogsOptions {
            stdout: true,
            stderr: true,
            ..Default::default()
        }),
    );
    let (mut stdout, mut stderr) = (Tail::new(STDOUT_LIMIT), Tail::new(OUTPUT_TAIL));
    while let Some(chunk) = logs.next().await {
        match chunk.map_err(|e| DockerError::of_engine(&e, |error| DockerError::Logs { error }))? {
            bollard::container::LogOutput::StdOut { message } => stdout.push(&message),
            bollard::container::LogOutput::StdErr { message } => stderr.push(&message),
            bollard::container::LogOutput::Console { message } => stdout.push(&message),
            bollard::container::LogOutput::StdIn { .. } => {}
        }
    }
    let (stdout_cut, stderr_cut) = (stdout.cut(), stderr.cut());
    Ok(RunOutput {
        exit_code,
        stdout: stdout.into_text(),
        stdout_cut,
        stderr: stderr.into_text(),
        stderr_cut,
        gpu_api: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_containers_of_dead_imgctl_runs_of_this_host_are_stale() {
        let labels = |pid: &str, boot: &str| -> HashMap<String, String> {
            [
                (LABEL_MANAGED, "true"),
                (LABEL_PID, pid),
                (LABEL_BOOT, boot),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
        };
        // A pid that exited: spawn and reap a short-lived process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id().to_string();
        child.wait().unwrap();
        assert!(is_stale(&labels(&dead, "b1"), "b1"));
        // A live process (this one, and pid 1), another host, no pid label.
        let me = std::process::id().to_string();
        assert!(!is_stale(&labels(&me, "b1"), "b1"));
        assert!(!is_stale(&labels("1", "b1"), "b1"));
        assert!(!is_stale(&labels(&dead, "b2"), "b1"));
        let mut unlabelled = labels(&dead, "b1");
        unlabelled.remove(LABEL_PID);
        assert!(!is_stale(&unlabelled, "b1"));
    }

    #[test]
    fn device_request_matches_docker_cli() {
        let request = |s: &str| device_request(&GpuSelection::parse(s).unwrap());
        let all = request("all");
        assert_eq!(all.driver.as_deref(), Some("nvidia"));
        assert_eq!(all.count, Some(-1));
        assert_eq!(all.capabilities, Some(vec![vec!["gpu".to_string()]]));
        let ids = request("0,2");
        assert_eq!(ids.count, None);
        assert_eq!(ids.device_ids, Some(vec!["0".to_string(), "2".to_string()]));
        assert_eq!(request("2").count, Some(2));
        // docker's spelling of one device, and UUIDs, pass through as ids.
        assert_eq!(request("device=0").device_ids, Some(vec!["0".to_string()]));
        assert_eq!(
            request("GPU-8f3c0000-1111,MIG-a").device_ids,
            Some(vec!["GPU-8f3c0000-1111".to_string(), "MIG-a".to_string()])
        );
    }
}
