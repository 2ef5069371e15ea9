//! Workstations as `imgctl ps` finds them: the labels every workstation
//! carries and the ports its entrypoint serves ([`LABEL_WORKSTATION`],
//! [`JUPYTER_PORT`]), the listing ([`list`] → [`Listed`]), a container's
//! log tail ([`log_tail`]) and why a stopped one stopped ([`stop_reason`]).
//! [`super::workstation`] makes them and re-exports all of this.
use std::collections::HashMap;

use bollard::query_parameters::{InspectContainerOptions, ListContainersOptions, LogsOptions};
use futures_util::StreamExt;

use super::tail::Tail;
use super::DockerError;

/// Label every workstation carries (`true`); `imgctl ps` lists by it.
pub const LABEL_WORKSTATION: &str = "io.imgctl.workstation";
/// Label: the host folder mounted at /workspace (absent: none).
pub const LABEL_WORKSPACE: &str = "io.imgctl.workstation.workspace";
/// Label: the GPUs asked for (`all`, `2`, `0,2`, `none`).
pub const LABEL_GPUS: &str = "io.imgctl.workstation.gpus";
/// Label: how its GPUs were asked for (`cdi`, `runtime`); absent without GPUs.
pub const LABEL_GPU_API: &str = "io.imgctl.workstation.gpu-api";
/// Label: the user namespace it was made with (`keep-id:uid=1000,gid=1000`);
/// absent: the engine's default.
pub const LABEL_USERNS: &str = "io.imgctl.workstation.userns";
/// Label: the user the image's services run as (for the `ssh` line).
pub const LABEL_USER: &str = "io.imgctl.workstation.user";
/// Label: the `HostKeyAlias` the host key placed in it is known by.
pub const LABEL_SSH_ALIAS: &str = "io.imgctl.workstation.ssh-alias";
/// Label: the named volume at the user's home (`down --volumes` removes it).
pub const LABEL_HOME_VOLUME: &str = "io.imgctl.workstation.home-volume";
/// Label: the private key file of the `ssh` line's `-i`.
pub const LABEL_SSH_IDENTITY: &str = "io.imgctl.workstation.ssh-identity";
/// Label: the uid of the user who started it (`crate::workstation::owner`);
/// absent on workstations of an imgctl before #50.
pub const LABEL_OWNER_UID: &str = "io.imgctl.workstation.owner-uid";
/// Label: the login name of the user who started it.
pub const LABEL_OWNER: &str = "io.imgctl.workstation.owner";

/// JupyterLab's port inside the container (the entrypoint's default).
pub const JUPYTER_PORT: u16 = 8888;
/// sshd's port inside the container (the entrypoint's default).
pub const SSH_PORT: u16 = 22;
/// TensorBoard's port inside the container (the entrypoint's default).
pub const TENSORBOARD_PORT: u16 = 6006;

/// The last `lines` lines of the container's output (stdout and stderr).
pub async fn log_tail(docker: &bollard::Docker, id: &str, lines: usize) -> String {
    let mut logs = docker.logs(
        id,
        Some(LogsOptions {
            stdout: true,
            stderr: true,
            tail: lines.to_string(),
            ..Default::default()
        }),
    );
    let mut text = Tail::new(super::tail::OUTPUT_TAIL);
    while let Some(Ok(chunk)) = logs.next().await {
        text.push(&chunk.into_bytes());
    }
    text.into_text()
}

/// One workstation as `imgctl ps` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    /// Container name.
    pub name: String,
    /// Container id (full).
    pub id: String,
    /// Image reference it was started from.
    pub image: String,
    /// `running`, `exited`, …
    pub state: String,
    /// The engine's status text (`Up 3 minutes (healthy)`).
    pub status: String,
    /// The GPUs asked for.
    pub gpus: String,
    /// How they were asked for (`cdi`, `runtime`; None without GPUs).
    pub gpu_api: Option<String>,
    /// The host folder at /workspace, if any.
    pub workspace: Option<String>,
    /// The user namespace it was made with (None: the engine's default).
    pub userns: Option<String>,
    /// JupyterLab's host address and port, when published.
    pub jupyter: Option<(String, u16)>,
    /// sshd's host address and port, when published.
    pub ssh: Option<(String, u16)>,
    /// TensorBoard's host address and port, when published (`up --tensorboard`).
    pub tensorboard: Option<(String, u16)>,
    /// The image's user (SSH logs in as it).
    pub user: Option<String>,
    /// The ports it was made to publish: container port and host port
    /// (None: one the engine picks at each start); a stopped container
    /// publishes none, so [`Listed::jupyter`] and the like are None then.
    pub bound: Vec<(u16, Option<u16>)>,
    /// The JupyterLab token (from the container's environment).
    pub token: Option<String>,
    /// Creation time, seconds since the epoch.
    pub created: i64,
    /// The named volume at the user's home.
    pub home_volume: Option<String>,
    /// The `HostKeyAlias` of its host key (`up` placed one).
    pub ssh_alias: Option<String>,
    /// The private key of the `ssh` line's `-i`.
    pub ssh_identity: Option<String>,
    /// The uid of the user who started it (None: an older workstation,
    /// or a label that is not a number).
    pub owner_uid: Option<u32>,
    /// That user's login name, as it was when it started.
    pub owner: Option<String>,
    /// Why a stopped workstation stopped, as its entrypoint said last
    /// (filled by [`read_stop_reasons`])
    /// (`idle-stop: idle for 1h`, `SIGTERM`); None when running or unsaid.
    pub stopped_why: Option<String>,
}

/// Fills [`Listed::stopped_why`] of the stopped ones among `listed` from
/// their logs (one request each: `ps` asks, `up` and `down` do not).
pub async fn read_stop_reasons(docker: &bollard::Docker, listed: &mut [Listed]) {
    for w in listed.iter_mut().filter(|w| w.state != "running") {
        w.stopped_why = stop_reason(&log_tail(docker, &w.id, 40).await);
    }
}

/// The reason in the entrypoint's last `stopping (WHY)` line of a log.
pub fn stop_reason(log: &str) -> Option<String> {
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("imgctl-entrypoint: stopping ("))?;
    let (_, rest) = line.split_once("stopping (")?;
    Some(rest.strip_suffix(')').unwrap_or(rest).trim().to_string())
}

/// Every workstation of the engine (`all`: stopped ones too), oldest first.
pub async fn list(docker: &bollard::Docker, all: bool) -> anyhow::Result<Vec<Listed>> {
    let mut filters = HashMap::new();
    filters.insert(
        "label".to_string(),
        vec![format!("{LABEL_WORKSTATION}=true")],
    );
    let opts = ListContainersOptions {
        all,
        filters: Some(filters),
        ..Default::default()
    };
    let summaries = docker
        .list_containers(Some(opts))
        .await
        .map_err(|e| DockerError::of_engine(&e, |error| DockerError::ListContainers { error }))?;
    let mut out = Vec::new();
    for c in summaries {
        let Some(id) = c.id.clone() else { continue };
        let labels = c.labels.clone().unwrap_or_default();
        let mut published: HashMap<u16, (String, u16)> = HashMap::new();
        for p in c.ports.unwrap_or_default() {
            if let Some(public) = p.public_port {
                published
                    .entry(p.private_port)
                    .or_insert((p.ip.unwrap_or_default(), public));
            }
        }
        let (env, bound) = container_facts(docker, &id).await;
        let token = env
            .into_iter()
            .find_map(|e| e.strip_prefix("JUPYTER_TOKEN=").map(str::to_string));
        out.push(Listed {
            name: c
                .names
                .unwrap_or_default()
                .first()
                .map_or(id.clone(), |n| n.trim_start_matches('/').to_string()),
            id,
            image: c.image.unwrap_or_default(),
            state: c.state.map(|s| s.to_string()).unwrap_or_default(),
            status: c.status.unwrap_or_default(),
            gpus: labels.get(LABEL_GPUS).cloned().unwrap_or_default(),
            gpu_api: labels.get(LABEL_GPU_API).cloned(),
            workspace: labels.get(LABEL_WORKSPACE).cloned(),
            userns: labels.get(LABEL_USERNS).cloned(),
            jupyter: published.get(&JUPYTER_PORT).cloned(),
            ssh: published.get(&SSH_PORT).cloned(),
            tensorboard: published.get(&TENSORBOARD_PORT).cloned(),
            user: labels.get(LABEL_USER).cloned(),
            token,
            bound,
            created: c.created.unwrap_or_default(),
            home_volume: labels.get(LABEL_HOME_VOLUME).cloned(),
            ssh_alias: labels.get(LABEL_SSH_ALIAS).cloned(),
            ssh_identity: labels.get(LABEL_SSH_IDENTITY).cloned(),
            owner_uid: labels.get(LABEL_OWNER_UID).and_then(|u| u.parse().ok()),
            owner: labels.get(LABEL_OWNER).cloned(),
            stopped_why: None,
        });
    }
    out.sort_by_key(|w| w.created);
    Ok(out)
}

/// The container's environment (`K=V`) and the ports it was made to
/// publish (container port, host port; None: one the engine picks), both
/// empty when it cannot be read.
async fn container_facts(
    docker: &bollard::Docker,
    id: &str,
) -> (Vec<String>, Vec<(u16, Option<u16>)>) {
    let Ok(inspected) = docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
    else {
        return (Vec::new(), Vec::new());
    };
    let env = inspected.config.and_then(|c| c.env).unwrap_or_default();
    let mut bound: Vec<(u16, Option<u16>)> = inspected
        .host_config
        .and_then(|h| h.port_bindings)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(key, bindings)| {
            let container = key.split('/').next()?.parse().ok()?;
            let host = bindings
                .unwrap_or_default()
                .first()
                .and_then(|b| b.host_port.as_deref().and_then(|p| p.parse().ok()));
            Some((container, host))
        })
        .collect();
    bound.sort_unstable();
    (env, bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_workstation_s_reason_is_its_entrypoint_s_last_stopping_line() {
        let log = "imgctl-entrypoint: JupyterLab: port 8888\n\
            imgctl-entrypoint: stopping (SIGTERM)\n\
            idle-stop: stopping the workstation: idle for 12s\n\
            imgctl-entrypoint: stopping (idle-stop: idle for 12s)\n\
            [I 2026-12-04 20:31:02 ServerApp] Shutting down 0 kernels\n";
        assert_eq!(stop_reason(log).as_deref(), Some("idle-stop: idle for 12s"));
        assert_eq!(
            stop_reason("imgctl-entrypoint: JupyterLab: port 8888\n"),
            None
        );
    }
}
