//! `imgctl train-demo`: chooses what this process does, then does it.
//!
//! [`run`] reads top-down: the benchmark's flags are checked
//! ([`bench::check_flags`]), then with `--gpus` (or `IMGCTL_CPU_RANKS`) this
//! process supervises one worker per GPU ([`launch`]), with `--benchmark` it
//! measures ([`bench`]), and otherwise it trains: a single process, or one
//! rank of a launched job ([`launch::worker_sync`]), with the flags resolved
//! by [`options`]. Those modules never call back into this one. The command
//! layer only: the work lives in `crate::train` and `crate::train::bench`.
//!
//! Part: the command layer (`docs/architecture.md`).
use crate::cli::TrainArgs;
use crate::error::ExitStatus;

#[cfg(feature = "torch")]
mod bench;
#[cfg(feature = "torch")]
mod events;
#[cfg(feature = "torch")]
mod launch;
#[cfg(feature = "torch")]
pub(crate) use launch::heartbeat_settings;
#[cfg(feature = "torch")]
mod op_profile;
#[cfg(feature = "torch")]
pub mod options;

/// Runs `imgctl train-demo`.
#[cfg(feature = "torch")]
pub fn run(args: TrainArgs) -> anyhow::Result<ExitStatus> {
    use crate::world::launch::LaunchInfo;

    bench::check_flags(&args)?;
    launch::heartbeat_settings(args.heartbeat, args.heartbeat_timeout)?;
    if args.print_config {
        return print_config(&args);
    }
    let launch = LaunchInfo::from_process_env()?;
    match (launch::slots(&args, &launch)?, args.benchmark) {
        // This process supervises one worker per GPU (CPU rank).
        (Some(slots), false) => launch::supervise(slots),
        (Some(slots), true) => bench::supervised(&args, slots),
        (None, true) if args.op_profile => op_profile::run(&args),
        (None, true) => bench::local(&args),
        // A single process, or a rank a launcher started.
        (None, false) => single_run::train(args),
    }
}

/// `train-demo --print-config`: the configuration a run with these flags
/// would train with, as YAML that `--config` reads back; nothing is trained
/// or written.
#[cfg(feature = "torch")]
fn print_config(args: &TrainArgs) -> anyhow::Result<ExitStatus> {
    let opts = options::resolve_options(args)?;
    let yaml = serde_yaml::to_string(&opts.config)?;
    crate::output::printer().data(format!(
        "# imgctl train-demo: the resolved configuration (preset {}, then --config, then flags);\n\
         # run it with `imgctl train-demo --config FILE`. Device {}, precision {}.\n{}",
        opts.config.preset.name(),
        crate::train::session::device_name(opts.device),
        opts.precision.name(),
        yaml.trim_end()
    ));
    Ok(ExitStatus::Success)
}

/// Runs `imgctl train-demo` (unavailable without the `torch` feature).
#[cfg(not(feature = "torch"))]
pub fn run(_args: TrainArgs) -> anyhow::Result<ExitStatus> {
    Err(super::torch_missing("train-demo"))
}

/// Training in this process, and its summary.
#[cfg(feature = "torch")]
mod single_run {
    use anyhow::Context;
    use tch::Device;

    use super::launch::worker_sync;
    use super::options::{out_dir, resolve_options};
    use crate::cli::TrainArgs;
    use crate::error::ExitStatus;
    use crate::nvml::throttle_names;
    use crate::output::printer;
    use crate::train::checkpoint;
    use crate::train::config::TrainConfig;
    use crate::train::out_lock::OutLock;
    use crate::train::run::{self, TrainSummary};
    use crate::train::space;
    use crate::train::summary::GpuUsage;
    use crate::verify::nvml::BENIGN_THROTTLE;
    use crate::world::launch::LaunchInfo;

    /// Trains in this process (a world of one, or this rank of a launched
    /// job), writes summary.json and prints the summary.
    pub fn train(args: TrainArgs) -> anyhow::Result<ExitStatus> {
        // The process that writes --out (rank 0; every rank of a launched
        // job sees the launcher's RANK) locks it before reading anything
        // there, and holds the lock until summary.json is written. A folder
        // that does not exist yet holds nothing to read: it is locked after
        // the settings are checked, so a refused command creates nothing.
        let primary = LaunchInfo::from_process_env()?.is_primary();
        let out_path = out_dir(&args);
        let mut _lock = if primary && out_path.exists() {
            Some(lock_out(&out_path)?)
        } else {
            None
        };
        let mut opts = resolve_options(&args)?;
        if primary && _lock.is_none() {
            _lock = Some(lock_out(&out_path)?);
        }
        let out = opts.out.clone();
        let sync = worker_sync(&args, &mut opts)?;
        let primary = sync.rank() == 0;
        if primary && args.device.is_none() && opts.device == Device::Cpu {
            if let Some(line) = cpu_fallback_warning(&opts.config) {
                printer().warn(line);
            }
        }
        if primary {
            if let Some(note) = &opts.precision_note {
                printer().info(note);
            }
        }
        let params = opts.config.model.param_count();
        let summary = run::run(opts, sync, &super::events::printed())
            .map_err(|e| space::explain_disk_full(e, &out, params))
            .map_err(super::launch::after_lost_peer)?;
        // Only rank 0 writes and prints.
        if !primary {
            return Ok(ExitStatus::Success);
        }
        let text = serde_json::to_string_pretty(&summary)?;
        let path = out.join("summary.json");
        checkpoint::write_file_atomic(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
            .map_err(|e| space::explain_disk_full(e, &out, params))?;
        let p = printer();
        for line in summary_lines(&summary) {
            p.info(line);
        }
        if args.json {
            // The same document as summary.json (a test holds the two equal):
            // `-v` names the binary that trained.
            p.json(&summary)?;
        }
        p.verbose(format!(
            "trained by {}",
            crate::commands::torch_part::ran_by()["binary"]
                .as_str()
                .unwrap_or("this imgctl")
        ));
        Ok(ExitStatus::Success)
    }

    /// Locks `out` (see [`OutLock::acquire`]), warning when its file system
    /// refuses the lock and the run goes on unlocked.
    fn lock_out(out: &std::path::Path) -> anyhow::Result<OutLock> {
        let lock = OutLock::acquire(out)?;
        if let Some(err) = lock.unlocked() {
            printer().warn(format!(
                "cannot lock {} ({err}): nothing stops a second run from writing to the same --out",
                lock.path().display()
            ));
        }
        Ok(lock)
    }

    /// The human summary lines.
    pub fn summary_lines(s: &TrainSummary) -> Vec<String> {
        let mut lines = Vec::new();
        let loss = match (s.first_loss, s.final_loss) {
            (Some(a), Some(b)) => format!(
                "loss {a:.4} at the first step → {b:.4} over the last {} ({:.1}%)",
                (s.final_step - s.start_step).min(10),
                100.0 * b / a
            ),
            _ => "no loss recorded".into(),
        };
        let speed = s
            .img_per_s
            .map_or("n/a".to_string(), |v| format!("{v:.1} img/s"));
        lines.push(format!(
            "trained steps {}..{} in {:.1} s on {} ({}): {loss}, {speed}",
            s.start_step + 1,
            s.final_step,
            s.elapsed_s,
            s.device,
            s.precision
        ));
        if let Some(m) = &s.device_memory {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            let peaks = match (m.peak_allocated_bytes, m.peak_reserved_bytes) {
                (Some(a), Some(r)) => format!(
                    "peak {:.2} GiB allocated, {:.2} GiB reserved by torch's allocator; ",
                    gib(a),
                    gib(r)
                ),
                _ => String::new(),
            };
            lines.push(format!(
                "device memory: {peaks}{:.2} GiB of {:.1} GiB in use on the device after training (CUDA context + allocator reserve)",
                gib(m.used_bytes),
                gib(m.total_bytes)
            ));
        }
        lines.extend(s.gpus.iter().map(gpu_usage_line));
        if let Some(g) = s.grad_sync.filter(|g| g.calls > 0) {
            let how = if g.overlapped {
                format!(
                    "overlapped with backward ({:.0}% of them started during it)",
                    100.0 * g.buckets_during_backward as f64 / g.buckets.max(1) as f64
                )
            } else {
                "after backward".to_string()
            };
            let per_step = (g.buckets as f64 / g.calls as f64).round();
            lines.push(format!(
                "gradient all-reduce: {:.1} MB per step in {per_step:.0} bucket{}, {how}",
                g.bytes_per_sync as f64 / 1e6,
                if per_step == 1.0 { "" } else { "s" }
            ));
        }
        if s.skipped_steps > 0 {
            lines.push(format!(
                "fp16: {} step(s) skipped for overflow",
                s.skipped_steps
            ));
        }
        if s.data.unreadable_files > 0 {
            let first = s
                .data
                .unreadable
                .first()
                .map(|u| format!(" (first: {}: {})", u.path.display(), u.error))
                .unwrap_or_default();
            lines.push(format!(
                "data: {} unreadable file(s) skipped{first}",
                s.data.unreadable_files
            ));
        }
        if let Some(c) = &s.checkpoint {
            lines.push(format!("checkpoint: {}", c.display()));
        }
        if let Some(d) = &s.diffusers_model {
            lines.push(format!(
                "diffusers model (EMA): {} (UNet2DModel.from_pretrained)",
                d.display()
            ));
        }
        if let Some(last) = s.samples.last() {
            lines.push(match &s.sample_stats {
                Some(st) => format!(
                    "samples: {} — {} images, DDIM {} steps, EMA weights (neighbour difference {:.3}, saturation {:.3}; training data {:.3}, {:.3}){}",
                    last.display(),
                    st.images,
                    st.ddim_steps,
                    st.samples.neighbour_diff,
                    st.samples.saturation,
                    st.data.neighbour_diff,
                    st.data.saturation,
                    if st.resembles_data {
                        ": they resemble the data"
                    } else {
                        ": they do not resemble the data yet (train longer; on a CPU, --preset smoke learns in about 2 minutes)"
                    }
                ),
                None => format!("samples: {}", last.display()),
            });
        }
        lines.push(format!(
            "metrics: {} (TensorBoard: tensorboard --logdir {})",
            s.metrics.display(),
            s.out_dir.join("tb").display()
        ));
        if let Some(plot) = &s.loss_plot {
            lines.push(format!("curves: {}", plot.display()));
        }
        if crate::output::in_notebook() {
            let pictures: Vec<String> = s
                .loss_plot
                .iter()
                .chain(s.samples.last())
                .map(|p| format!("Image({:?})", p.display().to_string()))
                .collect();
            if !pictures.is_empty() {
                lines.push(format!(
                    "show them here: from IPython.display import Image, display; display({})",
                    pictures.join(", ")
                ));
            }
        }
        lines
    }

    /// `GPU 0 (NVIDIA H200, rank 0): mean utilisation 96%, peak memory 61.2
    /// of 140.4 GiB, at most 612 W and 71 °C (120 readings)`, then the
    /// throttle reasons beyond idle and the software power cap (which verify
    /// counts as benign) and in how many readings each was active.
    pub fn gpu_usage_line(u: &GpuUsage) -> String {
        let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
        let name = u
            .name
            .as_deref()
            .map_or(String::new(), |n| format!("{n}, "));
        let util = u
            .mean_utilization_pct
            .map_or("utilisation unknown".to_string(), |p| {
                format!("mean utilisation {p:.0}%")
            });
        let memory = match (u.peak_memory_used_bytes, u.memory_total_bytes) {
            (Some(used), Some(total)) => {
                format!(", peak memory {:.1} of {:.1} GiB", gib(used), gib(total))
            }
            (Some(used), None) => format!(", peak memory {:.1} GiB", gib(used)),
            _ => String::new(),
        };
        let most: Vec<String> = [
            u.peak_power_w.map(|w| format!("{w:.0} W")),
            u.max_temperature_c.map(|c| format!("{c} °C")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let most = if most.is_empty() {
            String::new()
        } else {
            format!(", at most {}", most.join(" and "))
        };
        let benign = throttle_names(BENIGN_THROTTLE);
        let throttled: Vec<String> = u
            .throttle_reasons
            .iter()
            .filter(|(r, _)| !benign.contains(r))
            .map(|(r, n)| format!("{r} in {n}"))
            .collect();
        let throttled = if throttled.is_empty() {
            String::new()
        } else {
            format!("; throttled: {}", throttled.join(", "))
        };
        format!(
            "GPU {} ({name}rank {}): {util}{memory}{most} ({} reading{}){throttled}",
            u.index,
            u.rank,
            u.samples,
            if u.samples == 1 { "" } else { "s" }
        )
    }

    /// The warning for a run that fell back to the CPU (no CUDA device, no
    /// `--device`) with a model too large for a CPU demo: the default model
    /// trains at about 1 img/s on a CPU (0.24 img/s measured on 2 cores in a
    /// debug build), so its 1000 × 16 images take hours. `None` for small models.
    pub fn cpu_fallback_warning(config: &TrainConfig) -> Option<String> {
        // The tiny and smoke presets' ~0.7 M parameters step in milliseconds; warn well above it.
        const LARGE_PARAMS: u64 = 10_000_000;
        let params = config.model.param_count();
        (params >= LARGE_PARAMS).then(|| {
            format!(
                "no CUDA device: the CPU trains the {:.1} M-parameter {} model at a few images \
                 per second; use --preset smoke for a CPU demo (about 2 minutes, samples that show \
                 the data), or check the GPU with `imgctl verify`",
                params as f64 / 1e6,
                config.preset
            )
        })
    }
}

#[cfg(all(test, feature = "torch"))]
mod tests {
    use super::single_run::{cpu_fallback_warning, gpu_usage_line};
    use crate::train::config::{Preset, TrainConfig};
    use crate::train::summary::GpuUsage;

    #[test]
    fn a_gpu_usage_line_gives_the_mean_utilisation_and_peak_memory() {
        let mut u = GpuUsage {
            index: 0,
            rank: 0,
            name: Some("NVIDIA H200".into()),
            samples: 120,
            mean_utilization_pct: Some(96.4),
            peak_memory_used_bytes: Some(65_712_999_424),
            memory_total_bytes: Some(150_754_820_096),
            peak_power_w: Some(612.3),
            max_temperature_c: Some(71),
            throttle_reasons: [
                ("sw_power_cap".to_string(), 40),
                ("hw_thermal_slowdown".to_string(), 3),
            ]
            .into_iter()
            .collect(),
        };
        assert_eq!(
            gpu_usage_line(&u),
            "GPU 0 (NVIDIA H200, rank 0): mean utilisation 96%, peak memory 61.2 of 140.4 GiB, at most 612 W and 71 °C (120 readings); throttled: hw_thermal_slowdown in 3"
        );
        u.throttle_reasons.clear();
        u.mean_utilization_pct = None;
        u.peak_power_w = None;
        u.max_temperature_c = None;
        u.name = None;
        u.samples = 1;
        assert_eq!(
            gpu_usage_line(&u),
            "GPU 0 (rank 0): utilisation unknown, peak memory 61.2 of 140.4 GiB (1 reading)"
        );
    }

    #[test]
    fn cpu_fallback_warns_for_the_default_model_only() {
        let default = TrainConfig::preset(Preset::Default);
        let w = cpu_fallback_warning(&default).expect("the default model is large");
        assert!(w.contains("113.7 M-parameter default model"), "{w}");
        assert!(w.contains("--preset smoke for a CPU demo"), "{w}");
        assert_eq!(
            cpu_fallback_warning(&TrainConfig::preset(Preset::Tiny)),
            None
        );
    }
}
