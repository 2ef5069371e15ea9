//! NVRTC, CUDA's run-time compiler (`libnvrtc.so.<major>`), loaded with
//! dlopen: imgctl's own CUDA kernels (`train::kernels`) are compiled from
//! source on the machine that runs them, for its exact architecture, so no
//! CUDA toolkit is needed at build time.
//!
//! Every CUDA torch wheel depends on the NVRTC wheel: torch 2.7's cu126 on
//! `nvidia-cuda-nvrtc-cu12` (`site-packages/nvidia/cuda_nvrtc/lib/libnvrtc.so.12`),
//! torch 2.11's cu130 on `nvidia-cuda-nvrtc` 13.x (`nvidia/cu13/lib/libnvrtc.so.13`).
//! [`candidates`] lists them beside the libtorch this process mapped, after
//! `IMGCTL_NVRTC`. NVRTC 13 finds its `libnvrtc-builtins.so.13.<minor>` only
//! through the loader's search path, which a wheel is not on: [`Nvrtc::open`]
//! maps the builtins beside the library first.
//!
//! Owns the symbols, their signatures and the program's lifetime; which
//! source, options and architecture to compile belongs to the caller.
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};

type Program = *mut c_void;
type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> c_int;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> c_int;
type GetFn = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;
type NumArchsFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type ArchsFn = unsafe extern "C" fn(*mut c_int) -> c_int;

/// What a compilation produced: a cubin for an `sm_XX` target, PTX for a
/// `compute_XX` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Image {
    /// Machine code for one architecture (`nvrtcGetCUBIN`).
    Cubin(Vec<u8>),
    /// PTX text, NUL-terminated (`nvrtcGetPTX`), for the driver to JIT.
    Ptx(Vec<u8>),
}

impl Image {
    /// The bytes the driver loads (`cuModuleLoadData`).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Image::Cubin(b) | Image::Ptx(b) => b,
        }
    }
}

/// A loaded NVRTC.
pub struct Nvrtc {
    path: PathBuf,
    create: CreateFn,
    compile: CompileFn,
    destroy: DestroyFn,
    log_size: SizeFn,
    log: GetFn,
    cubin_size: SizeFn,
    cubin: GetFn,
    ptx_size: SizeFn,
    ptx: GetFn,
    error_string: ErrorStringFn,
    version: VersionFn,
    num_archs: NumArchsFn,
    archs: ArchsFn,
    // Kept last: the function pointers above live as long as the library.
    _builtins: Vec<libloading::Library>,
    _lib: libloading::Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc").field("path", &self.path).finish()
    }
}

/// The NVRTC files to try, best first: `IMGCTL_NVRTC`, then the
/// `libnvrtc.so.<major>` files of the NVIDIA wheels beside the torch package
/// whose `libtorch_cpu.so` this process mapped (`site-packages/nvidia/*/lib`),
/// highest major first. Only files that exist.
pub fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os(crate::env_vars::IMGCTL_NVRTC) {
        out.push(PathBuf::from(p));
    }
    let torch_lib = super::procmaps::mapped_library("libtorch_cpu.so")
        .and_then(|p| p.parent().map(Path::to_path_buf));
    if let Some(site) = torch_lib.as_deref().and_then(|l| l.parent()?.parent()) {
        out.extend(wheel_nvrtcs(&site.join("nvidia")));
    }
    out.retain(|p| p.is_file());
    out.dedup();
    out
}

/// The `libnvrtc.so.<major>` files under `nvidia_dir/*/lib`, highest major first.
pub fn wheel_nvrtcs(nvidia_dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = Vec::new();
    let Ok(dirs) = std::fs::read_dir(nvidia_dir) else {
        return Vec::new();
    };
    for d in dirs.flatten() {
        let Ok(files) = std::fs::read_dir(d.path().join("lib")) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name();
            let Some(major) = name
                .to_str()
                .and_then(|n| n.strip_prefix("libnvrtc.so."))
                .and_then(|m| m.parse::<u32>().ok())
            else {
                continue;
            };
            found.push((major, f.path()));
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    found.into_iter().map(|(_, p)| p).collect()
}

impl Nvrtc {
    /// The first of [`candidates`] that loads; the error names each file
    /// tried and why, or that none was found.
    pub fn locate() -> Result<Self, String> {
        let tried = candidates();
        if tried.is_empty() {
            return Err(format!(
                "no libnvrtc.so.<major> beside the torch this process runs on \
                 (set {} to one)",
                crate::env_vars::IMGCTL_NVRTC
            ));
        }
        let mut why = Vec::new();
        for p in &tried {
            match Self::open(p) {
                Ok(n) => return Ok(n),
                Err(e) => why.push(e),
            }
        }
        Err(why.join("; "))
    }

    /// Loads the NVRTC at `path`, with the `libnvrtc-builtins.so.*` beside it
    /// mapped first (so NVRTC's own dlopen of them by soname finds them).
    pub fn open(path: &Path) -> Result<Self, String> {
        let mut builtins = Vec::new();
        if let Some(dir) = path.parent() {
            let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
                .map(|r| {
                    r.flatten()
                        .map(|e| e.path())
                        .filter(|p| {
                            p.file_name()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| n.starts_with("libnvrtc-builtins.so."))
                        })
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            for b in names {
                // SAFETY: NVRTC's builtins library has no initialisers with
                // side effects; it only holds the headers' text.
                if let Ok(l) = unsafe { libloading::Library::new(&b) } {
                    builtins.push(l);
                }
            }
        }
        // SAFETY: dlopen of NVIDIA's NVRTC, whose initialisers only set up
        // the library's own state.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("cannot load {}: {e}", path.display()))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the types above are the signatures of nvrtc.h
                // (CUDA 12 and 13 alike); nvrtcResult is an int enum.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| {
                    format!("{} is not a usable NVRTC ({}: {e})", path.display(), $name)
                })?
            };
        }
        Ok(Self {
            path: path.to_path_buf(),
            create: sym!("nvrtcCreateProgram"),
            compile: sym!("nvrtcCompileProgram"),
            destroy: sym!("nvrtcDestroyProgram"),
            log_size: sym!("nvrtcGetProgramLogSize"),
            log: sym!("nvrtcGetProgramLog"),
            cubin_size: sym!("nvrtcGetCUBINSize"),
            cubin: sym!("nvrtcGetCUBIN"),
            ptx_size: sym!("nvrtcGetPTXSize"),
            ptx: sym!("nvrtcGetPTX"),
            error_string: sym!("nvrtcGetErrorString"),
            version: sym!("nvrtcVersion"),
            num_archs: sym!("nvrtcGetNumSupportedArchs"),
            archs: sym!("nvrtcGetSupportedArchs"),
            _builtins: builtins,
            _lib: lib,
        })
    }

    /// The file this NVRTC was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `(major, minor)` of this NVRTC (`nvrtcVersion`).
    pub fn version(&self) -> (i32, i32) {
        let (mut a, mut b) = (0, 0);
        // SAFETY: two out-pointers.
        unsafe { (self.version)(&mut a, &mut b) };
        (a, b)
    }

    /// The `sm_XX` numbers this NVRTC compiles for (80 for sm_80).
    pub fn supported_archs(&self) -> Vec<i32> {
        let mut n: c_int = 0;
        // SAFETY: one out-pointer.
        if unsafe { (self.num_archs)(&mut n) } != 0 || n <= 0 {
            return Vec::new();
        }
        let mut v = vec![0 as c_int; n as usize];
        // SAFETY: `v` holds the `n` ints NVRTC writes.
        if unsafe { (self.archs)(v.as_mut_ptr()) } != 0 {
            return Vec::new();
        }
        v
    }

    fn describe(&self, rc: c_int) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string for any code.
        let p = unsafe { (self.error_string)(rc) };
        if p.is_null() {
            return format!("NVRTC error {rc}");
        }
        // SAFETY: a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Compiles `source` (named `name` in messages) with `options` (one per
    /// element: `--gpu-architecture=sm_90`, `-DNAME=1`, ...). A `sm_XX` target
    /// gives a [`Image::Cubin`], a `compute_XX` one [`Image::Ptx`]. The error
    /// holds NVRTC's log (its first lines).
    pub fn compile(&self, source: &str, name: &str, options: &[String]) -> Result<Image, String> {
        let src = CString::new(source).map_err(|_| format!("{name} holds a NUL byte"))?;
        let cname = CString::new(name).map_err(|_| format!("{name:?} holds a NUL byte"))?;
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()).map_err(|_| format!("option {o:?} holds a NUL")))
            .collect::<Result<_, _>>()?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: NUL-terminated source and name, no headers.
        let rc = unsafe {
            (self.create)(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(format!("nvrtcCreateProgram: {}", self.describe(rc)));
        }
        let result = self.compile_program(prog, &opt_ptrs, options);
        // SAFETY: the program created above, destroyed once.
        unsafe { (self.destroy)(&mut prog) };
        result.map_err(|e| format!("{name}: {e}"))
    }

    fn compile_program(
        &self,
        prog: Program,
        opts: &[*const c_char],
        options: &[String],
    ) -> Result<Image, String> {
        // SAFETY: a live program and `opts.len()` NUL-terminated options.
        let rc = unsafe { (self.compile)(prog, opts.len() as c_int, opts.as_ptr()) };
        if rc != 0 {
            let log = self.read(prog, self.log_size, self.log).unwrap_or_default();
            let log = String::from_utf8_lossy(&log);
            let first: Vec<&str> = log
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(6)
                .collect();
            return Err(format!("{} ({})", self.describe(rc), first.join(" | ")));
        }
        let cubin = options.iter().any(|o| {
            (o.starts_with("--gpu-architecture") || o.starts_with("-arch")) && o.contains("sm_")
        });
        if cubin {
            self.read(prog, self.cubin_size, self.cubin)
                .map(Image::Cubin)
        } else {
            self.read(prog, self.ptx_size, self.ptx).map(Image::Ptx)
        }
    }

    fn read(&self, prog: Program, size: SizeFn, get: GetFn) -> Result<Vec<u8>, String> {
        let mut n = 0usize;
        // SAFETY: a compiled program and one out-pointer.
        let rc = unsafe { size(prog, &mut n) };
        if rc != 0 {
            return Err(self.describe(rc));
        }
        let mut buf = vec![0u8; n];
        if n == 0 {
            return Ok(buf);
        }
        // SAFETY: `buf` holds the `n` bytes NVRTC writes.
        let rc = unsafe { get(prog, buf.as_mut_ptr().cast()) };
        if rc != 0 {
            return Err(self.describe(rc));
        }
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_nvrtcs_orders_majors_and_skips_other_files() {
        let dir = tempfile::tempdir().unwrap();
        for (sub, file) in [
            ("cuda_nvrtc/lib", "libnvrtc.so.12"),
            ("cu13/lib", "libnvrtc.so.13"),
            ("cu13/lib", "libnvrtc-builtins.so.13.0"),
            ("cu13/lib", "libnvrtc.alt.so.13"),
        ] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
            std::fs::write(dir.path().join(sub).join(file), b"").unwrap();
        }
        let got = wheel_nvrtcs(dir.path());
        let names: Vec<_> = got
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["libnvrtc.so.13", "libnvrtc.so.12"]);
        assert!(wheel_nvrtcs(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn a_missing_file_is_one_line_naming_it() {
        let e = Nvrtc::open(Path::new("/nonexistent/libnvrtc.so.12")).unwrap_err();
        assert!(
            e.starts_with("cannot load /nonexistent/libnvrtc.so.12"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }
}
