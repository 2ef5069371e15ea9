//! Where the engine is: the address the docker CLI would use, from the same
//! settings in the same order (docker/cli `cli/command/cli.go`,
//! `resolveContextName`, checked against docker 28.2):
//!
//! 1. a context chosen on the command line;
//! 2. `DOCKER_HOST` (it beats `DOCKER_CONTEXT` in the docker CLI, kept for
//!    scripts written before contexts existed);
//! 3. `DOCKER_CONTEXT`, a context name;
//! 4. `currentContext` of config.json (`docker context use`);
//! 5. the local socket, `unix:///var/run/docker.sock`; when there is no
//!    socket there, Podman's: the rootful `/run/podman/podman.sock`, then the
//!    rootless `$XDG_RUNTIME_DIR/podman/podman.sock` (where `podman system
//!    service` and the `podman.socket` units listen). None of them: the Docker
//!    socket, so that the error names the address users know.
//!
//! The context `default` is `DOCKER_HOST` else the local socket; any other
//! name is read from the context store (`contexts/meta/<sha256>/meta.json`,
//! `Endpoints.docker.Host`). Engines are reached over `unix://`, `tcp://` and
//! `http://`; TLS and `ssh://` are refused with a line saying so, and so is an
//! address that does not parse (no socket, no host, a port that is not a
//! number from 1 to 65535), naming the setting it came from.
use std::path::PathBuf;

use super::config::{self, DockerConfig};
use super::DockerError;
use crate::env_vars::{DOCKER_CONTEXT, DOCKER_HOST, DOCKER_TLS_VERIFY, XDG_RUNTIME_DIR};

/// The engine's address when nothing names another.
pub const DEFAULT_ADDRESS: &str = "unix:///var/run/docker.sock";

/// The Docker engine's socket, probed first when nothing names an engine.
pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// Rootful Podman's API socket (`podman system service`, `podman.socket`).
pub const PODMAN_ROOTFUL_SOCKET: &str = "/run/podman/podman.sock";

/// Rootless Podman's API socket, under `$XDG_RUNTIME_DIR`.
pub const PODMAN_ROOTLESS_SOCKET: &str = "podman/podman.sock";

/// The context that stands for `DOCKER_HOST` or the local socket.
pub const DEFAULT_CONTEXT: &str = "default";

/// The schemes imgctl connects over.
pub const SCHEMES: [&str; 3] = ["unix://", "tcp://", "http://"];

/// Which setting chose the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A context chosen on the command line.
    Chosen,
    /// `DOCKER_HOST`.
    HostEnv,
    /// `DOCKER_CONTEXT`.
    ContextEnv,
    /// config.json's `currentContext` (the config file's path).
    CurrentContext(String),
    /// Nothing: the local socket.
    Default,
    /// Nothing, and no Docker socket: a Podman socket found in its place.
    Podman(PodmanSocket),
}

/// Which of Podman's sockets was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodmanSocket {
    /// `/run/podman/podman.sock`.
    Rootful,
    /// `$XDG_RUNTIME_DIR/podman/podman.sock`.
    Rootless,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Chosen => f.write_str("chosen on the command line"),
            Origin::HostEnv => f.write_str(DOCKER_HOST),
            Origin::ContextEnv => f.write_str(DOCKER_CONTEXT),
            Origin::CurrentContext(path) => write!(f, "currentContext of {path}"),
            Origin::Default => f.write_str("the default"),
            Origin::Podman(PodmanSocket::Rootful) => {
                f.write_str("no Docker socket; Podman's rootful socket")
            }
            Origin::Podman(PodmanSocket::Rootless) => {
                f.write_str("no Docker socket; Podman's rootless socket")
            }
        }
    }
}

/// The engine to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Its address (`unix:///var/run/docker.sock`, `tcp://host:2375`).
    pub address: String,
    /// The context that named it, when one did (`default` included).
    pub context: Option<String>,
    /// The setting that chose it.
    pub origin: Origin,
}

/// The settings the choice reads, taken from the environment by
/// [`Settings::from_env`] (tests build their own).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `DOCKER_HOST` (empty counts as unset).
    pub docker_host: Option<String>,
    /// `DOCKER_CONTEXT` (empty counts as unset).
    pub docker_context: Option<String>,
    /// Whether `DOCKER_TLS_VERIFY` asks for TLS.
    pub tls_verify: bool,
    /// The docker configuration folder ([`config::config_dir`]).
    pub config_dir: Option<PathBuf>,
    /// The sockets probed, in order, when nothing names an engine.
    pub local: LocalSockets,
}

/// The local sockets probed when nothing names an engine, first to last
/// (none: [`DEFAULT_ADDRESS`] without probing).
#[derive(Debug, Clone, Default)]
pub struct LocalSockets {
    /// The Docker engine's ([`DOCKER_SOCKET`]).
    pub docker: Option<PathBuf>,
    /// Rootful Podman's ([`PODMAN_ROOTFUL_SOCKET`]).
    pub podman_rootful: Option<PathBuf>,
    /// Rootless Podman's (`$XDG_RUNTIME_DIR/`[`PODMAN_ROOTLESS_SOCKET`]).
    pub podman_rootless: Option<PathBuf>,
}

impl LocalSockets {
    /// The first of the sockets that is a socket: its address and origin.
    /// None of them: the Docker socket's address.
    pub fn probe(&self) -> (String, Origin) {
        use std::os::unix::fs::FileTypeExt;
        let is_socket = |p: &PathBuf| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket());
        let candidates = [
            (&self.docker, Origin::Default),
            (&self.podman_rootful, Origin::Podman(PodmanSocket::Rootful)),
            (
                &self.podman_rootless,
                Origin::Podman(PodmanSocket::Rootless),
            ),
        ];
        for (path, origin) in candidates {
            if let Some(path) = path.as_ref().filter(|p| is_socket(p)) {
                let address = match origin {
                    Origin::Default => DEFAULT_ADDRESS.to_string(),
                    _ => format!("unix://{}", path.display()),
                };
                return (address, origin);
            }
        }
        (DEFAULT_ADDRESS.to_string(), Origin::Default)
    }
}

impl Settings {
    /// This process's settings.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self {
            docker_host: var(DOCKER_HOST),
            docker_context: var(DOCKER_CONTEXT),
            tls_verify: var(DOCKER_TLS_VERIFY).is_some(),
            config_dir: config::config_dir(),
            local: LocalSockets {
                docker: Some(PathBuf::from(DOCKER_SOCKET)),
                podman_rootful: Some(PathBuf::from(PODMAN_ROOTFUL_SOCKET)),
                podman_rootless: var(XDG_RUNTIME_DIR)
                    .map(|dir| PathBuf::from(dir).join(PODMAN_ROOTLESS_SOCKET)),
            },
        }
    }
}

/// The engine the docker CLI would use, given a context `chosen` on the
/// command line (see the module's order). An unknown context is
/// [`DockerError::UnknownContext`], listing the known ones.
pub fn resolve(chosen: Option<&str>, settings: &Settings) -> Result<Endpoint, DockerError> {
    let (name, origin) = if let Some(name) = chosen {
        (name.to_string(), Origin::Chosen)
    } else if settings.docker_host.is_some() {
        return default_endpoint(settings, None, Origin::HostEnv);
    } else if let Some(name) = &settings.docker_context {
        (name.clone(), Origin::ContextEnv)
    } else {
        let dir = settings.config_dir.as_deref();
        let DockerConfig {
            current_context, ..
        } = config::load_config_in(dir)?;
        match current_context.filter(|c| !c.is_empty()) {
            Some(name) => {
                let path =
                    dir.map_or_else(String::new, |d| d.join("config.json").display().to_string());
                (name, Origin::CurrentContext(path))
            }
            None => return default_endpoint(settings, None, Origin::Default),
        }
    };
    if name == DEFAULT_CONTEXT {
        return default_endpoint(settings, Some(name), origin);
    }
    named_context(settings, name, origin)
}

/// `DOCKER_HOST`, else the local socket (found by [`LocalSockets::probe`]
/// when nothing named an engine; a `default` context named is Docker's).
fn default_endpoint(
    settings: &Settings,
    context: Option<String>,
    origin: Origin,
) -> Result<Endpoint, DockerError> {
    let (address, origin) = match (&settings.docker_host, origin) {
        (Some(host), origin) => (host.clone(), origin),
        (None, Origin::Default) => settings.local.probe(),
        (None, origin) => (DEFAULT_ADDRESS.to_string(), origin),
    };
    let endpoint = Endpoint {
        address,
        context,
        origin,
    };
    if settings.docker_host.is_some() && settings.tls_verify {
        return Err(DockerError::AddressUnsupported {
            address: endpoint.address,
            context: endpoint.context,
            why: format!("TLS ({DOCKER_TLS_VERIFY}) is not supported"),
        });
    }
    let from_host_env = settings.docker_host.is_some();
    check_address(endpoint, from_host_env)
}

fn named_context(
    settings: &Settings,
    name: String,
    origin: Origin,
) -> Result<Endpoint, DockerError> {
    let unknown = |name: String, origin: Origin| {
        let mut known = vec![DEFAULT_CONTEXT.to_string()];
        if let Some(dir) = &settings.config_dir {
            known.extend(config::context_names(dir));
        }
        DockerError::UnknownContext {
            name,
            origin,
            known,
        }
    };
    let Some(dir) = settings.config_dir.as_deref() else {
        return Err(unknown(name, origin));
    };
    let Some(meta) = config::load_context(dir, &name)? else {
        return Err(unknown(name, origin));
    };
    let host = meta
        .endpoints
        .docker
        .as_ref()
        .and_then(|d| d.host.clone())
        .filter(|h| !h.is_empty());
    let Some(address) = host else {
        return Err(DockerError::ContextInvalid {
            path: config::context_meta_path(dir, &name).display().to_string(),
            name,
            why: "it has no docker endpoint (Endpoints.docker.Host)".to_string(),
        });
    };
    let tls = config::context_tls_dir(dir, &name);
    let has_tls = std::fs::read_dir(&tls).is_ok_and(|mut files| files.next().is_some());
    let why = if has_tls {
        Some(format!(
            "its TLS material ({}) is not supported",
            tls.display()
        ))
    } else if meta.endpoints.docker.is_some_and(|d| d.skip_tls_verify) {
        Some("TLS (SkipTLSVerify) is not supported".to_string())
    } else {
        None
    };
    if let Some(why) = why {
        return Err(DockerError::ContextUnsupported { name, address, why });
    }
    check_address(
        Endpoint {
            address,
            context: Some(name),
            origin,
        },
        false,
    )
}

/// Refuses the schemes imgctl does not connect over, and addresses that do
/// not parse (no socket, no host, a bad port), saying why.
/// `from_host_env`: the address is `DOCKER_HOST`'s (else a context's).
fn check_address(endpoint: Endpoint, from_host_env: bool) -> Result<Endpoint, DockerError> {
    let address = endpoint.address.as_str();
    let scheme = SCHEMES.iter().find(|s| address.starts_with(*s));
    if let Some(scheme) = scheme {
        let rest = &address[scheme.len()..];
        let problem = if *scheme == "unix://" {
            rest.is_empty().then(|| NO_SOCKET_OR_HOST.to_string())
        } else {
            host_port_problem(rest)
        };
        return match problem {
            None => Ok(endpoint),
            Some(why) => Err(DockerError::AddressInvalid {
                address: endpoint.address,
                context: endpoint.context,
                from_host_env,
                why,
            }),
        };
    }
    let why = match address.split_once("://").map(|(scheme, _)| scheme) {
        Some("ssh") => "ssh:// engines are not supported".to_string(),
        Some("https") => "TLS (https://) is not supported".to_string(),
        Some("npipe") => "npipe:// is a Windows named pipe".to_string(),
        _ => format!("use {}", SCHEMES.map(|s| format!("{s}…")).join(", ")),
    };
    Err(DockerError::AddressUnsupported {
        address: endpoint.address,
        context: endpoint.context,
        why,
    })
}

/// Why an address with nothing after its scheme (`tcp://`) is refused.
const NO_SOCKET_OR_HOST: &str = "it names no socket or host";

/// What is wrong with the `HOST[:PORT][/…]` of a `tcp://` or `http://`
/// address (`rest`: what follows the scheme), if anything: no host, a host
/// that is neither a name nor an IP address, a port that is not a number from
/// 1 to 65535. Without a port the engine is reached on port 80, as bollard
/// does.
fn host_port_problem(rest: &str) -> Option<String> {
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Some(NO_SOCKET_OR_HOST.to_string());
    }
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((ip, after)) = bracketed.split_once(']') else {
            return Some(format!(
                "the IPv6 address in `{authority}` has no closing `]`"
            ));
        };
        if ip.parse::<std::net::Ipv6Addr>().is_err() {
            return Some(format!("`[{ip}]` is not an IPv6 address"));
        }
        match after {
            "" => (ip, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (ip, Some(port)),
                None => return Some(format!("`{after}` after `[{ip}]` is not `:PORT`")),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Some(format!(
                    "`{authority}` is not HOST:PORT (an IPv6 address goes in brackets: tcp://[::1]:2375)"
                ))
            }
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Some("it names no host (tcp://HOST:PORT)".to_string());
    }
    let name_like = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if !authority.starts_with('[') && !name_like {
        return Some(format!(
            "`{}` is not a host name or IP address",
            host.escape_debug()
        ));
    }
    let port = port?;
    if port.is_empty() {
        return Some("the port after `:` is empty".to_string());
    }
    if !port.bytes().all(|b| b.is_ascii_digit()) {
        return Some(format!(
            "the port `{}` is not a number",
            port.escape_debug()
        ));
    }
    match port.parse::<u32>() {
        Ok(1..=65535) => None,
        _ => Some(format!("the port {port} is not between 1 and 65535")),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A config folder with contexts `name → host` and a config.json.
    fn store(config_json: &str, contexts: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), config_json).unwrap();
        for (name, host) in contexts {
            add_context(
                dir.path(),
                name,
                &format!(r#"{{"docker":{{"Host":"{host}"}}}}"#),
            );
        }
        dir
    }

    fn add_context(dir: &Path, name: &str, endpoints: &str) {
        let meta = config::context_meta_path(dir, name);
        std::fs::create_dir_all(meta.parent().unwrap()).unwrap();
        std::fs::write(
            meta,
            format!(r#"{{"Name":"{name}","Metadata":{{}},"Endpoints":{endpoints}}}"#),
        )
        .unwrap();
    }

    fn settings(dir: &Path, host: Option<&str>, context: Option<&str>) -> Settings {
        Settings {
            docker_host: host.map(str::to_string),
            docker_context: context.map(str::to_string),
            tls_verify: false,
            config_dir: Some(dir.to_path_buf()),
            local: LocalSockets::default(),
        }
    }

    fn address(chosen: Option<&str>, s: &Settings) -> String {
        resolve(chosen, s).unwrap().address
    }

    #[test]
    fn the_docker_cli_order() {
        let dir = store(
            r#"{"currentContext": "current"}"#,
            &[
                ("current", "unix:///current.sock"),
                ("env", "tcp://10.0.0.2:2375"),
                ("flag", "http://10.0.0.3:2375"),
            ],
        );
        let host = Some("unix:///host.sock");
        let all = settings(dir.path(), host, Some("env"));
        // The command line beats everything.
        let chosen = resolve(Some("flag"), &all).unwrap();
        assert_eq!(chosen.address, "http://10.0.0.3:2375");
        assert_eq!(chosen.context.as_deref(), Some("flag"));
        assert_eq!(chosen.origin, Origin::Chosen);
        // DOCKER_HOST beats DOCKER_CONTEXT and currentContext (as docker 28 does).
        let from_host = resolve(None, &all).unwrap();
        assert_eq!(from_host.address, "unix:///host.sock");
        assert_eq!(
            (from_host.context, from_host.origin),
            (None, Origin::HostEnv)
        );
        // DOCKER_CONTEXT beats currentContext.
        let env = resolve(None, &settings(dir.path(), None, Some("env"))).unwrap();
        assert_eq!(env.address, "tcp://10.0.0.2:2375");
        assert_eq!(env.origin, Origin::ContextEnv);
        // currentContext beats the local socket.
        let current = resolve(None, &settings(dir.path(), None, None)).unwrap();
        assert_eq!(current.address, "unix:///current.sock");
        assert_eq!(current.context.as_deref(), Some("current"));
        let path = dir.path().join("config.json").display().to_string();
        assert_eq!(current.origin, Origin::CurrentContext(path));
        // Nothing at all: the local socket.
        let empty = tempfile::tempdir().unwrap();
        let default = resolve(None, &settings(empty.path(), None, None)).unwrap();
        assert_eq!(default.address, DEFAULT_ADDRESS);
        assert_eq!((default.context, default.origin), (None, Origin::Default));
        let nowhere = Settings::default();
        assert_eq!(address(None, &nowhere), DEFAULT_ADDRESS);
    }

    #[test]
    fn the_default_context_is_docker_host_or_the_socket() {
        let dir = store(r#"{"currentContext": "default"}"#, &[]);
        let host = settings(dir.path(), Some("tcp://10.0.0.9:2375"), None);
        let chosen = resolve(Some("default"), &host).unwrap();
        assert_eq!(chosen.address, "tcp://10.0.0.9:2375");
        assert_eq!(chosen.context.as_deref(), Some("default"));
        let none = settings(dir.path(), None, Some("default"));
        assert_eq!(address(None, &none), DEFAULT_ADDRESS);
        assert_eq!(
            address(None, &settings(dir.path(), None, None)),
            DEFAULT_ADDRESS
        );
        // An empty currentContext or DOCKER_CONTEXT is no choice.
        let dir = store(r#"{"currentContext": ""}"#, &[]);
        assert_eq!(
            address(None, &settings(dir.path(), None, None)),
            DEFAULT_ADDRESS
        );
    }

    #[test]
    fn an_unknown_context_lists_the_known_ones() {
        let dir = store(
            r#"{"currentContext": "gone"}"#,
            &[("zeta", "unix:///z.sock"), ("alpha", "unix:///a.sock")],
        );
        let s = settings(dir.path(), None, None);
        let err = resolve(Some("nope"), &s).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no Docker context `nope` (chosen on the command line); the contexts are: default, alpha, zeta"
        );
        let err = resolve(None, &s).unwrap_err().to_string();
        assert!(
            err.starts_with("no Docker context `gone` (currentContext of "),
            "{err}"
        );
        let err = resolve(None, &settings(dir.path(), None, Some("nah")))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("no Docker context `nah` (DOCKER_CONTEXT)"),
            "{err}"
        );
        let err = resolve(Some("x"), &Settings::default()).unwrap_err();
        assert!(
            err.to_string().ends_with("the contexts are: default"),
            "{err}"
        );
    }

    #[test]
    fn tls_ssh_and_odd_addresses_are_refused_with_a_reason() {
        let dir = store(
            "{}",
            &[
                ("ssh", "ssh://me@gpu-box"),
                ("https", "https://10.0.0.1:2376"),
                ("odd", "/var/run/docker.sock"),
            ],
        );
        add_context(
            dir.path(),
            "skip",
            r#"{"docker":{"Host":"tcp://10.0.0.1:2376","SkipTLSVerify":true}}"#,
        );
        add_context(
            dir.path(),
            "certs",
            r#"{"docker":{"Host":"tcp://10.0.0.1:2376"}}"#,
        );
        let tls = config::context_tls_dir(dir.path(), "certs");
        std::fs::create_dir_all(&tls).unwrap();
        std::fs::write(tls.join("ca.pem"), "pem").unwrap();
        add_context(dir.path(), "empty", r#"{"docker":{"Host":""}}"#);
        let s = settings(dir.path(), None, None);
        let err = |name: &str| resolve(Some(name), &s).unwrap_err().to_string();
        assert_eq!(
            err("ssh"),
            "cannot use the Docker engine at ssh://me@gpu-box (context ssh): ssh:// engines are not supported"
        );
        assert!(err("https").ends_with("TLS (https://) is not supported"));
        assert!(
            err("odd").ends_with(": use unix://…, tcp://…, http://…"),
            "{}",
            err("odd")
        );
        assert_eq!(
            err("skip"),
            "cannot use Docker context `skip` (tcp://10.0.0.1:2376): TLS (SkipTLSVerify) is not supported"
        );
        assert!(
            err("certs").contains("its TLS material ("),
            "{}",
            err("certs")
        );
        assert!(
            err("empty").contains("it has no docker endpoint"),
            "{}",
            err("empty")
        );
        let tls_env = Settings {
            docker_host: Some("tcp://10.0.0.1:2376".to_string()),
            tls_verify: true,
            ..Settings::default()
        };
        let e = resolve(None, &tls_env).unwrap_err().to_string();
        assert!(
            e.ends_with("TLS (DOCKER_TLS_VERIFY) is not supported"),
            "{e}"
        );
        for host in ["unix://", "tcp://"] {
            let s = Settings {
                docker_host: Some(host.to_string()),
                ..Settings::default()
            };
            let e = resolve(None, &s).unwrap_err().to_string();
            assert!(e.ends_with("it names no socket or host"), "{e}");
        }
    }

    #[test]
    fn malformed_tcp_addresses_say_what_is_wrong() {
        let why = |host: &str| {
            let s = Settings {
                docker_host: Some(host.to_string()),
                ..Settings::default()
            };
            resolve(None, &s).unwrap_err().to_string()
        };
        assert_eq!(
            why("tcp://127.0.0.1:99999"),
            "DOCKER_HOST=tcp://127.0.0.1:99999 is not an engine address: the port 99999 is not between 1 and 65535"
        );
        assert!(
            why("tcp://:0").ends_with(": it names no host (tcp://HOST:PORT)"),
            "{}",
            why("tcp://:0")
        );
        assert!(why("tcp://127.0.0.1:abc").ends_with(": the port `abc` is not a number"));
        assert!(why("http://h:0").ends_with(": the port 0 is not between 1 and 65535"));
        assert!(why("tcp://h:").ends_with(": the port after `:` is empty"));
        assert!(why("tcp://::1:2375").contains("an IPv6 address goes in brackets"));
        assert!(why("tcp://[::g]:2375").ends_with("`[::g]` is not an IPv6 address"));
        assert!(why("tcp://[::1]x").contains("is not `:PORT`"));
        assert!(why("tcp://me@h:2375").ends_with("`me@h` is not a host name or IP address"));
        for good in [
            "tcp://127.0.0.1:2375",
            "tcp://gpu-box.local:65535",
            "http://gpu_box:1/",
            "tcp://[::1]:2375",
            "tcp://[::1]",
            "tcp://gpu-box",
        ] {
            let s = Settings {
                docker_host: Some(good.to_string()),
                ..Settings::default()
            };
            assert_eq!(resolve(None, &s).unwrap().address, good);
        }
        // A context's address names the context, not DOCKER_HOST.
        let dir = store("{}", &[("bad-port", "tcp://10.0.0.1:70000")]);
        let err = resolve(Some("bad-port"), &settings(dir.path(), None, None))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "the engine address tcp://10.0.0.1:70000 of Docker context `bad-port` is not valid: the port 70000 is not between 1 and 65535"
        );
    }

    #[test]
    fn a_broken_meta_file_names_its_path() {
        let dir = store("{}", &[]);
        let meta = config::context_meta_path(dir.path(), "bad");
        std::fs::create_dir_all(meta.parent().unwrap()).unwrap();
        std::fs::write(&meta, "{").unwrap();
        let err = resolve(Some("bad"), &settings(dir.path(), None, None))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!(
                "Docker context `bad` ({}) is unreadable: ",
                meta.display()
            )),
            "{err}"
        );
    }

    #[test]
    fn with_no_docker_socket_podman_s_rootful_then_rootless_socket_is_found() {
        use std::os::unix::net::UnixListener;
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name);
        // A socket file is what counts: a plain file where the socket would be is skipped.
        std::fs::write(at("docker.sock"), "").unwrap();
        let _rootful = UnixListener::bind(at("rootful.sock")).unwrap();
        let _rootless = UnixListener::bind(at("rootless.sock")).unwrap();
        let mut s = Settings {
            config_dir: Some(dir.path().to_path_buf()),
            local: LocalSockets {
                docker: Some(at("docker.sock")),
                podman_rootful: Some(at("rootful.sock")),
                podman_rootless: Some(at("rootless.sock")),
            },
            ..Settings::default()
        };
        let found = |s: &Settings| {
            let e = resolve(None, s).unwrap();
            (e.address, e.origin)
        };
        let unix = |name: &str| format!("unix://{}", at(name).display());
        assert_eq!(
            found(&s),
            (unix("rootful.sock"), Origin::Podman(PodmanSocket::Rootful))
        );
        s.local.podman_rootful = Some(at("missing.sock"));
        assert_eq!(
            found(&s),
            (
                unix("rootless.sock"),
                Origin::Podman(PodmanSocket::Rootless)
            )
        );
        // A Docker socket comes first; its address is the usual one.
        std::fs::remove_file(at("docker.sock")).unwrap();
        let _docker = UnixListener::bind(at("docker.sock")).unwrap();
        assert_eq!(found(&s), (DEFAULT_ADDRESS.to_string(), Origin::Default));
        // DOCKER_HOST and a `default` context named are not probed.
        s.local.docker = None;
        s.docker_host = Some("tcp://127.0.0.1:2375".into());
        assert_eq!(found(&s).0, "tcp://127.0.0.1:2375");
        s.docker_host = None;
        let named = resolve(Some(DEFAULT_CONTEXT), &s).unwrap();
        assert_eq!(named.address, DEFAULT_ADDRESS);
        // No socket at all: Docker's address, for the error to name.
        s.local.podman_rootless = None;
        assert_eq!(found(&s), (DEFAULT_ADDRESS.to_string(), Origin::Default));
    }
}
