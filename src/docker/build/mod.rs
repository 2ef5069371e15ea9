//! Running a build on the engine and reading its stream, with either builder.
//!
//! It owns the `/build` request (context tar, tags, labels, build args, cache
//! and pull flags), the choice of builder ([`Builder`], [`choose_builder`]),
//! the events both builders' streams become ([`BuildEvent`]: the classic
//! builder's text in [`classic`], BuildKit's vertex stream in [`buildkit`]),
//! BuildKit's build secrets (served by a session of imgctl's own, [`session`],
//! over requests made outside bollard, `raw`),
//! the failure report of a broken step, and the removal of intermediate
//! containers a cancelled classic build may leave behind. It does not print:
//! callers receive [`BuildEvent`]s and decide how to show them.
//!
//! Part: the shared floor (`docs/architecture.md`).
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::query_parameters::BuildImageOptions;
use serde::Serialize;

pub mod buildkit;
pub mod classic;
mod raw;
mod select;
pub mod session;

pub use classic::StepParser;
pub use select::{choose_builder, Builder, BuilderChoice, BuilderReason};
pub use session::BuildSecrets;

/// How many output lines of a failing step the error shows (issue 2: "the last 20 lines").
pub const FAILURE_TAIL_LINES: usize = 20;

/// How to build (the context travels separately, by value).
#[derive(Debug, Clone, Default)]
pub struct BuildRequest {
    /// Tags to apply (`name:tag`); the first is given to the builder, the rest
    /// are added with the tag API after a successful build.
    pub tags: Vec<String>,
    /// Ignore the layer cache.
    pub no_cache: bool,
    /// Always try to pull the base image.
    pub pull: bool,
    /// `--build-arg` values.
    pub build_args: BTreeMap<String, String>,
    /// Image labels (applied by the builder after the last instruction).
    pub labels: BTreeMap<String, String>,
    /// Which builder runs it.
    pub builder: Builder,
    /// Secrets for `RUN --mount=type=secret,id=…` (BuildKit only: the
    /// classic builder has no secrets).
    pub secrets: BuildSecrets,
}

/// Something the builder reported, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildEvent {
    /// A new step began: `Step n/total : instruction`.
    Step {
        /// 1-based step number.
        n: u32,
        /// Number of steps the builder announced.
        total: u32,
        /// The instruction as the builder echoed it.
        instruction: String,
    },
    /// The current step was satisfied from the layer cache.
    Cached,
    /// The current step runs in this intermediate container.
    Running(String),
    /// A line of the current step's output (or another builder message).
    Output(String),
    /// The current step produced this layer/image id.
    Layer(String),
    /// The builder removed this intermediate container.
    Removed(String),
}

/// One step as it ended up.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StepRecord {
    /// 1-based step number.
    pub n: u32,
    /// The instruction.
    pub instruction: String,
    /// Whether the layer cache satisfied it.
    pub cached: bool,
    /// Wall time of the step in seconds.
    pub seconds: f64,
}

/// A finished build.
#[derive(Debug, Clone, Serialize)]
pub struct BuildOutcome {
    /// The image id (`sha256:…`).
    pub image_id: String,
    /// The steps in order.
    pub steps: Vec<StepRecord>,
    /// Wall time of the whole build in seconds.
    pub seconds: f64,
}

impl BuildOutcome {
    /// Steps taken from the cache.
    pub fn cached_steps(&self) -> usize {
        self.steps.iter().filter(|s| s.cached).count()
    }
    /// Steps that ran (neither cached nor a `FROM`).
    pub fn executed_steps(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| !s.cached && !is_from(&s.instruction))
            .count()
    }
}

/// Whether `instruction` is a `FROM`: never a layer-cache hit (each
/// builder's [`StepRecord`]s say so, though BuildKit marks a local base
/// image's vertex cached).
pub(super) fn is_from(instruction: &str) -> bool {
    instruction
        .split_whitespace()
        .next()
        .is_some_and(|w| w.eq_ignore_ascii_case("FROM"))
}

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A step (typically a RUN) failed.
    #[error("step {n}/{total} failed: {instruction}: {message}")]
    StepFailed {
        /// 1-based step number.
        n: u32,
        /// Steps announced.
        total: u32,
        /// The instruction that failed.
        instruction: String,
        /// The builder's error (`The command '…' returned a non-zero code: 1`).
        message: String,
        /// The command's exit code, when the builder reported one.
        exit_code: Option<i64>,
        /// The last [`FAILURE_TAIL_LINES`] lines of the step's output.
        tail: Vec<String>,
    },
    /// The engine refused or failed the build before or outside a step.
    #[error("the engine failed the build: {0}")]
    Engine(String),
    /// The base image (`FROM`) is neither on the engine nor pullable (no
    /// registry reachable, or no such image there); both builders say it so.
    #[error("the base image {base} could not be pulled: {message}")]
    BaseUnavailable {
        /// The image the `FROM` names.
        base: String,
        /// The engine's words (a DNS error, `pull access denied`, …).
        message: String,
    },
    /// The engine's build stream carried a message past what imgctl reads
    /// (see [`crate::docker::transport`] and `raw`'s message limit).
    #[error("{0}")]
    TooMuch(crate::docker::transport::TooMuch),
    /// BuildKit was asked for on an engine that cannot run it.
    #[error("this engine cannot build with BuildKit (API {api}, {os}; BuildKit needs a Linux engine at API 1.39 or later)")]
    BuildKitUnsupported {
        /// The API version in use.
        api: String,
        /// The engine's OS.
        os: String,
    },
    /// BuildKit was asked for on Podman, whose compatible build is buildah's.
    #[error("Podman's Docker-compatible build is buildah's, which has no BuildKit API (no secret or cache mounts)")]
    BuildKitOnPodman,
    /// `DOCKER_BUILDKIT` holds no boolean (the docker CLI refuses it too).
    #[error("DOCKER_BUILDKIT={value:?} is not a boolean (1, 0, true or false)")]
    BadDockerBuildkit {
        /// The value found.
        value: String,
    },
}

/// Intermediate containers seen during a build, shared so that a cancelled
/// build (its future dropped) can still be cleaned up.
#[derive(Debug, Clone, Default)]
pub struct BuildTracker {
    containers: Arc<Mutex<Vec<String>>>,
}

impl BuildTracker {
    /// The intermediate container ids seen so far.
    pub fn containers(&self) -> Vec<String> {
        self.containers
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }
    fn record(&self, id: &str) {
        if let Ok(mut c) = self.containers.lock() {
            c.push(id.to_string());
        }
    }
}

/// The `/build` query both builders share.
fn options(request: &BuildRequest) -> BuildImageOptions {
    BuildImageOptions {
        dockerfile: "Dockerfile".to_string(),
        t: request.tags.first().cloned(),
        nocache: request.no_cache,
        pull: request.pull.then(|| "1".to_string()),
        buildargs: (!request.build_args.is_empty()).then(|| to_hash(&request.build_args)),
        labels: (!request.labels.is_empty()).then(|| to_hash(&request.labels)),
        ..Default::default()
    }
}

/// Runs a build of `context` (a tar, see
/// [`super::context::BuildContext::to_tar`]) on `request.builder`, on the
/// engine `docker` is connected to at `address` (its
/// [`super::EngineInfo::address`]: BuildKit's build and session requests are
/// made outside bollard, see [`session`]). Calls `on_event` for each event in
/// order. Dropping the returned future closes the connections, which cancels
/// the build on the engine; then call [`remove_leftovers`] with the tracker
/// (the classic builder's intermediate containers; BuildKit leaves none).
pub async fn build_image(
    docker: &bollard::Docker,
    address: &str,
    context: Vec<u8>,
    request: &BuildRequest,
    tracker: &BuildTracker,
    on_event: &mut (dyn FnMut(&BuildEvent) + Send),
) -> Result<BuildOutcome, BuildError> {
    match request.builder {
        Builder::Classic if !request.secrets.is_empty() => Err(BuildError::Engine(format!(
            "the classic builder has no build secrets (asked for: {})",
            request.secrets.ids().join(", ")
        ))),
        Builder::Classic => classic::run(docker, context, request, tracker, on_event).await,
        Builder::BuildKit => buildkit::run(docker, address, context, request, on_event).await,
    }
    .map_err(base_unavailable)
}

/// A failure that is the base image's: the classic builder fails the `FROM`
/// step, BuildKit its `[internal] load metadata for IMAGE` vertex (or the
/// `FROM` step); either becomes [`BuildError::BaseUnavailable`].
pub(crate) fn base_unavailable(err: BuildError) -> BuildError {
    match err {
        BuildError::StepFailed {
            ref instruction,
            ref message,
            ..
        } if is_from(instruction) => {
            let base = instruction
                .split_whitespace()
                .find(|w| !w.eq_ignore_ascii_case("FROM") && !w.starts_with("--"))
                .unwrap_or_default();
            BuildError::BaseUnavailable {
                base: base.to_string(),
                message: message.clone(),
            }
        }
        BuildError::Engine(ref message) => match message.split_once("load metadata for ") {
            Some((_, rest)) => {
                let (base, why) = rest.split_once(": ").unwrap_or((rest, ""));
                BuildError::BaseUnavailable {
                    base: base.trim().to_string(),
                    message: why.trim().to_string(),
                }
            }
            None => err,
        },
        other => other,
    }
}

fn to_hash(map: &BTreeMap<String, String>) -> HashMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The engine's own words for an error, without bollard's wrapping.
pub(crate) fn engine_message(err: &bollard::errors::Error) -> String {
    match err {
        bollard::errors::Error::DockerStreamError { error } => error.trim().to_string(),
        bollard::errors::Error::DockerResponseServerError { message, .. } => {
            message.trim().to_string()
        }
        // With the causes bollard's words leave out (what the transport
        // refused: super::super::transport).
        other => crate::docker::transport::words(other),
    }
}

/// The id in BuildKit's error for a secret its session does not hold
/// (`RUN --mount=type=secret,id=nope,required=true`): "secret nope: not found"
/// (current BuildKit) or "secret nope not found: not found" (older ones).
pub fn missing_secret(message: &str) -> Option<&str> {
    let (_, rest) = message.rsplit_once("secret ")?;
    let id = rest.split([':', ' ']).next()?;
    let after = &rest[id.len()..];
    let not_found = after.starts_with(": not found") || after.starts_with(" not found");
    (not_found && !id.is_empty()).then_some(id)
}

/// The exit code in the classic builder's "The command '…' returned a
/// non-zero code: 2", and in BuildKit's "… did not complete successfully:
/// exit code: 2" (Docker 23+) or "executor failed running […]: exit code: 2"
/// (Docker 20.10), and buildah's "… while running runtime: exit status 2"
/// (Podman).
fn exit_code_of(message: &str) -> Option<i64> {
    let (_, code) = message
        .rsplit_once("returned a non-zero code:")
        .or_else(|| message.rsplit_once("exit code:"))
        .or_else(|| message.rsplit_once("exit status"))?;
    code.trim().parse().ok()
}

/// After a cancelled build: waits for the engine to remove the intermediate
/// containers (it does so when the client goes away, with `forcerm`), and
/// force-removes any still there after `grace`. Returns the ids it had to
/// remove itself.
pub async fn remove_leftovers(
    docker: &bollard::Docker,
    tracker: &BuildTracker,
    grace: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + grace;
    let mut removed = Vec::new();
    for id in tracker.containers() {
        loop {
            match docker
                .inspect_container(
                    &id,
                    None::<bollard::query_parameters::InspectContainerOptions>,
                )
                .await
            {
                Err(_) => break, // gone (404) or unreachable: nothing we can do more
                Ok(_) if Instant::now() >= deadline => {
                    let opts = bollard::query_parameters::RemoveContainerOptions {
                        force: true,
                        v: true,
                        ..Default::default()
                    };
                    if docker.remove_container(&id, Some(opts)).await.is_ok() {
                        removed.push(id.clone());
                    }
                    break;
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_secret_is_named_in_both_wordings() {
        assert_eq!(missing_secret("secret nope: not found"), Some("nope"));
        assert_eq!(
            missing_secret("failed to solve: secret proxy-ca not found: not found"),
            Some("proxy-ca")
        );
        assert_eq!(
            missing_secret(
                "process \"/bin/sh -c exit 3\" did not complete successfully: exit code: 3"
            ),
            None
        );
        assert_eq!(missing_secret("secret : not found"), None);
        assert_eq!(missing_secret("top secret stuff"), None);
    }

    #[test]
    fn a_failed_from_or_metadata_load_is_the_base_images() {
        let step = |instruction: &str| BuildError::StepFailed {
            n: 1,
            total: 9,
            instruction: instruction.to_string(),
            message: "dial tcp: lookup registry-1.docker.io: no such host".to_string(),
            exit_code: None,
            tail: Vec::new(),
        };
        match base_unavailable(step("FROM --platform=linux/amd64 nvidia/cuda:12.4 AS base")) {
            BuildError::BaseUnavailable { base, message } => {
                assert_eq!(base, "nvidia/cuda:12.4");
                assert!(message.contains("no such host"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            base_unavailable(step("RUN false")),
            BuildError::StepFailed { .. }
        ));
        let buildkit = BuildError::Engine(
            "[internal] load metadata for docker.io/library/nope:1: pull access denied".into(),
        );
        match base_unavailable(buildkit) {
            BuildError::BaseUnavailable { base, message } => {
                assert_eq!(base, "docker.io/library/nope:1");
                assert_eq!(message, "pull access denied");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            base_unavailable(BuildError::Engine("no space left".into())),
            BuildError::Engine(_)
        ));
    }
}
