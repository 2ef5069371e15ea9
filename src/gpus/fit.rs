//! Will this image run, and run right, on these GPUs? The fit of an image's
//! facts ([`ImageFacts`]: its torch wheel's code, CUDA, least driver, NCCL)
//! to a fleet's ([`Group`]: GPU model, compute capability, driver, nodes),
//! judged by three rules, each reason naming the image's fact, the fleet's
//! and the source of the rule:
//!
//! - `arch`: the image has machine code for the GPU (or code of an older
//!   minor of its major); PTX only is a warning (JIT at first launch) and
//!   needs the driver that runs the image's CUDA natively; none is refused;
//! - `driver`: the driver runs the image's CUDA natively, or by CUDA
//!   minor-version compatibility; older is refused (CUDA error 803);
//! - `nccl`: the image's NCCL is at least the floor of the GPU's generation.
//!
//! `verify-image --fleet` judges a fleet file before a deploy; `up` and
//! `verify --image` judge the host's GPUs before a container starts. Pure:
//! the callers read labels, files and NVML.
use serde::{Deserialize, Serialize};

use super::archs::{self, ArchList, Coverage};
use crate::nvml::{NvmlBackend, NvmlErr};

/// Where the driver floors were read (the image records the floors; the
/// rule is NVIDIA's).
pub const DRIVER_SOURCE: &str = "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html (Table 3: CUDA Toolkit and Corresponding Driver Versions; Table 2: minor version compatibility)";

/// What decides where an image runs, as its build recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageFacts {
    /// torch version (`2.7.0`).
    pub torch: String,
    /// Its wheel's CUDA variant (`cu126`).
    pub variant: String,
    /// The CUDA runtime it bundles (`12.6.77`).
    pub cuda_runtime: String,
    /// The least driver that runs that runtime (minor-version compatibility).
    pub driver_min: String,
    /// The least driver that runs it natively (and JIT-compiles its PTX).
    pub driver_native: String,
    /// The NCCL it bundles.
    pub nccl: String,
    /// The cuDNN it bundles.
    pub cudnn: String,
    /// SM versions with machine code (`90` = sm_90).
    pub sass: Vec<u32>,
    /// SM versions with PTX.
    pub ptx: Vec<u32>,
    /// Where the arch list was read.
    pub archs_source: String,
}

impl ImageFacts {
    /// The arch list.
    pub fn archs(&self) -> ArchList {
        ArchList {
            sass: self.sass.iter().copied().collect(),
            ptx: self.ptx.iter().copied().collect(),
            partial: Default::default(),
        }
    }

    /// `sm_50…sm_90`, or every arch when there are gaps a reader needs.
    pub fn archs_short(&self) -> String {
        let mut s = match (self.sass.first(), self.sass.last()) {
            (Some(a), Some(b)) if a != b => format!("sm_{a}…sm_{b}"),
            (Some(a), _) => format!("sm_{a}"),
            _ => "no machine code".to_string(),
        };
        for p in &self.ptx {
            s.push_str(&format!(" +compute_{p}"));
        }
        s
    }

    /// `torch 2.7.0+cu126`.
    pub fn wheel(&self) -> String {
        format!("torch {}+{}", self.torch, self.variant)
    }

    /// The CUDA major.minor of the runtime (`12.6`).
    pub fn cuda(&self) -> String {
        self.cuda_runtime
            .split('.')
            .take(2)
            .collect::<Vec<_>>()
            .join(".")
    }
}

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

    fn sm(&self) -> u32 {
        self.cc.0 * 10 + self.cc.1
    }
}

/// How one rule came out for one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// It holds.
    Pass,
    /// It runs, at a cost the line names.
    Warn,
    /// It does not run (or not right): refused.
    Fail,
}

/// One rule's outcome for one group of the fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reason {
    /// `arch`, `driver` or `nccl`.
    pub rule: &'static str,
    /// How it came out.
    pub level: Level,
    /// The group it is about (`B200 (sm_100)`).
    pub gpu: String,
    /// The whole reason, one line.
    pub line: String,
    /// The image's fact.
    pub image: String,
    /// The fleet's fact.
    pub fleet: String,
    /// The source of the rule.
    pub source: String,
}

/// The fit of an image to a fleet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FitReport {
    /// Every rule for every group, in the fleet's order.
    pub reasons: Vec<Reason>,
    /// True when no reason is a FAIL.
    pub admitted: bool,
}

impl FitReport {
    /// The reasons at `level`.
    pub fn at(&self, level: Level) -> impl Iterator<Item = &Reason> {
        self.reasons.iter().filter(move |r| r.level == level)
    }
}

/// `a ≥ b` for dotted versions (`570.86.15`, `2.26.2`).
pub fn version_ge(a: &str, b: &str) -> bool {
    let key = |s: &str| -> Vec<u64> {
        s.split(['.', '-', '+'])
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    key(a) >= key(b)
}

/// Judges `image` on every group of `fleet`. A refused group names the
/// first of `alternatives` (the bundled profiles, by name) that fits it.
pub fn judge(
    image: &ImageFacts,
    fleet: &[Group],
    alternatives: &[(String, ImageFacts)],
) -> FitReport {
    let mut reasons = Vec::new();
    for g in fleet {
        let mut own = vec![arch(image, g), driver(image, g), nccl(image, g)];
        if own.iter().any(|r| r.level == Level::Fail) {
            let fits = alternatives.iter().find(|(_, alt)| {
                [arch(alt, g), driver(alt, g), nccl(alt, g)]
                    .iter()
                    .all(|r| r.level != Level::Fail)
            });
            let tail = match fits {
                Some((name, alt)) => format!(
                    "; the {name} profile fits ({}, driver ≥ {})",
                    alt.wheel(),
                    least_driver(alt, g)
                ),
                None => String::new(),
            };
            for r in own.iter_mut().filter(|r| r.level == Level::Fail) {
                r.line.push_str(&tail);
            }
        }
        reasons.extend(own);
    }
    let admitted = reasons.iter().all(|r| r.level != Level::Fail);
    FitReport { reasons, admitted }
}

/// The least driver `image` needs on `g`: native when only PTX serves it.
fn least_driver<'a>(image: &'a ImageFacts, g: &Group) -> &'a str {
    match image.archs().coverage(g.cc.0 as i32, g.cc.1 as i32) {
        Coverage::Ptx(_) => &image.driver_native,
        _ => &image.driver_min,
    }
}

fn reason(rule: &'static str, level: Level, g: &Group, line: String) -> Reason {
    Reason {
        rule,
        level,
        gpu: g.label(),
        line,
        image: String::new(),
        fleet: String::new(),
        source: String::new(),
    }
}

fn arch(image: &ImageFacts, g: &Group) -> Reason {
    let list = image.archs();
    let sm = format!("sm_{}", g.sm());
    let generation = archs::gpu_model(&g.model).map_or("these", |m| m.generation);
    let (level, line) = match list.coverage(g.cc.0 as i32, g.cc.1 as i32) {
        Coverage::Exact => (Level::Pass, format!("{}: the image has {sm} code", g.label())),
        Coverage::SameMajor(a) => (
            Level::Pass,
            format!(
                "{}: runs the image's sm_{a} code (binary compatible within major {})",
                g.label(),
                g.cc.0
            ),
        ),
        Coverage::Ptx(a) if version_ge(&g.driver, &image.driver_native) => (
            Level::Warn,
            format!(
                "{}: runs only through PTX JIT of compute_{a}: every kernel is compiled at its first launch (minutes for a big model; cached after in ~/.nv/ComputeCache)",
                g.label()
            ),
        ),
        Coverage::Ptx(a) => (
            Level::Fail,
            format!(
                "{}: the image has only compute_{a} PTX for it, and driver {} is below {}, the least that JIT-compiles CUDA {} PTX",
                g.label(),
                g.driver,
                image.driver_native,
                image.cuda()
            ),
        ),
        Coverage::None => (
            Level::Fail,
            format!(
                "{} is not in the image's arch list {}: {} has no {generation} kernels (\"no kernel image is available for execution on the device\")",
                g.label(),
                image.archs_short(),
                image.wheel()
            ),
        ),
    };
    let mut r = reason("arch", level, g, line);
    r.image = list.describe();
    r.fleet = sm;
    r.source = format!("{}; {}", image.archs_source, archs::CC_SOURCE);
    r
}

fn driver(image: &ImageFacts, g: &Group) -> Reason {
    let cuda = image.cuda();
    let (level, line) = if version_ge(&g.driver, &image.driver_native) {
        (
            Level::Pass,
            format!(
                "{}: driver {} runs CUDA {cuda} natively (≥ {})",
                g.label(),
                g.driver,
                image.driver_native
            ),
        )
    } else if version_ge(&g.driver, &image.driver_min) {
        (
            Level::Pass,
            format!(
                "{}: driver {} runs CUDA {cuda} by minor-version compatibility (≥ {}; {} natively)",
                g.label(),
                g.driver,
                image.driver_min,
                image.driver_native
            ),
        )
    } else {
        (
            Level::Fail,
            format!(
                "{}: driver {} is older than {}, the least that runs the image's CUDA {cuda} ({} natively): torch would stop with CUDA error 803 or \"the NVIDIA driver on your system is too old\"",
                g.label(),
                g.driver,
                image.driver_min,
                image.driver_native
            ),
        )
    };
    let mut r = reason("driver", level, g, line);
    r.image = format!(
        "CUDA {cuda}: driver ≥ {} ({} natively)",
        image.driver_min, image.driver_native
    );
    r.fleet = format!("driver {}", g.driver);
    r.source = DRIVER_SOURCE.to_string();
    r
}

fn nccl(image: &ImageFacts, g: &Group) -> Reason {
    let Some(floor) = archs::nccl_floor(g.sm()) else {
        let mut r = reason(
            "nccl",
            Level::Pass,
            g,
            format!(
                "{}: NCCL {} (no floor above it for sm_{})",
                g.label(),
                image.nccl,
                g.sm()
            ),
        );
        r.image = format!("NCCL {}", image.nccl);
        r.fleet = format!("sm_{}", g.sm());
        r.source = "imgctl's NCCL floors (src/gpus/archs.rs)".to_string();
        return r;
    };
    let (level, line) = if version_ge(&image.nccl, floor.nccl) {
        (
            Level::Pass,
            format!(
                "{}: NCCL {} ≥ {} ({})",
                g.label(),
                image.nccl,
                floor.nccl,
                floor.why
            ),
        )
    } else {
        (
            Level::Fail,
            format!(
                "{}: the image's NCCL {} is below {}: {}",
                g.label(),
                image.nccl,
                floor.nccl,
                floor.why
            ),
        )
    };
    let mut r = reason("nccl", level, g, line);
    r.image = format!("NCCL {}", image.nccl);
    r.fleet = format!("{} needs NCCL ≥ {}", floor.generation, floor.nccl);
    r.source = floor.source.to_string();
    r
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

#[cfg(test)]
#[path = "fit_tests.rs"]
mod tests;
