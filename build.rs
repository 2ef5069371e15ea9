//! Link-time facts for the `torch` feature.
//!
//! 1. The linker's `--as-needed` drops `libtorch_cuda.so`, because no symbol of
//!    ours refers to it directly; libtorch then reports no CUDA on a GPU host.
//!    We force it into DT_NEEDED with `--no-as-needed` around `-ltorch_cuda`.
//! 2. A RUNPATH to the libtorch we built against, so the binary runs without
//!    LD_LIBRARY_PATH, plus `/opt/imgctl/libtorch/lib`, the stable path under
//!    which images built by imgctl expose their own torch (see images/*.j2).
//!
//! 3. `csrc/torch_ext.cpp`, the one piece of C++ of ours: libtorch's
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

/// The libtorch directory (with `include/` and `lib/`) torch-sys builds
/// against: `LIBTORCH`, else the torch package of `python3` (or
/// `PYTHON_SYS_EXECUTABLE`) under `LIBTORCH_USE_PYTORCH`, as torch-sys does.
fn libtorch_root() -> Option<PathBuf> {
    if let Some(dir) = env::var_os("LIBTORCH") {
        return Some(PathBuf::from(dir));
    }
    env::var_os("LIBTORCH_USE_PYTORCH")?;
    let python = env::var_os("PYTHON_SYS_EXECUTABLE").unwrap_or_else(|| "python3".into());
    let out = Command::new(python)
        .args([
            "-c",
            "import os, torch; print(os.path.dirname(torch.__file__))",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Compiles `csrc/torch_ext.cpp` against `include` (libtorch's headers).
fn compile_torch_ext(include: &Path) {
    println!("cargo:rerun-if-changed=csrc/torch_ext.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH_CXX11_ABI");
    let abi = env::var("LIBTORCH_CXX11_ABI").unwrap_or_else(|_| "1".to_owned());
    cc::Build::new()
        .cpp(true)
        .file("csrc/torch_ext.cpp")
        .include(include)
        .include(include.join("torch/csrc/api/include"))
        .flag("-std=c++17")
        .flag(format!("-D_GLIBCXX_USE_CXX11_ABI={abi}"))
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(false)
        .compile("imgctl_torch_ext");
}

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=LIBTORCH_INCLUDE");
    println!("cargo:rerun-if-env-changed=LIBTORCH_USE_PYTORCH");
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let Some(root) = libtorch_root() else {
        return; // torch-sys reports the missing libtorch itself
    };
    let include = env::var_os("LIBTORCH_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.clone());
    compile_torch_ext(&include.join("include"));
    let lib = env::var_os("LIBTORCH_LIB")
        .map(PathBuf::from)
        .unwrap_or(root)
        .join("lib");
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
