//! The versions verify expects: torch and the CUDA libraries its wheel bundles.
//!
//! Sources, first found wins: the `IMGCTL_VERIFY_PINS` environment variable
//! (JSON; images built by imgctl set it to their spec's pins, and
//! `verify --image` sets it from the image's labels), with the gaps it leaves
//! filled from the `Requires-Dist` pins in the METADATA of the torch wheel
//! that is actually loaded; then that METADATA alone; then
//! [`Pins::torch_2_7_0_cu126`] (the project's default pin). This
//! module only reads files and the environment; it runs no checks.
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::versions::{strip_local, torch_version_info, version_matches};

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
            let Some((name, version)) = exact_requirement(line) else {
                continue;
            };
            let version = Some(version);
            // CUDA 12 wheels carry a `-cu12` suffix; CUDA 13's runtime and
            // cuBLAS wheels do not (`nvidia-cuda-runtime==13.0.96.*`, from
            // the cuda-toolkit 13.0.2 METADATA), cuDNN's and NCCL's do (`-cu13`).
            let family = |n: &str, base: &str| {
                n == base || n.strip_prefix(base).is_some_and(|r| r.starts_with("-cu"))
            };
            match name.as_str() {
                n if family(n, "nvidia-cuda-runtime") => p.cudart = version,
                n if family(n, "nvidia-cublas") => p.cublas = version,
                n if family(n, "nvidia-cudnn") => p.cudnn = version,
                n if family(n, "nvidia-nccl") => p.nccl = version,
                _ => {}
            }
        }
        p
    }

    /// The `cuda-toolkit` version a torch METADATA requires
    /// (`cuda-toolkit[cublas,cudart,…]==13.0.2`: torch 2.11's cu130 wheel pins
    /// its CUDA runtime and cuBLAS only through that meta-package).
    pub fn cuda_toolkit_requirement(text: &str) -> Option<String> {
        text.lines().find_map(|line| {
            let (name, version) = exact_requirement(line)?;
            (name == "cuda-toolkit").then_some(version)
        })
    }

    /// Whether any library is left unpinned.
    fn missing_any(&self) -> bool {
        self.torch.is_none()
            || self.cudart.is_none()
            || self.cublas.is_none()
            || self.cudnn.is_none()
            || self.nccl.is_none()
    }

    /// Fills the pins still missing from `other` (keeps this one's source).
    fn fill_from(&mut self, other: Pins) {
        self.torch = self.torch.take().or(other.torch);
        self.cudart = self.cudart.take().or(other.cudart);
        self.cublas = self.cublas.take().or(other.cublas);
        self.cudnn = self.cudnn.take().or(other.cudnn);
        self.nccl = self.nccl.take().or(other.nccl);
    }

    /// Finds the METADATA of the torch wheel whose package directory is
    /// `torch_dir` (`…/site-packages/torch`).
    /// When that METADATA pins `cuda-toolkit==V` instead of the CUDA runtime
    /// and cuBLAS wheels, their pins come from the installed
    /// `cuda_toolkit-V.dist-info/METADATA` next to it.
    pub fn from_torch_dir(torch_dir: &Path) -> Option<Self> {
        let site = torch_dir.parent()?;
        let entries = std::fs::read_dir(site).ok()?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("torch-") && name.ends_with(".dist-info") {
                let meta = e.path().join("METADATA");
                if let Ok(text) = std::fs::read_to_string(&meta) {
                    let mut pins = Self::from_wheel_metadata(&text, &format!("{name}/METADATA"));
                    if let Some(v) = Self::cuda_toolkit_requirement(&text) {
                        let toolkit = format!("cuda_toolkit-{v}.dist-info");
                        if let Ok(t) = std::fs::read_to_string(site.join(&toolkit).join("METADATA"))
                        {
                            pins.fill_from(Self::from_wheel_metadata(&t, ""));
                            pins.source = format!("{} and {toolkit}/METADATA", pins.source);
                        }
                    }
                    return Some(pins);
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
                // The image's (or the user's) pins win; the loaded wheel's
                // METADATA fills the libraries they leave out (cuBLAS).
                let mut pins = Self::from_json(&text)?;
                if let Some(meta) = torch_dir.and_then(Self::from_torch_dir) {
                    if pins.missing_any() {
                        pins.source = format!("{}, gaps from {}", pins.source, meta.source);
                        pins.fill_from(meta);
                    }
                }
                return Ok(pins);
            }
        }
        if let Some(p) = torch_dir.and_then(Self::from_torch_dir) {
            return Ok(p);
        }
        // No wheel METADATA (a standalone libtorch): the built-in pins only
        // describe torch 2.7.0+cu126. Comparing another torch with them would
        // FAIL a healthy machine for not running imgctl's default torch.
        let builtin = Self::torch_2_7_0_cu126();
        match torch_dir.and_then(torch_version_info) {
            Some((version, cuda))
                if !(version_matches(&version, "2.7.0") && cuda.as_deref() == Some("12.6")) =>
            {
                Ok(Pins {
                    source: format!(
                        "none: torch {version} has no wheel METADATA and is not imgctl's default torch 2.7.0+cu126 (set {} to compare)",
                        crate::env_vars::IMGCTL_VERIFY_PINS
                    ),
                    ..Default::default()
                })
            }
            _ => Ok(builtin),
        }
    }
}

/// `name==version` of a METADATA `Requires-Dist:` line with an exact pin,
/// without extras, markers or a trailing `.*` (`nvidia-cublas==13.1.0.3.*;
/// … extra == 'cublas'` → `("nvidia-cublas", "13.1.0.3")`).
fn exact_requirement(line: &str) -> Option<(String, String)> {
    let req = line.strip_prefix("Requires-Dist: ")?;
    let req = req.split(';').next().unwrap_or("").trim();
    let (name, version) = req.split_once("==")?;
    let name = name.split('[').next().unwrap_or("").trim();
    let version = version.trim();
    let version = version.strip_suffix(".*").unwrap_or(version);
    (!name.is_empty() && !version.is_empty()).then(|| (name.to_string(), version.to_string()))
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

    /// torch 2.11.0's PyPI wheel (cu130) METADATA, abridged.
    const TORCH_2_11_META: &str = "Metadata-Version: 2.4\nName: torch\nVersion: 2.11.0\n\
Requires-Dist: filelock\n\
Requires-Dist: cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.2; platform_system == \"Linux\"\n\
Requires-Dist: cuda-bindings<14,>=13.0.3; platform_system == \"Linux\"\n\
Requires-Dist: nvidia-cudnn-cu13==9.19.0.56; platform_system == \"Linux\"\n\
Requires-Dist: nvidia-cusparselt-cu13==0.8.0; platform_system == \"Linux\"\n\
Requires-Dist: nvidia-nccl-cu13==2.28.9; platform_system == \"Linux\"\n";

    /// cuda-toolkit 13.0.2's METADATA, abridged.
    const CUDA_TOOLKIT_13_0_2_META: &str = "Name: cuda-toolkit\nVersion: 13.0.2\n\
Requires-Dist: nvidia-cublas==13.1.0.3.*; (sys_platform == 'linux' or sys_platform == 'win32') and extra == 'all'\n\
Requires-Dist: nvidia-cuda-runtime==13.0.96.*; (sys_platform == 'linux' or sys_platform == 'win32') and extra == 'all'\n\
Requires-Dist: nvidia-cublas==13.1.0.3.*; (sys_platform == 'linux' or sys_platform == 'win32') and extra == 'cublas'\n\
Requires-Dist: nvidia-cuda-runtime==13.0.96.*; (sys_platform == 'linux' or sys_platform == 'win32') and extra == 'cudart'\n\
Requires-Dist: nvidia-cuda-cupti==13.0.85.*; (sys_platform == 'linux' or sys_platform == 'win32') and extra == 'cupti'\n";

    #[test]
    fn cu13_wheel_pins_through_cuda_toolkit() {
        let p = Pins::from_wheel_metadata(TORCH_2_11_META, "x");
        assert_eq!(p.torch.as_deref(), Some("2.11.0"));
        assert_eq!(p.cudnn.as_deref(), Some("9.19.0.56"));
        assert_eq!(p.nccl.as_deref(), Some("2.28.9"));
        assert_eq!(p.cudart, None, "cusparselt/cuda-bindings must not count");
        assert_eq!(
            Pins::cuda_toolkit_requirement(TORCH_2_11_META).as_deref(),
            Some("13.0.2")
        );
        let site = tempfile::tempdir().unwrap();
        let torch = site.path().join("torch");
        std::fs::create_dir_all(&torch).unwrap();
        for (dir, text) in [
            ("torch-2.11.0.dist-info", TORCH_2_11_META),
            ("cuda_toolkit-13.0.2.dist-info", CUDA_TOOLKIT_13_0_2_META),
        ] {
            std::fs::create_dir_all(site.path().join(dir)).unwrap();
            std::fs::write(site.path().join(dir).join("METADATA"), text).unwrap();
        }
        let p = Pins::from_torch_dir(&torch).unwrap();
        assert_eq!(p.torch.as_deref(), Some("2.11.0"));
        assert_eq!(p.cudart.as_deref(), Some("13.0.96"));
        assert_eq!(p.cublas.as_deref(), Some("13.1.0.3"));
        assert_eq!(p.cudnn.as_deref(), Some("9.19.0.56"));
        assert!(
            p.source.contains("cuda_toolkit-13.0.2.dist-info"),
            "{}",
            p.source
        );
    }

    #[test]
    fn builtin_pins_only_for_the_default_torch() {
        // A standalone libtorch (no dist-info) of another release gets no pins.
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("build-version"), "2.11.0+cu130\n").unwrap();
        if std::env::var_os(crate::env_vars::IMGCTL_VERIFY_PINS).is_none() {
            let p = Pins::resolve(Some(other.path())).unwrap();
            assert_eq!(p.torch, None);
            assert_eq!(p.cudnn, None);
            assert!(
                p.source.starts_with("none: torch 2.11.0+cu130"),
                "{}",
                p.source
            );
            let default = tempfile::tempdir().unwrap();
            std::fs::write(default.path().join("build-version"), "2.7.0+cu126\n").unwrap();
            assert_eq!(
                Pins::resolve(Some(default.path())).unwrap(),
                Pins::torch_2_7_0_cu126()
            );
        }
    }
}
