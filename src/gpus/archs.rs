//! Which GPU code runs where: the architectures a torch wheel carries
//! ([`ArchList`], [`WHEEL_ARCHS`]), the compute capability of each GPU
//! model ([`GPU_MODELS`]) and the NCCL each GPU generation needs
//! ([`NCCL_FLOORS`]). Every row names its source. `verify`'s `torch.arch`
//! reads the list from the loaded library itself (`verify::fatbin`); the fit
//! gate ([`super::fit`]) reads an image's list from its labels, written at
//! render from [`WHEEL_ARCHS`].
//!
//! Facts only: no I/O.
use std::collections::BTreeSet;

use serde::Serialize;

/// The code a library carries, by SM version (`90` = sm_90).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchList {
    /// SM versions the library is built for with machine code (SASS).
    pub sass: BTreeSet<u32>,
    /// SM versions with PTX (JIT-compilable for that and newer GPUs).
    pub ptx: BTreeSet<u32>,
    /// SM versions with machine code in only a few entries (specialised kernels).
    pub partial: BTreeSet<u32>,
}

impl ArchList {
    /// `sm_50 sm_60 … compute_90` as `torch.cuda.get_arch_list()` prints them.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.sass.iter().map(|a| format!("sm_{a}")).collect();
        parts.extend(self.ptx.iter().map(|a| format!("compute_{a}")));
        parts.join(" ")
    }

    /// How a GPU of compute capability `major.minor` is served: SASS for the
    /// exact arch, SASS of the same major with a lower minor (binary
    /// compatible within a major, CUDA C Programming Guide "Binary
    /// Compatibility"), PTX of an older or equal arch (JIT), or not at all.
    pub fn coverage(&self, major: i32, minor: i32) -> Coverage {
        let cc = (major * 10 + minor) as u32;
        if self.sass.contains(&cc) {
            return Coverage::Exact;
        }
        if let Some(a) = self
            .sass
            .iter()
            .rev()
            .find(|a| **a / 10 == major as u32 && **a <= cc)
        {
            return Coverage::SameMajor(*a);
        }
        if let Some(a) = self.ptx.iter().rev().find(|a| **a <= cc) {
            return Coverage::Ptx(*a);
        }
        Coverage::None
    }
}

/// See [`ArchList::coverage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Machine code for this exact arch.
    Exact,
    /// Machine code for an older minor of the same major.
    SameMajor(u32),
    /// Only PTX (JIT at first use; slow start, and impossible under CUDA minor-version compatibility).
    Ptx(u32),
    /// No code runs on it.
    None,
}

/// The code of one published torch wheel, as its `torch.cuda.get_arch_list()`
/// prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WheelArchs {
    /// torch version (`2.7.0`).
    pub torch: &'static str,
    /// Wheel CUDA variant (`cu126`).
    pub variant: &'static str,
    /// SM versions with machine code (`90` = sm_90).
    pub sass: &'static [u32],
    /// SM versions with PTX.
    pub ptx: &'static [u32],
    /// Where the list was read.
    pub source: &'static str,
}

impl WheelArchs {
    /// The list as an [`ArchList`].
    pub fn list(&self) -> ArchList {
        ArchList {
            sass: self.sass.iter().copied().collect(),
            ptx: self.ptx.iter().copied().collect(),
            partial: BTreeSet::new(),
        }
    }
}

/// The torch wheels whose code imgctl knows.
pub const WHEEL_ARCHS: &[WheelArchs] = &[
    // Read here from libtorch_cuda.so's .nv_fatbin of
    // torch-2.7.0-cp311-cp311-manylinux_2_28_x86_64.whl (PyPI), 378 entries
    // per arch; `verify::fatbin`'s test holds the same list. PyTorch took
    // PTX out of its cu126 builds for 2.7 (pytorch/pytorch#148000).
    WheelArchs {
        torch: "2.7.0",
        variant: "cu126",
        sass: &[50, 60, 70, 75, 80, 86, 90],
        ptx: &[],
        source: "libtorch_cuda.so of torch-2.7.0-cp311-cp311-manylinux_2_28_x86_64.whl (PyPI), read by imgctl's fatbin reader",
    },
    // TORCH_CUDA_ARCH_LIST of the CUDA 12.8 builds: sm_70 deprecated
    // (pytorch/pytorch#147607), 12.0+PTX kept for 2.7.0 and removed only in
    // 2.8 (#157516); `torch.cuda.get_arch_list()` of 2.7.0+cu128 prints
    // sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120.
    WheelArchs {
        torch: "2.7.0",
        variant: "cu128",
        sass: &[75, 80, 86, 90, 100, 120],
        ptx: &[120],
        source: "https://github.com/pytorch/pytorch/pull/145792 (CUDA 12.8 builds: 7.5;8.0;8.6;9.0;10.0;12.0+PTX; sm_70 dropped by #147607, PTX kept until #157516 for 2.8)",
    },
    // pytorch/builder release/2.5 manywheel/build_cuda.sh: 5.0;6.0;7.0;7.5;
    // 8.0;8.6 plus 9.0 for CUDA 12.4; PTX removed from 12.4 by
    // pytorch/pytorch#141142 before 2.6.
    WheelArchs {
        torch: "2.6.0",
        variant: "cu124",
        sass: &[50, 60, 70, 75, 80, 86, 90],
        ptx: &[],
        source: "https://github.com/pytorch/pytorch/pull/141142 (CUDA 12.4 builds: 5.0;6.0;7.0;7.5;8.0;8.6;9.0, PTX removed)",
    },
];

/// The code of the wheel `torch`+`variant`, when imgctl knows it.
pub fn wheel_archs(torch: &str, variant: &str) -> Option<&'static WheelArchs> {
    WHEEL_ARCHS
        .iter()
        .find(|w| w.torch == torch && w.variant == variant)
}

/// One GPU model's compute capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GpuModel {
    /// The row's name (`B200`).
    pub model: &'static str,
    /// Fragments that must all appear in the device name (case-insensitive).
    #[serde(skip)]
    pub matches: &'static [&'static str],
    /// Compute capability (major, minor).
    pub cc: (u32, u32),
    /// Its generation (`Blackwell`).
    pub generation: &'static str,
}

/// Where the compute capabilities were read.
pub const CC_SOURCE: &str = "https://developer.nvidia.com/cuda-gpus (CUDA GPU compute capability)";

/// GPU models by compute capability; the first matching row wins, so the
/// more specific names come first.
pub const GPU_MODELS: &[GpuModel] = &[
    GpuModel {
        model: "GB300",
        matches: &["GB300"],
        cc: (10, 3),
        generation: "Blackwell Ultra",
    },
    GpuModel {
        model: "B300",
        matches: &["B300"],
        cc: (10, 3),
        generation: "Blackwell Ultra",
    },
    GpuModel {
        model: "GB200",
        matches: &["GB200"],
        cc: (10, 0),
        generation: "Blackwell",
    },
    GpuModel {
        model: "B200",
        matches: &["B200"],
        cc: (10, 0),
        generation: "Blackwell",
    },
    GpuModel {
        model: "RTX PRO 6000 Blackwell",
        matches: &["RTX PRO 6000"],
        cc: (12, 0),
        generation: "Blackwell (workstation)",
    },
    GpuModel {
        model: "RTX 5090",
        matches: &["5090"],
        cc: (12, 0),
        generation: "Blackwell (workstation)",
    },
    GpuModel {
        model: "GH200",
        matches: &["GH200"],
        cc: (9, 0),
        generation: "Hopper",
    },
    GpuModel {
        model: "H200",
        matches: &["H200"],
        cc: (9, 0),
        generation: "Hopper",
    },
    GpuModel {
        model: "H100",
        matches: &["H100"],
        cc: (9, 0),
        generation: "Hopper",
    },
    GpuModel {
        model: "H20",
        matches: &["H20"],
        cc: (9, 0),
        generation: "Hopper",
    },
    GpuModel {
        model: "L40S",
        matches: &["L40S"],
        cc: (8, 9),
        generation: "Ada",
    },
    GpuModel {
        model: "L40",
        matches: &["L40"],
        cc: (8, 9),
        generation: "Ada",
    },
    GpuModel {
        model: "L4",
        matches: &["L4"],
        cc: (8, 9),
        generation: "Ada",
    },
    GpuModel {
        model: "RTX 4090",
        matches: &["4090"],
        cc: (8, 9),
        generation: "Ada",
    },
    GpuModel {
        model: "RTX 6000 Ada",
        matches: &["RTX 6000 Ada"],
        cc: (8, 9),
        generation: "Ada",
    },
    GpuModel {
        model: "A100",
        matches: &["A100"],
        cc: (8, 0),
        generation: "Ampere",
    },
    GpuModel {
        model: "A30",
        matches: &["A30"],
        cc: (8, 0),
        generation: "Ampere",
    },
    GpuModel {
        model: "A40",
        matches: &["A40"],
        cc: (8, 6),
        generation: "Ampere",
    },
    GpuModel {
        model: "A10",
        matches: &["A10"],
        cc: (8, 6),
        generation: "Ampere",
    },
    GpuModel {
        model: "RTX 3090",
        matches: &["3090"],
        cc: (8, 6),
        generation: "Ampere",
    },
    GpuModel {
        model: "T4",
        matches: &["T4"],
        cc: (7, 5),
        generation: "Turing",
    },
    GpuModel {
        model: "V100",
        matches: &["V100"],
        cc: (7, 0),
        generation: "Volta",
    },
];

/// The row of a device name (`NVIDIA B200`, `b200`): every fragment of a
/// row must be a word, or a run of words, of the name, so that `L4` does
/// not claim an `L40S`, nor `A10` an `A100`.
pub fn gpu_model(name: &str) -> Option<&'static GpuModel> {
    let words: Vec<String> = name
        .split(|c: char| c.is_whitespace() || c == '-' || c == '_')
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .collect();
    let joined = format!(" {} ", words.join(" "));
    GPU_MODELS.iter().find(|m| {
        m.matches
            .iter()
            .all(|f| joined.contains(&format!(" {} ", f.to_ascii_uppercase())))
    })
}

/// The least NCCL for GPUs of one compute capability and up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NcclFloor {
    /// The generation (`Blackwell`).
    pub generation: &'static str,
    /// The compute capabilities it covers, lowest and highest (`(100, 103)`).
    pub cc: (u32, u32),
    /// The least NCCL version.
    pub nccl: &'static str,
    /// What that version added.
    pub why: &'static str,
    /// Where it was read.
    pub source: &'static str,
}

/// NCCL floors by generation: below them, NCCL has no code or tuning for
/// the GPU. Read from the release tags of github.com/NVIDIA/nccl.
pub const NCCL_FLOORS: &[NcclFloor] = &[
    NcclFloor {
        generation: "Hopper",
        cc: (90, 90),
        nccl: "2.15.1",
        why: "NCCL 2.15.1 added H100 (sm_90) support",
        source: "https://github.com/NVIDIA/nccl/releases/tag/v2.15.1-1 (\"Add support for H100 (sm90)\")",
    },
    NcclFloor {
        generation: "Blackwell",
        cc: (100, 100),
        nccl: "2.25.1",
        why: "NCCL 2.25.1 added Blackwell (sm_100) support",
        source: "https://github.com/NVIDIA/nccl/releases/tag/v2.25.1-1 (\"Add Blackwell/SM100 support\")",
    },
    NcclFloor {
        generation: "Blackwell (workstation)",
        cc: (120, 120),
        nccl: "2.25.1",
        why: "NCCL 2.25.1 is the first built for sm_120",
        source: "https://github.com/NVIDIA/nccl/blob/v2.25.1-1/makefiles/common.mk (compute_120,code=sm_120 under CUDA 12.8)",
    },
];

/// The NCCL floor of compute capability `cc` (`100`), when there is one.
pub fn nccl_floor(cc: u32) -> Option<&'static NcclFloor> {
    NCCL_FLOORS.iter().find(|f| f.cc.0 <= cc && cc <= f.cc.1)
}
