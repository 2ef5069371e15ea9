//! `imgctl inspect REF`: what is attached to a pushed image in its registry
//! (the SBOM and the in-toto statements `build --push` attaches as OCI
//! referrers), read with the docker config's credentials. A table on
//! stdout, `--json` for machines, `--save DIR` to fetch each one (its
//! digest checked) under the names `build --attest` gives them.
use std::path::Path;

use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::Table;
use serde::Serialize;

use crate::cli::InspectArgs;
use crate::commands::error::CliError;
use crate::error::ExitStatus;
use crate::image::attest;
use crate::image::oci::{Descriptor, Repository};
use crate::output::{self, printer};

/// The hint of a registry's failure.
const READS_THE_REGISTRY: &str = "inspect reads the registry: pass the pushed reference (REGISTRY/NAME:TAG or NAME@sha256:…); `docker login REGISTRY` stores its credentials; an HTTPS registry's own CA goes in /etc/docker/certs.d/HOST:PORT/ca.crt or --registry-ca FILE";

/// Version of `inspect --json`.
const SCHEMA_VERSION: u32 = 1;

/// `inspect --json`.
#[derive(Debug, Serialize)]
struct Inspected {
    schema_version: u32,
    /// The reference as given.
    reference: String,
    /// The image manifest the referrers refer to.
    subject: Descriptor,
    /// The artifacts that refer to it: the first [`crate::image::oci::MAX_REFERRERS`] unless
    /// `--all`.
    referrers: Vec<Descriptor>,
    /// Whether the registry lists more than `referrers` (past the cap).
    truncated: bool,
    /// With `--save`: the files written, one per distinct artifact.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    saved: Vec<String>,
}

/// What an attached artifact is, in words, and the file name `--save` gives it.
fn kind(d: &Descriptor) -> (String, String) {
    let predicate = d
        .annotations
        .get(attest::PREDICATE_ANNOTATION)
        .map(String::as_str);
    let short = short_hex(&d.digest);
    if d.artifact_type.as_deref() == Some(crate::image::sign::bundle::BUNDLE_MEDIA_TYPE) {
        let signed = d
            .annotations
            .get(crate::image::sign::bundle::PREDICATE_TYPE_ANNOTATION)
            .map(String::as_str);
        let (what, stem) = match signed {
            Some(attest::SLSA_PROVENANCE_V1) => ("provenance (SLSA v1)", "provenance"),
            Some(attest::VERIFY_PREDICATE) => ("imgctl verify verdict", "verify"),
            Some(attest::CYCLONEDX_PREDICATE) => ("SBOM (CycloneDX)", "sbom"),
            _ => ("statement", short),
        };
        return (format!("signed {what}"), format!("{stem}.sigstore.json"));
    }
    match (d.artifact_type.as_deref(), predicate) {
        (Some(attest::CYCLONEDX_MEDIA_TYPE), _) => {
            ("SBOM (CycloneDX)".into(), attest::files::SBOM.into())
        }
        (Some(attest::IN_TOTO_MEDIA_TYPE), Some(attest::SLSA_PROVENANCE_V1)) => (
            "provenance (SLSA v1)".into(),
            attest::files::PROVENANCE.into(),
        ),
        (Some(attest::IN_TOTO_MEDIA_TYPE), Some(attest::VERIFY_PREDICATE)) => {
            ("imgctl verify verdict".into(), attest::files::VERIFY.into())
        }
        (Some(other), Some(p)) => (format!("{other} ({p})"), format!("{short}.json")),
        (Some(other), None) => (other.to_string(), format!("{short}.json")),
        (None, _) => ("(no artifact type)".into(), format!("{short}.json")),
    }
}

/// The first 12 hex digits of a digest (checked: `sha256:<hex>`, see
/// [`crate::image::oci::manifest::check_descriptor`]), cut on a character boundary
/// all the same.
fn short_hex(digest: &str) -> &str {
    let hex = attest::hex_of(digest);
    let end = hex.char_indices().nth(12).map_or(hex.len(), |(i, _)| i);
    &hex[..end]
}

/// The file names `--save` gives `referrers`, one per distinct digest (the
/// same one listed twice is saved once), in their order: the name
/// [`kind`] gives (`sbom.cdx.json`), unless two artifacts would share it;
/// then each of those has its digest's first 12 hex digits before the
/// extension (`sbom.1a2b3c4d5e6f.cdx.json`), or all 64 when even they are
/// the same.
fn save_names(referrers: &[Descriptor]) -> Vec<(&Descriptor, String)> {
    let mut distinct: Vec<&Descriptor> = Vec::new();
    for d in referrers {
        if !distinct.iter().any(|e| e.digest == d.digest) {
            distinct.push(d);
        }
    }
    let with_hex = |name: &str, hex: &str| match name.split_once('.') {
        Some((stem, ext)) => format!("{stem}.{hex}.{ext}"),
        None => format!("{name}.{hex}"),
    };
    let bases: Vec<String> = distinct.iter().map(|d| kind(d).1).collect();
    let shared = |names: &[String], i: usize| names.iter().filter(|n| **n == names[i]).count() > 1;
    let short: Vec<String> = (0..distinct.len())
        .map(|i| match shared(&bases, i) {
            true => with_hex(&bases[i], short_hex(&distinct[i].digest)),
            false => bases[i].clone(),
        })
        .collect();
    distinct
        .iter()
        .enumerate()
        .map(|(i, d)| match shared(&short, i) {
            true => (*d, with_hex(&bases[i], attest::hex_of(&d.digest))),
            false => (*d, short[i].clone()),
        })
        .collect()
}

/// `imgctl inspect`.
pub fn run(args: InspectArgs) -> anyhow::Result<ExitStatus> {
    crate::image_ref::check(crate::image_ref::Role::Pushed, &args.image)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let spinner = if args.json {
        indicatif::ProgressBar::hidden()
    } else {
        printer().spinner(format!("reading the referrers of {}", args.image))
    };
    let repository = {
        let _in_runtime = runtime.enter();
        repository(&args)
    }?;
    let read = runtime.block_on(async {
        let mut repository = repository.with_deadline(
            std::time::Duration::from_secs(args.registry_timeout.registry_timeout),
            Some("--registry-timeout"),
        );
        if args.all {
            repository = repository.with_all_referrers();
        }
        read(&repository, &args.image, args.save.as_deref()).await
    });
    spinner.finish_and_clear();
    let inspected = read.map_err(|e| {
        CliError::failure(format!("inspect {}: {e:#}", args.image)).with_hint(READS_THE_REGISTRY)
    })?;
    if args.json {
        printer().json(&inspected)?;
    } else {
        printer().data(render(&inspected));
    }
    if let Some(dir) = &args.save {
        printer().info(saved_line(&inspected.saved, dir));
    }
    Ok(ExitStatus::Success)
}

/// The client of `args.image`'s repository, with the docker config's
/// credentials and the CAs of the certs.d folder and `--registry-ca`; a
/// `--registry-ca` that cannot be read or holds no certificate is a usage
/// error.
fn repository(args: &InspectArgs) -> anyhow::Result<Repository> {
    let repository = crate::image::oci::docker_credentials(&args.image)
        .and_then(|credentials| Repository::new(&args.image, credentials))
        .map_err(|e| {
            CliError::failure(format!("inspect {}: {e:#}", args.image))
                .with_hint(READS_THE_REGISTRY)
        })?;
    match &args.registry_ca.registry_ca {
        None => Ok(repository),
        Some(ca) => repository
            .with_registry_ca(ca, Some("--registry-ca"))
            .map_err(|e| {
                CliError::usage(format!("{e:#}"))
                    .with_hint("--registry-ca takes the PEM file of the CA that issued the registry's certificate (the docker CLI reads it from /etc/docker/certs.d/HOST:PORT/ca.crt)")
                    .into()
            }),
    }
}

/// `saved 2 files in DIR: a, b`: the files `--save` actually wrote.
fn saved_line(saved: &[String], dir: &Path) -> String {
    let dir = output::outside(&dir.display().to_string()).into_owned();
    match saved.len() {
        0 => format!("saved no file in {dir}: nothing is attached"),
        1 => format!("saved 1 file in {dir}: {}", saved[0]),
        n => format!("saved {n} files in {dir}: {}", saved.join(", ")),
    }
}

/// The lines `inspect` prints without `--json`: the reference, how many
/// artifacts are attached, the subject's digest, and a table of them that
/// fits the terminal.
fn render(inspected: &Inspected) -> String {
    let n = inspected.referrers.len();
    let head = format!(
        "{}: {}\n  {}",
        output::outside(&inspected.reference),
        match n {
            _ if inspected.truncated => format!(
                "the first {n} artifacts attached (the registry lists more; --all lists every one)"
            ),
            0 => "nothing attached (`imgctl build --push` attaches the SBOM and the provenance)"
                .to_string(),
            1 => "1 artifact attached".to_string(),
            n => format!("{n} artifacts attached"),
        },
        inspected.subject.digest
    );
    if n == 0 {
        return head;
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header(["ATTACHED", "ARTIFACT TYPE", "MANIFEST", "CREATED"]);
    // Every cell but the checked digest is the registry's text.
    for d in &inspected.referrers {
        table.add_row([
            output::outside(&kind(d).0).into_owned(),
            output::outside(d.artifact_type.as_deref().unwrap_or("-")).into_owned(),
            format!("sha256:{}", short_hex(&d.digest)),
            output::outside(
                d.annotations
                    .get("org.opencontainers.image.created")
                    .map_or("-", String::as_str),
            )
            .into_owned(),
        ]);
    }
    let fit = output::table_fit(output::Stream::Stdout, printer().verbose > 0);
    if let output::Fit::Cut(width) = fit {
        crate::commands::narrow::drop_and_say(&mut table, width, &[3, 1]);
    }
    output::fit_table(&mut table, fit);
    format!("{head}\n{table}")
}

/// The subject and its referrers in `repository` (of `reference`); with
/// `save`, each artifact fetched into it.
async fn read(
    repository: &Repository,
    reference: &str,
    save: Option<&Path>,
) -> anyhow::Result<Inspected> {
    let target = repository.tag_or_digest().unwrap_or("latest").to_string();
    let subject = repository.resolve(&target).await?;
    let listed = repository.referrers(&subject.digest, None).await?;
    let referrers = listed.list;
    let mut saved = Vec::new();
    if let Some(dir) = save {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", dir.display()))?;
        for (d, name) in save_names(&referrers) {
            let (_, bytes) = repository.fetch_artifact(&d.digest).await?;
            let path = dir.join(&name);
            crate::sys::fs::write_file_atomic(&path, &bytes)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            saved.push(name);
        }
    }
    Ok(Inspected {
        schema_version: SCHEMA_VERSION,
        reference: reference.to_string(),
        subject,
        referrers,
        truncated: listed.more,
        saved,
    })
}

#[cfg(test)]
#[path = "inspect_tests.rs"]
mod tests;
