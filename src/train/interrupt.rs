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

/// Whether this process says what the first Ctrl-C does (`get` reads the
/// environment): one process speaks. A supervisor says it for its ranks; of
/// torchrun's ranks rank 0 (`RANK`), and of srun's tasks task 0
/// (`SLURM_PROCID`: scancel and scontrol requeue signal every task at once,
/// and srun merges their output).
fn announces(get: impl Fn(&str) -> Option<String>) -> bool {
    use crate::env_vars as ev;
    get(ev::IMGCTL_SUPERVISED).is_none()
        && get(ev::RANK)
            .or_else(|| get(ev::SLURM_PROCID))
            .map_or(true, |r| r.trim() == "0")
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
        let announce = announces(|k| std::env::var(k).ok());
        let handler = move || {
            if f.swap(true, Ordering::SeqCst) {
                printer().stderr_text("second interrupt: exiting without a checkpoint\n");
                crate::sys::process::exit_now(crate::ExitStatus::Interrupted);
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

    #[test]
    fn one_process_of_a_job_announces_the_interrupt() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(announces(env(&[])));
        assert!(announces(env(&[("RANK", "0")])));
        assert!(!announces(env(&[("RANK", "1")])));
        // srun's tasks: only task 0 (the others would repeat the line).
        assert!(announces(env(&[("SLURM_PROCID", "0")])));
        assert!(!announces(env(&[("SLURM_PROCID", "1")])));
        // torchrun under SLURM: its RANK wins, as in the launch choice.
        assert!(announces(env(&[("RANK", "0"), ("SLURM_PROCID", "1")])));
        assert!(!announces(env(&[
            ("IMGCTL_SUPERVISED", "1"),
            ("RANK", "0")
        ])));
    }
}
