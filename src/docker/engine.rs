//! Connecting to the engine: DOCKER_HOST honoured, API version negotiated.
use super::DockerError;
use crate::env_vars::DOCKER_HOST;

/// The address imgctl will try: DOCKER_HOST, else the local socket.
pub fn engine_address() -> String {
    std::env::var(DOCKER_HOST).unwrap_or_else(|_| "unix:///var/run/docker.sock".to_string())
}

/// Connects to the engine and negotiates the API version, so that Docker 20.10
/// (API 1.41) and current engines both work. Fails with one line naming the
/// address tried when nothing answers (exit 1).
pub async fn connect() -> Result<bollard::Docker, DockerError> {
    let address = engine_address();
    let unreachable = |e: &dyn std::fmt::Display| DockerError::Connect {
        address: address.clone(),
        error: e.to_string(),
    };
    let docker = bollard::Docker::connect_with_defaults().map_err(|e| unreachable(&e))?;
    // negotiate_version pings /version and lowers the client version to the engine's.
    let docker = docker
        .negotiate_version()
        .await
        .map_err(|e| unreachable(&e))?;
    Ok(docker)
}
