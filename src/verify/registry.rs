//! The check registry: every check imgctl knows, in run order
//! ([`registry`]), the host-side ids that run only with `verify --image`
//! ([`HOST_IDS`], [`HOST_DESCRIPTIONS`]), and the check of `--only` /
//! `--skip` patterns against them ([`unknown_patterns`]).
//!
//! It gathers the families (nvml, torch, functional) and runs nothing.
use std::sync::Arc;

use super::check::Check;
use super::context::matches;

/// Ids of the host-side checks (`verify --image` only).
pub const HOST_IDS: [&str; 3] = ["host.container", "host.gpu_uuids", "host.driver_image_cuda"];

/// What each host-side check looks at, in [`HOST_IDS`] order.
pub const HOST_DESCRIPTIONS: [&str; 3] = [
    "the image's imgctl ran in a container with the GPUs and gave a consistent report",
    "the GPUs the container sees are exactly those requested (UUIDs)",
    "the host driver runs the image's CUDA runtime (natively or by minor-version compatibility)",
];

/// Every check imgctl knows, in run order.
pub fn registry() -> Vec<Arc<dyn Check>> {
    let mut all: Vec<Arc<dyn Check>> = Vec::new();
    for c in super::nvml::checks::checks() {
        all.push(Arc::new(c));
    }
    for c in super::torch::checks() {
        all.push(Arc::new(c));
    }
    for c in super::functional::checks() {
        all.push(Arc::new(c));
    }
    all
}

/// All check ids, in run order (host-side checks included).
pub fn all_ids() -> Vec<&'static str> {
    let mut ids: Vec<&'static str> = registry().iter().map(|c| c.id()).collect();
    ids.extend(HOST_IDS);
    ids
}

/// Checks `--only` / `--skip` patterns against the known ids: each must name
/// an id or an id prefix (`nvml`, `torch.cudnn_loaded`). Returns the unknown ones.
pub fn unknown_patterns(patterns: &[String]) -> Vec<String> {
    let ids = all_ids();
    patterns
        .iter()
        .filter(|p| !ids.iter().any(|id| matches(id, p)))
        .cloned()
        .collect()
}
