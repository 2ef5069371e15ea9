//! `imgctl verify-image REF --key FILE`: the deploy gate. Reads the
//! referrers of a pushed image, trusts only the statements signed by one of
//! the keys about this very manifest ([`crate::image::sign::policy`]), judges the
//! policy (the flags, `--policy FILE`) on them, and says which statement
//! satisfied which rule. Exit 0 when every rule holds, 1 naming the first
//! failed rule and its statement, 2 for usage errors.
use std::path::Path;

use serde::Serialize;

use crate::cli::VerifyImageArgs;
use crate::commands::error::CliError;
use crate::error::ExitStatus;
use crate::image::attest::IN_TOTO_MEDIA_TYPE;
use crate::image::oci::Repository;
use crate::image::sign::bundle::BUNDLE_MEDIA_TYPE;
use crate::image::sign::policy::{self, Candidate, Evaluation, Policy, Refusal};
use crate::image::sign::PublicKey;
use crate::output::printer;

/// Version of `verify-image --json`.
const SCHEMA_VERSION: u32 = 1;

/// `verify-image --json`.
#[derive(Debug, Serialize)]
struct Gate<'a> {
    schema_version: u32,
    reference: &'a str,
    /// The manifest digest the statements must name.
    subject: &'a str,
    #[serde(flatten)]
    evaluation: &'a Evaluation,
    /// `--fleet`: the image's facts, the fleet and every reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    fit: Option<&'a super::fit::FitGate>,
}

/// The repository client and its runtime for the fit gate's reads.
fn repository_for_fit(
    args: &VerifyImageArgs,
) -> anyhow::Result<(tokio::runtime::Runtime, Repository)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let repository = repository(
        &runtime,
        &args.image,
        args.registry_ca.registry_ca.as_deref(),
        args.registry_timeout.registry_timeout,
    )?;
    Ok((runtime, repository))
}

/// The most bytes a policy file may have (#50 M8).
const POLICY_MAX: u64 = 1024 * 1024;

/// Reads `--policy FILE`: a regular file of at most 1 MiB, YAML without
/// anchors or aliases (a 1 MB alias bomb grew past 7 GB, #50 M4), a
/// `version` that is 1 (#50 M5), no unknown key.
fn read_policy(path: &Path) -> anyhow::Result<Policy> {
    let text = crate::sys::fs::read_regular_text(path, POLICY_MAX).map_err(|e| {
        CliError::usage(format!("cannot read --policy {}: {e}", path.display()))
            .with_hint("pass a YAML policy file you can read (at most 1 MiB)")
    })?;
    static ALIAS: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let alias = ALIAS.get_or_init(|| {
        regex::Regex::new(r"(?m)(^|:\s|-\s|[\[{,])\s*[&*][A-Za-z0-9_.-]+").expect("a valid regex")
    });
    if alias.is_match(&text) {
        return Err(CliError::usage(format!(
            "--policy {}: YAML anchors and aliases (&name, *name) are not read in a policy",
            path.display()
        ))
        .with_hint("write each rule out in full")
        .into());
    }
    let keys: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| {
        CliError::usage(format!("--policy {}: {e}", path.display()))
            .with_hint("write the policy as YAML: `version: 1` and its rules")
    })?;
    if keys.get("version").is_none() {
        return Err(CliError::usage(format!(
            "--policy {}: the policy has no `version`",
            path.display()
        ))
        .with_hint("begin it with `version: 1`")
        .into());
    }
    let policy: Policy = serde_yaml::from_value(keys).map_err(|e| {
        CliError::usage(format!("--policy {}: {e}", path.display())).with_hint(
            "the keys are version, require_verify, min_gpus, gpu_model, level, checks_passed, spec_digest, builder_id, require_predicates, max_age (docs/supply-chain.md, \"Sign statements and gate deploys\")",
        )
    })?;
    if policy.version != 1 {
        return Err(CliError::usage(format!(
            "--policy {}: version {} is not one this imgctl reads",
            path.display(),
            policy.version
        ))
        .with_hint("write `version: 1`")
        .into());
    }
    if policy
        .gpu_model
        .as_deref()
        .is_some_and(|m| m.trim().is_empty())
    {
        return Err(
            CliError::usage(format!("--policy {}: gpu_model is empty", path.display()))
                .with_hint("name a word of the GPU's name (`H200`), or leave gpu_model out")
                .into(),
        );
    }
    Ok(policy)
}

/// The policy: the file's, with the flags' rules added.
pub fn policy_of(args: &VerifyImageArgs) -> anyhow::Result<Policy> {
    let mut p = match &args.policy {
        Some(path) => read_policy(path)?,
        None => Policy {
            version: 1,
            ..Policy::default()
        },
    };
    p.require_verify |= args.require_verify;
    p.min_gpus = args.min_gpus.or(p.min_gpus);
    p.gpu_model = args.gpu_model.clone().or(p.gpu_model);
    p.level = args
        .level
        .map(|l| {
            serde_json::to_value(l)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        })
        .or(p.level);
    p.spec_digest = args.spec_digest.clone().or(p.spec_digest);
    p.builder_id = args.builder_id.clone().or(p.builder_id);
    p.max_age = args.max_age.or(p.max_age);
    Ok(p)
}

/// The trusted keys, each read (a bad file is a usage error naming it).
pub fn read_keys(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<PublicKey>> {
    Ok(paths
        .iter()
        .map(|p| PublicKey::read(p))
        .collect::<Result<Vec<_>, _>>()?)
}

/// The image's manifest digest and its statements (plain in-toto ones and
/// Sigstore bundles; other artifacts, such as the SBOM, are not statements).
pub async fn candidates(repository: &Repository) -> anyhow::Result<(String, Vec<Candidate>, bool)> {
    let reference = repository.tag_or_digest().unwrap_or("latest").to_string();
    let subject = repository.resolve(&reference).await?;
    // Each kind of statement asked for by itself (#50 M9): SBOMs and other
    // artifacts never crowd a verdict out of the client's cap. A registry
    // that does not filter lists everything twice; each digest is read once.
    let mut out: Vec<Candidate> = Vec::new();
    let mut cut = false;
    for kind in [BUNDLE_MEDIA_TYPE, IN_TOTO_MEDIA_TYPE] {
        let listed = repository.referrers(&subject.digest, Some(kind)).await?;
        cut |= listed.more;
        for d in listed.list {
            if out.iter().any(|c| c.manifest == d.digest) {
                continue;
            }
            let (_, bytes) = repository.fetch_artifact(&d.digest).await?;
            out.push(Candidate {
                manifest: d.digest.clone(),
                artifact_type: kind.to_string(),
                bytes,
            });
        }
    }
    Ok((subject.digest, out, cut))
}

/// The hint of `--registry-ca` errors.
const REGISTRY_CA_HINT: &str = "--registry-ca takes the PEM file of the CA that issued the registry's certificate (the docker CLI reads it from /etc/docker/certs.d/HOST:PORT/ca.crt)";

/// The client of `image`'s repository: the docker config's credentials, the
/// CAs of the certs.d folder and of `--registry-ca` (`registry_ca`; one
/// that cannot be read or holds no certificate is a usage error), the
/// deadline of `--registry-timeout`. Made inside `runtime`.
fn repository(
    runtime: &tokio::runtime::Runtime,
    image: &str,
    registry_ca: Option<&Path>,
    registry_timeout: u64,
) -> anyhow::Result<Repository> {
    let _in_runtime = runtime.enter();
    let repository = crate::image::oci::docker_credentials(image)
        .and_then(|credentials| Repository::new(image, credentials))
        .map_err(|e| {
            CliError::failure(format!("verify-image {image}: {e:#}")).with_hint(READS_THE_REGISTRY)
        })?;
    let repository = match registry_ca {
        None => repository,
        Some(ca) => repository
            .with_registry_ca(ca, Some("--registry-ca"))
            .map_err(|e| CliError::usage(format!("{e:#}")).with_hint(REGISTRY_CA_HINT))?,
    };
    Ok(repository.with_deadline(
        std::time::Duration::from_secs(registry_timeout),
        Some("--registry-timeout"),
    ))
}

/// The hint of errors reading the registry.
const READS_THE_REGISTRY: &str = "pass the pushed reference (REGISTRY/NAME:TAG or NAME@sha256:…); `docker login REGISTRY` stores its credentials; an HTTPS registry's own CA goes in /etc/docker/certs.d/HOST:PORT/ca.crt or --registry-ca FILE";

/// Reads REF's statements and judges `policy` on them with `keys`, trusting
/// the registry's certificate by the certs.d folder and `registry_ca`;
/// `fit_asked` (`--fleet`) is a rule beyond the policy's.
pub fn gate(
    image: &str,
    keys: &[PublicKey],
    policy: &Policy,
    registry_timeout: u64,
    registry_ca: Option<&Path>,
    fit_asked: bool,
) -> anyhow::Result<(String, Vec<Candidate>, Evaluation)> {
    crate::image_ref::check(crate::image_ref::Role::Pushed, image)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let repository = repository(&runtime, image, registry_ca, registry_timeout)?;
    let spinner = printer().spinner(format!("reading the signed statements of {image}"));
    let read = runtime.block_on(candidates(&repository));
    spinner.finish_and_clear();
    let (subject, found, cut) = read.map_err(|e| {
        CliError::failure(format!("verify-image {image}: {e:#}")).with_hint(READS_THE_REGISTRY)
    })?;
    if cut {
        printer().warn(format!(
            "the registry lists more than {} statements of one kind for {image}; imgctl read the first {} of each, so a statement behind them was not seen",
            crate::image::oci::MAX_REFERRERS,
            crate::image::oci::MAX_REFERRERS
        ));
    }
    // The keys by id, beside the refusals' ids (#53 F12: a wrong --key
    // read only "no signed statement").
    printer().info(format!(
        "{} of {image}, checked against {} {}",
        match found.len() {
            1 => "1 statement".to_string(),
            n => format!("{n} statements"),
        },
        if keys.len() == 1 { "key" } else { "keys" },
        keys.iter()
            .map(|k| crate::output::head(k.key_id(), 16).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if !policy.has_rules() && !fit_asked {
        printer().info(
            "the policy has no rule: the gate checks only that a statement of this image is signed by a --key (add --require-verify, or rules in --policy)",
        );
    }
    let evaluation = policy::evaluate(&subject, &found, keys, policy, std::time::SystemTime::now());
    Ok((subject, found, evaluation))
}

/// Text that came from a registry or a statement, with every control
/// character escaped (#50 M3): a referrer cannot set the terminal's title,
/// clear it, or print a forged `PASS` line of its own.
fn outside(text: &str) -> String {
    crate::output::outside(text).into_owned()
}

/// The lines a person reads: each trusted and refused statement, each rule.
pub fn say(evaluation: &Evaluation) {
    let p = printer();
    let short = |d: &str| crate::output::head(d, 19).to_string();
    for a in &evaluation.accepted {
        p.info(outside(&format!(
            "trusted  {} {} (signed by key {})",
            short(&a.manifest),
            a.predicate_type,
            crate::output::head(&a.key_id, 16)
        )));
    }
    for r in &evaluation.refused {
        // An unsigned statement (imgctl pushes plain copies beside the
        // signed bundles, for tools that read in-toto alone) is not an
        // attack: said, not warned of (#53 F12).
        if r.refusal == Refusal::Unsigned {
            p.info(outside(&format!(
                "unsigned {} {}: not used (only signed statements count)",
                short(&r.manifest),
                r.claims
            )));
            continue;
        }
        p.warn(outside(&format!(
            "refused  {} {}: {}",
            short(&r.manifest),
            r.claims,
            r.refusal
        )));
    }
    for r in &evaluation.rules {
        let by = r
            .statement
            .as_deref()
            .map(|s| format!(" [{}]", short(s)))
            .unwrap_or_default();
        p.info(outside(&format!(
            "{}  {}: {}{by}",
            if r.held { "PASS" } else { "FAIL" },
            r.rule,
            r.detail
        )));
    }
}

/// The error of a gate that did not pass: the first failed rule, its
/// statement, and the refusals as the hint's reason.
pub fn refused(image: &str, evaluation: &Evaluation) -> anyhow::Error {
    let failed: Vec<_> = evaluation.rules.iter().filter(|r| !r.held).collect();
    let first = failed[0];
    let on = match &first.statement {
        Some(s) => format!(" (statement {s})"),
        None => String::new(),
    };
    let more = match failed.len() {
        1 => String::new(),
        n => format!("; {} more rules failed", n - 1),
    };
    let n = evaluation.refused.len();
    let mut hint = if n == 0 {
        "the image's signed statements do not meet the policy: rebuild and verify it, or deploy another".to_string()
    } else {
        format!(
            "{n} {} refused ({}); only statements signed by a --key about this image's manifest count",
            if n == 1 { "statement was" } else { "statements were" },
            evaluation
                .refused
                .iter()
                .map(|r| r.refusal.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    // No signed verdict at all: say how one is made (#53 F12).
    let no_verdict = evaluation
        .rules
        .iter()
        .any(|r| !r.held && r.rule.starts_with("verify.") && r.statement.is_none());
    if no_verdict {
        hint.push_str("; a signed verdict is made by `imgctl build --verify --sign-key KEY --push` on a host with the GPUs to vouch for");
    }
    CliError::failure(outside(&format!(
        "{image} may not deploy: rule {} failed: {}{on}{more}",
        first.rule, first.detail
    )))
    .with_hint(outside(&hint))
    .into()
}

/// `up --key` and `verify --image --key`: before `image` is started, the
/// manifest it came from in its registry (its repo digest for its own
/// repository) must carry a verify verdict that passed, signed by one of
/// `keys`. An image with no such digest (never pushed or pulled from there)
/// has no verdict that could name it. `registry_ca` (`--registry-ca`) is
/// trusted for that registry beside the certs.d folder.
pub fn check_before_start(
    image: &str,
    keys: &[std::path::PathBuf],
    registry_ca: Option<&Path>,
) -> anyhow::Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let public = read_keys(keys)?;
    let facts = super::local_image::local_image(image)?;
    let repo = crate::docker::image::split_tag(image).0;
    let pushed = facts.as_ref().and_then(|f| {
        f.repo_digests
            .iter()
            .find(|d| d.split_once('@').is_some_and(|(r, _)| r == repo))
    });
    let Some(reference) = pushed else {
        return Err(CliError::failure(format!(
            "--key: {image} has no digest from the registry of {repo}, so no signed verdict can name it"
        ))
        .with_hint(format!(
            "pull it from its registry (`docker pull {image}`) or push it with `imgctl build --push --sign-key`; --key checks the verdict attached there"
        ))
        .into());
    };
    // The image starts on this host, whatever it has: a verdict made on a
    // host without GPUs counts here (a deploy gate for GPU nodes is
    // `verify-image --require-verify`, which refuses one).
    let policy = Policy {
        version: 1,
        require_verify: true,
        min_gpus: Some(0),
        ..Policy::default()
    };
    let (_, _, evaluation) = gate(
        reference,
        &public,
        &policy,
        crate::image::oci::http::DEFAULT_DEADLINE.as_secs(),
        registry_ca,
        false,
    )?;
    say(&evaluation);
    if !evaluation.passed {
        return Err(refused(reference, &evaluation));
    }
    printer().info(format!(
        "--key: the signed verdict of {reference} passed; starting {image}"
    ));
    Ok(())
}

/// Runs `imgctl verify-image`.
pub fn run(args: VerifyImageArgs) -> anyhow::Result<ExitStatus> {
    let keys = read_keys(&args.key)?;
    let policy = policy_of(&args)?;
    let fleet = match (&args.fleet, &args.history) {
        (Some(file), _) => Some(super::fit::read_fleet(file)?),
        (None, Some(dir)) => Some(super::fit::fleet_of_history(dir)?),
        (None, None) => None,
    };
    let (subject, found, evaluation) = gate(
        &args.image,
        &keys,
        &policy,
        args.registry_timeout.registry_timeout,
        args.registry_ca.registry_ca.as_deref(),
        fleet.is_some(),
    )?;
    let fit = match &fleet {
        Some(groups) => Some(super::fit::gate(
            &repository_for_fit(&args)?,
            &subject,
            groups,
            (&found, &keys, args.max_age.or(policy.max_age)),
            &evaluation.accepted,
        )?),
        None => None,
    };
    if args.json {
        printer().json(&Gate {
            schema_version: SCHEMA_VERSION,
            reference: &args.image,
            subject: &subject,
            evaluation: &evaluation,
            fit: fit.as_ref(),
        })?;
    }
    say(&evaluation);
    if let Some(f) = &fit {
        super::fit::say(f);
    }
    if !evaluation.passed {
        return Err(refused(&args.image, &evaluation));
    }
    if let Some(f) = fit.as_ref().filter(|f| !f.report.admitted) {
        return Err(super::fit::refused(&args.image, f));
    }
    let n = evaluation.rules.len();
    printer().info(format!(
        "{} may deploy: {n} {} on statements signed by a trusted key about {}",
        args.image,
        if n == 1 { "rule holds" } else { "rules hold" },
        crate::output::head(&subject, 19)
    ));
    Ok(ExitStatus::Success)
}
