//! The evidence of a build: `--verify` (imgctl verify inside the new image
//! before it is tagged or pushed), `--attest DIR` (the SBOM, the SLSA
//! provenance and the verdict as files) and what `--push` attaches to the
//! pushed manifest. The documents themselves are [`crate::image::attest`]'s and
//! [`crate::image::sbom`]'s; this file gathers their inputs and writes them.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};

use crate::cli::BuildArgs;
use crate::commands::error::CliError;
use crate::image::attest::{self, BuildFacts, BuildInputs, Material};
use crate::output::printer;
use crate::verify::{ExpectGpus, Options, Report};

/// What the build is asked to prove and keep.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// `--attest DIR`.
    pub dir: Option<PathBuf>,
    /// `--verify`: the options of the verify inside the image.
    pub verify: Option<Options>,
    /// `--push`: the attestations are attached to each pushed manifest.
    pub push: bool,
    /// `--registry-timeout`: the one deadline of attaching them.
    pub registry_timeout: std::time::Duration,
    /// `--registry-ca`: a CA file trusted for attaching them.
    pub registry_ca: Option<PathBuf>,
    /// `--sign-key`: signs every statement (read before anything is built).
    pub signer: Option<std::sync::Arc<crate::image::sign::PrivateKey>>,
}

impl Evidence {
    /// From the flags; a bad `--expect-gpus` or an `--attest` path that is
    /// a file is a usage error before anything is built.
    pub fn from_args(args: &BuildArgs) -> anyhow::Result<Self> {
        if let Some(dir) = &args.attest {
            if dir.exists() && !dir.is_dir() {
                return Err(CliError::usage(format!(
                    "--attest {} is a file, not a folder",
                    dir.display()
                ))
                .with_hint("--attest takes a folder (made when missing) that receives sbom.cdx.json, provenance.intoto.json and verify.intoto.json")
                .into());
            }
        }
        if let Some(ca) = &args.registry_ca.registry_ca {
            crate::image::oci::tls::read_ca_file(ca).map_err(|e| {
                CliError::usage(format!("--registry-ca {}: {e:#}", ca.display()))
                    .with_hint("--registry-ca takes the PEM file of the CA that issued the registry's certificate (the docker CLI reads it from /etc/docker/certs.d/HOST:PORT/ca.crt)")
            })?;
        }
        let signer = match &args.sign_key {
            None => None,
            Some(_) if args.attest.is_none() && !args.push => {
                return Err(CliError::usage(
                    "--sign-key (or IMGCTL_SIGN_KEY) signs what --attest or --push writes, and neither was given",
                )
                .with_hint("add --push (signed statements attached to the pushed image) or --attest DIR (signed bundles written there)")
                .into())
            }
            Some(path) => {
                if let Some(mode) = crate::image::sign::keys::readable_by_others(path) {
                    printer().warn(format!(
                        "the signing key {} can be read by others (mode {mode:04o}): anyone who can read it can sign as you; `chmod 600 {}`, or make a new pair with `imgctl key generate`",
                        path.display(),
                        path.display()
                    ));
                }
                let pass = crate::commands::key::passphrase()?;
                Some(std::sync::Arc::new(crate::image::sign::PrivateKey::read(
                    path,
                    pass.as_deref().map(Vec::as_slice),
                )?))
            }
        };
        let verify = if args.verify {
            let expect = ExpectGpus::parse(&args.expect_gpus)?;
            Some(Options {
                level: args.verify_level,
                expect,
                only: Vec::new(),
                skip: Vec::new(),
                timeout: std::time::Duration::from_secs_f64(crate::verify::DEFAULT_CHECK_TIMEOUT_S),
                words: crate::commands::verify::WORDS,
            })
        } else {
            None
        };
        Ok(Evidence {
            registry_timeout: std::time::Duration::from_secs(
                args.registry_timeout.registry_timeout,
            ),
            registry_ca: args.registry_ca.registry_ca.clone(),
            dir: args.attest.clone(),
            verify,
            push: args.push,
            signer,
        })
    }

    /// Whether an SBOM and provenance are made at all.
    pub fn attests(&self) -> bool {
        self.dir.is_some() || self.push
    }
}

/// A URL without its user and password (`https://u:p@host/x` → `https://host/x`).
fn without_userinfo(value: &str) -> String {
    let Some((scheme, rest)) = value.split_once("://") else {
        return value.to_string();
    };
    let host_end = rest.find('/').unwrap_or(rest.len());
    match rest[..host_end].rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://{host}{}", &rest[host_end..]),
        None => value.to_string(),
    }
}

/// The flags as given and the spec's inputs with their digests. Secrets
/// stay out: a `--ca-cert-secret` is named, never read here, and URLs lose
/// their user and password.
pub fn build_inputs(
    args: &BuildArgs,
    (build_args, labels): (&BTreeMap<String, String>, &BTreeMap<String, String>),
    loaded: &crate::image::specs::LoadedSpec,
    lock: &crate::image::lock::LockState,
) -> BuildInputs {
    let image = &args.image;
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let clean = |m: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        m.iter()
            .map(|(k, v)| (k.clone(), without_userinfo(v)))
            .collect()
    };
    let external = json!({
        "spec": {"name": loaded.name, "origin": loaded.origin, "cuda": image.cuda, "file": path(&image.spec)},
        "baseImage": image.base_image,
        "caCert": path(&image.ca_cert),
        "caCertSecret": path(&image.ca_cert_secret).map(|p| format!("{p} (a build secret: its bytes are not recorded)")),
        "builder": image.builder,
        "pipIndexUrl": image.pip_index_url.as_deref().map(without_userinfo),
        "uid": image.uid,
        "gid": image.gid,
        "sudo": image.sudo,
        "tags": args.tags,
        "buildArgs": clean(build_args),
        "labels": clean(labels),
        "noCache": args.no_cache,
        "pull": args.pull,
        "push": args.push,
        "verify": args.verify.then(|| json!({"level": args.verify_level, "expectGpus": args.expect_gpus})),
    });
    let mut external = external;
    if let Value::Object(map) = &mut external {
        // Flags not given are left out, not written as null.
        map.retain(|_, v| !v.is_null());
        if let Some(Value::Object(spec)) = map.get_mut("spec") {
            spec.retain(|_, v| !v.is_null());
        }
    }
    let mut materials = vec![Material {
        name: "spec".into(),
        uri: match &loaded.file {
            Some(f) => f.display().to_string(),
            None => format!("imgctl:{}", loaded.origin),
        },
        sha256: loaded.sha256.clone(),
    }];
    if let Some((uri, bytes)) = crate::image::render::template_source(loaded) {
        materials.push(Material::of("template", uri, &bytes));
    }
    if let crate::image::lock::LockState::Fresh { path, text, .. } = lock {
        materials.push(Material::of("lock", path.clone(), text.as_bytes()));
    }
    if let Some(ca) = &image.ca_cert {
        if let Ok(bytes) = std::fs::read(ca) {
            // Installed in the image: public, so its digest is recorded.
            materials.push(Material::of("ca-cert", ca.display().to_string(), &bytes));
        }
    }
    BuildInputs {
        external,
        materials,
        gpu_fit: crate::image::fit::of_spec(loaded)
            .ok()
            .and_then(|f| serde_json::to_value(f).ok()),
    }
}

/// The context's files as materials (`context:Dockerfile`, `context:imgctl`…).
pub fn context_materials(context: &crate::docker::context::BuildContext) -> Vec<Material> {
    context
        .entries()
        .iter()
        .map(|e| Material::of(format!("context:{}", e.path), e.path.clone(), &e.contents))
        .collect()
}

/// Runs the image's own `imgctl verify` in a removed-on-every-path
/// container of `image_id`, with the host's GPUs when it has any, and
/// prints its table. The caller decides what a failure means.
pub async fn verify_image(image_id: &str, opts: &Options) -> anyhow::Result<Report> {
    let p = printer();
    let run = crate::verify::host::ImageRun {
        image: image_id.to_string(),
        gpus: crate::gpus::GpuSelection::All,
        cmd: crate::commands::verify::container_argv(opts),
        opts: opts.clone(),
        mounts: Vec::new(),
        labels: Default::default(),
    };
    let nvml = crate::verify::load_real_nvml(opts.timeout);
    let spinner = p.spinner("imgctl verify inside the new image");
    let report = crate::verify::host::verify_image_with(run, nvml, &|p| {
        crate::commands::verify::say_image_note(&p);
    })
    .await;
    spinner.finish_and_clear();
    let report = report?;
    if !p.quiet {
        let fit = crate::output::table_fit(crate::output::Stream::Stderr, p.verbose > 0);
        p.stderr_text(crate::verify::report::table(
            &report,
            p.color,
            fit,
            &crate::commands::verify::WORDS,
        ));
    }
    Ok(report)
}

/// With `--attest DIR`, a failed `--verify` still leaves its verdict
/// (`verify.intoto.json`, about the untagged image) as evidence of why.
pub fn keep_failed_verdict(
    dir: &Path,
    image_id: &str,
    engine: &crate::docker::engine::EngineInfo,
    report: &Report,
) -> anyhow::Result<()> {
    let now = now_rfc3339();
    let facts = BuildFacts {
        image_id,
        tags: &[],
        pushed: &[],
        builder: "",
        engine_version: &engine.version,
        api_version: &engine.api_version,
        engine_os: &engine.os,
        bases: &[],
        created: None,
        byproducts: &[],
        verified_on: Some(&now),
    };
    write_all(dir, &mut [verdict(&facts, report)])
}

/// Now, RFC 3339 in UTC to the second (a verdict's `verifiedOn`).
fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The error of a failed `--verify`: the image stays, untagged and unpushed.
pub fn verify_failed(image_id: &str, report: &Report) -> anyhow::Error {
    let failed: Vec<String> = report
        .results
        .iter()
        .filter(|r| {
            matches!(
                r.status,
                crate::verify::Status::Fail | crate::verify::Status::Error
            )
        })
        .map(|r| format!("{}: {}", r.id, r.message))
        .collect();
    let short = crate::output::head(image_id, 19);
    CliError::failure(format!(
        "verify failed inside the new image {short}, so it was not tagged or pushed: {}",
        failed.join("; ")
    ))
    .with_hint(format!(
        "look inside with `docker run --rm -it --entrypoint sh {short}`; `docker image prune` removes it"
    ))
    .into()
}

/// One attestation as written and attached.
#[derive(Debug, Clone, Serialize)]
pub struct Attestation {
    /// Its file name in `--attest DIR` (`sbom.cdx.json`…).
    pub file: String,
    /// Where it was written (`--attest`), if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// sha256 of its bytes (`sha256:…`).
    pub sha256: String,
    /// The OCI artifact type it is pushed as.
    pub artifact_type: String,
    /// The predicate type of a statement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicate_type: Option<String>,
    /// The artifact manifests that carry it (`repo@sha256:…`), one per pushed repository.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attached: Vec<String>,
    /// The bytes.
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

impl Attestation {
    fn new(file: &str, artifact_type: &str, predicate: Option<&str>, bytes: Vec<u8>) -> Self {
        Attestation {
            file: file.to_string(),
            path: None,
            sha256: format!("sha256:{}", attest::sha256_hex(&bytes)),
            artifact_type: artifact_type.to_string(),
            predicate_type: predicate.map(str::to_string),
            attached: Vec::new(),
            bytes,
        }
    }
}

/// The SBOM of the built image, read from a container of it.
pub async fn sbom(image_id: &str, tag: &str) -> anyhow::Result<Attestation> {
    let spinner = printer().spinner(format!("listing the packages of {tag} for its SBOM"));
    let read = crate::commands::sbom::read_image(image_id).await;
    spinner.finish_and_clear();
    let (id, labels, inventory) = read?;
    let (doc, summary) = crate::commands::sbom::document(&id, tag, &labels, &inventory);
    printer().info(summary);
    Ok(Attestation::new(
        attest::files::SBOM,
        attest::CYCLONEDX_MEDIA_TYPE,
        None,
        crate::image::attest::to_bytes(&doc),
    ))
}

/// The two statements of the build (the verdict only with `--verify`).
pub fn statements(
    inputs: &BuildInputs,
    facts: &BuildFacts,
    verified: Option<&Report>,
) -> Vec<Attestation> {
    let mut out = vec![Attestation::new(
        attest::files::PROVENANCE,
        attest::IN_TOTO_MEDIA_TYPE,
        Some(attest::SLSA_PROVENANCE_V1),
        attest::to_bytes(&attest::provenance(inputs, facts)),
    )];
    out.extend(verified.map(|report| verdict(facts, report)));
    out
}

/// `verify.intoto.json`: the verdict of `--verify` about `facts`' image.
fn verdict(facts: &BuildFacts, report: &Report) -> Attestation {
    Attestation::new(
        attest::files::VERIFY,
        attest::IN_TOTO_MEDIA_TYPE,
        Some(attest::VERIFY_PREDICATE),
        attest::to_bytes(&attest::verify_statement(facts, report)),
    )
}

/// The files' names, for people: `sbom.cdx.json, provenance.intoto.json`.
fn names(all: &[Attestation]) -> String {
    all.iter()
        .map(|a| a.file.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes each attestation into `dir` (made when missing), atomically.
pub fn write_all(dir: &Path, all: &mut [Attestation]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| {
        CliError::failure(format!(
            "cannot make the --attest folder {}: {e}",
            dir.display()
        ))
        .with_hint("pass a folder you can write")
    })?;
    for a in all.iter_mut() {
        let path = dir.join(&a.file);
        crate::sys::fs::write_file_atomic(&path, &a.bytes).map_err(|e| {
            CliError::failure(format!("cannot write {}: {e}", path.display()))
                .with_hint("pass a folder you can write")
        })?;
        a.path = Some(path.display().to_string());
    }
    printer().info(format!("attestations: {} in {}", names(all), dir.display()));
    Ok(())
}

/// What the attestations of a finished build are made of.
pub struct Made<'a> {
    /// The image id.
    pub image_id: &'a str,
    /// The plan it was built from (tags, inputs, context).
    pub tags: &'a [String],
    /// The flags and inputs of the plan.
    pub inputs: &'a BuildInputs,
    /// The build context (its files become materials).
    pub context: &'a crate::docker::context::BuildContext,
    /// Its base images, resolved.
    pub bases: &'a [crate::docker::image::BaseImage],
    /// The engine.
    pub engine: &'a crate::docker::engine::EngineInfo,
    /// The builder that ran.
    pub builder: crate::docker::build::Builder,
    /// The image's `created` label.
    pub created: Option<&'a String>,
    /// Pushed manifests: (repository, digest).
    pub pushed: &'a [(String, String)],
    /// `--verify`'s report.
    pub verified: Option<&'a Report>,
    /// The one deadline of every registry request of the attaching.
    pub registry_timeout: std::time::Duration,
    /// `--registry-ca`, if given.
    pub registry_ca: Option<&'a Path>,
    /// `--sign-key`'s key.
    pub signer: Option<&'a crate::image::sign::PrivateKey>,
}

impl Made<'_> {
    /// Makes the statements beside `sbom` (read from the image), attaches
    /// them all to the pushed manifests and writes them into `dir` when given.
    pub async fn attest(
        &self,
        sbom: Attestation,
        dir: Option<&Path>,
    ) -> anyhow::Result<Vec<Attestation>> {
        let mut inputs = self.inputs.clone();
        inputs.materials.extend(context_materials(self.context));
        let byproducts = vec![Material {
            name: "sbom".into(),
            uri: attest::files::SBOM.into(),
            sha256: attest::hex_of(&sbom.sha256).to_string(),
        }];
        let bases: Vec<(String, Option<String>)> = self
            .bases
            .iter()
            .map(|b| (b.reference.clone(), b.digest.clone()))
            .collect();
        let now = self.verified.is_some().then(now_rfc3339);
        let facts = BuildFacts {
            image_id: self.image_id,
            tags: self.tags,
            pushed: self.pushed,
            builder: if self.builder == crate::docker::build::Builder::BuildKit {
                "buildkit"
            } else {
                "classic"
            },
            engine_version: &self.engine.version,
            api_version: &self.engine.api_version,
            engine_os: &self.engine.os,
            bases: &bases,
            created: self.created.map(String::as_str),
            byproducts: &byproducts,
            verified_on: now.as_deref(),
        };
        let mut all = vec![sbom];
        all.extend(statements(&inputs, &facts, self.verified));
        if let Some(signer) = self.signer {
            let signed = sign_all(&facts, &all, signer)?;
            all.extend(signed);
        }
        attach(
            self.pushed,
            self.tags,
            &mut all,
            facts.created,
            self.registry_timeout,
            self.registry_ca,
        )
        .await?;
        if let Some(dir) = dir {
            write_all(dir, &mut all)?;
        }
        Ok(all)
    }
}

/// Attaches every attestation to each pushed manifest as an OCI 1.1
/// artifact whose `subject` is that manifest (the referrers API where the
/// registry has it, else the referrers tag `sha256-…`), with the docker
/// config's credentials for the registry.
pub async fn attach(
    pushed: &[(String, String)],
    tags: &[String],
    all: &mut [Attestation],
    created: Option<&str>,
    deadline: std::time::Duration,
    registry_ca: Option<&Path>,
) -> anyhow::Result<()> {
    for (repo, digest) in pushed {
        let reference = format!("{repo}@{digest}");
        let spinner = printer().spinner(format!("attaching the attestations to {reference}"));
        let mut repository = crate::image::oci::Repository::new(
            &reference,
            crate::image::oci::docker_credentials(&reference)?,
        )?;
        if let Some(ca) = registry_ca {
            repository = repository.with_registry_ca(ca, Some("--registry-ca"))?;
        }
        let repository = repository.with_deadline(deadline, Some("--registry-timeout"));
        let subject = repository.resolve(digest).await?;
        for a in all.iter_mut() {
            let annotations = match (a.artifact_type.as_str(), &a.predicate_type) {
                (crate::image::sign::bundle::BUNDLE_MEDIA_TYPE, Some(p)) => {
                    crate::image::sign::bundle::annotations(p, created)
                }
                _ => attest::artifact_annotations(a.predicate_type.as_deref(), created),
            };
            let pushed = repository
                .push_artifact(
                    &subject,
                    &a.artifact_type,
                    &a.artifact_type,
                    &a.bytes,
                    annotations,
                )
                .await?;
            a.attached.push(format!("{repo}@{}", pushed.digest));
        }
        spinner.finish_and_clear();
        let tag = tags
            .iter()
            .find(|t| crate::docker::image::split_tag(t).0 == repo)
            .unwrap_or(&reference);
        printer().info(format!(
            "attached {} to {repo}@{}; `imgctl inspect {tag}` lists them",
            names(all),
            crate::output::head(digest, 19)
        ));
    }
    Ok(())
}

/// Each statement signed: a DSSE envelope in a Sigstore bundle
/// (`*.sigstore.json`), the SBOM first wrapped in an in-toto statement
/// about the same subjects. What is signed is the statement's bytes as
/// written, so the envelope's payload is the unsigned file's content.
fn sign_all(
    facts: &BuildFacts,
    all: &[Attestation],
    signer: &crate::image::sign::PrivateKey,
) -> anyhow::Result<Vec<Attestation>> {
    let mut out = Vec::new();
    for a in all {
        let (statement, predicate) = match &a.predicate_type {
            Some(p) => (a.bytes.clone(), p.clone()),
            None => {
                let sbom: Value = serde_json::from_slice(&a.bytes)?;
                (
                    attest::to_bytes(&attest::sbom_statement(facts, &sbom)),
                    attest::CYCLONEDX_PREDICATE.to_string(),
                )
            }
        };
        let envelope = crate::image::sign::dsse::Envelope::sign(
            attest::IN_TOTO_MEDIA_TYPE,
            &statement,
            signer,
        )?;
        let stem = a.file.split('.').next().unwrap_or("statement");
        out.push(Attestation::new(
            &format!("{stem}.sigstore.json"),
            crate::image::sign::bundle::BUNDLE_MEDIA_TYPE,
            Some(&predicate),
            crate::image::sign::bundle::to_bundle(&envelope, signer),
        ));
    }
    printer().info(format!(
        "signed {} statements with key {} ({})",
        out.len(),
        &crate::image::sign::Signer::key_id(signer)[..16],
        signer.public().kind().name()
    ));
    Ok(out)
}

/// The verdict in short, for the build report (with how the container's
/// GPUs were asked for: `cdi`, `runtime` or `none`).
pub fn verify_summary(report: &Report) -> Value {
    json!({"passed": report.passed, "level": report.level, "expect_gpus": report.expect_gpus, "gpu_api": report.gpu_api, "summary": report.summary})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verify_summary_says_how_the_gpus_were_asked_for() {
        let mut report = Report::new(
            "container",
            Some("img".into()),
            crate::verify::Level::Quick,
            ExpectGpus::Any,
            vec![],
        );
        report.gpu_api = Some("cdi".into());
        assert_eq!(verify_summary(&report)["gpu_api"], "cdi");
    }

    #[test]
    fn urls_lose_their_user_and_password() {
        assert_eq!(
            without_userinfo("https://me:tok3n@pypi.example/simple"),
            "https://pypi.example/simple"
        );
        assert_eq!(
            without_userinfo("https://pypi.org/simple"),
            "https://pypi.org/simple"
        );
        assert_eq!(without_userinfo("plain=value"), "plain=value");
        assert_eq!(
            without_userinfo("http://a@b/c@d"),
            "http://b/c@d",
            "an @ in the path is no user"
        );
    }
}
