//! How the trainer and its steps fail ([`StepError`], [`TrainerError`]),
//! re-exported by [`super::trainer`]; what they mean for the user is
//! `commands/error/train.rs`'s.
use std::path::PathBuf;

use tch::Device;

/// Ways a step can stop the run.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The loss or the gradients were NaN or infinite (fp32/bf16), or fp16
    /// kept overflowing.
    #[error("the loss became {what} at step {step} (loss {loss}, gradient norm {grad_norm}, {precision}); training stopped")]
    NonFinite {
        /// The step that produced it (1-based).
        step: u64,
        /// "NaN" or "infinite".
        what: &'static str,
        /// The loss read back.
        loss: f64,
        /// The gradient norm read back.
        grad_norm: f64,
        /// The run's precision.
        precision: &'static str,
    },
    /// The weights, the EMA or the optimizer's moments hold NaN or infinite
    /// values while the loss still read finite (an lr of 1e300 overflows
    /// the update before the loss shows it): nothing of it is saved.
    #[error("the {what} hold NaN or infinite values at step {step} ({precision}); nothing of this state is saved, training stopped")]
    NonFiniteState {
        /// The step whose state it is.
        step: u64,
        /// "weights", "EMA weights" or "optimizer moments".
        what: &'static str,
        /// The run's precision.
        precision: &'static str,
    },
}

/// What can go wrong in the trainer itself.
#[derive(Debug, thiserror::Error)]
pub enum TrainerError {
    /// A training step panicked inside libtorch (exit 1).
    #[error("training step {step} failed in libtorch: {first}")]
    Libtorch {
        /// The step (1-based).
        step: u64,
        /// The first line of libtorch's message.
        first: String,
        /// The device it ran on.
        device: Device,
    },
    /// A checkpoint of another model config (exit 2).
    #[error("the checkpoint {} was trained with a different model config", .dir.display())]
    ModelMismatch {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// A checkpoint file without a tensor the model needs (exit 2).
    #[error("checkpoint {} lacks `{key}` in {file}", .dir.display())]
    MissingTensor {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The tensor's name.
        key: String,
        /// The file in the checkpoint.
        file: &'static str,
    },
    /// A checkpoint tensor whose shape or dtype is not the model's (exit 2):
    /// copying it would panic (a transposed shape) or broadcast one value
    /// over the whole parameter (a `[1]`).
    #[error("checkpoint {} has `{key}` in {file} as {found}, but the model's is {expected}", .dir.display())]
    TensorMismatch {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The tensor's name.
        key: String,
        /// The file in the checkpoint.
        file: &'static str,
        /// Its shape and dtype in the file (`[256, 128] Float`).
        found: String,
        /// The model's shape and dtype.
        expected: String,
    },
}

impl StepError {
    /// [`StepError::NonFinite`] for `step`'s read-back values.
    pub fn non_finite(step: u64, loss: f64, grad_norm: f64, precision: &'static str) -> Self {
        Self::NonFinite {
            step,
            what: if loss.is_nan() || grad_norm.is_nan() {
                "NaN"
            } else {
                "infinite"
            },
            loss,
            grad_norm,
            precision,
        }
    }
}

/// The error for a training step that panicked inside tch: libtorch's own
/// message (`CUDA out of memory. Tried to allocate …`) without tch's
/// `called Result::unwrap() on an Err value: Torch("…")` wrapping.
pub fn step_panic_error(
    step: u64,
    device: Device,
    panic: &(dyn std::any::Any + Send),
) -> anyhow::Error {
    let text = panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into());
    let inner = text
        .split_once("Torch(\"")
        .map(|(_, rest)| rest.trim_end_matches("\")").replace("\\n", "\n"))
        .unwrap_or(text);
    let first = inner.lines().next().unwrap_or_default().trim().to_string();
    TrainerError::Libtorch {
        step,
        first,
        device,
    }
    .into()
}
