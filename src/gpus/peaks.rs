//! Datasheet figures per GPU model: the one table that `verify`'s functional
//! floors and the benchmark's MFU both read.
//!
//! Dense (no 2:4 sparsity) figures: NVIDIA's datasheets print the sparse ones
//! with an asterisk; dense is half of that. This module only holds figures;
//! measuring is verify's and the benchmark's job.
use serde::Serialize;

/// One GPU model's peaks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GpuPeak {
    /// The row's name.
    pub model: &'static str,
    /// Fragments that must all appear in the device name (case-insensitive).
    #[serde(skip)]
    pub matches: &'static [&'static str],
    /// bf16/fp16 tensor-core TFLOP/s, dense.
    pub bf16_dense: f64,
    /// TF32 tensor-core TFLOP/s, dense.
    pub tf32_dense: f64,
    /// FP32 TFLOP/s without tensor cores.
    pub fp32: f64,
    /// Device memory bandwidth, TB/s.
    pub mem_tbs: f64,
    /// NVLink bandwidth per GPU through NVSwitch, GB/s, both directions
    /// together (the datasheet's figure): every pair of an HGX board's GPUs
    /// has it. `None` for PCIe cards, whose NVLink bridges (if fitted) join
    /// only some pairs, so no one figure holds for a pair or an all-reduce.
    pub nvlink_gbs: Option<f64>,
    /// The datasheet.
    pub source: &'static str,
}

/// The table, most specific rows first (the first matching row wins).
pub const PEAKS: &[GpuPeak] = &[
    // H200 NVL (NVML/CUDA name "NVIDIA H200 NVL"): PCIe card at 600 W,
    // before the H200 row, which would otherwise claim it.
    GpuPeak {
        model: "H200 NVL",
        matches: &["H200", "NVL"],
        bf16_dense: 835.5,
        tf32_dense: 417.5,
        fp32: 60.0,
        mem_tbs: 4.8,
        nvlink_gbs: None,
        source: "https://www.nvidia.com/en-us/data-center/h200/ (H200 NVL: BF16 1,671 TFLOPS with sparsity, TF32 835, FP32 60, 4.8 TB/s)",
    },
    // H200 SXM: the H100 SXM's SMs and clocks with HBM3e.
    GpuPeak {
        model: "H200",
        matches: &["H200"],
        bf16_dense: 989.5,
        tf32_dense: 494.5,
        fp32: 67.0,
        mem_tbs: 4.8,
        nvlink_gbs: Some(900.0),
        source: "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: BF16 1,979 TFLOPS with sparsity, TF32 989, FP32 67, 4.8 TB/s, NVLink 900 GB/s)",
    },
    GpuPeak {
        model: "H100 NVL",
        matches: &["H100", "NVL"],
        bf16_dense: 835.5,
        tf32_dense: 417.5,
        fp32: 60.0,
        mem_tbs: 3.9,
        nvlink_gbs: None,
        source: "https://www.nvidia.com/en-us/data-center/h100/ (H100 NVL: BF16 1,671 TFLOPS with sparsity, TF32 835, FP32 60, 3.9 TB/s)",
    },
    GpuPeak {
        model: "H100 PCIe",
        matches: &["H100", "PCIE"],
        bf16_dense: 756.5,
        tf32_dense: 378.0,
        fp32: 51.0,
        mem_tbs: 2.0,
        nvlink_gbs: None,
        source: "https://www.nvidia.com/en-us/data-center/h100/ (H100 PCIe: BF16 1,513 TFLOPS with sparsity, TF32 756, FP32 51, 2 TB/s)",
    },
    GpuPeak {
        model: "H100",
        matches: &["H100"],
        bf16_dense: 989.5,
        tf32_dense: 494.5,
        fp32: 67.0,
        mem_tbs: 3.35,
        nvlink_gbs: Some(900.0),
        source: "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM: BF16 1,979 TFLOPS with sparsity, TF32 989, FP32 67, 3.35 TB/s, NVLink 900 GB/s)",
    },
    // B200 on an HGX board at 1,000 W (NVML name "NVIDIA B200").
    GpuPeak {
        model: "B200",
        matches: &["B200"],
        bf16_dense: 2250.0,
        tf32_dense: 1100.0,
        fp32: 80.0,
        mem_tbs: 8.0,
        nvlink_gbs: Some(1800.0),
        source: "https://www.nvidia.com/en-us/data-center/hgx/ and https://glennklockwood.com/garden/processors/B200 (HGX B200 at 1,000 W: BF16 4,500 TFLOPS with sparsity, TF32 2,200 with sparsity, FP32 80, 8 TB/s HBM3e, NVLink 5 1.8 TB/s)",
    },
    // The PCIe A100s ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe")
    // before the SXM rows: same tensor cores, slower HBM, no NVSwitch.
    GpuPeak {
        model: "A100 80GB PCIe",
        matches: &["A100", "80GB", "PCIE"],
        bf16_dense: 312.0,
        tf32_dense: 156.0,
        fp32: 19.5,
        mem_tbs: 1.935,
        nvlink_gbs: None,
        source: "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB PCIe: BF16 312 TFLOPS dense, TF32 156, FP32 19.5, 1,935 GB/s)",
    },
    GpuPeak {
        model: "A100 PCIe",
        matches: &["A100", "PCIE"],
        bf16_dense: 312.0,
        tf32_dense: 156.0,
        fp32: 19.5,
        mem_tbs: 1.555,
        nvlink_gbs: None,
        source: "https://www.nvidia.com/en-us/data-center/a100/ (A100 40GB PCIe: BF16 312 TFLOPS dense, TF32 156, FP32 19.5, 1,555 GB/s)",
    },
    GpuPeak {
        model: "A100 80GB",
        matches: &["A100", "80GB"],
        bf16_dense: 312.0,
        tf32_dense: 156.0,
        fp32: 19.5,
        mem_tbs: 2.039,
        nvlink_gbs: Some(600.0),
        source: "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB SXM: BF16 312 TFLOPS dense, TF32 156, FP32 19.5, 2,039 GB/s, NVLink 600 GB/s)",
    },
    GpuPeak {
        model: "A100",
        matches: &["A100"],
        bf16_dense: 312.0,
        tf32_dense: 156.0,
        fp32: 19.5,
        mem_tbs: 1.555,
        nvlink_gbs: Some(600.0),
        source: "https://www.nvidia.com/en-us/data-center/a100/ (A100 40GB: BF16 312 TFLOPS dense, TF32 156, FP32 19.5, 1,555 GB/s, NVLink 600 GB/s)",
    },
    GpuPeak {
        model: "L40S",
        matches: &["L40S"],
        bf16_dense: 362.05,
        tf32_dense: 183.0,
        fp32: 91.6,
        mem_tbs: 0.864,
        nvlink_gbs: None,
        source: "https://www.nvidia.com/en-us/data-center/l40s/ (L40S: BF16 733 TFLOPS with sparsity, TF32 366, FP32 91.6, 864 GB/s)",
    },
];

/// The table row for a device name ("NVIDIA H200", "NVIDIA A100-SXM4-80GB").
pub fn lookup(device_name: &str) -> Option<&'static GpuPeak> {
    let upper = device_name.to_ascii_uppercase();
    PEAKS
        .iter()
        .find(|p| p.matches.iter().all(|m| upper.contains(m)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_right_row() {
        // The names NVML and cudaGetDeviceProperties report.
        assert_eq!(lookup("NVIDIA H200").unwrap().model, "H200");
        assert_eq!(lookup("NVIDIA H200 NVL").unwrap().model, "H200 NVL");
        assert_eq!(lookup("NVIDIA H200 NVL").unwrap().bf16_dense, 835.5);
        assert_eq!(lookup("NVIDIA H100 80GB HBM3").unwrap().model, "H100");
        assert_eq!(lookup("NVIDIA H100 PCIe").unwrap().model, "H100 PCIe");
        assert_eq!(lookup("NVIDIA H100 NVL").unwrap().model, "H100 NVL");
        assert_eq!(lookup("NVIDIA A100-SXM4-80GB").unwrap().model, "A100 80GB");
        assert_eq!(lookup("NVIDIA A100-PCIE-40GB").unwrap().model, "A100 PCIe");
        assert_eq!(
            lookup("NVIDIA A100 80GB PCIe").unwrap().model,
            "A100 80GB PCIe"
        );
        assert_eq!(lookup("NVIDIA A100-SXM4-40GB").unwrap().model, "A100");
        assert_eq!(lookup("NVIDIA B200").unwrap().model, "B200");
        assert_eq!(lookup("NVIDIA L40S").unwrap().nvlink_gbs, None);
        assert!(lookup("Tesla T4").is_none());
    }

    #[test]
    fn every_row_names_its_public_source_and_the_figures_it_quotes() {
        for p in PEAKS {
            assert!(
                p.source.starts_with("https://"),
                "{}: {}",
                p.model,
                p.source
            );
            // The source's parenthesis quotes the row's model and its HBM figure.
            assert!(
                p.source.contains(p.model.split(' ').next().unwrap()),
                "{}",
                p.model
            );
            assert!(
                p.bf16_dense > 0.0 && p.fp32 > 0.0 && p.mem_tbs > 0.0,
                "{}",
                p.model
            );
            if let Some(nv) = p.nvlink_gbs {
                assert!(
                    p.source.contains(&format!("NVLink {}", nv as u64))
                        || p.source.contains(&format!("{:.1} TB/s)", nv / 1000.0)),
                    "{}: NVLink {nv} not in {}",
                    p.model,
                    p.source
                );
            }
        }
    }
}
