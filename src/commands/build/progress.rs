//! Build progress on the terminal: a bar with the running step, plain
//! `Step N/M` lines without a terminal (and a heartbeat while one step runs
//! long), the builder's full log with `-v`. The same view serves both
//! builders: it reads [`BuildEvent`]s.
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::docker::build::BuildEvent;
use crate::output::printer;

/// Instructions are cut to this many characters in progress lines (a long
/// `RUN a && b && …` would wrap over many terminal rows).
const INSTRUCTION_DISPLAY_CHARS: usize = 160;

/// Interval of the "still running" lines without a terminal (our choice: CI
/// services commonly kill jobs silent for 10 minutes).
const HEARTBEAT: Duration = Duration::from_secs(60);

/// Progress display: a bar on a terminal, plain lines otherwise, the full log with -v.
pub(super) struct ProgressView {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
    verbose: bool,
    /// The running step (`Step n/total`) and when it began, for the heartbeat.
    current: Arc<Mutex<Option<(String, Instant)>>>,
}

impl ProgressView {
    pub(super) fn new() -> Self {
        let p = printer();
        Self {
            bar: None,
            plain: !p.interactive,
            verbose: p.verbose > 0,
            current: Arc::new(Mutex::new(None)),
        }
    }

    /// Without a terminal, a line every [`HEARTBEAT`] while one step runs
    /// long (a torch install is minutes of silence), so logs show progress.
    /// Never completes; race it against the build.
    pub(super) fn heartbeat(
        &self,
    ) -> impl std::future::Future<Output = std::convert::Infallible> + 'static {
        let current = Arc::clone(&self.current);
        let plain = self.plain;
        async move {
            loop {
                tokio::time::sleep(HEARTBEAT).await;
                if !plain {
                    continue;
                }
                let step = current.lock().ok().and_then(|c| c.clone());
                if let Some((label, since)) = step {
                    if since.elapsed() >= HEARTBEAT {
                        let secs = since.elapsed().as_secs();
                        printer().info(format!(
                            "  … {label} still running ({})",
                            humantime::format_duration(Duration::from_secs(secs))
                        ));
                    }
                }
            }
        }
    }

    fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) if !bar.is_hidden() => bar.println(text),
            _ => printer().info(text),
        }
    }

    pub(super) fn event(&mut self, ev: &BuildEvent) {
        if let BuildEvent::Step {
            n,
            total,
            instruction,
        } = ev
        {
            if self.bar.is_none() {
                let bar = printer().progress(
                    u64::from(*total),
                    "{spinner} [{elapsed_precise}] [{bar:25}] step {pos}/{len} {wide_msg}",
                );
                bar.enable_steady_tick(Duration::from_millis(120));
                self.bar = Some(bar);
            }
            if let Some(bar) = &self.bar {
                bar.set_position(u64::from(*n));
                bar.set_message(cut(instruction, INSTRUCTION_DISPLAY_CHARS));
            }
            if let Ok(mut current) = self.current.lock() {
                *current = Some((format!("step {n}/{total}"), Instant::now()));
            }
        }
        if self.verbose {
            self.line(&raw_line(ev));
            return;
        }
        if self.plain {
            match ev {
                BuildEvent::Step {
                    n,
                    total,
                    instruction,
                } => printer().info(format!(
                    "Step {n}/{total} : {}",
                    cut(instruction, INSTRUCTION_DISPLAY_CHARS)
                )),
                BuildEvent::Cached => printer().info(" ---> Using cache"),
                _ => {}
            }
        }
    }

    pub(super) fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// The builder's line for an event, as `docker build` shows it.
fn raw_line(ev: &BuildEvent) -> String {
    match ev {
        BuildEvent::Step {
            n,
            total,
            instruction,
        } => format!("Step {n}/{total} : {instruction}"),
        BuildEvent::Cached => " ---> Using cache".to_string(),
        BuildEvent::Running(id) => format!(" ---> Running in {id}"),
        BuildEvent::Output(line) => line.clone(),
        BuildEvent::Layer(id) => format!(" ---> {id}"),
        BuildEvent::Removed(id) => format!("Removing intermediate container {id}"),
    }
}

/// Collapses whitespace (the builder joins continuation lines with their
/// indentation) and cuts to `max` characters.
pub(crate) fn cut(text: &str, max: usize) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.chars().count() <= max {
        text
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}
