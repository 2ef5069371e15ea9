//! Images on the engine: inspect, tag, push, remove.
//!
//! It owns reading an image's id, size, labels and digests, resolving the
//! base images a Dockerfile names (`FROM`) to their digests for the build
//! report, tagging, and pushing with credentials from [`super::auth`]. It
//! prints nothing.
use std::collections::BTreeMap;

use anyhow::Context as _;
use bollard::query_parameters::{PushImageOptions, RemoveImageOptions, TagImageOptions};
use futures_util::StreamExt;
use serde::Serialize;

use super::build::engine_message;
use super::{auth, config};
use super::{DockerError, PushFailure};

/// What the build report needs of an image.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ImageFacts {
    /// The image id (`sha256:…`).
    pub id: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Registry digests (`name@sha256:…`), empty for a local-only image.
    pub repo_digests: Vec<String>,
    /// Uncompressed size in bytes.
    pub size: u64,
    /// Config labels.
    pub labels: BTreeMap<String, String>,
}

/// Inspects an image; `Ok(None)` when the engine has no such image.
pub async fn inspect(docker: &bollard::Docker, name: &str) -> anyhow::Result<Option<ImageFacts>> {
    match docker.inspect_image(name).await {
        Ok(img) => Ok(Some(ImageFacts {
            id: img.id.unwrap_or_default(),
            tags: img.repo_tags.unwrap_or_default(),
            repo_digests: img.repo_digests.unwrap_or_default(),
            size: img.size.unwrap_or(0).max(0) as u64,
            labels: img
                .config
                .and_then(|c| c.labels)
                .map(|l| l.into_iter().collect())
                .unwrap_or_default(),
        })),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(None),
        Err(e) => Err(anyhow::Error::new(e).context(format!("inspecting image {name}"))),
    }
}

/// A base image named by a `FROM` line, resolved on the engine.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BaseImage {
    /// The reference as the Dockerfile names it.
    pub reference: String,
    /// `name@sha256:…` from the registry when the engine knows one, else the
    /// local image id (an imported or locally built base has no registry digest).
    pub digest: Option<String>,
    /// The local image id, when present.
    pub id: Option<String>,
}

/// The external images a Dockerfile builds `FROM`, in order, without stage
/// names, `scratch` and references built from build args.
pub fn from_images(dockerfile: &str) -> Vec<String> {
    let mut stages: Vec<String> = Vec::new();
    let mut images: Vec<String> = Vec::new();
    for line in dockerfile.lines() {
        let mut words = line.split_whitespace();
        if !words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM")) {
            continue;
        }
        let rest: Vec<&str> = words.filter(|w| !w.starts_with("--")).collect();
        let Some(reference) = rest.first() else {
            continue;
        };
        let reference = reference.to_string();
        let external = !(reference.eq_ignore_ascii_case("scratch")
            || reference.contains('$')
            || stages.contains(&reference.to_ascii_lowercase())
            || images.contains(&reference));
        if let (Some(kw), Some(name)) = (rest.get(1), rest.get(2)) {
            if kw.eq_ignore_ascii_case("AS") {
                stages.push(name.to_ascii_lowercase());
            }
        }
        if external {
            images.push(reference);
        }
    }
    images
}

/// Resolves each base image to its digest (see [`BaseImage::digest`]).
pub async fn resolve_bases(
    docker: &bollard::Docker,
    references: &[String],
) -> anyhow::Result<Vec<BaseImage>> {
    let mut out = Vec::new();
    for reference in references {
        let facts = inspect(docker, reference).await?;
        out.push(BaseImage {
            reference: reference.clone(),
            digest: facts
                .as_ref()
                .map(|f| base_digest(reference, &f.repo_digests, &f.id)),
            id: facts.map(|f| f.id),
        });
    }
    Ok(out)
}

/// The digest a base image is recorded by: its own repository's registry
/// digest (`name@sha256:…`), else its local id. Never another
/// repository's: pushing the base elsewhere (a mirror, a test registry)
/// adds repo digests in an order of the engine's, and the label, so the
/// image, would change with it.
pub fn base_digest(reference: &str, repo_digests: &[String], id: &str) -> String {
    let familiar = |name: &str| -> String {
        let name = name.strip_prefix("docker.io/").unwrap_or(name);
        name.strip_prefix("library/").unwrap_or(name).to_string()
    };
    let name = familiar(split_tag(reference.split('@').next().unwrap_or(reference)).0);
    repo_digests
        .iter()
        .find(|d| {
            d.split_once('@')
                .is_some_and(|(repo, _)| familiar(repo) == name)
        })
        .cloned()
        .unwrap_or_else(|| id.to_string())
}

/// Splits `name[:tag]` (a registry port is not a tag) into name and tag.
pub fn split_tag(reference: &str) -> (&str, &str) {
    let last_slash = reference.rfind('/').map_or(0, |i| i + 1);
    match reference[last_slash..].rfind(':') {
        Some(i) => (
            &reference[..last_slash + i],
            &reference[last_slash + i + 1..],
        ),
        None => (reference, "latest"),
    }
}

/// Checks a tag with the engine's reference grammar ([`crate::image_ref`]);
/// a tag names no digest.
pub fn validate_tag(reference: &str) -> Result<(), DockerError> {
    let parsed = crate::image_ref::parse(reference).map_err(|why| DockerError::InvalidTag {
        reference: reference.to_string(),
        why,
    })?;
    if parsed.digest.is_some() {
        return Err(DockerError::TagWithDigest {
            reference: reference.to_string(),
        });
    }
    Ok(())
}

/// Adds `reference` as a tag of `image_id`.
pub async fn tag(docker: &bollard::Docker, image_id: &str, reference: &str) -> anyhow::Result<()> {
    let (repo, tag) = split_tag(reference);
    docker
        .tag_image(
            image_id,
            Some(TagImageOptions {
                repo: Some(repo.to_string()),
                tag: Some(tag.to_string()),
            }),
        )
        .await
        .with_context(|| format!("tagging {image_id} as {reference}"))
}

/// Removes an image (by id or tag), forcing when containers still use it;
/// a missing image is not an error.
pub async fn remove(docker: &bollard::Docker, name: &str) -> anyhow::Result<()> {
    let opts = RemoveImageOptions {
        force: true,
        noprune: false,
        ..Default::default()
    };
    match docker.remove_image(name, Some(opts), None).await {
        Ok(_)
        | Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context(format!("removing image {name}"))),
    }
}

/// What a push has done so far, read from the engine's progress messages
/// (#53 F7: 6.6 GB went by with nothing said for 9 minutes). The engine's
/// messages name their layer, but the API's typed stream keeps only the
/// status and the byte counts, so a layer in flight is told apart by its
/// size (two layers of one exact size count once, which only lowers the
/// figures).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PushTally {
    /// Layers the engine announced (`Preparing`).
    pub layers: usize,
    /// Layers done: pushed, already in the registry, or mounted from
    /// another of its repositories.
    pub done: usize,
    /// Bytes sent of each layer that has sent any, by its size.
    sent: BTreeMap<i64, i64>,
}

impl PushTally {
    /// Takes one progress message (`status`, with its byte counts when it
    /// has them). Returns whether it finished a layer.
    pub fn note(&mut self, status: &str, current: Option<i64>, total: Option<i64>) -> bool {
        match status {
            "Preparing" => self.layers += 1,
            "Pushed" | "Layer already exists" => {
                self.done += 1;
                return true;
            }
            s if s.starts_with("Mounted from") => {
                self.done += 1;
                return true;
            }
            "Pushing" => {
                if let (Some(c), Some(t)) = (current, total.filter(|t| *t > 0)) {
                    let seen = self.sent.entry(t).or_default();
                    *seen = (*seen).max(c.clamp(0, t));
                }
            }
            _ => {}
        }
        false
    }
    /// Bytes sent, and the size of the layers they belong to.
    pub fn bytes(&self) -> (u64, u64) {
        let sent = self.sent.values().map(|b| *b as u64).sum();
        let of = self.sent.keys().map(|t| *t as u64).sum();
        (sent, of)
    }
}

/// Pushes `reference` with the docker config's credentials for its registry;
/// `on_status` receives each of the engine's progress lines with the push's
/// tally so far and whether that line finished a layer.
pub async fn push(
    docker: &bollard::Docker,
    reference: &str,
    on_status: &mut (dyn FnMut(&str, &PushTally, bool) + Send),
) -> anyhow::Result<()> {
    let registry = auth::registry_of(reference);
    let config_path = config::config_path();
    let config = match &config_path {
        Some(p) => config::load_config(p)?,
        None => config::DockerConfig::default(),
    };
    let auth::Lookup {
        credentials,
        helper,
    } = config.credentials_for(&registry)?;
    let (name, tag) = split_tag(reference);
    let mut stream = docker.push_image(
        name,
        Some(PushImageOptions {
            tag: Some(tag.to_string()),
            platform: None,
        }),
        credentials.clone(),
    );
    let mut tally = PushTally::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(info) => {
                if let Some(status) = info.status {
                    let (current, total) = info
                        .progress_detail
                        .map_or((None, None), |d| (d.current, d.total));
                    let finished = tally.note(&status, current, total);
                    on_status(&status, &tally, finished);
                }
            }
            Err(e) => {
                // The engine sent more than imgctl reads: no registry's fault.
                if let Some(too_much) = super::transport::too_much(&e) {
                    return Err(DockerError::EngineTooMuch(too_much).into());
                }
                return Err(DockerError::Push(Box::new(PushFailure {
                    reference: reference.to_string(),
                    registry,
                    name: name.to_string(),
                    config: config_path
                        .as_ref()
                        .map_or("the docker config".to_string(), |p| p.display().to_string()),
                    had_credentials: credentials.is_some(),
                    helper,
                    message: engine_message(&e),
                }))
                .into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_is_tallied_by_layer_and_bytes() {
        // What Docker 20.10 and 28 send for a push of three layers, one of
        // them already in the registry.
        let mut t = PushTally::default();
        let steps: [(&str, Option<i64>, Option<i64>); 10] = [
            (
                "The push refers to repository [127.0.0.1:5000/x]",
                None,
                None,
            ),
            ("Preparing", None, None),
            ("Preparing", None, None),
            ("Preparing", None, None),
            ("Waiting", None, None),
            ("Layer already exists", None, None),
            ("Pushing", Some(512), Some(2048)),
            ("Pushing", Some(1 << 20), Some(4 << 20)),
            ("Pushing", Some(2048), Some(2048)),
            ("Pushed", None, None),
        ];
        let finished: Vec<bool> = steps.iter().map(|(s, c, n)| t.note(s, *c, *n)).collect();
        assert_eq!(finished.iter().filter(|f| **f).count(), 2);
        assert_eq!((t.layers, t.done), (3, 2));
        assert_eq!(t.bytes(), (2048 + (1 << 20), 2048 + (4 << 20)));
        // A count that goes back (a retried layer) keeps the most sent.
        t.note("Pushing", Some(10), Some(4 << 20));
        assert_eq!(t.bytes().0, 2048 + (1 << 20));
        assert!(t.note("Mounted from library/busybox", None, None));
        assert_eq!(t.done, 3);
    }

    #[test]
    fn finds_external_from_images() {
        let df = "# comment\nFROM --platform=linux/amd64 nvidia/cuda:12.4.1-base AS base\n\
                  RUN true\nFROM base AS final\nfrom scratch\nFROM ${BASE}\n\
                  FROM imgctl-test/busybox:latest\n";
        assert_eq!(
            from_images(df),
            vec!["nvidia/cuda:12.4.1-base", "imgctl-test/busybox:latest"]
        );
    }

    #[test]
    fn a_base_is_recorded_by_its_own_repositorys_digest_or_its_id() {
        let digests = [
            "127.0.0.1:5000/mirror/cuda@sha256:aaa".to_string(),
            "nvidia/cuda@sha256:bbb".to_string(),
        ];
        assert_eq!(
            base_digest("nvidia/cuda:12.4.1-base", &digests, "sha256:id"),
            "nvidia/cuda@sha256:bbb"
        );
        assert_eq!(
            base_digest("docker.io/nvidia/cuda:12.4.1-base", &digests, "sha256:id"),
            "nvidia/cuda@sha256:bbb"
        );
        // Pushed elsewhere only: the id, not the other repository's digest.
        assert_eq!(
            base_digest("imgctl-test/busybox:latest", &digests[..1], "sha256:id"),
            "sha256:id"
        );
        assert_eq!(
            base_digest(
                "ubuntu@sha256:ccc",
                &["ubuntu@sha256:ccc".to_string()],
                "sha256:id"
            ),
            "ubuntu@sha256:ccc"
        );
    }

    #[test]
    fn splits_tags_without_confusing_registry_ports() {
        assert_eq!(split_tag("imgctl:dev"), ("imgctl", "dev"));
        assert_eq!(split_tag("imgctl"), ("imgctl", "latest"));
        assert_eq!(
            split_tag("localhost:5000/me/imgctl"),
            ("localhost:5000/me/imgctl", "latest")
        );
        assert_eq!(
            split_tag("localhost:5000/me/imgctl:1.0"),
            ("localhost:5000/me/imgctl", "1.0")
        );
    }

    #[test]
    fn validates_tags() {
        for ok in [
            "imgctl",
            "imgctl/cu124:dev",
            "localhost:5000/a/b:1.0",
            "a-b_c.d:x.Y-z",
        ] {
            assert!(validate_tag(ok).is_ok(), "{ok}");
        }
        let digest = format!("a@sha256:{}", "0".repeat(64));
        for bad in ["Imgctl", "a:b:c", "", "a b", "a:-x", "-a", &digest] {
            assert!(validate_tag(bad).is_err(), "{bad}");
        }
    }
}
