//! A small OCI distribution client for referrers (OCI distribution and image
//! spec 1.1): imgctl pushes an image's SBOM and in-toto statements as
//! artifacts whose `subject` is the image's manifest, lists them and reads
//! them back.
//!
//! An artifact is an OCI image manifest with an `artifactType`, the empty
//! config (`{}`, [`manifest::EMPTY_MEDIA_TYPE`]), one layer holding the
//! content, and a `subject`. A registry that implements the referrers API
//! (`GET /v2/<name>/referrers/<digest>`) lists it by itself, and says so by
//! answering the manifest PUT with an `OCI-Subject` header. For one that does
//! not (a 404 from the API: distribution 2.8, Docker Hub), the referrers tag
//! schema is kept up to date: the tag `sha256-<hex of the subject digest>`
//! holds an OCI image index of the referrers' descriptors. Its update is read,
//! change, write: concurrent pushes of referrers of one subject would lose
//! an entry, so the write carries `If-Match` with the tag's `ETag` and is
//! read back, and made again when another push undid it.
//!
//! [`mod@reference`] reads an image reference by docker's rules, [`auth`] reads
//! challenges and makes headers, [`http`] speaks to the registry, and
//! [`manifest`] makes and reads the documents.
//!
//! Part: the build wing (`docs/architecture.md`).
use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context as _};
use bollard::auth::DockerCredentials;
use hyper::body::Bytes;
use hyper::{Method, StatusCode};

pub mod auth;
mod config;
pub mod http;
pub mod manifest;
pub mod reference;
pub mod tls;

pub use manifest::Descriptor;

use http::{Call, Reply, Transport};
use manifest::{EMPTY_BLOB, EMPTY_MEDIA_TYPE, MANIFEST_ACCEPT, OCI_INDEX, OCI_MANIFEST};

/// The header a registry that processed a manifest's `subject` answers
/// the PUT with (OCI distribution spec 1.1).
pub const OCI_SUBJECT: &str = "OCI-Subject";

/// The most pages of a referrers list followed (`Link: <…>; rel="next"`).
pub const MAX_REFERRER_PAGES: usize = 100;

/// The most referrers of one subject read unless the caller asks for all
/// ([`Repository::with_all_referrers`]): a registry listed 99 pages of
/// 10,000 (2.7 GB of memory, 990,000 rows).
pub const MAX_REFERRERS: usize = 1000;

/// How many times a referrers tag update is made again when a concurrent
/// push undid it (each after a read back 50 to 150 ms later).
pub const FALLBACK_TRIES: usize = 8;

/// How long an entry written to a referrers tag must be read back still
/// there before it counts as kept: a concurrent push that read the tag
/// before this write and writes after it undoes it, and its read-merge-write
/// takes about as long as this one's (`span`), so the entry is watched for
/// three such spans, at least 300 ms and at most 10 s.
fn fallback_settle(span: std::time::Duration) -> std::time::Duration {
    (span * 3).clamp(
        std::time::Duration::from_millis(300),
        std::time::Duration::from_secs(10),
    )
}

/// The most bytes of one artifact's content imgctl reads back.
pub const MAX_ARTIFACT: u64 = 256 << 20;

/// A client for one repository of one registry.
#[derive(Debug)]
pub struct Repository {
    transport: Transport,
    tag_or_digest: Option<String>,
    /// The most referrers read; `None` for all.
    max_referrers: Option<usize>,
}

/// The referrers of a subject as imgctl read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrers {
    /// Their descriptors, each checked, in the registry's order: at most
    /// [`MAX_REFERRERS`] unless all were asked for.
    pub list: Vec<Descriptor>,
    /// Whether the registry lists more than were read (past the cap).
    pub more: bool,
}

/// The credentials the docker config gives for `reference`'s registry
/// (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`: a credential
/// helper, else `auths`), as `docker push` would use them; `None` when it
/// has none.
pub fn docker_credentials(reference: &str) -> anyhow::Result<Option<DockerCredentials>> {
    let config = match crate::docker::config::config_path() {
        Some(p) => crate::docker::config::load_config(&p)?,
        None => crate::docker::config::DockerConfig::default(),
    };
    Ok(config
        .credentials_for(&crate::docker::auth::registry_of(reference))?
        .credentials)
}

impl Repository {
    /// A client for the repository of `reference` (`127.0.0.1:5000/me/img:tag`,
    /// `busybox`: docker's rules, see [`mod@reference`]), authenticating with
    /// `credentials` when the registry asks (see [`docker_credentials`]).
    /// HTTPS is checked against the registry's CAs in the certs.d folder
    /// ([`tls::Trust`]) and the system's; loopback registries are spoken to
    /// over HTTPS only when that folder has a CA for them, over HTTP
    /// otherwise.
    pub fn new(reference: &str, credentials: Option<DockerCredentials>) -> anyhow::Result<Self> {
        let r = reference::parse(reference)?;
        let trust = tls::Trust::load(&r.registry, None, None)?;
        let base_url = base_url(&r.base_url, &trust);
        Ok(Repository {
            transport: Transport::with_trust(&r.registry, &base_url, &r.name, credentials, trust)?,
            tag_or_digest: r.tag_or_digest,
            max_referrers: Some(MAX_REFERRERS),
        })
    }

    /// Trusts the CA certificates in the PEM file `ca` too (named by `flag`,
    /// `--registry-ca`, in errors), beside the certs.d folder's; a
    /// loopback registry is then spoken to over HTTPS.
    pub fn with_registry_ca(
        self,
        ca: &std::path::Path,
        flag: Option<&'static str>,
    ) -> anyhow::Result<Self> {
        let registry = self.registry().to_string();
        let trust = tls::Trust::load(&registry, Some(ca), flag)?;
        let plain = format!("http://{}", self.transport.host());
        let base_url = match reference::is_loopback(&registry) {
            true => base_url(&plain, &trust),
            false => self.transport.base_url().to_string(),
        };
        Ok(Repository {
            transport: self.transport.retrust(&base_url, trust)?,
            ..self
        })
    }

    /// Reads every referrer a registry lists (up to [`MAX_REFERRER_PAGES`]
    /// pages), not only the first [`MAX_REFERRERS`].
    pub fn with_all_referrers(mut self) -> Self {
        self.max_referrers = None;
        self
    }

    /// Gives all the requests from now on `total` together (every redirect,
    /// 401 retry, token, page and fetch; [`http::DEFAULT_DEADLINE`]
    /// otherwise): past it, the request under way fails with an error that
    /// names the deadline and `flag` (`--registry-timeout`), if given.
    pub fn with_deadline(mut self, total: std::time::Duration, flag: Option<&'static str>) -> Self {
        self.transport.set_deadline(total, flag);
        self
    }

    /// The registry, as docker names it (`docker.io`, `127.0.0.1:5000`).
    pub fn registry(&self) -> &str {
        &self.transport.registry
    }

    /// The repository's name in the registry (`library/busybox`).
    pub fn name(&self) -> &str {
        &self.transport.name
    }

    /// The tag or digest the reference named, if any.
    pub fn tag_or_digest(&self) -> Option<&str> {
        self.tag_or_digest.as_deref()
    }

    /// The descriptor of the manifest `tag_or_digest` names (a docker
    /// schema 2 manifest or list, an OCI manifest or index): its media
    /// type, size and digest (`Docker-Content-Digest`, else the sha256 of
    /// the body). A HEAD, or a GET when the HEAD fails or its headers do not
    /// say it all. A digest is pinned: the registry must name that very
    /// digest, in a HEAD's header as in a GET's body.
    pub async fn resolve(&self, tag_or_digest: &str) -> anyhow::Result<Descriptor> {
        if tag_or_digest.contains(':') {
            manifest::check_digest(tag_or_digest)?;
        }
        let url = self.manifest_url(tag_or_digest)?;
        let mut head = Call::get(&url).header("Accept", MANIFEST_ACCEPT);
        head.method = Method::HEAD;
        let reply = self.transport.send(head).await?;
        if reply.status.is_success() {
            if let Some(d) = descriptor_from_headers(&reply) {
                self.check_pinned(tag_or_digest, &d.digest, "its HEAD's Docker-Content-Digest")?;
                return Ok(d);
            }
        }
        // A GET otherwise: its headers and body say it all, and an error
        // reply has the registry's message (a HEAD's has no body).
        let reply = self.get_manifest(tag_or_digest, MANIFEST_ACCEPT).await?;
        if !reply.status.is_success() {
            return Err(self
                .transport
                .refused(&format!("the manifest {tag_or_digest}"), &reply));
        }
        self.manifest_descriptor(tag_or_digest, &reply)
    }

    /// Pushes one artifact of `artifact_type` referring to `subject`: the
    /// empty config, `content` as its one layer of `media_type`, and the
    /// manifest (with `annotations`; none is added, so the same input gives
    /// the same manifest digest). Unless the registry answers the manifest
    /// PUT with `OCI-Subject`, the artifact's descriptor is then put into
    /// the referrers tag's index (replacing an entry of the same digest).
    /// Returns the manifest's descriptor with its artifact type and
    /// annotations, as a referrers list gives it.
    pub async fn push_artifact(
        &self,
        subject: &Descriptor,
        artifact_type: &str,
        media_type: &str,
        content: &[u8],
        annotations: BTreeMap<String, String>,
    ) -> anyhow::Result<Descriptor> {
        manifest::check_digest(&subject.digest)?;
        let subject = Descriptor {
            media_type: subject.media_type.clone(),
            digest: subject.digest.clone(),
            size: subject.size,
            artifact_type: None,
            annotations: BTreeMap::new(),
        };
        self.push_blob(EMPTY_BLOB).await?;
        let mut layer = Descriptor::of(media_type, content);
        if media_type.starts_with(manifest::SIGSTORE_BUNDLE_PREFIX) {
            // cosign's BUNDLE_SPEC.md: a file name for `oras pull`, the
            // layer's digest with a hyphen.
            let title = format!("{}.sigstore.json", layer.digest.replacen(':', "-", 1));
            layer
                .annotations
                .insert(manifest::TITLE_ANNOTATION.to_string(), title);
        }
        self.push_blob(content).await?;
        let bytes = manifest::artifact_manifest(artifact_type, &layer, &subject, &annotations);
        let descriptor = Descriptor {
            artifact_type: Some(artifact_type.to_string()),
            annotations,
            ..Descriptor::of(OCI_MANIFEST, &bytes)
        };
        let reply = self
            .put_manifest(&descriptor.digest, OCI_MANIFEST, bytes, None)
            .await?;
        if !reply.status.is_success() {
            return Err(self
                .transport
                .refused(&format!("the {artifact_type} manifest"), &reply));
        }
        if reply.header(OCI_SUBJECT).is_none() {
            self.add_to_fallback(&subject.digest, &descriptor).await?;
        }
        Ok(descriptor)
    }

    /// The referrers of `subject_digest` (of `artifact_type` only, when
    /// given): from the referrers API, else (a 404) from the referrers tag;
    /// none when neither has any. At most [`MAX_REFERRERS`] are read
    /// (unless [`Self::with_all_referrers`]); [`Referrers::more`] says when
    /// the registry lists more.
    pub async fn referrers(
        &self,
        subject_digest: &str,
        artifact_type: Option<&str>,
    ) -> anyhow::Result<Referrers> {
        manifest::check_digest(subject_digest)?;
        let mut listed = match self.referrers_api(subject_digest, artifact_type).await? {
            Some(listed) => listed,
            None => match self.fallback_index(subject_digest).await? {
                Some(index) => Referrers {
                    list: manifest::index_entries(&index)
                        .map_err(|e| anyhow!("{}: {e}", self.fallback_what(subject_digest)))?,
                    more: false,
                },
                None => Referrers {
                    list: Vec::new(),
                    more: false,
                },
            },
        };
        // Filtered before the cap (#50 M9): the fallback tag lists every
        // kind, and a verdict behind a thousand SBOMs is still read.
        listed
            .list
            .retain(|d| artifact_type.is_none() || d.artifact_type.as_deref() == artifact_type);
        if let Some(cap) = self.max_referrers.filter(|c| listed.list.len() > *c) {
            listed.list.truncate(cap);
            listed.more = true;
        }
        Ok(listed)
    }

    /// The one layer of the artifact manifest `manifest_digest` and its
    /// bytes, both checked against their digests.
    pub async fn fetch_artifact(
        &self,
        manifest_digest: &str,
    ) -> anyhow::Result<(Descriptor, Vec<u8>)> {
        manifest::check_digest(manifest_digest)?;
        let what = format!("the artifact manifest {manifest_digest}");
        let reply = self.get_manifest(manifest_digest, MANIFEST_ACCEPT).await?;
        if !reply.status.is_success() {
            return Err(self.transport.refused(&what, &reply));
        }
        manifest::verify_digest(manifest_digest, &reply.body)
            .with_context(|| format!("{what} from registry {}", self.registry()))?;
        let parsed = manifest::parse_manifest(&reply.body)
            .map_err(|e| anyhow!("{what} from registry {}: {e}", self.registry()))?;
        let [layer] = parsed.layers.as_slice() else {
            bail!(
                "{what} from registry {} has {} layers, not one",
                self.registry(),
                parsed.layers.len()
            );
        };
        if layer.size > MAX_ARTIFACT {
            bail!(
                "the layer {} of {what} is {} bytes, over imgctl's {MAX_ARTIFACT}",
                layer.digest,
                layer.size
            );
        }
        let url = format!("/v2/{}/blobs/{}", self.name(), layer.digest);
        let mut call = Call::get(&url);
        call.limit = usize::try_from(layer.size).unwrap_or(usize::MAX).max(1);
        let reply = self.transport.send(call).await?;
        if !reply.status.is_success() {
            return Err(self
                .transport
                .refused(&format!("the blob {}", layer.digest), &reply));
        }
        manifest::verify_digest(&layer.digest, &reply.body)
            .with_context(|| format!("the blob of {what} from registry {}", self.registry()))?;
        Ok((layer.clone(), reply.body.to_vec()))
    }

    /// Uploads `bytes` as a blob unless the registry has it: POST an
    /// upload, then PUT it whole with its digest.
    async fn push_blob(&self, bytes: &[u8]) -> anyhow::Result<()> {
        let digest = manifest::sha256_digest(bytes);
        let url = format!("/v2/{}/blobs/{digest}", self.name());
        let mut head = Call::get(&url);
        head.method = Method::HEAD;
        if self.transport.send(head).await?.status == StatusCode::OK {
            return Ok(());
        }
        let start = format!("/v2/{}/blobs/uploads/", self.name());
        let mut post = Call::get(&start);
        post.method = Method::POST;
        let reply = self
            .transport
            .send(post.header("Content-Length", "0"))
            .await?;
        let what = format!("the upload of blob {digest}");
        if reply.status != StatusCode::ACCEPTED {
            return Err(self.transport.refused(&what, &reply));
        }
        let location = reply.header("Location").ok_or_else(|| {
            anyhow!(
                "registry {} started {what} to {} without a Location",
                self.registry(),
                self.name()
            )
        })?;
        let sep = if location.contains('?') { '&' } else { '?' };
        let target = format!("{location}{sep}digest={digest}");
        let mut put = Call::get(&target)
            .header("Content-Type", "application/octet-stream")
            .header("Content-Length", bytes.len().to_string());
        put.method = Method::PUT;
        put.body = Bytes::copy_from_slice(bytes);
        let reply = self.transport.send(put).await?;
        if reply.status != StatusCode::CREATED {
            return Err(self.transport.refused(&what, &reply));
        }
        Ok(())
    }

    fn manifest_url(&self, tag_or_digest: &str) -> anyhow::Result<String> {
        if tag_or_digest.is_empty()
            || !tag_or_digest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-:".contains(&b))
        {
            bail!("'{}' is not a tag or digest", tag_or_digest.escape_debug());
        }
        Ok(format!("/v2/{}/manifests/{tag_or_digest}", self.name()))
    }

    async fn get_manifest(&self, tag_or_digest: &str, accept: &str) -> anyhow::Result<Reply> {
        let url = self.manifest_url(tag_or_digest)?;
        self.transport
            .send(Call::get(&url).header("Accept", accept))
            .await
    }

    /// PUTs a manifest; `if_match` (an `ETag`) makes the write
    /// conditional where the registry honours it.
    async fn put_manifest(
        &self,
        tag_or_digest: &str,
        media_type: &str,
        bytes: Vec<u8>,
        if_match: Option<&str>,
    ) -> anyhow::Result<Reply> {
        let url = self.manifest_url(tag_or_digest)?;
        let mut put = Call::get(&url).header("Content-Type", media_type);
        if let Some(etag) = if_match {
            put = put.header("If-Match", etag);
        }
        put.method = Method::PUT;
        put.body = bytes.into();
        self.transport.send(put).await
    }

    /// An error unless `digest`, what the registry named for `tag_or_digest`
    /// (`how`), is that digest: a reference pinned to a digest always
    /// resolves to it, or not at all. A tag pins nothing.
    fn check_pinned(&self, tag_or_digest: &str, digest: &str, how: &str) -> anyhow::Result<()> {
        if tag_or_digest.contains(':') && digest != tag_or_digest {
            bail!(
                "registry {} answered for the manifest {tag_or_digest} of {} with another digest, {} ({how}); refused: a pinned digest is the digest used",
                self.registry(),
                self.name(),
                crate::error::escape_controls(digest)
            );
        }
        Ok(())
    }

    /// The descriptor of a manifest GET's reply.
    fn manifest_descriptor(
        &self,
        tag_or_digest: &str,
        reply: &Reply,
    ) -> anyhow::Result<Descriptor> {
        let computed = manifest::sha256_digest(&reply.body);
        self.check_pinned(tag_or_digest, &computed, "the hash of the manifest it sent")?;
        let media_type = reply
            .header("Content-Type")
            .map(|c| c.split(';').next().unwrap_or(c).trim().to_string())
            .filter(|c| !c.is_empty() && c != "application/json")
            .or_else(|| {
                serde_json::from_slice::<serde_json::Value>(&reply.body)
                    .ok()?
                    .get("mediaType")?
                    .as_str()
                    .map(str::to_string)
            })
            .ok_or_else(|| {
                anyhow!(
                    "registry {} did not say the media type of the manifest {tag_or_digest} of {}",
                    self.registry(),
                    self.name()
                )
            })?;
        Ok(Descriptor {
            media_type,
            ..Descriptor::of("", &reply.body)
        })
    }

    /// `Some(referrers)` from the referrers API, its pages followed until
    /// the cap, `None` when the registry has none (a 404).
    async fn referrers_api(
        &self,
        subject_digest: &str,
        artifact_type: Option<&str>,
    ) -> anyhow::Result<Option<Referrers>> {
        let mut url = format!("/v2/{}/referrers/{subject_digest}", self.name());
        if let Some(t) = artifact_type {
            url.push('?');
            url.push_str(&serde_urlencoded::to_string([("artifactType", t)]).unwrap_or_default());
        }
        let what = format!("the referrers list of {subject_digest}");
        let mut entries = Vec::new();
        for page in 0..MAX_REFERRER_PAGES {
            let reply = self
                .transport
                .send(Call::get(&url).header("Accept", OCI_INDEX))
                .await?;
            if page == 0 && reply.status == StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !reply.status.is_success() {
                return Err(self.transport.refused(&what, &reply));
            }
            let bad = |e: anyhow::Error| {
                anyhow!(
                    "{what} in {} from registry {}: {e}",
                    self.name(),
                    self.registry()
                )
            };
            let index = manifest::parse_index(&reply.body).map_err(bad)?;
            // Only the kind asked for counts toward the cap: a registry that
            // ignores the filter must not let other artifacts crowd it out.
            entries.extend(
                manifest::index_entries(&index)
                    .map_err(bad)?
                    .into_iter()
                    .filter(|d| {
                        artifact_type.is_none() || d.artifact_type.as_deref() == artifact_type
                    }),
            );
            let next = reply.header("Link").and_then(next_link);
            // At the cap, a next page means more than imgctl reads.
            let full = self.max_referrers.is_some_and(|c| entries.len() >= c);
            match next {
                Some(next) if !full => url = next,
                next => {
                    return Ok(Some(Referrers {
                        list: entries,
                        more: next.is_some(),
                    }))
                }
            }
        }
        bail!(
            "{what} in {} from registry {} has more than {MAX_REFERRER_PAGES} pages",
            self.name(),
            self.registry()
        )
    }

    fn fallback_what(&self, subject_digest: &str) -> String {
        format!(
            "the referrers tag {} of {} in registry {}",
            manifest::fallback_tag(subject_digest).unwrap_or_default(),
            self.name(),
            self.registry()
        )
    }

    /// The referrers tag's index; `None` when the tag does not exist.
    async fn fallback_index(
        &self,
        subject_digest: &str,
    ) -> anyhow::Result<Option<serde_json::Value>> {
        Ok(self.fallback_read(subject_digest).await?.0)
    }

    /// The referrers tag's index (`None` when the tag does not exist) and
    /// its `ETag`, when the registry gave one. A 5xx is asked again, up to
    /// [`FALLBACK_TRIES`] times 50 to 150 ms apart: distribution's
    /// filesystem store answers `500 UNKNOWN` to a read of a tag that
    /// another push is writing (seen in CI: two concurrent referrer pushes).
    async fn fallback_read(
        &self,
        subject_digest: &str,
    ) -> anyhow::Result<(Option<serde_json::Value>, Option<String>)> {
        use rand::Rng as _;
        let tag = manifest::fallback_tag(subject_digest)?;
        let mut reply = self.get_manifest(&tag, OCI_INDEX).await?;
        for _ in 1..FALLBACK_TRIES {
            if !reply.status.is_server_error() {
                break;
            }
            let pause = rand::thread_rng().gen_range(50..150);
            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
            reply = self.get_manifest(&tag, OCI_INDEX).await?;
        }
        if reply.status == StatusCode::NOT_FOUND {
            return Ok((None, None));
        }
        if !reply.status.is_success() {
            return Err(self
                .transport
                .refused(&format!("the referrers tag {tag}"), &reply));
        }
        let etag = reply.header("ETag").map(str::to_string);
        manifest::parse_index(&reply.body)
            .map(|index| (Some(index), etag))
            .map_err(|e| anyhow!("{}: {e}", self.fallback_what(subject_digest)))
    }

    /// Puts `entry` into the referrers tag's index (made when missing):
    /// read, merge, write (with `If-Match` on the read's `ETag`, so a
    /// registry that honours it refuses a write over another's with 412; a
    /// 5xx on the write is tried again too), then read it back every 50 to
    /// 150 ms until the entry has stayed there for [`fallback_settle`] of
    /// the read-merge-write's time. A concurrent push of another referrer
    /// of the same subject that read the tag before this write and
    /// overwrote it after is thus seen, and the entry merged again, up to
    /// [`FALLBACK_TRIES`] times. (Distribution 2.8 gives an `ETag` but does
    /// not check `If-Match`: the read back is what keeps both entries.
    /// Reading back once, 50 to 150 ms after the write, lost an entry under
    /// load: the other push's read-merge-write took longer than the pause.)
    async fn add_to_fallback(
        &self,
        subject_digest: &str,
        entry: &Descriptor,
    ) -> anyhow::Result<()> {
        use rand::Rng as _;
        let tag = manifest::fallback_tag(subject_digest)?;
        let mut writes = 0;
        // When this push's last write landed, and how long its
        // read-merge-write took.
        let mut written: Option<(std::time::Instant, std::time::Duration)> = None;
        loop {
            let read_at = std::time::Instant::now();
            let (index, etag) = self.fallback_read(subject_digest).await?;
            let held = index.as_ref().is_some_and(|i| {
                manifest::index_entries(i).is_ok_and(|l| l.iter().any(|d| d.digest == entry.digest))
            });
            match written {
                // Listed before this push wrote anything: pushed before.
                None if held => return Ok(()),
                Some((at, span)) if held && at.elapsed() >= fallback_settle(span) => return Ok(()),
                Some(_) if held => {}
                _ if writes == FALLBACK_TRIES => break,
                _ => {
                    let mut index = index.unwrap_or_else(manifest::empty_index);
                    manifest::merge_into_index(&mut index, entry);
                    let bytes = serde_json::to_vec(&index).expect("an index serializes");
                    let reply = self
                        .put_manifest(&tag, OCI_INDEX, bytes, etag.as_deref())
                        .await?;
                    writes += 1;
                    // 412: another push's write came first (If-Match); a
                    // 5xx on the last try stands (distribution's filesystem
                    // store answers 500 when two writes of one tag meet).
                    let again = reply.status == StatusCode::PRECONDITION_FAILED
                        || (reply.status.is_server_error() && writes < FALLBACK_TRIES);
                    if !reply.status.is_success() && !again {
                        return Err(self
                            .transport
                            .refused(&format!("the referrers tag {tag}"), &reply));
                    }
                    written = Some((std::time::Instant::now(), read_at.elapsed()));
                }
            }
            let pause = rand::thread_rng().gen_range(50..150);
            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
        }
        bail!(
            "{} lost the entry of {} to concurrent updates {FALLBACK_TRIES} times in a row; push again",
            self.fallback_what(subject_digest),
            entry.digest
        )
    }
}

/// `base_url` (`http://` for a loopback registry) made `https://` when
/// `trust` holds a CA of the registry's own.
fn base_url(base_url: &str, trust: &tls::Trust) -> String {
    match base_url.strip_prefix("http://") {
        Some(host) if trust.has_own() => format!("https://{host}"),
        _ => base_url.to_string(),
    }
}

/// The target of a `Link: <url>; rel="next"` header (the referrers API's
/// pagination).
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        params
            .split(';')
            .any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            })
            .then(|| target.to_string())
    })
}

/// A HEAD reply's descriptor, when its headers give the digest, the media
/// type and the size.
fn descriptor_from_headers(reply: &Reply) -> Option<Descriptor> {
    let digest = reply.header("Docker-Content-Digest")?;
    manifest::check_digest(digest).ok()?;
    let media_type = reply.header("Content-Type")?.split(';').next()?.trim();
    if media_type.is_empty() || media_type == "application/json" {
        return None;
    }
    let size = reply.header("Content-Length")?.parse().ok()?;
    Some(Descriptor {
        media_type: media_type.to_string(),
        digest: digest.to_string(),
        size,
        artifact_type: None,
        annotations: BTreeMap::new(),
    })
}

/// What the empty config of an artifact is: [`EMPTY_MEDIA_TYPE`], 2 bytes.
pub fn empty_config() -> Descriptor {
    Descriptor::of(EMPTY_MEDIA_TYPE, EMPTY_BLOB)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderMap;

    fn head(pairs: &[(&'static str, &str)]) -> Reply {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.insert(*k, v.parse().unwrap());
        }
        Reply {
            status: StatusCode::OK,
            headers,
            body: Bytes::new(),
        }
    }

    #[test]
    fn head_replies_give_a_descriptor_when_complete() {
        let digest = manifest::EMPTY_DIGEST;
        let d = descriptor_from_headers(&head(&[
            ("Docker-Content-Digest", digest),
            (
                "Content-Type",
                "application/vnd.docker.distribution.manifest.v2+json",
            ),
            ("Content-Length", "528"),
        ]))
        .unwrap();
        assert_eq!(d.digest, digest);
        assert_eq!(d.size, 528);
        assert_eq!(d.media_type, manifest::DOCKER_MANIFEST);
        assert!(descriptor_from_headers(&head(&[
            ("Docker-Content-Digest", digest),
            ("Content-Length", "5")
        ]))
        .is_none());
        assert!(descriptor_from_headers(&head(&[
            ("Content-Type", OCI_MANIFEST),
            ("Content-Length", "5")
        ]))
        .is_none());
    }

    #[test]
    fn next_links() {
        assert_eq!(
            next_link(r#"</v2/me/x/referrers/sha256:1?n=2&last=b>; rel="next""#).as_deref(),
            Some("/v2/me/x/referrers/sha256:1?n=2&last=b")
        );
        assert_eq!(
            next_link(r#"<https://a/prev>; rel="prev", <https://a/next>; rel=next"#).as_deref(),
            Some("https://a/next")
        );
        assert_eq!(next_link(r#"<https://a/prev>; rel="prev""#), None);
        assert_eq!(next_link("garbage"), None);
    }

    #[test]
    fn repositories_know_their_registry() {
        let r = Repository::new("127.0.0.1:5000/me/img:tag", None).unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.name(), "me/img");
        assert_eq!(r.tag_or_digest(), Some("tag"));
        assert!(r.manifest_url("bad/tag").is_err());
        assert_eq!(empty_config().digest, manifest::EMPTY_DIGEST);
    }
}

#[cfg(test)]
pub(crate) mod fake_tests;
#[cfg(test)]
mod hostile_tests;
