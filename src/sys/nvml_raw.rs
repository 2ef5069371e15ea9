//! The NVML calls nvml-wrapper 0.11 lacks, through our own `dlopen` of
//! [`NVML_SONAME`]: today `nvmlDeviceGetRemappedRows` (nvml.h, since CUDA
//! 11.0), with the device handle looked up here by index.
//!
//! This module owns the soname, the C signatures and the `unsafe` calls; it
//! returns NVML's raw `nvmlReturn_t` codes and leaves their meaning, and every
//! message, to `crate::nvml`. It must not initialise NVML (nvml-wrapper's
//! `Nvml::init` does, in the same process) nor import nvml-wrapper.
use std::ffi::c_void;

/// The library NVML is loaded from (the driver installs it; the container
/// toolkit mounts it into containers).
pub const NVML_SONAME: &str = "libnvidia-ml.so.1";

/// `nvmlReturn_t` NVML_ERROR_NOT_SUPPORTED (nvml.h).
pub const NVML_ERROR_NOT_SUPPORTED: u32 = 3;
/// `nvmlReturn_t` NVML_ERROR_GPU_IS_LOST (nvml.h).
pub const NVML_ERROR_GPU_IS_LOST: u32 = 15;

/// `nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t*)` (nvml.h).
type GetHandleByIndex = unsafe extern "C" fn(u32, *mut *mut c_void) -> u32;
/// `nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t, unsigned*, unsigned*,
/// unsigned*, unsigned*)` (nvml.h, since CUDA 11.0).
type GetRemappedRows =
    unsafe extern "C" fn(*mut c_void, *mut u32, *mut u32, *mut u32, *mut u32) -> u32;

/// Why a raw NVML call gave no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawNvmlError {
    /// This driver's NVML does not export the named entry point.
    MissingSymbol(&'static str),
    /// The named call returned this `nvmlReturn_t` (not `NVML_SUCCESS`).
    Code(&'static str, u32),
}

/// Row-remapping counters as `nvmlDeviceGetRemappedRows` fills them in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawRemappedRows {
    /// Rows remapped for correctable errors.
    pub corrected: u32,
    /// Rows remapped for uncorrectable errors.
    pub uncorrected: u32,
    /// A remap is pending.
    pub pending: bool,
    /// A remap failed.
    pub failed: bool,
}

/// Our own handle on [`NVML_SONAME`]. Opened after nvml-wrapper has loaded
/// and initialised the library, `dlopen` returns the already-loaded copy.
pub struct RawNvml {
    lib: libloading::Library,
}

impl std::fmt::Debug for RawNvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RawNvml")
    }
}

impl RawNvml {
    /// Opens [`NVML_SONAME`]; `None` when it cannot be opened.
    pub fn open() -> Option<Self> {
        // SAFETY: loading the driver's NVML library, the one nvml-wrapper
        // loads (callers open it after `Nvml::init`, so its initialisers have
        // already run); it has no initialiser with preconditions on us.
        let lib = unsafe { libloading::Library::new(NVML_SONAME) }.ok()?;
        Some(Self { lib })
    }

    /// `nvmlDeviceGetRemappedRows` for the GPU at NVML index `index`.
    pub fn remapped_rows(&self, index: u32) -> Result<RawRemappedRows, RawNvmlError> {
        const HANDLE: &str = "nvmlDeviceGetHandleByIndex_v2";
        const ROWS: &str = "nvmlDeviceGetRemappedRows";
        // SAFETY: the symbols' C signatures are the types above (nvml.h).
        let (handle_fn, rows_fn) = unsafe {
            (
                self.lib
                    .get::<GetHandleByIndex>(b"nvmlDeviceGetHandleByIndex_v2\0")
                    .map_err(|_| RawNvmlError::MissingSymbol(HANDLE))?,
                self.lib
                    .get::<GetRemappedRows>(b"nvmlDeviceGetRemappedRows\0")
                    .map_err(|_| RawNvmlError::MissingSymbol(ROWS))?,
            )
        };
        let mut device: *mut c_void = std::ptr::null_mut();
        // SAFETY: an index and one out-pointer; NVML checks the index and
        // answers NVML_ERROR_UNINITIALIZED if nvmlInit has not run.
        let rc = unsafe { handle_fn(index, &mut device) };
        if rc != 0 {
            return Err(RawNvmlError::Code(HANDLE, rc));
        }
        let (mut corr, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
        // SAFETY: a device handle NVML just gave us and four out-pointers.
        let rc = unsafe { rows_fn(device, &mut corr, &mut unc, &mut pending, &mut failed) };
        if rc != 0 {
            return Err(RawNvmlError::Code(ROWS, rc));
        }
        Ok(RawRemappedRows {
            corrected: corr,
            uncorrected: unc,
            pending: pending != 0,
            failed: failed != 0,
        })
    }
}
