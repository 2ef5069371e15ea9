//! The compatibility table: torch version ↔ published wheel CUDA variants ↔ the
//! cuDNN, NCCL and CUDA runtime those wheels bundle ↔ the minimum NVIDIA driver.
//!
//! This module owns facts only, each row with the source it was taken from. It
//! does no I/O and knows nothing about specs or Dockerfiles; [`super::validate`]
//! and [`crate::image::render`] ask it questions, and `imgctl verify` reads the same pins
//! (through the image labels) to compare with what it finds at run time.

use serde::Serialize;

/// PyPI's simple index: where the default CUDA variant of a torch release lives.
pub const PYPI_INDEX: &str = "https://pypi.org/simple";
/// PyTorch's own wheel index root; variant `cuXYZ` lives under `<root>/cuXYZ`.
pub const PYTORCH_INDEX_ROOT: &str = "https://download.pytorch.org/whl";

/// One published torch wheel build: a torch version for one CUDA variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TorchWheel {
    /// torch version, e.g. `2.7.0`.
    pub torch: &'static str,
    /// Wheel CUDA variant, e.g. `cu126`.
    pub variant: &'static str,
    /// CUDA major.minor the wheel was built for, e.g. `12.6`.
    pub cuda: &'static str,
    /// Whether this variant is the one on PyPI (plain `torch==X` without `+cuXYZ`).
    pub pypi_default: bool,
    /// Version of the CUDA runtime wheel it requires (`nvidia-cuda-runtime-cuXX`).
    pub cuda_runtime: &'static str,
    /// Distribution name of the cuDNN wheel it requires.
    pub cudnn_dist: &'static str,
    /// Version of that cuDNN wheel.
    pub cudnn: &'static str,
    /// Distribution name of the NCCL wheel it requires.
    pub nccl_dist: &'static str,
    /// Version of that NCCL wheel.
    pub nccl: &'static str,
    /// Version of triton it requires (empty when it pins none).
    pub triton: &'static str,
    /// Oldest Python minor the release publishes wheels for.
    pub python_min: &'static str,
    /// Newest Python minor the release publishes wheels for.
    pub python_max: &'static str,
    /// Where these pins were read.
    pub source: &'static str,
}

/// Every torch wheel imgctl knows. Rows carry their source in `source` and in
/// the comment above them.
pub const TORCH_WHEELS: &[TorchWheel] = &[
    // torch 2.7.0 + cu126, the PyPI default. Read from the wheel's METADATA
    // Requires-Dist (torch-2.7.0-cp311-cp311-manylinux_2_28_x86_64.whl, installed
    // from PyPI into this project's set-up venv): nvidia-cudnn-cu12==9.5.1.17,
    // nvidia-nccl-cu12==2.26.2, nvidia-cuda-runtime-cu12==12.6.77, triton==3.3.0.
    // Python 3.9-3.13: https://github.com/pytorch/pytorch/blob/v2.7.0/RELEASE.md
    TorchWheel {
        torch: "2.7.0",
        variant: "cu126",
        cuda: "12.6",
        pypi_default: true,
        cuda_runtime: "12.6.77",
        cudnn_dist: "nvidia-cudnn-cu12",
        cudnn: "9.5.1.17",
        nccl_dist: "nvidia-nccl-cu12",
        nccl: "2.26.2",
        triton: "3.3.0",
        python_min: "3.9",
        python_max: "3.13",
        source: "https://pypi.org/project/torch/2.7.0/ (wheel METADATA Requires-Dist)",
    },
    // torch 2.7.0 + cu128, https://download.pytorch.org/whl/cu128. Pins from
    // PYTORCH_EXTRA_INSTALL_REQUIREMENTS["12.8"] on the release branch:
    // https://github.com/pytorch/pytorch/blob/v2.7.0/.github/scripts/generate_binary_build_matrix.py
    // (nvidia-cudnn-cu12==9.7.1.26, nvidia-nccl-cu12==2.26.2 after the release-only
    // NCCL bump, nvidia-cuda-runtime-cu12==12.8.57). download.pytorch.org was not
    // reachable from the machine this table was written on, so the wheel itself
    // was not inspected; the build checks these pins inside the image
    // (images/workstation.Dockerfile.j2 asserts the installed versions).
    TorchWheel {
        torch: "2.7.0",
        variant: "cu128",
        cuda: "12.8",
        pypi_default: false,
        cuda_runtime: "12.8.57",
        cudnn_dist: "nvidia-cudnn-cu12",
        cudnn: "9.7.1.26",
        nccl_dist: "nvidia-nccl-cu12",
        nccl: "2.26.2",
        triton: "3.3.0",
        python_min: "3.9",
        python_max: "3.13",
        source: "https://github.com/pytorch/pytorch/blob/v2.7.0/.github/scripts/generate_binary_build_matrix.py",
    },
    // torch 2.7.0 + cu118, https://download.pytorch.org/whl/cu118. Same source,
    // PYTORCH_EXTRA_INSTALL_REQUIREMENTS["11.8"]: nvidia-cudnn-cu11==9.1.0.70,
    // nvidia-nccl-cu11==2.21.5, nvidia-cuda-runtime-cu11==11.8.89.
    TorchWheel {
        torch: "2.7.0",
        variant: "cu118",
        cuda: "11.8",
        pypi_default: false,
        cuda_runtime: "11.8.89",
        cudnn_dist: "nvidia-cudnn-cu11",
        cudnn: "9.1.0.70",
        nccl_dist: "nvidia-nccl-cu11",
        nccl: "2.21.5",
        triton: "3.3.0",
        python_min: "3.9",
        python_max: "3.13",
        source: "https://github.com/pytorch/pytorch/blob/v2.7.0/.github/scripts/generate_binary_build_matrix.py",
    },
    // torch 2.6.0 + cu124, the PyPI default: the release that matches the
    // nvidia/cuda:12.4.1 images library for library. Read from the wheel METADATA
    // on PyPI (pip install --dry-run --report torch==2.6.0):
    // nvidia-cudnn-cu12==9.1.0.70, nvidia-nccl-cu12==2.21.5,
    // nvidia-cuda-runtime-cu12==12.4.127, triton==3.2.0.
    TorchWheel {
        torch: "2.6.0",
        variant: "cu124",
        cuda: "12.4",
        pypi_default: true,
        cuda_runtime: "12.4.127",
        cudnn_dist: "nvidia-cudnn-cu12",
        cudnn: "9.1.0.70",
        nccl_dist: "nvidia-nccl-cu12",
        nccl: "2.21.5",
        triton: "3.2.0",
        python_min: "3.9",
        python_max: "3.13",
        source: "https://pypi.org/project/torch/2.6.0/ (wheel METADATA Requires-Dist)",
    },
    // torch 2.6.0 + cu126, https://download.pytorch.org/whl/cu126. Pins from
    // https://github.com/pytorch/pytorch/blob/v2.6.0/.github/scripts/generate_binary_build_matrix.py
    // PYTORCH_EXTRA_INSTALL_REQUIREMENTS["12.6"].
    TorchWheel {
        torch: "2.6.0",
        variant: "cu126",
        cuda: "12.6",
        pypi_default: false,
        cuda_runtime: "12.6.77",
        cudnn_dist: "nvidia-cudnn-cu12",
        cudnn: "9.5.1.17",
        nccl_dist: "nvidia-nccl-cu12",
        nccl: "2.21.5",
        triton: "3.2.0",
        python_min: "3.9",
        python_max: "3.13",
        source: "https://github.com/pytorch/pytorch/blob/v2.6.0/.github/scripts/generate_binary_build_matrix.py",
    },
    // torch 2.6.0 + cu118, https://download.pytorch.org/whl/cu118. Same source,
    // PYTORCH_EXTRA_INSTALL_REQUIREMENTS["11.8"].
    TorchWheel {
        torch: "2.6.0",
        variant: "cu118",
        cuda: "11.8",
        pypi_default: false,
        cuda_runtime: "11.8.89",
        cudnn_dist: "nvidia-cudnn-cu11",
        cudnn: "9.1.0.70",
        nccl_dist: "nvidia-nccl-cu11",
        nccl: "2.21.5",
        triton: "3.2.0",
        python_min: "3.9",
        python_max: "3.13",
        source: "https://github.com/pytorch/pytorch/blob/v2.6.0/.github/scripts/generate_binary_build_matrix.py",
    },
];

/// A CUDA toolkit release and the driver it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CudaToolkit {
    /// Full toolkit version, e.g. `12.4.1`.
    pub version: &'static str,
    /// Minimum Linux x86_64 driver for this toolkit natively (Table 3).
    pub native_driver: &'static str,
    /// Minimum Linux driver under CUDA minor-version compatibility (Table 2):
    /// any driver of the same major family at or above this runs the toolkit's
    /// runtime, without PTX JIT of newer PTX.
    pub minor_compat_driver: &'static str,
    /// Where the driver versions were read.
    pub source: &'static str,
}

const NV_RELEASE_NOTES: &str = crate::gpus::fit::DRIVER_SOURCE;

/// CUDA toolkits imgctl knows, with their driver requirements.
pub const CUDA_TOOLKITS: &[CudaToolkit] = &[
    // CUDA 11.8 GA: >= 520.61.05; CUDA 11.x minor-version compatibility: >= 450.80.02.
    // Source: NVIDIA CUDA toolkit release notes, Tables 2 and 3.
    CudaToolkit {
        version: "11.8.0",
        native_driver: "520.61.05",
        minor_compat_driver: "450.80.02",
        source: NV_RELEASE_NOTES,
    },
    // CUDA 12.4 GA: >= 550.54.14; CUDA 12.x minor-version compatibility: >= 525.60.13.
    // Source: NVIDIA CUDA toolkit release notes, Tables 2 and 3.
    CudaToolkit {
        version: "12.4.0",
        native_driver: "550.54.14",
        minor_compat_driver: "525.60.13",
        source: NV_RELEASE_NOTES,
    },
    // CUDA 12.4 Update 1: >= 550.54.15. Source: NVIDIA CUDA toolkit release notes, Table 3.
    CudaToolkit {
        version: "12.4.1",
        native_driver: "550.54.15",
        minor_compat_driver: "525.60.13",
        source: NV_RELEASE_NOTES,
    },
    // CUDA 12.6 GA: >= 560.28.03. Source: NVIDIA CUDA toolkit release notes, Table 3.
    CudaToolkit {
        version: "12.6.0",
        native_driver: "560.28.03",
        minor_compat_driver: "525.60.13",
        source: NV_RELEASE_NOTES,
    },
    // CUDA 12.6 Update 3: >= 560.35.05. Source: NVIDIA CUDA toolkit release notes, Table 3.
    CudaToolkit {
        version: "12.6.3",
        native_driver: "560.35.05",
        minor_compat_driver: "525.60.13",
        source: NV_RELEASE_NOTES,
    },
    // CUDA 12.8 GA: >= 570.26. Source: NVIDIA CUDA toolkit release notes, Table 3.
    CudaToolkit {
        version: "12.8.0",
        native_driver: "570.26",
        minor_compat_driver: "525.60.13",
        source: NV_RELEASE_NOTES,
    },
    // CUDA 12.8 Update 1: >= 570.124.06. Source: NVIDIA CUDA toolkit release notes, Table 3.
    CudaToolkit {
        version: "12.8.1",
        native_driver: "570.124.06",
        minor_compat_driver: "525.60.13",
        source: NV_RELEASE_NOTES,
    },
];

/// The python3 a distribution ships, used to cross-check a spec's `python`
/// against the base image it names (the image uses the distro's python3).
pub const DISTRO_PYTHON: &[(&str, &str, &str)] = &[
    // (tag suffix of nvidia/cuda images or distro name, python3 minor, source)
    (
        "ubuntu20.04",
        "3.8",
        "https://packages.ubuntu.com/focal/python3",
    ),
    (
        "ubuntu22.04",
        "3.10",
        "https://packages.ubuntu.com/jammy/python3",
    ),
    (
        "ubuntu24.04",
        "3.12",
        "https://packages.ubuntu.com/noble/python3",
    ),
    (
        "bookworm",
        "3.11",
        "https://packages.debian.org/bookworm/python3",
    ),
];

/// The wheel for `torch` in CUDA `variant` (e.g. `("2.7.0", "cu126")`), if published.
pub fn lookup(torch: &str, variant: &str) -> Option<&'static TorchWheel> {
    TORCH_WHEELS
        .iter()
        .find(|w| w.torch == torch && w.variant == variant)
}

/// The torch versions in the table, oldest first.
pub fn torch_versions() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = TORCH_WHEELS.iter().map(|w| w.torch).collect();
    v.sort_by_key(|a| version_key(a));
    v.dedup();
    v
}

/// The CUDA variants published for `torch`, e.g. `["cu118", "cu126", "cu128"]`.
pub fn variants(torch: &str) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = TORCH_WHEELS
        .iter()
        .filter(|w| w.torch == torch)
        .map(|w| w.variant)
        .collect();
    v.sort();
    v
}

/// The variant PyPI serves for `torch` (no `+cuXYZ` suffix there).
pub fn pypi_default(torch: &str) -> Option<&'static TorchWheel> {
    TORCH_WHEELS
        .iter()
        .find(|w| w.torch == torch && w.pypi_default)
}

/// The toolkit row for a full version (`12.4.1`).
pub fn toolkit(version: &str) -> Option<&'static CudaToolkit> {
    CUDA_TOOLKITS.iter().find(|t| t.version == version)
}

/// Full toolkit versions imgctl knows.
pub fn toolkit_versions() -> Vec<&'static str> {
    CUDA_TOOLKITS.iter().map(|t| t.version).collect()
}

/// The driver a CUDA version needs: for `major.minor.patch` that exact release,
/// for `major.minor` the oldest release of that minor (its GA when known).
pub fn min_driver(cuda: &str) -> Option<&'static CudaToolkit> {
    if let Some(t) = toolkit(cuda) {
        return Some(t);
    }
    CUDA_TOOLKITS
        .iter()
        .filter(|t| major_minor(t.version) == cuda)
        .min_by(|a, b| version_key(a.version).cmp(&version_key(b.version)))
}

/// The python3 minor a base image's distro ships, judged from its tag or name
/// (`nvidia/cuda:12.4.1-base-ubuntu22.04` → `3.10`).
pub fn distro_python(base_image: &str) -> Option<(&'static str, &'static str)> {
    DISTRO_PYTHON
        .iter()
        .find(|(distro, _, _)| base_image.contains(distro))
        .map(|(distro, py, _)| (*distro, *py))
}

/// The index URL that serves `wheel`: PyPI for the default variant, else
/// `download.pytorch.org/whl/<variant>`.
pub fn default_index(wheel: &TorchWheel) -> String {
    if wheel.pypi_default {
        PYPI_INDEX.to_string()
    } else {
        format!("{PYTORCH_INDEX_ROOT}/{}", wheel.variant)
    }
}

/// The pip requirement that selects exactly `wheel` from `index`: a plain
/// `torch==X` for PyPI's variant from PyPI or a mirror of it (PyPI has no local
/// versions), `torch==X+cuXYZ` from PyTorch's index or a mirror of it.
pub fn torch_requirement(wheel: &TorchWheel, index: &str) -> String {
    if wheel.pypi_default && !index.starts_with(PYTORCH_INDEX_ROOT) {
        format!("torch=={}", wheel.torch)
    } else {
        format!("torch=={}+{}", wheel.torch, wheel.variant)
    }
}

/// `12.4.1` → `12.4`.
pub fn major_minor(version: &str) -> String {
    version.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// A version as numbers for ordering (`12.10` sorts after `12.9`).
pub fn version_key(version: &str) -> Vec<u64> {
    version
        .split('.')
        .map(|p| p.parse::<u64>().unwrap_or(0))
        .collect()
}

/// How a wheel's CUDA relates to the CUDA of the base image it is installed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// Same major.minor: the wheel matches the base toolkit.
    Exact,
    /// The wheel is newer within the same major: it runs through CUDA
    /// minor-version compatibility on the base's drivers.
    MinorCompat,
    /// The wheel is older than the base: runs (drivers are backward compatible).
    Older,
    /// The wheel needs a newer major than the base's drivers provide.
    Incompatible,
}

/// How `wheel_cuda` (`12.6`) fits a base of toolkit `base_cuda` (`12.4.1`).
pub fn fit(wheel_cuda: &str, base_cuda: &str) -> Fit {
    let w = version_key(wheel_cuda);
    let b = version_key(&major_minor(base_cuda));
    let (wm, bm) = (w.first().copied(), b.first().copied());
    if wm > bm {
        Fit::Incompatible
    } else if w == b {
        Fit::Exact
    } else if wm == bm && w > b {
        Fit::MinorCompat
    } else {
        Fit::Older
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_270_has_no_cu124() {
        assert_eq!(variants("2.7.0"), vec!["cu118", "cu126", "cu128"]);
        assert!(lookup("2.7.0", "cu124").is_none());
        assert_eq!(pypi_default("2.7.0").unwrap().variant, "cu126");
    }

    #[test]
    fn pins_of_the_default_wheel() {
        let w = lookup("2.7.0", "cu126").unwrap();
        assert_eq!(
            (w.cudnn, w.nccl, w.cuda_runtime),
            ("9.5.1.17", "2.26.2", "12.6.77")
        );
        assert_eq!(default_index(w), PYPI_INDEX);
        assert_eq!(torch_requirement(w, PYPI_INDEX), "torch==2.7.0");
        let w = lookup("2.7.0", "cu128").unwrap();
        assert_eq!(default_index(w), "https://download.pytorch.org/whl/cu128");
        assert_eq!(
            torch_requirement(w, &default_index(w)),
            "torch==2.7.0+cu128"
        );
    }

    #[test]
    fn drivers() {
        assert_eq!(min_driver("12.4").unwrap().native_driver, "550.54.14");
        assert_eq!(min_driver("12.4.1").unwrap().native_driver, "550.54.15");
        assert_eq!(min_driver("12.6").unwrap().native_driver, "560.28.03");
        assert_eq!(min_driver("12.8").unwrap().native_driver, "570.26");
        assert_eq!(min_driver("11.8").unwrap().native_driver, "520.61.05");
        assert_eq!(min_driver("12.6").unwrap().minor_compat_driver, "525.60.13");
        assert!(min_driver("13.0").is_none());
    }

    #[test]
    fn fits() {
        assert_eq!(fit("12.6", "12.4.1"), Fit::MinorCompat);
        assert_eq!(fit("12.6", "12.6.3"), Fit::Exact);
        assert_eq!(fit("11.8", "12.8.1"), Fit::Older);
        assert_eq!(fit("12.8", "11.8.0"), Fit::Incompatible);
        assert_eq!(
            distro_python("nvidia/cuda:12.4.1-base-ubuntu22.04"),
            Some(("ubuntu22.04", "3.10"))
        );
    }
}
