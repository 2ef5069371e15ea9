//! When a training step reads its loss and gradient norm back to the host.
//!
//! The read is the step's one host synchronisation (the loader, the update
//! and the EMA run without one): the host waits for the device to finish
//! the step. Every `read_every` steps, the steps since the last read come
//! back in one transfer ([`read`]), their losses averaged over the ranks
//! in one collective; in between the host queues the next step while the
//! device still runs this one. A read also falls on the last step, on every
//! checkpoint and sample step, and on every step in fp16 (its loss scaler
//! decides each step on the host) and in profiled steps (which synchronise
//! anyway). A NaN or infinite value is found at the read that covers its
//! step, which ends the run naming that step; no checkpoint is written in
//! between (checkpoint steps read first, and a checkpoint's weights are
//! checked finite before they are written).
use tch::{Device, Kind, Tensor};

/// The interval on CUDA when the setting says auto (0).
pub const CUDA_READ_EVERY: u64 = 10;

/// One step whose loss (this rank's) and gradient norm are still on the device.
#[derive(Debug)]
pub struct Pending {
    /// The step (1-based).
    pub step: u64,
    /// Its loss, a scalar tensor.
    pub loss: Tensor,
    /// Its gradient norm before clipping, a scalar tensor.
    pub norm: Tensor,
}

/// A step's values once read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResolvedStep {
    /// The step (1-based).
    pub step: u64,
    /// Its loss, averaged over the ranks.
    pub loss: f64,
    /// Its gradient norm before clipping.
    pub grad_norm: f64,
    /// This rank's own loss was finite.
    pub local_loss_finite: bool,
}

impl ResolvedStep {
    /// Loss and gradient norm are finite here and on every rank.
    pub fn finite(&self) -> bool {
        self.local_loss_finite && self.loss.is_finite() && self.grad_norm.is_finite()
    }
}

/// The interval in force: `setting`, or with 0 (auto) every step on the CPU
/// (whose "device" is the host: a read waits for nothing) and
/// [`CUDA_READ_EVERY`] on CUDA.
pub fn read_every(setting: u64, device: Device) -> u64 {
    match (setting, device) {
        (0, Device::Cuda(_)) => CUDA_READ_EVERY,
        (0, _) => 1,
        (n, _) => n,
    }
}

/// `(loss, norm)` of each of `pending`, in order, in one device-to-host
/// transfer.
pub fn read(pending: &[Pending]) -> anyhow::Result<Vec<(f64, f64)>> {
    if pending.is_empty() {
        return Ok(Vec::new());
    }
    let parts: Vec<Tensor> = pending
        .iter()
        .flat_map(|p| {
            [
                p.loss.detach().to_kind(Kind::Double).reshape([1]),
                p.norm.detach().to_kind(Kind::Double).reshape([1]),
            ]
        })
        .collect();
    let v = Vec::<f64>::try_from(Tensor::cat(&parts, 0).to_device(Device::Cpu))?;
    Ok(v.chunks(2).map(|c| (c[0], c[1])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_reads_every_step_on_the_cpu_and_every_ten_on_cuda() {
        assert_eq!(read_every(0, Device::Cpu), 1);
        assert_eq!(read_every(0, Device::Cuda(0)), CUDA_READ_EVERY);
        assert_eq!(read_every(4, Device::Cpu), 4);
        assert_eq!(read_every(1, Device::Cuda(0)), 1);
    }

    #[test]
    fn a_window_reads_back_in_order() {
        let p = |step: u64, l: f64, n: f32| Pending {
            step,
            loss: Tensor::from(l as f32),
            norm: Tensor::from(n),
        };
        let got = read(&[p(1, 0.5, 2.0), p(2, f64::NAN, 3.0)]).unwrap();
        assert_eq!(got[0], (0.5, 2.0));
        assert!(got[1].0.is_nan() && got[1].1 == 3.0);
        assert!(read(&[]).unwrap().is_empty());
        let r = ResolvedStep {
            step: 1,
            loss: 0.1,
            grad_norm: f64::INFINITY,
            local_loss_finite: true,
        };
        assert!(!r.finite());
    }
}
