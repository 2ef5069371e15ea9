//! Using imgctl as a library: load a bundled spec, render its Dockerfile with
//! custom options, and print the pins that the image will carry as labels;
//! then (with the `torch` feature, the default) train the `tiny` UNet for a
//! few steps with imgctl itself printing nothing: the run's events come to
//! this program, which decides what to show.
//!
//! Run with `cargo run --example library_use -- 12.6`.
use imgctl::image::render::{render, RenderOptions};
use imgctl::image::specs::{load, SpecSource};

fn main() -> anyhow::Result<()> {
    let cuda = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "12.4".to_string());
    let spec = load(&SpecSource::from_args(Some(&cuda), None))?;
    // UID/GID of the image's user, chosen to match the host user's.
    let options = RenderOptions {
        uid: 1500,
        gid: 1500,
        ..RenderOptions::default()
    };
    let image = render(&spec, &options)?;
    println!("profile {} (spec sha256 {})", spec.name, &spec.sha256[..12]);
    for note in &image.notes {
        println!("note: {note}");
    }
    for (key, value) in &image.labels {
        println!("{key} = {value}");
    }
    println!(
        "Dockerfile: {} lines, {} context files",
        image.dockerfile.lines().count(),
        image.files.len()
    );
    #[cfg(feature = "torch")]
    train_quietly()?;
    Ok(())
}

/// Four steps of the `tiny` preset on the synthetic data, on the CPU, into
/// a temporary folder. imgctl says nothing on its own: its events are
/// collected here, and the program prints the loss it saw and the summary.
#[cfg(feature = "torch")]
fn train_quietly() -> anyhow::Result<()> {
    use std::cell::RefCell;

    use imgctl::choices::Preset;
    use imgctl::train::config::{Precision, TrainConfig};
    use imgctl::train::events::RunEvent;
    use imgctl::train::session::{DataChoice, RunOptions};
    use imgctl::train::sync::SingleProcess;

    let mut config = TrainConfig::preset(Preset::Tiny);
    config.training.steps = 4;
    config.training.sample_every = 0;
    let out = std::env::temp_dir().join(format!("imgctl-library-use-{}", std::process::id()));
    let opts = RunOptions {
        config,
        device: tch::Device::Cpu,
        precision: Precision::Fp32,
        out: out.clone(),
        data: DataChoice::Synthetic,
        init_from: None,
        resume: None,
        finished_ok: false,
        inject_nan_at: None,
        interrupt_after: None,
        precision_note: None,
        resume_flag: "--resume",
    };
    let losses = RefCell::new(Vec::new());
    let summary = imgctl::train::run::run(opts, Box::new(SingleProcess), &|event| {
        if let RunEvent::Step(s) = event {
            losses.borrow_mut().push(s.loss);
        }
    });
    let _ = std::fs::remove_dir_all(&out);
    let summary = summary?;
    let losses: Vec<String> = losses.borrow().iter().map(|l| format!("{l:.4}")).collect();
    println!(
        "trained {} ({} params) for {} steps: loss {}",
        summary.preset,
        summary.params,
        summary.final_step,
        losses.join(" → ")
    );
    Ok(())
}
