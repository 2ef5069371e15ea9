//! The version and device-count queries verify's provenance report makes of
//! the CUDA libraries this process has mapped: cudaRuntimeGetVersion,
//! cublasGetProperty, cudnnGetVersion and cudaGetDeviceCount, each called on
//! the copy at an exact path (dlopen of a loaded path returns the loaded
//! copy; nothing new is loaded). NCCL's version comes from [`super::nccl`].
//!
//! Owns these symbols and their signatures; returns raw numbers (decoding
//! and verdicts belong to `verify::provenance` and its checks). Must not
//! load a library that is not already mapped, except where a test asks.
use std::ffi::c_int;
use std::path::Path;

use super::cudart::{describe_error, GetErrorStringFn};

/// `libraryPropertyType` values (library_types.h: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL).
const LIBRARY_PROPERTIES: [i32; 3] = [0, 1, 2];

/// Opens the library at `path` (already mapped: its loaded copy).
fn open(path: &Path) -> Result<libloading::Library, String> {
    // SAFETY: dlopen of a CUDA library that is already mapped in this process
    // (or, in tests, a wheel's copy); its initialisers are side-effect free.
    unsafe { libloading::Library::new(path) }.map_err(|e| format!("dlopen {}: {e}", path.display()))
}

/// Whether the library at `path` opens (a dlopen error as `dlopen PATH: why`),
/// for the libraries asked through another module (NCCL).
pub fn check_opens(path: &Path) -> Result<(), String> {
    open(path).map(drop)
}

/// `CUDART_VERSION` of the CUDA runtime at `path` (cudaRuntimeGetVersion:
/// `1000 * major + 10 * minor`).
pub fn cudart_version(path: &Path) -> Result<i32, String> {
    let lib = open(path)?;
    type F = unsafe extern "C" fn(*mut i32) -> i32;
    // SAFETY: cudaError_t cudaRuntimeGetVersion(int*) (cuda_runtime_api.h).
    let f = unsafe { lib.get::<F>(b"cudaRuntimeGetVersion\0") }.map_err(|e| e.to_string())?;
    let mut v = 0i32;
    // SAFETY: one out-pointer.
    let rc = unsafe { f(&mut v) };
    if rc != 0 {
        return Err(format!("cudaRuntimeGetVersion returned error {rc}"));
    }
    Ok(v)
}

/// `[major, minor, patch]` of the cuBLAS at `path` (cublasGetProperty, which
/// needs no handle).
pub fn cublas_version(path: &Path) -> Result<[i32; 3], String> {
    let lib = open(path)?;
    type F = unsafe extern "C" fn(i32, *mut i32) -> i32;
    // SAFETY: cublasStatus_t cublasGetProperty(libraryPropertyType, int*) (cublas_api.h).
    let f = unsafe { lib.get::<F>(b"cublasGetProperty\0") }.map_err(|e| e.to_string())?;
    let mut parts = [0i32; 3];
    for (prop, v) in LIBRARY_PROPERTIES.into_iter().zip(&mut parts) {
        // SAFETY: a valid property and an out-pointer.
        let rc = unsafe { f(prop, v) };
        if rc != 0 {
            return Err(format!("cublasGetProperty({prop}) returned status {rc}"));
        }
    }
    Ok(parts)
}

/// cudnnGetVersion of the cuDNN at `path`, as it encodes it.
pub fn cudnn_version(path: &Path) -> Result<usize, String> {
    let lib = open(path)?;
    type F = unsafe extern "C" fn() -> usize;
    // SAFETY: size_t cudnnGetVersion(void) (cudnn_graph.h / cudnn.h).
    let f = unsafe { lib.get::<F>(b"cudnnGetVersion\0") }.map_err(|e| e.to_string())?;
    // SAFETY: no arguments.
    Ok(unsafe { f() })
}

/// Why the CUDA runtime at `path` (already mapped) cannot use a GPU:
/// `cudaGetDeviceCount`'s error with the runtime's own text, e.g. `CUDA error
/// 35 (CUDA driver version is insufficient for CUDA runtime version)`; `None`
/// when it counts devices fine, or cannot be asked.
pub fn device_count_error(path: &Path) -> Option<String> {
    // SAFETY: dlopen of the runtime already mapped in this process.
    let lib = unsafe { libloading::Library::new(path) }.ok()?;
    type CountFn = unsafe extern "C" fn(*mut i32) -> i32;
    // SAFETY: cudaError_t cudaGetDeviceCount(int*) and const char*
    // cudaGetErrorString(cudaError_t) (cuda_runtime_api.h).
    let (count, text) = unsafe {
        (
            *lib.get::<CountFn>(b"cudaGetDeviceCount\0").ok()?,
            lib.get::<GetErrorStringFn>(b"cudaGetErrorString\0")
                .ok()
                .map(|f| *f),
        )
    };
    let mut n = 0i32;
    // SAFETY: one out-pointer.
    let rc = unsafe { count(&mut n) };
    if rc == 0 {
        return None;
    }
    Some(describe_error(text, rc as c_int))
}
