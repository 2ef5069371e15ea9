//! A tch tensor's host memory handed to Rust: the bytes of a contiguous CPU
//! tensor as a slice, written in place (the CPU collective). A tensor's
//! device pointer goes to NCCL through [`super::nccl_tensors`].
//!
//! Owns the checks that make the hand-over sound (contiguous storage on the
//! CPU); callers still check their buffers first and report their own
//! errors, so the error here only guards against a caller that did not.
//! This module must not decide which tensors are reduced, nor how.
use tch::Tensor;

/// Runs `f` on the bytes of a contiguous CPU tensor, writable in place.
/// Errors when `buf` is not a contiguous CPU tensor.
pub fn with_cpu_bytes<R>(buf: &Tensor, f: impl FnOnce(&mut [u8]) -> R) -> anyhow::Result<R> {
    if buf.device() != tch::Device::Cpu || !buf.is_contiguous() {
        anyhow::bail!(
            "only a contiguous CPU tensor can be read as bytes, got one on {:?}",
            buf.device()
        );
    }
    let len = buf.numel() * buf.kind().elt_size_in_bytes();
    if len == 0 {
        return Ok(f(&mut []));
    }
    // SAFETY: checked above (and by the caller's `check_buffer`): a
    // contiguous CPU tensor of `numel` elements of its kind, `len` bytes from
    // `data_ptr`; the slice does not outlive this call, and no other Rust
    // reference reads the storage during the collective.
    let bytes = unsafe { std::slice::from_raw_parts_mut(buf.data_ptr() as *mut u8, len) };
    Ok(f(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    #[test]
    fn cpu_bytes_are_the_tensor_in_place() {
        let t = Tensor::from_slice(&[1.0f32, 2.0]);
        let n = with_cpu_bytes(&t, |b| {
            b[..4].copy_from_slice(&3.0f32.to_le_bytes());
            b.len()
        })
        .unwrap();
        assert_eq!(n, 8);
        assert_eq!(Vec::<f32>::try_from(&t).unwrap(), [3.0, 2.0]);
        let empty = Tensor::zeros([0], (Kind::Float, Device::Cpu));
        assert_eq!(with_cpu_bytes(&empty, |b| b.len()).unwrap(), 0);
        let strided = Tensor::zeros([2, 2], (Kind::Float, Device::Cpu)).transpose(0, 1);
        assert!(with_cpu_bytes(&strided, |_| ()).is_err());
    }
}
