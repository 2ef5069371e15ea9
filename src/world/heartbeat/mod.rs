//! **Heartbeats** beside the collective timeout: a rank that goes silent (a
//! stopped process, a cut link, a frozen node) is named within
//! [`Settings::timeout`] (5 s by default), not at the collective timeout
//! (30 minutes for a long run, which must stay long: rank 0 holds the others
//! while it writes a large checkpoint).
//!
//! Every rank runs one thread of its own ([`Heartbeat`]), independent of the
//! training loop, so it beats while the loop is busy in a collective, a
//! checkpoint write or a sample grid. The ranks form a star around rank 0
//! over connections of their own to rank 0's rendezvous port (the listener
//! the rendezvous leaves open, so no other port needs to be reachable):
//! every rank beats to rank 0 and rank 0 beats to every rank, each
//! [`Settings::interval`] (1 s), a beat carrying the sender's step and
//! [`Phase`]. A rank that hears nothing from a peer it watches for the
//! timeout declares it lost: rank 0 first tells the others (so that every
//! rank ends with the same one line naming it, [`HeartbeatError::Lost`]),
//! then the fire action ends the rank as a dead peer does (exit 1, the
//! launcher's restart, `--resume auto`). A rank that ends normally says
//! bye first, and is no longer judged. With the rendezvous token every
//! frame is authenticated ([`wire`]).
//!
//! A broken connection is not judged here: the collectives name a peer
//! that exited within a second already. This module must not know what a
//! step computes, nor end the process itself (the fire action does).
//!
//! Part: the shared floor (`docs/architecture.md`).
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::auth::Token;
use super::rendezvous::{Gathered, Links, Session};

pub mod agent_timer;
mod monitor;
#[cfg(test)]
mod sim;
pub mod wire;

/// How often a rank beats by default: 1 s (TorchFT beats every 100 ms; a
/// second keeps 10,000 peers at 10,000 small frames a second at rank 0).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// How long a silent peer is waited for by default: 5 s, five missed beats,
/// far above a busy machine's scheduling hiccups and far below the 30-minute
/// collective timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often to beat and how long silence may last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Between two beats.
    pub interval: Duration,
    /// Silence past which a peer is lost (longer than `interval`).
    pub timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            interval: DEFAULT_INTERVAL,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// What a rank is doing, carried by its beats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Before its first step (loading, the parameter broadcast).
    Starting = 0,
    /// In a training step (its collectives included).
    Training = 1,
    /// Writing a checkpoint.
    Checkpoint = 2,
    /// Drawing a sample grid.
    Samples = 3,
    /// After its last step.
    Finishing = 4,
    /// Running fleet verify's checks.
    Verifying = 5,
}

impl Phase {
    /// The phase of a byte from the wire (an unknown one reads as training).
    pub fn from_byte(b: u8) -> Phase {
        match b {
            0 => Phase::Starting,
            2 => Phase::Checkpoint,
            3 => Phase::Samples,
            4 => Phase::Finishing,
            5 => Phase::Verifying,
            _ => Phase::Training,
        }
    }

    /// For messages: `training`, `writing a checkpoint`, …
    pub fn describe(self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Training => "training",
            Phase::Checkpoint => "writing a checkpoint",
            Phase::Samples => "drawing samples",
            Phase::Finishing => "finishing",
            Phase::Verifying => "verifying",
        }
    }
}

/// The step and phase a rank's beats carry: written by its loop, read by
/// its heartbeat thread.
#[derive(Debug, Default)]
pub struct Progress {
    step: AtomicU64,
    phase: AtomicU8,
}

impl Progress {
    /// This rank is at `step`, in `phase`.
    pub fn note(&self, step: u64, phase: Phase) {
        self.step.store(step, Ordering::Relaxed);
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// The step and phase last noted.
    pub fn get(&self) -> (u64, Phase) {
        (
            self.step.load(Ordering::Relaxed),
            Phase::from_byte(self.phase.load(Ordering::Relaxed)),
        )
    }
}

/// This process's progress (one rank per process).
pub fn progress() -> Arc<Progress> {
    static P: OnceLock<Arc<Progress>> = OnceLock::new();
    P.get_or_init(Default::default).clone()
}

/// Notes this process's step and phase ([`progress`]).
pub fn note(step: u64, phase: Phase) {
    progress().note(step, phase)
}

/// What the heartbeat has to say: `commands/` words it (its advice table).
#[derive(Debug, thiserror::Error)]
pub enum HeartbeatError {
    /// A peer went silent for the timeout.
    #[error("{}", lost_line(*.rank, *.peer, .host.as_deref(), *.silent, *.last, *.seen_by))]
    Lost {
        /// This rank.
        rank: usize,
        /// The silent rank.
        peer: usize,
        /// Its address, when known.
        host: Option<String>,
        /// How long it was silent.
        silent: Duration,
        /// Its last step and phase, when it ever beat.
        last: Option<(u64, Phase)>,
        /// The rank that saw the silence, when not this one (rank 0 told it).
        seen_by: Option<usize>,
    },
}

/// `1,204`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The one line of [`HeartbeatError::Lost`].
fn lost_line(
    rank: usize,
    peer: usize,
    host: Option<&str>,
    silent: Duration,
    last: Option<(u64, Phase)>,
    seen_by: Option<usize>,
) -> String {
    let on = host.map(|h| format!(" on {h}")).unwrap_or_default();
    let who = match seen_by {
        Some(r) => format!("rank {rank}: rank {r} saw "),
        None => format!("rank {rank}: "),
    };
    let what = match last {
        Some((step, phase)) => format!(
            "its last step was {} ({})",
            thousands(step),
            phase.describe()
        ),
        None => "it sent no heartbeat since the rendezvous".into(),
    };
    let secs = format!("{:.1} s", silent.as_secs_f64());
    format!("{who}no heartbeat from rank {peer}{on} for {secs}; {what}")
}

/// What the heartbeat does when it declares a peer lost: gets the
/// [`HeartbeatError::Lost`] (a training rank ends with it).
pub type FireAction = Box<dyn FnOnce(anyhow::Error) + Send>;

/// What fleet verify's rank 0 does with each lost peer: gets its rank and
/// the [`HeartbeatError::Lost`], and the heartbeat watches the others on.
pub type LostAction = Box<dyn FnMut(usize, anyhow::Error) + Send>;

/// A rank's heartbeat thread. Dropping it says bye to the peers and stops
/// the thread (a lost notice that arrived meanwhile still fires).
pub struct Heartbeat {
    stop: Arc<AtomicBool>,
    frozen: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Under torchrun with its worker watchdog: the timer this rank renews
    /// ([`agent_timer`]); released when the heartbeat drops.
    _agent: Option<agent_timer::AgentTimer>,
}

impl std::fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeat").finish()
    }
}

impl Heartbeat {
    /// Starts this rank's heartbeat over `session` (rank 0 takes its
    /// listener): `None` for a world of one. `progress` is what the beats
    /// carry; `fire` runs once, on the thread, when a peer is lost: one
    /// that went silent or, with `strict` (training, where every rank is
    /// this imgctl), whose heartbeat never came.
    pub fn start(
        session: &mut Session,
        settings: Settings,
        progress: Arc<Progress>,
        fire: FireAction,
        strict: bool,
    ) -> anyhow::Result<Option<Heartbeat>> {
        let role = match &session.links {
            Links::Alone => return Ok(None),
            Links::Root(streams) => {
                let listener = session.listener.take().ok_or_else(no_listener)?;
                let mut hosts = vec![None];
                hosts.extend(
                    streams
                        .iter()
                        .map(|s| s.peer_addr().ok().map(|a| a.ip().to_string())),
                );
                let nonces = session
                    .auth
                    .as_ref()
                    .map(|a| a.nonces.iter().map(|n| n.to_vec()).collect())
                    .unwrap_or_default();
                monitor::Role::Root {
                    listener,
                    hosts,
                    nonces,
                    watch: Vec::new(),
                }
            }
            Links::Leaf(s) => monitor::Role::Leaf {
                root: s.peer_addr()?,
                nonce: session
                    .auth
                    .as_ref()
                    .and_then(|a| a.nonces.first())
                    .map(|n| n.to_vec())
                    .unwrap_or_default(),
            },
        };
        let token = session.auth.as_ref().map(|a| a.token.clone());
        let (rank, world) = (session.rank, session.world_size);
        Self::spawn(
            (rank, world, token, strict),
            role,
            settings,
            progress,
            monitor::OnLost::End(fire),
        )
        .map(Some)
    }

    /// Fleet verify's rank 0 over what [`rendezvous_whoever_comes`] gathered
    /// (its listener taken): watches the ranks that came; `on_lost` gets
    /// each one that goes silent, and the others are watched on. `None` for
    /// a world of one.
    ///
    /// [`rendezvous_whoever_comes`]: super::rendezvous::rendezvous_whoever_comes
    pub fn start_fleet_root(
        gathered: &mut Gathered,
        token: Option<Token>,
        settings: Settings,
        on_lost: LostAction,
    ) -> anyhow::Result<Option<Heartbeat>> {
        let world = gathered.peers.len();
        if world <= 1 {
            return Ok(None);
        }
        let listener = gathered.listener.take().ok_or_else(no_listener)?;
        let role = monitor::Role::Root {
            listener,
            hosts: (gathered.peers.iter())
                .map(|p| p.as_ref().map(|(_, a)| a.ip().to_string()))
                .collect(),
            nonces: (gathered.nonces.iter().skip(1))
                .map(|n| n.map(|n| n.to_vec()).unwrap_or_default())
                .collect(),
            watch: gathered.peers.iter().map(Option::is_some).collect(),
        };
        Self::spawn(
            (0, world, token, false),
            role,
            settings,
            progress(),
            monitor::OnLost::Each(on_lost),
        )
        .map(Some)
    }

    fn spawn(
        (rank, world, token, strict): (usize, usize, Option<Token>, bool),
        role: monitor::Role,
        settings: Settings,
        progress: Arc<Progress>,
        on_lost: monitor::OnLost,
    ) -> anyhow::Result<Heartbeat> {
        let stop = Arc::new(AtomicBool::new(false));
        let frozen = Arc::new(AtomicBool::new(false));
        let m = monitor::Monitor {
            rank,
            world,
            settings,
            token,
            progress,
            stop: stop.clone(),
            frozen: frozen.clone(),
            strict,
        };
        let thread = std::thread::Builder::new()
            .name(
                if rank == 0 {
                    "imgctl-hb-root"
                } else {
                    "imgctl-hb-leaf"
                }
                .into(),
            )
            .spawn(move || m.run(role, on_lost))?;
        let pipe = std::env::var_os(crate::env_vars::TORCHELASTIC_TIMER_FILE).map(Into::into);
        Ok(Heartbeat {
            stop,
            frozen,
            thread: Some(thread),
            _agent: agent_timer::AgentTimer::start(pipe, settings.interval, settings.timeout),
        })
    }

    /// Stops beating and reading without closing anything, as a stopped
    /// process would (tests of the others' verdict).
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn no_listener() -> anyhow::Error {
    anyhow::anyhow!("rank 0's rendezvous listener is gone: no heartbeat")
}

/// The default fire action of a rank: the error as the command layer
/// renders it, then `_exit` with its status (as the watchdog's), its
/// torchrun agent's timer released first.
pub fn exit_rank() -> FireAction {
    Box::new(|err| {
        agent_timer::release();
        crate::output::exit_with(err)
    })
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
