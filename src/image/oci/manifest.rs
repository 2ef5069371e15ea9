//! The documents of OCI image spec 1.1 that referrers need: descriptors, the
//! artifact manifest imgctl pushes (an image manifest with `artifactType`, the
//! empty config and one layer, `subject` naming the image), and the image
//! index the referrers API returns and the referrers tag schema stores under
//! `sha256-<hex>`.
use std::collections::BTreeMap;

use anyhow::{anyhow, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// An OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// A docker v2 schema 2 manifest.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// A docker manifest list.
pub const DOCKER_MANIFEST_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The empty descriptor's media type (OCI 1.1): the config of an artifact.
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The empty blob: `{}`.
pub const EMPTY_BLOB: &[u8] = b"{}";
/// `sha256` of [`EMPTY_BLOB`].
pub const EMPTY_DIGEST: &str =
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
/// The manifest media types imgctl reads, as an `Accept` header.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// A content descriptor (OCI image spec): what a manifest, an index or a
/// referrers list says about one piece of content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The content's media type.
    pub media_type: String,
    /// `sha256:<hex>` of the content's bytes.
    pub digest: String,
    /// The content's length in bytes.
    pub size: u64,
    /// An artifact manifest's type (its `artifactType`), in an index entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// Annotations (an artifact manifest's own, in an index entry).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// The descriptor of `bytes` of `media_type` (no artifact type, no
    /// annotations).
    pub fn of(media_type: &str, bytes: &[u8]) -> Self {
        Descriptor {
            media_type: media_type.to_string(),
            digest: sha256_digest(bytes),
            size: bytes.len() as u64,
            artifact_type: None,
            annotations: BTreeMap::new(),
        }
    }
}

/// The parts of an image manifest imgctl reads (unknown fields ignored).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Its media type, when it says (docker's and OCI's do).
    #[serde(default)]
    pub media_type: Option<String>,
    /// Its artifact type, when it is an artifact.
    #[serde(default)]
    pub artifact_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layer blobs.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
    /// The manifest this one refers to.
    #[serde(default)]
    pub subject: Option<Descriptor>,
    /// Its annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in hash {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Checks that `digest` is `sha256:<64 lower-case hex>`.
pub fn check_digest(digest: &str) -> anyhow::Result<&str> {
    let hex = digest.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(hex)
    } else {
        bail!(
            "'{}' is not a sha256:<64 hex digits> digest",
            digest.escape_debug()
        )
    }
}

/// Checks that `bytes` hash to `digest` (a sha256 digest).
pub fn verify_digest(digest: &str, bytes: &[u8]) -> anyhow::Result<()> {
    check_digest(digest)?;
    let actual = sha256_digest(bytes);
    if actual != digest {
        bail!("the content of {digest} hashes to {actual}");
    }
    Ok(())
}

/// The referrers tag schema's tag for `subject_digest`:
/// `sha256:abc…` → `sha256-abc…`.
pub fn fallback_tag(subject_digest: &str) -> anyhow::Result<String> {
    Ok(format!("sha256-{}", check_digest(subject_digest)?))
}

/// The bytes of the artifact manifest: `artifactType`, the empty config, one
/// `layer`, `subject`, and `annotations` (when any).
pub fn artifact_manifest(
    artifact_type: &str,
    layer: &Descriptor,
    subject: &Descriptor,
    annotations: &BTreeMap<String, String>,
) -> Vec<u8> {
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": Descriptor::of(EMPTY_MEDIA_TYPE, EMPTY_BLOB),
        "layers": [layer],
        "subject": subject,
    });
    if !annotations.is_empty() {
        manifest["annotations"] = serde_json::json!(annotations);
    }
    serde_json::to_vec(&manifest).expect("a manifest serializes")
}

/// The start of the Sigstore bundles' media types
/// (`application/vnd.dev.sigstore.bundle.v0.3+json`): [`Repository::push_artifact`]
/// gives such a layer a [`TITLE_ANNOTATION`].
///
/// [`Repository::push_artifact`]: super::Repository::push_artifact
pub const SIGSTORE_BUNDLE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";

/// The OCI annotation of a layer's suggested file name
/// (`sha256-HEX.sigstore.json` for a bundle, as cosign's BUNDLE_SPEC.md says).
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// An empty OCI image index.
pub fn empty_index() -> serde_json::Value {
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [],
    })
}

/// Parses an image index (the referrers API's reply or the fallback tag's
/// content); `Err` says what is wrong with it.
pub fn parse_index(bytes: &[u8]) -> anyhow::Result<serde_json::Value> {
    let index: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| anyhow!("it is not JSON: {e}"))?;
    match index.get("mediaType").and_then(|m| m.as_str()) {
        Some(OCI_INDEX) | None => {}
        Some(other) => bail!("it is a {other}, not an OCI image index"),
    }
    if !index.get("manifests").is_some_and(|m| m.is_array()) {
        bail!("it has no manifests list");
    }
    Ok(index)
}

/// The descriptors of an index's `manifests`, each checked
/// ([`check_descriptor`]): a registry's list is outside input, and a digest
/// that is not `sha256:<hex>` is refused here, before anything uses it.
pub fn index_entries(index: &serde_json::Value) -> anyhow::Result<Vec<Descriptor>> {
    let manifests = index.get("manifests").cloned().unwrap_or_default();
    let entries: Vec<Descriptor> = serde_json::from_value(manifests)
        .map_err(|e| anyhow!("its manifests list is not descriptors: {e}"))?;
    for (i, d) in entries.iter().enumerate() {
        check_descriptor(d).map_err(|e| anyhow!("its manifests[{i}]: {e}"))?;
    }
    Ok(entries)
}

/// Parses an image manifest as a registry sent it, every descriptor in it
/// (config, layers, subject) checked ([`check_descriptor`]); `Err` says what
/// is wrong with it.
pub fn parse_manifest(bytes: &[u8]) -> anyhow::Result<Manifest> {
    let m: Manifest =
        serde_json::from_slice(bytes).map_err(|e| anyhow!("it is not an image manifest: {e}"))?;
    check_descriptor(&m.config).map_err(|e| anyhow!("its config: {e}"))?;
    for (i, l) in m.layers.iter().enumerate() {
        check_descriptor(l).map_err(|e| anyhow!("its layers[{i}]: {e}"))?;
    }
    if let Some(s) = &m.subject {
        check_descriptor(s).map_err(|e| anyhow!("its subject: {e}"))?;
    }
    Ok(m)
}

/// Checks a descriptor from a registry before anything uses it: its digest
/// is `sha256:<64 lower-case hex>` ([`check_digest`]), so it can be sliced,
/// put in a URL or a file name, and compared.
pub fn check_descriptor(d: &Descriptor) -> anyhow::Result<()> {
    check_digest(&d.digest)
        .map(|_| ())
        .map_err(|e| anyhow!("the digest {e}"))
}

/// Adds `entry` to `index`'s manifests, replacing an entry of the same
/// digest (in place); other entries are kept as they are, fields imgctl does
/// not know included.
pub fn merge_into_index(index: &mut serde_json::Value, entry: &Descriptor) {
    let value = serde_json::to_value(entry).expect("a descriptor serializes");
    if !index.get("manifests").is_some_and(|m| m.is_array()) {
        index["manifests"] = serde_json::json!([]);
    }
    let manifests = index["manifests"].as_array_mut().expect("an array");
    match manifests
        .iter_mut()
        .find(|m| m.get("digest").and_then(|d| d.as_str()) == Some(entry.digest.as_str()))
    {
        Some(existing) => *existing = value,
        None => manifests.push(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Descriptor {
        Descriptor::of(OCI_MANIFEST, b"{\"image\":1}")
    }

    #[test]
    fn the_empty_descriptor() {
        assert_eq!(sha256_digest(EMPTY_BLOB), EMPTY_DIGEST);
        let d = Descriptor::of(EMPTY_MEDIA_TYPE, EMPTY_BLOB);
        assert_eq!(d.size, 2);
    }

    #[test]
    fn fallback_tags() {
        let hex = "ab".repeat(32);
        assert_eq!(
            fallback_tag(&format!("sha256:{hex}")).unwrap(),
            format!("sha256-{hex}")
        );
        assert!(fallback_tag("sha256:abc").is_err());
        assert!(fallback_tag(&format!("sha512:{hex}")).is_err());
        assert!(fallback_tag(&format!("sha256:{}", "AB".repeat(32))).is_err());
    }

    #[test]
    fn the_artifact_manifest() {
        let layer = Descriptor::of("application/vnd.cyclonedx+json", b"{\"bom\":1}");
        let mut annotations = BTreeMap::new();
        annotations.insert("org.example.k".to_string(), "v".to_string());
        let bytes = artifact_manifest(
            "application/vnd.cyclonedx+json",
            &layer,
            &subject(),
            &annotations,
        );
        let m: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(m["schemaVersion"], 2);
        assert_eq!(m["mediaType"], OCI_MANIFEST);
        assert_eq!(m["artifactType"], "application/vnd.cyclonedx+json");
        assert_eq!(
            m["config"],
            serde_json::json!({"mediaType": EMPTY_MEDIA_TYPE, "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "size": 2})
        );
        assert_eq!(m["layers"][0]["digest"], layer.digest.as_str());
        assert_eq!(m["layers"][0]["size"], 9);
        assert_eq!(m["layers"].as_array().unwrap().len(), 1);
        assert_eq!(m["subject"]["digest"], subject().digest.as_str());
        assert_eq!(m["subject"]["mediaType"], OCI_MANIFEST);
        assert_eq!(m["annotations"]["org.example.k"], "v");
        // No created time of its own: the same input gives the same bytes.
        assert!(m["annotations"]
            .get("org.opencontainers.image.created")
            .is_none());
        assert_eq!(
            bytes,
            artifact_manifest(
                "application/vnd.cyclonedx+json",
                &layer,
                &subject(),
                &annotations
            )
        );
        // Without annotations there is no annotations field; no empty ones anywhere.
        let bare = artifact_manifest("t", &layer, &subject(), &BTreeMap::new());
        let m: serde_json::Value = serde_json::from_slice(&bare).unwrap();
        assert!(m.get("annotations").is_none());
        assert!(m["subject"].get("artifactType").is_none());
        let parsed: Manifest = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(parsed.subject, Some(subject()));
        assert_eq!(parsed.layers, vec![layer]);
    }

    #[test]
    fn merging_replaces_a_same_digest_entry() {
        let mut index = empty_index();
        let a = Descriptor {
            artifact_type: Some("a".into()),
            ..Descriptor::of(OCI_MANIFEST, b"a")
        };
        let b = Descriptor::of(OCI_MANIFEST, b"b");
        merge_into_index(&mut index, &a);
        merge_into_index(&mut index, &b);
        // An entry with fields imgctl does not model keeps them.
        index["manifests"][1]["platform"] = serde_json::json!({"os": "linux"});
        let mut a2 = a.clone();
        a2.annotations.insert("k".into(), "v".into());
        merge_into_index(&mut index, &a2);
        let entries = index_entries(&index).unwrap();
        assert_eq!(entries, vec![a2, b]);
        assert_eq!(index["manifests"][1]["platform"]["os"], "linux");
        assert_eq!(index["mediaType"], OCI_INDEX);
    }

    #[test]
    fn indexes_parse_or_say_why_not() {
        let bytes = serde_json::to_vec(&empty_index()).unwrap();
        assert!(index_entries(&parse_index(&bytes).unwrap())
            .unwrap()
            .is_empty());
        let e = parse_index(
            br#"{"mediaType":"application/vnd.oci.image.manifest.v1+json","manifests":[]}"#,
        );
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("not an OCI image index"));
        assert!(parse_index(b"nope").is_err());
        assert!(parse_index(br#"{"schemaVersion":2}"#).is_err());
    }

    #[test]
    fn digests_verify() {
        assert!(verify_digest(EMPTY_DIGEST, b"{}").is_ok());
        let e = verify_digest(EMPTY_DIGEST, b"{ }").unwrap_err().to_string();
        assert!(e.contains("hashes to sha256:"), "{e}");
    }
}
