//! `imgctl sbom IMAGE`: the CycloneDX 1.5 SBOM of an image, read from the
//! image itself. A short-lived container of it (removed on every path, as
//! `verify --image`'s) runs [`sbom::INVENTORY_SCRIPT`]; [`sbom::cyclonedx`]
//! writes the document. JSON on stdout, or `--output FILE` written
//! atomically; a line on stderr counts what it found.
use std::collections::BTreeMap;
use std::time::Duration;

use crate::cli::SbomArgs;
use crate::commands::error::CliError;
use crate::docker::run::{run_to_completion_with, RunRequest};
use crate::error::ExitStatus;
use crate::image::sbom::{self, ImageFacts};
use crate::output::printer;

/// How long listing an image's packages may take (dpkg and Python start
/// in seconds; a loaded host or a cold disk, in a minute).
const INVENTORY_DEADLINE: Duration = Duration::from_secs(180);

/// `imgctl sbom`.
pub fn run(args: SbomArgs) -> anyhow::Result<ExitStatus> {
    if let Some(path) = &args.output {
        crate::commands::output_files::check_output_file("--output", path)?;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let spinner = printer().spinner(format!("listing the packages of {}", args.image));
    let read = runtime.block_on(read_image(&args.image));
    spinner.finish_and_clear();
    let (id, labels, inventory) = read?;
    let (doc, summary) = document(&id, &args.image, &labels, &inventory);
    let text = String::from_utf8(crate::image::attest::to_bytes(&doc))?;
    match &args.output {
        Some(path) => {
            crate::sys::fs::write_file_atomic(path, text.as_bytes()).map_err(|e| {
                CliError::failure(format!("cannot write the SBOM to {}: {e}", path.display()))
                    .with_hint("check that the folder exists and is writable")
            })?;
            printer().info(format!("{summary}; written to {}", path.display()));
        }
        None => {
            printer().data_bytes(text.as_bytes());
            printer().info(summary);
        }
    }
    Ok(ExitStatus::Success)
}

/// The SBOM of image `id` (named `reference`) and a line counting what it holds.
pub(crate) fn document(
    id: &str,
    reference: &str,
    labels: &BTreeMap<String, String>,
    inventory: &sbom::Inventory,
) -> (serde_json::Value, String) {
    let facts = ImageFacts {
        id,
        reference,
        labels,
    };
    let doc = sbom::cyclonedx(&facts, inventory);
    let hashed = doc["components"].as_array().map_or(0, |c| {
        c.iter()
            .filter(|c| c.get("hashes").is_some() && c["type"] == "library")
            .count()
    });
    let summary = format!(
        "sbom of {reference} ({}): {} dpkg packages, {} Python packages ({hashed} with the hashes of the image's pip lock), {} CUDA libraries",
        crate::output::head(id, 19),
        inventory.debs.len(),
        inventory.python.len(),
        sbom::CUDA_WHEELS
            .iter()
            .filter(|(w, _)| inventory.python.iter().any(|p| sbom::normalize(&p.name) == *w))
            .count()
    );
    (doc, summary)
}

/// The image's id, labels and inventory (a container of it lists them).
pub(crate) async fn read_image(
    image: &str,
) -> anyhow::Result<(String, BTreeMap<String, String>, sbom::Inventory)> {
    let docker = crate::docker::connect().await?.docker;
    let labels: BTreeMap<String, String> = crate::docker::run::image_labels(&docker, image)
        .await?
        .into_iter()
        .collect();
    let id = docker
        .inspect_image(image)
        .await
        .ok()
        .and_then(|i| i.id)
        .unwrap_or_default();
    let out = run_to_completion_with(
        &docker,
        RunRequest {
            image: image.to_string(),
            entrypoint: Some(vec!["sh".into(), "-c".into()]),
            cmd: vec![sbom::INVENTORY_SCRIPT.to_string()],
            timeout: INVENTORY_DEADLINE,
            ..Default::default()
        },
        &|p| {
            super::say_container_note(&p);
        },
    )
    .await?;
    if out.exit_code != 0 {
        return Err(CliError::failure(format!(
            "listing the packages of {image} failed (exit {}): {}",
            out.exit_code,
            out.stderr
                .trim()
                .lines()
                .last()
                .unwrap_or("it said nothing")
        ))
        .with_hint("the image needs /bin/sh; dpkg-query and python3 are read when present")
        .into());
    }
    Ok((id, labels, sbom::parse_inventory(&out.stdout)?))
}
