//! The one run-time shim over NCCL (`libnccl.so.2`), shared by data-parallel
//! training (`world::collective::nccl`) and verify's `func.nccl_allreduce` check.
//!
//! tch 0.20 has no NCCL bindings, so the entry points imgctl needs
//! ([`SYMBOLS`]) are resolved with libloading from the very `libnccl.so.2`
//! libtorch uses: libtorch_cuda.so links it (wheel `nvidia-nccl-cu12`), so it
//! is already mapped in this process and found in `/proc/self/maps`. The file
//! is `libnccl.so.2`: the unversioned `libnccl.so` exists only in development
//! packages, never in the wheel ([`super::procmaps`] finds it). This module
//! owns the soname, the typed entry points with their `ncclResult_t`
//! → [`NcclError`] mapping, and the communicator's lifetime ([`Communicator`]:
//! destroyed on drop, aborted after an error). Collectives are enqueued on
//! CUDA stream 0 (the legacy default stream), which orders them with torch's
//! kernels (tch has no stream API), unless the caller names a stream of its
//! own (ordered by the caller with events). It must not depend on tch, allocate
//! device memory, or decide which backend or which check uses NCCL.
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::procmaps::mapped_library;

/// The NCCL library's soname (the wheel ships only this file).
pub const NCCL_SONAME: &str = "libnccl.so.2";

/// NCCL that cannot be loaded or used, or a call that failed. The lines name
/// the library and the call; `commands/` adds the exit status and the hint.
#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    /// The library did not load.
    #[error("NCCL is missing: cannot load {} ({why})", .path.display())]
    Load {
        /// The file or soname tried.
        path: PathBuf,
        /// The dynamic loader's reason.
        why: String,
    },
    /// The library loaded but lacks an entry point imgctl needs.
    #[error("{} is not a usable NCCL: symbol {name} is missing ({why})", .path.display())]
    MissingSymbol {
        /// The library.
        path: PathBuf,
        /// The symbol.
        name: String,
        /// The dynamic loader's reason.
        why: String,
    },
    /// No `libnccl.so.2` is mapped in this process.
    #[error("libnccl is not mapped in this process (torch did not load it)")]
    NotMapped,
    /// An NCCL call returned an error code.
    #[error("{call} failed: NCCL error {code}: {text}")]
    Call {
        /// The entry point.
        call: String,
        /// The `ncclResult_t`.
        code: i32,
        /// NCCL's text for it (`ncclGetErrorString`).
        text: String,
    },
}

/// `NCCL_UNIQUE_ID_BYTES` in nccl.h.
pub const UNIQUE_ID_BYTES: usize = 128;

/// The first NCCL with [`RedOp::Avg`]: `NCCL_VERSION(2,10,0)` =
/// 2*10000 + 10*100 + 0 (nccl.h's NCCL_VERSION macro; ncclAvg since 2.10).
pub const AVG_MIN_VERSION: i32 = 21000;

/// The legacy default CUDA stream (`cudaStream_t` 0), where torch computes
/// through tch: collectives enqueued there are ordered with its kernels.
pub const LEGACY_STREAM: *mut c_void = std::ptr::null_mut();

/// `ncclDataType_t` values imgctl uses (nccl.h, NCCL 2.x stable ABI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// `ncclFloat32` (= `ncclFloat`) = 7.
    Float32,
    /// `ncclBfloat16` = 9 (since NCCL 2.10).
    Bfloat16,
}

impl DataType {
    fn raw(self) -> c_int {
        match self {
            DataType::Float32 => 7,
            DataType::Bfloat16 => 9,
        }
    }
}

/// `ncclRedOp_t` values imgctl uses (nccl.h, NCCL 2.x stable ABI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedOp {
    /// `ncclSum` = 0.
    Sum,
    /// `ncclAvg` = 4, from NCCL 2.10 on ([`AVG_MIN_VERSION`]).
    Avg,
}

impl RedOp {
    fn raw(self) -> c_int {
        match self {
            RedOp::Sum => 0,
            RedOp::Avg => 4,
        }
    }
}

/// `ncclUniqueId` from nccl.h: an opaque 128-byte blob, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
struct NcclUniqueId {
    internal: [c_char; UNIQUE_ID_BYTES],
}

/// `ncclComm_t` (`struct ncclComm*`).
type RawComm = *mut c_void;
/// `ncclResult_t`; `ncclSuccess` is 0.
type NcclResult = c_int;

// The C signatures, one per entry point, as declared in nccl.h (NCCL 2.x).
/// `ncclResult_t ncclGetVersion(int* version)`.
type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> NcclResult;
/// `ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId)`.
type GetUniqueIdFn = unsafe extern "C" fn(*mut NcclUniqueId) -> NcclResult;
/// `ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank)`.
type CommInitRankFn = unsafe extern "C" fn(*mut RawComm, c_int, NcclUniqueId, c_int) -> NcclResult;
/// `ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist)`.
type CommInitAllFn = unsafe extern "C" fn(*mut RawComm, c_int, *const c_int) -> NcclResult;
/// `ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
/// ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)`.
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    *mut c_void,
) -> NcclResult;
/// `ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
/// ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)`.
type BroadcastFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    *mut c_void,
) -> NcclResult;
/// `ncclResult_t ncclGroupStart()` and `ncclResult_t ncclGroupEnd()`.
type GroupFn = unsafe extern "C" fn() -> NcclResult;
/// `ncclResult_t ncclCommDestroy(ncclComm_t comm)` and `ncclCommAbort(ncclComm_t comm)`.
type CommFn = unsafe extern "C" fn(RawComm) -> NcclResult;
/// `ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError)`.
type CommGetAsyncErrorFn = unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult;
/// `const char* ncclGetErrorString(ncclResult_t result)`.
type ErrorStringFn = unsafe extern "C" fn(NcclResult) -> *const c_char;

/// Declares the entry-point table once: the struct of typed function
/// pointers, its resolver, and [`SYMBOLS`], so the list cannot drift from
/// what [`NcclLibrary::open`] resolves.
macro_rules! entry_points {
    ($($field:ident: $ty:ty = $name:literal,)*) => {
        /// NCCL's entry points, resolved from one loaded library.
        struct EntryPoints {
            $($field: $ty,)*
        }

        /// Every NCCL symbol the shim resolves (all required: a library
        /// lacking one is refused by [`NcclLibrary::open`]).
        pub const SYMBOLS: &[&str] = &[$($name),*];

        impl EntryPoints {
            /// # Safety
            /// Each `$ty` must be the C signature of `$name` (nccl.h).
            unsafe fn resolve(lib: &libloading::Library, path: &Path) -> anyhow::Result<Self> {
                Ok(Self {
                    // SAFETY: the caller guarantees the signatures.
                    $($field: unsafe { symbol::<$ty>(lib, path, $name)? },)*
                })
            }
        }
    };
}

entry_points! {
    get_version: GetVersionFn = "ncclGetVersion",
    get_unique_id: GetUniqueIdFn = "ncclGetUniqueId",
    comm_init_rank: CommInitRankFn = "ncclCommInitRank",
    comm_init_all: CommInitAllFn = "ncclCommInitAll",
    all_reduce: AllReduceFn = "ncclAllReduce",
    broadcast: BroadcastFn = "ncclBroadcast",
    group_start: GroupFn = "ncclGroupStart",
    group_end: GroupFn = "ncclGroupEnd",
    comm_destroy: CommFn = "ncclCommDestroy",
    comm_abort: CommFn = "ncclCommAbort",
    comm_get_async_error: CommGetAsyncErrorFn = "ncclCommGetAsyncError",
    error_string: ErrorStringFn = "ncclGetErrorString",
}

/// Resolves one symbol as a plain function pointer; a missing symbol is a
/// one-line error naming it.
///
/// # Safety
/// `T` must be the function-pointer type of `name`'s C signature.
unsafe fn symbol<T: Copy>(lib: &libloading::Library, path: &Path, name: &str) -> anyhow::Result<T> {
    // SAFETY: the caller guarantees that `T` is `name`'s signature.
    let s: libloading::Symbol<T> =
        unsafe { lib.get(name.as_bytes()) }.map_err(|e| NcclError::MissingSymbol {
            path: path.to_path_buf(),
            name: name.to_string(),
            why: e.to_string(),
        })?;
    Ok(*s)
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

/// `libnccl.so.2`, opened, with the entry points imgctl uses ([`SYMBOLS`]).
pub struct NcclLibrary {
    path: PathBuf,
    api: EntryPoints,
    // Keeps the function pointers in `api` valid; dropped last.
    _lib: libloading::Library,
}

impl std::fmt::Debug for NcclLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclLibrary")
            .field("path", &self.path)
            .finish()
    }
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

    /// Opens only the `libnccl.so.2` already mapped in this process (the copy
    /// torch loaded), never another one from the loader's search path.
    pub fn mapped() -> anyhow::Result<Self> {
        let path = mapped_library(NCCL_SONAME).ok_or(NcclError::NotMapped)?;
        Self::open(&path)
    }

    /// Opens NCCL from `path` (a file path, or a bare soname for the loader's
    /// search) and resolves every symbol in [`SYMBOLS`].
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| NcclError::Load {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        // SAFETY: each type in `entry_points!` is the nccl.h signature of its
        // symbol (NCCL 2.x stable C ABI), quoted next to the type alias.
        let api = unsafe { EntryPoints::resolve(&lib, path)? };
        Ok(Self {
            path: path.to_path_buf(),
            api,
            _lib: lib,
        })
    }

    /// Where the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// NCCL's text for a result code (`ncclGetErrorString`).
    pub fn error_string(&self, code: i32) -> String {
        // SAFETY: `const char* ncclGetErrorString(ncclResult_t result)` returns
        // a static NUL-terminated string for any code (nccl.h).
        unsafe {
            let p = (self.api.error_string)(code);
            if p.is_null() {
                String::from("unknown error")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }

    /// `Ok` for `ncclSuccess`, else a one-line error naming the call, the code
    /// and NCCL's text, with a hint.
    fn check(&self, call: &str, r: NcclResult) -> anyhow::Result<()> {
        if r == 0 {
            return Ok(());
        }
        Err(NcclError::Call {
            call: call.to_string(),
            code: r,
            text: self.error_string(r),
        }
        .into())
    }

    /// The version code (`NCCL_VERSION_CODE`: 2.26.2 → 22602). Needs no GPU.
    pub fn version(&self) -> anyhow::Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: `ncclResult_t ncclGetVersion(int* version)` writes one int.
        self.check("ncclGetVersion", unsafe { (self.api.get_version)(&mut v) })?;
        Ok(v)
    }

    /// A fresh unique id for a new communicator (rank 0 calls this and hands
    /// it to the others). Needs no GPU (NCCL's bootstrap is host networking).
    pub fn unique_id(&self) -> anyhow::Result<[u8; UNIQUE_ID_BYTES]> {
        let mut id = NcclUniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        // SAFETY: `ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId)` writes
        // the 128-byte id.
        self.check("ncclGetUniqueId", unsafe {
            (self.api.get_unique_id)(&mut id)
        })?;
        Ok(id.internal.map(|c| c as u8))
    }

    /// Runs `f` between `ncclGroupStart` and `ncclGroupEnd`, so that the
    /// collectives it enqueues on several communicators (one thread driving
    /// several GPUs) launch together. The group is always ended; an error of
    /// `f` wins over one of `ncclGroupEnd`.
    pub fn group<R>(&self, f: impl FnOnce() -> anyhow::Result<R>) -> anyhow::Result<R> {
        // SAFETY: `ncclResult_t ncclGroupStart()` takes no arguments.
        self.check("ncclGroupStart", unsafe { (self.api.group_start)() })?;
        let out = f();
        // SAFETY: `ncclResult_t ncclGroupEnd()` closes the group opened above.
        let end = self.check("ncclGroupEnd", unsafe { (self.api.group_end)() });
        let out = out?;
        end.map(|()| out)
    }
}

/// An NCCL communicator (`ncclComm_t`) bound to one GPU, owned: dropped with
/// `ncclCommDestroy`, or with `ncclCommAbort` after any failed call on it or
/// while unwinding (destroy waits for pending work that may never finish).
pub struct Communicator {
    lib: Arc<NcclLibrary>,
    raw: RawComm,
    /// Set when a call on this communicator failed: tear it down with abort.
    failed: Cell<bool>,
}

// SAFETY: an NCCL communicator may be used from any one thread at a time
// (NCCL forbids only concurrent use of one communicator); `Communicator` is
// not `Sync`, so it is moved between threads, never shared.
unsafe impl Send for Communicator {}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator")
            .field("library", &self.lib.path)
            .field("failed", &self.failed.get())
            .finish()
    }
}

impl Communicator {
    /// `ncclCommInitRank`: joins the communicator `id` as `rank` of
    /// `world_size` on the calling thread's current CUDA device. Blocks until
    /// every rank has joined (callers that need a timeout run it on a helper
    /// thread).
    pub fn init_rank(
        lib: &Arc<NcclLibrary>,
        world_size: usize,
        id: &[u8; UNIQUE_ID_BYTES],
        rank: usize,
    ) -> anyhow::Result<Self> {
        let uid = NcclUniqueId {
            internal: id.map(|b| b as c_char),
        };
        let mut raw: RawComm = std::ptr::null_mut();
        // SAFETY: `ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks,
        // ncclUniqueId commId, int rank)`: `raw` is written on success; the id
        // is passed by value as nccl.h declares.
        let r =
            unsafe { (lib.api.comm_init_rank)(&mut raw, world_size as c_int, uid, rank as c_int) };
        lib.check("ncclCommInitRank", r)?;
        Ok(Self::owned(lib, raw))
    }

    /// `ncclCommInitAll`: one communicator per device in `devices` (CUDA
    /// ordinals), all created by this one thread, in the order given.
    pub fn init_all(lib: &Arc<NcclLibrary>, devices: &[i32]) -> anyhow::Result<Vec<Self>> {
        let mut raw = vec![std::ptr::null_mut::<c_void>(); devices.len()];
        // SAFETY: `ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev,
        // const int* devlist)`: `raw` has ndev out-slots and `devices` ndev ids.
        let r = unsafe {
            (lib.api.comm_init_all)(raw.as_mut_ptr(), devices.len() as c_int, devices.as_ptr())
        };
        lib.check("ncclCommInitAll", r)?;
        Ok(raw.into_iter().map(|c| Self::owned(lib, c)).collect())
    }

    fn owned(lib: &Arc<NcclLibrary>, raw: RawComm) -> Self {
        Self {
            lib: lib.clone(),
            raw,
            failed: Cell::new(false),
        }
    }

    /// The library this communicator came from.
    pub fn library(&self) -> &Arc<NcclLibrary> {
        &self.lib
    }

    fn checked(&self, call: &str, r: NcclResult) -> anyhow::Result<()> {
        let out = self.lib.check(call, r);
        if out.is_err() {
            self.failed.set(true);
        }
        out
    }

    /// `ncclAllReduce` of `count` elements of `dtype` from `send` into `recv`
    /// (they may be equal: in place), enqueued on `stream` (a `cudaStream_t`
    /// of this communicator's device; [`LEGACY_STREAM`] orders it with torch's kernels).
    ///
    /// # Safety
    /// `send` and `recv` must be device pointers on this communicator's GPU
    /// to at least `count` elements of `dtype` each, kept alive until the
    /// stream has run the collective; `stream` must be live (or null).
    pub unsafe fn all_reduce(
        &self,
        stream: *mut c_void,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        op: RedOp,
    ) -> anyhow::Result<()> {
        // SAFETY: `ncclResult_t ncclAllReduce(const void* sendbuff, void*
        // recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
        // ncclComm_t comm, cudaStream_t stream)`; the buffers and the stream
        // are the caller's promise.
        let r = unsafe {
            (self.lib.api.all_reduce)(send, recv, count, dtype.raw(), op.raw(), self.raw, stream)
        };
        self.checked("ncclAllReduce", r)
    }

    /// `ncclBroadcast` of `count` elements of `dtype` from rank `root`'s
    /// `send` into every rank's `recv` (may be equal), on the legacy default
    /// stream.
    ///
    /// # Safety
    /// As for [`Communicator::all_reduce`].
    pub unsafe fn broadcast(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: DataType,
        root: usize,
    ) -> anyhow::Result<()> {
        // SAFETY: `ncclResult_t ncclBroadcast(const void* sendbuff, void*
        // recvbuff, size_t count, ncclDataType_t datatype, int root,
        // ncclComm_t comm, cudaStream_t stream)`; buffers as promised by the
        // caller.
        let r = unsafe {
            (self.lib.api.broadcast)(
                send,
                recv,
                count,
                dtype.raw(),
                root as c_int,
                self.raw,
                LEGACY_STREAM,
            )
        };
        self.checked("ncclBroadcast", r)
    }

    /// A probe of the communicator's asynchronous error
    /// (`ncclCommGetAsyncError`), callable from another thread: `Some(text)`
    /// once NCCL has found the communicator broken (a peer gone, a network
    /// error). The probe must be dropped before the communicator.
    pub fn async_error_probe(&self) -> AsyncErrorProbe {
        AsyncErrorProbe {
            lib: self.lib.clone(),
            raw: self.raw,
        }
    }

    /// Makes the drop abort the communicator (`ncclCommAbort`, which does not
    /// wait for pending work) instead of destroying it.
    pub fn mark_failed(&self) {
        self.failed.set(true);
    }

    /// Tears the communicator down with `ncclCommAbort` (which does not wait
    /// for pending work) instead of `ncclCommDestroy`.
    pub fn abort(self) {
        self.failed.set(true);
    }
}

/// See [`Communicator::async_error_probe`].
pub struct AsyncErrorProbe {
    lib: Arc<NcclLibrary>,
    raw: RawComm,
}

// SAFETY: NCCL documents ncclCommGetAsyncError as callable from another
// thread while the communicator is in use (that is its purpose); the owner
// keeps the communicator alive longer than the probe.
unsafe impl Send for AsyncErrorProbe {}

/// `ncclInProgress` (nccl.h, NCCL ≥ 2.14): a non-blocking operation still
/// running, not an error.
const IN_PROGRESS: NcclResult = 7;

impl AsyncErrorProbe {
    /// NCCL's text for the communicator's asynchronous error, if it has one.
    pub fn check(&self) -> Option<String> {
        let mut err: NcclResult = 0;
        // SAFETY: `ncclResult_t ncclCommGetAsyncError(ncclComm_t comm,
        // ncclResult_t* asyncError)` on a live communicator writes one code.
        let r = unsafe { (self.lib.api.comm_get_async_error)(self.raw, &mut err) };
        if r != 0 {
            return Some(format!(
                "ncclCommGetAsyncError failed: NCCL error {r}: {}",
                self.lib.error_string(r)
            ));
        }
        (err != 0 && err != IN_PROGRESS)
            .then(|| format!("NCCL error {err}: {}", self.lib.error_string(err)))
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        // SAFETY: `ncclResult_t ncclCommAbort(ncclComm_t comm)` /
        // `ncclCommDestroy(ncclComm_t comm)` on a communicator created by
        // ncclCommInitRank/ncclCommInitAll, torn down exactly once here.
        unsafe {
            if self.failed.get() || std::thread::panicking() {
                (self.lib.api.comm_abort)(self.raw);
            } else {
                (self.lib.api.comm_destroy)(self.raw);
            }
        }
        self.raw = std::ptr::null_mut();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The venv's NCCL wheel file (nvidia-nccl-cu12, pinned by torch 2.7.0's
    /// wheel), found as tests/it/parallel.rs finds it: `$IMGCTL_VENV`, else
    /// the repository's `.venv`. `None` only when neither is set up.
    fn wheel_nccl() -> Option<PathBuf> {
        let (venv, required) = match std::env::var_os(crate::env_vars::IMGCTL_VENV) {
            Some(v) => (PathBuf::from(v), true),
            None => (Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv"), false),
        };
        let found = std::fs::read_dir(venv.join("lib"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages/nvidia/nccl/lib/libnccl.so.2"))
            .find(|p| p.is_file());
        assert!(
            found.is_some() || !required,
            "IMGCTL_VENV={} has no site-packages/nvidia/nccl/lib/libnccl.so.2",
            venv.display()
        );
        found
    }

    #[test]
    fn version_strings() {
        assert_eq!(version_string(22602), "2.26.2");
        assert_eq!(version_string(21005), "2.10.5");
        assert_eq!(version_string(2804), "2.8.4");
    }

    #[test]
    fn missing_library_is_a_clear_error() {
        let e = NcclLibrary::open(Path::new("/nonexistent/libnccl.so.2")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("NCCL is missing: cannot load /nonexistent/libnccl.so.2 ("),
            "{e}"
        );
        assert!(
            matches!(e.downcast_ref::<NcclError>(), Some(NcclError::Load { .. })),
            "{e:?}"
        );
    }

    #[test]
    fn a_library_without_nccl_symbols_names_the_missing_symbol() {
        // libc is mapped in every process and loads fine, but is no NCCL.
        let libc = mapped_library("libc.so.6").expect("libc.so.6 is mapped");
        let e = NcclLibrary::open(&libc).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "{} is not a usable NCCL: symbol ncclGetVersion is missing (",
                libc.display()
            )),
            "{e}"
        );
        assert!(
            matches!(e.downcast_ref::<NcclError>(), Some(NcclError::MissingSymbol { name, .. }) if name == "ncclGetVersion"),
            "{e:?}"
        );
    }

    #[test]
    fn wheel_nccl_opens_reports_its_version_and_has_every_symbol() {
        // The shim needs the three single-process entry points verify uses.
        for s in ["ncclCommInitAll", "ncclGroupStart", "ncclGroupEnd"] {
            assert!(SYMBOLS.contains(&s), "{s} not in {SYMBOLS:?}");
        }
        let Some(path) = wheel_nccl() else {
            eprintln!("skipped: no Python venv with the nvidia-nccl-cu12 wheel");
            return;
        };
        // `open` resolves every entry in SYMBOLS and fails naming a missing one.
        let lib = NcclLibrary::open(&path).unwrap_or_else(|e| panic!("{e:#}"));
        assert_eq!(lib.path(), path);
        let v = lib.version().unwrap();
        // torch 2.7.0's wheel pins nvidia-nccl-cu12 2.26.2; any 2.20+ has the ABI used here.
        assert!(v >= 22000, "NCCL version code {v}");
        // Cross-check the table against the file's own dynamic symbols.
        // SAFETY: the same file again; dlopen returns the copy loaded above.
        let raw = unsafe { libloading::Library::new(&path) }.unwrap();
        for s in SYMBOLS {
            // SAFETY: only the address is looked up; nothing is called.
            let found = unsafe { raw.get::<*const c_void>(s.as_bytes()) };
            assert!(found.is_ok(), "{s} missing from {}", path.display());
        }
        // NCCL's own text for ncclInvalidArgument (4, nccl.h).
        assert!(lib.error_string(4).contains("invalid argument"));
        // A group with nothing in it opens and closes without a GPU; the
        // body's error is returned.
        let e = lib
            .group(|| -> anyhow::Result<()> { anyhow::bail!("body failed") })
            .unwrap_err();
        assert_eq!(e.to_string(), "body failed");
    }

    #[test]
    fn init_all_without_devices_fails_with_nccls_own_error() {
        let Some(path) = wheel_nccl() else {
            eprintln!("skipped: no Python venv with the nvidia-nccl-cu12 wheel");
            return;
        };
        let lib = Arc::new(NcclLibrary::open(&path).unwrap());
        let e = Communicator::init_all(&lib, &[]).unwrap_err();
        // Without a CUDA driver NCCL stops at cudaGetDeviceCount
        // (ncclUnhandledCudaError = 1); with one, at ndev = 0
        // (ncclInvalidArgument = 4) (nccl.h's ncclResult_t).
        let text = e.to_string();
        let code = [1, 4]
            .into_iter()
            .find(|c| text.starts_with(&format!("ncclCommInitAll failed: NCCL error {c}: ")))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(text.ends_with(&lib.error_string(code)), "{text}");
        assert!(
            matches!(e.downcast_ref::<NcclError>(), Some(NcclError::Call { code: c, .. }) if *c == code),
            "{e:?}"
        );
    }
}
