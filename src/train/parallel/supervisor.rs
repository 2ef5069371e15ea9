//! The `--gpus` supervisor: one worker process per GPU (or per CPU rank),
//! started from this very executable with torchrun-style rank variables.
//!
//! It prefixes every worker's stderr line with `[rank N]`, passes rank 0's
//! stdout through (the data channel), forwards Ctrl-C to rank 0 (workers run
//! in their own process groups, so the terminal signals only the supervisor;
//! the others are stopped once rank 0 has saved and ended), and
//! when a worker dies it stops the others (SIGTERM, then SIGKILL after a grace
//! period) and reports which rank failed, how, and the worker's own error
//! line. Workers get `PR_SET_PDEATHSIG` (SIGKILL), so they do not outlive a
//! killed supervisor. This module
//! must not know what the workers compute.
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::env_vars as ev;
use crate::train::events::{Events, RunEvent};

/// How many of a worker's last stderr lines a failure report shows.
pub const TAIL_LINES: usize = 20;
/// How long stopped workers get between SIGTERM and SIGKILL (10 s: enough to
/// flush a log line, short enough that a failed job ends promptly).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Ctrl-C presses seen by this process (set by the handler).
static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

/// Where one worker runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerSlot {
    /// A GPU, given as the `CUDA_VISIBLE_DEVICES` value that shows the worker only it.
    Gpu(String),
    /// A CPU rank (`CUDA_VISIBLE_DEVICES` set empty: no GPU).
    Cpu,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct SupervisorOptions {
    /// The executable (normally `std::env::current_exe()`).
    pub program: PathBuf,
    /// Its arguments (without `--gpus`).
    pub args: Vec<OsString>,
    /// One entry per worker; index = rank.
    pub slots: Vec<WorkerSlot>,
    /// SIGTERM → SIGKILL grace period for stopped workers.
    pub grace: Duration,
    /// Keep rank 0's stdout instead of passing it through.
    pub capture_stdout: bool,
    /// Extra environment for every worker.
    pub env: Vec<(String, String)>,
}

/// How a worker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerEnd {
    /// Exit code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl std::fmt::Display for WorkerEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerEnd::Code(c) => write!(f, "exited with code {c}"),
            WorkerEnd::Signal(s) => write!(f, "was killed by signal {s} ({})", signal_name(*s)),
        }
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Why a supervised run failed. `commands/` gives a failed worker the exit
/// status its end implies (2 for its usage error, 130 for its own interrupt).
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// Ctrl-C: the workers were stopped.
    #[error(
        "interrupted: {} worker{} stopped ({})",
        .ends.len(),
        if .ends.len() == 1 { "" } else { "s" },
        .ends.iter().enumerate().map(|(r, e)| format!("rank {r} {e}")).collect::<Vec<_>>().join(", ")
    )]
    Interrupted {
        /// How each rank ended, by rank.
        ends: Vec<WorkerEnd>,
    },
    /// A worker ended badly; the others were stopped.
    #[error("{}", worker_failed(*.rank, *.world_size, .end, .said.as_deref(), .others))]
    WorkerFailed {
        /// The rank that failed first.
        rank: usize,
        /// The number of workers.
        world_size: usize,
        /// How it ended.
        end: WorkerEnd,
        /// Its own `error:` line, if it printed one.
        said: Option<String>,
        /// Its own `hint:` line, if it printed one.
        worker_hint: Option<String>,
        /// How the other ranks ended.
        others: Vec<(usize, WorkerEnd)>,
    },
}

/// The line of [`SupervisorError::WorkerFailed`].
fn worker_failed(
    rank: usize,
    n: usize,
    end: &WorkerEnd,
    said: Option<&str>,
    others: &[(usize, WorkerEnd)],
) -> String {
    let mut msg = format!("worker rank {rank} of {n} failed: it {end}");
    if let Some(said) = said {
        msg.push_str(&format!(": {said}"));
    }
    if !others.is_empty() {
        let others: Vec<String> = others
            .iter()
            .map(|(r, e)| format!("rank {r} {e}"))
            .collect();
        msg.push_str(&format!("; stopped the others ({})", others.join(", ")));
    }
    msg
}

/// The result of a supervised run.
#[derive(Debug)]
pub struct SupervisorReport {
    /// How each rank ended.
    pub ends: Vec<WorkerEnd>,
    /// Rank 0's stdout when `capture_stdout` was set.
    pub stdout: String,
}

/// Removes `--gpus X` / `--gpus=X` from an argument list.
pub fn strip_flag(args: &[OsString], flag: &str, takes_value: bool) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut skip_next = false;
    let with_eq = format!("{flag}=");
    for a in args {
        if skip_next {
            skip_next = false;
            continue;
        }
        let s = a.to_string_lossy();
        if s == flag {
            skip_next = takes_value;
            continue;
        }
        if takes_value && s.starts_with(&with_eq) {
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// Maps selected device indices to the `CUDA_VISIBLE_DEVICES` value each
/// worker gets: entries of the parent's own `CUDA_VISIBLE_DEVICES` when set
/// (indices count among the visible devices), else the indices themselves.
pub fn gpu_slots(devices: &[usize], parent_visible: Option<&str>) -> Vec<WorkerSlot> {
    let parent: Option<Vec<String>> = parent_visible
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    devices
        .iter()
        .map(|&d| {
            WorkerSlot::Gpu(match &parent {
                Some(list) if d < list.len() => list[d].clone(),
                _ => d.to_string(),
            })
        })
        .collect()
}

/// Intra-op threads per worker when `OMP_NUM_THREADS` is unset. torchrun sets
/// 1 per process "to avoid your system being overloaded" (torch/distributed/
/// run.py); GPU workers keep that. CPU ranks compute on the CPU, so they split
/// the cores instead: OpenMP's spin-waiting makes oversubscribed ranks many
/// times slower (measured: 15× on 2 shared cores).
pub fn omp_threads(slot: &WorkerSlot, workers: usize) -> usize {
    match slot {
        WorkerSlot::Gpu(_) => 1,
        WorkerSlot::Cpu => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            (cores / workers.max(1)).max(1)
        }
    }
}

struct Worker {
    rank: usize,
    child: Child,
    end: Option<WorkerEnd>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

fn spawn_pump<R: Read + Send + 'static>(
    reader: R,
    prefix: String,
    tail: Option<Arc<Mutex<VecDeque<String>>>>,
    to_stdout: bool,
    capture: Option<Arc<Mutex<String>>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(reader);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            if let Some(c) = &capture {
                let mut c = c.lock().unwrap();
                c.push_str(text);
                c.push('\n');
                continue;
            }
            if to_stdout {
                crate::output::printer().data(text);
            } else {
                // Progress-bar redraws end in '\r': keep the last frame only.
                let shown = text.rsplit('\r').next().unwrap_or(text);
                let _ = if shown.is_empty() {
                    writeln!(std::io::stderr().lock(), "{}", prefix.trim_end())
                } else {
                    writeln!(std::io::stderr().lock(), "{prefix}{shown}")
                };
            }
            if let Some(t) = &tail {
                let mut t = t.lock().unwrap();
                if t.len() == TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(text.to_string());
            }
        }
    })
}

/// Signals a worker's whole process group (it leads its own group), so that
/// anything it started goes too.
fn signal(child: &Child, sig: i32) {
    // kill(2) on the process group of our own child.
    let _ = crate::sys::process::kill(-(child.id() as i32), sig);
}

/// Installs the Ctrl-C handler once (a second install attempt is harmless).
fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        INTERRUPTS.fetch_add(1, Ordering::SeqCst);
    });
}

/// Starts one worker per slot with torchrun's environment (rank, world,
/// the local rendezvous on `port`), each in its own process group and killed
/// with this process, with its output pumped through `[rank N]` prefixes
/// (rank 0's stdout into `captured` when asked). A worker that cannot start
/// kills those already started.
fn start_workers(
    opts: &SupervisorOptions,
    port: u16,
    captured: &Arc<Mutex<String>>,
    events: Events,
) -> anyhow::Result<(Vec<Worker>, Vec<JoinHandle<()>>)> {
    let n = opts.slots.len();
    let mut workers: Vec<Worker> = Vec::with_capacity(n);
    let mut pumps = Vec::new();
    for (rank, slot) in opts.slots.iter().enumerate() {
        let mut cmd = Command::new(&opts.program);
        cmd.args(&opts.args)
            .env_remove(ev::IMGCTL_CPU_RANKS)
            .env_remove(ev::SLURM_PROCID)
            .env_remove(ev::SLURM_NTASKS)
            .env(ev::RANK, rank.to_string())
            .env(ev::LOCAL_RANK, rank.to_string())
            .env(ev::WORLD_SIZE, n.to_string())
            .env(ev::LOCAL_WORLD_SIZE, n.to_string())
            .env(ev::MASTER_ADDR, "127.0.0.1")
            .env(ev::MASTER_PORT, port.to_string())
            .env(ev::IMGCTL_SUPERVISED, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Own process group: a terminal Ctrl-C reaches only the
            // supervisor, which forwards it exactly once.
            .process_group(0);
        match slot {
            WorkerSlot::Gpu(v) => cmd.env(ev::CUDA_VISIBLE_DEVICES, v),
            WorkerSlot::Cpu => cmd.env(ev::CUDA_VISIBLE_DEVICES, ""),
        };
        if std::env::var_os(ev::OMP_NUM_THREADS).is_none() {
            cmd.env(ev::OMP_NUM_THREADS, omp_threads(slot, n).to_string());
        }
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        // SIGKILL, not SIGTERM: a worker takes its first SIGTERM as "stop
        // after this step", and one blocked in a collective never gets there;
        // with the supervisor gone, nothing else would end it.
        // A supervisor that died between the fork and the prctl sent no
        // signal: the child checks that its parent is still this process.
        crate::sys::process::kill_child_with_parent(&mut cmd);
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                for w in &mut workers {
                    signal(&w.child, libc::SIGKILL);
                    let _ = w.child.wait();
                }
                return Err(anyhow::Error::from(e).context(format!(
                    "cannot start worker rank {rank} ({})",
                    opts.program.display()
                )));
            }
        };
        events(&RunEvent::Detail(format!(
            "started rank {rank} of {n} (pid {}, {})",
            child.id(),
            match slot {
                WorkerSlot::Gpu(v) => format!("CUDA_VISIBLE_DEVICES={v}"),
                WorkerSlot::Cpu => "CPU".into(),
            }
        )));
        let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
        let prefix = format!("[rank {rank}] ");
        if let Some(out) = child.stdout.take() {
            let capture = (rank == 0 && opts.capture_stdout).then(|| captured.clone());
            pumps.push(spawn_pump(out, prefix.clone(), None, rank == 0, capture));
        }
        if let Some(err) = child.stderr.take() {
            pumps.push(spawn_pump(err, prefix, Some(tail.clone()), false, None));
        }
        workers.push(Worker {
            rank,
            child,
            end: None,
            tail,
        });
    }
    Ok((workers, pumps))
}

/// Starts the workers, waits for them, and returns how each ended. Errors:
/// a worker failed (naming its rank, its end and its last stderr lines;
/// exit status 2 when it failed on bad input), or Ctrl-C (exit 130). What
/// the supervisor itself says (the workers' lines are relayed as they come)
/// goes to `events`.
pub fn supervise(opts: &SupervisorOptions, events: Events) -> anyhow::Result<SupervisorReport> {
    install_interrupt_handler();
    let n = opts.slots.len();
    let port = crate::world::rendezvous::free_port()?;
    let captured = Arc::new(Mutex::new(String::new()));
    let started = INTERRUPTS.load(Ordering::SeqCst);
    let (mut workers, pumps) = start_workers(opts, port, &captured, events)?;

    let mut failed: Option<usize> = None;
    let mut stop_at: Option<Instant> = None;
    let mut killed = false;
    let mut forwarded = started;
    loop {
        let presses = INTERRUPTS.load(Ordering::SeqCst);
        if presses > forwarded {
            if presses - started == 1 {
                // Rank 0 alone decides: it finishes its step (whose all-reduce
                // the others completed too), writes the checkpoint and stops;
                // then the others are stopped. Signalling every rank instead
                // races: a rank that stops first leaves the rest blocked in a
                // collective, possibly rank 0 before it saved.
                events(&RunEvent::Warning(
                    "interrupted: rank 0 saves a checkpoint and stops, then the other ranks are stopped (Ctrl-C again to kill them all)".into(),
                ));
                if let Some(w) = workers.first().filter(|w| w.end.is_none()) {
                    signal(&w.child, libc::SIGINT);
                }
            } else {
                for w in workers.iter().filter(|w| w.end.is_none()) {
                    signal(&w.child, libc::SIGKILL);
                }
            }
            forwarded = presses;
        }
        if presses > started && stop_at.is_none() && workers[0].end.is_some() {
            stop_at = Some(Instant::now());
            for w in workers.iter().filter(|w| w.end.is_none()) {
                signal(&w.child, libc::SIGTERM);
            }
        }
        let mut all_done = true;
        let mut newly_failed = Vec::new();
        for (i, w) in workers.iter_mut().enumerate() {
            if w.end.is_some() {
                continue;
            }
            match w.child.try_wait()? {
                Some(st) => {
                    let end = match (st.code(), st.signal()) {
                        (Some(c), _) => WorkerEnd::Code(c),
                        (None, Some(s)) => WorkerEnd::Signal(s),
                        (None, None) => WorkerEnd::Code(-1),
                    };
                    if end != WorkerEnd::Code(0) {
                        newly_failed.push(i);
                    }
                    w.end = Some(end);
                }
                None => all_done = false,
            }
        }
        if failed.is_none() && !newly_failed.is_empty() && presses == started {
            // When several ranks end in the same poll, blame one killed by a
            // signal: the others most likely failed because it vanished.
            let first = newly_failed
                .iter()
                .copied()
                .find(|&i| matches!(workers[i].end, Some(WorkerEnd::Signal(_))))
                .unwrap_or(newly_failed[0]);
            failed = Some(first);
            stop_at = Some(Instant::now());
            for w in workers.iter().filter(|w| w.end.is_none()) {
                signal(&w.child, libc::SIGTERM);
                // A stopped worker (the silent rank a heartbeat named)
                // holds the SIGTERM until it runs again.
                signal(&w.child, libc::SIGCONT);
            }
        }
        if all_done {
            break;
        }
        if let Some(t) = stop_at {
            if !killed && t.elapsed() >= opts.grace {
                for w in workers.iter().filter(|w| w.end.is_none()) {
                    signal(&w.child, libc::SIGKILL);
                }
                killed = true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for p in pumps {
        let _ = p.join();
    }
    let ends: Vec<WorkerEnd> = workers.iter().map(|w| w.end.clone().unwrap()).collect();
    if INTERRUPTS.load(Ordering::SeqCst) > started {
        return Err(SupervisorError::Interrupted { ends }.into());
    }
    if let Some(i) = failed {
        let w = &workers[i];
        let end = w.end.clone().unwrap();
        let tail: Vec<String> = w.tail.lock().unwrap().iter().cloned().collect();
        let others: Vec<(usize, WorkerEnd)> = workers
            .iter()
            .filter(|o| o.rank != w.rank)
            .map(|o| (o.rank, o.end.clone().unwrap()))
            .collect();
        let (said, worker_hint) = worker_error(&tail);
        // The worker's own error block was forwarded live ([rank N] lines)
        // and its error line is in ours: print nothing twice. Without one (a
        // crash, a signal) its last lines tell what happened, as a block
        // (live, they interleave with the other ranks'); the error stays one line.
        if said.is_none() {
            if tail.is_empty() {
                events(&RunEvent::Note(format!(
                    "rank {} wrote nothing to stderr",
                    w.rank
                )));
            } else {
                events(&RunEvent::Note(format!(
                    "last lines of rank {}'s stderr:\n    {}",
                    w.rank,
                    tail.join("\n    ")
                )));
            }
        }
        return Err(SupervisorError::WorkerFailed {
            rank: w.rank,
            world_size: n,
            end,
            said,
            worker_hint,
            others,
        }
        .into());
    }
    let stdout = captured.lock().unwrap().clone();
    Ok(SupervisorReport { ends, stdout })
}

/// A worker's last `error: …` line (as imgctl's main renders errors) without
/// its prefix, and the `hint: …` that follows it, from its stderr tail.
fn worker_error(tail: &[String]) -> (Option<String>, Option<String>) {
    let Some(at) = tail.iter().rposition(|l| l.starts_with("error: ")) else {
        return (None, None);
    };
    let said = tail[at]["error: ".len()..].trim().to_string();
    let hint = tail[at + 1..]
        .iter()
        .find_map(|l| l.strip_prefix("hint: "))
        .map(|h| h.trim().to_string());
    (Some(said).filter(|s| !s.is_empty()), hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The supervisor with its own lines dropped (these tests read its report).
    fn supervise(opts: &SupervisorOptions) -> anyhow::Result<SupervisorReport> {
        super::supervise(opts, &crate::train::events::silent)
    }

    fn sh(script: &str, n: usize) -> SupervisorOptions {
        SupervisorOptions {
            program: PathBuf::from("/bin/sh"),
            args: vec!["-c".into(), script.into()],
            slots: vec![WorkerSlot::Cpu; n],
            grace: Duration::from_secs(2),
            capture_stdout: true,
            env: vec![],
        }
    }

    #[test]
    fn strips_the_flag() {
        let a: Vec<OsString> = ["train-demo", "--gpus", "all", "--steps", "3", "--gpus=2"]
            .iter()
            .map(OsString::from)
            .collect();
        let s = strip_flag(&a, "--gpus", true);
        assert_eq!(s, vec!["train-demo", "--steps", "3"]);
    }

    #[test]
    fn maps_parent_visible_devices() {
        assert_eq!(
            gpu_slots(&[0, 2], Some("4,5,6")),
            vec![WorkerSlot::Gpu("4".into()), WorkerSlot::Gpu("6".into())]
        );
        assert_eq!(gpu_slots(&[1], None), vec![WorkerSlot::Gpu("1".into())]);
    }

    #[test]
    fn workers_get_rank_variables() {
        let r = supervise(&sh(
            "echo \"$RANK/$WORLD_SIZE/$LOCAL_RANK/$MASTER_ADDR/${CUDA_VISIBLE_DEVICES:-none}\"",
            3,
        ))
        .unwrap();
        assert_eq!(r.stdout.trim(), "0/3/0/127.0.0.1/none");
        assert_eq!(r.ends, vec![WorkerEnd::Code(0); 3]);
    }

    #[test]
    fn a_dying_worker_stops_the_rest() {
        let t = Instant::now();
        let e = supervise(&sh(
            "if [ \"$RANK\" = 1 ]; then echo 'boom: disk on fire' >&2; exit 3; fi; exec sleep 60",
            3,
        ))
        .unwrap_err();
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "others were not stopped"
        );
        let full = format!("{e:#}");
        assert!(
            full.contains("worker rank 1 of 3 failed: it exited with code 3"),
            "{full}"
        );
        assert!(
            full.contains("rank 0 was killed by signal 15 (SIGTERM)"),
            "{full}"
        );
    }

    #[test]
    fn the_failure_names_the_workers_own_error_once() {
        let e = supervise(&sh(
            "if [ \"$RANK\" = 1 ]; then printf 'step 1\\nerror: disk on fire\\ncaused by: smoke\\n\\nhint: call 112\\n' >&2; exit 2; fi; exec sleep 60",
            2,
        ))
        .unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("worker rank 1 of 2 failed: it exited with code 2: disk on fire; stopped the others (rank 0 "),
            "{text}"
        );
        // Its hint and exit code travel with the error (the command layer
        // passes both on).
        assert!(
            matches!(
                e.downcast_ref::<SupervisorError>(),
                Some(SupervisorError::WorkerFailed {
                    rank: 1,
                    end: WorkerEnd::Code(2),
                    worker_hint: Some(hint),
                    ..
                }) if hint == "call 112"
            ),
            "{e:?}"
        );
        assert_eq!(
            worker_error(&["x".into(), "error: a".into(), "hint: b".into()]),
            (Some("a".into()), Some("b".into()))
        );
        assert_eq!(worker_error(&["Segmentation fault".into()]), (None, None));
    }

    #[test]
    fn workers_are_killed_when_the_supervisor_dies() {
        // The worker asks the kernel for its parent-death signal
        // (prctl(PR_GET_PDEATHSIG = 2, &sig), linux/prctl.h).
        let opts = SupervisorOptions {
            program: PathBuf::from("python3"),
            args: vec![
                "-c".into(),
                "import ctypes as c; s = c.c_int(); \
                 assert c.CDLL(None).prctl(2, c.byref(s)) == 0; print(s.value)"
                    .into(),
            ],
            ..sh("", 1)
        };
        let r = supervise(&opts).unwrap();
        assert_eq!(r.stdout.trim(), libc::SIGKILL.to_string());
    }

    #[test]
    fn a_worker_ignoring_sigterm_is_killed() {
        let e = supervise(&sh(
            "if [ \"$RANK\" = 0 ]; then sleep 1; exit 2; fi; trap '' TERM; sleep 30 & wait; sleep 30",
            2,
        ))
        .unwrap_err();
        let full = format!("{e:#}");
        assert!(
            full.contains("rank 1 was killed by signal 9 (SIGKILL)"),
            "{full}"
        );
        assert!(
            matches!(
                e.downcast_ref::<SupervisorError>(),
                Some(SupervisorError::WorkerFailed {
                    rank: 0,
                    end: WorkerEnd::Code(2),
                    ..
                })
            ),
            "{e:?}"
        );
    }
}
