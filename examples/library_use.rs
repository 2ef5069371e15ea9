//! Using imgctl as a library: load a bundled spec, render its Dockerfile with
//! custom options, and print the pins that the image will carry as labels.
//!
//! Run with `cargo run --example library_use -- 12.6`.
use imgctl::render::{render, RenderOptions};
use imgctl::spec::{load, SpecSource};

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
    Ok(())
}
