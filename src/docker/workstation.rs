//! Workstations: long-running containers of an imgctl image, started the way
//! people start them by hand (`docker run --gpus all --shm-size … -p 8888 -p
//! 2222 -v .:/workspace IMAGE`), found again by their label, and removed.
//!
//! This module owns the container's configuration ([`Workstation`] →
//! create body), its health as the image's HEALTHCHECK reports it
//! ([`health`]), running a command inside it ([`exec`]), listing the
//! workstations of the engine ([`list`], from `listing.rs`) and stopping one ([`remove`]). It
//! decides nothing about flags, defaults or wording: the workstation wing
//! (`src/workstation/`) decides, and `commands/workstation/` words it. A workstation outlives the imgctl that started it, so it never
//! carries the pid label of [`super::run`]'s short-lived containers (whose
//! clean-up would remove it).
use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, ContainerStateStatusEnum, HealthStatusEnum, HostConfig, Mount, MountType,
    PortBinding, ResourcesUlimits, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{InspectContainerOptions, StopContainerOptions};
use futures_util::StreamExt;

pub use super::listing::{
    list, log_tail, read_stop_reasons, stop_reason, Listed, JUPYTER_PORT, LABEL_GPUS,
    LABEL_GPU_API, LABEL_HOME_VOLUME, LABEL_OWNER, LABEL_OWNER_UID, LABEL_SSH_ALIAS,
    LABEL_SSH_IDENTITY, LABEL_USER, LABEL_USERNS, LABEL_WORKSPACE, LABEL_WORKSTATION, SSH_PORT,
    TENSORBOARD_PORT,
};
use super::run::device_request;
use super::tail::Tail;
use super::DockerError;
use crate::gpus::GpuSelection;

/// A file placed into the container after it is made and before it
/// starts, owned by the container's user.
#[derive(Clone)]
pub struct PlacedFile {
    /// Its absolute path inside the container (its folder must exist).
    pub path: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its mode (`0o600`).
    pub mode: u32,
    /// Its owner: uid and gid (the image's user).
    pub owner: (u64, u64),
}

impl std::fmt::Debug for PlacedFile {
    // Never the bytes: a placed file can be a private key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PlacedFile({}, {} bytes, {:o})",
            self.path,
            self.bytes.len(),
            self.mode
        )
    }
}

/// Where the host folder is mounted (the image's WORKDIR).
pub const WORKSPACE: &str = "/workspace";

/// The ulimits NCCL and pinned host memory want (NVIDIA's containers are
/// documented with `--ulimit memlock=-1 --ulimit stack=67108864`).
pub const ULIMITS: [(&str, i64); 2] = [("memlock", -1), ("stack", 64 * 1024 * 1024)];

/// A published port: the container's port on a host address, at a fixed
/// host port or (None) one the engine picks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// The container's port.
    pub container: u16,
    /// The host address (`127.0.0.1`).
    pub address: String,
    /// The host port; None lets the engine pick a free one.
    pub host: Option<u16>,
}

/// A workstation to create.
#[derive(Debug, Clone)]
pub struct Workstation {
    /// Container name.
    pub name: String,
    /// Image reference.
    pub image: String,
    /// GPUs to request; None requests none.
    pub gpus: Option<GpuSelection>,
    /// The host folder to mount read-write at [`WORKSPACE`].
    pub workspace: Option<String>,
    /// Ports to publish.
    pub publish: Vec<Publish>,
    /// /dev/shm's size in bytes.
    pub shm_bytes: i64,
    /// `K=V` environment entries (the token and keys go here).
    pub env: Vec<String>,
    /// Ulimits (name, soft = hard limit; −1 unlimited), usually [`ULIMITS`].
    pub ulimits: Vec<(String, i64)>,
    /// Labels besides [`LABEL_WORKSTATION`].
    pub labels: HashMap<String, String>,
    /// Files to place before it starts.
    pub files: Vec<PlacedFile>,
    /// A named volume and where it is mounted (the user's home): it
    /// outlives the container.
    pub home_volume: Option<(String, String)>,
    /// The engine's restart policy (`no`, `on-failure`, `unless-stopped`,
    /// `always`); None: the engine's default (`no`).
    pub restart: Option<String>,
    /// The user namespace mode (`keep-id`: Podman maps the caller's uid to
    /// the container's user); None: the engine's default.
    pub userns: Option<String>,
    /// How the GPUs are asked for ([`super::cdi::gpu_request`] decides at
    /// create; [`Workstation::create_body`] holds the runtime's request).
    pub gpu_api: super::cdi::GpuApi,
}

impl Workstation {
    /// The Engine API's create body for this workstation.
    pub fn create_body(&self) -> ContainerCreateBody {
        let mut labels = self.labels.clone();
        labels.insert(LABEL_WORKSTATION.into(), "true".into());
        labels.insert(
            LABEL_GPUS.into(),
            self.gpus.as_ref().map_or("none".into(), |g| g.to_string()),
        );
        if let Some(w) = &self.workspace {
            labels.insert(LABEL_WORKSPACE.into(), w.clone());
        }
        if let Some((volume, _)) = &self.home_volume {
            labels.insert(LABEL_HOME_VOLUME.into(), volume.clone());
        }
        if let Some(mode) = &self.userns {
            labels.insert(LABEL_USERNS.into(), mode.clone());
        }
        let mut ports: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
        let mut exposed: Vec<String> = Vec::new();
        for p in &self.publish {
            let key = format!("{}/tcp", p.container);
            if !exposed.contains(&key) {
                exposed.push(key.clone());
            }
            ports
                .entry(key)
                .or_default()
                .get_or_insert_with(Vec::new)
                .push(PortBinding {
                    host_ip: Some(p.address.clone()),
                    host_port: Some(p.host.map_or(String::new(), |h| h.to_string())),
                });
        }
        let host_config = HostConfig {
            device_requests: self.gpus.as_ref().map(|g| vec![device_request(g)]),
            // A bind `Mounts` entry, not a `Binds` string: the folder's path
            // is taken whole (`Binds` splits `SRC:DST:MODE` at every colon,
            // so a folder named `col:on` was refused as mode "/workspace").
            mounts: Some(
                self.workspace
                    .iter()
                    .map(|w| Mount {
                        typ: Some(MountType::BIND),
                        source: Some(w.clone()),
                        target: Some(WORKSPACE.to_string()),
                        read_only: Some(false),
                        ..Default::default()
                    })
                    // A named volume: the engine makes it on first use and
                    // fills it with the image's home (its dotfiles, owned
                    // by the user).
                    .chain(self.home_volume.iter().map(|(volume, at)| Mount {
                        typ: Some(MountType::VOLUME),
                        source: Some(volume.clone()),
                        target: Some(at.clone()),
                        read_only: Some(false),
                        ..Default::default()
                    }))
                    .collect(),
            )
            .filter(|m: &Vec<Mount>| !m.is_empty()),
            restart_policy: self.restart.as_ref().map(|name| RestartPolicy {
                name: Some(match name.as_str() {
                    "always" => RestartPolicyNameEnum::ALWAYS,
                    "unless-stopped" => RestartPolicyNameEnum::UNLESS_STOPPED,
                    "on-failure" => RestartPolicyNameEnum::ON_FAILURE,
                    _ => RestartPolicyNameEnum::NO,
                }),
                maximum_retry_count: None,
            }),
            port_bindings: Some(ports),
            shm_size: Some(self.shm_bytes),
            userns_mode: self.userns.clone(),
            // Docker's default from 20.10 on, not Podman's (4.3): the
            // image's sshd runs as its user and listens on port 22.
            sysctls: Some(HashMap::from([(
                "net.ipv4.ip_unprivileged_port_start".to_string(),
                "0".to_string(),
            )])),
            ulimits: Some(
                self.ulimits
                    .iter()
                    .map(|(name, value)| ResourcesUlimits {
                        name: Some(name.clone()),
                        soft: Some(*value),
                        hard: Some(*value),
                    })
                    .collect(),
            ),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(self.image.clone()),
            env: Some(self.env.clone()),
            labels: Some(labels),
            exposed_ports: Some(exposed),
            host_config: Some(host_config),
            ..Default::default()
        }
    }
}

/// Why a workstation could not be made or found (the command layer words
/// each with its hint in `commands/error/workstation.rs`).
#[derive(Debug, thiserror::Error)]
pub enum WorkstationError {
    /// The name is taken by a container.
    #[error("a container named {name} already exists{}", if *.workstation { " (an imgctl workstation)" } else { "" })]
    NameTaken {
        /// The name.
        name: String,
        /// Whether it is one of imgctl's workstations.
        workstation: bool,
    },
    /// No container of that name.
    #[error("no workstation named {name}")]
    NotFound {
        /// The name as given.
        name: String,
    },
    /// Another user's workstation (#50 H2): imgctl acts on it only when
    /// told to (`--all-users`).
    #[error("{name} is {owner}'s workstation, not yours")]
    NotYours {
        /// The name.
        name: String,
        /// Its owner, as `alice (uid 1001)`.
        owner: String,
    },
    /// A container of that name that imgctl did not start as a workstation.
    #[error("{name} is a container, but not an imgctl workstation")]
    NotAWorkstation {
        /// The name.
        name: String,
    },
    /// The engine (its runtime) may not raise a ulimit this far.
    #[error("the engine may not set the ulimit {}: {message}", .limit.clone().unwrap_or_else(|| .ulimits.join(", ")))]
    UlimitRefused {
        /// The ulimits asked for (`memlock=-1`).
        ulimits: Vec<String>,
        /// The limit the runtime named (`nofile`), when it named one: one
        /// imgctl asked for, or one of the engine's own defaults.
        limit: Option<String>,
        /// The engine's words.
        message: String,
    },
    /// The engine's runtime cannot run a container on this host at all
    /// (crun on hybrid cgroups).
    #[error("the engine's runtime cannot run containers here: {message}")]
    RuntimeCannotRun {
        /// The engine's words.
        message: String,
    },
    /// The engine could not publish a port (taken by another process or container).
    #[error("port {address}:{port} is taken: {message}")]
    PortTaken {
        /// Host address.
        address: String,
        /// Host port.
        port: String,
        /// The engine's words.
        message: String,
    },
}

/// What the container's state and healthcheck say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Running; the healthcheck has not passed yet.
    Starting,
    /// Running, and the engine has not run the healthcheck `test` (its
    /// Docker form) once yet; it runs every `interval`. Podman runs them by
    /// systemd timers, so without systemd never.
    Unchecked {
        /// The check (`["CMD", …]` or `["CMD-SHELL", "…"]`).
        test: Vec<String>,
        /// How often the engine would run it.
        interval: Duration,
    },
    /// Running and the healthcheck passes (or the image has none).
    Healthy,
    /// The healthcheck failed its retries; its last output.
    Unhealthy(String),
    /// The main process ended with this code.
    Exited(i64),
    /// The container is gone: removed from outside (`docker rm -f`).
    Removed,
}

/// Creates and starts the workstation; returns its id. A GPU request the
/// engine cannot serve fails with [`super::run::GpuRequestRejected`] in the chain (the
/// half-made container is removed first), a taken port with
/// [`WorkstationError::PortTaken`].
pub async fn create_and_start(
    docker: &bollard::Docker,
    ws: &Workstation,
) -> anyhow::Result<String> {
    let request = super::cdi::gpu_request(docker, ws.gpus.as_ref(), ws.gpu_api).await?;
    let mut body = ws.create_body();
    if let Some(asked) = &request {
        body.labels
            .get_or_insert_with(HashMap::new)
            .insert(LABEL_GPU_API.into(), asked.api.to_string());
    }
    let created = super::libpod::create_with_gpus(docker, Some(&ws.name), body, request)
        .await?
        .map_err(|e| start_error(&e, ws, true))?;
    for file in &ws.files {
        if let Err(e) = place(docker, &created.id, file).await {
            remove_by_id(docker, &created.id).await?;
            return Err(e);
        }
    }
    if let Err(e) = docker.start_container(&created.id, None).await {
        let err = start_error(&e, ws, false);
        remove_by_id(docker, &created.id).await?;
        return Err(err);
    }
    Ok(created.id)
}

/// Places `file` into the made container `id` (nothing when its folder is
/// not in the image): a one-file tar through the
/// archive endpoint, whose header's owner the engine keeps (not
/// `copyUIDGID`: Docker 20.10 looks a numeric `USER 1000:1000` up as a name).
async fn place(docker: &bollard::Docker, id: &str, file: &PlacedFile) -> anyhow::Result<()> {
    let (dir, name) = file.path.rsplit_once('/').unwrap_or(("/", &file.path));
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(file.bytes.len() as u64);
    header.set_mode(file.mode);
    header.set_uid(file.owner.0);
    header.set_gid(file.owner.1);
    header.set_mtime(0);
    header.set_cksum();
    tar.append_data(&mut header, name, file.bytes.as_slice())?;
    let tar = tar.into_inner()?;
    let opts = bollard::query_parameters::UploadToContainerOptions {
        path: if dir.is_empty() {
            "/".into()
        } else {
            dir.into()
        },
        ..Default::default()
    };
    match docker
        .upload_to_container(id, Some(opts), bollard::body_full(tar.into()))
        .await
    {
        Ok(()) => Ok(()),
        // The folder is not in the image (not one of imgctl's): nothing
        // there would read the file.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(anyhow::anyhow!(
            "could not place {} into the container: {e}",
            file.path
        )),
    }
}

/// Starts the stopped workstation `id` again, as it was made: its token,
/// keys, folder and ports (`docker start`).
pub async fn start_again(docker: &bollard::Docker, id: &str) -> anyhow::Result<()> {
    match docker.start_container(id, None).await {
        // 304: it runs already.
        Ok(())
        | Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 304, ..
        }) => Ok(()),
        Err(e) => Err(
            DockerError::of_engine(&e, |error| DockerError::RemoveContainer {
                id: id.to_string(),
                error,
            })
            .into(),
        ),
    }
}

/// The error for a failed create (`creating`) or start of `ws`.
fn start_error(e: &bollard::errors::Error, ws: &Workstation, creating: bool) -> anyhow::Error {
    if let Some(too_much) = super::transport::too_much(e) {
        return DockerError::EngineTooMuch(too_much).into();
    }
    let msg = super::transport::words(e);
    let lower = msg.to_ascii_lowercase();
    if super::run::is_gpu_rejection(&msg) {
        return super::run::gpu_rejection(msg).into();
    }
    // runc: "error setting rlimit type 8"; crun (Podman): "setrlimit `RLIMIT_MEMLOCK`".
    if lower.contains("error setting rlimit") || lower.contains("setrlimit") {
        return WorkstationError::UlimitRefused {
            ulimits: ws.ulimits.iter().map(|(n, v)| format!("{n}={v}")).collect(),
            limit: super::ulimit::refused_limit(&msg),
            message: msg,
        }
        .into();
    }
    if super::ulimit::runtime_cannot_run(&msg) {
        return WorkstationError::RuntimeCannotRun { message: msg }.into();
    }
    if lower.contains("already in use") && lower.contains("name") {
        return WorkstationError::NameTaken {
            name: ws.name.clone(),
            workstation: false,
        }
        .into();
    }
    if lower.contains("port is already allocated") || lower.contains("address already in use") {
        let taken = ws
            .publish
            .iter()
            .find(|p| p.host.is_some_and(|h| msg.contains(&format!(":{h}"))));
        return WorkstationError::PortTaken {
            address: taken.map_or("?".into(), |p| p.address.clone()),
            port: taken
                .and_then(|p| p.host)
                .map_or("?".into(), |h| h.to_string()),
            message: msg,
        }
        .into();
    }
    // Libpod's create says `IMAGE: image not known` (a 500).
    if creating
        && (msg.contains("No such image") || msg.contains("image not known") || msg.contains("404"))
    {
        return DockerError::NoImageForContainer {
            image: ws.image.clone(),
        }
        .into();
    }
    if creating {
        DockerError::CreateContainer {
            image: ws.image.clone(),
            message: msg,
        }
        .into()
    } else {
        DockerError::StartContainer {
            image: ws.image.clone(),
            message: msg,
        }
        .into()
    }
}

/// The container's state as [`Health`].
pub async fn health(docker: &bollard::Docker, id: &str) -> anyhow::Result<Health> {
    let mut tries = 0;
    let inspect = loop {
        match docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
        {
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(Health::Removed),
            // Podman says `stopped` (not Docker's schema) between the
            // process's end and its clean-up, which then says `exited`.
            Err(e) if tries < 20 && e.to_string().contains("unknown variant `stopped`") => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => break other,
        }
    };
    let inspect = inspect.map_err(|e| {
        DockerError::of_engine(&e, |error| DockerError::InspectContainer {
            id: id.to_string(),
            error,
        })
    })?;
    let state = inspect.state.unwrap_or_default();
    // Being removed, or dead after a removal failed half-way: gone.
    if matches!(
        state.status,
        Some(ContainerStateStatusEnum::REMOVING | ContainerStateStatusEnum::DEAD)
    ) {
        return Ok(Health::Removed);
    }
    let running = matches!(
        state.status,
        Some(ContainerStateStatusEnum::RUNNING | ContainerStateStatusEnum::CREATED)
    );
    if !running {
        return Ok(Health::Exited(state.exit_code.unwrap_or(-1)));
    }
    let Some(h) = state.health else {
        return Ok(Health::Healthy);
    };
    // Podman 4.3 reports `"Health": {"Status": ""}` for a container without
    // a healthcheck (Docker leaves Health out).
    let check = inspect.config.as_ref().and_then(|c| c.healthcheck.as_ref());
    let test = check.and_then(|h| h.test.clone()).unwrap_or_default();
    let no_healthcheck = test.is_empty() || test[0] == "NONE";
    Ok(match h.status {
        Some(HealthStatusEnum::HEALTHY) | Some(HealthStatusEnum::NONE) | None => Health::Healthy,
        Some(HealthStatusEnum::EMPTY) if no_healthcheck => Health::Healthy,
        Some(HealthStatusEnum::STARTING) if h.log.as_ref().map_or(true, Vec::is_empty) => {
            // The engine's default interval is 30 s.
            let ns = check.and_then(|h| h.interval).filter(|n| *n > 0);
            Health::Unchecked {
                test,
                interval: Duration::from_nanos(ns.map_or(30_000_000_000, |n| n as u64)),
            }
        }
        Some(HealthStatusEnum::UNHEALTHY) => Health::Unhealthy(
            h.log
                .unwrap_or_default()
                .last()
                .and_then(|l| l.output.clone())
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
        _ => Health::Starting,
    })
}

/// What a command run inside a container left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Its exit code.
    pub exit_code: i64,
    /// Its stdout (the last [`super::run::STDOUT_LIMIT`] bytes).
    pub stdout: String,
    /// Its stderr (the last [`super::tail::OUTPUT_TAIL`] bytes).
    pub stderr: String,
}

/// Runs `cmd` inside the running container `id` as the container's user and
/// waits for it (at most `timeout`).
pub async fn exec(
    docker: &bollard::Docker,
    id: &str,
    cmd: Vec<String>,
    env: Vec<String>,
    timeout: Duration,
) -> anyhow::Result<ExecOutput> {
    use bollard::exec::{CreateExecOptions, StartExecResults};
    let created = docker
        .create_exec(
            id,
            CreateExecOptions {
                cmd: Some(cmd),
                env: Some(env),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| DockerError::of_engine(&e, |error| DockerError::Exec { error }))?;
    let run = async {
        let mut stdout = Tail::new(super::run::STDOUT_LIMIT);
        let mut stderr = Tail::new(super::tail::OUTPUT_TAIL);
        if let StartExecResults::Attached { mut output, .. } = docker
            .start_exec(&created.id, None)
            .await
            .map_err(|e| DockerError::of_engine(&e, |error| DockerError::Exec { error }))?
        {
            while let Some(chunk) = output.next().await {
                match chunk
                    .map_err(|e| DockerError::of_engine(&e, |error| DockerError::Exec { error }))?
                {
                    bollard::container::LogOutput::StdErr { message } => stderr.push(&message),
                    bollard::container::LogOutput::StdOut { message }
                    | bollard::container::LogOutput::Console { message } => stdout.push(&message),
                    bollard::container::LogOutput::StdIn { .. } => {}
                }
            }
        }
        let inspect = docker
            .inspect_exec(&created.id)
            .await
            .map_err(|e| DockerError::of_engine(&e, |error| DockerError::Exec { error }))?;
        Ok::<_, anyhow::Error>(ExecOutput {
            exit_code: inspect.exit_code.unwrap_or(-1),
            stdout: stdout.into_text(),
            stderr: stderr.into_text(),
        })
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(out) => out,
        Err(_) => Err(DockerError::Timeout {
            seconds: timeout.as_secs(),
        }
        .into()),
    }
}

/// Whether a container named exactly `name` exists (never one whose id
/// starts with it), and if so whether it is a workstation: None (no such
/// container), Some(true|false).
/// The size of a container's /dev/shm in bytes, as the engine was told;
/// `None` when it cannot say.
pub async fn shm_bytes(docker: &bollard::Docker, id: &str) -> Option<i64> {
    docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .ok()?
        .host_config?
        .shm_size
}

/// Finds the container named `name`: its id and whether it is a workstation.
pub async fn find(docker: &bollard::Docker, name: &str) -> anyhow::Result<Option<(String, bool)>> {
    match docker
        .inspect_container(name, None::<InspectContainerOptions>)
        .await
    {
        // The engine also finds a container by an id or an id's prefix:
        // `down 4a12` must not remove the workstation whose id starts so.
        Ok(i) if i.name.as_deref().map(|n| n.trim_start_matches('/')) != Some(name) => Ok(None),
        Ok(i) => {
            let labels = i.config.and_then(|c| c.labels).unwrap_or_default();
            let is_ws = labels.get(LABEL_WORKSTATION).map(String::as_str) == Some("true");
            Ok(Some((i.id.unwrap_or_default(), is_ws)))
        }
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(
            DockerError::of_engine(&e, |error| DockerError::InspectContainer {
                id: name.to_string(),
                error,
            })
            .into(),
        ),
    }
}

/// Stops workstation `name` (SIGTERM, then SIGKILL after `grace`) and removes
/// it with its anonymous volumes; the mounted host folder is untouched.
/// Refuses a container that is not a workstation.
pub async fn remove(docker: &bollard::Docker, name: &str, grace: Duration) -> anyhow::Result<()> {
    let id = match find(docker, name).await? {
        None => {
            return Err(WorkstationError::NotFound {
                name: name.to_string(),
            }
            .into())
        }
        Some((_, false)) => {
            return Err(WorkstationError::NotAWorkstation {
                name: name.to_string(),
            }
            .into())
        }
        Some((id, true)) => id,
    };
    let stop = docker
        .stop_container(
            &id,
            Some(StopContainerOptions {
                t: Some(i32::try_from(grace.as_secs()).unwrap_or(i32::MAX)),
                ..Default::default()
            }),
        )
        .await;
    match stop {
        Ok(()) => {}
        // 304: already stopped; 404: gone meanwhile.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 304 | 404,
            ..
        }) => {}
        Err(e) => {
            return Err(
                DockerError::of_engine(&e, |error| DockerError::RemoveContainer {
                    id: name.to_string(),
                    error,
                })
                .into(),
            )
        }
    }
    remove_by_id(docker, &id).await
}

/// Force-removes container `id` (and its anonymous volumes); gone already is fine.
pub async fn remove_by_id(docker: &bollard::Docker, id: &str) -> anyhow::Result<()> {
    super::run::remove_container(docker, id).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_create_body_carries_what_a_workstation_needs() {
        let ws = Workstation {
            name: "ws".into(),
            image: "imgctl/cu124:latest".into(),
            gpus: Some(GpuSelection::All),
            workspace: Some("/home/me/proj".into()),
            publish: vec![
                Publish {
                    container: JUPYTER_PORT,
                    address: "127.0.0.1".into(),
                    host: Some(8888),
                },
                Publish {
                    container: SSH_PORT,
                    address: "127.0.0.1".into(),
                    host: None,
                },
            ],
            shm_bytes: 16 << 30,
            env: vec!["JUPYTER_TOKEN=t".into()],
            ulimits: ULIMITS.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
            labels: HashMap::new(),
            files: Vec::new(),
            home_volume: Some(("ws-home".into(), "/home/dev".into())),
            restart: Some("unless-stopped".into()),
            userns: Some("keep-id".into()),
            gpu_api: crate::docker::cdi::GpuApi::Auto,
        };
        let body = ws.create_body();
        let host = body.host_config.unwrap();
        assert_eq!(host.shm_size, Some(16 << 30));
        assert_eq!(host.userns_mode.as_deref(), Some("keep-id"));
        assert_eq!(body.labels.as_ref().unwrap()[LABEL_USERNS], "keep-id");
        let mount = &host.mounts.as_ref().unwrap()[0];
        assert_eq!(mount.typ, Some(MountType::BIND));
        assert_eq!(mount.source.as_deref(), Some("/home/me/proj"));
        assert_eq!(mount.target.as_deref(), Some("/workspace"));
        let home = &host.mounts.as_ref().unwrap()[1];
        assert_eq!(home.typ, Some(MountType::VOLUME));
        assert_eq!(
            (home.source.as_deref(), home.target.as_deref()),
            (Some("ws-home"), Some("/home/dev"))
        );
        assert_eq!(
            host.restart_policy.as_ref().unwrap().name,
            Some(RestartPolicyNameEnum::UNLESS_STOPPED)
        );
        assert_eq!(host.binds, None);
        assert_eq!(host.device_requests.unwrap()[0].count, Some(-1));
        let ports = host.port_bindings.unwrap();
        assert_eq!(
            ports["8888/tcp"].as_ref().unwrap()[0].host_port.as_deref(),
            Some("8888")
        );
        // An empty host port: the engine picks a free one.
        assert_eq!(
            ports["22/tcp"].as_ref().unwrap()[0].host_port.as_deref(),
            Some("")
        );
        let ulimits = host.ulimits.unwrap();
        assert!(ulimits
            .iter()
            .any(|u| u.name.as_deref() == Some("memlock") && u.soft == Some(-1)));
        let labels = body.labels.unwrap();
        assert_eq!(labels[LABEL_WORKSTATION], "true");
        assert_eq!(labels[LABEL_GPUS], "all");
        // Never the pid label: the stale-container clean-up would remove it.
        assert!(!labels.contains_key(super::super::run::LABEL_PID));
    }
}
