//! The Docker Engine API, through bollard: the only module that imports it.
//!
//! It owns choosing the engine as the docker CLI does (contexts,
//! `DOCKER_HOST`: [`endpoint`]) and connecting to it ([`engine`], over a
//! transport that bounds what is buffered of the engine's answers:
//! [`transport`]), reading
//! the docker client's config folder ([`config`]), the in-memory build context
//! ([`context`]), running a build and reading its stream ([`build`]), images
//! (inspect, tag, push, remove: [`image`]), registry credentials ([`auth`]),
//! and running containers with GPU requests (by the NVIDIA runtime or CDI:
//! [`cdi`]; on Podman through libpod's own create: [`libpod`]; [`run`]), with guards that
//! remove what it created on every path. What it keeps of a helper's or a
//! container's output for an error or a report is bounded ([`tail`]). It
//! knows nothing of specs or checks, and it prints nothing: commands do. Its errors are [`DockerError`] (and
//! [`build::BuildError`], [`run::GpuRequestRejected`]); they name no flag.
//!
//! Part: the shared floor (`docs/architecture.md`).
pub mod attached;
pub mod auth;
pub mod build;
pub mod cdi;
pub mod config;
pub mod context;
pub mod endpoint;
pub mod engine;
mod error;
pub mod image;
pub mod libpod;
pub mod listing;
pub mod run;
pub mod tail;
pub mod transport;
pub mod ulimit;
pub mod volume;
pub mod work;
pub mod workstation;

pub use engine::{connect, Engine, EngineInfo};
pub use error::{DockerError, PushFailure};

/// The signals that end an engine operation early: Ctrl-C (SIGINT), a
/// supervisor's or Kubernetes' stop (SIGTERM) and a closed terminal (SIGHUP).
/// Install it before creating anything on the engine, so that no signal slips
/// in between the creation and the wait that cleans up.
pub struct Termination {
    streams: Vec<(&'static str, tokio::signal::unix::Signal)>,
}

impl Termination {
    /// Installs the handlers (needs a Tokio runtime with signals enabled).
    pub fn install() -> Result<Self, DockerError> {
        use tokio::signal::unix::{signal, SignalKind};
        let kinds = [
            ("SIGINT", SignalKind::interrupt()),
            ("SIGTERM", SignalKind::terminate()),
            ("SIGHUP", SignalKind::hangup()),
        ];
        let mut streams = Vec::with_capacity(kinds.len());
        for (name, kind) in kinds {
            let s = signal(kind).map_err(|error| DockerError::SignalHandler {
                signal: name,
                error,
            })?;
            streams.push((name, s));
        }
        Ok(Self { streams })
    }

    /// From now on the first of the signals ends the process (exit 130).
    /// Once a signal stream exists tokio never restores the signal's default
    /// action, so a later phase that does not listen (tagging, pushing)
    /// would otherwise ignore Ctrl-C and a supervisor's SIGTERM. Call it where
    /// nothing is left to clean up.
    pub fn exit_on_next(mut self) {
        tokio::spawn(async move {
            let signal = self.recv().await;
            // The command layer's line and status (exit 130), then `_exit`,
            // so no exit handler runs while other threads still use the runtime.
            crate::output::exit_with(DockerError::Signalled { signal }.into());
        });
    }

    /// Waits for the first of the signals and names it (`SIGTERM`).
    pub async fn recv(&mut self) -> &'static str {
        let waits = self.streams.iter_mut().map(|(name, s)| {
            let name: &'static str = name;
            Box::pin(async move {
                s.recv().await;
                name
            })
        });
        futures_util::future::select_all(waits).await.0
    }
}
