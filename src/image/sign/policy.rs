//! The deploy gate: which attached statements of an image are trusted, and
//! whether they satisfy a policy.
//!
//! [`evaluate`] takes the referrers of one image manifest (their bytes, as
//! fetched), the public keys to trust and a [`Policy`]. A statement is
//! accepted only when it is a Sigstore bundle whose DSSE signature is one of
//! the keys' over the payload as it is now, whose subjects name the image's
//! manifest digest (a verdict of another, older image replayed onto this one
//! names that one's), and, under [`Policy::max_age`], which is young enough.
//! Every other one is refused with its reason ([`Refusal`]) and used for
//! nothing. The rules then read only accepted statements; the rules of one
//! predicate (the verify verdict's, the provenance's) must all hold on the
//! same statement.
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::Value;

pub use super::rules::{Accepted, Policy, RuleOutcome};

use super::bundle::{envelope_of, BUNDLE_MEDIA_TYPE};
use super::{PublicKey, SignError};
use crate::image::attest::{IN_TOTO_MEDIA_TYPE, SLSA_PROVENANCE_V1, VERIFY_PREDICATE};

/// One attached artifact as fetched.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its manifest digest in the registry.
    pub manifest: String,
    /// Its artifact type.
    pub artifact_type: String,
    /// Its one layer's bytes.
    pub bytes: Vec<u8>,
}

/// Why an attached statement is not trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Refusal {
    /// A plain in-toto statement, or an envelope without a signature.
    Unsigned,
    /// Signed by none of the keys.
    UnknownKey {
        /// The key ids it names.
        key_ids: Vec<String>,
    },
    /// A signature under a key's id that does not verify with it: changed
    /// after signing, or made by another key.
    Changed {
        /// The key.
        key_id: String,
    },
    /// Its subjects are other digests (another image's, or a replay of an
    /// older image's verdict).
    OtherSubject {
        /// The digests it names.
        digests: Vec<String>,
    },
    /// Older than the policy's `max_age`.
    Expired {
        /// Its time (RFC 3339).
        time: String,
        /// Its age in seconds.
        age_s: u64,
    },
    /// Made later than now, past a small clock skew ([`CLOCK_SKEW`]): a
    /// wrong clock or a forged time, never "young enough" (#50 M2).
    Future {
        /// Its time (RFC 3339).
        time: String,
    },
    /// No time to check `max_age` against.
    NoTime,
    /// Not a statement imgctl can read.
    Malformed {
        /// What is wrong.
        why: String,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unsigned => f.write_str("unsigned"),
            Refusal::UnknownKey { key_ids } => {
                write!(f, "signed by an unknown key ({})", short_ids(key_ids))
            }
            Refusal::Changed { key_id } => write!(
                f,
                "its signature does not verify with key {}: the payload was changed after signing, or another key signed it",
                short(key_id)
            ),
            Refusal::OtherSubject { digests } => write!(
                f,
                "its subject is another image ({}): a verdict of another or an older image",
                digests.join(", ")
            ),
            Refusal::Expired { time, age_s } => write!(
                f,
                "expired: made {time}, {} ago",
                humantime::format_duration(Duration::from_secs(*age_s))
            ),
            Refusal::Future { time } => write!(
                f,
                "made in the future ({time}): its signer's clock is wrong, or the time is forged"
            ),
            Refusal::NoTime => f.write_str("it carries no time to check the maximum age against"),
            Refusal::Malformed { why } => write!(f, "malformed: {why}"),
        }
    }
}

fn short(id: &str) -> &str {
    crate::output::head(id, 16)
}

fn short_ids(ids: &[String]) -> String {
    ids.iter().map(|i| short(i)).collect::<Vec<_>>().join(", ")
}

/// A refused statement.
#[derive(Debug, Clone, Serialize)]
pub struct Refused {
    /// Its manifest digest in the registry.
    pub manifest: String,
    /// What it claims to be (its predicate type, when readable).
    pub claims: String,
    /// Why it is refused.
    pub refusal: Refusal,
}

/// The gate's verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// The statements trusted.
    pub accepted: Vec<Accepted>,
    /// The statements refused, with their reasons.
    pub refused: Vec<Refused>,
    /// Every rule's outcome.
    pub rules: Vec<RuleOutcome>,
    /// Whether every rule holds.
    pub passed: bool,
}

/// Checks every candidate and evaluates `policy` on the accepted ones.
pub fn evaluate(
    subject_digest: &str,
    candidates: &[Candidate],
    keys: &[PublicKey],
    policy: &Policy,
    now: SystemTime,
) -> Evaluation {
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    for c in candidates {
        match accept(subject_digest, c, keys, policy, now) {
            Ok(a) => accepted.push(a),
            Err((claims, refusal)) => refused.push(Refused {
                manifest: c.manifest.clone(),
                claims,
                refusal,
            }),
        }
    }
    let rules = super::rules::judge(&accepted, policy);
    let passed = rules.iter().all(|r| r.held);
    Evaluation {
        accepted,
        refused,
        rules,
        passed,
    }
}

/// The predicate type a statement's bytes claim, for naming a refused one.
fn claims_of(statement: &[u8]) -> String {
    serde_json::from_slice::<Value>(statement)
        .ok()
        .and_then(|v| v["predicateType"].as_str().map(str::to_string))
        .unwrap_or_else(|| "(unreadable statement)".to_string())
}

fn accept(
    subject_digest: &str,
    c: &Candidate,
    keys: &[PublicKey],
    policy: &Policy,
    now: SystemTime,
) -> Result<Accepted, (String, Refusal)> {
    if c.artifact_type == IN_TOTO_MEDIA_TYPE {
        return Err((claims_of(&c.bytes), Refusal::Unsigned));
    }
    debug_assert_eq!(c.artifact_type, BUNDLE_MEDIA_TYPE);
    let malformed = |why: String| {
        (
            "(unreadable bundle)".to_string(),
            Refusal::Malformed { why },
        )
    };
    let envelope = envelope_of(&c.bytes).map_err(|e| malformed(e.to_string()))?;
    let claims = envelope
        .payload_bytes()
        .map(|p| claims_of(&p))
        .map_err(|e| malformed(e.to_string()))?;
    let verified = envelope.verify(keys).map_err(|e| {
        let refusal = match e {
            SignError::Unsigned => Refusal::Unsigned,
            SignError::UnknownKey { key_ids } => Refusal::UnknownKey { key_ids },
            SignError::BadSignature { key_id } => Refusal::Changed { key_id },
            other => Refusal::Malformed {
                why: other.to_string(),
            },
        };
        (claims.clone(), refusal)
    })?;
    if verified.payload_type != IN_TOTO_MEDIA_TYPE {
        return Err((
            claims,
            Refusal::Malformed {
                why: format!("payload type {}", verified.payload_type),
            },
        ));
    }
    let statement: Value = serde_json::from_slice(&verified.payload)
        .map_err(|e| (claims.clone(), Refusal::Malformed { why: e.to_string() }))?;
    let digests: Vec<String> = statement["subject"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["digest"]["sha256"].as_str())
        .map(|h| format!("sha256:{h}"))
        .collect();
    if !digests.iter().any(|d| d == subject_digest) {
        return Err((claims, Refusal::OtherSubject { digests }));
    }
    let time = time_of(&statement);
    if let Some(max) = policy.max_age {
        let Some(t) = &time else {
            return Err((claims, Refusal::NoTime));
        };
        let at = parse_time(t).map_err(|e| {
            (
                claims.clone(),
                Refusal::Malformed {
                    why: format!("its time {t}: {e}"),
                },
            )
        })?;
        if at > now + CLOCK_SKEW {
            return Err((claims, Refusal::Future { time: t.clone() }));
        }
        let age = now.duration_since(at).unwrap_or_default();
        if age > max {
            return Err((
                claims,
                Refusal::Expired {
                    time: t.clone(),
                    age_s: age.as_secs(),
                },
            ));
        }
    }
    Ok(Accepted {
        manifest: c.manifest.clone(),
        predicate_type: claims,
        key_id: verified.key_id,
        time,
        statement,
    })
}

/// How far ahead of this host's clock a statement's time may be (two
/// hosts' clocks differ a little): further is [`Refusal::Future`].
pub const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

pub use super::time::parse_time;

/// A statement's own time: the verdict's `verifiedOn`, the provenance's
/// `finishedOn`, the SBOM's `metadata.timestamp`.
fn time_of(statement: &Value) -> Option<String> {
    let p = &statement["predicate"];
    let t = match statement["predicateType"].as_str() {
        Some(VERIFY_PREDICATE) => &p["verifiedOn"],
        Some(SLSA_PROVENANCE_V1) => &p["runDetails"]["metadata"]["finishedOn"],
        _ => &p["metadata"]["timestamp"],
    };
    t.as_str().map(str::to_string)
}

#[cfg(test)]
mod refusal_tests {
    use super::*;

    #[test]
    fn times_with_an_offset_are_read_and_the_future_is_named() {
        let z = parse_time("2026-12-07T09:00:00Z").unwrap();
        assert_eq!(parse_time("2026-12-07T10:00:00+01:00").unwrap(), z);
        assert_eq!(parse_time("2026-12-07T04:30:00-04:30").unwrap(), z);
        assert!(parse_time("2026-12-07T10:00:00+25:00").is_err());
        let future = Refusal::Future {
            time: "2100-01-01T00:00:00Z".into(),
        }
        .to_string();
        assert!(
            future.starts_with("made in the future (2100-01-01T00:00:00Z)"),
            "{future}"
        );
    }

    #[test]
    fn a_multi_byte_keyid_is_shortened_not_a_panic() {
        // #50 M1: anyone who can push a referrer chose its keyid.
        let id = "ключ-ключ-ключ-ключ".to_string();
        let unknown = Refusal::UnknownKey {
            key_ids: vec![id.clone()],
        }
        .to_string();
        assert_eq!(unknown, "signed by an unknown key (ключ-клю)");
        let changed = Refusal::Changed { key_id: id }.to_string();
        assert!(
            changed.contains("does not verify with key ключ-клю:"),
            "{changed}"
        );
    }
}
