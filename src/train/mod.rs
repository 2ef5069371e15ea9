//! Training a diffusers-compatible UNet DDPM on tch (`imgctl train-demo`,
//! `imgctl sample`).
//!
//! [`model`] is the UNet and its weights I/O, [`schedule`] the DDPM noise
//! schedule and samplers, [`images`] the PNG sample grids. Only this module
//! tree, `bench/` and verify's torch checks import tch.
pub mod images;
pub mod model;
pub mod schedule;
