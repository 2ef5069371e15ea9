//! Attestations of a built image: the in-toto statements `imgctl build
//! --attest DIR` writes beside the SBOM ([`crate::image::sbom`]) and `--push`
//! attaches to the pushed manifest.
//!
//! - [`provenance`]: an in-toto Statement v1 with a SLSA provenance v1
//!   predicate. Its subject is the image id (and each pushed digest); its
//!   build definition names imgctl's build type, the flags as given
//!   ([`BuildInputs::external`]), the engine and builder that ran, and every
//!   input with its sha256 ([`Material`]): the spec, the template, the pip
//!   lock, the rendered Dockerfile, every context file, imgctl itself and the
//!   base image's digest. It holds no time but the image's `created` label
//!   (the same rule as the image's), so the same inputs give the same bytes.
//! - [`verify_statement`]: the verdict of `build --verify` (the checks, the
//!   GPUs, the driver, passed or not) bound to the same image id.
//!
//! Secrets never enter either: a build-only CA (`--ca-cert-secret`) is named
//! by its path, its bytes are not read here.
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

/// in-toto's Statement v1 type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// SLSA provenance v1's predicate type.
pub const SLSA_PROVENANCE_V1: &str = "https://slsa.dev/provenance/v1";
/// The build type of `imgctl build` (a URN: imgctl owns no domain). README,
/// "Attestations", says what its parameters mean.
pub const BUILD_TYPE: &str = "urn:imgctl:build-type:docker-engine:v1";
/// The predicate type of `build --verify`'s verdict.
pub const VERIFY_PREDICATE: &str = "urn:imgctl:predicate:verify:v1";
/// The predicate type of an SBOM wrapped in an in-toto statement to be
/// signed (CycloneDX's, as in-toto's attestation predicates list it).
pub const CYCLONEDX_PREDICATE: &str = "https://cyclonedx.org/bom";
/// Media type of an in-toto statement (the artifact type of both statements).
pub const IN_TOTO_MEDIA_TYPE: &str = "application/vnd.in-toto+json";
/// Media type (and artifact type) of a CycloneDX JSON SBOM.
pub const CYCLONEDX_MEDIA_TYPE: &str = "application/vnd.cyclonedx+json";
/// The annotation naming an in-toto statement's predicate type on a pushed
/// artifact (how `imgctl inspect` tells the two statements apart).
pub const PREDICATE_ANNOTATION: &str = "in-toto.io/predicate-type";

/// The file names in `--attest DIR`.
pub mod files {
    /// The CycloneDX 1.5 SBOM.
    pub const SBOM: &str = "sbom.cdx.json";
    /// The SLSA provenance statement.
    pub const PROVENANCE: &str = "provenance.intoto.json";
    /// The verify statement (`--verify`).
    pub const VERIFY: &str = "verify.intoto.json";
}

/// One input of the build, with its digest (a SLSA resource descriptor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Material {
    /// What it is to the build: `spec`, `template`, `lock`, `dockerfile`,
    /// `context:PATH`, `imgctl`, `base-image`.
    pub name: String,
    /// Where it came from (a path as given, `imgctl:images/…` for a
    /// bundled file, `pkg:docker/…` for an image).
    pub uri: String,
    /// Its sha256, hex.
    pub sha256: String,
}

impl Material {
    /// A material from bytes.
    pub fn of(name: impl Into<String>, uri: impl Into<String>, bytes: &[u8]) -> Self {
        Material {
            name: name.into(),
            uri: uri.into(),
            sha256: sha256_hex(bytes),
        }
    }

    fn to_json(&self) -> Value {
        json!({"name": self.name, "uri": self.uri, "digest": {"sha256": self.sha256}})
    }
}

/// What the plan knows of a build before the engine runs it.
#[derive(Debug, Clone, Default)]
pub struct BuildInputs {
    /// The flags as given (never a secret's bytes).
    pub external: Value,
    /// The inputs with their digests.
    pub materials: Vec<Material>,
    /// What decides where the image runs (`crate::gpus::fit::ImageFacts`
    /// as JSON: its torch wheel's GPU code, CUDA, driver floor, NCCL): the
    /// provenance's `internalParameters.gpuFit`, which the fit gate
    /// (`verify-image --fleet`) reads from the signed statement.
    pub gpu_fit: Option<Value>,
}

/// What the build itself decided and made.
#[derive(Debug, Clone)]
pub struct BuildFacts<'a> {
    /// The image id (`sha256:…`).
    pub image_id: &'a str,
    /// The tags applied.
    pub tags: &'a [String],
    /// Pushed manifests: (repository, digest `sha256:…`).
    pub pushed: &'a [(String, String)],
    /// `buildkit` or `classic`.
    pub builder: &'a str,
    /// The engine's version (`20.10.24+dfsg1`).
    pub engine_version: &'a str,
    /// The engine's API version used.
    pub api_version: &'a str,
    /// The engine's OS.
    pub engine_os: &'a str,
    /// The base images: (reference, digest or local id).
    pub bases: &'a [(String, Option<String>)],
    /// The image's `created` label (RFC 3339).
    pub created: Option<&'a str>,
    /// Other files made with the image (the SBOM): name and bytes' sha256.
    pub byproducts: &'a [Material],
    /// When `--verify`'s verdict was made (RFC 3339, UTC): the verdict's
    /// `verifiedOn`, the time a deploy gate's maximum age is measured from.
    pub verified_on: Option<&'a str>,
}

/// The hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// The hex part of a `sha256:…` digest (the whole string when unprefixed).
pub fn hex_of(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

/// The statement's subjects: the image id under its first tag, then each
/// pushed manifest under its repository.
fn subjects(facts: &BuildFacts) -> Value {
    let name = facts
        .tags
        .first()
        .cloned()
        .unwrap_or_else(|| facts.image_id.to_string());
    let mut out = vec![json!({"name": name, "digest": {"sha256": hex_of(facts.image_id)}})];
    for (repo, digest) in facts.pushed {
        out.push(json!({"name": repo, "digest": {"sha256": hex_of(digest)}}));
    }
    Value::Array(out)
}

/// The builder's identity: imgctl and its version.
fn builder_id() -> String {
    format!("urn:imgctl:builder:imgctl@{}", env!("CARGO_PKG_VERSION"))
}

/// The SLSA provenance v1 statement of a build.
pub fn provenance(inputs: &BuildInputs, facts: &BuildFacts) -> Value {
    let mut deps: Vec<Value> = inputs.materials.iter().map(Material::to_json).collect();
    for (reference, digest) in facts.bases {
        let mut dep = json!({"name": "base-image", "uri": format!("pkg:docker/{reference}")});
        if let Some(d) = digest {
            // `name@sha256:…` from a registry, or a local image id.
            let hex = d.rsplit_once('@').map_or(d.as_str(), |(_, h)| h);
            dep["digest"] = json!({"sha256": hex_of(hex)});
            dep["annotations"] = json!({"resolved": d});
        }
        deps.push(dep);
    }
    let mut metadata = serde_json::Map::new();
    if let Some(created) = facts.created {
        // The one time recorded: the image's own `created` (SOURCE_DATE_EPOCH
        // or the newest input's mtime), never the wall clock.
        metadata.insert("finishedOn".into(), json!(created));
    }
    let byproducts: Vec<Value> = facts.byproducts.iter().map(Material::to_json).collect();
    let mut run_details = json!({
        "builder": {
            "id": builder_id(),
            "version": {"imgctl": env!("CARGO_PKG_VERSION"), "docker": facts.engine_version},
        },
        "metadata": metadata,
    });
    if !byproducts.is_empty() {
        run_details["byproducts"] = Value::Array(byproducts);
    }
    json!({
        "_type": STATEMENT_TYPE,
        "subject": subjects(facts),
        "predicateType": SLSA_PROVENANCE_V1,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": inputs.external,
                "internalParameters": {
                    "engine": {
                        "version": facts.engine_version,
                        "apiVersion": facts.api_version,
                        "os": facts.engine_os,
                    },
                    "builder": facts.builder,
                    "tags": facts.tags,
                    "gpuFit": inputs.gpu_fit,
                },
                "resolvedDependencies": deps,
            },
            "runDetails": run_details,
        },
    })
}

/// The verdict of `build --verify` as an in-toto statement about the same
/// image: the level and expectation, the GPUs and driver seen, every check.
pub fn verify_statement(facts: &BuildFacts, report: &crate::verify::Report) -> Value {
    let results: Vec<Value> = report
        .results
        .iter()
        .map(|r| {
            let mut v = json!({"id": r.id, "status": r.status, "message": r.message});
            if let Some(g) = r.gpu {
                v["gpu"] = json!(g);
            }
            if let Some(m) = &r.measured {
                v["measured"] = json!(m);
            }
            if let Some(e) = r.expected {
                v["expected"] = json!(e);
            }
            v
        })
        .collect();
    let message_of = |id: &str| -> Vec<String> {
        report
            .results
            .iter()
            .filter(|r| r.id == id && r.status == crate::verify::Status::Pass)
            .map(|r| r.message.clone())
            .collect()
    };
    json!({
        "_type": STATEMENT_TYPE,
        "subject": subjects(facts),
        "predicateType": VERIFY_PREDICATE,
        "predicate": {
            "verifier": {"id": builder_id(), "version": {"imgctl": report.imgctl_version}},
            "image": facts.image_id,
            "context": report.context,
            "level": report.level,
            "expectGpus": report.expect_gpus,
            "gpuApi": report.gpu_api,
            "driver": message_of("nvml.driver").into_iter().next(),
            "gpus": message_of("nvml.identity"),
            "verifiedOn": facts.verified_on,
            "passed": report.passed,
            "summary": report.summary,
            "results": results,
        },
    })
}

/// The SBOM as an in-toto statement about the same subjects (what is
/// signed: a DSSE envelope carries statements, and the subject binds the
/// SBOM to the pushed manifest).
pub fn sbom_statement(facts: &BuildFacts, sbom: &Value) -> Value {
    json!({
        "_type": STATEMENT_TYPE,
        "subject": subjects(facts),
        "predicateType": CYCLONEDX_PREDICATE,
        "predicate": sbom,
    })
}

/// A statement as the bytes written and pushed: pretty JSON, one trailing newline.
pub fn to_bytes(statement: &Value) -> Vec<u8> {
    let mut text = serde_json::to_string_pretty(statement).unwrap_or_default();
    text.push('\n');
    text.into_bytes()
}

/// The annotations of a pushed statement or SBOM.
pub fn artifact_annotations(
    predicate_type: Option<&str>,
    created: Option<&str>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(p) = predicate_type {
        out.insert(PREDICATE_ANNOTATION.to_string(), p.to_string());
    }
    if let Some(c) = created {
        out.insert(
            "org.opencontainers.image.created".to_string(),
            c.to_string(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(pushed: &'a [(String, String)], byproducts: &'a [Material]) -> BuildFacts<'a> {
        static TAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        static BASES: std::sync::OnceLock<Vec<(String, Option<String>)>> =
            std::sync::OnceLock::new();
        BuildFacts {
            image_id: "sha256:aaaa",
            tags: TAGS.get_or_init(|| vec!["imgctl/cu124:latest".into()]),
            pushed,
            builder: "buildkit",
            engine_version: "28.5.2",
            api_version: "1.51",
            engine_os: "linux",
            bases: BASES.get_or_init(|| {
                vec![(
                    "nvidia/cuda:12.4.1-base-ubuntu22.04".into(),
                    Some("nvidia/cuda@sha256:bbbb".into()),
                )]
            }),
            created: Some("2026-12-01T00:00:00Z"),
            byproducts,
            verified_on: None,
        }
    }

    fn inputs() -> BuildInputs {
        BuildInputs {
            external: json!({"spec": "cu124", "caCertSecret": "/etc/ca.pem (its bytes are not recorded)"}),
            materials: vec![Material::of("lock", "images/cu124.lock", b"torch==2.7.0\n")],
            gpu_fit: crate::image::fit::of_profile("cu124")
                .ok()
                .and_then(|f| serde_json::to_value(f).ok()),
        }
    }

    #[test]
    fn provenance_is_an_in_toto_statement_with_a_slsa_v1_predicate() {
        let pushed = vec![("127.0.0.1:5000/x".to_string(), "sha256:cccc".to_string())];
        let sbom = vec![Material::of("sbom.cdx.json", "sbom.cdx.json", b"{}")];
        let p = provenance(&inputs(), &facts(&pushed, &sbom));
        assert_eq!(p["_type"], STATEMENT_TYPE);
        assert_eq!(p["predicateType"], SLSA_PROVENANCE_V1);
        assert_eq!(p["subject"][0]["digest"]["sha256"], "aaaa");
        assert_eq!(p["subject"][0]["name"], "imgctl/cu124:latest");
        assert_eq!(p["subject"][1]["digest"]["sha256"], "cccc");
        let def = &p["predicate"]["buildDefinition"];
        // What decides where the image runs, signed with the rest.
        assert_eq!(def["internalParameters"]["gpuFit"]["variant"], "cu126");
        assert_eq!(def["internalParameters"]["gpuFit"]["sass"][6], 90);
        assert_eq!(def["buildType"], BUILD_TYPE);
        let deps = def["resolvedDependencies"].as_array().unwrap();
        assert_eq!(deps[0]["digest"]["sha256"], sha256_hex(b"torch==2.7.0\n"));
        assert_eq!(deps[1]["name"], "base-image");
        assert_eq!(deps[1]["digest"]["sha256"], "bbbb");
        assert_eq!(def["internalParameters"]["builder"], "buildkit");
        let run = &p["predicate"]["runDetails"];
        assert_eq!(run["builder"]["version"]["docker"], "28.5.2");
        assert_eq!(run["metadata"]["finishedOn"], "2026-12-01T00:00:00Z");
        assert_eq!(run["byproducts"][0]["digest"]["sha256"], sha256_hex(b"{}"));
    }

    #[test]
    fn the_same_build_gives_the_same_bytes() {
        let a = to_bytes(&provenance(&inputs(), &facts(&[], &[])));
        let b = to_bytes(&provenance(&inputs(), &facts(&[], &[])));
        assert_eq!(a, b);
        assert!(a.ends_with(b"}\n"));
        // No wall-clock time: only the created label's.
        let text = String::from_utf8(a).unwrap();
        assert_eq!(text.matches("T00:00:00Z").count(), 1, "{text}");
        assert!(!text.contains("byproducts"));
    }

    #[test]
    fn verify_statement_binds_the_verdict_to_the_image() {
        use crate::verify::{CheckResult, Level, Report, Status, Summary};
        let report = Report {
            schema_version: 1,
            imgctl_version: "0.1.0".into(),
            context: "container".into(),
            image: Some("sha256:aaaa".into()),
            level: Level::Quick,
            expect_gpus: "1".into(),
            gpu_api: Some("cdi".into()),
            results: vec![
                CheckResult::new("nvml.driver", Status::Pass, "driver 570.86.15, CUDA 12.8"),
                CheckResult::new("nvml.device_count", Status::Fail, "0 GPUs, expected 1"),
            ],
            summary: Summary {
                pass: 1,
                fail: 1,
                ..Default::default()
            },
            passed: false,
        };
        let s = verify_statement(&facts(&[], &[]), &report);
        assert_eq!(s["predicateType"], VERIFY_PREDICATE);
        assert_eq!(s["subject"][0]["digest"]["sha256"], "aaaa");
        assert_eq!(s["predicate"]["passed"], false);
        assert_eq!(s["predicate"]["driver"], "driver 570.86.15, CUDA 12.8");
        assert_eq!(s["predicate"]["results"][1]["status"], "fail");
        assert_eq!(s["predicate"]["expectGpus"], "1");
        assert_eq!(s["predicate"]["gpuApi"], "cdi");
    }

    #[test]
    fn digests_lose_their_prefix_once() {
        assert_eq!(hex_of("sha256:ab"), "ab");
        assert_eq!(hex_of("ab"), "ab");
    }
}
