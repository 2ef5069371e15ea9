//! What the NCCL and CUDA runtime shims' errors mean for the user of
//! `imgctl train-demo` and of `verify`'s NCCL check: their exit status and the
//! hints (where NCCL and the CUDA runtime come from).
//!
//! Covers [`NcclError`] and [`CudaError`] of `sys` (also without the `torch` feature).

use super::advice::Advice;
use crate::sys::cudart::CudaError;
use crate::sys::nccl::NcclError;

/// The hint of an NCCL that is missing or unusable.
const NCCL_MISSING_HINT: &str =
    "NCCL comes with the PyTorch CUDA wheel (nvidia-nccl-cu12, file libnccl.so.2); \
     use an image built by `imgctl build`, or train on one device without --gpus";

/// Advice for the errors of `sys::nccl` and `sys::cudart`.
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    if let Some(e) = err.downcast_ref::<NcclError>() {
        return Some(nccl_error(e));
    }
    err.downcast_ref::<CudaError>().map(cuda_error)
}

fn nccl_error(e: &NcclError) -> Advice {
    match e {
        NcclError::Load { .. } | NcclError::MissingSymbol { .. } => {
            Advice::failure(NCCL_MISSING_HINT.to_string())
        }
        NcclError::NotMapped => Advice::failure(
            "a CUDA build of libtorch loads libnccl.so.2 (libtorch_cuda.so links it); \
             a CPU-only libtorch has no NCCL"
                .to_string(),
        ),
        NcclError::Call { .. } => {
            Advice::failure("set NCCL_DEBUG=INFO for NCCL's own diagnostics".to_string())
        }
    }
}

fn cuda_error(e: &CudaError) -> Advice {
    match e {
        CudaError::Load { .. } => Advice::failure(
            "libtorch's CUDA wheels ship it (libcudart.so.12 in nvidia-cuda-runtime-cu12, \
             libcudart.so.13 in nvidia-cuda-runtime); use a CUDA build of torch, or train on the CPU"
                .to_string(),
        ),
        CudaError::MissingSymbol { .. } | CudaError::MemGetInfo { .. } => Advice::failure(None),
        CudaError::SetDevice { .. } => {
            Advice::failure("check CUDA_VISIBLE_DEVICES and `imgctl verify`".to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::error::{render_error, status_of};
    use crate::error::ExitStatus;

    fn text(e: impl Into<anyhow::Error>) -> (String, ExitStatus) {
        let e = e.into();
        (render_error(&e), status_of(&e))
    }

    #[test]
    fn sys_errors_keep_their_hints_without_torch_too() {
        let (t, s) = text(CudaError::SetDevice {
            index: 3,
            error: "CUDA error 101 (invalid device ordinal)".into(),
        });
        assert_eq!(
            t,
            "error: cudaSetDevice(3) failed with CUDA error 101 (invalid device ordinal)\n\n\
             hint: check CUDA_VISIBLE_DEVICES and `imgctl verify`\n"
        );
        assert_eq!(s, ExitStatus::Failure);
        let (t, _) = text(NcclError::NotMapped);
        assert!(
            t.ends_with("(libtorch_cuda.so links it); a CPU-only libtorch has no NCCL\n"),
            "{t}"
        );
        let (t, _) = text(CudaError::MemGetInfo {
            error: "CUDA error 2".into(),
        });
        assert_eq!(t, "error: cudaMemGetInfo failed with CUDA error 2\n");
    }
}
