//! Every `unsafe` FFI seam of imgctl, and nothing else: safe wrappers out,
//! raw pointers in.
//!
//! Each file here binds one foreign interface (a C library loaded at run
//! time, our C++ shim, or a libc call) and turns it into safe Rust: it owns
//! the symbols, their signatures, the handles' lifetimes and the checks that
//! make each call sound, with a `SAFETY` comment at every `unsafe` block. The
//! rest of the crate says no `unsafe` (`#![deny(unsafe_code)]` in lib.rs).
//! This module decides nothing: which check, backend or exit code uses a call
//! belongs to the callers, and nothing here imports from `train`, `verify`,
//! `bench` or `commands`.
//!
//! - [`nccl`]: the NCCL library (`libnccl.so.2`) and its communicators;
//!   `nccl_tensors` (the `torch` feature) hands tch tensors to them.
//! - [`nvml_raw`]: the NVML calls nvml-wrapper lacks.
//! - [`cudart`]: the CUDA runtime calls tch lacks (device, memory, streams, events).
//! - [`cuda_driver`], [`nvrtc`]: the CUDA driver (load and launch a module) and NVRTC (compile one), for imgctl's own kernels.
//! - [`cuda_libs`]: the version and device-count queries of a mapped cudart, cuBLAS or cuDNN.
//! - [`procmaps`]: the files mapped in this process (`/proc/self/maps`).
//! - `torch_ext`, `torch_fn` and `tensor` (the `torch` feature): our C++ shim over libtorch (autograd functions in Rust, the current CUDA stream), and a tensor's memory handed to raw code.
//! - [`process`], [`fs`], [`net`]: the libc calls (signals, `_exit`, access, statvfs, flock, a dual-stack socket).
//! - [`venv`]: the Python venvs looked in for libtorch and uv.
//!
//! Part: the base (`docs/architecture.md`).
pub mod cuda_driver;
pub mod cuda_libs;
pub mod cudart;
pub mod fs;
pub mod nccl;
#[cfg(feature = "torch")]
pub mod nccl_tensors;
pub mod net;
pub mod nvml_raw;
pub mod nvrtc;
pub mod process;
pub mod procmaps;
#[cfg(feature = "torch")]
pub mod tensor;
#[cfg(feature = "torch")]
pub mod torch_ext;
#[cfg(feature = "torch")]
pub mod torch_fn;
pub mod venv;
