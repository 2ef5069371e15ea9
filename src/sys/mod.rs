//! Every unsafe FFI seam of imgctl, and nothing else.
pub mod nvml_raw;
