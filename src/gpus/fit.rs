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
//! the callers read labels, files and NVML; the fleet's sources are
//! [`super::fleet`]'s.
use serde::{Deserialize, Serialize};

use super::archs::{self, ArchList, Coverage};

pub use super::fleet::{
    groups_of_nodes, host_groups, parse_fleet, Group, FLEET_FILE_MAX, FLEET_FILE_VERSION,
};

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

#[cfg(test)]
#[path = "fit_tests.rs"]
mod tests;
