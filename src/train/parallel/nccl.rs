//! A small run-time shim over NCCL (`libnccl.so.2`) and the NCCL collective.
//!
//! tch 0.20 has no NCCL bindings, so the handful of entry points data
//! parallelism needs (ncclGetVersion, ncclGetUniqueId, ncclCommInitRank,
//! ncclAllReduce, ncclBroadcast, ncclCommDestroy, ncclCommAbort,
//! ncclGetErrorString) are resolved with libloading from the very
//! `libnccl.so.2` libtorch uses: libtorch_cuda.so links it (wheel
//! `nvidia-nccl-cu12`), so it is already mapped in this process and found in
//! `/proc/self/maps`; else `dlopen("libnccl.so.2")`. The file is `libnccl.so.2`:
//! the unversioned `libnccl.so` exists only in development packages, never in
//! the wheel. Collectives run on CUDA stream 0 (the legacy default stream),
//! which orders them with torch's kernels (tch has no stream API). This module
//! must not decide which backend a run uses.
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tch::{Device, Tensor};

use super::collective::{check_buffer, Backend, Collective, Elem};
use crate::CliError;

/// The NCCL library's soname (the wheel ships only this file).
pub const NCCL_SONAME: &str = "libnccl.so.2";

/// `NCCL_UNIQUE_ID_BYTES` in nccl.h.
pub const UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId` from nccl.h: an opaque 128-byte blob, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    internal: [c_char; UNIQUE_ID_BYTES],
}

type NcclComm = *mut c_void;
type NcclResult = c_int;

// ncclDataType_t and ncclRedOp_t values from nccl.h (NCCL 2.x, stable ABI).
const NCCL_FLOAT32: c_int = 7;
const NCCL_BFLOAT16: c_int = 9;
const NCCL_SUM: c_int = 0;
/// ncclAvg, available since NCCL 2.10.
const NCCL_AVG: c_int = 4;
/// NCCL_VERSION(2,10,0) = 2*10000 + 10*100 + 0 (nccl.h's NCCL_VERSION macro).
const NCCL_AVG_MIN_VERSION: c_int = 21000;

type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type GetUniqueIdFn = unsafe extern "C" fn(*mut NcclUniqueId) -> NcclResult;
type CommInitRankFn = unsafe extern "C" fn(*mut NcclComm, c_int, NcclUniqueId, c_int) -> NcclResult;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    *mut c_void,
) -> NcclResult;
type BroadcastFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    NcclComm,
    *mut c_void,
) -> NcclResult;
type CommFn = unsafe extern "C" fn(NcclComm) -> NcclResult;
type ErrorStringFn = unsafe extern "C" fn(NcclResult) -> *const c_char;

/// `libnccl.so.2`, opened, with the entry points imgctl uses.
pub struct NcclLibrary {
    path: PathBuf,
    get_version: GetVersionFn,
    get_unique_id: GetUniqueIdFn,
    comm_init_rank: CommInitRankFn,
    all_reduce: AllReduceFn,
    broadcast: BroadcastFn,
    comm_destroy: CommFn,
    comm_abort: CommFn,
    error_string: ErrorStringFn,
    // Keeps the function pointers above valid; dropped last.
    _lib: libloading::Library,
}

impl std::fmt::Debug for NcclLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclLibrary")
            .field("path", &self.path)
            .finish()
    }
}

/// The path of a shared library mapped into this process whose file name is
/// `soname` or `soname.<more>` (`libnccl.so.2.26.2`), from `/proc/self/maps`.
pub fn mapped_library(soname: &str) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let path = line.split_whitespace().nth(5)?;
        let name = Path::new(path).file_name()?.to_str()?;
        let matches = name == soname
            || name
                .strip_prefix(soname)
                .is_some_and(|rest| rest.starts_with('.'));
        matches.then(|| PathBuf::from(path))
    })
}

fn missing_hint() -> &'static str {
    "NCCL comes with the PyTorch CUDA wheel (nvidia-nccl-cu12, file libnccl.so.2); \
     use an image built by `imgctl build`, or train on one device without --gpus"
}

impl NcclLibrary {
    /// Finds the NCCL libtorch uses: the mapped `libnccl.so.2`, else the
    /// dynamic loader's `libnccl.so.2`.
    pub fn locate() -> anyhow::Result<Self> {
        match mapped_library(NCCL_SONAME) {
            Some(path) => Self::open(&path),
            // Not mapped (libtorch without CUDA): ask the dynamic loader.
            None => Self::open(Path::new(NCCL_SONAME)),
        }
    }

    /// Opens NCCL from `path` (a file path, or a bare soname for the loader's search).
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| {
            anyhow::Error::from(
                CliError::failure(format!(
                    "NCCL is missing: cannot load {} ({e})",
                    path.display()
                ))
                .with_hint(missing_hint()),
            )
        })?;
        /// Resolves one symbol as a plain function pointer.
        unsafe fn sym<T: Copy>(
            lib: &libloading::Library,
            path: &Path,
            name: &str,
        ) -> anyhow::Result<T> {
            let s: libloading::Symbol<T> = lib.get(name.as_bytes()).map_err(|e| {
                anyhow::Error::from(
                    CliError::failure(format!(
                        "{} is not a usable NCCL: symbol {name} is missing ({e})",
                        path.display()
                    ))
                    .with_hint(missing_hint()),
                )
            })?;
            Ok(*s)
        }
        // SAFETY: the signatures match nccl.h of NCCL 2.x (stable C ABI).
        unsafe {
            Ok(Self {
                path: path.to_path_buf(),
                get_version: sym(&lib, path, "ncclGetVersion")?,
                get_unique_id: sym(&lib, path, "ncclGetUniqueId")?,
                comm_init_rank: sym(&lib, path, "ncclCommInitRank")?,
                all_reduce: sym(&lib, path, "ncclAllReduce")?,
                broadcast: sym(&lib, path, "ncclBroadcast")?,
                comm_destroy: sym(&lib, path, "ncclCommDestroy")?,
                comm_abort: sym(&lib, path, "ncclCommAbort")?,
                error_string: sym(&lib, path, "ncclGetErrorString")?,
                _lib: lib,
            })
        }
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check(&self, what: &str, r: NcclResult) -> anyhow::Result<()> {
        if r == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static C string for any code.
        let msg = unsafe {
            let p = (self.error_string)(r);
            if p.is_null() {
                String::from("unknown error")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Err(
            CliError::failure(format!("{what} failed: NCCL error {r}: {msg}"))
                .with_hint("set NCCL_DEBUG=INFO for NCCL's own diagnostics")
                .into(),
        )
    }

    /// The version code (`NCCL_VERSION_CODE`: 2.26.2 → 22602). Needs no GPU.
    pub fn version(&self) -> anyhow::Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        self.check("ncclGetVersion", unsafe { (self.get_version)(&mut v) })?;
        Ok(v)
    }

    /// A fresh unique id for a new communicator (rank 0 calls this).
    pub fn unique_id(&self) -> anyhow::Result<[u8; UNIQUE_ID_BYTES]> {
        let mut id = NcclUniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        // SAFETY: writes the 128-byte id.
        self.check("ncclGetUniqueId", unsafe { (self.get_unique_id)(&mut id) })?;
        Ok(id.internal.map(|c| c as u8))
    }
}

/// `22602` → `"2.26.2"` (codes ≥ 10000 are `major*10000 + minor*100 + patch`,
/// older ones `major*1000 + minor*100 + patch`: nccl.h's NCCL_VERSION).
pub fn version_string(code: i32) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// An NCCL communicator over one GPU per rank.
pub struct NcclCollective {
    lib: Arc<NcclLibrary>,
    comm: NcclComm,
    rank: usize,
    world_size: usize,
    device: Device,
    version: i32,
}

// SAFETY: an NCCL communicator may be used from any one thread at a time; the
// collective is moved, never shared (`&mut self` on every operation).
unsafe impl Send for NcclCollective {}

impl std::fmt::Debug for NcclCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclCollective")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("device", &self.device)
            .finish()
    }
}

impl NcclCollective {
    /// Joins the communicator `id` as `rank` of `world_size` on `device` (the
    /// current CUDA device must already be `device`). Blocks until every rank
    /// has joined, at most `timeout`.
    pub fn init(
        lib: Arc<NcclLibrary>,
        id: &[u8],
        rank: usize,
        world_size: usize,
        device: Device,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        if id.len() != UNIQUE_ID_BYTES {
            return Err(CliError::failure(format!(
                "rendezvous delivered a {}-byte NCCL id, expected {UNIQUE_ID_BYTES}",
                id.len()
            ))
            .into());
        }
        let version = lib.version()?;
        let mut uid = NcclUniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        for (d, s) in uid.internal.iter_mut().zip(id) {
            *d = *s as c_char;
        }
        // ncclCommInitRank blocks until all ranks joined: run it on a helper
        // thread so that a rank that never comes turns into a timeout error.
        let (tx, rx) = std::sync::mpsc::channel();
        let l = lib.clone();
        let dev_index = match device {
            Device::Cuda(i) => i,
            _ => 0,
        };
        std::thread::spawn(move || {
            // The helper thread must use the same device as the caller.
            let _ = super::cudart::CudaRuntime::locate().and_then(|rt| rt.set_device(dev_index));
            let mut comm: NcclComm = std::ptr::null_mut();
            // SAFETY: comm is written on success; uid is passed by value as nccl.h declares.
            let r =
                unsafe { (l.comm_init_rank)(&mut comm, world_size as c_int, uid, rank as c_int) };
            let _ = tx.send((r, comm as usize));
        });
        let (r, comm) = rx.recv_timeout(timeout).map_err(|_| {
            anyhow::Error::from(
                CliError::failure(format!(
                    "NCCL communicator set-up timed out after {}: rank {rank} of {world_size} \
                     waited in ncclCommInitRank for the other ranks",
                    super::rendezvous::fmt_secs(timeout)
                ))
                .with_hint("check that every rank reached NCCL set-up; NCCL_DEBUG=INFO shows the transport"),
            )
        })?;
        lib.check("ncclCommInitRank", r)?;
        Ok(Self {
            lib,
            comm: comm as NcclComm,
            rank,
            world_size,
            device,
            version,
        })
    }

    /// The NCCL version code in use.
    pub fn version(&self) -> i32 {
        self.version
    }

    fn dtype(elem: Elem) -> c_int {
        match elem {
            Elem::F32 => NCCL_FLOAT32,
            Elem::Bf16 => NCCL_BFLOAT16,
        }
    }

    fn reduce(&mut self, buf: &Tensor, op: c_int) -> anyhow::Result<()> {
        let elem = check_buffer(buf, Some(self.device))?;
        let p = buf.data_ptr();
        // SAFETY: p is a device pointer to numel contiguous elements on this
        // communicator's device; in place (send == recv) is allowed by NCCL.
        // Stream null = the legacy default stream torch's kernels run on.
        let r = unsafe {
            (self.lib.all_reduce)(
                p,
                p,
                buf.numel(),
                Self::dtype(elem),
                op,
                self.comm,
                std::ptr::null_mut(),
            )
        };
        self.lib.check("ncclAllReduce", r)
    }
}

impl Collective for NcclCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world_size
    }
    fn backend(&self) -> Backend {
        Backend::Nccl
    }
    fn all_reduce_sum(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        self.reduce(buf, NCCL_SUM)
    }
    fn all_reduce_avg(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        if self.version >= NCCL_AVG_MIN_VERSION {
            self.reduce(buf, NCCL_AVG)
        } else {
            self.reduce(buf, NCCL_SUM)?;
            let mut b = buf.shallow_clone();
            let _ = b.g_div_scalar_(self.world_size as f64);
            Ok(())
        }
    }
    fn broadcast(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        let elem = check_buffer(buf, Some(self.device))?;
        let p = buf.data_ptr();
        // SAFETY: as in `reduce`; root 0.
        let r = unsafe {
            (self.lib.broadcast)(
                p,
                p,
                buf.numel(),
                Self::dtype(elem),
                0,
                self.comm,
                std::ptr::null_mut(),
            )
        };
        self.lib.check("ncclBroadcast", r)
    }
    fn barrier(&mut self) -> anyhow::Result<()> {
        // NCCL has no barrier: all-reduce one element, then wait for it.
        let t = Tensor::zeros([1], (tch::Kind::Float, self.device));
        self.all_reduce_sum(&t)?;
        if let Device::Cuda(i) = self.device {
            tch::Cuda::synchronize(i as i64);
        }
        Ok(())
    }
}

impl Drop for NcclCollective {
    fn drop(&mut self) {
        if !self.comm.is_null() {
            // SAFETY: comm came from ncclCommInitRank and is dropped once.
            // Abort instead of destroy while unwinding: destroy waits for
            // pending work that may never finish.
            unsafe {
                if std::thread::panicking() {
                    (self.lib.comm_abort)(self.comm);
                } else {
                    (self.lib.comm_destroy)(self.comm);
                }
            }
            self.comm = std::ptr::null_mut();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_strings() {
        assert_eq!(version_string(22602), "2.26.2");
        assert_eq!(version_string(21005), "2.10.5");
        assert_eq!(version_string(2804), "2.8.4");
    }

    #[test]
    fn missing_library_is_a_clear_error() {
        let e = NcclLibrary::open(Path::new("/nonexistent/libnccl.so.2")).unwrap_err();
        assert!(e.to_string().contains("NCCL is missing"), "{e}");
        assert_eq!(crate::error::status_of(&e), crate::ExitStatus::Failure);
    }

    #[test]
    fn mapped_library_finds_libc() {
        // Every process maps libc.so.6; an absent library is not found.
        assert!(mapped_library("libc.so.6").is_some());
        assert!(mapped_library("libnosuch.so.1").is_none());
    }
}
