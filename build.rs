//! Link-time facts for the `torch` feature.
//!
//! 1. The linker's `--as-needed` drops `libtorch_cuda.so`, because no symbol of
//!    ours refers to it directly; libtorch then reports no CUDA on a GPU host.
//!    We force it into DT_NEEDED with `--no-as-needed` around `-ltorch_cuda`.
//! 2. A RUNPATH to the libtorch we built against, so the binary runs without
//!    LD_LIBRARY_PATH, plus `/opt/imgctl/libtorch/lib`, the stable path under
//!    which images built by imgctl expose their own torch (see images/*.j2).
//!
//! Both are checked by tests (tests/it/linking.rs) with `readelf -d`.
use std::env;
use std::path::PathBuf;

/// Where images built by imgctl link their pip-installed torch (see the templates).
const IMAGE_LIBTORCH_LIB: &str = "/opt/imgctl/libtorch/lib";

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_LIB");
    println!("cargo:rerun-if-changed=build.rs");
    if env::var_os("CARGO_FEATURE_TORCH").is_none() {
        return;
    }
    let lib = match env::var_os("LIBTORCH_LIB").or_else(|| env::var_os("LIBTORCH")) {
        Some(dir) => PathBuf::from(dir).join("lib"),
        None => return, // torch-sys reports the missing libtorch itself
    };
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
