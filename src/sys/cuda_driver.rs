//! The few CUDA driver calls that load and launch a kernel imgctl compiled
//! itself (with [`super::nvrtc`]): `libcuda.so.1`, loaded with dlopen from
//! the system (it comes with the driver, never with a wheel).
//!
//! A [`Module`] is loaded into the device's primary context, the one the
//! CUDA runtime (and so torch) uses, so kernels see torch's memory. Each
//! launch makes that context current on the calling thread first (the
//! autograd engine's device threads run backward). Which kernel, grid and
//! stream belongs to the caller: the stream is torch's current one, named by
//! the shim ([`super::torch_fn::current_cuda_stream`]).
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// The driver's soname.
pub const CUDA_DRIVER_SONAME: &str = "libcuda.so.1";

type InitFn = unsafe extern "C" fn(c_uint) -> c_int;
type DeviceGetFn = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type RetainFn = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type CtxGetFn = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type CtxSetFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type ModuleLoadDataFn = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> c_int;
type ModuleGetFunctionFn =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> c_int;
type LaunchFn = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;
type AttributeFn = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`, `..._COMPUTE_CAPABILITY_MAJOR`
/// and `..._MINOR` (cuda.h, unchanged since CUDA 5).
const ATTR_SM_COUNT: c_int = 16;
const ATTR_CC_MAJOR: c_int = 75;
const ATTR_CC_MINOR: c_int = 76;

/// The loaded driver.
pub struct CudaDriver {
    device_get: DeviceGetFn,
    retain: RetainFn,
    ctx_get: CtxGetFn,
    ctx_set: CtxSetFn,
    load: ModuleLoadDataFn,
    get_function: ModuleGetFunctionFn,
    launch: LaunchFn,
    error_string: ErrorStringFn,
    attribute: AttributeFn,
    /// Each device's primary context (retained once, never released: the
    /// runtime holds it for the process too), as an address.
    primary: std::sync::Mutex<std::collections::HashMap<i32, usize>>,
    _lib: libloading::Library,
}

impl std::fmt::Debug for CudaDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CudaDriver")
    }
}

/// One argument of a kernel, as its C signature declares it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg {
    /// A device pointer (`T*`), from a tensor's `data_ptr`.
    Ptr(u64),
    /// `int`.
    I32(i32),
    /// `long long`.
    I64(i64),
    /// `float`.
    F32(f32),
}

/// A loaded module (never unloaded: kernels live as long as the process).
#[derive(Debug)]
pub struct Module {
    handle: usize,
    device: i32,
}

/// A kernel of a [`Module`].
#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    handle: usize,
    device: i32,
}

impl CudaDriver {
    /// Loads `libcuda.so.1` and initialises the driver (`cuInit(0)`).
    pub fn load() -> Result<Self, String> {
        // SAFETY: dlopen of the CUDA driver, which torch loads too.
        let lib = unsafe { libloading::Library::new(CUDA_DRIVER_SONAME) }
            .map_err(|e| format!("cannot load {CUDA_DRIVER_SONAME}: {e}"))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the types above are cuda.h's signatures (CUresult
                // and CUdevice are ints, handles are pointers).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("the CUDA driver has no {} ({e})", $name))?
            };
        }
        let init: InitFn = sym!("cuInit");
        let me = Self {
            device_get: sym!("cuDeviceGet"),
            retain: sym!("cuDevicePrimaryCtxRetain"),
            ctx_get: sym!("cuCtxGetCurrent"),
            ctx_set: sym!("cuCtxSetCurrent"),
            load: sym!("cuModuleLoadData"),
            get_function: sym!("cuModuleGetFunction"),
            launch: sym!("cuLaunchKernel"),
            error_string: sym!("cuGetErrorString"),
            attribute: sym!("cuDeviceGetAttribute"),
            primary: Default::default(),
            _lib: lib,
        };
        // SAFETY: cuInit takes flags 0; idempotent.
        me.check(unsafe { init(0) }, "cuInit")?;
        Ok(me)
    }

    fn check(&self, rc: c_int, call: &str) -> Result<(), String> {
        if rc == 0 {
            return Ok(());
        }
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: one out-pointer to a static string.
        let text = if unsafe { (self.error_string)(rc, &mut p) } == 0 && !p.is_null() {
            // SAFETY: a NUL-terminated static string from the driver.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        } else {
            "unknown error".into()
        };
        Err(format!("{call} failed: CUDA driver error {rc} ({text})"))
    }

    /// Makes `device`'s primary context current on this thread (retained
    /// the first time; the runtime holds it too, so it is never released).
    fn bind(&self, device: i32) -> Result<(), String> {
        let primary = {
            let mut map = self.primary.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(&device) {
                Some(&p) => p as *mut c_void,
                None => {
                    let mut dev: c_int = 0;
                    // SAFETY: an out-pointer; the driver checks the ordinal.
                    self.check(
                        unsafe { (self.device_get)(&mut dev, device) },
                        "cuDeviceGet",
                    )?;
                    let mut p: *mut c_void = std::ptr::null_mut();
                    // SAFETY: as above; retaining an active primary context
                    // returns it.
                    self.check(
                        unsafe { (self.retain)(&mut p, dev) },
                        "cuDevicePrimaryCtxRetain",
                    )?;
                    map.insert(device, p as usize);
                    p
                }
            }
        };
        let mut cur: *mut c_void = std::ptr::null_mut();
        // SAFETY: one out-pointer.
        self.check(unsafe { (self.ctx_get)(&mut cur) }, "cuCtxGetCurrent")?;
        if cur != primary {
            // SAFETY: a live primary context.
            self.check(unsafe { (self.ctx_set)(primary) }, "cuCtxSetCurrent")?;
        }
        Ok(())
    }

    /// `(major, minor)` compute capability and SM count of `device`.
    pub fn device_info(&self, device: i32) -> Result<((i32, i32), i32), String> {
        let mut dev: c_int = 0;
        // SAFETY: out-pointers.
        self.check(
            unsafe { (self.device_get)(&mut dev, device) },
            "cuDeviceGet",
        )?;
        let get = |attr| {
            let mut v: c_int = 0;
            // SAFETY: an out-pointer, a valid attribute and device.
            self.check(
                unsafe { (self.attribute)(&mut v, attr, dev) },
                "cuDeviceGetAttribute",
            )
            .map(|_| v)
        };
        Ok((
            (get(ATTR_CC_MAJOR)?, get(ATTR_CC_MINOR)?),
            get(ATTR_SM_COUNT)?,
        ))
    }

    /// Loads a cubin or NUL-terminated PTX `image` into `device`'s primary context.
    pub fn load_module(&self, device: i32, image: &[u8]) -> Result<Module, String> {
        if image.is_empty() {
            return Err("an empty module image".into());
        }
        self.bind(device)?;
        let mut m: *mut c_void = std::ptr::null_mut();
        // SAFETY: `image` is a complete cubin or NUL-terminated PTX (from
        // NVRTC), read by the driver during the call only.
        self.check(
            unsafe { (self.load)(&mut m, image.as_ptr().cast()) },
            "cuModuleLoadData",
        )?;
        Ok(Module {
            handle: m as usize,
            device,
        })
    }

    /// The kernel `name` (an `extern "C"` name) of `module`.
    pub fn function(&self, module: &Module, name: &str) -> Result<Kernel, String> {
        let cname = std::ffi::CString::new(name).map_err(|_| "a kernel name with NUL")?;
        let mut f: *mut c_void = std::ptr::null_mut();
        // SAFETY: a live module and a NUL-terminated name.
        self.check(
            unsafe { (self.get_function)(&mut f, module.handle as *mut c_void, cname.as_ptr()) },
            &format!("cuModuleGetFunction({name})"),
        )?;
        Ok(Kernel {
            handle: f as usize,
            device: module.device,
        })
    }

    /// Enqueues `kernel` on `stream` (a `cudaStream_t`/`CUstream` as an
    /// address; 0 is the legacy default stream) with `args`, which must
    /// match the kernel's C signature in number, order and type.
    pub fn launch(
        &self,
        kernel: Kernel,
        grid: [u32; 3],
        block: [u32; 3],
        shared_bytes: u32,
        stream: usize,
        args: &[KernelArg],
    ) -> Result<(), String> {
        self.bind(kernel.device)?;
        let mut vals: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                KernelArg::Ptr(p) => p,
                KernelArg::I32(v) => v as u32 as u64,
                KernelArg::I64(v) => v as u64,
                KernelArg::F32(v) => v.to_bits() as u64,
            })
            .collect();
        // Each parameter pointer points at an 8-byte slot whose low bytes
        // hold the value (little-endian), as cuLaunchKernel reads
        // sizeof(param) bytes from it.
        let mut ptrs: Vec<*mut c_void> = vals
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        // SAFETY: a live kernel in the bound context; `ptrs` holds one
        // pointer per parameter, to a live 8-byte slot (the caller vouches
        // for the signature); `stream` is a stream of that context.
        let rc = unsafe {
            (self.launch)(
                kernel.handle as *mut c_void,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_bytes,
                stream as *mut c_void,
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check(rc, "cuLaunchKernel")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_the_error_names_the_library() {
        match CudaDriver::load() {
            Ok(d) => {
                // A host with a driver: an absurd device is an error line.
                let e = d.device_info(1 << 20).unwrap_err();
                assert!(e.contains("cuDeviceGet failed"), "{e}");
            }
            Err(e) => {
                assert!(e.contains(CUDA_DRIVER_SONAME), "{e}");
                assert!(!e.contains('\n'));
            }
        }
    }
}
