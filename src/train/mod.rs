//! Training a diffusers-compatible UNet DDPM on tch (`imgctl train-demo`,
//! `imgctl sample`).
//!
//! [`model`] is the UNet and its weights I/O, [`schedule`] the DDPM noise
//! schedule and samplers, [`images`] the PNG sample grids. Only this module
//! tree, `bench/` and verify's torch checks import tch.
//!
//! The run around the model: [`config`] (presets, YAML, flags), [`data`]
//! (synthetic set, image folders, background loader), [`flat`] (flat
//! parameter/gradient buffers), [`optim`] (AdamW, LR schedule, clipping, loss
//! scaling), [`ema`], [`checkpoint`], [`elastic`] (the batch of a resume on
//! another number of ranks), [`out_lock`] (one run per output directory),
//! [`space`] (disk space), [`metrics`] and [`tensorboard`], [`gpu_watch`]
//! (the GPUs' NVML readings while a run trains);
//! [`sync`] (the [`sync::GradSync`] seam for data parallelism), [`session`]
//! (the preflight and start shared with the benchmark), [`trainer`] (the
//! step, sampling, checkpoint I/O) and [`run`] (the training loop, its report
//! in [`summary`], what it says as it goes in [`events`], Ctrl-C in
//! [`interrupt`]); and [`parallel`] (launch, rendezvous, NCCL/CPU
//! collectives, gradient buckets, the `--gpus` supervisor), which implements
//! [`sync::GradSync`] and imports neither the trainer nor the run.
//!
//! Part: the train wing (`docs/architecture.md`).
pub mod bench;
pub mod budget;
pub mod checkpoint;
pub mod config;
pub mod curves;
pub mod data;
pub mod elastic;
pub mod ema;
pub mod events;
pub mod flat;
pub mod gpu_watch;
pub mod images;
pub mod interrupt;
pub mod kernels;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod out_lock;
pub mod parallel;
pub mod readback;
pub mod run;
pub mod run_metrics;
pub mod schedule;
pub mod session;
pub mod space;
pub mod summary;
pub mod sync;
pub mod tensorboard;
pub mod threads;
pub mod trainer;
pub mod trainer_error;
