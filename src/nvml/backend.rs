//! The NVML seam: the [`NvmlBackend`] trait the checks call, its data types
//! and error ([`NvmlErr`]), and the decoding of NVML's throttle-reason bits.
//!
//! It holds no implementation: the real one is in `real.rs` (nvml-wrapper),
//! the test double in `fake.rs`. It must not import nvml-wrapper nor judge
//! a value (verdicts are the checks' job).
use serde::{Deserialize, Serialize};

/// The library NVML is loaded from (the driver installs it; the container
/// toolkit mounts it into containers).
pub const NVML_LIB: &str = crate::sys::nvml_raw::NVML_SONAME;

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
    /// Percent of the last sample period (1/6 s to 1 s, by product) in which
    /// a kernel ran (nvmlDeviceGetUtilizationRates, its `gpu` field).
    fn utilization_pct(&self, gpu: u32) -> NvmlResult<u32>;
    /// Memory in use on the GPU in bytes, every process and the driver's
    /// own reserve together (nvmlDeviceGetMemoryInfo_v2, `used`).
    fn memory_used(&self, gpu: u32) -> NvmlResult<u64>;
    /// Current SM clock in MHz (nvmlDeviceGetClockInfo, NVML_CLOCK_SM).
    fn sm_clock_mhz(&self, gpu: u32) -> NvmlResult<u32>;
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
