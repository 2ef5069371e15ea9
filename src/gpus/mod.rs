//! GPU facts and words shared by verify, training and the container runs:
//! the datasheet peaks ([`peaks`]: verify's functional floors and the
//! benchmark's MFU read the one table), the value each measurement should
//! read ([`expected`]: typical or peak, with its source) and the GPU selection grammar
//! ([`select`]: `all`, a count, device indices or UUIDs, as `train-demo
//! --gpus` and `verify --image --gpus` take it).
//!
//! Which code runs where ([`archs`]: a wheel's architectures, each GPU
//! model's compute capability, NCCL floors) and whether an image fits a
//! fleet ([`fit`]: the gate's and `up`'s rules; [`fleet`]: a fleet from a
//! file, a history or this host).
//!
//! Leaves all: they hold figures and parse text; measuring, launching and
//! device requests are their callers' jobs.
//!
//! Part: the shared floor (`docs/architecture.md`).
pub mod archs;
pub mod expected;
pub mod fit;
pub mod fleet;
pub mod peaks;
pub mod select;

pub use peaks::{lookup, GpuPeak, PEAKS};
pub use select::{GpuId, GpuSelection, GpuSelectionError};
