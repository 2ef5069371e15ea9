//! Peak arithmetic throughput per GPU model, from NVIDIA's datasheets, and
//! model FLOPs utilisation (MFU) against it.
//!
//! Dense (no 2:4 sparsity) figures: the datasheets print the sparse ones with
//! an asterisk; dense is half of that. Owns the table only; measuring is the
//! benchmark's job.
use serde::Serialize;

use crate::train::config::Precision;

/// One GPU model's peaks in TFLOP/s.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GpuPeak {
    /// The name fragment matched against the device name.
    pub model: &'static str,
    /// bf16/fp16 tensor core, dense.
    pub bf16_dense: f64,
    /// TF32 tensor core, dense.
    pub tf32_dense: f64,
    /// FP32 without tensor cores.
    pub fp32: f64,
    /// The datasheet.
    pub source: &'static str,
}

/// The table, most specific names first.
pub const PEAKS: &[GpuPeak] = &[
    // H200 SXM: same SM configuration and clocks as H100 SXM.
    GpuPeak {
        model: "H200",
        bf16_dense: 989.5,
        tf32_dense: 494.5,
        fp32: 67.0,
        source: "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: BF16 1,979 TFLOPS with sparsity, TF32 989, FP32 67)",
    },
    GpuPeak {
        model: "H100 NVL",
        bf16_dense: 835.5,
        tf32_dense: 417.5,
        fp32: 60.0,
        source: "https://www.nvidia.com/en-us/data-center/h100/ (H100 NVL: BF16 1,671 TFLOPS with sparsity, TF32 835, FP32 60)",
    },
    GpuPeak {
        model: "H100 PCIe",
        bf16_dense: 756.5,
        tf32_dense: 378.0,
        fp32: 51.0,
        source: "https://www.nvidia.com/en-us/data-center/h100/ (H100 PCIe: BF16 1,513 TFLOPS with sparsity, TF32 756, FP32 51)",
    },
    GpuPeak {
        model: "H100",
        bf16_dense: 989.5,
        tf32_dense: 494.5,
        fp32: 67.0,
        source: "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM: BF16 1,979 TFLOPS with sparsity, TF32 989, FP32 67)",
    },
    GpuPeak {
        model: "A100",
        bf16_dense: 312.0,
        tf32_dense: 156.0,
        fp32: 19.5,
        source: "https://www.nvidia.com/en-us/data-center/a100/ (A100: BF16 312 TFLOPS dense, TF32 156, FP32 19.5)",
    },
    GpuPeak {
        model: "L40S",
        bf16_dense: 362.05,
        tf32_dense: 183.0,
        fp32: 91.6,
        source: "https://www.nvidia.com/en-us/data-center/l40s/ (L40S: BF16 733 TFLOPS with sparsity, TF32 366, FP32 91.6)",
    },
];

/// The table row for a device name ("NVIDIA H200", "NVIDIA H100 80GB HBM3").
pub fn lookup(device_name: &str) -> Option<&'static GpuPeak> {
    let upper = device_name.to_ascii_uppercase();
    PEAKS
        .iter()
        .find(|p| upper.contains(&p.model.to_ascii_uppercase()))
}

/// The peak that applies to a precision, with its label. fp32 training runs
/// its convolutions on TF32 tensor cores, libtorch's default
/// (`allow_tf32` for cuDNN is true), so fp32 is measured against TF32.
pub fn peak_for(p: &GpuPeak, precision: Precision) -> (f64, &'static str) {
    match precision {
        Precision::Fp32 => (p.tf32_dense, "tf32 dense"),
        Precision::Bf16 | Precision::Fp16 => (p.bf16_dense, "bf16/fp16 dense"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_right_row() {
        assert_eq!(lookup("NVIDIA H200").unwrap().model, "H200");
        assert_eq!(lookup("NVIDIA H100 80GB HBM3").unwrap().model, "H100");
        assert_eq!(lookup("NVIDIA H100 PCIe").unwrap().model, "H100 PCIe");
        assert_eq!(lookup("NVIDIA A100-SXM4-80GB").unwrap().model, "A100");
        assert!(lookup("Tesla T4").is_none());
        let (peak, _) = peak_for(lookup("NVIDIA H200").unwrap(), Precision::Bf16);
        assert_eq!(peak, 989.5);
    }
}
