//! Registry credentials from the docker client's config, for `--push`.
//!
//! It owns finding the config (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`), matching a registry host against its `auths`
//! keys, decoding the base64 `user:password` pairs, and asking a credential
//! helper (`credHelpers` / `credsStore`, the `docker-credential-<name> get`
//! protocol) when the config names one. It never calls the docker CLI and
//! never prints a secret.
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;
use base64::Engine as _;
use bollard::auth::DockerCredentials;
use serde::Deserialize;

use super::DockerError;
use crate::env_vars::DOCKER_CONFIG;

/// The key Docker Hub's credentials are stored under in config.json (the
/// docker CLI's `registry.IndexServer`).
pub const DOCKER_HUB_INDEX: &str = "https://index.docker.io/v1/";

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

/// The config file path: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
pub fn config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(DOCKER_CONFIG) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker").join("config.json"))
}

/// Reads a config file; a missing file is an empty config.
pub fn load_config(path: &Path) -> anyhow::Result<DockerConfig> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .with_context(|| format!("reading the docker config {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DockerConfig::default()),
        Err(e) => Err(e).with_context(|| format!("reading the docker config {}", path.display())),
    }
}

/// The registry host of an image reference: the first path component when it
/// looks like a host (has a `.` or `:`, or is `localhost`), else Docker Hub.
pub fn registry_of(reference: &str) -> String {
    match reference.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_string()
        }
        _ => "docker.io".to_string(),
    }
}

/// `https://host/v1/` → `host`, the way the docker CLI matches `auths` keys.
fn normalize_host(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

fn is_hub(host: &str) -> bool {
    matches!(
        host,
        "docker.io" | "index.docker.io" | "registry-1.docker.io"
    )
}

impl DockerConfig {
    /// Credentials for `registry` (as returned by [`registry_of`]), or `None`
    /// when the config holds none for it.
    pub fn credentials_for(&self, registry: &str) -> anyhow::Result<Option<DockerCredentials>> {
        let server = if is_hub(registry) {
            DOCKER_HUB_INDEX.to_string()
        } else {
            registry.to_string()
        };
        let helper = self
            .cred_helpers
            .iter()
            .find(|(k, _)| normalize_host(k) == normalize_host(&server))
            .map(|(_, v)| v.clone());
        let entry = self.auths.iter().find(|(k, _)| {
            let host = normalize_host(k);
            host == normalize_host(&server) || (is_hub(registry) && is_hub(host))
        });
        if let Some((key, entry)) = entry {
            if entry.auth.is_some() || entry.identity_token.is_some() {
                return decode_entry(key, entry, &server).map(Some);
            }
        }
        match helper.or_else(|| self.creds_store.clone()) {
            Some(helper) => from_helper(&helper, &server).map(Some),
            None => Ok(None),
        }
    }
}

fn decode_entry(key: &str, entry: &AuthEntry, server: &str) -> anyhow::Result<DockerCredentials> {
    let mut creds = DockerCredentials {
        serveraddress: Some(server.to_string()),
        identitytoken: entry.identity_token.clone(),
        ..Default::default()
    };
    if let Some(auth) = &entry.auth {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| DockerError::AuthNotBase64 {
                key: key.to_string(),
                error: e.to_string(),
            })?;
        let text = String::from_utf8(raw).map_err(|_| DockerError::AuthNotUtf8 {
            key: key.to_string(),
        })?;
        let (user, pass) =
            text.split_once(':')
                .ok_or_else(|| DockerError::AuthNotUserPassword {
                    key: key.to_string(),
                })?;
        creds.username = Some(user.to_string());
        creds.password = Some(pass.to_string());
    }
    Ok(creds)
}

#[derive(Deserialize)]
struct HelperReply {
    #[serde(rename = "Username")]
    username: String,
    #[serde(rename = "Secret")]
    secret: String,
}

/// Asks `docker-credential-<helper> get` (the credential-helper protocol:
/// server URL on stdin, `{"Username","Secret"}` on stdout).
fn from_helper(helper: &str, server: &str) -> anyhow::Result<DockerCredentials> {
    let program = format!("docker-credential-{helper}");
    let mut child = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running the credential helper {program}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(server.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(DockerError::CredentialHelper {
            output: String::from_utf8_lossy(&out.stdout).trim().to_string(),
            program,
            server: server.to_string(),
        }
        .into());
    }
    let reply: HelperReply = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading the reply of {program}"))?;
    // "<token>" as the user name means the secret is an identity token (protocol).
    Ok(if reply.username == "<token>" {
        DockerCredentials {
            identitytoken: Some(reply.secret),
            serveraddress: Some(server.to_string()),
            ..Default::default()
        }
    } else {
        DockerCredentials {
            username: Some(reply.username),
            password: Some(reply.secret),
            serveraddress: Some(server.to_string()),
            ..Default::default()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: &str) -> DockerConfig {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, json).unwrap();
        load_config(&path).unwrap()
    }

    #[test]
    fn registry_host_of_references() {
        assert_eq!(registry_of("imgctl:dev"), "docker.io");
        assert_eq!(registry_of("me/imgctl:dev"), "docker.io");
        assert_eq!(registry_of("ghcr.io/me/imgctl:dev"), "ghcr.io");
        assert_eq!(registry_of("localhost:5000/imgctl"), "localhost:5000");
        assert_eq!(registry_of("localhost/imgctl"), "localhost");
    }

    #[test]
    fn decodes_auths_for_hub_and_private_registries() {
        // "alice:s3cr:et" and "bob:pw" in base64.
        let cfg = config(
            r#"{"auths": {
                "https://index.docker.io/v1/": {"auth": "YWxpY2U6czNjcjpldA=="},
                "registry.example.com:5000": {"auth": "Ym9iOnB3"}
            }}"#,
        );
        let hub = cfg.credentials_for("docker.io").unwrap().unwrap();
        assert_eq!(hub.username.as_deref(), Some("alice"));
        assert_eq!(hub.password.as_deref(), Some("s3cr:et"));
        assert_eq!(hub.serveraddress.as_deref(), Some(DOCKER_HUB_INDEX));
        let private = cfg
            .credentials_for("registry.example.com:5000")
            .unwrap()
            .unwrap();
        assert_eq!(private.username.as_deref(), Some("bob"));
        assert!(cfg.credentials_for("ghcr.io").unwrap().is_none());
    }

    #[test]
    fn bad_auth_is_an_error_naming_the_entry() {
        let cfg = config(r#"{"auths": {"ghcr.io": {"auth": "not base64!"}}}"#);
        let err = cfg.credentials_for("ghcr.io").unwrap_err().to_string();
        assert!(err.contains("ghcr.io") && err.contains("base64"), "{err}");
    }

    #[test]
    fn missing_config_is_empty() {
        let cfg = load_config(Path::new("/nonexistent/imgctl/config.json")).unwrap();
        assert!(cfg.auths.is_empty());
    }
}
