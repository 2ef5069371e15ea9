//! The few CUDA runtime calls tch does not expose: set the current device
//! (NCCL binds a communicator to it) and read device memory use.
//!
//! Resolved at run time from the `libcudart.so.12` libtorch already mapped
//! into this process (found in `/proc/self/maps`), so the same runtime state
//! is shared with torch; nothing is linked at build time. This module must not
//! allocate device memory.
use std::ffi::c_int;
use std::path::PathBuf;

use crate::nccl::mapped_library;
use crate::CliError;

/// The CUDA 12 runtime's soname (the `nvidia-cuda-runtime-cu12` wheel).
pub const CUDART_SONAME: &str = "libcudart.so.12";

type SetDeviceFn = unsafe extern "C" fn(c_int) -> c_int;
type MemGetInfoFn = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
type GetDevicePropertiesFn = unsafe extern "C" fn(*mut u8, c_int) -> c_int;

/// Bytes reserved for `cudaDeviceProp` (1032 bytes in CUDA 12.x's
/// driver_types.h; generous so a newer, larger struct still fits).
const DEVICE_PROP_BYTES: usize = 8192;

/// The loaded CUDA runtime.
pub struct CudaRuntime {
    path: PathBuf,
    set_device: SetDeviceFn,
    mem_get_info: MemGetInfoFn,
    get_device_properties: Option<GetDevicePropertiesFn>,
    _lib: libloading::Library,
}

impl std::fmt::Debug for CudaRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaRuntime")
            .field("path", &self.path)
            .finish()
    }
}

impl CudaRuntime {
    /// Opens the CUDA runtime libtorch uses (mapped in this process), else the
    /// loader's `libcudart.so.12`.
    pub fn locate() -> anyhow::Result<Self> {
        let path = mapped_library(CUDART_SONAME).unwrap_or_else(|| PathBuf::from(CUDART_SONAME));
        // SAFETY: loading the CUDA runtime has no preconditions.
        let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| {
            anyhow::Error::from(
                CliError::failure(format!(
                    "cannot load the CUDA runtime {} ({e})",
                    path.display()
                ))
                .with_hint("libtorch's CUDA wheels ship libcudart.so.12"),
            )
        })?;
        // SAFETY: signatures from cuda_runtime_api.h (CUDA 12).
        unsafe {
            let set_device = *lib.get::<SetDeviceFn>(b"cudaSetDevice")?;
            let mem_get_info = *lib.get::<MemGetInfoFn>(b"cudaMemGetInfo")?;
            // CUDA 12 renamed the entry point (the header maps the old name to _v2).
            let get_device_properties = lib
                .get::<GetDevicePropertiesFn>(b"cudaGetDeviceProperties_v2")
                .or_else(|_| lib.get::<GetDevicePropertiesFn>(b"cudaGetDeviceProperties"))
                .ok()
                .map(|s| *s);
            Ok(Self {
                path,
                set_device,
                mem_get_info,
                get_device_properties,
                _lib: lib,
            })
        }
    }

    /// Makes `index` the calling thread's current device.
    pub fn set_device(&self, index: usize) -> anyhow::Result<()> {
        // SAFETY: plain call with an int.
        let r = unsafe { (self.set_device)(index as c_int) };
        if r != 0 {
            return Err(CliError::failure(format!(
                "cudaSetDevice({index}) failed with CUDA error {r}"
            ))
            .into());
        }
        Ok(())
    }

    /// `(free, total)` bytes of the current device (cudaMemGetInfo). "Used"
    /// (total − free) counts every process on the device, the CUDA context
    /// and torch's caching-allocator reserve, not only live tensors.
    pub fn mem_get_info(&self) -> anyhow::Result<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two size_t.
        let r = unsafe { (self.mem_get_info)(&mut free, &mut total) };
        if r != 0 {
            return Err(
                CliError::failure(format!("cudaMemGetInfo failed with CUDA error {r}")).into(),
            );
        }
        Ok((free as u64, total as u64))
    }

    /// The device's marketing name (`cudaDeviceProp::name`, the struct's
    /// first field: `char name[256]`), e.g. "NVIDIA H200".
    pub fn device_name(&self, index: usize) -> anyhow::Result<String> {
        let f = self
            .get_device_properties
            .ok_or_else(|| anyhow::anyhow!("cudaGetDeviceProperties is not exported"))?;
        let mut buf = vec![0u8; DEVICE_PROP_BYTES];
        // SAFETY: the buffer is larger than cudaDeviceProp.
        let r = unsafe { f(buf.as_mut_ptr(), index as c_int) };
        if r != 0 {
            anyhow::bail!("cudaGetDeviceProperties({index}) failed with CUDA error {r}");
        }
        let name = &buf[..256];
        let end = name.iter().position(|&b| b == 0).unwrap_or(256);
        Ok(String::from_utf8_lossy(&name[..end]).trim().to_string())
    }
}
