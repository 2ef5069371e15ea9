use super::matmul::{matmul_rel_error, matmul_tflops, product_errors};
use super::nccl;
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
        crate::verify::Status::Fail
    );
    assert_eq!(
        judge_rate("func.x", "copy", 4.3, "TB/s", Some((2.4, "50%".into()))).status,
        crate::verify::Status::Pass
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
