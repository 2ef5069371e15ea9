//! A workstation's home volume: made by `up` with the labels that say
//! whose it is and which workstation's (the engine would make it bare on
//! first use), so that `down --volumes NAME` finds and removes it after its
//! container is gone (#53 F8), and only the caller's.
use std::collections::HashMap;

use super::listing::{LABEL_OWNER, LABEL_OWNER_UID};

/// Label on a home volume: the workstation it is the home of.
pub const LABEL_HOME_OF: &str = "io.imgctl.workstation.home-of";

/// A home volume as the engine reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Home {
    /// The volume's name.
    pub name: String,
    /// The workstation it is the home of ([`LABEL_HOME_OF`]; None: a
    /// volume an older imgctl's `up` or someone else made).
    pub of: Option<String>,
    /// Its owner's uid (None: not labelled).
    pub owner_uid: Option<u32>,
    /// Its owner's login name.
    pub owner: Option<String>,
}

/// The volume `name`, when it exists (an engine that cannot tell: none).
pub async fn find(docker: &bollard::Docker, name: &str) -> Option<Home> {
    let v = docker.inspect_volume(name).await.ok()?;
    let labels = v.labels;
    Some(Home {
        name: v.name,
        of: labels.get(LABEL_HOME_OF).cloned(),
        owner_uid: labels.get(LABEL_OWNER_UID).and_then(|u| u.parse().ok()),
        owner: labels.get(LABEL_OWNER).cloned(),
    })
}

/// Whether the named volume `name` exists (an engine that cannot tell: no).
pub async fn exists(docker: &bollard::Docker, name: &str) -> bool {
    docker.inspect_volume(name).await.is_ok()
}

/// Makes the volume `name` as the home of `workstation`, labelled with its
/// owner (`owner_labels`: the workstation's own owner labels). An engine
/// fills an empty named volume from the image at its first mount, as it
/// does one it makes itself.
pub async fn create_home(
    docker: &bollard::Docker,
    name: &str,
    workstation: &str,
    owner_labels: &HashMap<String, String>,
) -> anyhow::Result<()> {
    let mut labels: HashMap<String, String> = owner_labels
        .iter()
        .filter(|(k, _)| k.as_str() == LABEL_OWNER_UID || k.as_str() == LABEL_OWNER)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.insert(LABEL_HOME_OF.into(), workstation.into());
    docker
        .create_volume(bollard::models::VolumeCreateRequest {
            name: Some(name.into()),
            labels: Some(labels),
            ..Default::default()
        })
        .await
        .map(|_| ())
        .map_err(|e| anyhow::anyhow!("could not make the home volume {name}: {e}"))
}

/// Removes the named volume `name`; gone already is fine.
pub async fn remove(docker: &bollard::Docker, name: &str) -> anyhow::Result<()> {
    match docker
        .remove_volume(name, None::<bollard::query_parameters::RemoveVolumeOptions>)
        .await
    {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(anyhow::anyhow!("could not remove the volume {name}: {e}")),
    }
}
