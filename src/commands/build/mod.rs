//! `imgctl build`: render a spec, assemble the build context in memory and
//! build it through the Docker Engine API (never the docker CLI).
//!
//! This command turns [`BuildArgs`] into a [`BuildPlan`] (Dockerfile, context,
//! tags, labels, build args), then either prints it (`--dry-run`, no engine
//! needed) or builds it on a tokio runtime of its own, racing the build against
//! Ctrl-C. It shows progress (a bar on a terminal, plain `Step N/M` lines
//! otherwise, the full log with `-v`), and writes the JSON build report
//! (`--report FILE`, `--json`). It holds no engine logic: that is
//! [`crate::docker`].
//!
//! Part: the command layer (`docs/architecture.md`).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::BuildArgs;
use crate::commands::error::CliError;
use crate::docker::build::{
    BuildError, BuildEvent, BuildOutcome, BuildRequest, BuildSecrets, BuildTracker, Builder,
    BuilderChoice,
};
use crate::docker::context::{BuildContext, ContextListing};
use crate::docker::image;
use crate::env_vars::SOURCE_DATE_EPOCH;
use crate::error::ExitStatus;
use crate::image::render::docker_quote;
use crate::output::printer;

pub mod attest;
mod created;
pub(crate) mod progress;
mod push;
mod report;

use progress::ProgressView;
pub use report::{BuildReport, SpecRef, StepCounts, REPORT_SCHEMA_VERSION};

/// How long the engine gets to remove a cancelled build's intermediate
/// containers itself before imgctl force-removes them (our choice: the
/// engine's own container stop timeout is 10 s).
const CANCEL_GRACE: Duration = Duration::from_secs(15);

/// Everything needed to build, independent of where it came from.
#[derive(Debug, Clone)]
pub struct BuildPlan {
    /// The spec's name (`cu124`, or the file stem of `--spec`).
    pub spec_name: String,
    /// SHA-256 of the spec file.
    pub spec_sha256: String,
    /// The Dockerfile as rendered (`imgctl render`).
    pub rendered_dockerfile: String,
    /// The context: the Dockerfile to build, the files it COPYs, and imgctl.
    pub context: BuildContext,
    /// Tags to apply.
    pub tags: Vec<String>,
    /// All labels the image gets: the spec's pins, OCI labels, then `--label`.
    pub labels: BTreeMap<String, String>,
    /// The labels the rendered Dockerfile does not already set (with these
    /// values): appended as one `LABEL` instruction, a single cheap step.
    pub build_labels: BTreeMap<String, String>,
    /// `--build-arg` values.
    pub build_args: BTreeMap<String, String>,
    /// BuildKit's build secrets: the build-only proxy CA (`--ca-cert-secret`)
    /// as [`crate::image::render::CA_CERT_SECRET_ID`].
    pub secrets: BuildSecrets,
    /// Lines the renderer wants the user to read (e.g. the cu124 wheel note).
    pub notes: Vec<String>,
    /// What to say about the spec's pip lock: (is it a warning, the line).
    pub lock_line: (bool, String),
    /// `--no-cache`.
    pub no_cache: bool,
    /// `--pull`.
    pub pull: bool,
    /// The Dockerfile is the BuildKit variant (cache mounts).
    pub buildkit: bool,
    /// The image's creation time, seconds since the epoch (the `created`
    /// label's; with `SOURCE_DATE_EPOCH` set, BuildKit gets it too).
    pub created_epoch: u64,
    /// The flags and inputs the provenance records.
    pub inputs: crate::image::attest::BuildInputs,
}

impl BuildPlan {
    /// Adds a label known only at build time (the resolved base digest), unless
    /// the spec or `--label` set it, and updates the Dockerfile to build.
    pub fn add_label(&mut self, key: &str, value: &str) {
        if !self.labels.contains_key(key) {
            self.labels.insert(key.to_string(), value.to_string());
            self.build_labels.insert(key.to_string(), value.to_string());
            self.context
                .set_dockerfile(&with_labels(&self.rendered_dockerfile, &self.build_labels));
        }
    }
}

/// The rendered Dockerfile plus one `LABEL` instruction holding `labels`
/// (values quoted; `$` escaped, since LABEL values are expanded).
pub fn with_labels(dockerfile: &str, labels: &BTreeMap<String, String>) -> String {
    let mut out = dockerfile.trim_end().to_string();
    out.push('\n');
    if labels.is_empty() {
        return out;
    }
    out.push_str(
        "\n# Added by `imgctl build`: OCI annotations, the resolved base, --label.\nLABEL",
    );
    let n = labels.len();
    for (i, (key, value)) in labels.iter().enumerate() {
        out.push_str(&format!(" {}={}", docker_quote(key), docker_quote(value)));
        if i + 1 < n {
            out.push_str(" \\\n     ");
        }
    }
    out.push('\n');
    out
}

/// `--dry-run --json` output.
#[derive(Debug, Serialize)]
struct DryRun<'a> {
    schema_version: u32,
    dockerfile: &'a str,
    context: Vec<ContextListing>,
    tags: &'a [String],
    labels: &'a BTreeMap<String, String>,
    build_args: &'a BTreeMap<String, String>,
    notes: &'a [String],
}

/// Runs `imgctl build`.
pub fn run(args: BuildArgs) -> anyhow::Result<ExitStatus> {
    if let Some(path) = &args.report {
        super::output_files::check_output_file("--report", path)?;
    }
    // The flags are checked (and the spec rendered) before any engine work;
    // `auto` renders the classic variant until the engine has decided.
    let evidence = attest::Evidence::from_args(&args)?;
    let plan = plan(&args, args.image.builder == BuilderChoice::BuildKit)?;
    for note in &plan.notes {
        printer().info(format!("note: {note}"));
    }
    match &plan.lock_line {
        (true, line) => printer().warn(line),
        (false, line) => printer().info(line),
    }
    if args.dry_run {
        return dry_run(&plan, args.json);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let report = runtime.block_on(async {
        // A build can stream for an hour without new headers; bollard's default
        // request timeout (120 s) only covers the response headers, but the
        // context upload of a large binary counts too.
        let mut engine = crate::docker::connect().await?;
        engine.ask_rootless().await;
        let docker = engine.docker.with_timeout(Duration::from_secs(3600));
        // A build-only CA needs BuildKit: `auto` then asks for it by name.
        let choice = match args.image.builder {
            BuilderChoice::Auto if args.image.ca_cert_secret.is_some() => BuilderChoice::BuildKit,
            other => other,
        };
        let (builder, reason) =
            crate::docker::build::choose_builder(&engine.info, choice).map_err(build_failure)?;
        let plan = if (builder == Builder::BuildKit) == plan.buildkit {
            plan
        } else {
            // The other variant of the Dockerfile; the imgctl binary, read
            // once, moves over.
            let mut old = plan;
            let binary = old.context.take(crate::image::render::IMGCTL_BINARY_PATH);
            plan_with(&args, builder == Builder::BuildKit, binary)?
        };
        printer().info(super::engine_line::engine_line(
            &engine.info,
            Some(&format!("{builder} ({reason})")),
        ));
        build(&docker, &engine.info, plan, builder, &evidence).await
    })?;
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(path) = &args.report {
        crate::sys::fs::write_file_atomic(path, format!("{json}\n").as_bytes())
            .with_context(|| format!("writing the build report to {}", path.display()))?;
        printer().info(format!("build report: {}", path.display()));
    }
    if args.json {
        printer().data(json);
    }
    Ok(ExitStatus::Success)
}

/// Turns the arguments into a [`BuildPlan`]: parses K=V lists and tags, loads
/// and renders the spec (its BuildKit variant when `buildkit`), assembles the
/// context and the labels.
pub fn plan(args: &BuildArgs, buildkit: bool) -> anyhow::Result<BuildPlan> {
    plan_with(args, buildkit, None)
}

/// [`plan`], with the imgctl binary's bytes when they were read already.
fn plan_with(
    args: &BuildArgs,
    buildkit: bool,
    binary: Option<Vec<u8>>,
) -> anyhow::Result<BuildPlan> {
    let build_args = parse_pairs(&args.build_args, "--build-arg")?;
    let user_labels = parse_pairs(&args.labels, "--label")?;
    if let Some((k, _)) = user_labels.iter().find(|(_, v)| v.contains('\n')) {
        return Err(
            CliError::usage(format!("invalid --label {k}: the value holds a newline"))
                .with_hint(
                    "label values are single lines; encode structured values (JSON) on one line",
                )
                .into(),
        );
    }
    for tag in &args.tags {
        image::validate_tag(tag)?;
    }

    let source = super::image_args::spec_source(&args.image);
    let loaded = crate::image::specs::load(&source)?;
    let options = crate::image::render::RenderOptions {
        buildkit,
        ..crate::image::render::RenderOptions::from_args(&args.image)?
    };
    let rendered = crate::image::render::render(&loaded, &options)?;
    let mut secrets = BuildSecrets::default();
    if let Some(ca) = &options.ca_cert_build_only {
        secrets.insert(crate::image::render::CA_CERT_SECRET_ID, ca.clone());
    }

    let tags = if args.tags.is_empty() {
        // Reference names are lower-case [a-z0-9] with single separators.
        let name: String = loaded
            .name
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let name = name.trim_matches('-');
        let tag = format!(
            "imgctl/{}:latest",
            if name.is_empty() { "image" } else { name }
        );
        image::validate_tag(&tag)?;
        vec![tag]
    } else {
        args.tags.clone()
    };

    let mut labels = rendered.labels.clone();
    let bases = image::from_images(&rendered.dockerfile);
    let created = created::created_time(&loaded, &rendered.lock)?;
    for (key, value) in oci_labels(&loaded.name, bases.first(), created) {
        labels.entry(key).or_insert(value);
    }
    let user_labels_for_inputs = user_labels.clone();
    labels.extend(user_labels);
    let build_labels: BTreeMap<String, String> = labels
        .iter()
        // Labels of the spec the template already writes are left out; a spec
        // label the Dockerfile does not mention is added, never dropped.
        .filter(|(k, v)| {
            rendered.labels.get(*k) != Some(*v) || !rendered.dockerfile.contains(k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();

    let mut context = BuildContext::new(&with_labels(&rendered.dockerfile, &build_labels));
    for file in &rendered.files {
        context.add(&file.path, file.mode, file.contents.clone())?;
    }
    let bytes = match binary {
        Some(bytes) => bytes,
        None => {
            let binary = imgctl_binary(args.imgctl_binary.as_ref())?;
            std::fs::read(&binary).map_err(|e| {
                CliError::failure(format!(
                    "cannot read the imgctl binary {}: {e}",
                    binary.display()
                ))
                .with_hint("pass a readable imgctl executable with --imgctl-binary FILE")
            })?
        }
    };
    context.add(crate::image::render::IMGCTL_BINARY_PATH, 0o755, bytes)?;

    let inputs = attest::build_inputs(
        args,
        (&build_args, &user_labels_for_inputs),
        &loaded,
        &rendered.lock,
    );
    Ok(BuildPlan {
        spec_name: loaded.name.clone(),
        spec_sha256: loaded.sha256.clone(),
        rendered_dockerfile: rendered.dockerfile.clone(),
        context,
        tags,
        labels,
        build_labels,
        build_args,
        secrets,
        notes: rendered.notes.clone(),
        lock_line: super::lock::build_line(&rendered.lock, &loaded),
        no_cache: args.no_cache,
        pull: args.pull,
        buildkit,
        created_epoch: created
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        inputs,
    })
}

/// Parses repeated `K=V` flags; a missing `=` or an empty key is a usage error.
pub fn parse_pairs(values: &[String], flag: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for value in values {
        match value.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() && !k.contains(char::is_whitespace) => {
                out.insert(k.to_string(), v.to_string());
            }
            _ => {
                return Err(CliError::usage(format!(
                    "invalid {flag} {value:?}: expected KEY=VALUE"
                ))
                .with_hint(format!(
                    "write it as `{flag} NAME=value` (no spaces in NAME)"
                ))
                .into())
            }
        }
    }
    Ok(out)
}

/// The imgctl to put in the image: `--imgctl-binary`, else this executable,
/// or, for a front end without libtorch, the full imgctl beside it (the
/// image's verify checks its own torch).
fn imgctl_binary(flag: Option<&PathBuf>) -> anyhow::Result<PathBuf> {
    match flag {
        Some(p) => Ok(p.clone()),
        None => {
            let exe = std::env::current_exe().context("finding the running imgctl executable")?;
            if cfg!(feature = "torch") {
                return Ok(exe);
            }
            Ok(crate::commands::torch_part::find_part(&exe).unwrap_or(exe))
        }
    }
}

/// OCI annotations (github.com/opencontainers/image-spec, annotations.md).
fn oci_labels(
    spec_name: &str,
    base: Option<&String>,
    created: SystemTime,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (
            "org.opencontainers.image.created".to_string(),
            humantime::format_rfc3339_seconds(created).to_string(),
        ),
        (
            "org.opencontainers.image.title".to_string(),
            format!("imgctl {spec_name}"),
        ),
        (
            "org.opencontainers.image.description".to_string(),
            "PyTorch GPU image built by imgctl".to_string(),
        ),
        (
            "org.opencontainers.image.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        (
            "org.opencontainers.image.licenses".to_string(),
            env!("CARGO_PKG_LICENSE").to_string(),
        ),
    ]);
    if let Some(base) = base {
        labels.insert(
            "org.opencontainers.image.base.name".to_string(),
            base.clone(),
        );
    }
    labels
}

fn dry_run(plan: &BuildPlan, json: bool) -> anyhow::Result<ExitStatus> {
    let listing = plan.context.listing();
    if json {
        printer().json(&DryRun {
            schema_version: REPORT_SCHEMA_VERSION,
            dockerfile: plan.context.dockerfile(),
            context: listing,
            tags: &plan.tags,
            labels: &plan.labels,
            build_args: &plan.build_args,
            notes: &plan.notes,
        })?;
        return Ok(ExitStatus::Success);
    }
    printer().data(plan.context.dockerfile().trim_end());
    let p = printer();
    p.info(format!(
        "build context ({} files, {}):",
        listing.len(),
        human_bytes(plan.context.size())
    ));
    for row in &listing {
        p.info(format!(
            "  {} {:>10}  {}",
            row.mode,
            human_bytes(row.size),
            row.path
        ));
    }
    if !plan.secrets.is_empty() {
        p.info(format!(
            "build secrets (served by imgctl's BuildKit session, not in the context): {}",
            plan.secrets.ids().join(", ")
        ));
    }
    p.info(format!("tags: {}", plan.tags.join(", ")));
    p.info("dry run: nothing was built");
    Ok(ExitStatus::Success)
}

/// Builds the plan on the engine at `address`; Ctrl-C cancels it (exit 130).
async fn build(
    docker: &bollard::Docker,
    engine: &crate::docker::engine::EngineInfo,
    plan: BuildPlan,
    builder: Builder,
    evidence: &attest::Evidence,
) -> anyhow::Result<BuildReport> {
    let address = engine.address.as_str();
    let p = printer();
    let (plan, bases) = with_bases(docker, plan).await?;
    let request = build_request(&plan, builder, evidence.verify.is_some());
    let tar = plan.context.to_tar()?;
    p.info(format!(
        "building {} from spec {} (context {})",
        plan.tags.join(", "),
        plan.spec_name,
        human_bytes(tar.len() as u64)
    ));
    let started = Instant::now();
    let (outcome, signals) = on_the_engine(docker, address, tar, &request).await?;
    let facts = image::inspect(docker, &outcome.image_id)
        .await?
        .ok_or_else(|| {
            CliError::failure(format!(
                "the built image {} vanished from the engine",
                outcome.image_id
            ))
        })?;
    let duration = started.elapsed().as_secs_f64();
    p.info(format!(
        "built {} ({}) in {}: {} of {} steps cached, {} ran",
        short_id(&outcome.image_id),
        human_bytes(facts.size),
        humantime::format_duration(Duration::from_secs(duration.round() as u64)),
        outcome.cached_steps(),
        outcome.steps.len(),
        outcome.executed_steps(),
    ));
    let verified = verify_and_tag(docker, engine, &plan.tags, &outcome.image_id, evidence).await?;

    // The SBOM is read from a container of the image, before the push: the
    // containers of --verify and of the SBOM remove themselves on a signal
    // (docker::run listens while they live; this stream keeps any signal
    // between them pending).
    let sbom = if evidence.attests() {
        let first_tag = plan.tags.first().cloned().unwrap_or_default();
        Some(attest::sbom(&outcome.image_id, &first_tag).await?)
    } else {
        None
    };
    // Nothing of ours left on the engine: a signal during pushing ends the
    // process as usual.
    signals.exit_on_next();
    let (pushed, pushed_digests) = if evidence.push {
        let podman = engine.product == crate::docker::engine::Product::Podman;
        push::push_tags(docker, &plan.tags, &outcome.image_id, podman).await?
    } else {
        Default::default()
    };
    let attestations = if let Some(sbom) = sbom {
        let made = attest::Made {
            image_id: &outcome.image_id,
            tags: &plan.tags,
            inputs: &plan.inputs,
            context: &plan.context,
            bases: &bases,
            engine,
            builder,
            created: facts.labels.get("org.opencontainers.image.created"),
            pushed: &pushed_digests,
            verified: verified.as_ref(),
            registry_timeout: evidence.registry_timeout,
            registry_ca: evidence.registry_ca.as_deref(),
            signer: evidence.signer.as_deref(),
        };
        made.attest(sbom, evidence.dir.as_deref()).await?
    } else {
        Vec::new()
    };

    Ok(BuildReport {
        schema_version: REPORT_SCHEMA_VERSION,
        image_id: outcome.image_id.clone(),
        tags: plan.tags.clone(),
        size_bytes: facts.size,
        builder,
        duration_s: (duration * 1000.0).round() / 1000.0,
        spec: SpecRef {
            name: plan.spec_name.clone(),
            sha256: plan.spec_sha256.clone(),
        },
        base_digest: bases.first().and_then(|b| b.digest.clone()),
        base_images: bases,
        pins: facts.labels,
        steps: StepCounts {
            total: outcome.steps.len(),
            cached: outcome.cached_steps(),
            executed: outcome.executed_steps(),
            detail: outcome.steps.clone(),
        },
        notes: plan.notes.clone(),
        pushed,
        verify: verified.as_ref().map(attest::verify_summary),
        attestations,
    })
}

/// The build on the engine at `address`, its progress on stderr; Ctrl-C
/// cancels it there and removes what it left (exit 130). Returns the
/// outcome and the signal stream, still listening for the phases after.
async fn on_the_engine(
    docker: &bollard::Docker,
    address: &str,
    tar: Vec<u8>,
    request: &BuildRequest,
) -> anyhow::Result<(BuildOutcome, crate::docker::Termination)> {
    let p = printer();
    let tracker = BuildTracker::default();
    let mut view = ProgressView::new();
    let heartbeat = view.heartbeat();
    let mut signals = crate::docker::Termination::install()?;
    let outcome = {
        let mut on_event = |ev: &BuildEvent| view.event(ev);
        let build = crate::docker::build::build_image(
            docker,
            address,
            tar,
            request,
            &tracker,
            &mut on_event,
        );
        tokio::select! {
            res = build => Ok(res),
            sig = signals.recv() => Err(sig),
            never = heartbeat => match never {},
        }
    };
    view.finish();
    match outcome {
        Err(sig) => {
            p.info(format!(
                "interrupted by {sig}: cancelling the build on the engine…"
            ));
            let forced =
                crate::docker::build::remove_leftovers(docker, &tracker, CANCEL_GRACE).await;
            if !forced.is_empty() {
                p.info(format!(
                    "removed {} intermediate container(s) left by the build",
                    forced.len()
                ));
            }
            Err(CliError::interrupted(format!("build interrupted by {sig}; the build was cancelled and its intermediate containers removed")).into())
        }
        Ok(Err(err)) => Err(build_failure(err)),
        Ok(Ok(outcome)) => Ok((outcome, signals)),
    }
}

/// `--verify` of the new image (a failed verdict kept as evidence, and the
/// build an error), then the tags the build itself did not give.
async fn verify_and_tag(
    docker: &bollard::Docker,
    engine: &crate::docker::engine::EngineInfo,
    tags: &[String],
    image_id: &str,
    evidence: &attest::Evidence,
) -> anyhow::Result<Option<crate::verify::report::Report>> {
    let p = printer();
    let verified = match &evidence.verify {
        Some(opts) => {
            let report = attest::verify_image(image_id, opts).await?;
            if !report.passed {
                if let Some(dir) = &evidence.dir {
                    attest::keep_failed_verdict(dir, image_id, engine, &report)?;
                }
                return Err(attest::verify_failed(image_id, &report));
            }
            Some(report)
        }
        None => None,
    };
    let tagged_by_build = usize::from(evidence.verify.is_none());
    for extra in tags.iter().skip(tagged_by_build) {
        image::tag(docker, image_id, extra).await?;
    }
    for tag in tags {
        p.info(format!("tagged {tag}"));
    }
    Ok(verified)
}

/// Resolves the plan's base images and labels the image with the first's digest.
async fn with_bases(
    docker: &bollard::Docker,
    mut plan: BuildPlan,
) -> anyhow::Result<(BuildPlan, Vec<image::BaseImage>)> {
    let base_refs = image::from_images(plan.context.dockerfile());
    let bases = image::resolve_bases(docker, &base_refs).await?;
    if let Some(digest) = bases.first().and_then(|b| b.digest.clone()) {
        plan.add_label("org.opencontainers.image.base.digest", &digest);
    }
    for base in &bases {
        if base.id.is_none() && !plan.pull {
            printer().info(format!(
                "base image {} is not on the engine; the engine will try to pull it",
                base.reference
            ));
        }
    }
    Ok((plan, bases))
}

/// The engine's build request of `plan`; with `verify_first`, no tag (the
/// tags come once the image passed verify).
fn build_request(plan: &BuildPlan, builder: Builder, verify_first: bool) -> BuildRequest {
    // With SOURCE_DATE_EPOCH set, BuildKit (0.11 and later) writes the image
    // config's and history's times from it, so that a fresh build of the
    // same inputs gives the same image (README, reproducible builds). Only
    // then: newer BuildKits also stamp COPY and WORKDIR with it, which would
    // make every new imgctl (a bundled spec's time) miss the whole cache.
    // The classic builder has no such setting.
    let mut build_args = plan.build_args.clone();
    if builder == Builder::BuildKit && std::env::var_os(SOURCE_DATE_EPOCH).is_some() {
        build_args
            .entry(SOURCE_DATE_EPOCH.to_string())
            .or_insert_with(|| plan.created_epoch.to_string());
    }
    BuildRequest {
        tags: if verify_first {
            Vec::new()
        } else {
            plan.tags.clone()
        },
        no_cache: plan.no_cache,
        pull: plan.pull,
        build_args,
        // In the Dockerfile instead (one step, not one per label).
        labels: BTreeMap::new(),
        builder,
        secrets: plan.secrets.clone(),
    }
}

/// The error of a failed build (its words: commands/error/build.rs); a
/// failed step first prints its last lines.
fn build_failure(err: BuildError) -> anyhow::Error {
    if let BuildError::StepFailed { n, total, tail, .. } = &err {
        if !tail.is_empty() {
            let mut text = format!("output of step {n}/{total} (last {} lines):\n", tail.len());
            for line in tail {
                text.push_str(&format!("  | {line}\n"));
            }
            crate::output::printer().stderr_text(text);
        }
    }
    err.into()
}

fn short_id(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    crate::output::head(hex, 12)
}

/// Bytes in decimal units (the engine's `docker images` uses 1000-based units).
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_and_reject_missing_equals() {
        let ok = parse_pairs(&["A=1".into(), "B=x=y".into(), "C=".into()], "--label").unwrap();
        assert_eq!(ok["A"], "1");
        assert_eq!(ok["B"], "x=y");
        assert_eq!(ok["C"], "");
        let err = parse_pairs(&["NOPE".into()], "--build-arg").unwrap_err();
        assert_eq!(crate::commands::error::status_of(&err), ExitStatus::Usage);
        assert!(err.to_string().contains("--build-arg \"NOPE\""));
        assert!(parse_pairs(&["=v".into()], "--label").is_err());
    }

    #[test]
    fn labels_become_one_quoted_instruction() {
        let labels = BTreeMap::from([
            ("a.b".to_string(), "x y".to_string()),
            ("c".to_string(), "say \"$HOME\" \\ ok".to_string()),
        ]);
        let df = with_labels("FROM scratch\n\n", &labels);
        assert!(
            df.starts_with("FROM scratch\n\n# Added by `imgctl build`"),
            "{df}"
        );
        assert!(
            df.ends_with("LABEL \"a.b\"=\"x y\" \\\n      \"c\"=\"say \\\"\\$HOME\\\" \\\\ ok\"\n"),
            "{df}"
        );
        assert_eq!(
            with_labels("FROM scratch\n", &BTreeMap::new()),
            "FROM scratch\n"
        );
    }

    #[test]
    fn the_bundled_template_mounts_the_secret_the_build_serves() {
        let mount = format!(
            "--mount=type=secret,id={},required=true,",
            crate::image::render::CA_CERT_SECRET_ID
        );
        assert!(crate::image::render::WORKSTATION_TEMPLATE.contains(&mount));
    }

    #[test]
    fn sizes_are_human() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(8_100_000_000), "8.1 GB");
        assert_eq!(progress::cut("abcdef", 4), "abc…");
    }
}
