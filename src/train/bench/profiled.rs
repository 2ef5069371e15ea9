//! The benchmark's profiled steps (the step-time breakdown, the device
//! synchronised between phases) and, under `IMGCTL_PROFILE_TRACE`, a Chrome
//! trace of a few more steps.
use tch::Device;

use super::{sync, Breakdown, Step};
use crate::train::events::{Events, RunEvent};
use crate::train::trainer::Trainer;

/// Steps traced under `IMGCTL_PROFILE_TRACE`.
const TRACE_STEPS: u64 = 3;

/// What the profiled steps measured.
pub(super) struct Profiled {
    /// Mean milliseconds per phase.
    pub(super) breakdown: Breakdown,
    /// The loss of the last profiled step, if there was one.
    pub(super) last_loss: Option<f64>,
}

/// `steps` profiled steps, which synchronise the device between phases, for
/// the step-time breakdown.
pub(super) fn profiled_steps(
    steps: u64,
    trainer: &mut Trainer,
    step: &mut Step<'_>,
) -> anyhow::Result<Profiled> {
    trainer.profile = true;
    let mut acc = [0.0f64; 5];
    let mut last_loss = None;
    for _ in 0..steps {
        let (data_s, s) = step(trainer)?;
        acc[0] += data_s;
        acc[1] += s.times.forward;
        acc[2] += s.times.backward;
        acc[3] += s.times.grad_sync;
        acc[4] += s.times.optimizer;
        last_loss = Some(s.loss);
    }
    trainer.profile = false;
    let n = steps.max(1) as f64;
    let ms = |v: f64| v / n * 1e3;
    let breakdown = Breakdown {
        data: ms(acc[0]),
        forward: ms(acc[1]),
        backward: ms(acc[2]),
        all_reduce: ms(acc[3]),
        optimizer: ms(acc[4]),
        total: ms(acc.iter().sum()),
        steps,
    };
    Ok(Profiled {
        breakdown,
        last_loss,
    })
}

/// Under `IMGCTL_PROFILE_TRACE`, a Chrome trace of [`TRACE_STEPS`] more
/// steps to that file (said on stderr); nothing otherwise.
pub(super) fn trace_if_asked(
    device: Device,
    trainer: &mut Trainer,
    step: &mut Step<'_>,
    events: Events,
) -> anyhow::Result<()> {
    let Some(path) = std::env::var_os(crate::env_vars::IMGCTL_PROFILE_TRACE) else {
        return Ok(());
    };
    let path = std::path::PathBuf::from(path);
    crate::sys::torch_ext::profile_to_trace(&path, device.is_cuda(), || {
        for _ in 0..TRACE_STEPS {
            step(trainer)?;
        }
        sync(device);
        Ok(())
    })?;
    events(&RunEvent::Note(format!(
        "profile: {TRACE_STEPS} steps traced to {} (summary: python3 scripts/trace_summary.py {})",
        path.display(),
        path.display()
    )));
    Ok(())
}
