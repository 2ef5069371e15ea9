//! The docker client's configuration folder, read the way the docker CLI
//! reads it: `$DOCKER_CONFIG`, else `~/.docker`, holding `config.json`
//! (registry credentials, credential helpers, the current context) and the
//! context store (`contexts/meta/<sha256 of the name>/meta.json`).
//!
//! It only reads; [`super::auth`] turns the config into registry credentials
//! and [`super::endpoint`] turns contexts into engine addresses.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::DockerError;
use crate::env_vars::DOCKER_CONFIG;

/// The largest docker `config.json` or context `meta.json` read (1 MiB; the
/// docker CLI writes a few KiB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The parts of config.json imgctl reads.
#[derive(Debug, Default, Deserialize)]
pub struct DockerConfig {
    /// Per-registry credentials.
    #[serde(default)]
    pub auths: BTreeMap<String, AuthEntry>,
    /// Default credential helper.
    #[serde(default, rename = "credsStore")]
    pub creds_store: Option<String>,
    /// Per-registry credential helpers.
    #[serde(default, rename = "credHelpers")]
    pub cred_helpers: BTreeMap<String, String>,
    /// The context `docker context use` chose (`default` or empty: none).
    #[serde(default, rename = "currentContext")]
    pub current_context: Option<String>,
}

/// One `auths` entry.
#[derive(Debug, Default, Deserialize)]
pub struct AuthEntry {
    /// base64 of `user:password`.
    #[serde(default)]
    pub auth: Option<String>,
    /// An OAuth identity token (used instead of a password).
    #[serde(default, rename = "identitytoken")]
    pub identity_token: Option<String>,
}

/// The configuration folder: `$DOCKER_CONFIG`, else `~/.docker` (`None`
/// when neither is set).
pub fn config_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(DOCKER_CONFIG).filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os(crate::env_vars::HOME).map(|h| PathBuf::from(h).join(".docker"))
}

/// The config file path: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
pub fn config_path() -> Option<PathBuf> {
    config_dir().map(|d| d.join("config.json"))
}

/// Reads a config file; a missing file is an empty config.
pub fn load_config(path: &Path) -> Result<DockerConfig, DockerError> {
    let failed = |error: String| DockerError::Config {
        path: path.display().to_string(),
        error,
    };
    match crate::sys::fs::read_regular_text(path, MAX_CONFIG_BYTES) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| failed(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DockerConfig::default()),
        Err(e) => Err(failed(e.to_string())),
    }
}

/// The config of folder `dir` (`None`: no folder, an empty config).
pub fn load_config_in(dir: Option<&Path>) -> Result<DockerConfig, DockerError> {
    match dir {
        Some(dir) => load_config(&dir.join("config.json")),
        None => Ok(DockerConfig::default()),
    }
}

/// The folder of a context's files in the store: the SHA-256 of its name in
/// hex (the docker CLI's `contextdir`).
pub fn context_id(name: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(name.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A context's `meta.json`: its name and endpoints.
#[derive(Debug, Deserialize)]
pub struct ContextMeta {
    /// The context's name.
    #[serde(rename = "Name")]
    pub name: String,
    /// Its endpoints; imgctl reads `docker`.
    #[serde(default, rename = "Endpoints")]
    pub endpoints: ContextEndpoints,
}

/// The endpoints of a context.
#[derive(Debug, Default, Deserialize)]
pub struct ContextEndpoints {
    /// The engine's endpoint.
    #[serde(default)]
    pub docker: Option<DockerEndpoint>,
}

/// The `docker` endpoint of a context.
#[derive(Debug, Default, Deserialize)]
pub struct DockerEndpoint {
    /// The engine's address (`unix:///…`, `tcp://host:2375`, `ssh://…`).
    #[serde(default, rename = "Host")]
    pub host: Option<String>,
    /// Whether TLS certificates go unchecked (TLS is in use then).
    #[serde(default, rename = "SkipTLSVerify")]
    pub skip_tls_verify: bool,
}

/// The meta file of context `name` in folder `dir`.
pub fn context_meta_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("contexts")
        .join("meta")
        .join(context_id(name))
        .join("meta.json")
}

/// The folder of the TLS material of context `name`'s docker endpoint.
pub fn context_tls_dir(dir: &Path, name: &str) -> PathBuf {
    dir.join("contexts")
        .join("tls")
        .join(context_id(name))
        .join("docker")
}

/// Reads context `name`'s meta file: `Ok(None)` when the store has no such
/// context.
pub fn load_context(dir: &Path, name: &str) -> Result<Option<ContextMeta>, DockerError> {
    let path = context_meta_path(dir, name);
    let invalid = |why: String| DockerError::ContextInvalid {
        name: name.to_string(),
        path: path.display().to_string(),
        why,
    };
    match crate::sys::fs::read_regular_text(&path, MAX_CONFIG_BYTES) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| invalid(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(invalid(e.to_string())),
    }
}

/// The names of the contexts in folder `dir`'s store, sorted (unreadable
/// entries are left out: this is for listing them in a message).
pub fn context_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("contexts").join("meta")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            crate::sys::fs::read_regular_text(&e.path().join("meta.json"), MAX_CONFIG_BYTES).ok()
        })
        .filter_map(|text| serde_json::from_str::<ContextMeta>(&text).ok())
        .map(|meta| meta.name)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_ids_are_the_sha256_of_the_name() {
        // As `docker context create live` names its folder.
        assert_eq!(
            context_id("live"),
            "247610f4dedd4ab7247d07dbda19c81ca9817f85820742cad49d407ffae9e4ed"
        );
    }

    #[test]
    fn missing_config_is_empty_and_a_broken_one_names_its_path() {
        let cfg = load_config(Path::new("/nonexistent/imgctl/config.json")).unwrap();
        assert!(cfg.auths.is_empty() && cfg.current_context.is_none());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{not json").unwrap();
        let err = load_config(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("reading the docker config {}: ", path.display())),
            "{err}"
        );
    }

    #[test]
    fn contexts_are_read_from_the_store_and_listed_by_name() {
        let dir = tempfile::tempdir().unwrap();
        for (name, host) in [("zeta", "tcp://10.0.0.1:2375"), ("alpha", "unix:///x.sock")] {
            let meta = context_meta_path(dir.path(), name);
            std::fs::create_dir_all(meta.parent().unwrap()).unwrap();
            std::fs::write(
                &meta,
                format!(r#"{{"Name":"{name}","Metadata":{{}},"Endpoints":{{"docker":{{"Host":"{host}","SkipTLSVerify":false}}}}}}"#),
            )
            .unwrap();
        }
        let zeta = load_context(dir.path(), "zeta").unwrap().unwrap();
        let endpoint = zeta.endpoints.docker.unwrap();
        assert_eq!(endpoint.host.as_deref(), Some("tcp://10.0.0.1:2375"));
        assert!(!endpoint.skip_tls_verify);
        assert!(load_context(dir.path(), "nope").unwrap().is_none());
        assert_eq!(context_names(dir.path()), ["alpha", "zeta"]);
        assert!(context_names(Path::new("/nonexistent/imgctl")).is_empty());
    }
}
