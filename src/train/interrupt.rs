//! Ctrl-C during training: the process-wide flag the run loop polls
//! ([`interrupt_flag`]), and the handler's own lines, said when the signal
//! comes. A second Ctrl-C a second or more after the first exits at once;
//! closer, it is the first one delivered twice (`timeout` forwards it too) (the one place under `train/` that prints, because no sink is
//! listening inside a signal handler).
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::output::printer;

/// The step the loop is training now (0 before the first), named by the
/// first Ctrl-C's line.
static STEP_IN_PROGRESS: AtomicU64 = AtomicU64::new(0);

/// SIGINTs closer than this to the first are that same Ctrl-C: under
/// `timeout` (or any parent that forwards it) one key press reaches the
/// process twice, from the terminal and from the parent, and must not count
/// as the second Ctrl-C that gives up the checkpoint.
const SAME_CTRL_C: Duration = Duration::from_secs(1);

/// Whether a SIGINT at `now` is a second Ctrl-C after a first at `first`.
fn is_second_ctrl_c(first: Instant, now: Instant) -> bool {
    now.saturating_duration_since(first) >= SAME_CTRL_C
}

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
        let first_at: OnceLock<Instant> = OnceLock::new();
        let handler = move || {
            if f.swap(true, Ordering::SeqCst) {
                let first = *first_at.get_or_init(Instant::now);
                if !is_second_ctrl_c(first, Instant::now()) {
                    return; // the first Ctrl-C, delivered twice
                }
                printer().stderr_text("second interrupt: exiting without a checkpoint\n");
                crate::sys::process::exit_now(crate::error::ExitStatus::Interrupted);
            }
            let _ = first_at.set(Instant::now());
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
    fn sigints_within_a_second_of_the_first_are_the_same_ctrl_c() {
        let first = Instant::now();
        assert!(!is_second_ctrl_c(first, first));
        assert!(!is_second_ctrl_c(first, first + Duration::from_millis(300)));
        assert!(is_second_ctrl_c(first, first + Duration::from_millis(1000)));
        assert!(is_second_ctrl_c(first, first + Duration::from_secs(3)));
    }

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
