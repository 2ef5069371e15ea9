//! What every tch body of the functional checks needs: the GPU's product
//! name (from NVML, for datasheet floors and expected values), torch's device for a GPU or the
//! SKIP saying why not, and a synchronisation that returns CUDA errors.
//!
//! It judges nothing and must not run a workload of its own.
use tch::{Device, Kind, TchError, Tensor};

use crate::gpus::expected::{expected, Expected, Metric, NoReference};
use crate::verify::check::CheckResult;
use crate::verify::context::Context;

/// The product name NVML reports for GPU `g`, if NVML can say.
pub(super) fn gpu_name(ctx: &Context, g: u32) -> Option<String> {
    ctx.nvml_backend("func").ok()?.name(g).ok()
}

/// What `metric` should read on GPU `g`, from the reference table by the
/// name NVML gives it; without a name, the reason.
pub(super) fn expected_on(ctx: &Context, g: u32, metric: Metric) -> Result<Expected, NoReference> {
    match gpu_name(ctx, g) {
        Some(name) => expected(metric, &name),
        None => Err(NoReference(format!(
            "no reference: NVML did not name GPU {g}"
        ))),
    }
}

/// SKIP when torch cannot use GPU `g` (torch.cuda_available / torch.device_count carry that verdict).
pub(super) fn device_or_skip(id: &str, g: u32) -> Result<Device, Box<CheckResult>> {
    if !crate::verify::torch::cuda_available() {
        return Err(Box::new(CheckResult::skip(
            id,
            "CUDA not available to torch (see torch.cuda_available)",
        )));
    }
    let n = tch::Cuda::device_count();
    if i64::from(g) >= n {
        return Err(Box::new(CheckResult::skip(
            id,
            format!("torch sees only {n} GPU(s) (see torch.device_count)"),
        )));
    }
    Ok(Device::Cuda(g as usize))
}

/// Waits for the work queued on `device`: a one-element device-to-host
/// read, which synchronises torch's (default) stream like
/// `tch::Cuda::synchronize` does, but returns a failed kernel's CUDA
/// error instead of panicking on it (tch unwraps inside `synchronize`).
pub(super) fn sync(device: Device) -> Result<(), TchError> {
    if let Device::Cuda(_) = device {
        let _ = Tensor::f_zeros([1], (Kind::Float, device))?.f_to_device(Device::Cpu)?;
    }
    Ok(())
}
