//! An image's labels read from its registry without pulling it: the
//! manifest (for an index, its linux/amd64 entry), then the config blob,
//! each checked against its digest, so the labels are the ones the
//! manifest digest names (what the fit gate judges, `verify-image --fleet`).
use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context as _};

use super::http::Call;
use super::manifest::{self, DOCKER_MANIFEST_LIST, MANIFEST_ACCEPT, OCI_INDEX};
use super::Repository;

/// The most bytes of an image config imgctl reads (a CUDA image's is ~20 KiB).
const MAX_CONFIG: u64 = 4 << 20;

impl Repository {
    /// The labels of the image manifest `digest` (`sha256:…`): its config's
    /// `config.Labels`. An index is followed to its linux/amd64 manifest.
    pub async fn image_labels(&self, digest: &str) -> anyhow::Result<BTreeMap<String, String>> {
        let mut digest = manifest::check_digest(digest).map(|_| digest.to_string())?;
        for _ in 0..2 {
            let what = format!("the manifest {digest}");
            let reply = self.get_manifest(&digest, MANIFEST_ACCEPT).await?;
            if !reply.status.is_success() {
                return Err(self.transport.refused(&what, &reply));
            }
            manifest::verify_digest(&digest, &reply.body)
                .with_context(|| format!("{what} from registry {}", self.registry()))?;
            let media = reply.header("Content-Type").unwrap_or_default().to_string();
            let value: serde_json::Value = serde_json::from_slice(&reply.body).map_err(|e| {
                anyhow!("{what} from registry {} is not JSON: {e}", self.registry())
            })?;
            let is_index = value.get("manifests").is_some()
                || media.starts_with(OCI_INDEX)
                || media.starts_with(DOCKER_MANIFEST_LIST);
            if is_index {
                digest = amd64_entry(&value).with_context(|| format!("{what} is an index"))?;
                continue;
            }
            let m = manifest::parse_manifest(&reply.body)
                .map_err(|e| anyhow!("{what} from registry {}: {e}", self.registry()))?;
            return self.config_labels(&m.config.digest, m.config.size).await;
        }
        bail!("the index of {digest} names another index: imgctl reads one level")
    }

    async fn config_labels(
        &self,
        digest: &str,
        size: u64,
    ) -> anyhow::Result<BTreeMap<String, String>> {
        if size > MAX_CONFIG {
            bail!("the image config {digest} is {size} bytes, over imgctl's {MAX_CONFIG}");
        }
        let url = format!("/v2/{}/blobs/{digest}", self.name());
        let mut call = Call::get(&url);
        call.limit = usize::try_from(size).unwrap_or(usize::MAX).max(1);
        let reply = self.transport.send(call).await?;
        if !reply.status.is_success() {
            return Err(self
                .transport
                .refused(&format!("the image config {digest}"), &reply));
        }
        manifest::verify_digest(digest, &reply.body)
            .with_context(|| format!("the image config from registry {}", self.registry()))?;
        labels_of_config(&reply.body)
    }
}

/// `config.Labels` of an image config (none is an empty map).
pub fn labels_of_config(bytes: &[u8]) -> anyhow::Result<BTreeMap<String, String>> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| anyhow!("the image config is not JSON: {e}"))?;
    match v.pointer("/config/Labels") {
        None | Some(serde_json::Value::Null) => Ok(BTreeMap::new()),
        Some(l) => serde_json::from_value(l.clone())
            .map_err(|e| anyhow!("the image config's labels are not strings: {e}")),
    }
}

/// The digest of an index's linux/amd64 manifest.
fn amd64_entry(index: &serde_json::Value) -> anyhow::Result<String> {
    let entries = manifest::index_entries(index)?;
    let raw = index
        .get("manifests")
        .and_then(|m| m.as_array())
        .cloned()
        .unwrap_or_default();
    for (d, v) in entries.iter().zip(raw) {
        let os = v.pointer("/platform/os").and_then(|x| x.as_str());
        let arch = v.pointer("/platform/architecture").and_then(|x| x.as_str());
        if os == Some("linux") && arch == Some("amd64") {
            return Ok(d.digest.clone());
        }
    }
    bail!("it has no linux/amd64 manifest")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_read_from_the_config_and_an_index_gives_its_amd64_entry() {
        let config = br#"{"architecture":"amd64","config":{"Labels":{"io.imgctl.torch":"2.7.0"}}}"#;
        assert_eq!(
            labels_of_config(config).unwrap()["io.imgctl.torch"],
            "2.7.0"
        );
        assert!(labels_of_config(br#"{"config":{}}"#).unwrap().is_empty());
        assert!(labels_of_config(br#"{"config":{"Labels":{"a":1}}}"#).is_err());
        let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let index = serde_json::json!({"manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d('a'), "size": 1,
             "platform": {"os": "linux", "architecture": "arm64"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d('b'), "size": 1,
             "platform": {"os": "linux", "architecture": "amd64"}},
        ]});
        assert_eq!(amd64_entry(&index).unwrap(), d('b'));
        let none = serde_json::json!({"manifests": []});
        assert!(amd64_entry(&none)
            .unwrap_err()
            .to_string()
            .contains("no linux/amd64"));
    }
}
