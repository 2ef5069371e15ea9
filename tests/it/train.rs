//! train tests: one submodule per part of `imgctl::train`.
//!
//! `model` covers the UNet, its weights I/O, the DDPM schedule and the sample
//! grids (`model_*`, `schedule_*`), against diffusers where it matters.
#[cfg(feature = "torch")]
mod model;
