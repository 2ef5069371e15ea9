//! A watchdog over collectives enqueued on a GPU: NCCL calls return as soon
//! as they are queued, and a collective whose peer died or hung then never
//! completes. The host blocks later, in some CUDA wait of torch's, forever.
//! As torch's `ProcessGroupNCCL` watchdog does, a thread polls every
//! collective's completion (a CUDA event recorded after it) and NCCL's
//! asynchronous error. When the oldest collective has been pending longer than
//! the timeout, or NCCL reports an error, it calls the fire action: by default
//! [`WatchdogError::Fired`] (naming the rank, the collective and how long it
//! waited), rendered by the command layer's tables
//! ([`crate::output::exit_with`]), then `_exit(1)`, which frees the GPU and
//! lets the launcher (or imgctl's supervisor) see the failure and stop the
//! other ranks.
//!
//! The queue and its verdicts are plain logic over the [`Completion`] trait,
//! testable without a GPU; the CUDA side is [`crate::sys::cudart::Marker`]. This
//! module must not issue collectives or decide the timeout.
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Work enqueued on a device whose completion can be polled from any thread.
pub trait Completion: Send {
    /// Whether the work is done; an error is a failed device (reported as such).
    fn is_done(&self) -> anyhow::Result<bool>;
}

/// A CUDA event recorded after the collective: done once the GPU passed it.
impl Completion for crate::sys::cudart::Marker {
    fn is_done(&self) -> anyhow::Result<bool> {
        self.query()
    }
}

/// Polls NCCL's asynchronous error; `Some(text)` when the communicator failed.
pub type AsyncErrorProbe = Box<dyn Fn() -> Option<String> + Send>;

/// What the watchdog does when it fires: gets the one-line reason.
pub type FireAction = Box<dyn Fn(String) + Send>;

/// What the watchdog has to say: `commands/` words it (its advice table).
#[derive(Debug, thiserror::Error)]
pub enum WatchdogError {
    /// Its set-up failed: it watches nothing (a warning; the rank goes on).
    #[error("the collective watchdog is off: {reason}")]
    Off {
        /// Why.
        reason: String,
    },
    /// It fired: a collective never completed, or NCCL reported an error.
    #[error("rank {rank} of {world_size}: {reason}; stopping this rank")]
    Fired {
        /// This rank.
        rank: usize,
        /// The world's size.
        world_size: usize,
        /// What did not complete and for how long, or NCCL's error.
        reason: String,
    },
}

/// How often the watchdog looks: once a second (torch's watchdog sleeps
/// 100 ms to 1 s between scans; a second is plenty against a 30-minute timeout).
pub const POLL: Duration = Duration::from_secs(1);

struct Pending {
    what: String,
    since: Instant,
    done: Box<dyn Completion>,
}

#[derive(Default)]
struct Queue {
    items: VecDeque<Pending>,
    stop: bool,
}

/// The shared state and the verdict logic.
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

/// Why the watchdog fires.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Everything queued so far is done, or still within the timeout.
    Healthy,
    /// The oldest pending collective exceeded the timeout.
    TimedOut {
        /// The collective (`all-reduce of 27.3 MB`).
        what: String,
        /// How long it has been pending.
        waited: Duration,
    },
    /// Polling a completion failed (a device error), or NCCL reported one.
    Failed(String),
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops completed work from the front (collectives complete in queue
    /// order per stream; a later one done while an earlier one is pending
    /// stays queued), then judges the oldest pending one.
    fn scan(&self, now: Instant, timeout: Duration) -> Verdict {
        // Poll outside the lock: the training thread keeps queueing meanwhile,
        // and a slow device call must not stall it.
        let items = std::mem::take(&mut self.lock().items);
        let mut oldest: Option<(String, Instant)> = None;
        let mut kept = VecDeque::with_capacity(items.len());
        let mut failed = None;
        for p in items {
            match p.done.is_done() {
                Ok(true) => {}
                Ok(false) => {
                    if oldest.as_ref().map_or(true, |(_, t)| p.since < *t) {
                        oldest = Some((p.what.clone(), p.since));
                    }
                    kept.push_back(p);
                }
                Err(e) => {
                    failed.get_or_insert_with(|| format!("{} failed on the device: {e}", p.what));
                    kept.push_back(p);
                }
            }
        }
        // What was queued during the scan goes after what was already there.
        let mut q = self.lock();
        kept.append(&mut q.items);
        q.items = kept;
        drop(q);
        if let Some(e) = failed {
            return Verdict::Failed(e);
        }
        match oldest {
            Some((what, since)) if now.saturating_duration_since(since) > timeout => {
                Verdict::TimedOut {
                    what,
                    waited: now.saturating_duration_since(since),
                }
            }
            _ => Verdict::Healthy,
        }
    }
}

/// The watchdog thread and its queue. Dropping it stops the thread.
pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog").finish()
    }
}

impl Watchdog {
    /// Starts the thread. `setup` runs first on it (selecting the rank's CUDA
    /// device, so that polling does not create a context on GPU 0); when it
    /// fails, the watchdog warns ([`WatchdogError::Off`]) and watches nothing. `probe`
    /// polls NCCL's asynchronous error; `fire` acts on a verdict other than
    /// [`Verdict::Healthy`] (once: the thread ends after it).
    pub fn start(
        timeout: Duration,
        poll: Duration,
        setup: Box<dyn FnOnce() -> Result<(), String> + Send>,
        probe: Option<AsyncErrorProbe>,
        fire: FireAction,
    ) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("imgctl-watchdog".into())
            .spawn(move || {
                if let Err(e) = setup() {
                    crate::output::warn_error(&WatchdogError::Off { reason: e }.into());
                    return;
                }
                loop {
                    {
                        let q = s.queue.lock().unwrap_or_else(|e| e.into_inner());
                        let (q, _) = s
                            .wake
                            .wait_timeout_while(q, poll, |q| !q.stop)
                            .unwrap_or_else(|e| e.into_inner());
                        if q.stop {
                            return;
                        }
                    }
                    let verdict = match probe.as_ref().and_then(|p| p()) {
                        Some(e) => Verdict::Failed(format!("NCCL reported an error: {e}")),
                        None => s.scan(Instant::now(), timeout),
                    };
                    match verdict {
                        Verdict::Healthy => {}
                        Verdict::TimedOut { what, waited } => {
                            fire(format!(
                                "{what} did not complete within {} (pending for {}): a peer rank died, hung or never reached it",
                                super::timeouts::fmt_secs(timeout),
                                super::timeouts::fmt_secs(Duration::from_secs(waited.as_secs()))
                            ));
                            return;
                        }
                        Verdict::Failed(e) => {
                            fire(e);
                            return;
                        }
                    }
                }
            })?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Watches `done`, the completion of the collective `what` just enqueued.
    pub fn track(&self, what: String, done: Box<dyn Completion>) {
        self.shared.lock().items.push_back(Pending {
            what,
            since: Instant::now(),
            done,
        });
    }

    /// How many collectives are still watched (tests).
    pub fn pending(&self) -> usize {
        self.shared.lock().items.len()
    }

    /// Whether any watched collective has not completed (or cannot be
    /// polled): its communicator must then be aborted, not destroyed, since
    /// a destroy waits for that work.
    pub fn any_unfinished(&self) -> bool {
        self.shared
            .lock()
            .items
            .iter()
            .any(|p| !matches!(p.done.is_done(), Ok(true)))
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The default fire action of a training rank: [`WatchdogError::Fired`] as
/// the command layer renders it, then `_exit` with its status (no exit
/// handlers: they could wait on the stuck GPU work).
pub fn exit_rank(rank: usize, world_size: usize) -> FireAction {
    Box::new(move |reason| {
        // The output layer writes and flushes stderr before the exit; nothing
        // of ours needs unwinding. torchrun's agent must not take the exit
        // for a stopped worker (see heartbeat::agent_timer).
        super::heartbeat::agent_timer::release();
        crate::output::exit_with(
            WatchdogError::Fired {
                rank,
                world_size,
                reason,
            }
            .into(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::mpsc;

    /// A completion a test flips.
    struct Flag(Arc<AtomicBool>);
    impl Completion for Flag {
        fn is_done(&self) -> anyhow::Result<bool> {
            Ok(self.0.load(Ordering::SeqCst))
        }
    }
    struct Broken;
    impl Completion for Broken {
        fn is_done(&self) -> anyhow::Result<bool> {
            anyhow::bail!("CUDA error 700 (an illegal memory access was encountered)")
        }
    }

    fn shared() -> Shared {
        Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        }
    }

    fn push(s: &Shared, what: &str, since: Instant, done: Box<dyn Completion>) {
        s.queue.lock().unwrap().items.push_back(Pending {
            what: what.into(),
            since,
            done,
        });
    }

    #[test]
    fn completed_work_leaves_the_queue_and_the_oldest_pending_one_is_judged() {
        let s = shared();
        let t0 = Instant::now();
        let first = Arc::new(AtomicBool::new(false));
        let second = Arc::new(AtomicBool::new(true));
        push(&s, "all-reduce A", t0, Box::new(Flag(first.clone())));
        push(
            &s,
            "all-reduce B",
            t0 + Duration::from_secs(5),
            Box::new(Flag(second)),
        );
        let timeout = Duration::from_secs(10);
        assert_eq!(
            s.scan(t0 + Duration::from_secs(9), timeout),
            Verdict::Healthy
        );
        assert_eq!(s.queue.lock().unwrap().items.len(), 1, "B is done and gone");
        assert_eq!(
            s.scan(t0 + Duration::from_secs(11), timeout),
            Verdict::TimedOut {
                what: "all-reduce A".into(),
                waited: Duration::from_secs(11)
            }
        );
        first.store(true, Ordering::SeqCst);
        assert_eq!(
            s.scan(t0 + Duration::from_secs(60), timeout),
            Verdict::Healthy
        );
        assert!(s.queue.lock().unwrap().items.is_empty());
    }

    #[test]
    fn a_device_error_fails_at_once() {
        let s = shared();
        push(&s, "broadcast of 4 B", Instant::now(), Box::new(Broken));
        match s.scan(Instant::now(), Duration::from_secs(600)) {
            Verdict::Failed(e) => assert!(
                e.starts_with("broadcast of 4 B failed on the device: CUDA error 700"),
                "{e}"
            ),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn the_thread_fires_once_on_a_stuck_collective_and_stops_on_drop() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let setups = Arc::new(AtomicUsize::new(0));
        let s2 = setups.clone();
        let w = Watchdog::start(
            Duration::from_millis(100),
            Duration::from_millis(20),
            Box::new(move || {
                s2.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
            None,
            Box::new(move |reason| {
                let _ = tx.lock().unwrap().send(reason);
            }),
        )
        .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        w.track("all-reduce of 1.0 MB".into(), Box::new(Flag(done.clone())));
        w.track(
            "all-reduce of 2.0 MB".into(),
            Box::new(Flag(Arc::new(AtomicBool::new(false)))),
        );
        done.store(true, Ordering::SeqCst);
        let reason = rx.recv_timeout(Duration::from_secs(10)).expect("fired");
        assert!(
            reason.starts_with("all-reduce of 2.0 MB did not complete within 0.1 s"),
            "{reason}"
        );
        assert!(
            rx.recv_timeout(Duration::from_millis(200)).is_err(),
            "fired twice"
        );
        assert_eq!(setups.load(Ordering::SeqCst), 1);
        drop(w);
    }

    #[test]
    fn an_nccl_async_error_fires_without_waiting_for_the_timeout() {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let _w = Watchdog::start(
            Duration::from_secs(3600),
            Duration::from_millis(20),
            Box::new(|| Ok(())),
            Some(Box::new(|| {
                Some("remote process exited or there was a network error".into())
            })),
            Box::new(move |reason| {
                let _ = tx.lock().unwrap().send(reason);
            }),
        )
        .unwrap();
        let reason = rx.recv_timeout(Duration::from_secs(10)).expect("fired");
        assert_eq!(
            reason,
            "NCCL reported an error: remote process exited or there was a network error"
        );
    }

    #[test]
    fn a_failed_setup_turns_the_watchdog_off_without_firing() {
        let w = Watchdog::start(
            Duration::from_millis(1),
            Duration::from_millis(5),
            Box::new(|| Err("cudaSetDevice failed with CUDA error 101".into())),
            None,
            Box::new(|r| panic!("fired: {r}")),
        )
        .unwrap();
        w.track("x".into(), Box::new(Flag(Arc::new(AtomicBool::new(false)))));
        std::thread::sleep(Duration::from_millis(50));
        // Unfinished work is still known to the owner (who then aborts).
        assert!(w.any_unfinished());
    }

    /// A watchdog that never looks during a test (and must never fire).
    fn idle() -> Watchdog {
        Watchdog::start(
            Duration::from_secs(3600),
            Duration::from_secs(3600),
            Box::new(|| Ok(())),
            None,
            Box::new(|r| panic!("fired: {r}")),
        )
        .unwrap()
    }

    #[test]
    fn unfinished_work_is_seen_by_the_owner() {
        let w = idle();
        assert!(!w.any_unfinished());
        let done = Arc::new(AtomicBool::new(false));
        w.track("x".into(), Box::new(Flag(done.clone())));
        assert!(w.any_unfinished());
        done.store(true, Ordering::SeqCst);
        assert!(!w.any_unfinished());
        w.track("y".into(), Box::new(Broken));
        assert!(w.any_unfinished(), "work that cannot be polled counts");
    }

    #[test]
    fn a_healthy_watchdog_stops_promptly() {
        let w = idle();
        w.track("x".into(), Box::new(Flag(Arc::new(AtomicBool::new(true)))));
        assert_eq!(w.pending(), 1);
        let t = Instant::now();
        drop(w);
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
