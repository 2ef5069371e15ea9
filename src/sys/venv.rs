//! The Python venvs imgctl looks in for libtorch and for uv, in order:
//! `IMGCTL_VENV`, the active `VIRTUAL_ENV`, and the set-up's own
//! `IMGCTL_CACHE/venv-torch-2.7.0` (default `~/.cache/imgctl/…`), so that
//! `imgctl lock` finds the uv `scripts/setup.sh` installed beside the torch
//! the full imgctl loads (#53 F14).
use std::path::PathBuf;

/// The torch release the set-up's venv holds (tch 0.20.0's libtorch).
pub const TORCH_VERSION: &str = "2.7.0";

/// The venvs looked in, in order, each once; unset or empty variables are
/// skipped.
pub fn candidates() -> Vec<PathBuf> {
    use crate::env_vars::{HOME, IMGCTL_CACHE, IMGCTL_VENV, VIRTUAL_ENV, XDG_CACHE_HOME};
    let set = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let mut out: Vec<PathBuf> = [IMGCTL_VENV, VIRTUAL_ENV]
        .iter()
        .filter_map(|v| set(v))
        .map(PathBuf::from)
        .collect();
    let cache = set(IMGCTL_CACHE)
        .map(PathBuf::from)
        .or_else(|| set(XDG_CACHE_HOME).map(|c| PathBuf::from(c).join("imgctl")))
        .or_else(|| set(HOME).map(|h| PathBuf::from(h).join(".cache/imgctl")));
    if let Some(c) = cache {
        out.push(c.join(format!("venv-torch-{TORCH_VERSION}")));
    }
    let mut seen = Vec::new();
    out.retain(|v| {
        let new = !seen.contains(v);
        seen.push(v.clone());
        new
    });
    out
}
