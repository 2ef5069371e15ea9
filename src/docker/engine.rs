//! Connecting to the engine: the address the docker CLI would use
//! ([`super::endpoint`]: a chosen context, `DOCKER_HOST`, `DOCKER_CONTEXT`,
//! `currentContext`, the local socket), over [`super::transport`] (which
//! bounds what is buffered of the engine's answers), the API version
//! negotiated, and what answered ([`EngineInfo`]) for the command to show.
use std::sync::OnceLock;

use super::endpoint::{self, Endpoint, Origin, Settings};
use super::DockerError;
use crate::env_vars::DOCKER_API_VERSION;

/// bollard's request timeout (its `DEFAULT_TIMEOUT`, seconds); callers that
/// stream for long raise it with `with_timeout`.
const REQUEST_TIMEOUT_S: u64 = 120;

/// The context chosen on the command line, for every connection of this
/// process (the build, and the guards that clean up after it).
static CHOSEN: OnceLock<String> = OnceLock::new();

/// Chooses context `name` for every later [`connect`] of this process (the
/// first call wins). It is resolved when connecting: a command that never
/// reaches the engine never reads the context store.
pub fn choose_context(name: &str) {
    let _ = CHOSEN.set(name.to_string());
}

/// The context chosen by [`choose_context`], if any.
pub fn chosen_context() -> Option<&'static str> {
    CHOSEN.get().map(String::as_str)
}

/// What answered, and how imgctl reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    /// The engine's version (`20.10.24+dfsg1`).
    pub version: String,
    /// The API version the engine speaks at most (`1.41`).
    pub engine_api: String,
    /// The API version imgctl uses: the lower of the engine's and bollard's.
    pub api_version: String,
    /// The engine's OS (`linux`, `windows`).
    pub os: String,
    /// The address connected to.
    pub address: String,
    /// The context that named the address, if one did (`default` included).
    pub context: Option<String>,
    /// The setting that chose the address.
    pub origin: Origin,
    /// Which engine answered.
    pub product: Product,
    /// Whether the engine runs rootless (false until [`Engine::ask_rootless`]
    /// asked): Docker's `/info` says
    /// `name=rootless` among its security options; rootless Podman 4.3 does
    /// not, and is told by its storage root under `~/.local/share/containers`.
    pub rootless: bool,
}

/// Which engine answers the Docker API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Product {
    /// The Docker engine (moby).
    #[default]
    Docker,
    /// Podman's Docker-compatible service (`podman system service`); its
    /// `/version` names a `Podman Engine` component.
    Podman,
}

impl std::fmt::Display for Product {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Product::Docker => "Docker",
            Product::Podman => "Podman",
        })
    }
}

/// How long the `/info` question that tells a rootless engine may take: a
/// missing answer only leaves the engine called rootful.
const INFO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A connected engine.
#[derive(Debug, Clone)]
pub struct Engine {
    /// The client, at the negotiated API version.
    pub docker: bollard::Docker,
    /// What answered.
    pub info: EngineInfo,
}

/// Connects to the engine the docker CLI would use (with the context of
/// [`choose_context`], if any) and negotiates the API version, so that Docker
/// 20.10 (API 1.41) and current engines both work.
pub async fn connect() -> Result<Engine, DockerError> {
    let endpoint = endpoint::resolve(chosen_context(), &Settings::from_env())?;
    connect_to(endpoint).await
}

/// Connects to `endpoint` and negotiates the API version. Fails with one
/// line naming the address (and context) when nothing answers.
pub async fn connect_to(endpoint: Endpoint) -> Result<Engine, DockerError> {
    let Endpoint {
        address,
        context,
        origin,
    } = endpoint;
    let unreachable = |e: &bollard::errors::Error| match super::transport::too_much(e) {
        // Something answered, with more than a Docker engine says.
        Some(too_much) => DockerError::EngineTooMuch(too_much),
        None => DockerError::Connect {
            address: address.clone(),
            context: context.clone(),
            error: super::transport::words(e),
        },
    };
    // DOCKER_API_VERSION pins the client's API version, as it does the
    // docker CLI's: no negotiation then.
    let pinned = pinned_api_version()?;
    let version = pinned.as_ref().unwrap_or(bollard::API_DEFAULT_VERSION);
    // unix://, tcp:// and http:// (endpoint::resolve let no other scheme
    // through), with what is buffered of each answer bounded.
    let docker = super::transport::connect(&address, REQUEST_TIMEOUT_S, version)
        .map_err(|e| unreachable(&e))?;
    // negotiate_version asks /version and lowers the client version to the engine's.
    let docker = match pinned {
        Some(_) => docker,
        None => docker
            .negotiate_version()
            .await
            .map_err(|e| unreachable(&e))?,
    };
    // bollard joins each request's path onto its base URL in a way that drops
    // the `/v1.xx` prefix, so the engine would answer at its own newest API
    // whatever was negotiated or pinned. Put the prefix back.
    let api = docker.client_version().to_string();
    let docker = docker.with_request_modifier(move |request| versioned(request, &api));
    let facts = docker.version().await.map_err(|e| match (&pinned, &e) {
        // A pinned version the engine does not speak (`client version 1.5
        // is too old…`) is the setting's fault, not the connection's.
        (
            Some(v),
            bollard::errors::Error::DockerResponseServerError {
                status_code: 400,
                message,
            },
        ) => DockerError::ApiVersionRefused {
            address: address.clone(),
            version: v.to_string(),
            message: message.trim().to_string(),
        },
        _ => unreachable(&e),
    })?;
    let unknown = || "unknown".to_string();
    let podman = facts
        .components
        .iter()
        .flatten()
        .any(|c| c.name.to_ascii_lowercase().contains("podman"));
    let product = if podman {
        Product::Podman
    } else {
        Product::Docker
    };
    let info = EngineInfo {
        version: facts.version.unwrap_or_else(unknown),
        engine_api: facts.api_version.unwrap_or_else(unknown),
        api_version: docker.client_version().to_string(),
        os: facts.os.unwrap_or_else(|| "linux".to_string()),
        address,
        context,
        origin,
        product,
        // Asked only where it is said ([`Engine::ask_rootless`]): `/info`
        // counts the engine's images and containers, which `ps`, `down`
        // and `logs` have no use for.
        rootless: false,
    };
    let _ = CONNECTED.set(product);
    Ok(Engine { docker, info })
}

/// The engine this run connected to first (an error's hint names its CLI:
/// `podman images`, not `docker images`, #53 F21).
static CONNECTED: OnceLock<Product> = OnceLock::new();

/// What answered this run's first connection, if one was made.
pub fn connected_product() -> Option<Product> {
    CONNECTED.get().copied()
}

impl Product {
    /// Its command-line tool: `docker` or `podman`.
    pub fn cli(self) -> &'static str {
        match self {
            Product::Docker => "docker",
            Product::Podman => "podman",
        }
    }
}

impl Engine {
    /// Asks the engine's `/info` whether it runs rootless (at most
    /// [`INFO_TIMEOUT`]; no answer leaves it rootful) and records it in
    /// [`EngineInfo::rootless`], for the engine line.
    pub async fn ask_rootless(&mut self) {
        let podman = self.info.product == Product::Podman;
        let system = tokio::time::timeout(INFO_TIMEOUT, self.docker.info())
            .await
            .ok()
            .and_then(Result::ok);
        self.info.rootless = system.is_some_and(|i| {
            let said = i
                .security_options
                .is_some_and(|opts| opts.iter().any(|o| o == "name=rootless"));
            // Podman 4.3's compatible /info leaves that option out (its own
            // `Rootless` field is not Docker's schema); its storage root tells:
            // rootless Podman keeps images under ~/.local/share/containers.
            let podman_home = podman
                && i.docker_root_dir
                    .is_some_and(|d| d.contains("/.local/share/containers/"));
            said || podman_home
        });
    }
}

/// `request` with its path under `/v<api>` (`/images/json` →
/// `/v1.41/images/json`), unless it already names a version.
fn versioned<B>(mut request: hyper::Request<B>, api: &str) -> hyper::Request<B> {
    let uri = request.uri().clone();
    let path = uri.path().to_string();
    let has_version = path
        .strip_prefix("/v")
        .and_then(|rest| rest.split('/').next())
        .is_some_and(|v| {
            v.split_once('.').is_some_and(|(a, b)| {
                !a.is_empty()
                    && !b.is_empty()
                    && a.bytes().all(|c| c.is_ascii_digit())
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
        });
    if has_version {
        return request;
    }
    let mut parts = uri.into_parts();
    let query = parts
        .path_and_query
        .as_ref()
        .and_then(|pq| pq.query())
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    if let Ok(pq) = format!("/v{api}{path}{query}").parse() {
        parts.path_and_query = Some(pq);
        if let Ok(new) = hyper::Uri::from_parts(parts) {
            *request.uri_mut() = new;
        }
    }
    request
}

/// `DOCKER_API_VERSION` (`1.41`) as a client version; unset or empty: none.
fn pinned_api_version() -> Result<Option<bollard::ClientVersion>, DockerError> {
    let Ok(text) = std::env::var(DOCKER_API_VERSION) else {
        return Ok(None);
    };
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let parsed = text
        .split_once('.')
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)));
    match parsed {
        Some((major_version, minor_version)) => Ok(Some(bollard::ClientVersion {
            major_version,
            minor_version,
        })),
        None => Err(DockerError::BadApiVersion {
            value: text.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::versioned;

    fn path_of(uri: &str) -> String {
        let request = hyper::Request::builder().uri(uri).body(()).unwrap();
        versioned(request, "1.41").uri().to_string()
    }

    #[test]
    fn requests_go_to_the_versioned_api() {
        assert_eq!(
            path_of("unix://2f7661722f72756e/images/json?all=true"),
            "unix://2f7661722f72756e/v1.41/images/json?all=true"
        );
        assert_eq!(
            path_of("http://10.0.0.2:2375/build?t=x%2Fy&version=1"),
            "http://10.0.0.2:2375/v1.41/build?t=x%2Fy&version=1"
        );
        // A versioned path stays as it is; a path that only looks like one does not.
        assert_eq!(
            path_of("http://h:1/v1.51/version"),
            "http://h:1/v1.51/version"
        );
        assert_eq!(
            path_of("http://h:1/volumes/v1.x"),
            "http://h:1/v1.41/volumes/v1.x"
        );
        assert_eq!(path_of("http://h:1/v1/x"), "http://h:1/v1.41/v1/x");
    }
}
