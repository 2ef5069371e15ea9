//! imgctl builds, verifies and exercises pinned PyTorch / CUDA GPU images.
//!
//! It does three jobs, each behind one subcommand:
//! 1. **build** (`imgctl build`, `imgctl render`): validated image specs
//!    ([`image::specs`]) are rendered to Dockerfiles ([`image::render`]) and
//!    built through the Docker Engine API ([`docker`]); `imgctl lock` pins
//!    every Python package of a spec in a lock file ([`image::lock`]);
//!    `imgctl sbom` lists what a built image holds as CycloneDX
//!    ([`image::sbom`]). The build wing is [`image`].
//! 2. **verify** (`imgctl verify`): GPU, driver and library checks through NVML
//!    and libtorch ([`verify`]), run inside a container or on a host.
//! 3. **train-demo** (`imgctl train-demo`, `imgctl sample`): a diffusers-compatible
//!    UNet DDPM training run and benchmark through tch (`train`, `train::bench`; the
//!    `torch` feature).
//!
//! [`cli`] holds the clap types only; [`commands`] turns them into typed options
//! and calls the core; [`output`] decides what goes to stdout and stderr. A
//! flag with a closed set of values takes the core's own enum (deriving
//! `clap::ValueEnum`: [`choices`], `verify::Level`), so the command line, the
//! config files and the reports spell each value alike.
#![warn(missing_docs)]
// Everything printed goes through output::Printer (stdout: data alone).
#![cfg_attr(not(test), deny(clippy::print_stdout, clippy::print_stderr))]
#![deny(unsafe_code)]

pub mod choices;
pub mod cli;
pub mod commands;
pub mod docker;
pub mod env_vars;
pub mod error;
pub mod gpus;
pub mod image;
pub mod image_ref;
pub mod invariants;
pub mod nvml;
pub mod output;
pub mod plot;
#[allow(unsafe_code)]
pub mod sys;
#[cfg(feature = "torch")]
pub mod train;
pub mod verify;
pub mod workstation;
#[cfg(feature = "torch")]
pub mod world;
pub mod yaml;
