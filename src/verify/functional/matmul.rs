//! The matrix-product checks (`func.matmul_bf16`, `func.matmul_fp32`,
//! `func.matmul_tf32`): each product is checked against a float64 CPU
//! reference (relative Frobenius error and worst element), then timed at
//! 8192³ for TFLOP/s against a datasheet floor.
//!
//! Thresholds live in the parent module, next to their sources. This file
//! renders nothing and must not measure bandwidth or touch NCCL.
use std::time::{Duration, Instant};

use tch::{Device, Kind, TchError, Tensor};

use super::device::{device_or_skip, expected_on, gpu_name, sync};
use super::thresholds::{
    fp32_matmul_uses_tf32, judge_rate, peaks_for, BF16_REL_ERR, ELEMENT_ERR_FACTOR, FLOOR_FRACTION,
    FP32_REL_ERR, TF32_REL_ERR,
};
use crate::gpus::expected::Metric;
use crate::verify::check::CheckResult;
use crate::verify::context::Context;

/// Minimum warm-up before a timed loop: cuBLAS picks its kernels on the
/// first call, and an idle GPU runs at idle clocks until GPU Boost raises
/// them under load, which a 3-product warm-up (~4 ms at 8192³ bf16 on an
/// H200) may not cover. Bounded in time, so the total stays small.
const WARMUP: Duration = Duration::from_millis(300);

/// Errors of `kind` matmul on `device` against float64 on the CPU, for
/// n×n inputs rounded to `kind` first (so only the product's error is
/// measured): the relative Frobenius error, and the worst single element's
/// error relative to the reference's RMS element. One corrupt element
/// barely moves the first (1/n of it) but dominates the second.
pub fn matmul_rel_error(device: Device, kind: Kind, n: i64) -> Result<(f64, f64), TchError> {
    tch::manual_seed(1234);
    let a = Tensor::f_randn([n, n], (Kind::Float, Device::Cpu))?.f_to_kind(kind)?;
    let b = Tensor::f_randn([n, n], (Kind::Float, Device::Cpu))?.f_to_kind(kind)?;
    let reference = a
        .f_to_kind(Kind::Double)?
        .f_matmul(&b.f_to_kind(Kind::Double)?)?;
    let c = a
        .f_to_device(device)?
        .f_matmul(&b.f_to_device(device)?)?
        .f_to_device(Device::Cpu)?
        .f_to_kind(Kind::Double)?;
    product_errors(&c, &reference)
}

/// (relative Frobenius error, worst element's error / RMS element) of a
/// float64 product `c` against `reference`.
pub fn product_errors(c: &Tensor, reference: &Tensor) -> Result<(f64, f64), TchError> {
    let diff = c.f_sub(reference)?;
    let err = diff.f_norm()?.f_double_value(&[])?;
    let norm = reference.f_norm()?.f_double_value(&[])?;
    let worst = diff.f_abs()?.f_max()?.f_double_value(&[])?;
    // RMS element = ‖C‖_F / √(number of elements).
    let rms = norm / (reference.numel() as f64).sqrt();
    Ok((err / norm, worst / rms))
}

/// Achieved TFLOP/s of an n×n×n matmul (2n³ flops each), timed over
/// `iters` products after a warm-up of at least 3 products and [`WARMUP`].
pub fn matmul_tflops(device: Device, kind: Kind, n: i64, iters: usize) -> Result<f64, TchError> {
    let a = Tensor::f_randn([n, n], (kind, device))?;
    let b = Tensor::f_randn([n, n], (kind, device))?;
    let warm = Instant::now();
    let mut done = 0;
    while done < 3 || warm.elapsed() < WARMUP {
        let _ = a.f_matmul(&b)?;
        done += 1;
        // Wait now and then, so the clock measures the GPU, not the
        // host queueing launches ahead of it.
        if done % 4 == 0 {
            sync(device)?;
        }
    }
    sync(device)?;
    let start = Instant::now();
    for _ in 0..iters {
        let _ = a.f_matmul(&b)?;
    }
    sync(device)?;
    let secs = start.elapsed().as_secs_f64();
    Ok(2.0 * (n as f64).powi(3) * iters as f64 / secs / 1e12)
}

/// How a matmul check runs: bf16, fp32 as libtorch is configured, or fp32
/// forced onto TF32 tensor cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Bf16,
    Fp32,
    Tf32,
}

fn matmul(ctx: &Context, gpu: Option<u32>, id: &str, mode: Mode) -> Vec<CheckResult> {
    let g = gpu.unwrap_or(0);
    let device = match device_or_skip(id, g) {
        Ok(d) => d,
        Err(r) => return vec![*r],
    };
    let kind = if mode == Mode::Bf16 {
        Kind::BFloat16
    } else {
        Kind::Float
    };
    let _tf32_guard = match mode {
        Mode::Tf32 => match crate::sys::torch_ext::Tf32Matmul::on() {
            Ok(g) => Some(g),
            Err(e) => return vec![CheckResult::error(id, format!("cannot turn TF32 on: {e}"))],
        },
        _ => None,
    };
    let tf32 = fp32_matmul_uses_tf32(
        std::env::var(crate::env_vars::TORCH_ALLOW_TF32_CUBLAS_OVERRIDE)
            .ok()
            .as_deref(),
    );
    let (limit, label) = match mode {
        Mode::Bf16 => (BF16_REL_ERR, "bf16"),
        Mode::Tf32 => (TF32_REL_ERR, "tf32"),
        _ if tf32 => (
            TF32_REL_ERR,
            "fp32 (as TF32: TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1)",
        ),
        _ => (FP32_REL_ERR, "fp32"),
    };
    // 1024: the float64 CPU reference costs 2 GFLOP, well under a second.
    let (err, worst) = match matmul_rel_error(device, kind, 1024) {
        Ok(e) => e,
        Err(e) => {
            return vec![CheckResult::error(
                id,
                format!("{label} matmul failed: {e}"),
            )]
        }
    };
    let worst_limit = ELEMENT_ERR_FACTOR * limit;
    if err.is_nan() || err > limit || worst.is_nan() || worst > worst_limit {
        return vec![CheckResult::fail(id, format!("{label} matmul is wrong: relative error {err:.2e}, worst element {worst:.2e} of the RMS element"))
            .measured(format!("rel. error {err:.2e}, worst element {worst:.2e}"))
            .threshold(format!("≤ {limit:.0e} rel. error, ≤ {worst_limit:.0e} per element"))
            .hint("a GPU computing wrong results must be drained; check nvml.ecc and dmesg for Xid 13/31/43")];
    }
    // 8192³ is 1.1 TFLOP: ~1.6 ms in bf16 on an H200 (686 TFLOP/s
    // measured), ~21 ms in fp32 (51 of 67 TFLOP/s); the counts give
    // ~70 ms and ~100 ms timed, long enough for a stable median.
    let (n, iters) = match mode {
        Mode::Bf16 => (8192, 50),
        Mode::Tf32 => (8192, 25),
        Mode::Fp32 => (8192, 5),
    };
    let tflops = match matmul_tflops(device, kind, n, iters) {
        Ok(t) => t,
        Err(e) => {
            return vec![CheckResult::error(
                id,
                format!("{label} matmul timing failed: {e}"),
            )]
        }
    };
    let peak = gpu_name(ctx, g).and_then(|name| peaks_for(&name).map(|p| (name, p)));
    let floor = peak.map(|(name, p)| match mode {
        Mode::Bf16 => (
            FLOOR_FRACTION * p.bf16_tflops,
            format!("50% of {name} datasheet {} TFLOP/s", p.bf16_tflops),
        ),
        // Ampere and Hopper run dense TF32 at half their dense bf16 rate
        // (A100 156 of 312, H100/H200 SXM 494.7 of 989.4 TFLOP/s).
        Mode::Tf32 => (
            FLOOR_FRACTION * p.bf16_tflops / 2.0,
            format!(
                "50% of {name} TF32 dense {:.1} TFLOP/s, half its bf16 datasheet rate",
                p.bf16_tflops / 2.0
            ),
        ),
        Mode::Fp32 => (
            FLOOR_FRACTION * p.fp32_tflops,
            format!("50% of {name} datasheet {} TFLOP/s", p.fp32_tflops),
        ),
    });
    let metric = match mode {
        Mode::Bf16 => Metric::Bf16Matmul,
        Mode::Tf32 => Metric::Tf32Matmul,
        Mode::Fp32 => Metric::Fp32Matmul,
    };
    let mut r = judge_rate(
        id,
        &format!("{label} {n}³ matmul"),
        tflops,
        "TFLOP/s",
        floor,
    )
    .expect(expected_on(ctx, g, metric));
    r.measured = Some(format!(
        "{tflops:.1} TFLOP/s, rel. error {err:.1e} (≤ {limit:.0e}), worst element {worst:.1e} (≤ {worst_limit:.0e})"
    ));
    if mode == Mode::Tf32 && err < FP32_REL_ERR {
        // An error at fp32's level means the tensor cores did not run it
        // (a GPU before Ampere has no TF32): right, but not TF32.
        r.message = format!(
            "{}; the error is fp32's: this GPU ran it without TF32",
            r.message
        );
    }
    vec![r]
}

/// The body of `func.matmul_bf16`.
pub fn matmul_bf16(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    matmul(ctx, gpu, "func.matmul_bf16", Mode::Bf16)
}

/// The body of `func.matmul_fp32`.
pub fn matmul_fp32(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    matmul(ctx, gpu, "func.matmul_fp32", Mode::Fp32)
}

/// The body of `func.matmul_tf32`.
pub fn matmul_tf32(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    matmul(ctx, gpu, "func.matmul_tf32", Mode::Tf32)
}
