//! The two linking facts of the `torch` feature, checked on the built binary:
//! libtorch_cuda.so is NEEDED (not dropped by --as-needed), and a RUNPATH
//! points at libtorch so the binary runs without LD_LIBRARY_PATH.
#![cfg(feature = "torch")]

use std::process::Command;

use crate::common::{imgctl_bin, texts};

fn dynamic_section() -> String {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(imgctl_bin())
        .output()
        .expect("run readelf -d (binutils)");
    assert!(out.status.success(), "readelf failed: {:?}", out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn libtorch_cuda_is_needed() {
    let libdir = std::fs::canonicalize(crate::common::repo_root().join(".libtorch/lib"))
        .or_else(|_| {
            std::fs::canonicalize(
                std::path::Path::new(&std::env::var("LIBTORCH").unwrap()).join("lib"),
            )
        })
        .expect("libtorch lib dir");
    if !libdir.join("libtorch_cuda.so").exists() {
        panic!("the libtorch under test ({}) has no libtorch_cuda.so: scripts/setup.sh installs the CUDA wheel", libdir.display());
    }
    let dynamic = dynamic_section();
    assert!(
        dynamic.contains("Shared library: [libtorch_cuda.so]"),
        "libtorch_cuda.so is not NEEDED:\n{dynamic}"
    );
    assert!(
        dynamic.contains("Shared library: [libtorch_cpu.so]"),
        "libtorch_cpu.so is not NEEDED:\n{dynamic}"
    );
}

#[test]
fn runpath_points_at_libtorch() {
    let dynamic = dynamic_section();
    let runpath = dynamic
        .lines()
        .find(|l| l.contains("(RUNPATH)"))
        .unwrap_or_else(|| panic!("no RUNPATH in the binary:\n{dynamic}"));
    let libdir = std::fs::canonicalize(crate::common::repo_root().join(".libtorch/lib"))
        .or_else(|_| {
            std::fs::canonicalize(
                std::path::Path::new(&std::env::var("LIBTORCH").unwrap()).join("lib"),
            )
        })
        .unwrap();
    assert!(
        runpath.contains(&*libdir.to_string_lossy()),
        "RUNPATH {runpath} does not name {}",
        libdir.display()
    );
    assert!(
        runpath.contains("/opt/imgctl/libtorch/lib"),
        "RUNPATH {runpath} lacks the image libtorch path"
    );
}

#[test]
fn runs_without_ld_library_path() {
    let out = Command::new(imgctl_bin())
        .arg("--version")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success(),
        "imgctl --version failed without LD_LIBRARY_PATH: {stderr}"
    );
    assert!(stdout.starts_with("imgctl "), "{stdout}");
}
