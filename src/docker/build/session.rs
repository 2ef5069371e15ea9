//! A BuildKit session of imgctl's own, serving build secrets
//! (`RUN --mount=type=secret,id=…`).
//!
//! The engine reaches back to the client through a session: `POST /session`
//! upgraded to HTTP/2 (`Upgrade: h2c`), on which the *engine* is the gRPC
//! client and imgctl the server. The request's headers name the session
//! (`X-Docker-Expose-Session-Uuid`, the id the `/build` request then gives as
//! `session=`) and list every gRPC method served
//! (`X-Docker-Expose-Session-Grpc-Method`; BuildKit's session manager
//! compares them case-insensitively). These are the conventions of BuildKit's
//! `session/session.go` and `session/manager.go`, unchanged since Docker
//! 18.09. bollard's own session (in `build_image`) serves registry auth only
//! and cannot be given secrets, hence this one.
//!
//! Served: gRPC health (`Check` answers SERVING; BuildKit checks the session
//! every few seconds and drops it when unhealthy) and `Secrets/GetSecret`
//! from a [`BuildSecrets`] store (NotFound for an id it does not hold, which
//! BuildKit reports as `secret <id>: not found`). Anything else is answered
//! Unimplemented, which BuildKit treats as "not offered" (registry
//! credentials then are anonymous, as they were with bollard's session given
//! none). The session lives until the [`Session`] is dropped.
use std::collections::BTreeMap;
use std::sync::Arc;

use bollard::health::health_check_response::ServingStatus;
use bollard::health::health_server::{self, HealthServer};
use bollard::health::{
    HealthCheckRequest, HealthCheckResponse, HealthListRequest, HealthListResponse,
};
use bollard::moby::buildkit::secrets::v1::secrets_server::{self, SecretsServer};
use bollard::moby::buildkit::secrets::v1::{GetSecretRequest, GetSecretResponse};
use hyper::StatusCode;
use hyper_util::rt::TokioExecutor;
use hyper_util::service::TowerToHyperService;
use tonic::server::NamedService as _;
use tonic::{Request, Response, Status};

use super::raw::{error_of, read_body, AbortOnDrop, EngineHttp};

/// The session's name (BuildKit shows it in its logs; the docker CLI gives
/// the context folder's name).
const SESSION_NAME: &str = "imgctl";

/// Build secrets by id, served to `RUN --mount=type=secret,id=…`. Its
/// `Debug` names the ids only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct BuildSecrets(BTreeMap<String, Vec<u8>>);

impl BuildSecrets {
    /// Adds (or replaces) secret `id`.
    pub fn insert(&mut self, id: &str, value: Vec<u8>) {
        self.0.insert(id.to_string(), value);
    }
    /// The ids held.
    pub fn ids(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
    /// Whether no secret is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for BuildSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BuildSecrets").field(&self.ids()).finish()
    }
}

/// An open session; dropping it closes the connection, which ends the
/// session on the engine.
#[derive(Debug)]
pub(super) struct Session {
    _serving: AbortOnDrop,
}

/// The gRPC methods served, as the headers name them
/// (`/<package>.<Service>/<Method>`).
pub(super) fn methods() -> Vec<String> {
    vec![
        format!("/{}/Check", HealthServer::<Healthy>::NAME),
        format!("/{}/GetSecret", SecretsServer::<SecretStore>::NAME),
    ]
}

/// The headers of the `/session` request for session `id`.
pub(super) fn headers(id: &str) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("Connection", "Upgrade".to_string()),
        ("Upgrade", "h2c".to_string()),
        ("X-Docker-Expose-Session-Uuid", id.to_string()),
        ("X-Docker-Expose-Session-Name", SESSION_NAME.to_string()),
        // BuildKit keys its cache of synced local folders by it; imgctl
        // sends its context as a tar and syncs none.
        ("X-Docker-Expose-Session-Sharedkey", id.to_string()),
    ];
    for method in methods() {
        headers.push(("X-Docker-Expose-Session-Grpc-Method", method));
    }
    headers
}

/// Opens session `id` on the engine and serves `secrets` on it until the
/// returned [`Session`] is dropped. Fails with the engine's words when it
/// refuses the upgrade.
pub(super) async fn start(
    engine: &EngineHttp,
    id: &str,
    secrets: BuildSecrets,
) -> Result<Session, String> {
    let (response, connection) = engine
        .send(hyper::Method::POST, "/session", &headers(id), Vec::new())
        .await?;
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = response.status();
        return Err(error_of(status, &read_body(response).await));
    }
    let upgraded = hyper::upgrade::on(response)
        .await
        .map_err(|e| format!("the session's upgrade failed: {e}"))?;
    // The HTTP/1 connection has handed its socket over to `upgraded`.
    drop(connection);
    let routes = tonic::service::Routes::new(HealthServer::new(Healthy))
        .add_service(SecretsServer::new(SecretStore(Arc::new(secrets))))
        .prepare();
    let serving = tokio::spawn(async move {
        // The engine is the HTTP/2 client on the upgraded connection. Its end
        // (the build is over, or the engine went away) ends the task.
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(upgraded, TowerToHyperService::new(routes))
            .await;
    });
    Ok(Session {
        _serving: AbortOnDrop(serving),
    })
}

/// gRPC health: the session is up while it is served.
struct Healthy;

#[tonic::async_trait]
impl health_server::Health for Healthy {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        serving(&request.get_ref().service).map(Response::new)
    }

    async fn list(
        &self,
        _request: Request<HealthListRequest>,
    ) -> Result<Response<HealthListResponse>, Status> {
        let statuses = [(String::new(), serving("")?)].into_iter().collect();
        Ok(Response::new(HealthListResponse { statuses }))
    }

    type WatchStream = futures_util::stream::Empty<Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("imgctl's session answers Check only"))
    }
}

/// SERVING for the server as a whole (service `""`); NotFound for a named
/// service, as gRPC's health protocol says.
fn serving(service: &str) -> Result<HealthCheckResponse, Status> {
    if service.is_empty() {
        Ok(HealthCheckResponse {
            status: ServingStatus::Serving as i32,
        })
    } else {
        Err(Status::not_found(format!("unknown service {service}")))
    }
}

/// The secrets a build may ask for.
struct SecretStore(Arc<BuildSecrets>);

impl SecretStore {
    fn get(&self, id: &str) -> Result<GetSecretResponse, Status> {
        match self.0 .0.get(id) {
            Some(data) => Ok(GetSecretResponse { data: data.clone() }),
            None => Err(Status::not_found(format!(
                "imgctl serves no build secret {id:?} (it serves: {})",
                self.0.ids().join(", ")
            ))),
        }
    }
}

#[tonic::async_trait]
impl secrets_server::Secrets for SecretStore {
    async fn get_secret(
        &self,
        request: Request<GetSecretRequest>,
    ) -> Result<Response<GetSecretResponse>, Status> {
        self.get(&request.get_ref().id).map(Response::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headers_name_the_session_and_each_method() {
        let headers = headers("s1");
        let values = |name: &str| -> Vec<&str> {
            headers
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
                .collect()
        };
        assert_eq!(values("Upgrade"), ["h2c"]);
        assert_eq!(values("Connection"), ["Upgrade"]);
        assert_eq!(values("X-Docker-Expose-Session-Uuid"), ["s1"]);
        assert_eq!(values("X-Docker-Expose-Session-Name"), ["imgctl"]);
        assert_eq!(values("X-Docker-Expose-Session-Sharedkey"), ["s1"]);
        assert_eq!(
            values("X-Docker-Expose-Session-Grpc-Method"),
            [
                "/grpc.health.v1.Health/Check",
                "/moby.buildkit.secrets.v1.Secrets/GetSecret"
            ]
        );
    }

    #[test]
    fn secrets_are_served_by_id_and_unknown_ids_are_not_found() {
        let mut secrets = BuildSecrets::default();
        secrets.insert("proxy-ca", b"PEM".to_vec());
        assert_eq!(format!("{secrets:?}"), r#"BuildSecrets(["proxy-ca"])"#);
        let store = SecretStore(Arc::new(secrets));
        assert_eq!(store.get("proxy-ca").unwrap().data, b"PEM");
        let err = store.get("nope").unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound);
        assert!(err.message().contains("\"nope\""), "{err:?}");
        assert!(err.message().contains("proxy-ca"), "{err:?}");
    }

    /// One gRPC unary call as the engine makes it (HTTP/2, a 5-byte frame
    /// header then the protobuf): the grpc-status and the reply's body.
    async fn call(
        sender: &mut hyper::client::conn::http2::SendRequest<
            http_body_util::Full<hyper::body::Bytes>,
        >,
        path: &str,
        message: &impl prost::Message,
    ) -> (String, Vec<u8>) {
        use http_body_util::BodyExt as _;
        let payload = message.encode_to_vec();
        let mut body = vec![0u8];
        body.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        body.extend_from_slice(&payload);
        let request = hyper::Request::post(format!("http://session{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let headers = response.headers().clone();
        let collected = response.into_body().collect().await.unwrap();
        let trailers = collected.trailers().cloned().unwrap_or_default();
        let status = trailers
            .get("grpc-status")
            .or_else(|| headers.get("grpc-status"))
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = collected.to_bytes();
        (status, bytes.get(5..).unwrap_or_default().to_vec())
    }

    /// A fake engine on a unix socket: it answers `/session` with 101, then
    /// calls the session's methods as BuildKit does; dropping the session
    /// closes the connection.
    #[tokio::test]
    async fn the_session_serves_secrets_over_the_upgraded_connection_until_dropped() {
        use prost::Message as _;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("engine.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let fake = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let mut byte = [0u8];
                stream.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            stream
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
                .await
                .unwrap();
            (String::from_utf8(head).unwrap(), stream)
        });
        let engine = EngineHttp::new(
            &format!("unix://{}", socket.display()),
            "1.41".into(),
            std::time::Duration::from_secs(10),
        )
        .unwrap();
        let mut secrets = BuildSecrets::default();
        secrets.insert("proxy-ca", b"PEM bytes".to_vec());
        let session = start(&engine, "s1", secrets).await.unwrap();
        let (head, stream) = fake.await.unwrap();
        let head = head.to_ascii_lowercase();
        assert!(
            head.starts_with("post /v1.41/session http/1.1\r\n"),
            "{head}"
        );
        for line in [
            "upgrade: h2c",
            "x-docker-expose-session-uuid: s1",
            "x-docker-expose-session-grpc-method: /moby.buildkit.secrets.v1.secrets/getsecret",
        ] {
            assert!(
                head.contains(&format!("\r\n{line}\r\n")),
                "no {line}: {head}"
            );
        }
        let (mut sender, connection) = hyper::client::conn::http2::handshake(
            TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        let connection = tokio::spawn(connection);
        let (status, reply) = call(
            &mut sender,
            "/grpc.health.v1.Health/Check",
            &HealthCheckRequest::default(),
        )
        .await;
        assert_eq!(status, "0");
        let health = HealthCheckResponse::decode(reply.as_slice()).unwrap();
        assert_eq!(health.status, ServingStatus::Serving as i32);
        let ask = |id: &str| GetSecretRequest {
            id: id.into(),
            ..Default::default()
        };
        let (status, reply) = call(
            &mut sender,
            "/moby.buildkit.secrets.v1.Secrets/GetSecret",
            &ask("proxy-ca"),
        )
        .await;
        assert_eq!(status, "0");
        assert_eq!(
            GetSecretResponse::decode(reply.as_slice()).unwrap().data,
            b"PEM bytes"
        );
        let (status, _) = call(
            &mut sender,
            "/moby.buildkit.secrets.v1.Secrets/GetSecret",
            &ask("nope"),
        )
        .await;
        assert_eq!(status, (tonic::Code::NotFound as i32).to_string());
        // Registry auth is not offered: Unimplemented, as BuildKit expects.
        let (status, _) = call(&mut sender, "/moby.filesync.v1.Auth/Credentials", &ask("x")).await;
        assert_eq!(status, (tonic::Code::Unimplemented as i32).to_string());
        // The build is over: the engine sees its connection end.
        drop(session);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), connection).await;
        assert!(ended.is_ok(), "the session's connection stayed open");
    }

    #[test]
    fn health_is_serving_for_the_server_only() {
        assert_eq!(serving("").unwrap().status, ServingStatus::Serving as i32);
        assert_eq!(serving("x").unwrap_err().code(), tonic::Code::NotFound);
    }
}
