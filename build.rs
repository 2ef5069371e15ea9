//! Link-time facts for the `torch` feature.
//!
//! 1. The linker's `--as-needed` drops `libtorch_cuda.so`, because no symbol of
//!    ours refers to it directly; libtorch then reports no CUDA on a GPU host.
//!    We force it into DT_NEEDED with `--no-as-needed` around `-ltorch_cuda`.
//! 2. A RUNPATH to the libtorch we built against, so the binary runs without
//!    LD_LIBRARY_PATH, plus `/opt/imgctl/libtorch/lib`, the stable path under
//!    which images built by imgctl expose their own torch (see images/*.j2).
//!
//! 3. `csrc/torch_ext.cpp` and `csrc/torch_fn.cpp` (autograd functions with
//!    Rust callbacks, torch's current CUDA stream), the C++ of ours: libtorch's
//!    post-accumulate-grad hook (the gradient all-reduce needs it to overlap
//!    backward) and its fused AdamW kernel, which tch does not expose. It is
//!    compiled against the same libtorch headers as torch-sys's own wrapper.
//!
//! 1 and 2 are checked by tests (tests/it/linking.rs) with `readelf -d`.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where images built by imgctl link their pip-installed torch (see the templates).
const IMAGE_LIBTORCH_LIB: &str = "/opt/imgctl/libtorch/lib";

/// The libtorch torch-sys builds against, found as its build script finds it
/// (torch-sys 0.20 `build.rs`, same order): under `LIBTORCH_USE_PYTORCH`, the
/// torch package of `python` (in a virtualenv) or `python3`; else `LIBTORCH`
/// (with `LIBTORCH_INCLUDE` / `LIBTORCH_LIB` overrides), else a system
/// install under `/usr`. Our C++ must see the same headers and C++ ABI.
struct Libtorch {
    include_dirs: Vec<PathBuf>,
    lib: PathBuf,
    cxx11_abi: String,
}

fn locate_libtorch() -> Result<Libtorch, String> {
    if env::var_os("LIBTORCH_USE_PYTORCH").is_some() {
        let python = if env::var_os("VIRTUAL_ENV").is_some() {
            "python"
        } else {
            "python3"
        };
        let script = "import torch\nfrom torch.utils import cpp_extension\n\
                      print('ABI', int(torch._C._GLIBCXX_USE_CXX11_ABI))\n\
                      for p in cpp_extension.include_paths(): print('INCLUDE', p)\n\
                      for p in cpp_extension.library_paths(): print('LIB', p)\n";
        let out = Command::new(python)
            .args(["-c", script])
            .output()
            .map_err(|e| format!("cannot run {python}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{python} could not import torch: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let (mut include_dirs, mut lib, mut cxx11_abi) = (Vec::new(), None, None);
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            match line.split_once(' ') {
                Some(("ABI", v)) => cxx11_abi = Some(v.to_string()),
                Some(("INCLUDE", p)) => include_dirs.push(PathBuf::from(p)),
                Some(("LIB", p)) if lib.is_none() => lib = Some(PathBuf::from(p)),
                _ => {}
            }
        }
        return match (lib, cxx11_abi) {
            (Some(lib), Some(cxx11_abi)) => Ok(Libtorch {
                include_dirs,
                lib,
                cxx11_abi,
            }),
            _ => Err(format!("{python} did not report torch's paths and ABI")),
        };
    }
    let root = match env::var_os("LIBTORCH") {
        Some(dir) => PathBuf::from(dir),
        None if Path::new("/usr/lib/libtorch.so").exists() => PathBuf::from("/usr"),
        None => return Err("neither LIBTORCH nor LIBTORCH_USE_PYTORCH is set".into()),
    };
    let include = env::var_os("LIBTORCH_INCLUDE").map_or_else(|| root.clone(), PathBuf::from);
    let lib = env::var_os("LIBTORCH_LIB").map_or(root, PathBuf::from);
    Ok(Libtorch {
        include_dirs: vec![
            include.join("include"),
            include.join("include/torch/csrc/api/include"),
        ],
        lib: lib.join("lib"),
        cxx11_abi: env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned()),
    })
}

/// Compiles `csrc/torch_ext.cpp` against libtorch's headers, with its C++ ABI.
fn compile_torch_ext(torch: &Libtorch) {
    println!("cargo:rerun-if-changed=csrc/torch_ext.cpp");
    println!("cargo:rerun-if-changed=csrc/torch_fn.cpp");
    cc::Build::new()
        .cpp(true)
        .file("csrc/torch_ext.cpp")
        .file("csrc/torch_fn.cpp")
        .includes(&torch.include_dirs)
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={}", torch.cxx11_abi))
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(false)
        .compile("imgctl_torch_ext");
}

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=LIBTORCH_INCLUDE");
    println!("cargo:rerun-if-env-changed=LIBTORCH_USE_PYTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    println!("cargo:rerun-if-env-changed=VIRTUAL_ENV");
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let torch = locate_libtorch().unwrap_or_else(|why| {
        panic!(
            "imgctl's torch feature compiles csrc/torch_ext.cpp against libtorch's headers, \
             but libtorch was not found ({why}); set LIBTORCH to a libtorch or torch package \
             folder (with include/ and lib/), or LIBTORCH_USE_PYTORCH=1, as for tch \
             (or build with --no-default-features)"
        )
    });
    compile_torch_ext(&torch);
    let lib = torch.lib;
    // Resolve the repository's `.libtorch` symlink so the RUNPATH names the real
    // directory, which stays valid when the binary is copied elsewhere on this host.
    let lib = lib.canonicalize().unwrap_or(lib);
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        println!("cargo:rustc-cfg=imgctl_torch_cuda");
    }
    println!(
        "cargo:rustc-link-arg=-Wl,--enable-new-dtags,-rpath,{}:{IMAGE_LIBTORCH_LIB}",
        lib.display()
    );
    println!("cargo:rustc-check-cfg=cfg(imgctl_torch_cuda)");
}
