//! The Docker Engine API, through bollard: the only module that imports it.
//!
//! It owns connecting to the engine ([`engine`]), build contexts and the build
//! stream, and running containers with GPU requests ([`run`]), with guards that
//! remove what it created on every path. It knows nothing of specs or checks.
pub mod engine;
pub mod run;

pub use engine::connect;
