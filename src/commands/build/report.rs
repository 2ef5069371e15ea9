//! The JSON build report (`--json`, `--report FILE`), schema version
//! [`REPORT_SCHEMA_VERSION`].
use std::collections::BTreeMap;

use serde::Serialize;

use crate::docker::image::BaseImage;

/// Version of the JSON build report (and of the `--dry-run --json` plan).
pub const REPORT_SCHEMA_VERSION: u32 = 1;

/// The JSON build report (schema_version 1).
#[derive(Debug, Serialize)]
pub struct BuildReport {
    /// Always [`REPORT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The built image id (`sha256:…`).
    pub image_id: String,
    /// The tags applied.
    pub tags: Vec<String>,
    /// Uncompressed image size in bytes, as the engine reports it.
    pub size_bytes: u64,
    /// The builder that ran (`buildkit` or `classic`).
    pub builder: crate::docker::build::Builder,
    /// Wall time of the build (without the push) in seconds.
    pub duration_s: f64,
    /// The spec the image was rendered from.
    pub spec: SpecRef,
    /// The base image(s) and their resolved digests.
    pub base_images: Vec<BaseImage>,
    /// The digest of the first base image (`name@sha256:…`, or its local id).
    pub base_digest: Option<String>,
    /// Every label of the built image: the pins (torch, CUDA, cuDNN, NCCL,
    /// python, imgctl version, spec hash) and the OCI labels.
    pub pins: BTreeMap<String, String>,
    /// Step counts.
    pub steps: StepCounts,
    /// The renderer's notes.
    pub notes: Vec<String>,
    /// Tags pushed (`--push`).
    pub pushed: Vec<String>,
    /// `--verify`'s verdict in short (`passed`, `level`, `expect_gpus`,
    /// `gpu_api`, `summary`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify: Option<serde_json::Value>,
    /// The SBOM and statements made (`--attest`, `--push`): file, path,
    /// sha256, artifact type and the artifacts that carry them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attestations: Vec<super::attest::Attestation>,
}

/// Which spec.
#[derive(Debug, Serialize)]
pub struct SpecRef {
    /// Spec name.
    pub name: String,
    /// SHA-256 of the spec file.
    pub sha256: String,
}

/// Step counts of a build.
#[derive(Debug, Serialize)]
pub struct StepCounts {
    /// Steps the builder ran in total.
    pub total: usize,
    /// Steps satisfied from the layer cache.
    pub cached: usize,
    /// Steps that ran (neither cached nor `FROM`).
    pub executed: usize,
    /// Each step.
    pub detail: Vec<crate::docker::build::StepRecord>,
}
