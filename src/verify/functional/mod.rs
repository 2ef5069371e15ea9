//! Functional checks (`func.*`, `--level full`): per GPU a bf16, an fp32 and a
//! TF32 matrix product checked against a float64 CPU reference, with achieved
//! TFLOP/s; device-memory bandwidth; host↔device copy bandwidth; P2P copy
//! bandwidth per pair; and an NCCL all-reduce across all GPUs with its result
//! checked and its bus bandwidth.
//!
//! Bodies need tch (the `torch` feature); without it the ids report SKIP.
//! NCCL is reached through a small libloading shim over the very
//! `libnccl.so.2` torch mapped (found in /proc/self/maps), never by soname
//! search. Thresholds are stated in every result. This file renders nothing.
use super::check::{CheckResult, FnCheck, Level, Scope};
use super::Context;

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

/// Datasheet peaks of known GPUs, for absolute floors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peaks {
    /// Dense bf16 tensor-core TFLOP/s.
    pub bf16_tflops: f64,
    /// fp32 (non-tensor-core) TFLOP/s.
    pub fp32_tflops: f64,
    /// Memory bandwidth, TB/s.
    pub mem_tbs: f64,
}

/// Peaks by product name, from [`crate::gpus`] (datasheet figures with their
/// sources).
pub fn peaks_for(name: &str) -> Option<Peaks> {
    crate::gpus::lookup(name).map(|p| Peaks {
        bf16_tflops: p.bf16_dense,
        fp32_tflops: p.fp32,
        mem_tbs: p.mem_tbs,
    })
}

/// Fraction of the datasheet matmul peak below which a GPU FAILs. Measured on
/// a healthy H200 (device check, 2026-11-30, torch 2.11.0+cu130, 8192³):
/// bf16 686.3 of 989.5 TFLOP/s (69 %), fp32 51.2 of 67 TFLOP/s (76 %). Half
/// the datasheet is 72 % and 65 % of those: room for power-capped and PCIe
/// parts, while a GPU stuck at low clocks (a third or less) fails.
pub const FLOOR_FRACTION: f64 = 0.5;

/// Fraction of the datasheet memory bandwidth below which the device copy
/// FAILs. A healthy GPU's copy kernel reaches 80-90 % of the datasheet; the
/// H200 measured 4.25 of 4.8 TB/s (88.5 %, same run as above). 70 % is 79 % of
/// that: it catches HBM running at a lower clock or a degraded stack, which
/// half the datasheet (the earlier, guessed floor) let pass.
pub const MEM_FLOOR_FRACTION: f64 = 0.7;

/// Fraction of the PCIe link's payload rate below which a host copy FAILs.
/// The H200 measured 54.7 GB/s host→device and 54.4 GB/s device→host on
/// Gen5 x16 (87 % of 63.0 GB/s). Host copies also depend on the host (NUMA
/// placement, IOMMU), so the floor stays at half the link: a link trained
/// down to Gen3 or x4 still fails it.
pub const PCIE_FLOOR_FRACTION: f64 = 0.5;

/// Relative Frobenius error allowed for a bf16 matmul with fp32 accumulation
/// against float64: the bf16 output rounding alone is up to 2^-8 ≈ 3.9e-3
/// per element (8 significand bits), so 1e-2 leaves margin while catching
/// wrong results (which are O(1)).
pub const BF16_REL_ERR: f64 = 1e-2;
/// Relative error allowed for an fp32 matmul (TF32 off, libtorch's default
/// `float32_matmul_precision = highest`): fp32 accumulation over k = 1024
/// gives ~1e-6; TF32 would give ~1e-3. 1e-4 sits between.
pub const FP32_REL_ERR: f64 = 1e-4;

/// The worst single element's error, relative to the RMS element of the
/// product, may be this many times the Frobenius limit. An element of
/// magnitude k·RMS carries k times the typical rounding error, and among the
/// 2^20 Gaussian-like elements of a 1024² product the largest is about 5·RMS;
/// a corrupt element (a flipped exponent or sign bit) is off by O(1) or more.
pub const ELEMENT_ERR_FACTOR: f64 = 5.0;

/// Relative error allowed for an fp32 matmul when libtorch runs it on TF32
/// tensor cores (`TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`): TF32 keeps 10 of
/// fp32's 23 mantissa bits, so each input rounds by up to 2^-11 ≈ 4.9e-4;
/// the product's error is ~1e-3, and wrong results are still O(1).
pub const TF32_REL_ERR: f64 = 5e-3;

/// Whether libtorch runs fp32 matmuls on TF32: its default precision is
/// "highest" unless `TORCH_ALLOW_TF32_CUBLAS_OVERRIDE` is exactly `1`
/// (ATen/Context.h reads it with c10::utils::check_env, which accepts `0`/`1`).
pub fn fp32_matmul_uses_tf32(env_value: Option<&str>) -> bool {
    env_value == Some("1")
}

/// PCIe payload bandwidth per lane and direction in GB/s, by generation
/// (PCI-SIG: Gen3 8 GT/s, Gen4 16 GT/s, Gen5 32 GT/s, 128b/130b encoding).
pub fn pcie_lane_gbs(gen: u32) -> Option<f64> {
    match gen {
        3 => Some(8.0 * 128.0 / 130.0 / 8.0),
        4 => Some(16.0 * 128.0 / 130.0 / 8.0),
        5 => Some(32.0 * 128.0 / 130.0 / 8.0),
        6 => Some(64.0 * 242.0 / 256.0 / 8.0),
        _ => None,
    }
}

/// Bus bandwidth of an all-reduce from its algorithm bandwidth (nccl-tests
/// PERFORMANCE.md: busbw = algbw × 2(n−1)/n).
pub fn allreduce_busbw(algbw: f64, ranks: u32) -> f64 {
    if ranks == 0 {
        return 0.0;
    }
    algbw * 2.0 * (ranks as f64 - 1.0) / ranks as f64
}

/// A judged throughput: FAIL below `floor` (when known), else PASS; the
/// node-median rule is applied later by the runner.
pub fn judge_rate(
    id: &str,
    what: &str,
    value: f64,
    unit: &str,
    floor: Option<(f64, String)>,
) -> CheckResult {
    let measured = format!("{value:.1} {unit}");
    match floor {
        Some((f, why)) if value < f => {
            CheckResult::fail(id, format!("{what} {measured} is below the floor"))
                .measured(measured)
                .threshold(format!("≥ {f:.1} {unit} ({why})"))
                .value(value, unit)
                .hint(
                    "check nvml.throttle, nvml.temperature, nvml.power and nvml.pcie for this GPU",
                )
        }
        Some((f, why)) => CheckResult::pass(id, format!("{what} {measured}"))
            .measured(measured)
            .threshold(format!("≥ {f:.1} {unit} ({why})"))
            .value(value, unit),
        None => CheckResult::pass(id, format!("{what} {measured}"))
            .measured(measured)
            .threshold("no datasheet floor for this GPU; 90% of node median")
            .value(value, unit),
    }
}

#[cfg(not(feature = "torch"))]
mod imp {
    use super::*;

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
pub mod imp {
    //! The tch bodies of the functional checks.
    use std::time::{Duration, Instant};

    use tch::{Device, Kind, TchError, Tensor};

    use super::*;

    fn gpu_name(ctx: &Context, g: u32) -> Option<String> {
        ctx.nvml_backend("func").ok()?.name(g).ok()
    }

    /// SKIP when torch cannot use GPU `g` (torch.cuda_available / torch.device_count carry that verdict).
    fn device_or_skip(id: &str, g: u32) -> Result<Device, Box<CheckResult>> {
        if !super::super::torch::cuda_available() {
            return Err(Box::new(CheckResult::skip(
                id,
                "CUDA not available to torch (see torch.cuda_available)",
            )));
        }
        let n = tch::Cuda::device_count();
        if i64::from(g) >= n {
            return Err(Box::new(CheckResult::skip(
                id,
                format!("torch sees only {n} GPU(s) (see torch.device_count)"),
            )));
        }
        Ok(Device::Cuda(g as usize))
    }

    /// Waits for the work queued on `device`: a one-element device-to-host
    /// read, which synchronises torch's (default) stream like
    /// `tch::Cuda::synchronize` does, but returns a failed kernel's CUDA
    /// error instead of panicking on it (tch unwraps inside `synchronize`).
    fn sync(device: Device) -> Result<(), TchError> {
        if let Device::Cuda(_) = device {
            let _ = Tensor::f_zeros([1], (Kind::Float, device))?.f_to_device(Device::Cpu)?;
        }
        Ok(())
    }

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
    pub fn matmul_tflops(
        device: Device,
        kind: Kind,
        n: i64,
        iters: usize,
    ) -> Result<f64, TchError> {
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
            Mode::Tf32 => match crate::torch_ext::Tf32Matmul::on() {
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
        let mut r = judge_rate(
            id,
            &format!("{label} {n}³ matmul"),
            tflops,
            "TFLOP/s",
            floor,
        );
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
        let mut r = judge_rate(ID, "device copy (read+write)", tbs, "TB/s", floor);
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
                crate::torch_ext::pin_memory(&host).map_err(|e| TchError::Torch(e.to_string()))?;
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
        let floor = ctx
            .nvml_backend(id)
            .ok()
            .and_then(|b| b.pcie_link(g).ok())
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
        let mut r = judge_rate(id, &format!("{what} (pinned, 256 MiB)"), gbs, "GB/s", floor);
        if r.status == super::super::Status::Fail {
            // Host copies also depend on NUMA placement and the IOMMU: a WARN, not a verdict on the GPU.
            r.status = super::super::Status::Warn;
            r.hint = Some(
                "check NUMA affinity (`nvidia-smi topo -m`), the IOMMU setting and nvml.pcie"
                    .into(),
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
        if !super::super::torch::cuda_available() {
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

    /// The body of `func.nccl_allreduce`.
    pub fn nccl_allreduce(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        const ID: &str = "func.nccl_allreduce";
        if !super::super::torch::cuda_available() {
            return vec![CheckResult::skip(
                ID,
                "CUDA not available to torch (see torch.cuda_available)",
            )];
        }
        let n = tch::Cuda::device_count() as u32;
        match nccl::allreduce_check(n) {
            Ok(m) => {
                let busbw = allreduce_busbw(m.algbw_gbs, n);
                let mut r = if m.wrong_values > 0 {
                    CheckResult::fail(ID, format!("all-reduce result wrong in {} element(s): expected {}", m.wrong_values, m.expected))
                        .hint("NCCL produced wrong sums: check P2P/NVLink health (nvml.nvlink), NCCL_P2P_DISABLE=1 to bisect")
                } else if n == 1 {
                    CheckResult::pass(
                        ID,
                        "1 rank: result checked; bus bandwidth is 0 by definition (2(n-1)/n)",
                    )
                } else {
                    CheckResult::pass(ID, format!("{n} ranks, result checked"))
                };
                r = r
                    .measured(format!(
                        "busbw {busbw:.1} GB/s, algbw {:.1} GB/s, {} MiB, NCCL {}",
                        m.algbw_gbs,
                        m.bytes >> 20,
                        m.version
                    ))
                    .threshold(format!("every element = {}", m.expected))
                    .value(busbw, "GB/s");
                vec![r]
            }
            Err(e) => vec![CheckResult::error(ID, e)],
        }
    }

    /// The NCCL all-reduce body: ncclCommInitAll over every GPU from one
    /// thread, through the shared shim [`crate::nccl`].
    pub mod nccl {
        use std::sync::Arc;
        use std::time::Instant;

        use tch::{Device, Kind, Tensor};

        use crate::nccl::{version_string, Communicator, DataType, NcclLibrary, RedOp};

        /// What one all-reduce run measured.
        pub struct Measured {
            /// Algorithm bandwidth, GB/s (bytes per rank / time).
            pub algbw_gbs: f64,
            /// Elements that differ from the expected sum, over all ranks.
            pub wrong_values: i64,
            /// The expected value of every element.
            pub expected: f64,
            /// Bytes per rank.
            pub bytes: i64,
            /// NCCL's version.
            pub version: String,
        }

        /// A shim error as the check's one-line text (the CLI hint is not used here).
        fn text(e: anyhow::Error) -> String {
            e.to_string()
        }

        /// Runs a float32 all-reduce (sum) of 256 MiB per rank over GPUs
        /// 0..n, rank r contributing r+1, and checks every element.
        pub fn allreduce_check(n: u32) -> Result<Measured, String> {
            // Only the libnccl.so.2 torch mapped, never another copy.
            let lib = Arc::new(NcclLibrary::mapped().map_err(text)?);
            let version = lib.version().map(version_string).unwrap_or_else(text);
            let devs: Vec<i32> = (0..n as i32).collect();
            let comms = Communicator::init_all(&lib, &devs).map_err(text)?;
            // 64 Mi floats = 256 MiB per rank: large enough to reach bus bandwidth.
            const COUNT: i64 = 64 << 20;
            let result = (|| -> Result<Measured, String> {
                let bufs: Vec<Tensor> = (0..n)
                    .map(|r| {
                        Tensor::f_full(
                            [COUNT],
                            (r + 1) as f64,
                            (Kind::Float, Device::Cuda(r as usize)),
                        )
                        .map_err(|e| e.to_string())
                    })
                    .collect::<Result<_, _>>()?;
                let outs: Vec<Tensor> = (0..n)
                    .map(|r| {
                        Tensor::f_empty([COUNT], (Kind::Float, Device::Cuda(r as usize)))
                            .map_err(|e| e.to_string())
                    })
                    .collect::<Result<_, _>>()?;
                let sync_all = || -> Result<(), String> {
                    (0..n as usize)
                        .try_for_each(|r| super::sync(Device::Cuda(r)))
                        .map_err(|e| e.to_string())
                };
                sync_all()?;
                let once = || -> Result<(), String> {
                    lib.group(|| {
                        for (r, comm) in comms.iter().enumerate() {
                            // SAFETY: device pointers of live tensors of COUNT floats on
                            // comm r's device (ncclCommInitAll gave comm r device r); they
                            // outlive the synchronisation below.
                            unsafe {
                                comm.all_reduce(
                                    crate::nccl::LEGACY_STREAM,
                                    bufs[r].data_ptr(),
                                    outs[r].data_ptr(),
                                    COUNT as usize,
                                    DataType::Float32,
                                    RedOp::Sum,
                                )
                            }?;
                        }
                        Ok(())
                    })
                    .map_err(text)?;
                    sync_all()
                };
                once()?; // warm-up (connection setup)
                const ITERS: u32 = 5;
                let start = Instant::now();
                for _ in 0..ITERS {
                    once()?;
                }
                let secs = start.elapsed().as_secs_f64() / ITERS as f64;
                let expected = (n * (n + 1) / 2) as f64;
                let mut wrong = 0i64;
                for o in &outs {
                    let bad = o
                        .f_ne(expected)
                        .and_then(|t| t.f_sum(Kind::Int64))
                        .and_then(|t| t.f_int64_value(&[]))
                        .map_err(|e| e.to_string())?;
                    wrong += bad;
                }
                let bytes = COUNT * 4;
                Ok(Measured {
                    algbw_gbs: bytes as f64 / secs / 1e9,
                    wrong_values: wrong,
                    expected,
                    bytes,
                    version: version.clone(),
                })
            })();
            // The buffers are freed; now destroy (or, after an error, abort)
            // the communicators.
            drop(comms);
            result
        }
    }
}

#[cfg(all(test, feature = "torch"))]
mod tests {
    use super::imp::{matmul_rel_error, matmul_tflops, nccl, product_errors};
    use super::*;
    use tch::{Device, Kind, Tensor};

    #[test]
    fn matmul_reference_errors_on_cpu_are_within_the_stated_thresholds() {
        // The same code path the GPU check runs, on the CPU device.
        let (bf16, bf16_worst) = matmul_rel_error(Device::Cpu, Kind::BFloat16, 256).unwrap();
        assert!(bf16 > 0.0 && bf16 <= BF16_REL_ERR, "bf16 rel. error {bf16}");
        assert!(
            bf16_worst <= ELEMENT_ERR_FACTOR * BF16_REL_ERR,
            "bf16 worst element {bf16_worst}"
        );
        let (fp32, fp32_worst) = matmul_rel_error(Device::Cpu, Kind::Float, 256).unwrap();
        assert!(fp32 <= FP32_REL_ERR, "fp32 rel. error {fp32}");
        assert!(
            fp32_worst <= ELEMENT_ERR_FACTOR * FP32_REL_ERR,
            "fp32 worst element {fp32_worst}"
        );
        // bf16 really is coarser than fp32: the check can tell them apart.
        assert!(bf16 > 100.0 * fp32, "bf16 {bf16} vs fp32 {fp32}");
        assert!(matmul_tflops(Device::Cpu, Kind::Float, 128, 2).unwrap() > 0.0);
    }

    #[test]
    fn one_corrupt_element_is_caught_by_the_element_bound_alone() {
        tch::manual_seed(7);
        let reference = Tensor::randn([1024, 1024], (Kind::Double, Device::Cpu));
        let c = reference.copy();
        // A sign flip of one typical element.
        let _ = c
            .get(3)
            .get(5)
            .fill_(-reference.double_value(&[3, 5]) - 1.0);
        let (err, worst) = product_errors(&c, &reference).unwrap();
        assert!(
            err < FP32_REL_ERR * 100.0,
            "Frobenius error {err} sees little"
        );
        assert!(worst > ELEMENT_ERR_FACTOR * BF16_REL_ERR, "worst {worst}");
    }

    #[test]
    fn rates_floors_and_busbw() {
        assert_eq!(
            judge_rate("func.x", "copy", 1.0, "TB/s", Some((2.4, "50%".into()))).status,
            super::super::Status::Fail
        );
        assert_eq!(
            judge_rate("func.x", "copy", 4.3, "TB/s", Some((2.4, "50%".into()))).status,
            super::super::Status::Pass
        );
        assert!(fp32_matmul_uses_tf32(Some("1")));
        assert!(!fp32_matmul_uses_tf32(Some("0")));
        assert!(!fp32_matmul_uses_tf32(None));
        const { assert!(FP32_REL_ERR < TF32_REL_ERR && TF32_REL_ERR < BF16_REL_ERR) };
        assert_eq!(allreduce_busbw(100.0, 8), 175.0);
        assert_eq!(allreduce_busbw(100.0, 1), 0.0);
        assert!((pcie_lane_gbs(5).unwrap() * 16.0 - 63.0).abs() < 0.1);
        assert_eq!(peaks_for("NVIDIA H200").unwrap().mem_tbs, 4.8);
        assert_eq!(peaks_for("NVIDIA GeForce RTX 4090"), None);
    }

    #[test]
    fn nccl_shim_loads_torchs_own_libnccl() {
        // No GPU here: the shim finds the libnccl.so.2 torch mapped, resolves
        // its symbols, and reports NCCL's own refusal instead of crashing.
        let err = nccl::allreduce_check(0)
            .err()
            .expect("no communicator without GPUs");
        assert!(err.contains("ncclCommInitAll failed"), "{err}");
    }
}
