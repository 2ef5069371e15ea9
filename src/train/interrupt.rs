//! Ctrl-C during training: the process-wide flag the run loop polls
//! ([`interrupt_flag`]), and the handler's own lines, said when the signal
//! comes (the one place under `train/` that prints, because no sink is
//! listening inside a signal handler).
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::output::printer;

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
                printer().stderr_text(
                    "interrupt: finishing this step, then saving a checkpoint (Ctrl-C again exits without one)\n",
                );
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
