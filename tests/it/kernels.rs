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

#[test]
fn groupnorm_fused_on_the_cpu_is_a_usage_error_for_training_and_benchmark() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let out_s = out_dir.to_str().unwrap();
    for (extra, line, hint) in [
        (
            &["--device", "cpu"][..],
            "error: --groupnorm fused runs CUDA kernels, and this run is on the CPU",
            "hint: drop --groupnorm fused (or use --groupnorm aten) on the CPU, or train on a GPU",
        ),
        (
            &["--device", "cpu", "--channels-last", "--benchmark"][..],
            "error: --groupnorm fused runs CUDA kernels, and this run is on the CPU",
            "hint: drop --groupnorm fused (or use --groupnorm aten) on the CPU, or train on a GPU",
        ),
    ] {
        let mut args = vec![
            "train-demo",
            "--preset",
            "tiny",
            "--steps",
            "1",
            "--out",
            out_s,
        ];
        args.extend(["--groupnorm", "fused"]);
        args.extend(extra);
        let out = crate::common::imgctl(&args);
        let (stdout, stderr) = crate::common::texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.first().copied(), Some(line), "{stderr}");
        assert_eq!(lines.get(1).copied(), Some(hint), "{stderr}");
        assert!(
            !out_dir.exists(),
            "a refused run wrote {}",
            out_dir.display()
        );
    }
    let out = crate::common::imgctl(&["train-demo", "--groupnorm", "fast"]);
    let (_, stderr) = crate::common::texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[possible values: aten, fused]"),
        "{stderr}"
    );
}

#[test]
fn a_fused_model_on_the_cpu_runs_atens_kernels_unchanged() {
    use imgctl::train::model::{UNet2DModel, UNetConfig};
    use tch::{nn::VarStore, Device, Tensor};
    let cfg = UNetConfig::tiny();
    tch::manual_seed(0);
    let vs = VarStore::new(Device::Cpu);
    let mut m = UNet2DModel::try_new(&vs.root(), &cfg).unwrap();
    m.set_channels_last(true);
    let x = Tensor::randn([2, cfg.in_channels, 16, 16], (Kind::Float, Device::Cpu));
    let t = Tensor::from_slice(&[3i64, 700]);
    let plain = m.forward(&x, &t);
    m.set_fused_group_norm(true);
    let fused = m.forward(&x, &t);
    assert!(
        plain.equal(&fused),
        "the CPU has no fused kernels: ATen's must run"
    );
}
