//! train (being written).
pub mod data;
pub mod ema;
pub mod flat;
pub mod optim;
pub mod tensorboard;
