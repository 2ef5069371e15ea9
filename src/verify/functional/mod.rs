//! Functional checks (`func.*`, `--level full`): per GPU a bf16, an fp32 and a
//! TF32 matrix product checked against a float64 CPU reference, with achieved
//! TFLOP/s; device-memory bandwidth; host↔device copy bandwidth; P2P copy
//! bandwidth per pair; and an NCCL all-reduce across all GPUs with its result
//! checked and its bus bandwidth.
//!
//! Bodies need tch (the `torch` feature); without it the ids report SKIP.
//! NCCL is reached through a small libloading shim over the very
//! `libnccl.so.2` torch mapped (found in /proc/self/maps), never by soname
//! search. Thresholds are stated in every result.
//!
//! This file owns the registry; the thresholds with their sources and the
//! judging of a rate live in `thresholds.rs`; the tch bodies live one job per file: `matmul.rs`
//! (products), `bandwidth.rs` (copies), `nccl.rs` (the all-reduce), with
//! `device.rs` for what they share. Nothing here renders output.
//!
//! Part: the verify wing (`docs/architecture.md`).
use super::check::{FnCheck, Level, Scope};

mod thresholds;
pub use thresholds::{
    allreduce_busbw, fp32_matmul_uses_tf32, judge_rate, pcie_lane_gbs, peaks_for, Peaks,
    BF16_REL_ERR, ELEMENT_ERR_FACTOR, FLOOR_FRACTION, FP32_REL_ERR, MEM_FLOOR_FRACTION,
    PCIE_FLOOR_FRACTION, TF32_REL_ERR,
};

/// The functional checks, in run order.
pub fn checks() -> Vec<FnCheck> {
    let per_gpu = |id, description, run| FnCheck {
        id,
        description,
        level: Level::Full,
        scope: Scope::PerGpu,
        needs_gpu: true,
        run,
    };
    vec![
        per_gpu(
            "func.matmul_bf16",
            "bf16 matmul vs float64 CPU reference; TFLOP/s",
            imp::matmul_bf16,
        ),
        per_gpu(
            "func.matmul_fp32",
            "fp32 matmul vs float64 CPU reference; TFLOP/s",
            imp::matmul_fp32,
        ),
        per_gpu(
            "func.matmul_tf32",
            "fp32 matmul on TF32 tensor cores vs float64 CPU reference; TFLOP/s",
            imp::matmul_tf32,
        ),
        per_gpu(
            "func.mem_bandwidth",
            "device-memory copy bandwidth",
            imp::mem_bandwidth,
        ),
        per_gpu(
            "func.h2d_bandwidth",
            "host-to-device copy bandwidth (pinned)",
            imp::h2d_bandwidth,
        ),
        per_gpu(
            "func.d2h_bandwidth",
            "device-to-host copy bandwidth (pinned)",
            imp::d2h_bandwidth,
        ),
        FnCheck {
            id: "func.p2p_bandwidth",
            description: "P2P copy bandwidth for each GPU pair with P2P",
            level: Level::Full,
            scope: Scope::Node,
            needs_gpu: true,
            run: imp::p2p_bandwidth,
        },
        FnCheck {
            id: "func.nccl_allreduce",
            description: "NCCL all-reduce across all GPUs: result and bus bandwidth",
            level: Level::Full,
            scope: Scope::Node,
            needs_gpu: true,
            run: imp::nccl_allreduce,
        },
    ]
}

#[cfg(not(feature = "torch"))]
mod imp {
    use crate::verify::context::Context;
    use crate::verify::result::CheckResult;

    /// The body of `func.matmul_bf16`.
    pub fn matmul_bf16(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("func.matmul_bf16")
    }
    /// The body of `func.matmul_fp32`.
    pub fn matmul_fp32(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("func.matmul_fp32")
    }
    /// The body of `func.matmul_tf32`.
    pub fn matmul_tf32(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("func.matmul_tf32")
    }
    /// The body of `func.mem_bandwidth`.
    pub fn mem_bandwidth(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("func.mem_bandwidth")
    }
    /// The body of `func.h2d_bandwidth`.
    pub fn h2d_bandwidth(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("func.h2d_bandwidth")
    }
    /// The body of `func.d2h_bandwidth`.
    pub fn d2h_bandwidth(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("func.d2h_bandwidth")
    }
    /// The body of `func.p2p_bandwidth`.
    pub fn p2p_bandwidth(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("func.p2p_bandwidth")
    }
    /// The body of `func.nccl_allreduce`.
    pub fn nccl_allreduce(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("func.nccl_allreduce")
    }
}

#[cfg(feature = "torch")]
mod bandwidth;
#[cfg(feature = "torch")]
mod device;
#[cfg(feature = "torch")]
mod matmul;
#[cfg(feature = "torch")]
mod nccl;

/// The tch bodies of the functional checks, one file per job.
#[cfg(feature = "torch")]
mod imp {
    pub use super::bandwidth::{d2h_bandwidth, h2d_bandwidth, mem_bandwidth, p2p_bandwidth};
    pub use super::matmul::{matmul_bf16, matmul_fp32, matmul_tf32};
    pub use super::nccl::nccl_allreduce;
}

#[cfg(all(test, feature = "torch"))]
mod tests;
