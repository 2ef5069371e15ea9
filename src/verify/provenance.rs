//! Loaded-library provenance: which libcudart, libcublas, libcudnn and libnccl
//! files this process has mapped, which versions those very files report, and
//! which other copies on disk they shadow.
//!
//! It reads /proc/self/maps (with [`crate::sys::procmaps`]), dlopens the
//! exact mapped path (dlopen of a loaded path returns the loaded copy; nothing
//! new is loaded) and calls the libraries' own version functions (both
//! through [`crate::sys::cuda_libs`] and [`crate::sys::nccl`]). It renders
//! no verdicts; the `torch.*_loaded` checks in [`super::torch`] do.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::sys::cuda_libs;

/// A CUDA library whose provenance verify reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LibKind {
    /// The CUDA runtime.
    Cudart,
    /// cuBLAS.
    Cublas,
    /// cuDNN.
    Cudnn,
    /// NCCL.
    Nccl,
}

impl LibKind {
    /// All four, in report order.
    pub const ALL: [LibKind; 4] = [
        LibKind::Cudart,
        LibKind::Cublas,
        LibKind::Cudnn,
        LibKind::Nccl,
    ];

    /// The file-name stem (`libcudnn.so`); sublibraries like
    /// `libcudnn_ops.so` and `libcublasLt.so` do not match it.
    pub fn stem(self) -> &'static str {
        match self {
            LibKind::Cudart => "libcudart.so",
            LibKind::Cublas => "libcublas.so",
            LibKind::Cudnn => "libcudnn.so",
            LibKind::Nccl => "libnccl.so",
        }
    }
    /// Short name (`cudnn`).
    pub fn name(self) -> &'static str {
        match self {
            LibKind::Cudart => "cudart",
            LibKind::Cublas => "cublas",
            LibKind::Cudnn => "cudnn",
            LibKind::Nccl => "nccl",
        }
    }
    /// The pip distribution prefix of the NVIDIA wheel that ships it (CUDA 12
    /// names append `12`; CUDA 13's runtime and cuBLAS wheels drop `_cu`).
    pub fn wheel_prefix(self) -> &'static str {
        match self {
            LibKind::Cudart => "nvidia_cuda_runtime_cu",
            LibKind::Cublas => "nvidia_cublas_cu",
            LibKind::Cudnn => "nvidia_cudnn_cu",
            LibKind::Nccl => "nvidia_nccl_cu",
        }
    }
    /// Whether a file name is this library (`libcudnn.so`, `libcudnn.so.9`, `libcudnn.so.9.1.0`).
    pub fn matches_file(self, file_name: &str) -> bool {
        match file_name.strip_prefix(self.stem()) {
            Some("") => true,
            Some(rest) => {
                rest.starts_with('.')
                    && rest[1..].chars().next().is_some_and(|c| c.is_ascii_digit())
            }
            None => false,
        }
    }
    /// Asks the library at `path` for its version (see [`query_version`]).
    pub fn query_version(self, path: &Path) -> Result<String, String> {
        query_version(self, path)
    }
}

/// The mapped files that are `kind`.
pub fn find_mapped(kind: LibKind, mapped: &[PathBuf]) -> Vec<PathBuf> {
    mapped
        .iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| kind.matches_file(&n.to_string_lossy()))
        })
        .cloned()
        .collect()
}

/// Calls the library's own version function on the copy at `path`:
/// cudaRuntimeGetVersion, cublasGetProperty (no handle needed), cudnnGetVersion,
/// ncclGetVersion. The library must already be mapped (dlopen of its path then
/// returns that same copy).
pub fn query_version(kind: LibKind, path: &Path) -> Result<String, String> {
    if kind == LibKind::Nccl {
        // Opened first as the others are, so a missing file reads the same.
        cuda_libs::check_opens(path)?;
    }
    match kind {
        // CUDART_VERSION = 1000 * major + 10 * minor (cuda_runtime_api.h).
        LibKind::Cudart => {
            cuda_libs::cudart_version(path).map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10))
        }
        LibKind::Cublas => {
            cuda_libs::cublas_version(path).map(|parts| parts.map(|v| v.to_string()).join("."))
        }
        LibKind::Cudnn => cuda_libs::cudnn_version(path).map(decode_cudnn_version),
        LibKind::Nccl => crate::sys::nccl::NcclLibrary::open(path)
            .and_then(|l| l.version())
            .map(crate::sys::nccl::version_string)
            .map_err(|e| e.to_string()),
    }
}

/// Why the CUDA runtime at `path` (already mapped) cannot use a GPU:
/// `cudaGetDeviceCount`'s error with the runtime's own text, e.g. `CUDA error
/// 35 (CUDA driver version is insufficient for CUDA runtime version)`; `None`
/// when it counts devices fine.
pub fn cuda_init_error(path: &Path) -> Option<String> {
    cuda_libs::device_count_error(path)
}

/// cudnnGetVersion's encoding: 9.x is `major*10000 + minor*100 + patch`
/// (cudnn_version.h, CUDNN_VERSION since 9.0); 8.x and older `major*1000 + minor*100 + patch`.
pub fn decode_cudnn_version(v: usize) -> String {
    if v >= 90000 {
        format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100)
    }
}

/// The version of the pip wheel a library file came from, if it sits in a
/// `site-packages/nvidia/<dir>/lib/` folder: the wheel whose dist-info
/// `RECORD` lists that very file (`nvidia/cu13/lib/libcudart.so.13` →
/// `nvidia_cuda_runtime-13.0.96.dist-info` → `13.0.96`). CUDA 12 wheels use
/// one folder per library (`nvidia/cudnn/lib`), CUDA 13's runtime and cuBLAS
/// wheels share `nvidia/cu13/lib`, and the cu12 and cu13 cuDNN wheels both
/// install `nvidia/cudnn/lib/libcudnn.so.9`, so the dist-info name alone
/// cannot tell which wheel a file belongs to; RECORD can.
pub fn wheel_version(kind: LibKind, lib_path: &Path) -> Option<String> {
    let lib_dir = lib_path.parent()?;
    let pkg = lib_dir.parent()?;
    let nvidia = pkg.parent()?;
    if nvidia.file_name()? != "nvidia" || lib_dir.file_name()? != "lib" {
        return None;
    }
    let site = nvidia.parent()?;
    let rel = format!(
        "nvidia/{}/lib/{}",
        pkg.file_name()?.to_str()?,
        lib_path.file_name()?.to_str()?
    );
    let mut dists: Vec<_> = std::fs::read_dir(site)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("nvidia_") && n.ends_with(".dist-info"))
        .collect();
    // The library's own family first (`nvidia_cudnn_cu13` for cuDNN): fewer reads.
    dists.sort_by_key(|n| !n.starts_with(kind.wheel_prefix().trim_end_matches("_cu")));
    dists.into_iter().find_map(|name| {
        let record = std::fs::read_to_string(site.join(&name).join("RECORD")).ok()?;
        let listed = record
            .lines()
            .any(|l| l.split(',').next() == Some(rel.as_str()));
        let (_, version) = name.strip_suffix(".dist-info")?.rsplit_once('-')?;
        listed.then(|| version.to_string())
    })
}

/// The folders the dynamic linker and CUDA images commonly use, plus
/// LD_LIBRARY_PATH: where a second copy of a library would sit.
pub fn system_lib_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(ld) = std::env::var("LD_LIBRARY_PATH") {
        dirs.extend(ld.split(':').filter(|s| !s.is_empty()).map(PathBuf::from));
    }
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/local/cuda/targets/sbsa-linux/lib",
        "/usr/local/nvidia/lib64",
        "/usr/local/nvidia/lib",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// Another copy of a library on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shadowed {
    /// Its path (after resolving symlinks).
    pub path: PathBuf,
    /// Its version, from the file name when it carries one (`libcudnn.so.9.1.0`).
    pub version: Option<String>,
}

/// Files of `kind` in `dirs` that are not the mapped copy (compared after
/// resolving symlinks). They are shadowed: present, but not what runs.
pub fn shadowed_copies(kind: LibKind, mapped: &Path, dirs: &[PathBuf]) -> Vec<Shadowed> {
    let mapped_real = mapped
        .canonicalize()
        .unwrap_or_else(|_| mapped.to_path_buf());
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut names: Vec<_> = entries.flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let name = e.file_name().to_string_lossy().into_owned();
            if !kind.matches_file(&name) {
                continue;
            }
            let real = e.path().canonicalize().unwrap_or_else(|_| e.path());
            if real == mapped_real || !real.is_file() || !seen.insert(real.clone()) {
                continue;
            }
            let real_name = real
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let version = real_name
                .strip_prefix(kind.stem())
                .and_then(|r| r.strip_prefix('.'))
                .filter(|v| v.contains('.'))
                .map(str::to_string);
            out.push(Shadowed {
                path: real,
                version,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d4c0a00000-55d4c0a21000 r--p 00000000 08:01 1234 /usr/bin/imgctl
7f1a2b000000-7f1a2c000000 r-xp 00000000 08:01 42 /opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9
7f1a2c000000-7f1a2c100000 r--p 00100000 08:01 42 /opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9
7f1a2d000000-7f1a2d100000 r-xp 00000000 08:01 43 /opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn_ops.so.9
7f1a2e000000-7f1a2e100000 r-xp 00000000 08:01 44 /opt/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublasLt.so.12
7f1a2f000000-7f1a2f100000 r-xp 00000000 08:01 45 /opt/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12
7f1a30000000-7f1a30100000 rw-p 00000000 00:00 0 
7f1a31000000-7f1a31100000 r-xp 00000000 08:01 46 /tmp/dir with space/libnccl.so.2 (deleted)
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn maps_parser_finds_each_library_once() {
        let files = crate::sys::procmaps::parse_maps(MAPS);
        assert_eq!(files.len(), 6);
        let cudnn = find_mapped(LibKind::Cudnn, &files);
        assert_eq!(
            cudnn,
            vec![PathBuf::from(
                "/opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
            )]
        );
        let cublas = find_mapped(LibKind::Cublas, &files);
        assert_eq!(cublas.len(), 1, "libcublasLt must not count as libcublas");
        assert_eq!(
            find_mapped(LibKind::Nccl, &files),
            vec![PathBuf::from("/tmp/dir with space/libnccl.so.2")]
        );
        assert!(find_mapped(LibKind::Cudart, &files).is_empty());
    }

    #[test]
    fn file_name_matching() {
        assert!(LibKind::Cudnn.matches_file("libcudnn.so.9.1.0"));
        assert!(LibKind::Cudnn.matches_file("libcudnn.so"));
        assert!(!LibKind::Cudnn.matches_file("libcudnn_ops.so.9"));
        assert!(!LibKind::Cublas.matches_file("libcublasLt.so.12"));
        assert!(!LibKind::Cudnn.matches_file("libcudnn.so.bak"));
    }

    #[test]
    fn version_decoding() {
        assert_eq!(decode_cudnn_version(90501), "9.5.1");
        assert_eq!(decode_cudnn_version(8907), "8.9.7");
        assert_eq!(crate::sys::nccl::version_string(22602), "2.26.2");
        assert_eq!(crate::sys::nccl::version_string(2804), "2.8.4");
    }

    #[test]
    fn wheel_version_comes_from_the_record_that_lists_the_file() {
        let site = tempfile::tempdir().unwrap();
        let s = site.path();
        let put = |dist: &str, files: &[&str]| {
            std::fs::create_dir_all(s.join(dist)).unwrap();
            let record: String = files.iter().map(|f| format!("{f},sha256=x,1\n")).collect();
            std::fs::write(s.join(dist).join("RECORD"), record).unwrap();
            for f in files {
                std::fs::create_dir_all(s.join(f).parent().unwrap()).unwrap();
                std::fs::write(s.join(f), b"elf").unwrap();
            }
        };
        // torch 2.11 (cu130) layout, with a stale cu12 cuDNN dist-info beside it.
        put(
            "nvidia_cuda_runtime-13.0.96.dist-info",
            &["nvidia/cu13/lib/libcudart.so.13"],
        );
        put(
            "nvidia_cublas-13.1.0.3.dist-info",
            &["nvidia/cu13/lib/libcublas.so.13"],
        );
        put(
            "nvidia_cudnn_cu12-9.5.1.17.dist-info",
            &["nvidia/cudnn/lib/libcudnn_ops.so.9"],
        );
        put(
            "nvidia_cudnn_cu13-9.19.0.56.dist-info",
            &["nvidia/cudnn/lib/libcudnn.so.9"],
        );
        put(
            "nvidia_nccl_cu13-2.28.9.dist-info",
            &["nvidia/nccl/lib/libnccl.so.2"],
        );
        let v = |kind, rel: &str| wheel_version(kind, &s.join(rel));
        assert_eq!(
            v(LibKind::Cudart, "nvidia/cu13/lib/libcudart.so.13").as_deref(),
            Some("13.0.96")
        );
        assert_eq!(
            v(LibKind::Cublas, "nvidia/cu13/lib/libcublas.so.13").as_deref(),
            Some("13.1.0.3")
        );
        assert_eq!(
            v(LibKind::Cudnn, "nvidia/cudnn/lib/libcudnn.so.9").as_deref(),
            Some("9.19.0.56")
        );
        assert_eq!(
            v(LibKind::Nccl, "nvidia/nccl/lib/libnccl.so.2").as_deref(),
            Some("2.28.9")
        );
        // A file no RECORD lists, or outside nvidia/<dir>/lib, has no wheel version.
        std::fs::write(s.join("nvidia/cu13/lib/libcudart.so.12"), b"elf").unwrap();
        assert_eq!(v(LibKind::Cudart, "nvidia/cu13/lib/libcudart.so.12"), None);
        assert_eq!(
            wheel_version(LibKind::Cudart, Path::new("/usr/lib/libcudart.so.12")),
            None
        );
    }

    #[test]
    fn shadowed_copy_found_and_mapped_copy_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("wheel");
        let sys = dir.path().join("sys");
        std::fs::create_dir_all(&wheel).unwrap();
        std::fs::create_dir_all(&sys).unwrap();
        let mapped = wheel.join("libcudnn.so.9");
        std::fs::write(&mapped, b"wheel").unwrap();
        std::fs::write(sys.join("libcudnn.so.9.1.0"), b"base image").unwrap();
        std::os::unix::fs::symlink(sys.join("libcudnn.so.9.1.0"), sys.join("libcudnn.so.9"))
            .unwrap();
        std::os::unix::fs::symlink(&mapped, sys.join("libcudnn.so")).unwrap();
        std::fs::write(sys.join("libcudnn_ops.so.9.1.0"), b"sub").unwrap();
        let found = shadowed_copies(LibKind::Cudnn, &mapped, &[sys.clone(), wheel.clone()]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].version.as_deref(), Some("9.1.0"));
    }
}
