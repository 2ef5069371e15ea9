//! A fleet as the fit judges it ([`Group`]s: GPU model, compute
//! capability, driver, node count), from the three places one comes from:
//! a fleet file a person writes ([`parse_fleet`]), the nodes a fleet
//! verify's history recorded ([`groups_of_nodes`]), and this host's GPUs
//! through the NVML seam ([`host_groups`]).
use serde::{Deserialize, Serialize};

use super::archs;
use crate::nvml::{NvmlBackend, NvmlErr};

/// One kind of GPU in a fleet, on one driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Group {
    /// The model as the fleet names it (`B200`, `NVIDIA H200`).
    pub model: String,
    /// Its compute capability.
    pub cc: (u32, u32),
    /// The driver of these nodes.
    pub driver: String,
    /// How many nodes (or GPUs, on a host) have it.
    pub nodes: u32,
}

impl Group {
    /// `B200 (sm_100)`.
    pub fn label(&self) -> String {
        format!("{} (sm_{}{})", self.model, self.cc.0, self.cc.1)
    }

    /// Its compute capability as one number (`100` for 10.0).
    pub fn sm(&self) -> u32 {
        self.cc.0 * 10 + self.cc.1
    }
}

/// The fleet file's version this imgctl reads.
pub const FLEET_FILE_VERSION: u32 = 1;

/// The most bytes a fleet file may have.
pub const FLEET_FILE_MAX: u64 = 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetFile {
    version: u32,
    gpus: Vec<FleetGpu>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetGpu {
    model: String,
    #[serde(default)]
    compute_capability: Option<String>,
    driver: String,
    #[serde(default = "one")]
    nodes: u32,
}

fn one() -> u32 {
    1
}

/// Reads a fleet file's text:
///
/// ```yaml
/// version: 1
/// gpus:
///   - {model: B200, driver: 570.133.20, nodes: 16}
///   - {model: H200, driver: 550.54.15, nodes: 8}
///   - {model: My GPU, compute_capability: "9.0", driver: 570.86.15}
/// ```
///
/// The error is one line naming the entry and what to write.
pub fn parse_fleet(text: &str) -> Result<Vec<Group>, String> {
    crate::yaml::nesting_ok(text)?;
    let file: FleetFile = serde_yaml::from_str(text).map_err(|e| {
        format!("{e} (the keys are version and gpus: model, driver, nodes, compute_capability)")
    })?;
    if file.version != FLEET_FILE_VERSION {
        return Err(format!(
            "version {} is not one this imgctl reads (write `version: {FLEET_FILE_VERSION}`)",
            file.version
        ));
    }
    if file.gpus.is_empty() {
        return Err("`gpus` is empty: list the GPU models of the fleet".to_string());
    }
    file.gpus
        .into_iter()
        .enumerate()
        .map(|(i, g)| group_of(i, g))
        .collect()
}

fn group_of(i: usize, g: FleetGpu) -> Result<Group, String> {
    let at = format!("gpus[{i}] ({})", g.model.trim());
    if g.model.trim().is_empty() {
        return Err(format!("gpus[{i}]: `model` is empty"));
    }
    let driver_ok = !g.driver.is_empty()
        && g.driver
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !driver_ok {
        return Err(format!(
            "{at}: driver `{}` is not a driver version (write it as nvidia-smi prints it: 570.133.20)",
            g.driver
        ));
    }
    let cc = match &g.compute_capability {
        Some(text) => parse_cc(text).ok_or_else(|| {
            format!("{at}: compute_capability `{text}` is not MAJOR.MINOR (write \"9.0\")")
        })?,
        None => archs::gpu_model(&g.model).map(|m| m.cc).ok_or_else(|| {
            format!(
                "{at}: imgctl's table has no GPU model `{}`: give its compute_capability (\"10.0\"), from {}",
                g.model.trim(),
                archs::CC_SOURCE
            )
        })?,
    };
    if g.nodes == 0 {
        return Err(format!(
            "{at}: `nodes` is 0: leave the entry out, or count its nodes"
        ));
    }
    Ok(Group {
        model: g.model.trim().to_string(),
        cc,
        driver: g.driver,
        nodes: g.nodes,
    })
}

fn parse_cc(text: &str) -> Option<(u32, u32)> {
    let (a, b) = text.trim().split_once('.')?;
    let major: u32 = a.parse().ok()?;
    let minor: u32 = b.parse().ok()?;
    (major < 100 && minor < 10).then_some((major, minor))
}

/// A fleet from nodes as a history recorded them, each its driver and its
/// GPUs (name, `sm_90` when read): one group per model and driver, its
/// nodes counted once each. A GPU whose compute capability is neither
/// recorded nor in the table is left out.
pub fn groups_of_nodes(
    nodes: impl Iterator<Item = (String, Vec<(String, Option<String>)>)>,
) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (driver, gpus) in nodes {
        let mut seen: Vec<String> = Vec::new();
        for (name, sm) in gpus {
            let model = name.strip_prefix("NVIDIA ").unwrap_or(&name).to_string();
            let cc = sm
                .as_deref()
                .and_then(|s| s.strip_prefix("sm_"))
                .and_then(|d| d.parse::<u32>().ok())
                .map(|n| (n / 10, n % 10))
                .or_else(|| archs::gpu_model(&name).map(|m| m.cc));
            let Some(cc) = cc else { continue };
            if seen.contains(&model) {
                continue;
            }
            seen.push(model.clone());
            match groups
                .iter_mut()
                .find(|g| g.model == model && g.driver == driver)
            {
                Some(g) => g.nodes += 1,
                None => groups.push(Group {
                    model,
                    cc,
                    driver: driver.clone(),
                    nodes: 1,
                }),
            }
        }
    }
    groups
}

/// The host's GPUs as a fleet: one group per model, on the host's driver.
pub fn host_groups(nvml: &dyn NvmlBackend) -> Result<Vec<Group>, NvmlErr> {
    let driver = nvml.driver_version()?;
    let mut groups: Vec<Group> = Vec::new();
    for i in 0..nvml.device_count()? {
        let name = nvml.name(i)?;
        let (major, minor) = nvml.compute_capability(i)?;
        let model = name.strip_prefix("NVIDIA ").unwrap_or(&name).to_string();
        match groups.iter_mut().find(|g| g.model == model) {
            Some(g) => g.nodes += 1,
            None => groups.push(Group {
                model,
                cc: (major.max(0) as u32, minor.max(0) as u32),
                driver: driver.clone(),
                nodes: 1,
            }),
        }
    }
    Ok(groups)
}
