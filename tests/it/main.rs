//! imgctl's integration tests: one binary (libtorch links once), one module per area.
mod common;

mod architecture;
mod build;
mod buildkit;
mod checkpointing;
mod cli;
mod device_check;
mod elastic;
mod engine;
mod fleet;
mod fuzz_regressions;
mod image_e2e;
mod injection;
mod linking;
mod lock;
mod multinode;
mod parallel;
mod referrers;
mod render;
mod slurm;
mod smoke;
mod spec;
mod train;
mod trainer;
mod verify;
mod workstation;
