//! The fused GroupNorm's self-check: before first use on a device, its
//! forward and backward on small inputs against ATen's `group_norm` + `silu`
//! computed in fp32 from the same (dtype-rounded) inputs, within
//! [`tolerance`]. Only a passed check turns the kernels on
//! ([`super::group_norm::ready`]); a failed one says why, for the run to
//! print before it falls back to ATen.
//!
//! The inputs come from a fixed formula, not from torch's generators, so a
//! check never moves the training run's random stream.
use tch::{Device, Kind, Tensor};

use super::group_norm::{self, channels_last_copy, op};

/// The shapes checked, `[N, C, H, W]` with 32 groups: 4 channels a group and
/// 10 (not a power of two) over an odd pixel count.
pub const SHAPES: [[i64; 4]; 2] = [[2, 128, 8, 8], [1, 320, 5, 7]];
/// Groups in the check (the UNet's).
pub const GROUPS: i64 = 32;
/// Epsilon in the check (the UNet's default).
pub const EPS: f64 = 1e-5;

/// The largest error the check accepts for activations of `kind`, as the
/// worst absolute difference over the largest reference magnitude: a few
/// units in the last place of the dtype (fp32 1e-4, fp16 2e-3, bf16 1e-2).
pub fn tolerance(kind: Kind) -> f64 {
    match kind {
        Kind::BFloat16 => 1e-2,
        Kind::Half => 2e-3,
        _ => 1e-4,
    }
}

/// What one passed self-check measured.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckReport {
    /// The activation dtype checked.
    pub kind: Kind,
    /// Worst normalised error of y, dx, dgamma and dbeta over [`SHAPES`].
    pub errors: [f64; 4],
    /// [`tolerance`] of `kind`.
    pub tolerance: f64,
}

/// What the errors measure, in [`CheckReport::errors`]' order.
pub const QUANTITIES: [&str; 4] = ["y", "dx", "dgamma", "dbeta"];

/// A fixed pseudo-random sequence in [-2, 2) (a 32-bit LCG).
fn pattern(len: i64, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 4.0 - 2.0
        })
        .collect()
}

/// Worst |a - b| over the largest |b| (floor 1e-3); infinite for a NaN.
pub fn normalised_error(a: &Tensor, b: &Tensor) -> f64 {
    let a = a.to_kind(Kind::Double).to_device(Device::Cpu);
    let b = b.to_kind(Kind::Double).to_device(Device::Cpu);
    let diff = f64::try_from((&a - &b).abs().max()).unwrap_or(f64::INFINITY);
    let scale = f64::try_from(b.abs().max()).unwrap_or(0.0).max(1e-3);
    if diff.is_finite() {
        diff / scale
    } else {
        f64::INFINITY
    }
}

fn check_shape(device: Device, kind: Kind, [n, c, h, w]: [i64; 4]) -> Result<[f64; 4], String> {
    let numel = n * c * h * w;
    let x0 = Tensor::from_slice(&pattern(numel, 1))
        .view([n, c, h, w])
        .to_kind(kind)
        .to_device(device);
    let gamma: Vec<f32> = pattern(c, 2).iter().map(|v| 1.0 + 0.25 * v).collect();
    let beta: Vec<f32> = pattern(c, 3).iter().map(|v| 0.3 * v).collect();
    let wts = Tensor::from_slice(&pattern(numel, 4))
        .view([n, c, h, w])
        .to_device(device);
    let leaf = |v: &[f32]| {
        Tensor::from_slice(v)
            .to_device(device)
            .set_requires_grad(true)
    };

    let xr = x0.to_kind(Kind::Float).detach().set_requires_grad(true);
    let (gr, br) = (leaf(&gamma), leaf(&beta));
    let yr = xr
        .group_norm(GROUPS, Some(&gr), Some(&br), EPS, false)
        .silu();
    (&yr * &wts).sum(Kind::Float).backward();

    let xk = channels_last_copy(&x0).detach().set_requires_grad(true);
    let (gk, bk) = (leaf(&gamma), leaf(&beta));
    let yk = op(GROUPS, EPS, true).apply(&xk, &gk, &bk)?;
    (yk.to_kind(Kind::Float) * &wts).sum(Kind::Float).backward();
    Ok([
        normalised_error(&yk, &yr),
        normalised_error(&xk.grad(), &xr.grad()),
        normalised_error(&gk.grad(), &gr.grad()),
        normalised_error(&bk.grad(), &br.grad()),
    ])
}

/// Runs the check for activations of `kind` on `device` (through the CPU
/// replay on the CPU). `Err` names the first quantity out of tolerance, or
/// why the kernels could not run.
pub fn self_check(device: Device, kind: Kind) -> Result<CheckReport, String> {
    let run = || -> Result<[f64; 4], String> {
        let mut worst = [0f64; 4];
        for shape in SHAPES {
            let e = check_shape(device, kind, shape)?;
            for (w, e) in worst.iter_mut().zip(e) {
                *w = w.max(e);
            }
        }
        Ok(worst)
    };
    let errors =
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tch::with_grad(run))) {
            Ok(r) => r?,
            Err(p) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into());
                return Err(msg.lines().next().unwrap_or_default().to_string());
            }
        };
    let tol = tolerance(kind);
    for (q, e) in QUANTITIES.iter().zip(errors) {
        if e.is_nan() || e > tol {
            return Err(format!(
                "{q} is off by {e:.1e} of its range (tolerance {tol:.0e})"
            ));
        }
    }
    Ok(CheckReport {
        kind,
        errors,
        tolerance: tol,
    })
}

/// Compiles and self-checks the kernels for each of `kinds` on CUDA device
/// `device`, turning on those that pass; one result per kind.
pub fn prepare(device: usize, kinds: &[Kind]) -> Vec<(Kind, Result<CheckReport, String>)> {
    let mut out = Vec::new();
    for &kind in kinds {
        if out.iter().any(|(k, _)| *k == kind) {
            continue;
        }
        let r = self_check(Device::Cuda(device), kind);
        group_norm::mark_checked(device, kind, r.is_ok());
        out.push((kind, r));
    }
    out
}
