//! Ctrl-C during training: the process-wide flag the run loop polls
//! ([`interrupt_flag`]), and the handler's own lines, said when the signal
//! comes (the one place under `train/` that prints, because no sink is
//! listening inside a signal handler).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::output::printer;

/// The step the loop is training now (0 before the first), named by the
/// first Ctrl-C's line.
static STEP_IN_PROGRESS: AtomicU64 = AtomicU64::new(0);

/// The run loop says which step it starts (1-based), so that a Ctrl-C
/// answers "finishing step N".
pub fn set_step_in_progress(step: u64) {
    STEP_IN_PROGRESS.store(step, Ordering::Relaxed);
}

/// What the first Ctrl-C says, naming the step being finished when one is.
fn first_interrupt_line(step: u64) -> String {
    let which = if step == 0 {
        "this step".to_string()
    } else {
        format!("step {step}")
    };
    format!(
        "interrupt: finishing {which}, then saving a checkpoint (Ctrl-C again exits without one)\n"
    )
}

/// The process-wide Ctrl-C flag; the handler is installed on first use.
pub fn interrupt_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        // The first Ctrl-C asks the loop to checkpoint and stop after the
        // current step, and says so at once; a second one ends the process
        // at once. `_exit`, never `process::exit`: exit handlers and static
        // destructors would run while libtorch's threads still compute, and
        // tearing libtorch down under them segfaulted (exit 139).
        // One process says what the first Ctrl-C does: a supervisor says it
        // for its ranks, and of torchrun's ranks rank 0 speaks.
        let announce = std::env::var_os(crate::env_vars::IMGCTL_SUPERVISED).is_none()
            && std::env::var(crate::env_vars::RANK).map_or(true, |r| r == "0");
        let handler = move || {
            if f.swap(true, Ordering::SeqCst) {
                printer().stderr_text("second interrupt: exiting without a checkpoint\n");
                crate::sys::process::exit_now(130);
            }
            if announce {
                printer().stderr_text(first_interrupt_line(
                    STEP_IN_PROGRESS.load(Ordering::Relaxed),
                ));
            }
        };
        if let Err(e) = ctrlc::set_handler(handler) {
            printer().warn(format!(
                "cannot install the Ctrl-C handler ({e}); Ctrl-C will not write a checkpoint"
            ));
        }
        flag
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_ctrl_c_names_the_step_it_finishes() {
        assert_eq!(
            first_interrupt_line(41),
            "interrupt: finishing step 41, then saving a checkpoint (Ctrl-C again exits without one)\n"
        );
        assert!(first_interrupt_line(0).starts_with("interrupt: finishing this step, "));
    }
}
