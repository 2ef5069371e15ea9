//! torchrun's worker watchdog, fed by this rank: with
//! `TORCHELASTIC_ENABLE_FILE_TIMER=1` torchrun's agent reads timers from a
//! named pipe (`TORCHELASTIC_TIMER_FILE`, torch 2.7
//! torch/distributed/elastic/timer/file_based_local_timer.py) and, when one
//! expires, SIGKILLs its worker and then itself. A rank under such an agent
//! renews one timer every heartbeat interval from a thread of its own,
//! expiring one interval short of the heartbeat timeout ([`expiry`]): a stopped process (SIGSTOP, a frozen
//! container) renews nothing, so its agent kills it and leaves the
//! rendezvous within the heartbeat timeout, and the other nodes' agents
//! restart without it. It must expire before the others' heartbeat names
//! the silent rank: their restart makes its agent stop the watchdog and
//! send SIGTERM instead, waiting 30 s for a stopped process (measured: 39 s
//! to training again). So the others see its connections break (a line
//! naming it and its host) a second before their heartbeat would have. Without this the stopped worker's agent, asked to
//! restart, waits 30 s for it to honour SIGTERM (which a stopped process
//! never does) while the others' rendezvous waits for that agent.
//!
//! A rank that ends releases its timer first ([`release`]; the expired
//! timer of an exited worker would make the agent kill itself).
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The timer's name in the agent's table (one per worker pid).
const SCOPE: &str = "imgctl-heartbeat";

/// The pipe of the timer this process holds, while it holds one.
static HELD: Mutex<Option<PathBuf>> = Mutex::new(None);

/// One request line of the agent's pipe: the timer of this process expiring
/// at `expires` (seconds since the epoch; negative: released), SIGKILL.
fn request(pid: u32, expires: f64) -> String {
    let signal = if expires < 0.0 { 0 } else { libc::SIGKILL };
    format!(
        "{{\"version\": 1, \"pid\": {pid}, \"scope_id\": \"{SCOPE}\", \
         \"expiration_time\": {expires:.3}, \"signal\": {signal}}}\n"
    )
}

/// Writes one request to the pipe, without blocking (no agent reading: an
/// error, left to the caller).
fn send(pipe: &Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(pipe)?;
    // Under PIPE_BUF (4,096 bytes): written whole or not at all.
    f.write_all(line.as_bytes())
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// How long after a renewal the timer expires: one `interval` short of the
/// heartbeat `timeout` (see the module), at least two intervals (4 s by
/// default).
pub fn expiry(interval: Duration, timeout: Duration) -> Duration {
    timeout.saturating_sub(interval).max(2 * interval)
}

/// The renewing thread; dropping it releases the timer.
pub(super) struct AgentTimer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AgentTimer {
    /// Starts renewing when the agent named a pipe (`pipe`), every
    /// `interval`, each renewal expiring [`expiry`] later. `None` without a
    /// pipe, or when the agent does not read it (no watchdog).
    pub(super) fn start(
        pipe: Option<PathBuf>,
        interval: Duration,
        timeout: Duration,
    ) -> Option<AgentTimer> {
        let pipe = pipe?;
        let pid = std::process::id();
        let timeout = expiry(interval, timeout).as_secs_f64();
        send(&pipe, &request(pid, now() + timeout)).ok()?;
        *HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some(pipe.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("imgctl-hb-agent".into())
            .spawn(move || {
                let tick = Duration::from_millis(50);
                let mut next = std::time::Instant::now() + interval;
                while !stopping.load(Ordering::SeqCst) {
                    if std::time::Instant::now() >= next {
                        // A renewal that fails (the agent is restarting)
                        // is tried again at the next interval.
                        let _ = send(&pipe, &request(pid, now() + timeout));
                        next += interval;
                    }
                    std::thread::sleep(tick);
                }
            })
            .ok()?;
        Some(AgentTimer {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for AgentTimer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        release();
    }
}

/// Releases this process's timer in its torchrun agent, if it holds one
/// (before it exits: see the module).
pub fn release() {
    let held = HELD.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(pipe) = held {
        let _ = send(&pipe, &request(std::process::id(), -1.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_the_lines_torchruns_file_timer_server_parses() {
        assert_eq!(
            request(42, 1700000000.5),
            "{\"version\": 1, \"pid\": 42, \"scope_id\": \"imgctl-heartbeat\", \
             \"expiration_time\": 1700000000.500, \"signal\": 9}\n"
        );
        assert!(request(42, -1.0).contains("\"expiration_time\": -1.000, \"signal\": 0}"));
    }

    #[test]
    fn the_timer_expires_before_the_peers_heartbeat_verdict() {
        let s = |x: f64| Duration::from_secs_f64(x);
        assert_eq!(expiry(s(1.0), s(5.0)), s(4.0));
        assert_eq!(expiry(s(0.5), s(2.0)), s(1.5));
        // Never within two renewals.
        assert_eq!(expiry(s(1.0), s(1.5)), s(2.0));
    }

    #[test]
    fn without_a_reading_agent_nothing_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&pipe)
            .status()
            .unwrap();
        assert!(made.success());
        let t = AgentTimer::start(Some(pipe), Duration::from_secs(1), Duration::from_secs(5));
        assert!(t.is_none());
        assert!(AgentTimer::start(None, Duration::from_secs(1), Duration::from_secs(5)).is_none());
    }
}
