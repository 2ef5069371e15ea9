//! The fit of an image to GPUs, in words: `verify-image --fleet FILE` (the
//! deploy gate: the image's labels read from its registry, judged on the
//! fleet file, and with `--max-age` a signed verdict from each GPU model),
//! and the check `up` and `verify --image` make on the host's GPUs before a
//! container is created ([`check_host_image`]). The rules are
//! [`crate::gpus::fit`]'s.
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::commands::error::CliError;
use crate::gpus::archs;
use crate::gpus::fit::{self, FitReport, Group, ImageFacts, Level, Reason};
use crate::image::oci::Repository;
use crate::image::sign::policy::{self, Candidate, Policy};
use crate::image::sign::PublicKey;
use crate::output::printer;

/// `--fleet FILE` read: a regular file of at most 1 MiB, a valid fleet.
pub fn read_fleet(path: &Path) -> anyhow::Result<Vec<Group>> {
    let text = crate::sys::fs::read_regular_text(path, fit::FLEET_FILE_MAX).map_err(|e| {
        CliError::usage(format!("cannot read --fleet {}: {e}", path.display()))
            .with_hint("pass a YAML fleet file you can read (at most 1 MiB)")
    })?;
    fit::parse_fleet(&text).map_err(|e| {
        CliError::usage(format!("--fleet {}: {e}", path.display()))
            .with_hint("a fleet file is `version: 1` and `gpus:` entries of model, driver and nodes (docs/fit.md)")
            .into()
    })
}

/// `verify-image --history DIR`: the fleet as the history records it, each
/// node's latest run that reported: one group per GPU model and driver,
/// counting nodes.
#[cfg(feature = "torch")]
pub fn fleet_of_history(dir: &Path) -> anyhow::Result<Vec<Group>> {
    use crate::verify::fleet::history;
    let usage = |m: String| -> anyhow::Error {
        CliError::usage(format!("--history {}: {m}", dir.display()))
            .with_hint("pass the folder `imgctl verify --fleet --history DIR` records in, or a fleet file with --fleet FILE")
            .into()
    };
    let (records, _) = history::read(dir).map_err(|e| usage(e.to_string()))?;
    let mut latest: BTreeMap<&str, &history::Record> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.state == crate::verify::fleet::NodeState::Reported)
    {
        latest.insert(r.node.as_str(), r); // oldest first: the last one stays
    }
    let groups = fit::groups_of_nodes(latest.values().filter_map(|r| {
        let driver = r.driver.clone()?;
        let gpus: Vec<(String, Option<String>)> = r
            .gpus
            .iter()
            .map(|g| (g.name.clone(), g.sm.clone()))
            .collect();
        Some((driver, gpus))
    }));
    if groups.is_empty() {
        return Err(usage(format!(
            "no node there recorded a GPU and a driver ({} node-run(s) read)",
            records.len()
        )));
    }
    Ok(groups)
}

/// Without the torch feature there is no fleet verify, so no history.
#[cfg(not(feature = "torch"))]
pub fn fleet_of_history(_: &Path) -> anyhow::Result<Vec<Group>> {
    Err(
        CliError::usage("--history needs an imgctl built with the torch feature")
            .with_hint("pass the fleet as a file: --fleet FILE")
            .into(),
    )
}

/// What `--fleet` found: the image's facts, the fleet, every reason.
#[derive(Debug, Serialize)]
pub struct FitGate {
    /// The image's facts.
    pub image: ImageFacts,
    /// Where they were read: the signed provenance, else the labels.
    pub facts_from: String,
    /// The fleet, as read.
    pub fleet: Vec<Group>,
    /// Every rule for every GPU model, and whether the image is admitted.
    #[serde(flatten)]
    pub report: FitReport,
    /// Seconds the fit's registry reads and judging took.
    pub seconds: f64,
}

/// The word the signed verdict's GPU names must hold for `g` (`B200`).
fn model_word(g: &Group) -> String {
    if let Some(row) = archs::gpu_model(&g.model) {
        if let Some(f) = row.matches.iter().find(|f| !f.contains(' ')) {
            return (*f).to_string();
        }
    }
    g.model
        .split_whitespace()
        .find(|w| *w != "NVIDIA")
        .unwrap_or(&g.model)
        .to_string()
}

/// The fit of the image `subject` of `repository` to `groups`; with
/// `max_age`, also a trusted verdict that passed on each GPU model, no
/// older than that, among `found` (checked against `keys`).
pub fn gate(
    (runtime, repository): &(tokio::runtime::Runtime, Repository),
    subject: &str,
    groups: &[Group],
    (found, keys, max_age): (&[Candidate], &[PublicKey], Option<Duration>),
    accepted: &[crate::image::sign::rules::Accepted],
) -> anyhow::Result<FitGate> {
    let start = Instant::now();
    let labels = runtime.block_on(repository.image_labels(subject)).map_err(|e| {
        CliError::failure(format!("--fleet: reading the labels of {subject}: {e:#}"))
            .with_hint("the fit is judged on the labels imgctl's build sets; the image must be readable in its registry")
    })?;
    let (image, facts_from, disagree) = choose_facts(
        crate::image::fit::from_provenance(accepted),
        crate::image::fit::from_labels(&labels),
    )
    .map_err(|e| {
        CliError::failure(format!("--fleet: {e}"))
            .with_hint("build the image with `imgctl build`, which records its torch, CUDA, driver floor and GPU code in its labels and signed provenance")
    })?;
    let mut report = fit::judge(&image, groups, &crate::image::fit::bundled());
    if let Some(line) = disagree {
        report.reasons.push(Reason {
            rule: "facts",
            level: Level::Fail,
            gpu: "image".to_string(),
            line,
            image: String::new(),
            fleet: String::new(),
            source: "the image's config and its signed provenance".to_string(),
        });
    }
    report
        .reasons
        .push(crate::image::fit::sbom_reason(accepted));
    report.admitted = report.reasons.iter().all(|r| r.level != Level::Fail);
    if let Some(age) = max_age {
        report
            .reasons
            .extend(verdicts(subject, groups, found, keys, age));
        report.admitted = report.reasons.iter().all(|r| r.level != Level::Fail);
    }
    Ok(FitGate {
        image,
        facts_from: facts_from.to_string(),
        fleet: groups.to_vec(),
        report,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The facts judged: the signed provenance's when it records them, else
/// the labels'; with both, a line when they disagree (the signed ones are
/// judged). Neither: why not.
fn choose_facts(
    signed: Option<ImageFacts>,
    labelled: Result<ImageFacts, String>,
) -> Result<(ImageFacts, &'static str, Option<String>), String> {
    const SIGNED: &str = "the signed provenance (internalParameters.gpuFit)";
    match (signed, labelled) {
        (Some(signed), Ok(labelled)) => {
            let blind = |f: &ImageFacts| ImageFacts {
                archs_source: String::new(),
                ..f.clone()
            };
            let disagree = (blind(&signed) != blind(&labelled)).then(|| {
                format!(
                    "the image's labels say {} (code {}, driver ≥ {}, NCCL {}) and its signed provenance {} (code {}, driver ≥ {}, NCCL {}): the signed facts are judged",
                    labelled.wheel(), labelled.archs_short(), labelled.driver_min, labelled.nccl,
                    signed.wheel(), signed.archs_short(), signed.driver_min, signed.nccl
                )
            });
            Ok((signed, SIGNED, disagree))
        }
        (Some(signed), Err(_)) => Ok((signed, SIGNED, None)),
        (None, Ok(labelled)) => Ok((labelled, "the image's labels (bound to its digest)", None)),
        (None, Err(e)) => Err(e),
    }
}

/// One `verdict` reason per GPU model: a trusted verdict that passed, made
/// on that model, at most `age` old.
fn verdicts(
    subject: &str,
    groups: &[Group],
    found: &[Candidate],
    keys: &[PublicKey],
    age: Duration,
) -> Vec<Reason> {
    let mut seen: BTreeMap<String, ()> = BTreeMap::new();
    let mut out = Vec::new();
    for g in groups {
        let word = model_word(g);
        if seen.insert(word.clone(), ()).is_some() {
            continue;
        }
        let asked = Policy {
            version: 1,
            require_verify: true,
            gpu_model: Some(word.clone()),
            max_age: Some(age),
            ..Policy::default()
        };
        let e = policy::evaluate(subject, found, keys, &asked, SystemTime::now());
        let failed: Vec<String> = e
            .rules
            .iter()
            .filter(|r| !r.held)
            .map(|r| format!("{}: {}", r.rule, r.detail))
            .collect();
        let (level, line) = if e.passed {
            (
                Level::Pass,
                format!(
                    "{}: a signed verdict that passed, from a run on {word}, at most {} old",
                    g.label(),
                    humantime::format_duration(age)
                ),
            )
        } else {
            (
                Level::Fail,
                format!(
                    "{}: no signed verdict that passed on {word} within {} ({})",
                    g.label(),
                    humantime::format_duration(age),
                    failed.join("; ")
                ),
            )
        };
        out.push(Reason {
            rule: "verdict",
            level,
            gpu: g.label(),
            line,
            image: format!("{} trusted statement(s)", e.accepted.len()),
            fleet: word,
            source: "verify-image --max-age: the verdict's verifiedOn".to_string(),
        });
    }
    out
}

/// The reason lines: each rule for each GPU model.
pub fn say(f: &FitGate) {
    let p = printer();
    p.info(format!(
        "fit of {} (code {}, CUDA {}, driver ≥ {}, NCCL {}; from {}) to {} GPU model(s), {:.2} s",
        f.image.wheel(),
        f.image.archs_short(),
        f.image.cuda(),
        f.image.driver_min,
        f.image.nccl,
        f.facts_from,
        f.fleet.len(),
        f.seconds
    ));
    say_reasons(&f.report);
}

fn say_reasons(report: &FitReport) {
    let p = printer();
    for r in &report.reasons {
        let line = crate::output::outside(&format!("fit.{}: {}", r.rule, r.line)).into_owned();
        match r.level {
            Level::Pass => p.info(format!("PASS  {line}")),
            Level::Warn => p.warn(format!("WARN  {line}")),
            Level::Fail => p.info(format!("FAIL  {line} [source: {}]", r.source)),
        }
    }
}

/// The error of a fleet the image does not fit: the first refusal.
pub fn refused(image: &str, f: &FitGate) -> anyhow::Error {
    let failed: Vec<&Reason> = f.report.at(Level::Fail).collect();
    let more = match failed.len() {
        1 => String::new(),
        n => format!("; {} more reasons", n - 1),
    };
    CliError::failure(crate::output::outside(&format!(
        "{image} may not deploy to this fleet: {}{more}",
        failed[0].line
    )))
    .with_hint("each FAIL line names the rule, the image's fact, the fleet's and the source; --json gives them all")
    .into()
}

/// [`check_host`] for a local image, its labels read from the engine (only
/// when this host has an NVIDIA driver: without one there is nothing to
/// judge, and no engine call is made). `gpus` false (`--gpus none`) skips it.
pub fn check_host_image(image: &str, gpus: bool) -> anyhow::Result<()> {
    if !gpus {
        return Ok(());
    }
    let Ok(nvml) = crate::nvml::RealNvml::load() else {
        return Ok(());
    };
    let Ok(groups) = fit::host_groups(&nvml) else {
        return Ok(());
    };
    match super::local_image::local_image(image) {
        Ok(Some(f)) => check_groups(image, &f.labels, &groups),
        // No such image, or no engine: the start says so in its own words.
        _ => Ok(()),
    }
}

/// Before a container of `image` (its `labels`) starts on a host with
/// `groups`: refused with one line when it cannot run; a warning when it
/// runs only through PTX JIT. Quiet for an image imgctl did not build.
pub fn check_groups(
    image: &str,
    labels: &BTreeMap<String, String>,
    groups: &[Group],
) -> anyhow::Result<()> {
    if groups.is_empty() {
        return Ok(());
    }
    let Ok(facts) = crate::image::fit::from_labels(labels) else {
        return Ok(());
    };
    let report = fit::judge(&facts, groups, &crate::image::fit::bundled());
    for r in report.at(Level::Warn) {
        printer().warn(crate::output::outside(&format!("{image}: {}", r.line)));
    }
    let first = report.at(Level::Fail).next().map(|r| r.line.clone());
    match first {
        None => Ok(()),
        Some(line) => Err(CliError::failure(crate::output::outside(&format!(
            "{image} cannot run on this host's GPUs: {line}"
        )))
        .with_hint("nothing was started; build the named profile (`imgctl build --cuda X.Y`), or upgrade the driver")
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::render::labels as keys;
    use crate::nvml::{fake, FakeGpu, FakeNvml};

    /// The labels imgctl's build gives an image of `profile`.
    fn labels_of(profile: &str) -> BTreeMap<String, String> {
        let f = crate::image::fit::of_profile(profile).unwrap();
        let code = f.archs().describe();
        [
            (keys::TORCH, f.torch),
            (keys::TORCH_VARIANT, f.variant),
            (keys::CUDA_RUNTIME, f.cuda_runtime),
            (keys::DRIVER_MIN, f.driver_min),
            (keys::DRIVER_NATIVE, f.driver_native),
            (keys::NCCL, f.nccl),
            (keys::CUDNN, f.cudnn),
            (keys::CUDA_ARCHS, code),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    fn host(name: &str, cc: (i32, i32), driver: &str) -> Vec<Group> {
        let mut f = FakeNvml::healthy(2);
        f.driver = driver.into();
        for g in &mut f.gpus {
            *g = FakeGpu {
                name: name.into(),
                cc,
                ..g.clone()
            };
        }
        fit::host_groups(fake(f).as_ref()).unwrap()
    }

    #[test]
    fn a_blackwell_host_refuses_a_cu126_image_and_names_the_profile() {
        let groups = host("NVIDIA B200", (10, 0), "570.133.20");
        let e = check_groups("imgctl/cu126:latest", &labels_of("cu126"), &groups).unwrap_err();
        assert_eq!(
            e.to_string(),
            "imgctl/cu126:latest cannot run on this host's GPUs: B200 (sm_100) is not in the image's arch list sm_50…sm_90: torch 2.7.0+cu126 has no Blackwell kernels (\"no kernel image is available for execution on the device\"); the cu128 profile fits (torch 2.7.0+cu128, driver ≥ 525.60.13)"
        );
        check_groups("imgctl/cu128:latest", &labels_of("cu128"), &groups).unwrap();
    }

    #[test]
    fn an_old_driver_is_refused_before_the_start() {
        let groups = host("NVIDIA H100 80GB HBM3", (9, 0), "470.82.01");
        let e = check_groups("imgctl/cu124:latest", &labels_of("cu124"), &groups).unwrap_err();
        assert!(
            e.to_string().contains("H100 80GB HBM3 (sm_90): driver 470.82.01 is older than 525.60.13, the least that runs the image's CUDA 12.6"),
            "{e}"
        );
    }

    #[test]
    fn an_image_imgctl_did_not_build_and_a_host_without_gpus_are_not_judged() {
        let groups = host("NVIDIA B200", (10, 0), "570.133.20");
        check_groups("debian:12", &BTreeMap::new(), &groups).unwrap();
        check_groups("imgctl/cu126:latest", &labels_of("cu126"), &[]).unwrap();
    }

    #[cfg(feature = "torch")]
    #[test]
    fn a_recorded_history_is_the_fleet_the_gate_judges() {
        use crate::verify::fleet::history::{append, GpuSeen, Record, RECORD_VERSION};
        use crate::verify::fleet::NodeState;
        let dir = tempfile::tempdir().unwrap();
        let node = |name: &str, unix: f64, gpu: &str, sm: &str, driver: &str| Record {
            v: RECORD_VERSION,
            run: format!("r{unix}"),
            unix,
            node: name.into(),
            rank: 0,
            state: NodeState::Reported,
            passed: true,
            failing: vec![],
            driver: Some(driver.into()),
            gpus: vec![GpuSeen {
                index: 0,
                name: gpu.into(),
                sm: Some(sm.into()),
            }],
            figures: vec![],
        };
        // n1 was an H200 node, then was rebuilt as a B200 one: its latest counts.
        append(
            dir.path(),
            &[
                node("n1", 1.0, "NVIDIA H200", "sm_90", "550.54.15"),
                node("n2", 1.0, "NVIDIA H200", "sm_90", "550.54.15"),
                node("n1", 2.0, "NVIDIA B200", "sm_100", "570.133.20"),
            ],
        )
        .unwrap();
        let groups = fleet_of_history(dir.path()).unwrap();
        let models: Vec<(&str, u32)> = groups.iter().map(|g| (g.model.as_str(), g.nodes)).collect();
        assert_eq!(models, [("B200", 1), ("H200", 1)]);
        let e = check_groups("imgctl/cu126:latest", &labels_of("cu126"), &groups).unwrap_err();
        assert!(
            e.to_string()
                .contains("B200 (sm_100) is not in the image's arch list"),
            "{e}"
        );
        // A history of runs without GPUs is no fleet to judge.
        let bare = tempfile::tempdir().unwrap();
        let mut cpu = node("c1", 1.0, "x", "sm_90", "1");
        cpu.gpus.clear();
        append(bare.path(), &[cpu]).unwrap();
        let e = fleet_of_history(bare.path()).unwrap_err().to_string();
        assert!(
            e.contains("no node there recorded a GPU and a driver (1 node-run(s) read)"),
            "{e}"
        );
    }

    #[test]
    fn signed_facts_win_and_a_disagreement_with_the_labels_is_said() {
        let cu126 = crate::image::fit::of_profile("cu126").unwrap();
        let cu128 = crate::image::fit::of_profile("cu128").unwrap();
        let (f, from, none) = choose_facts(Some(cu126.clone()), Ok(cu126.clone())).unwrap();
        assert_eq!(
            (f.variant.as_str(), from, none),
            (
                "cu126",
                "the signed provenance (internalParameters.gpuFit)",
                None
            )
        );
        // Labels changed after signing (or another image's): the signed facts are judged, and it is said.
        let (f, _, said) = choose_facts(Some(cu126.clone()), Ok(cu128.clone())).unwrap();
        assert_eq!(f.variant, "cu126");
        assert!(said.unwrap().starts_with(
            "the image's labels say torch 2.7.0+cu128 (code sm_75…sm_120 +compute_120"
        ));
        let (f, from, _) = choose_facts(None, Ok(cu128)).unwrap();
        assert_eq!(
            (f.variant.as_str(), from),
            ("cu128", "the image's labels (bound to its digest)")
        );
        assert_eq!(
            choose_facts(None, Err("no label".into())).unwrap_err(),
            "no label"
        );
    }

    #[test]
    fn the_verdict_rule_wants_a_recent_passing_signed_verdict_from_each_model() {
        use crate::image::sign::bundle::{self, BUNDLE_MEDIA_TYPE};
        use crate::image::sign::dsse::Envelope;
        use crate::image::sign::{keys, KeyKind, PrivateKey};
        let dir = tempfile::tempdir().unwrap();
        keys::generate(dir.path(), KeyKind::EcdsaP256, None).unwrap();
        let key = PrivateKey::read(&dir.path().join(keys::PRIVATE_FILE), None).unwrap();
        let subject = format!("sha256:{}", "a".repeat(64));
        let verdict = |n: char, gpu: &str, age: Duration| -> Candidate {
            let at = humantime::format_rfc3339_seconds(SystemTime::now() - age).to_string();
            let statement = serde_json::json!({
                "_type": "https://in-toto.io/Statement/v1",
                "subject": [{"name": "image", "digest": {"sha256": "a".repeat(64)}}],
                "predicateType": crate::image::attest::VERIFY_PREDICATE,
                "predicate": {
                    "level": "full", "expectGpus": "1", "passed": true, "verifiedOn": at,
                    "gpus": [format!("NVIDIA {gpu} GPU-0 at 00000000:18:00.0")],
                    "results": [],
                },
            });
            let bytes = serde_json::to_vec(&statement).unwrap();
            let envelope =
                Envelope::sign(crate::image::attest::IN_TOTO_MEDIA_TYPE, &bytes, &key).unwrap();
            Candidate {
                manifest: format!("sha256:{}", n.to_string().repeat(64)),
                artifact_type: BUNDLE_MEDIA_TYPE.to_string(),
                bytes: bundle::to_bundle(&envelope, &key),
            }
        };
        let hour = Duration::from_secs(3600);
        let week = Duration::from_secs(7 * 24 * 3600);
        let found = [
            verdict('b', "H200", hour),
            verdict('c', "B200", 30 * 24 * hour),
        ];
        let group = |model: &str, cc| Group {
            model: model.into(),
            cc,
            driver: "570.133.20".into(),
            nodes: 4,
        };
        let groups = [
            group("H200", (9, 0)),
            group("B200", (10, 0)),
            group("H200", (9, 0)),
        ];
        let r = verdicts(&subject, &groups, &found, &[key.public().clone()], week);
        assert_eq!(r.len(), 2, "one reason per model: {r:#?}");
        assert_eq!(r[0].level, Level::Pass, "{r:#?}");
        assert_eq!(
            r[0].line,
            "H200 (sm_90): a signed verdict that passed, from a run on H200, at most 7days old"
        );
        assert_eq!(r[1].level, Level::Fail, "{r:#?}");
        assert!(
            r[1].line
                .starts_with("B200 (sm_100): no signed verdict that passed on B200 within 7days ("),
            "{}",
            r[1].line
        );
    }
}
