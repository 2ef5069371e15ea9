//! The real NVML backend ([`RealNvml`]): [`NvmlBackend`] over nvml-wrapper,
//! plus `crate::sys::nvml_raw` for the one call nvml-wrapper 0.11 lacks
//! (`nvmlDeviceGetRemappedRows`).
//!
//! This file and `verify::nvml` alone import nvml-wrapper. It maps NVML's
//! errors onto [`NvmlErr`] and must not judge a value nor say `unsafe`.
use crate::sys::nvml_raw::{
    RawNvml, RawNvmlError, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_NOT_SUPPORTED,
};

use super::backend::{
    EccInfo, GpuProcess, NvmlBackend, NvmlErr, NvmlResult, PcieLink, RemappedRows, RetiredPages,
    NVML_LIB,
};

/// NVML through nvml-wrapper, loading [`NVML_LIB`].
pub struct RealNvml {
    nvml: nvml_wrapper::Nvml,
    /// Our own handle on the same library for calls nvml-wrapper 0.11 lacks
    /// (nvmlDeviceGetRemappedRows). dlopen returns the already-loaded copy.
    raw: Option<RawNvml>,
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
                let raw = RawNvml::open();
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
        // nvml-wrapper's lookup first: its errors map as every other call's.
        self.dev(gpu)?;
        let raw = self
            .raw
            .as_ref()
            .ok_or_else(|| NvmlErr::Other(format!("could not open {NVML_LIB} a second time")))?;
        match raw.remapped_rows(gpu) {
            Ok(rows) => Ok(RemappedRows {
                corrected: rows.corrected,
                uncorrected: rows.uncorrected,
                pending: rows.pending,
                failed: rows.failed,
            }),
            Err(RawNvmlError::MissingSymbol(name)) => Err(NvmlErr::NotSupported(format!(
                "this driver's NVML lacks {name}"
            ))),
            Err(RawNvmlError::Code(_, NVML_ERROR_NOT_SUPPORTED)) => Err(NvmlErr::NotSupported(
                "NVML_ERROR_NOT_SUPPORTED (row remapping exists on Ampere and later)".into(),
            )),
            Err(RawNvmlError::Code(_, NVML_ERROR_GPU_IS_LOST)) => Err(NvmlErr::GpuLost),
            Err(RawNvmlError::Code(call, other)) => {
                Err(NvmlErr::Other(format!("{call} returned {other}")))
            }
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
    fn utilization_pct(&self, gpu: u32) -> NvmlResult<u32> {
        self.dev(gpu)?
            .utilization_rates()
            .map(|u| u.gpu)
            .map_err(map_err)
    }
    fn memory_used(&self, gpu: u32) -> NvmlResult<u64> {
        self.dev(gpu)?
            .memory_info()
            .map(|m| m.used)
            .map_err(map_err)
    }
    fn sm_clock_mhz(&self, gpu: u32) -> NvmlResult<u32> {
        use nvml_wrapper::enum_wrappers::device::Clock;
        self.dev(gpu)?.clock_info(Clock::SM).map_err(map_err)
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
