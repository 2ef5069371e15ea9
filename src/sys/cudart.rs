//! The few CUDA runtime calls tch does not expose: set the current device
//! (NCCL binds a communicator to it), read device memory use, and a
//! communication stream ordered against the compute stream by events
//! ([`CommStream`], for the all-reduce that overlaps backward).
//!
//! Resolved at run time from the `libcudart.so.<major>` libtorch already
//! mapped into this process (found in `/proc/self/maps`), so the same runtime
//! state is shared with torch; nothing is linked at build time. Any major
//! works: torch 2.7's cu126 wheel maps `nvidia/cuda_runtime/lib/libcudart.so.12`,
//! torch 2.11's cu130 wheel `nvidia/cu13/lib/libcudart.so.13` (file lists of
//! the nvidia-cuda-runtime-cu12 12.6.77 and nvidia-cuda-runtime 13.0.96
//! wheels). This module must not allocate device memory, nor know what its
//! callers (training's collectives and watchdog, the benchmark) do with it.
use std::ffi::{c_int, c_uint, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::nccl::LEGACY_STREAM;

/// A CUDA runtime that cannot be loaded, or a call that failed. The lines
/// name the library and the call; `commands/` adds the exit status and the hint.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// No CUDA runtime loaded.
    #[error("cannot load the CUDA runtime {what} ({why})")]
    Load {
        /// The file or sonames tried.
        what: String,
        /// The dynamic loader's reasons.
        why: String,
    },
    /// The runtime lacks an entry point imgctl needs.
    #[error("the CUDA runtime {} has no {name} ({why})", .path.display())]
    MissingSymbol {
        /// The library.
        path: PathBuf,
        /// The symbol.
        name: String,
        /// The dynamic loader's reason.
        why: String,
    },
    /// `cudaSetDevice` failed.
    #[error("cudaSetDevice({index}) failed with {error}")]
    SetDevice {
        /// The device index.
        index: usize,
        /// The code and the runtime's text.
        error: String,
    },
    /// `cudaMemGetInfo` failed.
    #[error("cudaMemGetInfo failed with {error}")]
    MemGetInfo {
        /// The code and the runtime's text.
        error: String,
    },
}

/// CUDA runtime sonames the dynamic loader is asked for when libtorch mapped
/// none (a CPU-only libtorch), newest first: CUDA 13 (`nvidia-cuda-runtime`
/// 13.x wheel), CUDA 12 (`nvidia-cuda-runtime-cu12`).
pub const CUDART_SONAMES: &[&str] = &["libcudart.so.13", "libcudart.so.12"];

/// The CUDA major version of a CUDA runtime file name: `libcudart.so.13` →
/// 13, `libcudart.so.12.6.77` → 12; `None` for anything else (`libcudart.so`,
/// `libcudart_static.a`, `libcudart.so.bak`).
pub fn cudart_major(file_name: &str) -> Option<u32> {
    let rest = file_name.strip_prefix("libcudart.so.")?;
    let major = rest.split('.').next()?;
    if major.is_empty() || !major.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    major.parse().ok()
}

/// The CUDA runtime among mapped file paths (the path column of
/// `/proc/self/maps`): the `libcudart.so.<major>` with the highest major
/// (only one is mapped in a healthy process).
pub fn pick_mapped_cudart<'a>(paths: impl IntoIterator<Item = &'a str>) -> Option<PathBuf> {
    paths
        .into_iter()
        .filter_map(|p| {
            let name = Path::new(p).file_name()?.to_str()?;
            cudart_major(name).map(|m| (m, p))
        })
        .max_by_key(|(m, _)| *m)
        .map(|(_, p)| PathBuf::from(p))
}

/// The CUDA runtime mapped in this process, if any.
pub fn mapped_cudart() -> Option<PathBuf> {
    let files = super::procmaps::mapped_files().ok()?;
    pick_mapped_cudart(files.iter().filter_map(|p| p.to_str()))
}

type SetDeviceFn = unsafe extern "C" fn(c_int) -> c_int;
type MemGetInfoFn = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
type GetDevicePropertiesFn = unsafe extern "C" fn(*mut u8, c_int) -> c_int;
/// `const char* cudaGetErrorString(cudaError_t)` (also used by [`super::cuda_libs`]).
pub(super) type GetErrorStringFn = unsafe extern "C" fn(c_int) -> *const std::ffi::c_char;
/// `cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device)`
/// (the enum is an int).
type GetAttributeFn = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// `cudaDevAttrComputeCapabilityMajor` and `…Minor` (enum cudaDeviceAttr,
/// driver_types.h, the same in CUDA 11, 12 and 13).
const DEV_ATTR_CC_MAJOR: c_int = 75;
const DEV_ATTR_CC_MINOR: c_int = 76;
/// `cudaDevAttrPciBusId`, `cudaDevAttrPciDeviceId` and `cudaDevAttrPciDomainId`
/// (enum cudaDeviceAttr, driver_types.h, the same in CUDA 11, 12 and 13).
const DEV_ATTR_PCI_BUS: c_int = 33;
const DEV_ATTR_PCI_DEVICE: c_int = 34;
const DEV_ATTR_PCI_DOMAIN: c_int = 50;
/// `cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags)`.
type StreamCreateWithFlagsFn = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int;
/// `cudaError_t cudaStreamDestroy(cudaStream_t)` and `cudaEventDestroy(cudaEvent_t)`.
type DestroyFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags)`.
type EventCreateWithFlagsFn = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int;
/// `cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)`.
type EventRecordFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
/// `cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)`.
type StreamWaitEventFn = unsafe extern "C" fn(*mut c_void, *mut c_void, c_uint) -> c_int;
/// `cudaError_t cudaEventQuery(cudaEvent_t event)`.
type EventQueryFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `cudaErrorNotReady` (driver_types.h): what cudaEventQuery returns while
/// the work before the event is still running; not an error.
const ERROR_NOT_READY: c_int = 600;

/// `cudaStreamNonBlocking` (driver_types.h): the stream does not synchronise
/// with the legacy default stream, on which torch (through tch) computes.
const STREAM_NON_BLOCKING: c_uint = 0x01;
/// `cudaEventDisableTiming` (driver_types.h): the cheapest event, for ordering only.
const EVENT_DISABLE_TIMING: c_uint = 0x02;

/// The stream and event entry points, all present in CUDA 12 and 13.
#[derive(Clone, Copy)]
struct StreamApi {
    stream_create: StreamCreateWithFlagsFn,
    stream_destroy: DestroyFn,
    event_create: EventCreateWithFlagsFn,
    event_destroy: DestroyFn,
    event_record: EventRecordFn,
    stream_wait_event: StreamWaitEventFn,
    event_query: EventQueryFn,
}

/// Bytes reserved for `cudaDeviceProp`: sizeof is 1032 with CUDA 12.6's
/// driver_types.h and 1008 with CUDA 13.0's, which dropped fields such as
/// `clockRate` (both measured with gcc on the wheels' headers); generous so
/// a newer, larger struct still fits.
const DEVICE_PROP_BYTES: usize = 8192;

/// `CUDA error 100 (no CUDA-capable device is detected)`: the code with the
/// runtime's own text when its cudaGetErrorString is at hand.
pub(super) fn describe_error(get_error_string: Option<GetErrorStringFn>, code: c_int) -> String {
    let text = get_error_string.and_then(|f| {
        // SAFETY: cudaGetErrorString returns a static NUL-terminated string
        // for any code (cuda_runtime_api.h).
        let p = unsafe { f(code) };
        (!p.is_null()).then(|| {
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        })
    });
    match text {
        Some(t) => format!("CUDA error {code} ({t})"),
        None => format!("CUDA error {code}"),
    }
}

fn load_error(what: &str, why: &str) -> anyhow::Error {
    CudaError::Load {
        what: what.to_string(),
        why: why.to_string(),
    }
    .into()
}

/// The loaded CUDA runtime.
pub struct CudaRuntime {
    path: PathBuf,
    set_device: SetDeviceFn,
    mem_get_info: MemGetInfoFn,
    get_device_properties: Option<GetDevicePropertiesFn>,
    get_error_string: Option<GetErrorStringFn>,
    get_attribute: Option<GetAttributeFn>,
    streams: Option<StreamApi>,
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
    /// loader's `libcudart.so.13` or `libcudart.so.12`.
    pub fn locate() -> anyhow::Result<Self> {
        let (path, lib) = match mapped_cudart() {
            // SAFETY: dlopen of a mapped path returns the loaded copy.
            Some(path) => match unsafe { libloading::Library::new(&path) } {
                Ok(lib) => (path, lib),
                Err(e) => return Err(load_error(&path.display().to_string(), &e.to_string())),
            },
            None => {
                let mut errors = Vec::new();
                let mut found = None;
                for soname in CUDART_SONAMES {
                    // SAFETY: loading the CUDA runtime has no preconditions.
                    match unsafe { libloading::Library::new(soname) } {
                        Ok(lib) => {
                            found = Some((PathBuf::from(soname), lib));
                            break;
                        }
                        Err(e) => errors.push(e.to_string()),
                    }
                }
                match found {
                    Some(f) => f,
                    None => {
                        return Err(load_error(&CUDART_SONAMES.join(" or "), &errors.join("; ")))
                    }
                }
            }
        };
        let symbol = |name: &str, e: libloading::Error| {
            anyhow::Error::from(CudaError::MissingSymbol {
                path: path.clone(),
                name: name.to_string(),
                why: e.to_string(),
            })
        };
        // SAFETY: signatures from cuda_runtime_api.h (CUDA 12 and 13 alike).
        unsafe {
            let set_device = *lib
                .get::<SetDeviceFn>(b"cudaSetDevice")
                .map_err(|e| symbol("cudaSetDevice", e))?;
            let mem_get_info = *lib
                .get::<MemGetInfoFn>(b"cudaMemGetInfo")
                .map_err(|e| symbol("cudaMemGetInfo", e))?;
            // CUDA 12's header maps cudaGetDeviceProperties to the exported
            // cudaGetDeviceProperties_v2 (the plain symbol keeps the CUDA 11
            // layout); CUDA 13 exports only the plain name, with its new
            // layout (`nm -D` of libcudart.so.12 from 12.6.77 and
            // libcudart.so.13 from 13.0.96). Only `name`, at offset 0 in every
            // layout, is read, so either symbol serves.
            let get_device_properties = lib
                .get::<GetDevicePropertiesFn>(b"cudaGetDeviceProperties_v2")
                .or_else(|_| lib.get::<GetDevicePropertiesFn>(b"cudaGetDeviceProperties"))
                .ok()
                .map(|s| *s);
            let get_attribute = lib
                .get::<GetAttributeFn>(b"cudaDeviceGetAttribute")
                .ok()
                .map(|s| *s);
            let get_error_string = lib
                .get::<GetErrorStringFn>(b"cudaGetErrorString")
                .ok()
                .map(|s| *s);
            let streams = (|| {
                Some(StreamApi {
                    stream_create: *lib.get(b"cudaStreamCreateWithFlags").ok()?,
                    stream_destroy: *lib.get(b"cudaStreamDestroy").ok()?,
                    event_create: *lib.get(b"cudaEventCreateWithFlags").ok()?,
                    event_destroy: *lib.get(b"cudaEventDestroy").ok()?,
                    event_record: *lib.get(b"cudaEventRecord").ok()?,
                    stream_wait_event: *lib.get(b"cudaStreamWaitEvent").ok()?,
                    event_query: *lib.get(b"cudaEventQuery").ok()?,
                })
            })();
            Ok(Self {
                path,
                set_device,
                mem_get_info,
                get_device_properties,
                get_error_string,
                get_attribute,
                streams,
                _lib: lib,
            })
        }
    }

    /// `CUDA error 100 (no CUDA-capable device is detected)`: the code with
    /// the runtime's own text (cudaGetErrorString).
    fn describe(&self, code: c_int) -> String {
        describe_error(self.get_error_string, code)
    }

    /// Makes `index` the calling thread's current device.
    pub fn set_device(&self, index: usize) -> anyhow::Result<()> {
        // SAFETY: plain call with an int.
        let r = unsafe { (self.set_device)(index as c_int) };
        if r != 0 {
            return Err(CudaError::SetDevice {
                index,
                error: self.describe(r),
            }
            .into());
        }
        Ok(())
    }

    /// The compute capability `(major, minor)` of device `index`
    /// (cudaDeviceGetAttribute); `None` when the call fails (no device).
    pub fn compute_capability(&self, index: usize) -> Option<(i32, i32)> {
        let get = self.get_attribute?;
        let attribute = |attr: c_int| {
            let mut value: c_int = 0;
            // SAFETY: cudaDeviceGetAttribute writes one int.
            let r = unsafe { get(&mut value, attr, index as c_int) };
            (r == 0).then_some(value)
        };
        Some((attribute(DEV_ATTR_CC_MAJOR)?, attribute(DEV_ATTR_CC_MINOR)?))
    }

    /// Where device `index` sits on the PCI bus, `(domain, bus, device)`
    /// (cudaDeviceGetAttribute): NVML's `pci_bus_id` names the same GPU
    /// whatever `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER` did to the
    /// CUDA ordinals. `None` when a call fails (no device).
    pub fn pci_location(&self, index: usize) -> Option<(u32, u32, u32)> {
        let get = self.get_attribute?;
        let attribute = |attr: c_int| {
            let mut value: c_int = 0;
            // SAFETY: cudaDeviceGetAttribute writes one int.
            let r = unsafe { get(&mut value, attr, index as c_int) };
            (r == 0).then_some(value as u32)
        };
        Some((
            attribute(DEV_ATTR_PCI_DOMAIN)?,
            attribute(DEV_ATTR_PCI_BUS)?,
            attribute(DEV_ATTR_PCI_DEVICE)?,
        ))
    }

    /// `(free, total)` bytes of the current device (cudaMemGetInfo). "Used"
    /// (total − free) counts every process on the device, the CUDA context
    /// and torch's caching-allocator reserve, not only live tensors.
    pub fn mem_get_info(&self) -> anyhow::Result<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: writes two size_t.
        let r = unsafe { (self.mem_get_info)(&mut free, &mut total) };
        if r != 0 {
            return Err(CudaError::MemGetInfo {
                error: self.describe(r),
            }
            .into());
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
            anyhow::bail!(
                "cudaGetDeviceProperties({index}) failed with {}",
                self.describe(r)
            );
        }
        let name = &buf[..256];
        let end = name.iter().position(|&b| b == 0).unwrap_or(256);
        Ok(String::from_utf8_lossy(&name[..end]).trim().to_string())
    }
}

impl CudaRuntime {
    fn check(&self, call: &str, r: c_int) -> anyhow::Result<()> {
        if r != 0 {
            anyhow::bail!("{call} failed with {}", self.describe(r));
        }
        Ok(())
    }
}

/// An event recorded after the work queued so far on a stream: polled from
/// any thread (the collective watchdog) to see whether that work is done
/// ([`Marker::query`]).
pub struct Marker {
    rt: Arc<CudaRuntime>,
    api: StreamApi,
    event: *mut c_void,
}

// SAFETY: a CUDA event is a process-wide handle; querying it is thread-safe,
// and the marker is queried and destroyed by one owner at a time.
unsafe impl Send for Marker {}

impl Marker {
    /// Records a marker after the work queued so far on `stream` (of the
    /// calling thread's current device; `None`: the legacy default stream).
    pub fn record(rt: &Arc<CudaRuntime>, stream: Option<&CommStream>) -> anyhow::Result<Self> {
        let stream = stream.map_or(LEGACY_STREAM, |s| s.stream);
        let api = rt.streams.ok_or_else(|| {
            anyhow::anyhow!(
                "the CUDA runtime {} lacks the stream and event calls",
                rt.path.display()
            )
        })?;
        let mut m = Self {
            rt: rt.clone(),
            api,
            event: std::ptr::null_mut(),
        };
        // SAFETY: the first call writes one handle (released by Drop); the
        // second records it on `stream`, the legacy stream or a CommStream
        // kept alive by the borrow.
        unsafe {
            m.rt.check(
                "cudaEventCreateWithFlags",
                (api.event_create)(&mut m.event, EVENT_DISABLE_TIMING),
            )?;
            m.rt.check("cudaEventRecord", (api.event_record)(m.event, stream))?;
        }
        Ok(m)
    }
}

impl Marker {
    /// Whether the work before the marker has completed (cudaEventQuery).
    pub fn query(&self) -> anyhow::Result<bool> {
        // SAFETY: a live event made in `record`.
        match unsafe { (self.api.event_query)(self.event) } {
            0 => Ok(true),
            ERROR_NOT_READY => Ok(false),
            code => {
                self.rt.check("cudaEventQuery", code)?;
                Ok(false)
            }
        }
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        if !self.event.is_null() {
            // SAFETY: made in `record`; an event with pending work may be
            // destroyed (its resources go once the work is done).
            unsafe { (self.api.event_destroy)(self.event) };
        }
    }
}

/// A non-blocking CUDA stream for collectives on the current device, with the
/// two events that order it against the legacy default stream (where tch's
/// kernels run): [`CommStream::wait_for_compute`] before a collective,
/// [`CommStream::compute_waits`] before the compute stream reads its results.
/// Nothing blocks the host. Created and used with the same current device.
pub struct CommStream {
    rt: Arc<CudaRuntime>,
    api: StreamApi,
    stream: *mut c_void,
    ready: *mut c_void,
    done: *mut c_void,
}

// SAFETY: CUDA streams and events are process-wide handles usable from any
// thread whose current device is theirs; the owner serialises its calls.
unsafe impl Send for CommStream {}

impl std::fmt::Debug for CommStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommStream")
            .field("stream", &self.stream)
            .finish()
    }
}

impl CommStream {
    /// A new stream and its events on the calling thread's current device.
    pub fn new(rt: Arc<CudaRuntime>) -> anyhow::Result<Self> {
        let api = rt.streams.ok_or_else(|| {
            anyhow::anyhow!(
                "the CUDA runtime {} lacks the stream and event calls",
                rt.path.display()
            )
        })?;
        let mut s = Self {
            rt,
            api,
            stream: std::ptr::null_mut(),
            ready: std::ptr::null_mut(),
            done: std::ptr::null_mut(),
        };
        // SAFETY: each call writes one handle; Drop releases what was made.
        unsafe {
            s.rt.check(
                "cudaStreamCreateWithFlags",
                (api.stream_create)(&mut s.stream, STREAM_NON_BLOCKING),
            )?;
            s.rt.check(
                "cudaEventCreateWithFlags",
                (api.event_create)(&mut s.ready, EVENT_DISABLE_TIMING),
            )?;
            s.rt.check(
                "cudaEventCreateWithFlags",
                (api.event_create)(&mut s.done, EVENT_DISABLE_TIMING),
            )?;
        }
        Ok(s)
    }

    /// The runtime the stream was made with.
    pub fn runtime(&self) -> &Arc<CudaRuntime> {
        &self.rt
    }

    /// The raw `cudaStream_t`, for NCCL.
    #[cfg(feature = "torch")]
    pub(super) fn raw(&self) -> *mut c_void {
        self.stream
    }

    /// Work queued on this stream from now on starts only after everything
    /// queued on the compute stream so far (event recorded there, waited here).
    pub fn wait_for_compute(&self) -> anyhow::Result<()> {
        // SAFETY: live handles of this device; recording an event again after
        // a wait was queued on it does not affect that wait.
        unsafe {
            self.rt.check(
                "cudaEventRecord",
                (self.api.event_record)(self.ready, LEGACY_STREAM),
            )?;
            self.rt.check(
                "cudaStreamWaitEvent",
                (self.api.stream_wait_event)(self.stream, self.ready, 0),
            )
        }
    }

    /// Work queued on the compute stream from now on starts only after
    /// everything queued on this stream so far.
    pub fn compute_waits(&self) -> anyhow::Result<()> {
        // SAFETY: as in `wait_for_compute`, the other way round.
        unsafe {
            self.rt.check(
                "cudaEventRecord",
                (self.api.event_record)(self.done, self.stream),
            )?;
            self.rt.check(
                "cudaStreamWaitEvent",
                (self.api.stream_wait_event)(LEGACY_STREAM, self.done, 0),
            )
        }
    }
}

impl Drop for CommStream {
    fn drop(&mut self) {
        // SAFETY: handles made in `new` (null ones were never made);
        // destroying a stream with pending work lets that work finish.
        unsafe {
            for ev in [self.ready, self.done] {
                if !ev.is_null() {
                    (self.api.event_destroy)(ev);
                }
            }
            if !self.stream.is_null() {
                (self.api.stream_destroy)(self.stream);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cudart_major_from_file_names() {
        assert_eq!(cudart_major("libcudart.so.12"), Some(12));
        assert_eq!(cudart_major("libcudart.so.13"), Some(13));
        assert_eq!(cudart_major("libcudart.so.12.6.77"), Some(12));
        assert_eq!(cudart_major("libcudart.so"), None);
        assert_eq!(cudart_major("libcudart.so.bak"), None);
        assert_eq!(cudart_major("libcudart_static.a"), None);
        assert_eq!(cudart_major("libcudadevrt.a"), None);
    }

    #[test]
    fn picks_any_mapped_cudart_major() {
        // torch 2.7 cu126 wheel layout.
        let cu12 = [
            "/usr/bin/imgctl",
            "/venv/site-packages/torch/lib/libtorch_cuda.so",
            "/venv/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12",
        ];
        assert_eq!(
            pick_mapped_cudart(cu12),
            Some(PathBuf::from(
                "/venv/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"
            ))
        );
        // torch 2.11 cu130 wheel layout: every CUDA 13 wheel shares nvidia/cu13/lib.
        let cu13 = [
            "/venv/site-packages/nvidia/cu13/lib/libcublasLt.so.13",
            "/venv/site-packages/nvidia/cu13/lib/libcudart.so.13",
        ];
        assert_eq!(
            pick_mapped_cudart(cu13),
            Some(PathBuf::from(
                "/venv/site-packages/nvidia/cu13/lib/libcudart.so.13"
            ))
        );
        assert_eq!(pick_mapped_cudart(["/lib/libc.so.6"]), None);
        // A maps line whose path holds a space, beside one with no file.
        let maps = "7f1a2b000000-7f1a2c000000 r-xp 00000000 08:01 42                         /opt/my env/nvidia/cu13/lib/libcudart.so.13\n\
                    7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0   [stack]\n";
        let files = crate::sys::procmaps::parse_maps(maps);
        assert_eq!(
            pick_mapped_cudart(files.iter().filter_map(|p| p.to_str())),
            Some(PathBuf::from("/opt/my env/nvidia/cu13/lib/libcudart.so.13"))
        );
    }

    #[cfg(feature = "torch")]
    #[test]
    fn locates_the_runtime_torch_mapped_and_fails_cleanly_without_a_gpu() {
        // The test binary links libtorch; with a CUDA libtorch (the cu126 wheel
        // here) its libcudart is mapped and found; without a GPU every call
        // returns a CUDA error instead of crashing.
        tch::Cuda::is_available();
        let Some(mapped) = mapped_cudart() else {
            // CPU-only libtorch: the loader fallback names both sonames.
            if let Err(e) = CudaRuntime::locate() {
                assert!(
                    e.to_string().contains("libcudart.so.13 or libcudart.so.12"),
                    "{e}"
                );
            }
            return;
        };
        let rt = CudaRuntime::locate().unwrap();
        assert_eq!(rt.path, mapped);
        if !tch::Cuda::is_available() {
            assert!(rt.mem_get_info().is_err());
            assert!(rt.device_name(0).is_err());
            // The runtime's own words come with the code.
            let e = rt.set_device(0).unwrap_err().to_string();
            assert!(
                e.starts_with("cudaSetDevice(0) failed with CUDA error "),
                "{e}"
            );
            assert!(e.contains(" ("), "{e}");
        }
        assert!(rt.streams.is_some(), "the stream and event calls resolve");
        if !tch::Cuda::is_available() {
            let e = CommStream::new(Arc::new(rt)).unwrap_err().to_string();
            assert!(
                e.starts_with("cudaStreamCreateWithFlags failed with CUDA error "),
                "{e}"
            );
        }
    }
}
