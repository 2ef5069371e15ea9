//! A container run in the foreground, as `docker run --rm` runs one: its
//! stdout and stderr stream to the caller while it runs, the first Ctrl-C,
//! SIGTERM or SIGHUP is passed on to its main process (which can save its
//! work and exit), a second one ends it at once, and it is removed on every
//! path. The front end runs the torch commands inside an image with it when
//! no full imgctl is at hand (`commands/through_image.rs`).
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{KillContainerOptions, LogsOptions, WaitContainerOptions};
use futures_util::StreamExt;

use super::run::{
    create_error, gpu_rejection, is_gpu_rejection, managed_labels, ContainerGuard, RunRequest,
};
use super::DockerError;

/// What to run in the foreground: a [`RunRequest`] (its timeout is not
/// used: the run lasts as long as its command) plus the user and folder.
#[derive(Debug, Clone, Default)]
pub struct Foreground {
    /// Image, command, environment, GPUs, binds and labels.
    pub request: RunRequest,
    /// `UID:GID` to run as (None: the image's user).
    pub user: Option<String>,
    /// The folder the command starts in (None: the image's).
    pub working_dir: Option<String>,
}

/// Which of the container's streams a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Its stdout.
    Out,
    /// Its stderr.
    Err,
}

/// Something that happened on the way, for the caller to word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// This signal arrived and was passed on to the container's main process.
    Passed(&'static str),
    /// A second signal: the container is being removed at once.
    Killing(&'static str),
}

/// Runs `fg` in the foreground: `sink` gets its output as it comes,
/// `event` what happened to signals. Returns the exit code of its main
/// process (after a second signal: 130). The container is removed on every
/// path. A GPU request the engine cannot serve fails with
/// [`super::run::GpuRequestRejected`] in the chain, before anything ran.
pub async fn run_foreground(
    docker: &bollard::Docker,
    fg: Foreground,
    sink: &mut (dyn FnMut(Stream, &[u8]) + Send),
    event: &(dyn Fn(Event) + Sync),
) -> anyhow::Result<i64> {
    let req = &fg.request;
    let request = super::cdi::gpu_request(docker, req.gpus.as_ref(), req.gpu_api).await?;
    let body = ContainerCreateBody {
        image: Some(req.image.clone()),
        entrypoint: req.entrypoint.clone(),
        cmd: Some(req.cmd.clone()),
        env: (!req.env.is_empty()).then(|| req.env.clone()),
        labels: Some(managed_labels(&req.labels)),
        user: fg.user.clone(),
        working_dir: fg.working_dir.clone(),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        host_config: Some(HostConfig {
            binds: (!req.binds.is_empty()).then(|| req.binds.clone()),
            // As `docker run --ipc=host` would not: a private /dev/shm, large
            // enough for DataLoader workers and NCCL (16 GiB, as `up`).
            shm_size: Some(16 << 30),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut interrupt = super::Termination::install()?;
    let created = super::libpod::create_with_gpus(docker, None, body, request).await?;
    let created = created.map_err(|e| create_error(&e, &req.image))?;
    let mut guard = ContainerGuard::new(created.id.clone());
    let outcome = async {
        if let Err(e) = docker.start_container(&created.id, None).await {
            let msg = super::transport::words(&e);
            if is_gpu_rejection(&msg) {
                return Err(gpu_rejection(msg).into());
            }
            return Err(anyhow::Error::from(DockerError::StartContainer {
                image: req.image.clone(),
                message: msg,
            }));
        }
        let mut logs = docker.logs(
            &created.id,
            Some(LogsOptions {
                stdout: true,
                stderr: true,
                follow: true,
                ..Default::default()
            }),
        );
        let mut passed = false;
        loop {
            tokio::select! {
                chunk = logs.next() => match chunk {
                    None => break,
                    Some(Err(e)) => {
                        return Err(DockerError::of_engine(&e, |error| DockerError::Logs { error }).into())
                    }
                    Some(Ok(out)) => match out {
                        bollard::container::LogOutput::StdErr { message } => sink(Stream::Err, &message),
                        bollard::container::LogOutput::StdIn { .. } => {}
                        other => sink(Stream::Out, &other.into_bytes()),
                    },
                },
                sig = interrupt.recv() => {
                    if passed {
                        event(Event::Killing(sig));
                        return Ok(130);
                    }
                    passed = true;
                    event(Event::Passed(sig));
                    let signal = sig.trim_start_matches("SIG").to_string();
                    let _ = docker
                        .kill_container(&created.id, Some(KillContainerOptions { signal }))
                        .await;
                }
            }
        }
        let mut wait = docker.wait_container(&created.id, Some(WaitContainerOptions::default()));
        match wait.next().await {
            Some(Ok(r)) => Ok(r.status_code),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(e)) => {
                Err(DockerError::of_engine(&e, |error| DockerError::WaitContainer { error }).into())
            }
            None => Err(DockerError::WaitStreamClosed.into()),
        }
    }
    .await;
    let removed = guard.remove(docker).await;
    // Armed only when the run ended: a GPU request refused at start is
    // retried without GPUs by the caller, and an armed handler left from
    // this try would end the process at the retry's first Ctrl-C, before
    // that container is removed.
    let code = outcome?;
    removed?;
    interrupt.exit_on_next();
    Ok(code)
}
