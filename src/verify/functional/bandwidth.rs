//! The copy-bandwidth checks: device memory (`func.mem_bandwidth`),
//! pinned host↔device (`func.h2d_bandwidth`, `func.d2h_bandwidth`) and GPU
//! to GPU over P2P (`func.p2p_bandwidth`), each judged against a floor from
//! the datasheet or the PCIe link NVML reports.
//!
//! This file renders nothing and must not run matrix products or NCCL.
use std::time::Instant;

use tch::{Device, Kind, TchError, Tensor};

use super::device::{device_or_skip, expected_on, gpu_name, sync};
use super::thresholds::{
    judge_rate, pcie_lane_gbs, peaks_for, MEM_FLOOR_FRACTION, PCIE_FLOOR_FRACTION,
};
use crate::gpus::expected::{self, Metric, NoReference};
use crate::verify::check::CheckResult;
use crate::verify::context::Context;

/// GB/s of `dst.copy_(src)` repeated `iters` times, counting `bytes_per_copy`.
fn copy_rate(
    dst: &mut Tensor,
    src: &Tensor,
    devices: &[Device],
    bytes_per_copy: f64,
    iters: usize,
) -> Result<f64, TchError> {
    // Two untimed copies: first-touch of the pages, P2P mappings.
    dst.f_copy_(src)?;
    dst.f_copy_(src)?;
    for d in devices {
        sync(*d)?;
    }
    let start = Instant::now();
    for _ in 0..iters {
        dst.f_copy_(src)?;
    }
    for d in devices {
        sync(*d)?;
    }
    Ok(bytes_per_copy * iters as f64 / start.elapsed().as_secs_f64() / 1e9)
}

/// 1 GiB buffers: several times any L2 (H200: 60 MB) so DRAM is measured.
const BUF_BYTES: i64 = 1 << 30;

/// The body of `func.mem_bandwidth`.
pub fn mem_bandwidth(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "func.mem_bandwidth";
    let g = gpu.unwrap_or(0);
    let device = match device_or_skip(ID, g) {
        Ok(d) => d,
        Err(r) => return vec![*r],
    };
    let run = || -> Result<f64, TchError> {
        let src = Tensor::f_ones([BUF_BYTES], (Kind::Uint8, device))?;
        let mut dst = Tensor::f_empty([BUF_BYTES], (Kind::Uint8, device))?;
        // A device copy reads and writes every byte: 2 × size moved.
        // 50 copies of 1 GiB: ~25 ms at the ~4.3 TB/s an H200 reaches.
        copy_rate(&mut dst, &src, &[device], 2.0 * BUF_BYTES as f64, 50)
    };
    let gbs = match run() {
        Ok(v) => v,
        Err(e) => return vec![CheckResult::error(ID, format!("device copy failed: {e}"))],
    };
    let tbs = gbs / 1e3;
    let floor = gpu_name(ctx, g).and_then(|name| {
        peaks_for(&name).map(|p| {
            (
                MEM_FLOOR_FRACTION * p.mem_tbs,
                format!("70% of {name} datasheet {} TB/s", p.mem_tbs),
            )
        })
    });
    let mut r = judge_rate(ID, "device copy (read+write)", tbs, "TB/s", floor).expect(expected_on(
        ctx,
        g,
        Metric::MemCopy,
    ));
    r.measured = Some(format!("{tbs:.2} TB/s (read+write)"));
    vec![r]
}

fn host_copy(ctx: &Context, gpu: Option<u32>, id: &str, to_device: bool) -> Vec<CheckResult> {
    let g = gpu.unwrap_or(0);
    let device = match device_or_skip(id, g) {
        Ok(d) => d,
        Err(r) => return vec![*r],
    };
    let run = || -> Result<f64, TchError> {
        let host = Tensor::f_ones([BUF_BYTES / 4], (Kind::Uint8, Device::Cpu))?;
        // Without tch's device argument, which torch deprecates with a warning.
        let host =
            crate::sys::torch_ext::pin_memory(&host).map_err(|e| TchError::Torch(e.to_string()))?;
        let dev = Tensor::f_ones([BUF_BYTES / 4], (Kind::Uint8, device))?;
        if to_device {
            let mut d = dev;
            copy_rate(&mut d, &host, &[device], (BUF_BYTES / 4) as f64, 10)
        } else {
            let mut h = host;
            copy_rate(&mut h, &dev, &[device], (BUF_BYTES / 4) as f64, 10)
        }
    };
    let what = if to_device {
        "host→device"
    } else {
        "device→host"
    };
    let gbs = match run() {
        Ok(v) => v,
        Err(e) => return vec![CheckResult::error(id, format!("{what} copy failed: {e}"))],
    };
    // Floor: half the payload rate of the link NVML says the GPU can train at.
    let link = ctx.nvml_backend(id).ok().and_then(|b| b.pcie_link(g).ok());
    let expect = match &link {
        Some(l) => expected::host_copy(l.max_gen, l.max_width),
        None => Err(NoReference(format!(
            "no reference: NVML did not report GPU {g}'s PCIe link"
        ))),
    };
    let floor = link
        .and_then(|l| pcie_lane_gbs(l.max_gen).map(|lane| (l, lane)))
        .map(|(l, lane)| {
            let full = lane * l.max_width as f64;
            (
                PCIE_FLOOR_FRACTION * full,
                format!(
                    "50% of PCIe Gen{} x{} {full:.1} GB/s",
                    l.max_gen, l.max_width
                ),
            )
        });
    let mut r =
        judge_rate(id, &format!("{what} (pinned, 256 MiB)"), gbs, "GB/s", floor).expect(expect);
    if r.status == crate::verify::result::Status::Fail {
        // Host copies also depend on NUMA placement and the IOMMU: a WARN, not a verdict on the GPU.
        r.status = crate::verify::result::Status::Warn;
        r.hint = Some(
            "check NUMA affinity (`nvidia-smi topo -m`), the IOMMU setting and nvml.pcie".into(),
        );
    }
    vec![r]
}

/// The body of `func.h2d_bandwidth`.
pub fn h2d_bandwidth(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    host_copy(ctx, gpu, "func.h2d_bandwidth", true)
}

/// The body of `func.d2h_bandwidth`.
pub fn d2h_bandwidth(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    host_copy(ctx, gpu, "func.d2h_bandwidth", false)
}

/// The body of `func.p2p_bandwidth`.
pub fn p2p_bandwidth(ctx: &Context, _: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "func.p2p_bandwidth";
    if !crate::verify::torch::cuda_available() {
        return vec![CheckResult::skip(
            ID,
            "CUDA not available to torch (see torch.cuda_available)",
        )];
    }
    let n = tch::Cuda::device_count() as u32;
    if n < 2 {
        return vec![CheckResult::skip(ID, format!("{n} GPU(s): no pairs"))];
    }
    let nvml = ctx.nvml_backend(ID).ok();
    let mut out = Vec::new();
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            if let Some(Ok(Err(why))) = nvml.as_ref().map(|x| x.p2p_read(a, b)) {
                out.push(
                    CheckResult::skip(ID, format!("no P2P between GPU {a} and {b} ({why})"))
                        .gpu(a)
                        .peer(b),
                );
                continue;
            }
            let (da, db) = (Device::Cuda(a as usize), Device::Cuda(b as usize));
            let run = || -> Result<f64, TchError> {
                let src = Tensor::f_ones([BUF_BYTES / 4], (Kind::Uint8, da))?;
                let mut dst = Tensor::f_empty([BUF_BYTES / 4], (Kind::Uint8, db))?;
                copy_rate(&mut dst, &src, &[da, db], (BUF_BYTES / 4) as f64, 10)
            };
            out.push(match run() {
                Ok(gbs) => judge_rate(ID, &format!("GPU {a} → GPU {b}"), gbs, "GB/s", None)
                    .expect(expected_on(ctx, a, Metric::P2pCopy))
                    .gpu(a)
                    .peer(b),
                Err(e) => CheckResult::error(ID, format!("copy GPU {a} → {b} failed: {e}"))
                    .gpu(a)
                    .peer(b),
            });
        }
    }
    out
}
