//! What a workstation that already exists has other than a new `up` asks
//! (#45 F5): each setting that differs, typed; the command layer words them
//! and says how to apply them. A setting left to its default (no GPUs
//! named, a port not given) matches what the workstation has.
use super::plan::{GpuChoice, PortPlan, UpPlan};
use crate::docker::workstation::{self as ws, Listed};

/// A setting a workstation is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// The image it runs.
    Image,
    /// The host folder at /workspace.
    Folder,
    /// The GPUs it was given.
    Gpus,
    /// The size of /dev/shm.
    ShmSize,
    /// JupyterLab's host port.
    JupyterPort,
    /// SSH's host port, or SSH at all.
    Ssh,
    /// TensorBoard's host port, or TensorBoard at all.
    TensorBoard,
}

impl Setting {
    /// Whether it is a service that may be off (SSH, TensorBoard).
    pub fn is_service(self) -> bool {
        matches!(self, Setting::Ssh | Setting::TensorBoard)
    }
}

/// One setting that differs: what the workstation has (None: a service it
/// does not serve) and what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Which setting.
    pub setting: Setting,
    /// What it has (`all`, `16g`, `8888`, `any`; None: the service is off).
    pub has: Option<String>,
    /// What was asked.
    pub asked: String,
}

/// Each setting in which the workstation `w` (with /dev/shm of `shm`
/// bytes, when the engine said) differs from `plan`.
pub fn of(plan: &UpPlan, w: &Listed, shm: Option<i64>) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut differ = |setting: Setting, has: String, asked: String| {
        if has != asked {
            out.push(Difference {
                setting,
                has: Some(has),
                asked,
            });
        }
    };
    // Only what was asked for (#53 F9): a plain `up` after an idle stop
    // names no image and no /dev/shm size, so neither differs.
    if plan.image_given {
        differ(Setting::Image, w.image.clone(), plan.image.clone());
    }
    let folder = |f: Option<String>| f.unwrap_or_else(|| "none mounted".into());
    differ(
        Setting::Folder,
        folder(w.workspace.clone()),
        folder(plan.workspace.as_ref().map(|p| p.display().to_string())),
    );
    match &plan.gpus {
        GpuChoice::Auto => {}
        GpuChoice::None => differ(Setting::Gpus, w.gpus.clone(), "none".into()),
        GpuChoice::Given(g) => differ(Setting::Gpus, w.gpus.clone(), g.to_string()),
    }
    if let Some(has) = shm.filter(|_| plan.shm_given) {
        differ(
            Setting::ShmSize,
            size_words(has),
            size_words(plan.shm_bytes),
        );
    }
    // The host port of a container port: the one published now, or for a
    // stopped workstation (which publishes none) the one it was made with
    // (Some(None): one the engine picks at each start); None: no such port.
    let has = |live: &Option<(String, u16)>, container: u16| -> Option<Option<u16>> {
        match live {
            Some((_, p)) => Some(Some(*p)),
            None => w
                .bound
                .iter()
                .find(|(c, _)| *c == container)
                .map(|(_, h)| *h),
        }
    };
    let words = |p: Option<Option<u16>>| match p {
        None => "off".to_string(),
        Some(None) => "any".to_string(),
        Some(Some(p)) => p.to_string(),
    };
    if plan.jupyter.given {
        differ(
            Setting::JupyterPort,
            words(has(&w.jupyter, ws::JUPYTER_PORT)),
            plan.jupyter.host.map_or("off".into(), |p| p.to_string()),
        );
    }
    let service =
        |asked: &Option<PortPlan>, has: Option<Option<u16>>, setting: Setting| match (asked, has) {
            (Some(a), Some(p)) if a.given && a.host != p => Some(Difference {
                setting,
                has: Some(words(Some(p))),
                asked: a.host.map_or("any".into(), |h| h.to_string()),
            }),
            (Some(_), None) => Some(Difference {
                setting,
                has: None,
                asked: "one".into(),
            }),
            // Not asking (no key, no TensorBoard) is no asking for none.
            _ => None,
        };
    out.extend(service(&plan.ssh, has(&w.ssh, ws::SSH_PORT), Setting::Ssh));
    out.extend(service(
        &plan.tensorboard,
        has(&w.tensorboard, ws::TENSORBOARD_PORT),
        Setting::TensorBoard,
    ));
    out
}

/// A size as the shm setting takes it: `16g`, `512m`, or bytes.
pub fn size_words(bytes: i64) -> String {
    match bytes {
        b if b > 0 && b % (1 << 30) == 0 => format!("{}g", b >> 30),
        b if b > 0 && b % (1 << 20) == 0 => format!("{}m", b >> 20),
        b => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shm_sizes_read_as_the_flag_takes_them() {
        assert_eq!(size_words(16 << 30), "16g");
        assert_eq!(size_words(512 << 20), "512m");
        assert_eq!(size_words(1000), "1000");
    }
}
