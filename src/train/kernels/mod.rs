//! imgctl's own CUDA kernels, compiled at run time by NVRTC: the fused
//! GroupNorm (+ SiLU) for channels-last activations ([`group_norm`], its
//! source `group_norm_silu.cu`), the CPU replay of its arithmetic
//! ([`reference`]) and its self-check against ATen ([`self_check`]).
//!
//! What a run does with them: [`resolve`] turns the requested
//! [`GroupNormKernel`] and the device into the kernels in force and, after
//! a failed self-check, the one line that says why ATen runs instead. The
//! FFI (NVRTC, the driver, autograd functions) lives in `crate::sys`.
//!
//! Part: the train wing (`docs/architecture.md`).
use tch::{Device, Kind};

use crate::choices::{GroupNormKernel, Precision};

pub mod group_norm;
pub mod reference;
pub mod self_check;

/// The GroupNorm kernels a run uses, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GroupNormStatus {
    /// What was asked for.
    pub requested: GroupNormKernel,
    /// What runs.
    pub active: GroupNormKernel,
    /// Per activation dtype checked: `passed` with the worst errors, or why not.
    pub self_check: Vec<String>,
    /// After a failed self-check: the one line that says ATen runs instead.
    pub fallback: Option<String>,
}

impl From<Precision> for ActivationKind {
    fn from(p: Precision) -> Self {
        Self(match p {
            Precision::Fp32 => Kind::Float,
            Precision::Bf16 => Kind::BFloat16,
            Precision::Fp16 => Kind::Half,
        })
    }
}

/// The dtype of the activations GroupNorm sees in a run (fp16 under autocast:
/// the convolutions' outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActivationKind(pub Kind);

impl GroupNormStatus {
    /// What a run says about its GroupNorm before training: nothing for
    /// ATen as asked; a note with the self-check for the fused kernels; the
    /// fall-back line (a warning) after a failed self-check.
    pub fn announce(&self, events: crate::train::events::Events) {
        use crate::train::events::RunEvent;
        if let Some(line) = &self.fallback {
            events(&RunEvent::Warning(line.clone()));
        } else if self.active == GroupNormKernel::Fused {
            events(&RunEvent::Note(format!(
                "GroupNorm + SiLU: imgctl's fused NHWC kernels (self-check: {})",
                self.self_check.join("; ")
            )));
        }
    }
}

/// The activation dtypes a run of `precision_kind` sends through GroupNorm:
/// fp32 always (the self-check's baseline) and the run's own.
pub fn kinds_for(precision_kind: Kind) -> Vec<Kind> {
    let mut k = vec![Kind::Float];
    if precision_kind != Kind::Float {
        k.push(precision_kind);
    }
    k
}

/// Decides the GroupNorm kernels of a run on `device` whose activations are
/// `kind`: `aten` stays `aten`; `fused` on CUDA compiles and self-checks the
/// kernels, and any failure falls back to `aten` with a reason. The CPU
/// never gets here with `fused` (the command layer refuses it).
pub fn resolve(
    requested: GroupNormKernel,
    device: Device,
    kind: impl Into<ActivationKind>,
) -> GroupNormStatus {
    let kind = kind.into().0;
    let Device::Cuda(i) = (match requested {
        GroupNormKernel::Fused => device,
        GroupNormKernel::Aten => Device::Cpu,
    }) else {
        return GroupNormStatus {
            requested,
            active: GroupNormKernel::Aten,
            self_check: Vec::new(),
            fallback: (requested == GroupNormKernel::Fused).then(|| {
                "fused GroupNorm runs on CUDA only; using ATen's group_norm + silu".into()
            }),
        };
    };
    decide(requested, self_check::prepare(i, &kinds_for(kind)))
}

/// The status from the self-checks' results: fused only when every one passed.
pub fn decide(
    requested: GroupNormKernel,
    results: Vec<(Kind, Result<self_check::CheckReport, String>)>,
) -> GroupNormStatus {
    let mut lines = Vec::new();
    let mut failed = None;
    for (kind, r) in &results {
        match r {
            Ok(rep) => lines.push(format!(
                "{kind:?} passed (errors {:.1e}/{:.1e}/{:.1e}/{:.1e} of y/dx/dgamma/dbeta, tolerance {:.0e})",
                rep.errors[0], rep.errors[1], rep.errors[2], rep.errors[3], rep.tolerance
            )),
            Err(why) => {
                lines.push(format!("{kind:?} failed: {why}"));
                failed.get_or_insert_with(|| format!("{kind:?}: {why}"));
            }
        }
    }
    let ok = failed.is_none() && !results.is_empty();
    GroupNormStatus {
        requested,
        active: if ok {
            GroupNormKernel::Fused
        } else {
            GroupNormKernel::Aten
        },
        self_check: lines,
        fallback: failed.map(|why| {
            format!("fused GroupNorm failed its self-check ({why}); using ATen's group_norm + silu")
        }),
    }
}

#[cfg(test)]
mod tests;
