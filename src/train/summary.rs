//! The report of a training run ([`TrainSummary`], written as summary.json
//! and printed by `--json`) and the facts only it gathers: the device's
//! memory after training (`device_memory`) and the statistics of the
//! training data a sample grid is compared with (`data_stats`).
//!
//! `super::run` fills it in and re-exports its types; this module must not
//! train, print or write files.
use std::path::PathBuf;

use serde::Serialize;
use tch::{Device, Tensor};

use super::data::Dataset;
pub use super::gpu_watch::GpuUsage;
use super::images;
use super::sync::SyncStats;

/// Version of the summary JSON.
pub const SUMMARY_SCHEMA_VERSION: u32 = 1;

/// Data facts for the summary.
#[derive(Debug, Clone, Serialize)]
pub struct DataSummary {
    /// `synthetic` or `folder`.
    pub source: String,
    /// The folder, if any.
    pub path: Option<PathBuf>,
    /// Images in one epoch.
    pub images: usize,
    /// Files skipped as unreadable (at scan time and during training).
    pub unreadable_files: usize,
    /// The first unreadable files with the reason.
    pub unreadable: Vec<UnreadableFile>,
}

/// The last sample grid of a run: how it was made, and the statistics that
/// tell learnt images from noise ([`images::ImageStats`]) for it and for the
/// training data (up to 64 of its first images).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SampleStats {
    /// Images in the grid.
    pub images: i64,
    /// DDIM steps.
    pub ddim_steps: usize,
    /// The grid's statistics.
    pub samples: images::ImageStats,
    /// The training data's.
    pub data: images::ImageStats,
    /// Whether both statistics are within [`images::RESEMBLANCE_FACTOR`] of
    /// the data's: false means the grid does not look like the data yet.
    pub resembles_data: bool,
}

/// The [`images::ImageStats`] of up to 64 of `data`'s first images (as the
/// model sees them before augmentation); `None` when one cannot be read.
pub(super) fn data_stats(data: &Dataset, seed: u64) -> Option<images::ImageStats> {
    let n = data.len().min(64);
    let size = data.size as i64;
    let imgs: Vec<Tensor> = (0..n)
        .map(|i| {
            data.image(seed, i)
                .ok()
                .map(|v| Tensor::from_slice(&v).view([3, size, size]))
        })
        .collect::<Option<_>>()?;
    if imgs.is_empty() {
        return None;
    }
    images::ImageStats::of(&Tensor::stack(&imgs, 0)).ok()
}

/// One skipped file.
#[derive(Debug, Clone, Serialize)]
pub struct UnreadableFile {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub error: String,
}

/// The final report of a run (summary.json, `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct TrainSummary {
    /// Version of this layout.
    pub schema_version: u32,
    /// `completed`.
    pub status: String,
    /// The preset the config started from.
    pub preset: String,
    /// The device.
    pub device: String,
    /// The precision.
    pub precision: String,
    /// Ranks.
    pub world_size: usize,
    /// Images per rank per step.
    pub batch_size: usize,
    /// Trainable parameters.
    pub params: i64,
    /// The step the run started at (non-zero after --resume).
    pub start_step: u64,
    /// The last step completed.
    pub final_step: u64,
    /// Steps skipped for fp16 overflow.
    pub skipped_steps: u64,
    /// Loss of the first step of this process.
    pub first_loss: Option<f64>,
    /// Mean loss of the last (up to) 10 steps.
    pub final_loss: Option<f64>,
    /// Images per second over the run, all ranks, excluding the first step.
    pub img_per_s: Option<f64>,
    /// Training FLOPs per image (forward + backward, from the config).
    pub train_flops_per_image: f64,
    /// Device memory in use at the end of training (CUDA only).
    pub device_memory: Option<DeviceMemory>,
    /// The GPUs as read every `training.gpu_sample_every_s` while this
    /// process trained: mean utilisation, peak memory and more, per GPU
    /// (empty on the CPU, without NVML, and on ranks other than 0).
    pub gpus: Vec<GpuUsage>,
    /// The gradient all-reduce (data-parallel runs, one rank too; `null` for a
    /// single process).
    pub grad_sync: Option<SyncStats>,
    /// Wall-clock seconds of the training loop.
    pub elapsed_s: f64,
    /// The data.
    pub data: DataSummary,
    /// The output directory.
    pub out_dir: PathBuf,
    /// The last checkpoint written.
    pub checkpoint: Option<PathBuf>,
    /// metrics.jsonl.
    pub metrics: PathBuf,
    /// The TensorBoard event file.
    pub tensorboard: PathBuf,
    /// The curves (loss, learning rate, gradient norm) as a picture; `null`
    /// on other ranks and when it could not be drawn (a warning says why).
    pub loss_plot: Option<PathBuf>,
    /// Sample grids written.
    pub samples: Vec<PathBuf>,
    /// What the last grid shows, and how it compares with the training data.
    pub sample_stats: Option<SampleStats>,
    /// The final EMA weights as a diffusers model folder
    /// (`UNet2DModel.from_pretrained(path)`).
    pub diffusers_model: Option<PathBuf>,
}

/// Device memory of a training run: torch's caching-allocator peaks (what
/// `torch.cuda.max_memory_allocated`/`max_memory_reserved` report), and the
/// device's own count after training from `cudaMemGetInfo` (total − free: the
/// CUDA context plus the allocator's reserve).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DeviceMemory {
    /// The most bytes torch's allocator had in tensors at once; `None` where
    /// this libtorch cannot say (before torch 2.9).
    pub peak_allocated_bytes: Option<u64>,
    /// The most bytes torch's allocator held from the device at once.
    pub peak_reserved_bytes: Option<u64>,
    /// Bytes in use on the device after training (cudaMemGetInfo).
    pub used_bytes: u64,
    /// The device's total memory.
    pub total_bytes: u64,
}

/// Reads [`DeviceMemory`] on a CUDA device (`None` on the CPU, or when the
/// CUDA runtime cannot be asked: the figure is informative, not essential).
pub(super) fn device_memory(device: Device) -> Option<DeviceMemory> {
    let Device::Cuda(index) = device else {
        return None;
    };
    let rt = crate::sys::cudart::CudaRuntime::locate().ok()?;
    // cudaMemGetInfo reads the calling thread's current device.
    rt.set_device(index).ok()?;
    let (free, total) = rt.mem_get_info().ok()?;
    let torch = crate::sys::torch_ext::cuda_allocator_stats(index, false)
        .ok()
        .flatten();
    Some(DeviceMemory {
        peak_allocated_bytes: torch.map(|t| t.peak_allocated_bytes),
        peak_reserved_bytes: torch.map(|t| t.peak_reserved_bytes),
        used_bytes: total.saturating_sub(free),
        total_bytes: total,
    })
}
