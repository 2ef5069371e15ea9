//! tch tensors handed to NCCL: an out-of-place all-reduce from one CUDA
//! tensor into another (verify's `func.nccl_allreduce`), and the in-place
//! all-reduce and broadcast of a flat buffer (training's NCCL collective, on
//! the legacy default stream or its own [`CommStream`]).
//!
//! Owns the checks that make handing a tensor's device pointer to NCCL sound
//! (defined, contiguous, on a CUDA device, an element type NCCL is told
//! about, send and receive alike); NCCL itself refuses a pointer that is not
//! on the communicator's device (`ncclInvalidArgument`, from its argument
//! check `CudaPtrCheck`, src/misc/argcheck.cc). It must not decide which
//! tensors are reduced, nor allocate or synchronise.
use std::ffi::c_void;

use tch::{Kind, Tensor};

use super::cudart::CommStream;
use super::nccl::{Communicator, DataType, RedOp, LEGACY_STREAM};

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
/// them). Call it inside [`super::nccl::NcclLibrary::group`] when one thread
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

/// The device pointer and element type of a contiguous f32 or bf16 CUDA tensor.
fn device_buffer(buf: &Tensor) -> anyhow::Result<(*mut c_void, DataType)> {
    let dtype = data_type(buf.kind()).filter(|_| buf.device().is_cuda() && buf.is_contiguous());
    match dtype {
        Some(d) => Ok((buf.data_ptr(), d)),
        None => anyhow::bail!(
            "an NCCL buffer must be a contiguous f32 or bf16 CUDA tensor, got {:?} on {:?}",
            buf.kind(),
            buf.device()
        ),
    }
}

/// All-reduces `buf` in place with `op`, enqueued on `stream` (`None`: the
/// legacy default stream, ordered with torch's kernels). `buf` must be on
/// the communicator's device and stay alive until the stream has run the
/// collective (the trainer's flat buffers live as long as it does).
pub fn all_reduce_in_place(
    comm: &Communicator,
    stream: Option<&CommStream>,
    buf: &Tensor,
    op: RedOp,
) -> anyhow::Result<()> {
    let (p, dtype) = device_buffer(buf)?;
    let stream = stream.map_or(LEGACY_STREAM, CommStream::raw);
    // SAFETY: `device_buffer` (and the caller's check_buffer, which also
    // proved `buf` on this communicator's device) found `buf` contiguous on a
    // GPU, so p points to numel elements of `dtype` there, alive while the
    // caller holds `buf` (the flat gradient buffers live as long as the
    // trainer); in place (send == recv) is allowed by NCCL; `stream` is null
    // or a CommStream borrowed for the call (the collective's own, alive while
    // the collective is).
    unsafe { comm.all_reduce(stream, p, p, buf.numel(), dtype, op) }
}

/// Broadcasts rank `root`'s `buf` into `buf` on every rank, in place, on the
/// legacy default stream; `buf` as for [`all_reduce_in_place`].
pub fn broadcast_in_place(comm: &Communicator, buf: &Tensor, root: usize) -> anyhow::Result<()> {
    let (p, dtype) = device_buffer(buf)?;
    // SAFETY: as in `all_reduce_in_place`; `root` is the caller's (0 for the
    // trainer), on the legacy default stream.
    unsafe { comm.broadcast(p, p, buf.numel(), dtype, root) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::Device;

    #[test]
    fn nccl_buffers_must_be_cuda_f32_or_bf16() {
        let cpu = Tensor::zeros([2], (Kind::Float, Device::Cpu));
        let e = device_buffer(&cpu).unwrap_err().to_string();
        assert!(e.contains("got Float on Cpu"), "{e}");
        assert_eq!(data_type(Kind::Half), None);
        assert_eq!(data_type(Kind::BFloat16), Some(DataType::Bfloat16));
    }
}
