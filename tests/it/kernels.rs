//! imgctl's CUDA kernels compile, without a GPU: NVRTC (the torch wheel's
//! 12.x, and the 13.x scripts/setup.sh puts behind `.nvrtc`, what torch
//! 2.11+cu130 ships) compiles `group_norm_silu.cu` to machine code for
//! sm_80 (A100), sm_90 (H100/H200) and sm_100 (B200), for fp32, bf16 and
//! fp16 activations. A syntax or API error fails here, not on a device.
#![cfg(feature = "torch")]

use std::path::PathBuf;

use imgctl::sys::nvrtc::{wheel_nvrtcs, Image, Nvrtc};
use imgctl::train::kernels::group_norm::{compile, KERNELS, SOURCE};
use tch::Kind;

const ARCHS: [i32; 3] = [80, 90, 100];

/// Every NVRTC at hand: the one beside this process's torch, then `.nvrtc`.
fn nvrtcs() -> Vec<PathBuf> {
    let mut v = imgctl::sys::nvrtc::candidates();
    let extra = crate::common::repo_root().join(".nvrtc");
    v.extend(wheel_nvrtcs(&extra.join("..").join("..")));
    v.extend(
        std::fs::read_dir(&extra)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("libnvrtc.so."))
            }),
    );
    v.sort();
    v.dedup();
    v
}

#[test]
fn the_group_norm_kernels_compile_for_sm80_sm90_and_sm100() {
    let paths = nvrtcs();
    assert!(
        !paths.is_empty(),
        "no NVRTC found beside torch nor under .nvrtc: run scripts/setup.sh"
    );
    let mut compiled = Vec::new();
    for path in &paths {
        let nvrtc = Nvrtc::open(path).unwrap_or_else(|e| panic!("{e}"));
        let supported = nvrtc.supported_archs();
        for arch in ARCHS.into_iter().filter(|a| supported.contains(a)) {
            for kind in [Kind::Float, Kind::BFloat16, Kind::Half] {
                let image = compile(&nvrtc, arch, kind).unwrap_or_else(|e| {
                    panic!("NVRTC {:?} for sm_{arch} {kind:?}: {e}", nvrtc.version())
                });
                let Image::Cubin(bytes) = &image else {
                    panic!("sm_{arch} gave PTX, not a cubin");
                };
                assert_eq!(&bytes[..4], b"\x7fELF", "a cubin is an ELF file");
                for name in KERNELS {
                    let found = bytes.windows(name.len()).any(|w| w == name.as_bytes());
                    assert!(found, "sm_{arch} {kind:?}: no kernel {name}");
                }
            }
            compiled.push(arch);
        }
    }
    for arch in ARCHS {
        assert!(
            compiled.contains(&arch),
            "no NVRTC at hand compiles sm_{arch} ({paths:?}); scripts/setup.sh installs NVRTC 13"
        );
    }
}

#[test]
fn a_broken_kernel_is_an_error_with_nvrtcs_log() {
    let path = nvrtcs().into_iter().next().expect("an NVRTC");
    let nvrtc = Nvrtc::open(&path).unwrap();
    let broken = SOURCE.replace("__syncthreads();", "__syncthreadz();");
    let e = nvrtc
        .compile(
            &broken,
            "broken.cu",
            &["--gpu-architecture=sm_80".into(), "-DIMGCTL_T=1".into()],
        )
        .unwrap_err();
    assert!(e.starts_with("broken.cu: NVRTC_ERROR_COMPILATION"), "{e}");
    assert!(e.contains("__syncthreadz"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    let e = nvrtc
        .compile(SOURCE, "no_type.cu", &["--gpu-architecture=sm_80".into()])
        .unwrap_err();
    assert!(e.contains("compile with -DIMGCTL_T"), "{e}");
}
