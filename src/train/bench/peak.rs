//! Which datasheet peak (from [`crate::gpus`], the one table of GPU figures)
//! a benchmark's MFU is measured against. Measuring is the benchmark's job.
use crate::train::config::Precision;

pub use crate::gpus::{lookup, GpuPeak, PEAKS};

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
    fn precision_picks_the_peak() {
        let h200 = lookup("NVIDIA H200").unwrap();
        assert_eq!(peak_for(h200, Precision::Bf16).0, 989.5);
        assert_eq!(peak_for(h200, Precision::Fp32).0, 494.5);
    }
}
