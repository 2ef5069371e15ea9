//! A DSSE envelope as a Sigstore bundle v0.3 (sigstore/protobuf-specs,
//! `protos/sigstore_bundle.proto`, in its JSON form) and the annotations
//! its OCI referrer carries (cosign's `specs/BUNDLE_SPEC.md`: artifact type
//! and layer media type `application/vnd.dev.sigstore.bundle.v0.3+json`,
//! `dev.sigstore.bundle.content: dsse-envelope`,
//! `dev.sigstore.bundle.predicateType`).
use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::dsse::Envelope;
use super::{SignError, Signer};

/// The media type of a Sigstore bundle v0.3 (and the artifact type of its
/// referrer).
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The annotation saying what the bundle holds.
pub const CONTENT_ANNOTATION: &str = "dev.sigstore.bundle.content";
/// The annotation naming the in-toto predicate type inside.
pub const PREDICATE_TYPE_ANNOTATION: &str = "dev.sigstore.bundle.predicateType";

/// Wraps `envelope` into a bundle whose verification material is `signer`'s.
pub fn to_bundle(envelope: &Envelope, signer: &dyn Signer) -> Vec<u8> {
    let bundle = json!({
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": signer.material(),
        "dsseEnvelope": envelope,
    });
    let mut text = serde_json::to_string_pretty(&bundle).unwrap_or_default();
    text.push('\n');
    text.into_bytes()
}

/// The DSSE envelope of a bundle; anything but a v0.3 bundle holding one is
/// an error.
pub fn envelope_of(bytes: &[u8]) -> Result<Envelope, SignError> {
    let bad = |why: String| SignError::MalformedEnvelope { why };
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("not a bundle: {e}")))?;
    match value.get("mediaType").and_then(Value::as_str) {
        Some(BUNDLE_MEDIA_TYPE) => {}
        other => {
            return Err(bad(format!(
                "a bundle of media type {other:?}, not {BUNDLE_MEDIA_TYPE}"
            )))
        }
    }
    let envelope = value
        .get("dsseEnvelope")
        .ok_or_else(|| bad("the bundle holds no dsseEnvelope".to_string()))?;
    serde_json::from_value(envelope.clone()).map_err(|e| bad(e.to_string()))
}

/// The referrer's annotations of a bundle holding a statement of
/// `predicate_type`, made at `created` (RFC 3339) when known.
pub fn annotations(predicate_type: &str, created: Option<&str>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert(CONTENT_ANNOTATION.to_string(), "dsse-envelope".to_string());
    out.insert(
        PREDICATE_TYPE_ANNOTATION.to_string(),
        predicate_type.to_string(),
    );
    if let Some(c) = created {
        out.insert(
            "org.opencontainers.image.created".to_string(),
            c.to_string(),
        );
    }
    out
}
