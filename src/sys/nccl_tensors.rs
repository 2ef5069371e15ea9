//! tch tensors handed to NCCL: an out-of-place all-reduce from one CUDA
//! tensor into another (verify's `func.nccl_allreduce`).
//!
//! Owns the checks that make handing a tensor's device pointer to NCCL sound
//! (defined, contiguous, on a CUDA device, an element type NCCL is told
//! about, send and receive alike); NCCL itself refuses a pointer that is not
//! on the communicator's device (`ncclInvalidArgument`, from its argument
//! check `CudaPtrCheck`, src/misc/argcheck.cc). It must not decide which
//! tensors are reduced, nor allocate or synchronise.
use tch::{Kind, Tensor};

use crate::nccl::{Communicator, DataType, RedOp, LEGACY_STREAM};

/// The NCCL type of a tensor of `kind`, for the kinds collectives move.
fn data_type(kind: Kind) -> Option<DataType> {
    match kind {
        Kind::Float => Some(DataType::Float32),
        Kind::BFloat16 => Some(DataType::Bfloat16),
        _ => None,
    }
}

/// All-reduces `send` into `recv` with `op` on the legacy default stream
/// (ordered with torch's kernels). Both must be contiguous f32 or bf16 CUDA
/// tensors of one kind, one device and one length, and stay alive until the
/// stream has run the collective (the caller synchronises before dropping
/// them). Call it inside [`crate::nccl::NcclLibrary::group`] when one thread
/// drives several communicators.
pub fn all_reduce_into(
    comm: &Communicator,
    send: &Tensor,
    recv: &Tensor,
    op: RedOp,
) -> anyhow::Result<()> {
    let dtype = data_type(send.kind()).filter(|_| {
        send.defined()
            && recv.defined()
            && send.device().is_cuda()
            && send.is_contiguous()
            && recv.is_contiguous()
            && recv.kind() == send.kind()
            && recv.device() == send.device()
            && recv.numel() == send.numel()
    });
    let Some(dtype) = dtype else {
        anyhow::bail!(
            "NCCL buffers must be contiguous f32 or bf16 CUDA tensors of one kind, device and length, got {:?} on {:?} into {:?} on {:?}",
            send.kind(),
            send.device(),
            recv.kind(),
            recv.device()
        );
    };
    // SAFETY: checked above: `send` and `recv` are contiguous tensors of
    // `numel` elements of `dtype` on one GPU, so both pointers address that
    // many elements there, alive while the caller holds the tensors (it
    // synchronises before dropping them); a pointer on another device than
    // the communicator's is refused by NCCL's argument check; the legacy
    // default stream always exists.
    unsafe {
        comm.all_reduce(
            LEGACY_STREAM,
            send.data_ptr(),
            recv.data_ptr(),
            send.numel(),
            dtype,
            op,
        )
    }
}
