//! The thresholds of the functional checks, with their sources: datasheet
//! peaks ([`peaks_for`]), the floor fractions and error bounds, the PCIe lane
//! rate, the NCCL bus-bandwidth formula, and the judging of a rate against
//! them ([`judge_rate`]). A leaf the check bodies (`matmul.rs`,
//! `bandwidth.rs`, `nccl.rs`) import directly; it runs nothing.
use crate::verify::result::CheckResult;

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

pub use crate::gpus::expected::pcie_lane_gbs;

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
