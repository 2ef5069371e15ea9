//! What a measurement should read: for a GPU model (a row of [`super::peaks`])
//! and a metric, the expected value, whether it is what a healthy part
//! typically reaches or a peak no run exceeds, and where the figure comes
//! from. `verify` prints it beside every measured rate, so that "is my number
//! right?" has an answer on the same line.
//!
//! Typical values are the datasheet figure times the share of it a healthy
//! H200 reached on 2026-11-30 (`bench/results/2026-11-30-h200.md`); metrics
//! that imgctl has not measured on a healthy part (TF32, NVLink) get the
//! datasheet's peak instead, labelled so. An unknown GPU gets no guess: the
//! [`NoReference`] says why. A leaf: figures and arithmetic, no I/O.
use serde::{Deserialize, Serialize};

use super::peaks::{lookup, GpuPeak, PEAKS};

/// What an expected value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// What a healthy part typically reaches (a measured share of the datasheet).
    Typical,
    /// The datasheet's (or the link's) peak: a healthy part stays below it.
    Peak,
}

/// The value a measurement should read, in the measurement's unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    /// The figure.
    pub value: f64,
    /// Its unit (the measurement's: `TFLOP/s`, `TB/s`, `GB/s`).
    pub unit: &'static str,
    /// Typical or peak.
    pub basis: Basis,
    /// Where the figure comes from, in words a reader can check.
    pub source: String,
}

impl Expected {
    /// `≈ 682.8 TFLOP/s` (typical) or `≤ 450.0 GB/s peak`.
    pub fn label(&self) -> String {
        format_expected(self.value, self.unit, self.basis)
    }
}

/// The text of an expected value: `≈ 682.8 TFLOP/s` or `≤ 450.0 GB/s peak`.
pub fn format_expected(value: f64, unit: &str, basis: Basis) -> String {
    match basis {
        Basis::Typical => format!("≈ {value:.1} {unit}"),
        Basis::Peak => format!("≤ {value:.1} {unit} peak"),
    }
}

/// Why there is no expected value: an unknown GPU, or a metric with no one
/// figure for this GPU. Its text is the reason, printed where the value
/// would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoReference(pub String);

impl std::fmt::Display for NoReference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A measured share of the datasheet, with where it was measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// The share, 0–1.
    pub fraction: f64,
    /// The measurement.
    pub measured: &'static str,
}

/// bf16 GEMM 8192³: 686.3 of 989.5 TFLOP/s.
pub const BF16_MATMUL_SHARE: Share = Share {
    fraction: 0.69,
    measured: "686.3 of 989.5 TFLOP/s",
};
/// fp32 GEMM 8192³ (no TF32): 51.2 of 67 TFLOP/s.
pub const FP32_MATMUL_SHARE: Share = Share {
    fraction: 0.76,
    measured: "51.2 of 67 TFLOP/s",
};
/// Device copy (read + write): 4.25 of 4.8 TB/s.
pub const MEM_COPY_SHARE: Share = Share {
    fraction: 0.885,
    measured: "4.25 of 4.8 TB/s",
};
/// Pinned host copies over PCIe Gen5 x16: 54.7 (host→device) and 54.4
/// (device→host) of 63.0 GB/s.
pub const HOST_COPY_SHARE: Share = Share {
    fraction: 0.87,
    measured: "54.7 of 63.0 GB/s host→device",
};

/// Where the shares were measured: a healthy H200's device run.
pub const SHARE_SOURCE: &str = "bench/results/2026-11-30-h200.md";

/// The busbw of nccl-tests is comparable across rank counts and to the
/// hardware's peak (its PERFORMANCE.md).
pub const BUSBW_SOURCE: &str =
    "https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md (busbw is comparable to the link's peak)";

/// A per-GPU metric with a datasheet reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// bf16 tensor-core GEMM, TFLOP/s.
    Bf16Matmul,
    /// fp32 GEMM without tensor cores, TFLOP/s.
    Fp32Matmul,
    /// fp32 GEMM on TF32 tensor cores, TFLOP/s.
    Tf32Matmul,
    /// Device-memory copy (read + write), TB/s.
    MemCopy,
    /// One GPU pair's P2P copy, GB/s, one direction.
    P2pCopy,
    /// An all-reduce's bus bandwidth over every GPU of the node, GB/s.
    AllReduceBusbw,
}

/// The expected value of `metric` on the GPU called `device_name` (as NVML
/// and CUDA name it).
pub fn expected(metric: Metric, device_name: &str) -> Result<Expected, NoReference> {
    let row = lookup(device_name).ok_or_else(|| unknown_gpu(device_name))?;
    let typical = |datasheet: f64, what: &str, unit: &'static str, share: Share| {
        Expected {
        value: datasheet * share.fraction,
        unit,
        basis: Basis::Typical,
        source: format!(
            "{}% of the {} datasheet's {datasheet} {unit} {what}, the share a healthy H200 reached ({}, {SHARE_SOURCE}); datasheet: {}",
            pct(share.fraction),
            row.model,
            share.measured,
            row.source
        ),
    }
    };
    match metric {
        Metric::Bf16Matmul => Ok(typical(
            row.bf16_dense,
            "bf16 dense",
            "TFLOP/s",
            BF16_MATMUL_SHARE,
        )),
        Metric::Fp32Matmul => Ok(typical(row.fp32, "fp32", "TFLOP/s", FP32_MATMUL_SHARE)),
        Metric::MemCopy => Ok(typical(row.mem_tbs, "HBM", "TB/s", MEM_COPY_SHARE)),
        Metric::Tf32Matmul => Ok(Expected {
            value: row.tf32_dense,
            unit: "TFLOP/s",
            basis: Basis::Peak,
            source: format!(
                "the {} datasheet's TF32 dense rate (no healthy part's share measured yet); datasheet: {}",
                row.model, row.source
            ),
        }),
        Metric::P2pCopy | Metric::AllReduceBusbw => nvlink_peak(row, metric),
    }
}

/// NVLink's one-direction peak: what a pair's copy and an all-reduce's busbw
/// stay below on an NVSwitch board.
fn nvlink_peak(row: &GpuPeak, metric: Metric) -> Result<Expected, NoReference> {
    let Some(both) = row.nvlink_gbs else {
        return Err(NoReference(format!(
            "no reference for a {} pair: its NVLink bridges (if fitted) join only some pairs, the rest cross PCIe",
            row.model
        )));
    };
    let what = if metric == Metric::AllReduceBusbw {
        format!("; {BUSBW_SOURCE}")
    } else {
        String::new()
    };
    Ok(Expected {
        value: both / 2.0,
        unit: "GB/s",
        basis: Basis::Peak,
        source: format!(
            "half the {} datasheet's NVLink {both} GB/s (both directions) through NVSwitch{what}; datasheet: {}",
            row.model, row.source
        ),
    })
}

/// The expected rate of a pinned host copy over a PCIe link of generation
/// `gen` and `width` lanes (as NVML reports the link's maximum).
pub fn host_copy(gen: u32, width: u32) -> Result<Expected, NoReference> {
    let lane =
        pcie_lane_gbs(gen).ok_or_else(|| NoReference(format!("no reference for PCIe Gen{gen}")))?;
    let link = lane * width as f64;
    Ok(Expected {
        value: link * HOST_COPY_SHARE.fraction,
        unit: "GB/s",
        basis: Basis::Typical,
        source: format!(
            "{}% of PCIe Gen{gen} x{width}'s {link:.1} GB/s per direction (PCI-SIG: {} GT/s a lane), the share a healthy H200 reached ({}, {SHARE_SOURCE})",
            pct(HOST_COPY_SHARE.fraction),
            gen_rate(gen),
            HOST_COPY_SHARE.measured
        ),
    })
}

/// PCIe payload bandwidth per lane and direction in GB/s, by generation
/// (PCI-SIG: Gen3 8 GT/s, Gen4 16 GT/s, Gen5 32 GT/s with 128b/130b; Gen6
/// 64 GT/s with FLIT, 242 of 256 bytes payload).
pub fn pcie_lane_gbs(gen: u32) -> Option<f64> {
    match gen {
        3..=5 => Some(gen_rate(gen) as f64 * 128.0 / 130.0 / 8.0),
        6 => Some(64.0 * 242.0 / 256.0 / 8.0),
        _ => None,
    }
}

/// GT/s per lane of a PCIe generation (3–6).
fn gen_rate(gen: u32) -> u32 {
    match gen {
        3 => 8,
        4 => 16,
        5 => 32,
        _ => 64,
    }
}

fn pct(fraction: f64) -> String {
    let p = fraction * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{}", p.round() as u64)
    } else {
        format!("{p:.1}")
    }
}

fn unknown_gpu(device_name: &str) -> NoReference {
    let known: Vec<&str> = PEAKS.iter().map(|p| p.model).collect();
    NoReference(format!(
        "no reference for {device_name:?}: imgctl's table knows {}",
        known.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_h200_expects_what_a_healthy_h200_measured() {
        let e = expected(Metric::Bf16Matmul, "NVIDIA H200").unwrap();
        assert_eq!(e.basis, Basis::Typical);
        assert!((e.value - 682.8).abs() < 0.1, "{}", e.value);
        assert_eq!(e.label(), "≈ 682.8 TFLOP/s");
        assert!(e
            .source
            .contains("69% of the H200 datasheet's 989.5 TFLOP/s bf16 dense"));
        assert!(e.source.contains("bench/results/2026-11-30-h200.md"));
        assert!(e
            .source
            .contains("https://www.nvidia.com/en-us/data-center/h200/"));
        let m = expected(Metric::MemCopy, "NVIDIA H200").unwrap();
        assert!((m.value - 4.248).abs() < 1e-3, "{}", m.value);
        let t = expected(Metric::Tf32Matmul, "NVIDIA H200").unwrap();
        assert_eq!((t.value, t.basis), (494.5, Basis::Peak));
        assert_eq!(t.label(), "≤ 494.5 TFLOP/s peak");
    }

    #[test]
    fn nvlink_figures_only_for_switched_boards() {
        let p = expected(Metric::P2pCopy, "NVIDIA B200").unwrap();
        assert_eq!((p.value, p.basis), (900.0, Basis::Peak));
        let a = expected(Metric::AllReduceBusbw, "NVIDIA H100 80GB HBM3").unwrap();
        assert_eq!(a.value, 450.0);
        assert!(a.source.contains("nccl-tests"), "{}", a.source);
        let none = expected(Metric::AllReduceBusbw, "NVIDIA L40S").unwrap_err();
        assert!(none.0.contains("L40S pair"), "{none}");
    }

    #[test]
    fn an_unknown_gpu_gets_no_guess() {
        let e = expected(Metric::Bf16Matmul, "NVIDIA GeForce RTX 4090").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("no reference for \"NVIDIA GeForce RTX 4090\": imgctl's table knows H200 NVL, H200,"),
            "{e}"
        );
    }

    #[test]
    fn host_copies_expect_the_links_rate_by_generation_and_width() {
        let g5 = host_copy(5, 16).unwrap();
        assert!((g5.value - 54.8).abs() < 0.1, "{}", g5.value);
        assert!(
            g5.source.contains("PCIe Gen5 x16's 63.0 GB/s"),
            "{}",
            g5.source
        );
        let g4x8 = host_copy(4, 8).unwrap();
        assert!((g4x8.value - 13.7).abs() < 0.1, "{}", g4x8.value);
        assert!(host_copy(2, 16).is_err());
        assert!((pcie_lane_gbs(6).unwrap() - 7.5625).abs() < 1e-9);
    }
}
