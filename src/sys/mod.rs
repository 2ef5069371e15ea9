//! Every unsafe FFI seam of imgctl, and nothing else.
#[cfg(feature = "torch")]
pub mod nccl_tensors;
pub mod nvml_raw;
