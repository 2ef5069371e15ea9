//! **The world** (on the shared floor, under `train/` and `verify/`): the
//! job's identity, rendezvous, the TCPStore, collectives and the watchdog,
//! shared by training (`train::parallel`'s data parallelism) and by
//! `verify --fleet` (`verify::fleet`).
//!
//! - [`launch`]: rank/world size from torchrun, SLURM or Kubernetes variables; `--gpus`.
//! - [`rendezvous`]: ranks meet at rank 0's TCP server (NCCL unique id, CPU links).
//! - [`tcpstore`]: the client of torchrun's TCPStore wire protocol.
//! - [`collective`]: the [`Collective`] trait; backends [`collective::nccl`] (GPUs) and [`collective::cpu`] (TCP).
//! - [`watchdog`]: a collective queued on a GPU that never completes (a dead
//!   peer) ends the rank after a timeout, instead of hanging it forever.
//! - [`heartbeat`]: every rank beats to rank 0 and back on a thread of its
//!   own; a silent peer is named within seconds, not at the collective timeout.
//! - [`agent`]: after a lost peer, whether torchrun's rendezvous host went with it.
//! - [`timeouts`]: how long collectives wait; [`error`]: the typed errors
//!   (`commands/` gives them their exit status and hints).
//!
//! It imports only `sys/`, `env_vars`, `gpus/` and `output`; never `train/`,
//! `verify/` nor `commands/`.
//!
//! Part: the shared floor (`docs/architecture.md`).
pub mod agent;
pub mod auth;
pub mod collective;
pub mod error;
mod gather;
pub mod heartbeat;
pub mod hello;
pub mod launch;
pub mod rendezvous;
pub mod tcpstore;
pub mod timeouts;
pub mod watchdog;

pub use collective::{Backend, Collective, Solo};
pub use error::{CollectiveError, LaunchError, RendezvousError};
pub use launch::{LaunchInfo, LaunchSource};
pub use timeouts::{collective_timeout, default_collective_timeout};
