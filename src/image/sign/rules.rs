//! The rules of a [`Policy`] judged on accepted statements: which statement
//! satisfied which rule, or why none did. The rules of one predicate hold
//! together on one statement: a passed verdict of 0 GPUs and a failed one
//! of 8 do not together make a passed verdict of 8.
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::image::attest::{SLSA_PROVENANCE_V1, VERIFY_PREDICATE};

/// What a gate asks of an image. `--policy FILE` is this as YAML; each
/// field is also a flag.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The file's format version: 1.
    #[serde(default = "one")]
    pub version: u32,
    /// A signed verify verdict that passed.
    #[serde(default)]
    pub require_verify: bool,
    /// The verdict saw at least this many GPUs.
    #[serde(default)]
    pub min_gpus: Option<u32>,
    /// Every GPU the verdict saw is of this model (a word of its name: `H200`).
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// The verdict's level (`quick` or `full`).
    #[serde(default)]
    pub level: Option<String>,
    /// These check ids passed in the verdict.
    #[serde(default)]
    pub checks_passed: Vec<String>,
    /// The provenance's spec input has this digest (`sha256:…`).
    #[serde(default)]
    pub spec_digest: Option<String>,
    /// The provenance's builder id.
    #[serde(default)]
    pub builder_id: Option<String>,
    /// A signed statement of each of these predicate types.
    #[serde(default)]
    pub require_predicates: Vec<String>,
    /// The oldest a statement may be (`7d`, `12h`): its own time (the
    /// verdict's `verifiedOn`, the provenance's `finishedOn`, the SBOM's
    /// timestamp) against now.
    #[serde(default, with = "humantime_serde_opt")]
    pub max_age: Option<Duration>,
}

fn one() -> u32 {
    1
}

/// `max_age` as a humantime duration string in YAML.
mod humantime_serde_opt {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let text: Option<String> = Option::deserialize(d)?;
        text.map(|t| humantime::parse_duration(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// An accepted statement.
#[derive(Debug, Clone, Serialize)]
pub struct Accepted {
    /// Its manifest digest in the registry.
    pub manifest: String,
    /// Its predicate type.
    pub predicate_type: String,
    /// The key whose signature holds.
    pub key_id: String,
    /// Its time, when it has one (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The statement.
    #[serde(skip)]
    pub statement: Value,
}

/// One rule's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct RuleOutcome {
    /// The rule's stable id (`verify.passed`, `verify.min_gpus`, …).
    pub rule: String,
    /// Whether it holds.
    pub held: bool,
    /// The statement it was judged on (its manifest digest), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
    /// What was expected and found.
    pub detail: String,
}

impl Policy {
    /// Whether it has a rule beyond "a signed statement of the image".
    pub fn has_rules(&self) -> bool {
        self.require_verify
            || self.min_gpus.is_some()
            || self.gpu_model.is_some()
            || self.level.is_some()
            || !self.checks_passed.is_empty()
            || self.spec_digest.is_some()
            || self.builder_id.is_some()
            || !self.require_predicates.is_empty()
            || self.max_age.is_some()
    }
}

/// One rule: its id and its test on a statement (`Ok(found)` or `Err(why)`).
type Rule<'a> = (String, Box<dyn Fn(&Value) -> Result<String, String> + 'a>);

/// Judges every rule of `policy`.
pub fn judge(accepted: &[Accepted], policy: &Policy) -> Vec<RuleOutcome> {
    let mut out = Vec::new();
    let verify = verify_rules(policy);
    if !verify.is_empty() {
        out.extend(group(accepted, VERIFY_PREDICATE, "verify verdict", &verify));
    }
    let provenance = provenance_rules(policy);
    if !provenance.is_empty() {
        out.extend(group(
            accepted,
            SLSA_PROVENANCE_V1,
            "SLSA provenance",
            &provenance,
        ));
    }
    for p in &policy.require_predicates {
        let found = accepted.iter().find(|a| &a.predicate_type == p);
        out.push(RuleOutcome {
            rule: format!("predicate:{p}"),
            held: found.is_some(),
            statement: found.map(|a| a.manifest.clone()),
            detail: match found {
                Some(_) => "a signed statement".to_string(),
                None => "no signed statement of it".to_string(),
            },
        });
    }
    if out.is_empty() {
        // No rule given: the image must carry at least one signed statement.
        let first = accepted.first();
        out.push(RuleOutcome {
            rule: "signed".to_string(),
            held: first.is_some(),
            statement: first.map(|a| a.manifest.clone()),
            detail: match first {
                Some(a) => format!(
                    "{} signed by key {}",
                    a.predicate_type,
                    crate::output::head(&a.key_id, 16)
                ),
                None => "no signed statement of this image".to_string(),
            },
        });
    }
    out
}

/// The rules of one predicate: the first statement of it on which all hold
/// satisfies each; without one, each is judged on the newest (the last
/// listed) statement of it, or fails for want of one.
///
/// A failed verify verdict revokes every verdict not newer than it (#50's
/// doubt, settled in docs/deploy.md): a later re-verify that fails blocks
/// the image, one that passes again lets it through, and a later pass on
/// other hosts (0 GPUs, say) takes nothing from an earlier one. A failure
/// without a readable time revokes every pass, since none can be shown to
/// be newer.
fn group(accepted: &[Accepted], predicate: &str, what: &str, rules: &[Rule]) -> Vec<RuleOutcome> {
    let of: Vec<&Accepted> = accepted
        .iter()
        .filter(|a| a.predicate_type == predicate)
        .collect();
    let revoked_by = if predicate == VERIFY_PREDICATE {
        newest_failure(&of)
    } else {
        None
    };
    let standing = |a: &&&Accepted| match &revoked_by {
        None => true,
        Some((_, None)) => false,
        Some((_, Some(failed_at))) => time(a).is_some_and(|t| t > *failed_at),
    };
    let holds_all = of
        .iter()
        .filter(standing)
        .find(|a| rules.iter().all(|(_, test)| test(&a.statement).is_ok()));
    let judged: Option<&Accepted> = holds_all
        .copied()
        .or(revoked_by.map(|(a, _)| a))
        .or(of.last().copied());
    rules
        .iter()
        .map(|(id, test)| match judged {
            Some(a) => {
                let r = test(&a.statement);
                RuleOutcome {
                    rule: id.clone(),
                    held: r.is_ok(),
                    statement: Some(a.manifest.clone()),
                    detail: r.unwrap_or_else(|e| e),
                }
            }
            None => RuleOutcome {
                rule: id.clone(),
                held: false,
                statement: None,
                detail: format!("no signed {what} of this image"),
            },
        })
        .collect()
}

/// A statement's time, read (`None`: none, or unreadable).
fn time(a: &Accepted) -> Option<std::time::SystemTime> {
    a.time
        .as_deref()
        .and_then(|t| super::time::parse_time(t).ok())
}

/// The newest failed verdict among `of`, with its time (`None` inside when
/// a failure has no readable time: it then counts as the newest).
fn newest_failure<'a>(
    of: &[&'a Accepted],
) -> Option<(&'a Accepted, Option<std::time::SystemTime>)> {
    let failed = of
        .iter()
        .filter(|a| a.statement["predicate"]["passed"].as_bool() != Some(true));
    let mut newest: Option<(&Accepted, Option<std::time::SystemTime>)> = None;
    for a in failed {
        let t = time(a);
        newest = match newest {
            None => Some((a, t)),
            Some((_, None)) => newest,
            Some((_, Some(_))) if t.is_none() => Some((a, None)),
            Some((_, Some(n))) if t > Some(n) => Some((a, t)),
            keep => keep,
        };
    }
    newest
}

fn verify_rules(policy: &Policy) -> Vec<Rule<'_>> {
    let mut rules: Vec<Rule> = Vec::new();
    if policy.require_verify {
        // A verdict of a host with no GPU proves nothing of a GPU node: it
        // passes only where the policy asks for no GPU (min_gpus 0, #50).
        let zero_ok = policy.min_gpus == Some(0);
        rules.push((
            "verify.passed".into(),
            Box::new(move |s| {
                let seen = gpus(s).len();
                match s["predicate"]["passed"].as_bool() {
                    Some(true) if seen == 0 && !zero_ok => Err(format!(
                        "passed on 0 GPUs ({}): a verdict of a host without GPUs, which min_gpus 0 accepts",
                        summary(s)
                    )),
                    Some(true) => Ok(format!("passed on {seen} GPUs ({})", summary(s))),
                    _ => Err(format!("did not pass on {seen} GPUs ({})", summary(s))),
                }
            }),
        ));
    }
    if let Some(n) = policy.min_gpus {
        rules.push((
            "verify.min_gpus".into(),
            Box::new(move |s| {
                let seen = gpus(s).len();
                if seen >= n as usize {
                    Ok(format!("{seen} GPUs seen, at least {n} wanted"))
                } else {
                    Err(format!("{seen} GPUs seen, at least {n} wanted"))
                }
            }),
        ));
    }
    if let Some(model) = &policy.gpu_model {
        rules.push((
            "verify.gpu_model".into(),
            Box::new(move |s| {
                let all = gpus(s);
                let other: Vec<&str> = all
                    .iter()
                    .filter(|g| !g.split_whitespace().any(|w| w == model))
                    .copied()
                    .collect();
                if !all.is_empty() && other.is_empty() {
                    Ok(format!("every GPU is an {model} ({})", all.len()))
                } else if all.is_empty() {
                    Err(format!("no GPU seen, {model} wanted"))
                } else {
                    Err(format!("{model} wanted, saw {}", other.join("; ")))
                }
            }),
        ));
    }
    if let Some(level) = &policy.level {
        rules.push((
            "verify.level".into(),
            Box::new(move |s| {
                let got = s["predicate"]["level"].as_str().unwrap_or("(none)");
                if got == level {
                    Ok(format!("level {got}"))
                } else {
                    Err(format!("level {got}, {level} wanted"))
                }
            }),
        ));
    }
    for id in &policy.checks_passed {
        rules.push((
            format!("check:{id}"),
            Box::new(move |s| {
                let statuses: Vec<&str> = s["predicate"]["results"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| r["id"].as_str() == Some(id))
                    .filter_map(|r| r["status"].as_str())
                    .collect();
                if !statuses.is_empty() && statuses.iter().all(|st| st.eq_ignore_ascii_case("pass"))
                {
                    Ok(format!("{id} passed"))
                } else if statuses.is_empty() {
                    Err(format!("{id} was not run"))
                } else {
                    Err(format!("{id}: {}", statuses.join(", ")))
                }
            }),
        ));
    }
    rules
}

fn provenance_rules(policy: &Policy) -> Vec<Rule<'_>> {
    let mut rules: Vec<Rule> = Vec::new();
    if let Some(want) = &policy.spec_digest {
        rules.push((
            "provenance.spec_digest".into(),
            Box::new(move |s| {
                let got = s["predicate"]["buildDefinition"]["resolvedDependencies"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|d| d["name"].as_str() == Some("spec"))
                    .and_then(|d| d["digest"]["sha256"].as_str())
                    .map(|h| format!("sha256:{h}"))
                    .unwrap_or_else(|| "(none)".to_string());
                let want = if want.starts_with("sha256:") {
                    want.clone()
                } else {
                    format!("sha256:{want}")
                };
                if got == want {
                    Ok(format!("spec {got}"))
                } else {
                    Err(format!("spec {got}, {want} wanted"))
                }
            }),
        ));
    }
    if let Some(want) = &policy.builder_id {
        rules.push((
            "provenance.builder_id".into(),
            Box::new(move |s| {
                let got = s["predicate"]["runDetails"]["builder"]["id"]
                    .as_str()
                    .unwrap_or("(none)");
                if got == want {
                    Ok(format!("builder {got}"))
                } else {
                    Err(format!("builder {got}, {want} wanted"))
                }
            }),
        ));
    }
    rules
}

/// The GPUs a verdict saw (its `nvml.identity` messages).
fn gpus(s: &Value) -> Vec<&str> {
    s["predicate"]["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn summary(s: &Value) -> String {
    let sum = &s["predicate"]["summary"];
    format!(
        "{} pass, {} fail, {} error",
        sum["pass"].as_u64().unwrap_or(0),
        sum["fail"].as_u64().unwrap_or(0),
        sum["error"].as_u64().unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn verdict(manifest: &str, passed: bool, gpus: usize) -> Accepted {
        let names: Vec<String> = (0..gpus).map(|i| format!("NVIDIA H200 GPU-{i}")).collect();
        Accepted {
            manifest: manifest.into(),
            predicate_type: VERIFY_PREDICATE.into(),
            key_id: "k".repeat(64),
            time: None,
            statement: json!({"predicate": {"passed": passed, "gpus": names, "level": "full"}}),
        }
    }

    #[test]
    fn the_rules_of_a_verdict_hold_on_one_statement() {
        let policy = Policy {
            require_verify: true,
            min_gpus: Some(8),
            ..Policy::default()
        };
        // A passed verdict of no GPU and a failed one of 8: no verdict passes both.
        let split = [verdict("a", true, 0), verdict("b", false, 8)];
        let out = judge(&split, &policy);
        assert!(out.iter().any(|r| !r.held), "{out:?}");
        let both = [verdict("a", true, 0), verdict("c", true, 8)];
        let out = judge(&both, &policy);
        assert!(
            out.iter()
                .all(|r| r.held && r.statement.as_deref() == Some("c")),
            "{out:?}"
        );
        // A failed verdict revokes the passes not newer than it; a newer
        // pass stands; a later pass of 0 GPUs takes nothing from one of 8.
        let at = |a: Accepted, t: &str| Accepted {
            time: Some(t.into()),
            ..a
        };
        let earlier_pass = at(verdict("p1", true, 8), "2026-12-01T00:00:00Z");
        let failed = at(verdict("f", false, 8), "2026-12-02T00:00:00Z");
        let out = judge(&[earlier_pass.clone(), failed.clone()], &policy);
        assert!(
            out.iter()
                .any(|r| !r.held && r.statement.as_deref() == Some("f")),
            "{out:?}"
        );
        let again = at(verdict("p2", true, 8), "2026-12-03T00:00:00Z");
        let out = judge(&[earlier_pass.clone(), failed.clone(), again], &policy);
        assert!(
            out.iter()
                .all(|r| r.held && r.statement.as_deref() == Some("p2")),
            "{out:?}"
        );
        let cpu = at(verdict("cpu", true, 0), "2026-12-04T00:00:00Z");
        let out = judge(&[earlier_pass.clone(), cpu], &policy);
        assert!(
            out.iter()
                .all(|r| r.held && r.statement.as_deref() == Some("p1")),
            "{out:?}"
        );
        // A failure with no time revokes every pass.
        let untimed = verdict("u", false, 8);
        let out = judge(&[earlier_pass, untimed], &policy);
        assert!(out.iter().any(|r| !r.held), "{out:?}");
        // No rule: one signed statement is asked for.
        let none = judge(&[], &Policy::default());
        assert_eq!((none[0].rule.as_str(), none[0].held), ("signed", false));
    }
}
