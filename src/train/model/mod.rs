//! The denoising model: diffusers' `UNet2DModel` rebuilt on tch, with the
//! same configuration fields, parameter names and forward math, so weights
//! move between imgctl and diffusers in both directions.
//!
//! - [`config`]: [`UNetConfig`] (presets, YAML / config.json, validation,
//!   analytic parameter count and FLOPs);
//! - [`layers`], [`embedding`], [`blocks`]: the pieces;
//! - [`unet`]: [`UNet2DModel`] and its forward pass;
//! - [`weights`]: safetensors save and strict load;
//! - [`error`]: their errors.
//!
//! This module must not own training concerns (optimizer, data, loss): those
//! live in the rest of `train/`.
//!
//! Part: the train wing (`docs/architecture.md`).
pub mod blocks;
pub mod config;
pub mod embedding;
pub mod error;
pub mod layers;
pub mod unet;
pub mod weights;

pub use config::{Census, UNetConfig};
pub use unet::UNet2DModel;
