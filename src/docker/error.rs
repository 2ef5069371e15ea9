//! The engine side's errors ([`DockerError`]): choosing the engine (contexts,
//! addresses), connecting, an engine that sends more than imgctl reads, the
//! docker config, signals, images, tags, pushes,
//! containers, registry credentials and their helpers, and the build context.
//! (A failed build is [`super::build::BuildError`]; an engine without a GPU
//! runtime is [`super::run::GpuRequestRejected`]; a GPU selection that does
//! not parse is [`crate::gpus::GpuSelectionError`].)
//!
//! Each `Display` is the one line the user reads, in the engine's terms; it
//! names no flag and no imgctl command, and carries no hint. Exit statuses,
//! flag names and hints are `commands/advice/docker.rs`'s.

/// What went wrong talking to the engine or preparing what it is sent.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// `DOCKER_API_VERSION` is not `MAJOR.MINOR`.
    #[error("DOCKER_API_VERSION={value:?} is not an API version such as 1.41")]
    BadApiVersion {
        /// The value found.
        value: String,
    },
    /// The engine refuses the API version pinned by `DOCKER_API_VERSION`.
    #[error("the Docker engine at {address} refuses DOCKER_API_VERSION={version}: {message}")]
    ApiVersionRefused {
        /// The address connected to.
        address: String,
        /// The version pinned.
        version: String,
        /// The engine's words.
        message: String,
    },
    /// Nothing answers at the engine's address.
    #[error("cannot connect to the Docker engine at {address}{}: {error}", in_context(.context.as_deref()))]
    Connect {
        /// The address tried.
        address: String,
        /// The context that named it, if one did.
        context: Option<String>,
        /// bollard's words.
        error: String,
    },
    /// The engine sent more than imgctl reads: an answer past
    /// [`super::transport::ANSWER_LIMIT`], or a message of a stream past
    /// [`super::transport::STREAM_MESSAGE_LIMIT`] (what answers is not a
    /// Docker engine, or a broken one).
    #[error("{0}")]
    EngineTooMuch(super::transport::TooMuch),
    /// An engine address imgctl does not connect over (TLS, ssh://, an
    /// unknown scheme).
    #[error("cannot use the Docker engine at {address}{}: {why}", in_context(.context.as_deref()))]
    AddressUnsupported {
        /// The address.
        address: String,
        /// The context that named it, if one did.
        context: Option<String>,
        /// What is not supported.
        why: String,
    },
    /// An engine address that does not parse: no socket or host, a host that
    /// is neither a name nor an IP address, a port that is not a number from
    /// 1 to 65535.
    #[error("{}: {why}", invalid_address(.address, .context.as_deref(), *.from_host_env))]
    AddressInvalid {
        /// The address.
        address: String,
        /// The context that named it, if one did (`default` included).
        context: Option<String>,
        /// Whether it is `DOCKER_HOST`'s (else the context's meta file's).
        from_host_env: bool,
        /// What is wrong.
        why: String,
    },
    /// A context name the context store does not hold.
    #[error("no Docker context `{}` ({origin}); the contexts are: {}", .name.escape_debug(), .known.join(", "))]
    UnknownContext {
        /// The name.
        name: String,
        /// The setting that named it.
        origin: super::endpoint::Origin,
        /// The contexts there are (`default` first).
        known: Vec<String>,
    },
    /// A context whose meta file cannot be read or holds no engine address.
    #[error("Docker context `{name}` ({path}) is unreadable: {why}")]
    ContextInvalid {
        /// The context's name.
        name: String,
        /// Its meta.json.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A context that needs what imgctl does not do (TLS).
    #[error("cannot use Docker context `{name}` ({address}): {why}")]
    ContextUnsupported {
        /// The context's name.
        name: String,
        /// Its engine address.
        address: String,
        /// What is not supported.
        why: String,
    },
    /// The docker client's config.json cannot be read or parsed.
    #[error("reading the docker config {path}: {error}")]
    Config {
        /// The file.
        path: String,
        /// The reader's words.
        error: String,
    },
    /// A signal handler cannot be installed.
    #[error("installing the {signal} handler: {error}")]
    SignalHandler {
        /// `SIGINT`, `SIGTERM` or `SIGHUP`.
        signal: &'static str,
        /// Why.
        error: std::io::Error,
    },
    /// A tag that is not an image reference.
    #[error("invalid tag '{}': {why}", .reference.escape_debug())]
    InvalidTag {
        /// The tag as given.
        reference: String,
        /// What is wrong with it.
        why: String,
    },
    /// A tag that names a digest.
    #[error("invalid tag '{reference}': a tag names no @sha256: digest (the build makes the image, and so its digest)")]
    TagWithDigest {
        /// The tag as given.
        reference: String,
    },
    /// A push the registry or engine refused.
    #[error("pushing {} to {} failed: {}", .0.reference, .0.registry, .0.message)]
    Push(Box<PushFailure>),
    /// The engine has no such image (asked for its labels).
    #[error("image `{image}` not found in the engine")]
    ImageNotFound {
        /// The image reference.
        image: String,
    },
    /// The engine has no image to create a container of.
    #[error("image `{image}` not found in the engine")]
    NoImageForContainer {
        /// The image reference.
        image: String,
    },
    /// The engine refuses the reference's format.
    #[error("`{image}` is not a valid image reference")]
    InvalidImageReference {
        /// The image reference.
        image: String,
    },
    /// Inspecting an image failed otherwise.
    #[error("inspecting image {image}: {error}")]
    InspectImage {
        /// The image reference.
        image: String,
        /// bollard's words.
        error: String,
    },
    /// Creating a container failed.
    #[error("creating a container of {image}: {message}")]
    CreateContainer {
        /// The image reference.
        image: String,
        /// The engine's words.
        message: String,
    },
    /// Starting a container failed.
    #[error("starting the container of {image}: {message}")]
    StartContainer {
        /// The image reference.
        image: String,
        /// The engine's words.
        message: String,
    },
    /// Waiting for a container failed.
    #[error("waiting for the container: {error}")]
    WaitContainer {
        /// bollard's words.
        error: String,
    },
    /// The wait stream ended without an exit code.
    #[error("the engine closed the wait stream")]
    WaitStreamClosed,
    /// The container ran past its time and was killed.
    #[error("the container did not finish within {seconds}s and was killed")]
    Timeout {
        /// The limit, in seconds.
        seconds: u64,
    },
    /// Reading a container's output failed.
    #[error("reading the container's output: {error}")]
    Logs {
        /// bollard's words.
        error: String,
    },
    /// Removing a container failed.
    #[error("removing container {id}: {error}")]
    RemoveContainer {
        /// The container id.
        id: String,
        /// bollard's words.
        error: String,
    },
    /// Inspecting a container failed.
    #[error("inspecting container {id}: {error}")]
    InspectContainer {
        /// The container's name or id.
        id: String,
        /// bollard's words.
        error: String,
    },
    /// Running a command in a container (`docker exec`) failed.
    #[error("running a command in the container: {error}")]
    Exec {
        /// bollard's words.
        error: String,
    },
    /// Listing containers failed.
    #[error("listing containers: {error}")]
    ListContainers {
        /// bollard's words.
        error: String,
    },
    /// A signal ended the run where nothing was left to clean up
    /// ([`super::Termination::exit_on_next`]).
    #[error("interrupted by {signal}")]
    Signalled {
        /// The signal's name (`SIGINT`).
        signal: &'static str,
    },
    /// A signal ended the run; the container was removed.
    #[error("interrupted by {signal}; the container was removed")]
    Interrupted {
        /// The signal's name (`SIGINT`).
        signal: &'static str,
    },
    /// A docker config `auth` that is not base64.
    #[error("the `auth` of {key:?} in the docker config is not base64: {error}")]
    AuthNotBase64 {
        /// The `auths` key.
        key: String,
        /// The decoder's words.
        error: String,
    },
    /// A docker config `auth` that is not UTF-8.
    #[error("the `auth` of {key:?} in the docker config is not UTF-8")]
    AuthNotUtf8 {
        /// The `auths` key.
        key: String,
    },
    /// A docker config `auth` without `user:password`.
    #[error("the `auth` of {key:?} in the docker config is not `user:password`")]
    AuthNotUserPassword {
        /// The `auths` key.
        key: String,
    },
    /// A credential helper failed (other than "credentials not found").
    #[error("{program} get failed for {server} ({status}): {output}")]
    CredentialHelper {
        /// `docker-credential-<name>`.
        program: String,
        /// The server asked for.
        server: String,
        /// How it exited (`exit status: 1`).
        status: String,
        /// What it printed (stdout, else stderr), on one line: the end of it
        /// ([`super::tail::excerpt`]).
        output: String,
    },
    /// A credential helper whose reply passed the most a reply may be; it
    /// was killed, and nothing of the reply is kept (it may hold a secret).
    #[error("{program} get replied with more than {} KiB for {server}; it was killed", .limit / 1024)]
    CredentialHelperReplyTooLarge {
        /// `docker-credential-<name>`.
        program: String,
        /// The server asked for.
        server: String,
        /// The limit, in bytes ([`super::tail::OUTPUT_TAIL`]).
        limit: usize,
    },
    /// A credential helper that did not answer within its deadline (hung, or
    /// a child of it holds its stdout open); its process group was killed.
    #[error("{program} get did not answer for {server} within {seconds} s; it was killed")]
    CredentialHelperTimeout {
        /// `docker-credential-<name>`.
        program: String,
        /// The server asked for.
        server: String,
        /// The deadline, in seconds.
        seconds: u64,
    },
    /// A credential helper that cannot be started (not on PATH).
    #[error("cannot run the credential helper {program}: {error}")]
    CredentialHelperRun {
        /// `docker-credential-<name>`.
        program: String,
        /// The system's words.
        error: String,
    },
    /// A credential helper's reply that is not the protocol's JSON.
    #[error(
        "{program} replied with something other than {{\"Username\",\"Secret\"}} JSON: {error}"
    )]
    CredentialHelperReply {
        /// `docker-credential-<name>`.
        program: String,
        /// The parser's words (never the reply itself: it may hold a secret).
        error: String,
    },
    /// A build-context path that is absolute, empty or climbs out.
    #[error(
        "invalid build-context path {path:?}: it must be relative, without `..` or empty parts"
    )]
    ContextPath {
        /// The path as given.
        path: String,
    },
    /// A build-context path added twice.
    #[error("the build context already holds {path:?}")]
    ContextDuplicate {
        /// The cleaned path.
        path: String,
    },
}

impl DockerError {
    /// The error `otherwise` makes of the engine's words for `err` (with the
    /// causes bollard's `Display` leaves out), unless the engine sent more
    /// than imgctl reads: then [`DockerError::EngineTooMuch`].
    pub(crate) fn of_engine(
        err: &bollard::errors::Error,
        otherwise: impl FnOnce(String) -> DockerError,
    ) -> DockerError {
        match super::transport::too_much(err) {
            Some(too_much) => DockerError::EngineTooMuch(too_much),
            None => otherwise(super::transport::words(err)),
        }
    }
}

/// ` (context NAME)` when a context named the engine.
fn in_context(context: Option<&str>) -> String {
    context.map_or_else(String::new, |c| format!(" (context {c})"))
}

/// The start of [`DockerError::AddressInvalid`]'s line: the setting and its value.
fn invalid_address(address: &str, context: Option<&str>, from_host_env: bool) -> String {
    match context {
        _ if from_host_env => format!(
            "DOCKER_HOST={} is not an engine address",
            address.escape_debug()
        ),
        Some(c) => format!(
            "the engine address {} of Docker context `{c}` is not valid",
            address.escape_debug()
        ),
        None => format!("{} is not an engine address", address.escape_debug()),
    }
}

/// What [`DockerError::Push`] knows (boxed: it is the largest variant).
#[derive(Debug)]
pub struct PushFailure {
    /// What was pushed.
    pub reference: String,
    /// Its registry host.
    pub registry: String,
    /// The repository name (without the tag).
    pub name: String,
    /// The docker config read, for the hint (`the docker config` when none).
    pub config: String,
    /// Whether the config gave credentials for the registry.
    pub had_credentials: bool,
    /// The credential helper asked (`docker-credential-<name>`), if any.
    pub helper: Option<String>,
    /// The engine's words.
    pub message: String,
}
