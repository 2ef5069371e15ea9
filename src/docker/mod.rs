//! The Docker Engine API, through bollard: the only module that imports it.
//!
//! It owns connecting to the engine ([`engine`]), the in-memory build context
//! ([`context`]), running a build and reading its stream ([`build`]), images
//! (inspect, tag, push, remove: [`image`]), registry credentials ([`auth`]),
//! and running containers with GPU requests ([`run`]), with guards that
//! remove what it created on every path. It knows nothing of specs or checks,
//! and it prints nothing: commands do.
pub mod auth;
pub mod build;
pub mod context;
pub mod engine;
pub mod image;
pub mod run;

pub use engine::connect;
