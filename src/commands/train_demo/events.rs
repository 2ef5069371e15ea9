//! How a run's and a benchmark's events look on stderr: notes as lines,
//! warnings labelled, and the steps as a progress bar on a terminal or, off
//! one, a plain line every log step (the phase times with `-v`).
use std::cell::RefCell;

use indicatif::ProgressBar;

use crate::output::{printer, Printer};
use crate::train::events::{GpuLoad, RunEvent, StepProgress};

/// The progress bar's layout. The ETA is the run's own (in the message:
/// the steps left at the rate of the steps run in this process), not
/// indicatif's, which counted a resumed run's jump to its start step as
/// steps done now and came out 6-10x too low after `--resume` (#45 F9).
/// The bar takes the width the rest leaves, so the line fits the terminal
/// (a fixed 30-column bar wrapped at 80 columns, #53 F17).
const BAR_TEMPLATE: &str = "{wide_bar} {pos}/{len} {msg} [{elapsed_precise}]";

/// The fewest columns the bar itself keeps.
const BAR_MIN: usize = 10;

/// A sink for [`crate::train::run::run`], [`crate::train::bench::run_rank`] and
/// the supervisor that prints through the process's printer. It holds the progress bar
/// between [`RunEvent::Started`] and [`RunEvent::Stopped`].
pub(super) fn printed() -> impl Fn(&RunEvent) {
    let bar: RefCell<Option<ProgressBar>> = RefCell::new(None);
    // The terminal's width, asked once a run (not at every step).
    let width: std::cell::Cell<Option<usize>> = std::cell::Cell::new(None);
    move |event| {
        let p = printer();
        match event {
            RunEvent::Note(line) => p.info(line),
            RunEvent::Warning(line) => p.warn(line),
            RunEvent::Detail(line) => p.verbose(line),
            RunEvent::Started { steps, start_step } => {
                width.set(
                    crate::output::table_width(crate::output::Stream::Stderr).map(usize::from),
                );
                let b = p.progress(*steps, BAR_TEMPLATE);
                b.set_position(*start_step);
                if let Some(old) = bar.replace(Some(b)) {
                    old.finish_and_clear();
                }
            }
            RunEvent::Step(s) => step(&p, bar.borrow().as_ref(), width.get(), s),
            RunEvent::Stopped => {
                if let Some(b) = bar.take() {
                    b.finish_and_clear();
                }
            }
        }
    }
}

/// A step on the bar (its message fitted to `width`, the terminal's as the
/// run started), and off a terminal its log line when one is due.
fn step(p: &Printer, bar: Option<&ProgressBar>, width: Option<usize>, s: &StepProgress) {
    if let Some(b) = bar {
        b.set_message(fitting_message(s, width));
        b.set_position(s.step);
    }
    if p.interactive || !s.log_due {
        return;
    }
    p.info(log_line(s));
    let t = s.times;
    p.verbose(format!(
        "  step {} seconds: data {:.3} forward {:.3} backward {:.3} grad_sync {:.3} optimizer {:.3}",
        s.step, s.data_wait_s, t.forward, t.backward, t.grad_sync, t.optimizer
    ));
}

/// The bar's message: `loss 0.1234 12.3 img/s ETA 3s` (the GPUs' reading
/// before the ETA on a watched GPU run).
fn bar_message(s: &StepProgress, gpu: &str) -> String {
    format!(
        "loss {:.4} {:.1} img/s{gpu} ETA {}",
        s.loss,
        s.img_per_s,
        human_duration(s.eta_s)
    )
}

/// The bar's message for a terminal `width` columns wide: the whole one
/// where it fits beside a bar of [`BAR_MIN`], else without the GPUs'
/// reading, else the loss and the ETA alone.
fn fitting_message(s: &StepProgress, width: Option<usize>) -> String {
    let gpu = s
        .gpu
        .map(|g| format!(" {}", gpu_words(&g)))
        .unwrap_or_default();
    let full = bar_message(s, &gpu);
    let Some(width) = width else {
        return full;
    };
    // `BAR 40/80 MSG [00:00:12]`: the spaces, the counts and the time.
    let digits = s.steps.max(1).to_string().len();
    let fits = |msg: &str| BAR_MIN + 1 + 2 * digits + 1 + 1 + msg.chars().count() + 1 + 10 <= width;
    let candidates = [
        full,
        bar_message(s, ""),
        format!("loss {:.4} ETA {}", s.loss, human_duration(s.eta_s)),
    ];
    let last = candidates[2].clone();
    candidates.into_iter().find(|m| fits(m)).unwrap_or(last)
}

/// `step 40/80 loss 0.1234 lr 1.00e-4 grad_norm 0.512 12.3 img/s ETA 3s`,
/// with the GPUs' latest reading before the ETA on a watched GPU run
/// (`… 12.3 img/s GPU 97% 61/141 GiB ETA 3s`).
fn log_line(s: &StepProgress) -> String {
    let gpu = s
        .gpu
        .map(|g| format!(" {}", gpu_words(&g)))
        .unwrap_or_default();
    format!(
        "step {}/{} loss {:.4} lr {:.2e} grad_norm {:.3} {:.1} img/s{gpu} ETA {}",
        s.step,
        s.steps,
        s.loss,
        s.lr,
        s.grad_norm,
        s.img_per_s,
        human_duration(s.eta_s)
    )
}

/// `GPU 97% 61/141 GiB`; with several GPUs their mean utilisation and the
/// fullest one's memory (`4 GPUs 96% 61/141 GiB`); `?` where NVML did not say.
fn gpu_words(g: &GpuLoad) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    let who = if g.gpus == 1 {
        "GPU".to_string()
    } else {
        format!("{} GPUs", g.gpus)
    };
    let util = g
        .utilization_pct
        .map_or("?%".to_string(), |u| format!("{u:.0}%"));
    let gib = |b: Option<u64>| b.map_or("?".to_string(), |b| format!("{:.0}", b as f64 / GIB));
    format!(
        "{who} {util} {}/{} GiB",
        gib(g.memory_used_bytes),
        gib(g.memory_total_bytes)
    )
}

/// `secs` as humantime writes a duration (`1h 2m 3s`), rounded to seconds.
fn human_duration(secs: f64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(secs.max(0.0).round() as u64))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_line_names_the_step_its_loss_rate_and_time_left() {
        let s = StepProgress {
            step: 40,
            steps: 80,
            loss: 0.123_44,
            lr: 1e-4,
            grad_norm: 0.5124,
            img_per_s: 12.34,
            eta_s: 3725.4,
            log_due: true,
            data_wait_s: 0.0,
            times: Default::default(),
            gpu: None,
        };
        assert_eq!(
            log_line(&s),
            "step 40/80 loss 0.1234 lr 1.00e-4 grad_norm 0.512 12.3 img/s ETA 1h 2m 5s"
        );
        // The bar's ETA is the run's own, as the plain line's.
        assert_eq!(bar_message(&s, ""), "loss 0.1234 12.3 img/s ETA 1h 2m 5s");
        let h200 = GpuLoad {
            gpus: 1,
            utilization_pct: Some(97.4),
            memory_used_bytes: Some(61 << 30),
            memory_total_bytes: Some(150_754_820_096),
        };
        let watched = StepProgress {
            gpu: Some(h200),
            ..s
        };
        assert_eq!(
            log_line(&watched),
            "step 40/80 loss 0.1234 lr 1.00e-4 grad_norm 0.512 12.3 img/s GPU 97% 61/140 GiB ETA 1h 2m 5s"
        );
        let four = GpuLoad {
            gpus: 4,
            utilization_pct: None,
            ..h200
        };
        assert_eq!(gpu_words(&four), "4 GPUs ?% 61/140 GiB");
        // At 80 columns the GPUs' reading gives way; at 120 it stays.
        let at = |w| fitting_message(&watched, Some(w));
        assert_eq!(at(120), bar_message(&watched, " GPU 97% 61/140 GiB"));
        assert_eq!(at(80), "loss 0.1234 12.3 img/s ETA 1h 2m 5s");
        assert_eq!(at(50), "loss 0.1234 ETA 1h 2m 5s");
        for w in [80, 120] {
            // bar, counts, message and time within the width.
            assert!(BAR_MIN + 13 + at(w).len() + 11 <= w, "{w}: {}", at(w));
        }
    }
}
