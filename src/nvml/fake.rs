//! The test double of the NVML seam ([`FakeNvml`]): scriptable GPUs, a
//! driver, and optionally a call that never returns, so every verdict path
//! of the checks (and the runner's deadlines) can be driven from a unit test.
//!
//! Compiled for tests only; it must not touch the real NVML.
use std::collections::BTreeMap;
use std::sync::Arc;

use super::backend::{
    EccInfo, GpuProcess, NvmlBackend, NvmlErr, NvmlResult, PcieLink, RemappedRows, RetiredPages,
};

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
    /// Utilisation, percent.
    pub utilization: NvmlResult<u32>,
    /// Memory in use, bytes.
    pub memory_used: NvmlResult<u64>,
    /// SM clock, MHz.
    pub sm_clock_mhz: NvmlResult<u32>,
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
            utilization: Ok(0),
            memory_used: Ok(595_591_168),
            sm_clock_mhz: Ok(345),
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
    fn utilization_pct(&self, gpu: u32) -> NvmlResult<u32> {
        self.gpu(gpu, "utilization_pct")?.utilization.clone()
    }
    fn memory_used(&self, gpu: u32) -> NvmlResult<u64> {
        self.gpu(gpu, "memory_used")?.memory_used.clone()
    }
    fn sm_clock_mhz(&self, gpu: u32) -> NvmlResult<u32> {
        self.gpu(gpu, "sm_clock_mhz")?.sm_clock_mhz.clone()
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

/// A boxed fake, for tests and the test seam.
pub fn fake(f: FakeNvml) -> Arc<dyn NvmlBackend> {
    Arc::new(f)
}
