//! The versions verify expects: torch and the CUDA libraries its wheel bundles.
//!
//! Sources, first found wins: the `IMGCTL_VERIFY_PINS` environment variable
//! (JSON; `verify --image` sets it from the image's labels), then the
//! `Requires-Dist` pins in the METADATA of the torch wheel that is actually
//! loaded, then [`Pins::torch_2_7_0_cu126`] (the project's default pin). This
//! module only reads files and the environment; it runs no checks.
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Expected versions. `None` means "not pinned": the matching check reports
/// what it found without a pin comparison.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pins {
    /// torch version without local suffix (`2.7.0`).
    #[serde(default)]
    pub torch: Option<String>,
    /// CUDA runtime (nvidia-cuda-runtime wheel: `12.6.77`).
    #[serde(default)]
    pub cudart: Option<String>,
    /// cuBLAS (`12.6.4.1`).
    #[serde(default)]
    pub cublas: Option<String>,
    /// cuDNN (`9.5.1.17`).
    #[serde(default)]
    pub cudnn: Option<String>,
    /// NCCL (`2.26.2`).
    #[serde(default)]
    pub nccl: Option<String>,
    /// Where these pins came from (shown in the report).
    #[serde(default)]
    pub source: String,
}

impl Pins {
    /// torch 2.7.0's PyPI (cu126) wheel: its METADATA pins
    /// nvidia-cuda-runtime-cu12==12.6.77, nvidia-cublas-cu12==12.6.4.1,
    /// nvidia-cudnn-cu12==9.5.1.17, nvidia-nccl-cu12==2.26.2
    /// (https://pypi.org/project/torch/2.7.0/, read from the wheel's METADATA).
    pub fn torch_2_7_0_cu126() -> Self {
        Self {
            torch: Some("2.7.0".into()),
            cudart: Some("12.6.77".into()),
            cublas: Some("12.6.4.1".into()),
            cudnn: Some("9.5.1.17".into()),
            nccl: Some("2.26.2".into()),
            source: "built-in: torch 2.7.0 PyPI wheel (cu126)".into(),
        }
    }

    /// Pins from a JSON object (the `IMGCTL_VERIFY_PINS` value).
    pub fn from_json(text: &str) -> Result<Self, String> {
        let mut p: Pins = serde_json::from_str(text).map_err(|e| {
            format!(
                "{} is not valid pins JSON: {e}",
                crate::env_vars::IMGCTL_VERIFY_PINS
            )
        })?;
        if p.source.is_empty() {
            p.source = crate::env_vars::IMGCTL_VERIFY_PINS.to_string();
        }
        Ok(p)
    }

    /// Pins from a torch wheel's METADATA (`torch-2.7.0.dist-info/METADATA`):
    /// `Version:` and the `Requires-Dist: nvidia-…==X` lines.
    pub fn from_wheel_metadata(text: &str, source: &str) -> Self {
        let mut p = Pins {
            source: source.to_string(),
            ..Default::default()
        };
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("Version: ") {
                p.torch = Some(strip_local(v.trim()).to_string());
            }
            let Some(req) = line.strip_prefix("Requires-Dist: ") else {
                continue;
            };
            let req = req.split(';').next().unwrap_or("").trim();
            let Some((name, version)) = req.split_once("==") else {
                continue;
            };
            let version = Some(version.trim().to_string());
            match name.trim() {
                n if n.starts_with("nvidia-cuda-runtime-cu") => p.cudart = version,
                n if n.starts_with("nvidia-cublas-cu") => p.cublas = version,
                n if n.starts_with("nvidia-cudnn-cu") => p.cudnn = version,
                n if n.starts_with("nvidia-nccl-cu") => p.nccl = version,
                _ => {}
            }
        }
        p
    }

    /// Finds the METADATA of the torch wheel whose package directory is
    /// `torch_dir` (`…/site-packages/torch`).
    pub fn from_torch_dir(torch_dir: &Path) -> Option<Self> {
        let site = torch_dir.parent()?;
        let entries = std::fs::read_dir(site).ok()?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("torch-") && name.ends_with(".dist-info") {
                let meta = e.path().join("METADATA");
                if let Ok(text) = std::fs::read_to_string(&meta) {
                    return Some(Self::from_wheel_metadata(
                        &text,
                        &format!("{name}/METADATA"),
                    ));
                }
            }
        }
        None
    }

    /// Resolves the pins: environment, else the loaded torch wheel's
    /// METADATA (`torch_dir`), else the built-in default.
    pub fn resolve(torch_dir: Option<&Path>) -> Result<Self, String> {
        if let Ok(text) = std::env::var(crate::env_vars::IMGCTL_VERIFY_PINS) {
            if !text.trim().is_empty() {
                return Self::from_json(&text);
            }
        }
        if let Some(p) = torch_dir.and_then(Self::from_torch_dir) {
            return Ok(p);
        }
        Ok(Self::torch_2_7_0_cu126())
    }
}

/// `2.7.0+cu126` → `2.7.0`.
pub fn strip_local(v: &str) -> &str {
    v.split('+').next().unwrap_or(v)
}

/// Whether `found` agrees with `pin` on every component both carry
/// (`9.5.1` from cudnnGetVersion agrees with the pin `9.5.1.17`; `9.1.0` does not).
pub fn version_matches(found: &str, pin: &str) -> bool {
    let f: Vec<&str> = strip_local(found).split('.').collect();
    let p: Vec<&str> = strip_local(pin).split('.').collect();
    let n = f.len().min(p.len());
    n > 0 && f[..n] == p[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_metadata_pins() {
        let meta = "Metadata-Version: 2.1\nName: torch\nVersion: 2.7.0+cu126\n\
Requires-Dist: nvidia-cuda-runtime-cu12==12.6.77; platform_system == \"Linux\"\n\
Requires-Dist: nvidia-cudnn-cu12==9.5.1.17; platform_system == \"Linux\"\n\
Requires-Dist: nvidia-cublas-cu12==12.6.4.1; platform_system == \"Linux\"\n\
Requires-Dist: nvidia-nccl-cu12==2.26.2; platform_system == \"Linux\"\n\
Requires-Dist: filelock\n";
        let p = Pins::from_wheel_metadata(meta, "x");
        assert_eq!(p.torch.as_deref(), Some("2.7.0"));
        assert_eq!(p.cudart.as_deref(), Some("12.6.77"));
        assert_eq!(p.cudnn.as_deref(), Some("9.5.1.17"));
        assert_eq!(p.cublas.as_deref(), Some("12.6.4.1"));
        assert_eq!(p.nccl.as_deref(), Some("2.26.2"));
    }

    #[test]
    fn version_prefix_matching() {
        assert!(version_matches("9.5.1", "9.5.1.17"));
        assert!(version_matches("2.7.0+cu126", "2.7.0"));
        assert!(!version_matches("9.1.0", "9.5.1.17"));
        assert!(!version_matches("2.21.5", "2.26.2"));
        assert!(version_matches("12.6", "12.6.77"));
    }
}
