//! The container of a new workstation, from an [`UpPlan`]: its ports, its
//! environment (the entrypoint's contract, [`super::contract`]), its labels
//! (the image's user, the owner, the SSH alias), the host key placed in it,
//! its home volume and limits. Nothing here touches the engine.
use super::contract;
use super::host_key::{self, HostKey};
use super::owner::Owner;
use super::plan::{GpuChoice, UpPlan};
use crate::docker::workstation::{self as ws, PlacedFile, Publish, Workstation};
use crate::gpus::GpuSelection;

/// The GPUs the container is made with: all when none were named (the
/// engine may refuse: then none), none, or the named ones.
pub fn gpus(plan: &UpPlan) -> Option<GpuSelection> {
    match &plan.gpus {
        GpuChoice::Auto => Some(GpuSelection::All),
        GpuChoice::None => None,
        GpuChoice::Given(g) => Some(g.clone()),
    }
}

/// The host ports that were defaults, not given: another may be taken if
/// one is in use by the time the engine publishes it.
pub fn defaulted_ports(plan: &UpPlan) -> Vec<u16> {
    std::iter::once(&plan.jupyter)
        .chain(plan.ssh.as_ref())
        .chain(plan.tensorboard.as_ref())
        .filter(|p| !p.given)
        .filter_map(|p| p.host)
        .collect()
}

/// The workstation of `plan`: its services as the plan turns them on, the
/// image's `user` (with uid and gid `ids`) owning what is placed, JupyterLab
/// behind `token`, the kept `host_key` (None: the workstation makes its
/// own), and labelled with its owner `me`.
pub fn workstation(
    plan: &UpPlan,
    (user, ids): (&str, (u64, u64)),
    token: &str,
    host_key: Option<HostKey>,
    me: &Owner,
) -> Workstation {
    let mut env = vec![contract::entry(contract::JUPYTER_TOKEN, token)];
    let mut publish = vec![Publish {
        container: ws::JUPYTER_PORT,
        address: plan.listen.to_string(),
        host: plan.jupyter.host,
    }];
    let mut labels = super::owner::labels(me);
    labels.insert(ws::LABEL_USER.to_string(), user.to_string());
    let mut files = Vec::new();
    match &plan.ssh {
        Some(ssh) => {
            if let Some(key) = host_key {
                labels.insert(ws::LABEL_SSH_ALIAS.into(), key.alias);
                files.push(PlacedFile {
                    path: host_key::IN_CONTAINER.into(),
                    bytes: key.private,
                    mode: 0o600,
                    owner: ids,
                });
            }
            if let Some(i) = &plan.identity {
                labels.insert(ws::LABEL_SSH_IDENTITY.into(), i.display().to_string());
            }
            env.push(contract::entry(
                contract::SSH_AUTHORIZED_KEYS,
                plan.keys.join("\n"),
            ));
            publish.push(Publish {
                container: ws::SSH_PORT,
                address: plan.listen.to_string(),
                host: ssh.host,
            });
        }
        None => env.push(contract::entry(contract::MODE, "jupyter")),
    }
    if let Some(after) = plan.idle_stop {
        env.push(contract::entry(
            contract::IDLE_STOP,
            format!("{}s", after.as_secs()),
        ));
    }
    if let Some(tb) = &plan.tensorboard {
        env.push(contract::entry(contract::TENSORBOARD, 1));
        publish.push(Publish {
            container: ws::TENSORBOARD_PORT,
            address: plan.listen.to_string(),
            host: tb.host,
        });
    }
    Workstation {
        name: plan.name.clone(),
        image: plan.image.clone(),
        gpus: gpus(plan),
        workspace: plan.workspace.as_ref().map(|w| w.display().to_string()),
        publish,
        shm_bytes: plan.shm_bytes,
        env,
        ulimits: ws::ULIMITS
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect(),
        labels,
        files,
        // The user's home outlives the container (#45 item 4): `down`
        // keeps it, `down --volumes` removes it.
        home_volume: Some((super::home_volume(&plan.name), format!("/home/{user}"))),
        restart: plan.restart.clone(),
        userns: plan.userns.clone(),
        gpu_api: plan.gpu_api,
    }
}
