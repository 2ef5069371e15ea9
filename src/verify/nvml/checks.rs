//! NVML: the seam ([`NvmlBackend`]), the real backend over nvml-wrapper
//! ([`RealNvml`]), a scriptable fake for tests ([`FakeNvml`]) and the NVML
//! checks (`nvml.*`).
//!
//! Only this file imports nvml-wrapper. The checks see the backend through
//! the trait, so every verdict path can be driven from a test. A call that
//! NVML answers with NotSupported (common on VMs, gVisor and consumer GPUs)
//! becomes SKIP with the reason, never PASS.
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::verify::check::{CheckResult, FnCheck, Level, Scope};
use crate::verify::Context;

/// The library NVML is loaded from (the driver installs it; the container
/// toolkit mounts it into containers).
pub const NVML_LIB: &str = "libnvidia-ml.so.1";

/// Why an NVML call gave no answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NvmlErr {
    /// The GPU, the driver or the virtualisation layer does not support the call.
    NotSupported(String),
    /// NVML refused for lack of permission.
    NoPermission,
    /// The GPU fell off the bus or is otherwise inaccessible.
    GpuLost,
    /// Anything else, with NVML's description.
    Other(String),
}

impl std::fmt::Display for NvmlErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlErr::NotSupported(what) => write!(f, "not supported here ({what})"),
            NvmlErr::NoPermission => f.write_str("no permission"),
            NvmlErr::GpuLost => f.write_str("the GPU has fallen off the bus or is inaccessible"),
            NvmlErr::Other(m) => f.write_str(m),
        }
    }
}

/// Shorthand for backend results.
pub type NvmlResult<T> = Result<T, NvmlErr>;

/// ECC state and uncorrectable error counts of one GPU.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EccInfo {
    /// ECC currently enabled.
    pub enabled: bool,
    /// ECC enabled after the next reboot.
    pub pending_enabled: bool,
    /// Uncorrectable errors since the driver loaded.
    pub uncorrected_volatile: u64,
    /// Uncorrectable errors over the GPU's life.
    pub uncorrected_aggregate: u64,
}

/// Row-remapping state (Ampere and later; nvmlDeviceGetRemappedRows).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemappedRows {
    /// Rows remapped for correctable errors.
    pub corrected: u32,
    /// Rows remapped for uncorrectable errors.
    pub uncorrected: u32,
    /// A remap is pending: the GPU must be reset before it takes effect.
    pub pending: bool,
    /// A remap failed: the GPU has run out of spare rows.
    pub failed: bool,
}

/// Page-retirement state (pre-Ampere ECC GPUs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredPages {
    /// Pages retired for multiple single-bit errors.
    pub single_bit: u32,
    /// Pages retired for a double-bit error.
    pub double_bit: u32,
    /// Pages waiting for retirement at the next reset.
    pub pending: bool,
}

/// PCIe link, current and maximum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLink {
    /// Current generation.
    pub gen: u32,
    /// Maximum generation the GPU and slot support.
    pub max_gen: u32,
    /// Current width (lanes).
    pub width: u32,
    /// Maximum width.
    pub max_width: u32,
}

/// A process holding a GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    /// Process id (in NVML's PID namespace: the host's).
    pub pid: u32,
    /// GPU memory it uses, when NVML knows.
    pub used_bytes: Option<u64>,
}

/// What the NVML checks need from NVML. Every method can fail; indices are
/// NVML's (0-based, PCI order).
pub trait NvmlBackend: Send + Sync {
    /// Driver version string (`580.159.03`).
    fn driver_version(&self) -> NvmlResult<String>;
    /// CUDA version the driver supports, as NVML encodes it (12040 = 12.4).
    fn cuda_driver_version(&self) -> NvmlResult<i32>;
    /// Number of GPUs NVML sees.
    fn device_count(&self) -> NvmlResult<u32>;
    /// Product name.
    fn name(&self, gpu: u32) -> NvmlResult<String>;
    /// GPU UUID (`GPU-…`).
    fn uuid(&self, gpu: u32) -> NvmlResult<String>;
    /// PCI bus id (`00000000:18:00.0`).
    fn pci_bus_id(&self, gpu: u32) -> NvmlResult<String>;
    /// Total memory in bytes.
    fn memory_total(&self, gpu: u32) -> NvmlResult<u64>;
    /// CUDA compute capability (major, minor).
    fn compute_capability(&self, gpu: u32) -> NvmlResult<(i32, i32)>;
    /// Persistence mode on.
    fn persistence_mode(&self, gpu: u32) -> NvmlResult<bool>;
    /// Compute mode: `Default`, `ExclusiveProcess`, `Prohibited`.
    fn compute_mode(&self, gpu: u32) -> NvmlResult<String>;
    /// MIG mode (current, pending).
    fn mig_mode(&self, gpu: u32) -> NvmlResult<(bool, bool)>;
    /// ECC mode and uncorrectable error counts.
    fn ecc(&self, gpu: u32) -> NvmlResult<EccInfo>;
    /// Retired pages.
    fn retired_pages(&self, gpu: u32) -> NvmlResult<RetiredPages>;
    /// Remapped rows.
    fn remapped_rows(&self, gpu: u32) -> NvmlResult<RemappedRows>;
    /// GPU temperature in °C.
    fn temperature(&self, gpu: u32) -> NvmlResult<u32>;
    /// Temperature at which hardware slowdown starts, °C.
    fn temperature_slowdown(&self, gpu: u32) -> NvmlResult<u32>;
    /// Power draw in milliwatts.
    fn power_usage_mw(&self, gpu: u32) -> NvmlResult<u32>;
    /// Enforced power limit in milliwatts.
    fn power_limit_mw(&self, gpu: u32) -> NvmlResult<u32>;
    /// Default power limit in milliwatts.
    fn power_limit_default_mw(&self, gpu: u32) -> NvmlResult<u32>;
    /// Active clock-event (throttle) reasons, NVML bit mask.
    fn throttle_reasons(&self, gpu: u32) -> NvmlResult<u64>;
    /// PCIe link state.
    fn pcie_link(&self, gpu: u32) -> NvmlResult<PcieLink>;
    /// NVLink links: `Some(active)` for each link the GPU has.
    fn nvlink_states(&self, gpu: u32) -> NvmlResult<Vec<bool>>;
    /// Whether P2P reads from `a` to `b` are possible, or why not.
    fn p2p_read(&self, a: u32, b: u32) -> NvmlResult<Result<(), String>>;
    /// Topology level between two GPUs (`NVLink/Internal`, `Single`, `HostBridge`, `System`…).
    fn topology(&self, a: u32, b: u32) -> NvmlResult<String>;
    /// Compute processes on the GPU.
    fn processes(&self, gpu: u32) -> NvmlResult<Vec<GpuProcess>>;
}

/// Clock-event (throttle) reason bits, from nvml.h
/// (`nvmlClocksEventReason*` / `nvmlClocksThrottleReason*`).
pub const THROTTLE_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// Reasons that are benign (the issue: "anything beyond idle or the software
/// power cap is a WARN").
pub const BENIGN_THROTTLE: u64 = 0x1 | 0x4;

/// Names of the set bits of a throttle mask; unknown bits as hex.
pub fn throttle_names(mask: u64) -> Vec<String> {
    let mut names = Vec::new();
    let mut known = 0u64;
    for (bit, name) in THROTTLE_REASONS {
        known |= bit;
        if mask & bit != 0 {
            names.push((*name).to_string());
        }
    }
    if mask & !known != 0 {
        names.push(format!("unknown(0x{:x})", mask & !known));
    }
    names
}

// ---------------------------------------------------------------------------
// Real backend

/// NVML through nvml-wrapper, loading [`NVML_LIB`].
pub struct RealNvml {
    nvml: nvml_wrapper::Nvml,
    /// Our own handle on the same library for calls nvml-wrapper 0.11 lacks
    /// (nvmlDeviceGetRemappedRows). dlopen returns the already-loaded copy.
    raw: Option<libloading::Library>,
}

/// Why NVML could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlLoadError {
    /// libnvidia-ml.so.1 is not on this machine: no NVIDIA driver.
    NoLibrary(String),
    /// The library loaded but nvmlInit failed (driver not running, no permission…).
    InitFailed(String),
}

impl std::fmt::Display for NvmlLoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NvmlLoadError::NoLibrary(_) => write!(f, "no NVIDIA driver: {NVML_LIB} not found"),
            NvmlLoadError::InitFailed(e) => write!(f, "NVML failed to initialise: {e}"),
        }
    }
}

impl RealNvml {
    /// Loads and initialises NVML.
    pub fn load() -> Result<Self, NvmlLoadError> {
        use nvml_wrapper::error::NvmlError as E;
        match nvml_wrapper::Nvml::init() {
            Ok(nvml) => {
                // SAFETY: loading the NVML library the line above already loaded;
                // its initialisers have run.
                let raw = unsafe { libloading::Library::new(NVML_LIB) }.ok();
                Ok(Self { nvml, raw })
            }
            Err(E::LibloadingError(e)) => Err(NvmlLoadError::NoLibrary(e.to_string())),
            Err(E::LibraryNotFound) => Err(NvmlLoadError::NoLibrary(
                "NVML_ERROR_LIBRARY_NOT_FOUND".into(),
            )),
            Err(E::DriverNotLoaded) => Err(NvmlLoadError::InitFailed(
                "the NVIDIA kernel driver is not loaded".into(),
            )),
            Err(e) => Err(NvmlLoadError::InitFailed(e.to_string())),
        }
    }

    fn dev(&self, gpu: u32) -> NvmlResult<nvml_wrapper::Device<'_>> {
        self.nvml.device_by_index(gpu).map_err(map_err)
    }
}

fn map_err(e: nvml_wrapper::error::NvmlError) -> NvmlErr {
    use nvml_wrapper::error::NvmlError as E;
    match e {
        E::NotSupported => NvmlErr::NotSupported("NVML_ERROR_NOT_SUPPORTED".into()),
        E::FailedToLoadSymbol(s) => {
            NvmlErr::NotSupported(format!("this driver's NVML lacks the call: {s}"))
        }
        E::NoPermission => NvmlErr::NoPermission,
        E::GpuLost => NvmlErr::GpuLost,
        other => NvmlErr::Other(other.to_string()),
    }
}

/// nvmlReturn_t NVML_ERROR_NOT_SUPPORTED (nvml.h).
const NVML_ERROR_NOT_SUPPORTED: u32 = 3;
/// nvmlReturn_t NVML_ERROR_GPU_IS_LOST (nvml.h).
const NVML_ERROR_GPU_IS_LOST: u32 = 15;
/// NVML_NVLINK_MAX_LINKS in nvml.h (18 since NVLink 4 / Hopper).
const NVLINK_MAX_LINKS: u32 = 18;

impl NvmlBackend for RealNvml {
    fn driver_version(&self) -> NvmlResult<String> {
        self.nvml.sys_driver_version().map_err(map_err)
    }
    fn cuda_driver_version(&self) -> NvmlResult<i32> {
        self.nvml.sys_cuda_driver_version().map_err(map_err)
    }
    fn device_count(&self) -> NvmlResult<u32> {
        self.nvml.device_count().map_err(map_err)
    }
    fn name(&self, gpu: u32) -> NvmlResult<String> {
        self.dev(gpu)?.name().map_err(map_err)
    }
    fn uuid(&self, gpu: u32) -> NvmlResult<String> {
        self.dev(gpu)?.uuid().map_err(map_err)
    }
    fn pci_bus_id(&self, gpu: u32) -> NvmlResult<String> {
        self.dev(gpu)?.pci_info().map(|p| p.bus_id).map_err(map_err)
    }
    fn memory_total(&self, gpu: u32) -> NvmlResult<u64> {
        self.dev(gpu)?
            .memory_info()
            .map(|m| m.total)
            .map_err(map_err)
    }
    fn compute_capability(&self, gpu: u32) -> NvmlResult<(i32, i32)> {
        self.dev(gpu)?
            .cuda_compute_capability()
            .map(|c| (c.major, c.minor))
            .map_err(map_err)
    }
    fn persistence_mode(&self, gpu: u32) -> NvmlResult<bool> {
        self.dev(gpu)?.is_in_persistent_mode().map_err(map_err)
    }
    fn compute_mode(&self, gpu: u32) -> NvmlResult<String> {
        self.dev(gpu)?
            .compute_mode()
            .map(|m| format!("{m:?}"))
            .map_err(map_err)
    }
    fn mig_mode(&self, gpu: u32) -> NvmlResult<(bool, bool)> {
        self.dev(gpu)?
            .mig_mode()
            .map(|m| (m.current != 0, m.pending != 0))
            .map_err(map_err)
    }
    fn ecc(&self, gpu: u32) -> NvmlResult<EccInfo> {
        use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
        let dev = self.dev(gpu)?;
        let mode = dev.is_ecc_enabled().map_err(map_err)?;
        let counter = |c| dev.total_ecc_errors(MemoryError::Uncorrected, c);
        let (volatile, aggregate) = if mode.currently_enabled {
            (
                counter(EccCounter::Volatile).map_err(map_err)?,
                counter(EccCounter::Aggregate).map_err(map_err)?,
            )
        } else {
            // With ECC off NVML may refuse the counters (NOT_SUPPORTED): that
            // must not turn the "ECC is disabled" WARN into a SKIP.
            (
                counter(EccCounter::Volatile).unwrap_or(0),
                counter(EccCounter::Aggregate).unwrap_or(0),
            )
        };
        Ok(EccInfo {
            enabled: mode.currently_enabled,
            pending_enabled: mode.pending_enabled,
            uncorrected_volatile: volatile,
            uncorrected_aggregate: aggregate,
        })
    }
    fn retired_pages(&self, gpu: u32) -> NvmlResult<RetiredPages> {
        use nvml_wrapper::enum_wrappers::device::RetirementCause;
        let dev = self.dev(gpu)?;
        let single = dev
            .retired_pages(RetirementCause::MultipleSingleBitEccErrors)
            .map_err(map_err)?;
        let double = dev
            .retired_pages(RetirementCause::DoubleBitEccError)
            .map_err(map_err)?;
        let pending = dev.are_pages_pending_retired().map_err(map_err)?;
        Ok(RetiredPages {
            single_bit: single.len() as u32,
            double_bit: double.len() as u32,
            pending,
        })
    }
    fn remapped_rows(&self, gpu: u32) -> NvmlResult<RemappedRows> {
        let dev = self.dev(gpu)?;
        let lib = self
            .raw
            .as_ref()
            .ok_or_else(|| NvmlErr::Other(format!("could not open {NVML_LIB} a second time")))?;
        type GetRemappedRows = unsafe extern "C" fn(
            *mut std::ffi::c_void,
            *mut u32,
            *mut u32,
            *mut u32,
            *mut u32,
        ) -> u32;
        // SAFETY: the symbol's C signature is
        // nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t, unsigned*, unsigned*, unsigned*, unsigned*)
        // (nvml.h, since CUDA 11.0).
        let f = unsafe { lib.get::<GetRemappedRows>(b"nvmlDeviceGetRemappedRows\0") }.map_err(
            |_| NvmlErr::NotSupported("this driver's NVML lacks nvmlDeviceGetRemappedRows".into()),
        )?;
        let (mut corr, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
        // SAFETY: a valid device handle from this NVML and four out-pointers.
        let rc = unsafe {
            f(
                dev.handle() as *mut std::ffi::c_void,
                &mut corr,
                &mut unc,
                &mut pending,
                &mut failed,
            )
        };
        match rc {
            0 => Ok(RemappedRows {
                corrected: corr,
                uncorrected: unc,
                pending: pending != 0,
                failed: failed != 0,
            }),
            NVML_ERROR_NOT_SUPPORTED => Err(NvmlErr::NotSupported(
                "NVML_ERROR_NOT_SUPPORTED (row remapping exists on Ampere and later)".into(),
            )),
            NVML_ERROR_GPU_IS_LOST => Err(NvmlErr::GpuLost),
            other => Err(NvmlErr::Other(format!(
                "nvmlDeviceGetRemappedRows returned {other}"
            ))),
        }
    }
    fn temperature(&self, gpu: u32) -> NvmlResult<u32> {
        use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
        self.dev(gpu)?
            .temperature(TemperatureSensor::Gpu)
            .map_err(map_err)
    }
    fn temperature_slowdown(&self, gpu: u32) -> NvmlResult<u32> {
        use nvml_wrapper::enum_wrappers::device::TemperatureThreshold;
        self.dev(gpu)?
            .temperature_threshold(TemperatureThreshold::Slowdown)
            .map_err(map_err)
    }
    fn power_usage_mw(&self, gpu: u32) -> NvmlResult<u32> {
        self.dev(gpu)?.power_usage().map_err(map_err)
    }
    fn power_limit_mw(&self, gpu: u32) -> NvmlResult<u32> {
        self.dev(gpu)?.enforced_power_limit().map_err(map_err)
    }
    fn power_limit_default_mw(&self, gpu: u32) -> NvmlResult<u32> {
        self.dev(gpu)?
            .power_management_limit_default()
            .map_err(map_err)
    }
    fn throttle_reasons(&self, gpu: u32) -> NvmlResult<u64> {
        use nvml_wrapper::error::Bits;
        use nvml_wrapper::error::NvmlError as E;
        // The strict call hands back the raw mask when it holds bits newer
        // than nvml-wrapper knows; the plain one would drop them silently.
        match self.dev(gpu)?.current_throttle_reasons_strict() {
            Ok(r) => Ok(r.bits()),
            Err(E::IncorrectBits(Bits::U64(raw))) => Ok(raw),
            Err(e) => Err(map_err(e)),
        }
    }
    fn pcie_link(&self, gpu: u32) -> NvmlResult<PcieLink> {
        let dev = self.dev(gpu)?;
        Ok(PcieLink {
            gen: dev.current_pcie_link_gen().map_err(map_err)?,
            max_gen: dev.max_pcie_link_gen().map_err(map_err)?,
            width: dev.current_pcie_link_width().map_err(map_err)?,
            max_width: dev.max_pcie_link_width().map_err(map_err)?,
        })
    }
    fn nvlink_states(&self, gpu: u32) -> NvmlResult<Vec<bool>> {
        use nvml_wrapper::error::NvmlError as E;
        let dev = self.dev(gpu)?;
        let mut states = Vec::new();
        for link in 0..NVLINK_MAX_LINKS {
            match dev.link_wrapper_for(link).is_active() {
                Ok(active) => states.push(active),
                // Past the last link, or a GPU without NVLink.
                Err(E::InvalidArg) | Err(E::NotSupported) => break,
                Err(e) => return Err(map_err(e)),
            }
        }
        Ok(states)
    }
    fn p2p_read(&self, a: u32, b: u32) -> NvmlResult<Result<(), String>> {
        use nvml_wrapper::enum_wrappers::device::{P2pCapabilitiesIndex, P2pStatus};
        let (da, db) = (self.dev(a)?, self.dev(b)?);
        match da
            .p2p_status(&db, P2pCapabilitiesIndex::Read)
            .map_err(map_err)?
        {
            P2pStatus::Ok => Ok(Ok(())),
            other => Ok(Err(format!("{other:?}"))),
        }
    }
    fn topology(&self, a: u32, b: u32) -> NvmlResult<String> {
        let (da, db) = (self.dev(a)?, self.dev(b)?);
        da.topology_common_ancestor(db)
            .map(|t| format!("{t:?}"))
            .map_err(map_err)
    }
    fn processes(&self, gpu: u32) -> NvmlResult<Vec<GpuProcess>> {
        use nvml_wrapper::enums::device::UsedGpuMemory;
        let procs = self
            .dev(gpu)?
            .running_compute_processes()
            .map_err(map_err)?;
        Ok(procs
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect())
    }
}

// ---------------------------------------------------------------------------
// Fake backend

/// One fake GPU; every field is what the matching backend call returns.
#[derive(Debug, Clone)]
pub struct FakeGpu {
    /// Product name.
    pub name: String,
    /// UUID.
    pub uuid: String,
    /// PCI bus id.
    pub pci_bus_id: String,
    /// Memory in bytes.
    pub memory_total: u64,
    /// Compute capability.
    pub cc: (i32, i32),
    /// Persistence mode.
    pub persistence: NvmlResult<bool>,
    /// Compute mode.
    pub compute_mode: String,
    /// MIG (current, pending).
    pub mig: NvmlResult<(bool, bool)>,
    /// ECC.
    pub ecc: NvmlResult<EccInfo>,
    /// Retired pages.
    pub retired: NvmlResult<RetiredPages>,
    /// Remapped rows.
    pub remapped: NvmlResult<RemappedRows>,
    /// Temperature °C.
    pub temperature: u32,
    /// Slowdown threshold °C.
    pub slowdown: NvmlResult<u32>,
    /// Power draw mW.
    pub power_mw: u32,
    /// Enforced limit mW.
    pub power_limit_mw: u32,
    /// Default limit mW.
    pub power_limit_default_mw: u32,
    /// Throttle mask.
    pub throttle: NvmlResult<u64>,
    /// PCIe link.
    pub pcie: NvmlResult<PcieLink>,
    /// NVLink states.
    pub nvlink: NvmlResult<Vec<bool>>,
    /// Processes.
    pub processes: Vec<GpuProcess>,
    /// Every call for this GPU fails with GpuLost (a GPU fallen off the bus).
    pub lost: bool,
}

impl FakeGpu {
    /// A healthy H200 SXM (values as NVML reports them on one).
    pub fn healthy_h200(index: u32) -> Self {
        Self {
            name: "NVIDIA H200".into(),
            uuid: format!("GPU-00000000-0000-0000-0000-00000000000{index}"),
            pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + index),
            memory_total: 150_754_820_096,
            cc: (9, 0),
            persistence: Ok(true),
            compute_mode: "Default".into(),
            mig: Ok((false, false)),
            ecc: Ok(EccInfo {
                enabled: true,
                pending_enabled: true,
                ..Default::default()
            }),
            retired: Err(NvmlErr::NotSupported("NVML_ERROR_NOT_SUPPORTED".into())),
            remapped: Ok(RemappedRows::default()),
            temperature: 34,
            slowdown: Ok(87),
            power_mw: 75_000,
            power_limit_mw: 700_000,
            power_limit_default_mw: 700_000,
            throttle: Ok(0x1),
            pcie: Ok(PcieLink {
                gen: 5,
                max_gen: 5,
                width: 16,
                max_width: 16,
            }),
            nvlink: Ok(vec![true; 18]),
            processes: Vec::new(),
            lost: false,
        }
    }
}

/// A scriptable NVML for tests: GPUs, a driver, and optionally a call that hangs.
#[derive(Debug, Clone)]
pub struct FakeNvml {
    /// The GPUs.
    pub gpus: Vec<FakeGpu>,
    /// What `device_count` returns (defaults to `gpus.len()`; set it to model
    /// a GPU NVML counts but cannot reach).
    pub count: Option<u32>,
    /// Driver version.
    pub driver: String,
    /// CUDA driver version (12040 = 12.4).
    pub cuda_driver: i32,
    /// Name of a backend method that never returns (`"ecc"`), to test deadlines.
    pub hang_on: Option<&'static str>,
    /// P2P read availability for a pair (default: available).
    pub p2p: BTreeMap<(u32, u32), Result<(), String>>,
}

impl FakeNvml {
    /// `n` healthy H200s on driver 580.159.03 (CUDA 13.0).
    pub fn healthy(n: u32) -> Self {
        Self {
            gpus: (0..n).map(FakeGpu::healthy_h200).collect(),
            count: None,
            driver: "580.159.03".into(),
            cuda_driver: 13000,
            hang_on: None,
            p2p: BTreeMap::new(),
        }
    }
    fn hang(&self, what: &str) {
        if self.hang_on == Some(what) {
            // A driver call that never comes back (as after an Xid 79).
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
    }
    fn gpu(&self, gpu: u32, what: &str) -> NvmlResult<&FakeGpu> {
        self.hang(what);
        let g = self
            .gpus
            .get(gpu as usize)
            .ok_or_else(|| NvmlErr::Other(format!("NVML_ERROR_INVALID_ARGUMENT (no GPU {gpu})")))?;
        if g.lost {
            return Err(NvmlErr::GpuLost);
        }
        Ok(g)
    }
}

impl NvmlBackend for FakeNvml {
    fn driver_version(&self) -> NvmlResult<String> {
        self.hang("driver_version");
        Ok(self.driver.clone())
    }
    fn cuda_driver_version(&self) -> NvmlResult<i32> {
        self.hang("cuda_driver_version");
        Ok(self.cuda_driver)
    }
    fn device_count(&self) -> NvmlResult<u32> {
        self.hang("device_count");
        Ok(self.count.unwrap_or(self.gpus.len() as u32))
    }
    fn name(&self, gpu: u32) -> NvmlResult<String> {
        Ok(self.gpu(gpu, "name")?.name.clone())
    }
    fn uuid(&self, gpu: u32) -> NvmlResult<String> {
        Ok(self.gpu(gpu, "uuid")?.uuid.clone())
    }
    fn pci_bus_id(&self, gpu: u32) -> NvmlResult<String> {
        Ok(self.gpu(gpu, "pci_bus_id")?.pci_bus_id.clone())
    }
    fn memory_total(&self, gpu: u32) -> NvmlResult<u64> {
        Ok(self.gpu(gpu, "memory_total")?.memory_total)
    }
    fn compute_capability(&self, gpu: u32) -> NvmlResult<(i32, i32)> {
        Ok(self.gpu(gpu, "compute_capability")?.cc)
    }
    fn persistence_mode(&self, gpu: u32) -> NvmlResult<bool> {
        self.gpu(gpu, "persistence_mode")?.persistence.clone()
    }
    fn compute_mode(&self, gpu: u32) -> NvmlResult<String> {
        Ok(self.gpu(gpu, "compute_mode")?.compute_mode.clone())
    }
    fn mig_mode(&self, gpu: u32) -> NvmlResult<(bool, bool)> {
        self.gpu(gpu, "mig_mode")?.mig.clone()
    }
    fn ecc(&self, gpu: u32) -> NvmlResult<EccInfo> {
        self.gpu(gpu, "ecc")?.ecc.clone()
    }
    fn retired_pages(&self, gpu: u32) -> NvmlResult<RetiredPages> {
        self.gpu(gpu, "retired_pages")?.retired.clone()
    }
    fn remapped_rows(&self, gpu: u32) -> NvmlResult<RemappedRows> {
        self.gpu(gpu, "remapped_rows")?.remapped.clone()
    }
    fn temperature(&self, gpu: u32) -> NvmlResult<u32> {
        Ok(self.gpu(gpu, "temperature")?.temperature)
    }
    fn temperature_slowdown(&self, gpu: u32) -> NvmlResult<u32> {
        self.gpu(gpu, "temperature_slowdown")?.slowdown.clone()
    }
    fn power_usage_mw(&self, gpu: u32) -> NvmlResult<u32> {
        Ok(self.gpu(gpu, "power_usage_mw")?.power_mw)
    }
    fn power_limit_mw(&self, gpu: u32) -> NvmlResult<u32> {
        Ok(self.gpu(gpu, "power_limit_mw")?.power_limit_mw)
    }
    fn power_limit_default_mw(&self, gpu: u32) -> NvmlResult<u32> {
        Ok(self
            .gpu(gpu, "power_limit_default_mw")?
            .power_limit_default_mw)
    }
    fn throttle_reasons(&self, gpu: u32) -> NvmlResult<u64> {
        self.gpu(gpu, "throttle_reasons")?.throttle.clone()
    }
    fn pcie_link(&self, gpu: u32) -> NvmlResult<PcieLink> {
        self.gpu(gpu, "pcie_link")?.pcie.clone()
    }
    fn nvlink_states(&self, gpu: u32) -> NvmlResult<Vec<bool>> {
        self.gpu(gpu, "nvlink_states")?.nvlink.clone()
    }
    fn p2p_read(&self, a: u32, b: u32) -> NvmlResult<Result<(), String>> {
        self.gpu(a, "p2p_read")?;
        self.gpu(b, "p2p_read")?;
        Ok(self.p2p.get(&(a, b)).cloned().unwrap_or(Ok(())))
    }
    fn topology(&self, a: u32, b: u32) -> NvmlResult<String> {
        self.gpu(a, "topology")?;
        self.gpu(b, "topology")?;
        Ok("Internal".into())
    }
    fn processes(&self, gpu: u32) -> NvmlResult<Vec<GpuProcess>> {
        Ok(self.gpu(gpu, "processes")?.processes.clone())
    }
}

// ---------------------------------------------------------------------------
// Checks

/// The NVML checks, in run order.
pub fn checks() -> Vec<FnCheck> {
    let node = |id, description, run| FnCheck {
        id,
        description,
        level: Level::Quick,
        scope: Scope::Node,
        needs_gpu: true,
        run,
    };
    let per_gpu = |id, description, run| FnCheck {
        id,
        description,
        level: Level::Quick,
        scope: Scope::PerGpu,
        needs_gpu: true,
        run,
    };
    vec![
        node(
            "nvml.driver",
            "NVML loads; driver and CUDA driver versions",
            check_driver,
        ),
        node(
            "nvml.device_count",
            "GPU count against --expect-gpus; every GPU reachable",
            check_device_count,
        ),
        per_gpu(
            "nvml.identity",
            "name, UUID, PCI bus id, memory, compute capability",
            check_identity,
        ),
        per_gpu(
            "nvml.modes",
            "persistence, compute and MIG modes",
            check_modes,
        ),
        per_gpu("nvml.ecc", "ECC mode and uncorrectable errors", check_ecc),
        per_gpu(
            "nvml.retired_pages",
            "pages pending retirement (pre-Ampere)",
            check_retired_pages,
        ),
        per_gpu(
            "nvml.remapped_rows",
            "row remapping pending or failed (Ampere+)",
            check_remapped_rows,
        ),
        per_gpu(
            "nvml.temperature",
            "temperature against the slowdown threshold",
            check_temperature,
        ),
        per_gpu(
            "nvml.power",
            "power draw against the enforced limit",
            check_power,
        ),
        per_gpu(
            "nvml.throttle",
            "active clock-event (throttle) reasons",
            check_throttle,
        ),
        per_gpu(
            "nvml.pcie",
            "PCIe generation and width, current against max",
            check_pcie,
        ),
        per_gpu("nvml.nvlink", "NVLink link states", check_nvlink),
        node(
            "nvml.topology",
            "P2P and topology matrix between GPUs",
            check_topology,
        ),
        per_gpu(
            "nvml.processes",
            "processes holding the GPU",
            check_processes,
        ),
    ]
}

/// Turns a failed NVML call into a result: NotSupported => SKIP (with the
/// reason), GpuLost => FAIL, anything else => ERROR.
pub fn from_err(id: &str, what: &str, e: &NvmlErr) -> CheckResult {
    match e {
        NvmlErr::NotSupported(why) => {
            CheckResult::skip(id, format!("{what}: not supported here ({why})"))
        }
        NvmlErr::GpuLost => CheckResult::fail(
            id,
            format!("{what}: the GPU has fallen off the bus or is inaccessible"),
        )
        .hint("check `nvidia-smi` and dmesg for Xid 79; the node needs a GPU reset or a reboot"),
        NvmlErr::NoPermission => {
            CheckResult::error(id, format!("{what}: NVML refused (no permission)")).hint(
                "run as a user that may open /dev/nvidia*, or in a container started with the GPU",
            )
        }
        NvmlErr::Other(m) => CheckResult::error(id, format!("{what}: {m}")),
    }
}

macro_rules! nvml_or_return {
    ($ctx:expr, $id:expr) => {
        match $ctx.nvml_backend($id) {
            Ok(b) => b,
            Err(r) => return vec![*r],
        }
    };
}

macro_rules! tri {
    ($e:expr, $id:expr, $what:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return vec![from_err($id, $what, &e)],
        }
    };
}

/// Formats NVML's CUDA version encoding (12040 → "12.4").
pub fn fmt_cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn check_driver(ctx: &Context, _gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.driver";
    let nvml = match &ctx.nvml {
        crate::verify::NvmlState::Ready(b) => b.clone(),
        crate::verify::NvmlState::Hung(e) => {
            return vec![CheckResult::error(ID, e.to_string()).hint(
                "the driver did not answer nvmlInit in time: check `nvidia-smi` and dmesg for Xid errors; raise --check-timeout if the system is merely slow",
            )];
        }
        crate::verify::NvmlState::Unavailable(e) => {
            return vec![if ctx.expect.allows_none() {
                CheckResult::skip(ID, format!("{e}; none expected (--expect-gpus 0)"))
            } else {
                CheckResult::fail(ID, e.to_string()).hint(
                    "install the NVIDIA driver, or start the container with the GPU (`docker run --gpus all`, NVIDIA Container Toolkit); on a CPU-only host pass --expect-gpus 0",
                )
            }];
        }
    };
    let driver = tri!(nvml.driver_version(), ID, "driver version");
    let cuda = tri!(nvml.cuda_driver_version(), ID, "CUDA driver version");
    vec![CheckResult::pass(
        ID,
        format!(
            "driver {driver}, supports CUDA up to {}",
            fmt_cuda_version(cuda)
        ),
    )
    .measured(format!("driver {driver} / CUDA {}", fmt_cuda_version(cuda)))]
}

fn check_device_count(ctx: &Context, _gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.device_count";
    let nvml = nvml_or_return!(ctx, ID);
    let count = tri!(nvml.device_count(), ID, "device count");
    let threshold = ctx.expect.describe();
    // A GPU NVML counts but cannot reach is missing for training purposes.
    let mut lost = Vec::new();
    for i in 0..count {
        if let Err(e) = nvml.uuid(i) {
            lost.push(format!("GPU {i}: {e}"));
        }
    }
    let reachable = count - lost.len() as u32;
    let mut r = if !lost.is_empty() {
        CheckResult::fail(ID, format!("{} of {count} GPUs unreachable: {}", lost.len(), lost.join("; ")))
            .hint("check `nvidia-smi` and dmesg for Xid errors; a GPU that fell off the bus needs a reset or reboot")
    } else if !ctx.expect.accepts(count) {
        CheckResult::fail(ID, format!("found {count} GPU(s), expected {threshold}")).hint(
            "a GPU may be missing (check `nvidia-smi -L`, dmesg), or the container was given fewer GPUs (--gpus / CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES)",
        )
    } else if count == 0 {
        CheckResult::skip(ID, "no GPU found; none expected (--expect-gpus 0)")
    } else {
        CheckResult::pass(ID, format!("{count} GPU(s)"))
    };
    r = r
        .measured(format!("{reachable} GPU(s)"))
        .threshold(threshold)
        .value(reachable as f64, "GPUs");
    vec![r]
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn check_identity(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.identity";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let name = tri!(nvml.name(g), ID, "name");
    let uuid = tri!(nvml.uuid(g), ID, "UUID");
    let bus = tri!(nvml.pci_bus_id(g), ID, "PCI bus id");
    let mem = tri!(nvml.memory_total(g), ID, "memory");
    let (maj, min) = tri!(nvml.compute_capability(g), ID, "compute capability");
    vec![CheckResult::pass(ID, format!("{name} {uuid} at {bus}"))
        .measured(format!("{}, sm_{maj}{min}", gib(mem)))
        .fact("name", name)
        .fact("uuid", uuid)
        .fact("pci_bus_id", bus)]
}

fn check_modes(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.modes";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let compute = tri!(nvml.compute_mode(g), ID, "compute mode");
    let persistence = match nvml.persistence_mode(g) {
        Ok(true) => "on".to_string(),
        Ok(false) => "off".to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    let mig = match nvml.mig_mode(g) {
        Ok((cur, pending)) => Some((cur, pending)),
        Err(NvmlErr::NotSupported(_)) => None, // pre-Ampere or consumer GPU: no MIG
        Err(e) => return vec![from_err(ID, "MIG mode", &e)],
    };
    let mig_text = match mig {
        None => "n/a".to_string(),
        Some((cur, pend)) if cur != pend => format!("{} (pending {})", onoff(cur), onoff(pend)),
        Some((cur, _)) => onoff(cur).to_string(),
    };
    let measured = format!("compute {compute}, persistence {persistence}, MIG {mig_text}");
    let r = if compute == "Prohibited" {
        CheckResult::fail(
            ID,
            "compute mode is Prohibited: no CUDA context can be created",
        )
        .hint("`nvidia-smi -i N -c DEFAULT` (as root)")
    } else if matches!(mig, Some((true, _))) {
        CheckResult::warn(ID, "MIG is enabled: CUDA sees MIG instances, not the whole GPU")
            .hint("disable MIG for whole-GPU training (`nvidia-smi -i N -mig 0`), or address instances by their MIG UUIDs")
    } else {
        CheckResult::pass(ID, "modes allow whole-GPU CUDA work")
    };
    vec![r
        .measured(measured)
        .threshold("compute not Prohibited, MIG off")]
}

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn check_ecc(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.ecc";
    let nvml = nvml_or_return!(ctx, ID);
    let ecc = tri!(nvml.ecc(gpu.unwrap_or(0)), ID, "ECC");
    let measured = format!(
        "ECC {}, {} uncorrectable (volatile), {} (aggregate)",
        onoff(ecc.enabled),
        ecc.uncorrected_volatile,
        ecc.uncorrected_aggregate
    );
    let r = if ecc.uncorrected_volatile > 0 {
        CheckResult::fail(ID, format!("{} uncorrectable ECC error(s) since the driver loaded", ecc.uncorrected_volatile))
            .hint("drain the node and reset the GPU (`nvidia-smi -r`); if errors return, the GPU needs replacing")
    } else if !ecc.enabled {
        CheckResult::warn(ID, "ECC is disabled: memory errors go undetected")
            .hint("enable ECC (`nvidia-smi -e 1`, then reboot)")
    } else if ecc.uncorrected_aggregate > 0 {
        CheckResult::warn(
            ID,
            format!(
                "{} uncorrectable ECC error(s) in the GPU's lifetime, none since the driver loaded",
                ecc.uncorrected_aggregate
            ),
        )
        .hint("watch this GPU: check remapped rows / retired pages")
    } else {
        CheckResult::pass(ID, "ECC on, no uncorrectable errors")
    };
    vec![r
        .measured(measured)
        .threshold("ECC on, 0 uncorrectable")
        .value(ecc.uncorrected_volatile as f64, "errors")]
}

fn check_retired_pages(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.retired_pages";
    let nvml = nvml_or_return!(ctx, ID);
    let p = tri!(nvml.retired_pages(gpu.unwrap_or(0)), ID, "retired pages");
    let measured = format!(
        "{} single-bit, {} double-bit retired, pending {}",
        p.single_bit,
        p.double_bit,
        if p.pending { "yes" } else { "no" }
    );
    let r = if p.pending {
        CheckResult::fail(
            ID,
            "pages are pending retirement: the GPU must be reset before it is reliable",
        )
        .hint("drain the node and reset the GPU (`nvidia-smi -r`) or reboot")
    } else {
        CheckResult::pass(ID, "no page retirement pending")
    };
    vec![r.measured(measured).threshold("none pending")]
}

fn check_remapped_rows(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.remapped_rows";
    let nvml = nvml_or_return!(ctx, ID);
    let rows = tri!(nvml.remapped_rows(gpu.unwrap_or(0)), ID, "remapped rows");
    let measured = format!(
        "{} correctable, {} uncorrectable remapped; pending {}, failed {}",
        rows.corrected,
        rows.uncorrected,
        if rows.pending { "yes" } else { "no" },
        if rows.failed { "yes" } else { "no" }
    );
    let r = if rows.failed {
        CheckResult::fail(ID, "a row remap failed: the GPU has no spare rows left")
            .hint("the GPU needs an RMA (NVIDIA's row-remapping guide)")
    } else if rows.pending {
        CheckResult::fail(ID, "a row remap is pending: reset the GPU before using it")
            .hint("drain the node and reset the GPU (`nvidia-smi -r`) or reboot")
    } else {
        CheckResult::pass(ID, "no remap pending or failed")
    };
    vec![r.measured(measured).threshold("none pending, none failed")]
}

fn check_temperature(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.temperature";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let t = tri!(nvml.temperature(g), ID, "temperature");
    let slow = match nvml.temperature_slowdown(g) {
        Ok(s) => s,
        // Some boards do not report the threshold: the temperature itself is
        // still worth showing, with no verdict on it.
        Err(NvmlErr::NotSupported(why)) => {
            return vec![CheckResult::skip(
                ID,
                format!("{t} °C; the slowdown threshold is not reported here ({why})"),
            )
            .measured(format!("{t} °C"))
            .value(t as f64, "°C")]
        }
        Err(e) => return vec![from_err(ID, "slowdown threshold", &e)],
    };
    // 10 °C of headroom: an idle GPU this close to slowdown will throttle under load.
    const MARGIN_C: u32 = 10;
    let r = if t >= slow {
        CheckResult::fail(ID, "at or above the hardware slowdown temperature")
            .hint("check cooling (fans, airflow, inlet temperature)")
    } else if t + MARGIN_C >= slow {
        CheckResult::warn(
            ID,
            format!("within {MARGIN_C} °C of the slowdown temperature"),
        )
        .hint("check cooling before a long run")
    } else {
        CheckResult::pass(ID, "well below slowdown")
    };
    vec![r
        .measured(format!("{t} °C"))
        .threshold(format!(
            "< {} °C (slowdown {slow} °C − {MARGIN_C})",
            slow.saturating_sub(MARGIN_C)
        ))
        .value(t as f64, "°C")]
}

fn check_power(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.power";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let draw = tri!(nvml.power_usage_mw(g), ID, "power draw");
    let limit = tri!(nvml.power_limit_mw(g), ID, "power limit");
    let default = nvml.power_limit_default_mw(g).ok();
    let w = |mw: u32| format!("{:.0} W", mw as f64 / 1000.0);
    let r = if draw >= limit {
        CheckResult::warn(ID, "drawing at the enforced power limit")
            .hint("clocks will be capped; check nvml.throttle")
    } else if let Some(d) = default.filter(|d| limit < *d) {
        CheckResult::warn(
            ID,
            format!("power limit lowered below the default {}", w(d)),
        )
        .hint("restore it with `nvidia-smi -i N -pl <default>` unless capped on purpose")
    } else {
        CheckResult::pass(ID, "below the enforced limit")
    };
    vec![r
        .measured(w(draw))
        .threshold(format!("< {} limit", w(limit)))
        .value(draw as f64 / 1000.0, "W")]
}

fn check_throttle(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.throttle";
    let nvml = nvml_or_return!(ctx, ID);
    let mask = tri!(
        nvml.throttle_reasons(gpu.unwrap_or(0)),
        ID,
        "clock-event reasons"
    );
    let names = throttle_names(mask);
    let measured = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    let bad = throttle_names(mask & !BENIGN_THROTTLE);
    let r = if bad.is_empty() {
        CheckResult::pass(ID, "no throttling beyond idle / software power cap")
    } else {
        CheckResult::warn(ID, format!("clocks held back: {}", bad.join(", "))).hint(
            "thermal or power-brake slowdown points at cooling or the power supply; applications clocks at `nvidia-smi -rac`",
        )
    };
    vec![r
        .measured(measured)
        .threshold("only gpu_idle / sw_power_cap")]
}

fn check_pcie(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.pcie";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let link = tri!(nvml.pcie_link(g), ID, "PCIe link");
    // An idle GPU lowers its link generation to save power (ASPM); a reduced
    // width is never a power-saving state.
    let idle = matches!(nvml.throttle_reasons(g), Ok(m) if m & 0x1 != 0);
    let measured = format!("Gen{} x{}", link.gen, link.width);
    let threshold = format!("Gen{} x{}", link.max_gen, link.max_width);
    let r = if link.width < link.max_width {
        CheckResult::warn(
            ID,
            format!("link trained at x{} of x{}", link.width, link.max_width),
        )
        .hint("reseat the GPU or riser; check the slot and BIOS PCIe settings")
    } else if link.gen < link.max_gen && !idle {
        CheckResult::warn(
            ID,
            format!("link at Gen{} of Gen{} while busy", link.gen, link.max_gen),
        )
        .hint("check BIOS PCIe speed settings and the riser")
    } else if link.gen < link.max_gen {
        CheckResult::pass(
            ID,
            format!("full width; Gen{} while idle (power saving)", link.gen),
        )
    } else {
        CheckResult::pass(ID, "link at full generation and width")
    };
    vec![r.measured(measured).threshold(threshold)]
}

fn check_nvlink(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.nvlink";
    let nvml = nvml_or_return!(ctx, ID);
    let states = tri!(nvml.nvlink_states(gpu.unwrap_or(0)), ID, "NVLink state");
    if states.is_empty() {
        return vec![CheckResult::skip(ID, "this GPU reports no NVLink links")];
    }
    let active = states.iter().filter(|a| **a).count();
    let down: Vec<String> = states
        .iter()
        .enumerate()
        .filter(|(_, a)| !**a)
        .map(|(i, _)| i.to_string())
        .collect();
    // With no peer GPU visible, inactive links have nothing to connect to;
    // with peers, every link down is an SXM fabric fault (or a PCIe card
    // without NVLink bridges): say so rather than skip it.
    let peers = nvml.device_count().map_or(0, |n| n.saturating_sub(1));
    let r = if active == 0 && peers == 0 {
        CheckResult::skip(
            ID,
            format!(
                "{} NVLink link(s), none active, and no peer GPU visible to link to",
                states.len()
            ),
        )
    } else if active == 0 {
        CheckResult::warn(
            ID,
            format!(
                "all {} NVLink links are down although {peers} peer GPU(s) are visible",
                states.len()
            ),
        )
        .hint("on SXM/HGX boards this is a fabric fault (check `nvidia-smi nvlink -s`, the fabric manager and dmesg); on PCIe cards without NVLink bridges it is expected")
    } else if !down.is_empty() {
        CheckResult::warn(ID, format!("link(s) {} down while {active} are up", down.join(",")))
            .hint("a down NVLink halves or worse P2P bandwidth; check `nvidia-smi nvlink -s` and the fabric manager")
    } else {
        CheckResult::pass(ID, "all links up")
    };
    vec![r
        .measured(format!("{active}/{} links active", states.len()))
        .threshold(format!("{}/{} active", states.len(), states.len()))]
}

fn check_topology(ctx: &Context, _gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.topology";
    let nvml = nvml_or_return!(ctx, ID);
    let n = tri!(nvml.device_count(), ID, "device count");
    if n < 2 {
        return vec![CheckResult::skip(
            ID,
            format!("{n} GPU(s): no pairs to check"),
        )];
    }
    let mut cells = Vec::new();
    let mut no_p2p = Vec::new();
    let mut ok_pairs = 0;
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            let topo = nvml.topology(a, b).unwrap_or_else(|e| format!("? ({e})"));
            match tri!(nvml.p2p_read(a, b), ID, "P2P status") {
                Ok(()) => {
                    ok_pairs += 1;
                    cells.push(format!("{a}->{b}:{topo}/p2p"));
                }
                Err(why) => {
                    no_p2p.push(format!("{a}->{b} ({why})"));
                    cells.push(format!("{a}->{b}:{topo}/no-p2p"));
                }
            }
        }
    }
    let r = if no_p2p.is_empty() {
        CheckResult::pass(
            ID,
            format!("P2P available between all {} ordered pairs", ok_pairs),
        )
    } else if ok_pairs > 0 {
        CheckResult::warn(ID, format!("P2P unavailable for some pairs: {}", no_p2p.join(", ")))
            .hint("mixed P2P usually means a GPU behind another PCIe root or a disabled NVLink; NCCL will route those pairs through host memory")
    } else {
        CheckResult::warn(ID, "no GPU pair supports P2P: NCCL will go through host memory")
            .hint("expected on PCIe cards behind different root complexes or VMs without P2P; slow for data-parallel training")
    };
    vec![r
        .measured(cells.join(" "))
        .threshold("P2P between all pairs")]
}

fn check_processes(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.processes";
    let nvml = nvml_or_return!(ctx, ID);
    let me = std::process::id();
    let procs = tri!(nvml.processes(gpu.unwrap_or(0)), ID, "processes");
    let others: Vec<&GpuProcess> = procs.iter().filter(|p| p.pid != me).collect();
    if others.is_empty() && ctx.in_container {
        // The driver lists only the processes of the caller's PID namespace:
        // other containers' jobs on this GPU are invisible from here.
        return vec![CheckResult::skip(
            ID,
            "no other process visible, but inside a container NVML lists only this container's processes",
        )
        .measured("0 processes visible")
        .hint("run `imgctl verify` on the host (or `imgctl verify --image` from it) to see every process")];
    }
    if others.is_empty() {
        return vec![CheckResult::pass(ID, "no other process holds this GPU")
            .measured("0 processes")
            .threshold("0 other processes")
            .value(0.0, "processes")];
    }
    let list: Vec<String> = others
        .iter()
        .map(|p| match p.used_bytes {
            Some(b) => format!("pid {} ({})", p.pid, gib(b)),
            None => format!("pid {}", p.pid),
        })
        .collect();
    vec![CheckResult::warn(ID, format!("held by {}", list.join(", ")))
        .measured(format!("{} processes", others.len()))
        .threshold("0 other processes")
        .value(others.len() as f64, "processes")
        .hint("another job shares this GPU: timings and memory will be off; `nvidia-smi` shows who")]
}

/// A boxed fake, for tests and the test seam.
pub fn fake(f: FakeNvml) -> Arc<dyn NvmlBackend> {
    Arc::new(f)
}
