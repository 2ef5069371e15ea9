//! The collective operations data parallelism needs, behind one trait.
//!
//! [`Collective`] is what the gradient buckets and the trainer call: sum or
//! average a flat buffer across ranks, broadcast from rank 0, and a barrier.
//! Backends: [`nccl::NcclCollective`] on GPUs, [`cpu::CpuCollective`]
//! over TCP for CPU ranks, and [`Solo`] for a world of one. This module owns the
//! trait and the buffer checks; it must not open sockets or load libraries.
//!
//! Part: the shared floor (`docs/architecture.md`).
use tch::{Device, Kind, Tensor};

use super::error::CollectiveError;

pub mod cpu;
pub mod nccl;

/// Which engine moves the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// One rank, nothing to communicate.
    Single,
    /// NCCL over the GPUs.
    Nccl,
    /// TCP between CPU ranks, reduced at rank 0.
    Cpu,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Single => "single",
            Backend::Nccl => "nccl",
            Backend::Cpu => "cpu",
        })
    }
}

/// Collective operations over flat, contiguous `f32` or `bf16` tensors.
///
/// Every rank must call the same operations in the same order with buffers of
/// the same length and kind; the results are bit-identical on all ranks.
pub trait Collective: Send {
    /// This process's rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn world_size(&self) -> usize;
    /// The engine.
    fn backend(&self) -> Backend;
    /// Replaces `buf` on every rank by the element-wise sum over ranks.
    fn all_reduce_sum(&mut self, buf: &Tensor) -> anyhow::Result<()>;
    /// Replaces `buf` on every rank by the element-wise mean over ranks.
    fn all_reduce_avg(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        self.all_reduce_sum(buf)?;
        let n = self.world_size();
        if n > 1 {
            let mut b = buf.shallow_clone();
            let _ = b.g_div_scalar_(n as f64);
        }
        Ok(())
    }
    /// Copies rank 0's `buf` into `buf` on every other rank.
    fn broadcast(&mut self, buf: &Tensor) -> anyhow::Result<()>;
    /// Returns on every rank once all ranks have called it.
    fn barrier(&mut self) -> anyhow::Result<()>;

    /// Prepares the calling thread (a worker of the overlapped gradient
    /// all-reduce) for [`Collective::all_reduce_avg_async`]: on a GPU, selects
    /// the device and makes the communication stream.
    fn begin_async(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
    /// Starts averaging `buf` after the work already queued for the device
    /// (the backward kernels that wrote it), without making that queue wait:
    /// on a GPU on a stream of its own. The CPU backends simply run it.
    /// Nothing may read `buf` before [`Collective::wait_async`].
    fn all_reduce_avg_async(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        self.all_reduce_avg(buf)
    }
    /// Makes work queued for the device from now on wait for every
    /// [`Collective::all_reduce_avg_async`] started so far.
    fn wait_async(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// The collective of a world of one: every operation is the identity.
#[derive(Debug, Default)]
pub struct Solo;

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn backend(&self) -> Backend {
        Backend::Single
    }
    fn all_reduce_sum(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        check_buffer(buf, None).map(|_| ())
    }
    fn broadcast(&mut self, buf: &Tensor) -> anyhow::Result<()> {
        check_buffer(buf, None).map(|_| ())
    }
    fn barrier(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Element types the collectives carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// 32-bit float.
    F32,
    /// bfloat16.
    Bf16,
}

impl Elem {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Elem::F32 => 4,
            Elem::Bf16 => 2,
        }
    }
    /// A one-byte tag for wire headers.
    pub fn tag(self) -> u8 {
        match self {
            Elem::F32 => 1,
            Elem::Bf16 => 2,
        }
    }
}

/// Checks that `buf` is a collective buffer (contiguous `f32`/`bf16`, on
/// `device` when given) and returns its element type.
pub fn check_buffer(buf: &Tensor, device: Option<Device>) -> anyhow::Result<Elem> {
    let elem = match buf.kind() {
        Kind::Float => Elem::F32,
        Kind::BFloat16 => Elem::Bf16,
        k => return Err(CollectiveError::Kind(k).into()),
    };
    if !buf.is_contiguous() {
        return Err(CollectiveError::NotContiguous.into());
    }
    if let Some(d) = device {
        if buf.device() != d {
            return Err(CollectiveError::WrongDevice {
                buffer: buf.device(),
                comm: d,
            }
            .into());
        }
    }
    Ok(elem)
}

/// Converts a bf16 bit pattern to f32 (bf16 is the upper half of an f32).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// Rounds an f32 to bf16 (round to nearest, ties to even; NaN stays NaN), as
/// torch's `c10::BFloat16` round_to_nearest_even does.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let lsb = (bits >> 16) & 1;
    let rounding_bias = 0x7fff + lsb;
    ((bits.wrapping_add(rounding_bias)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_round_trip() {
        for x in [0.0f32, 1.0, -2.5, 3.140625, 1e-3, 65504.0] {
            let b = f32_to_bf16(x);
            let t = Tensor::from_slice(&[x]).to_kind(Kind::BFloat16);
            let torch_bits = {
                let mut out = [0u8; 2];
                t.copy_data_u8(&mut out, 1);
                u16::from_le_bytes(out)
            };
            assert_eq!(b, torch_bits, "{x}");
            assert!((bf16_to_f32(b) - x).abs() <= x.abs() / 128.0);
        }
    }

    #[test]
    fn solo_is_identity_and_checks() {
        let mut s = Solo;
        let t = Tensor::from_slice(&[1.0f32, 2.0]);
        s.all_reduce_avg(&t).unwrap();
        assert_eq!(Vec::<f32>::try_from(&t).unwrap(), vec![1.0, 2.0]);
        let bad = Tensor::from_slice(&[1i64]);
        assert!(s.all_reduce_sum(&bad).is_err());
    }
}
