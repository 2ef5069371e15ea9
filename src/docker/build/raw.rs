//! Requests to the engine outside bollard, for a BuildKit build with a session
//! of imgctl's own ([`super::session`]): bollard's `build_image` always opens
//! its own session for a BuildKit build (serving registry auth only), so the
//! `/build` request and the `/session` upgrade are sent here, over hyper, to
//! the address bollard connected to (`unix://` or `tcp://`/`http://`, see
//! [`crate::docker::endpoint`]).
//!
//! One message of the build stream may be at most [`MESSAGE_LIMIT`] (an
//! endless body without a newline is refused, not buffered).
//!
//! Every connection is served by a task that [`AbortOnDrop`] ends when its
//! owner is dropped: dropping the build's stream (Ctrl-C) closes the `/build`
//! connection, which cancels the build on the engine, and dropping the session
//! closes it, on every path.
use std::time::Duration;

use crate::docker::transport::{Io, Target};
use bollard::models::BuildInfo;
use bollard::query_parameters::BuildImageOptions;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// Where the engine listens, and the API version the client speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EngineHttp {
    /// The address as given, for errors.
    address: String,
    target: Target,
    /// `1.51`: requests go to `/v1.51/…`.
    api: String,
    /// How long to wait for a response's headers.
    timeout: Duration,
}

/// Ends a spawned task when dropped (the task owns a connection: the socket
/// closes with it).
#[derive(Debug)]
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl EngineHttp {
    /// The engine at `address` (`unix:///var/run/docker.sock`,
    /// `tcp://10.0.0.2:2375`, `http://…`) at API version `api`. Without a
    /// port, a TCP address uses port 80, as bollard does.
    pub(super) fn new(address: &str, api: String, timeout: Duration) -> Result<Self, String> {
        let target = Target::parse(address)?;
        Ok(Self {
            address: address.to_string(),
            target,
            api,
            timeout,
        })
    }

    /// `/v1.51` + `path`.
    fn uri(&self, path_and_query: &str) -> String {
        format!("/v{}{path_and_query}", self.api)
    }

    /// The `Host` header (Go's HTTP server requires one).
    fn host(&self) -> &str {
        self.target.host()
    }

    async fn connect(&self) -> std::io::Result<Box<dyn Io>> {
        self.target.connect().await
    }

    /// Sends `request` (its URI a path such as `/build?…`, made versioned
    /// here) on a new connection; returns the response and the guard of the
    /// task that serves the connection (upgrades included).
    pub(super) async fn send(
        &self,
        method: hyper::Method,
        path_and_query: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<(Response<Incoming>, AbortOnDrop), String> {
        let io = self
            .connect()
            .await
            .map_err(|e| format!("cannot connect to the engine: {e}"))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| format!("cannot talk HTTP to the engine: {e}"))?;
        let guard = AbortOnDrop(tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        }));
        let mut builder = Request::builder()
            .method(method)
            .uri(self.uri(path_and_query))
            .header(hyper::header::HOST, self.host());
        for (name, value) in headers {
            builder = builder.header(*name, value.as_str());
        }
        let request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("cannot make the request: {e}"))?;
        let response = tokio::time::timeout(self.timeout, sender.send_request(request))
            .await
            .map_err(|_| {
                format!(
                    "the engine did not answer within {} s",
                    self.timeout.as_secs()
                )
            })?
            .map_err(|e| format!("the request to the engine failed: {e}"))?;
        Ok((response, guard))
    }

    /// `POST /build` with `options` as its query and the context tar as its
    /// body; the stream of the engine's messages.
    pub(super) async fn build(
        &self,
        options: &BuildImageOptions,
        context: Vec<u8>,
    ) -> Result<BuildStream, String> {
        let query = build_query(options)?;
        let headers = [("Content-Type", "application/x-tar".to_string())];
        let (response, guard) = self
            .send(
                hyper::Method::POST,
                &format!("/build?{query}"),
                &headers,
                context,
            )
            .await?;
        if !response.status().is_success() {
            let status = response.status();
            return Err(error_of(status, &read_body(response).await));
        }
        Ok(BuildStream {
            body: response.into_body(),
            lines: LineBuffer::default(),
            ended: false,
            too_much: crate::docker::transport::TooMuch {
                address: self.address.clone(),
                request: format!("POST {}", self.uri("/build")),
                limit: MESSAGE_LIMIT,
                stream: true,
            },
            _connection: guard,
        })
    }
}

/// The `/build` query for `options`, encoded as bollard encodes it (build
/// args and labels as JSON objects, the builder version as a number).
pub(super) fn build_query(options: &BuildImageOptions) -> Result<String, String> {
    serde_urlencoded::to_string(options).map_err(|e| format!("cannot encode the build query: {e}"))
}

/// A failed response's body, as text (at most 64 KiB are kept).
pub(super) async fn read_body(response: Response<Incoming>) -> String {
    let mut body = response.into_body();
    let mut text = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            text.extend_from_slice(&data);
            if text.len() > 64 * 1024 {
                break;
            }
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// The engine's words for a failed request: the `message` of its JSON error
/// body, else the body, else the status.
pub(super) fn error_of(status: StatusCode, body: &str) -> String {
    #[derive(serde::Deserialize)]
    struct EngineError {
        message: String,
    }
    match serde_json::from_str::<EngineError>(body) {
        Ok(e) => e.message.trim().to_string(),
        Err(_) if !body.trim().is_empty() => format!("{status}: {}", body.trim()),
        Err(_) => status.to_string(),
    }
}

/// The most one message of the build stream may be: 16 MiB. BuildKit's
/// progress messages (a base64 protobuf `StatusResponse` in `aux`) carry a
/// batch of vertex logs, which BuildKit clips at 2 MiB per step by default;
/// an engine that sends 16 MiB without a newline sends no build stream.
pub(super) const MESSAGE_LIMIT: usize = 16 * 1024 * 1024;

/// Splits a byte stream into lines (`\n`, a trailing `\r` dropped), each
/// at most a limit; every byte is searched for a newline once.
#[derive(Debug)]
struct LineBuffer {
    buf: Vec<u8>,
    /// How much of `buf` holds no newline (searched already).
    scanned: usize,
    /// The bytes of the unfinished line (since the stream's last newline).
    unfinished: usize,
    limit: usize,
}

impl Default for LineBuffer {
    fn default() -> Self {
        Self::new(MESSAGE_LIMIT)
    }
}

impl LineBuffer {
    fn new(limit: usize) -> Self {
        Self {
            buf: Vec::new(),
            scanned: 0,
            unfinished: 0,
            limit,
        }
    }

    /// Appends `bytes`; `Err` with the limit when the unfinished line passes it.
    fn push(&mut self, bytes: &[u8]) -> Result<(), usize> {
        self.unfinished = match bytes.iter().rposition(|b| *b == b'\n') {
            Some(i) => bytes.len() - i - 1,
            None => self.unfinished + bytes.len(),
        };
        if self.unfinished > self.limit {
            return Err(self.limit);
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    /// The next complete line, if one arrived.
    fn line(&mut self) -> Option<Vec<u8>> {
        let Some(end) = self.buf[self.scanned..]
            .iter()
            .position(|b| *b == b'\n')
            .map(|i| self.scanned + i)
        else {
            self.scanned = self.buf.len();
            return None;
        };
        let mut line: Vec<u8> = self.buf.drain(..=end).collect();
        self.scanned = 0;
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        Some(line)
    }

    /// What is left once the stream has ended.
    fn rest(&mut self) -> Option<Vec<u8>> {
        self.scanned = 0;
        self.unfinished = 0;
        (!self.buf.is_empty()).then(|| std::mem::take(&mut self.buf))
    }
}

/// One message of the build stream: a [`BuildInfo`], or the engine's error
/// (its `errorDetail`, as bollard reports it) or a broken stream's.
pub(super) fn parse_message(line: &[u8]) -> Result<BuildInfo, String> {
    let info: BuildInfo = serde_json::from_slice(line).map_err(|e| {
        let text = String::from_utf8_lossy(line);
        let start: String = text.chars().take(200).collect();
        format!("unreadable build message from the engine ({e}): {start}")
    })?;
    match info
        .error_detail
        .as_ref()
        .and_then(|d| d.message.as_deref())
    {
        Some(message) => Err(message.trim().to_string()),
        None => Ok(info),
    }
}

/// Why the build stream gave no message.
#[derive(Debug)]
pub(super) enum StreamError {
    /// The engine's error (its `errorDetail`), or a broken stream's.
    Engine(String),
    /// A message passed [`MESSAGE_LIMIT`] without a newline.
    TooMuch(crate::docker::transport::TooMuch),
}

/// The engine's newline-delimited JSON messages of a build. Dropping it closes
/// the connection (the engine then cancels the build).
pub(super) struct BuildStream {
    body: Incoming,
    lines: LineBuffer,
    ended: bool,
    /// The error of a message past [`MESSAGE_LIMIT`].
    too_much: crate::docker::transport::TooMuch,
    _connection: AbortOnDrop,
}

impl BuildStream {
    /// The next message; `None` once the engine has closed the stream.
    pub(super) async fn next(&mut self) -> Option<Result<BuildInfo, StreamError>> {
        loop {
            let line = match self.lines.line() {
                Some(line) => Some(line),
                None if self.ended => Some(self.lines.rest()?),
                None => None,
            };
            if let Some(line) = line {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some(parse_message(&line).map_err(StreamError::Engine));
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        if self.lines.push(&data).is_err() {
                            self.ended = true;
                            self.lines = LineBuffer::default();
                            return Some(Err(StreamError::TooMuch(self.too_much.clone())));
                        }
                    }
                }
                Some(Err(e)) => {
                    self.ended = true;
                    self.lines = LineBuffer::default();
                    return Some(Err(StreamError::Engine(format!(
                        "the build stream broke: {e}"
                    ))));
                }
                None => self.ended = true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::BuildInfoAux;
    use bollard::query_parameters::BuilderVersion;
    use std::collections::HashMap;

    fn engine(address: &str) -> Result<EngineHttp, String> {
        EngineHttp::new(address, "1.41".into(), Duration::from_secs(5))
    }

    #[test]
    fn addresses_become_sockets_and_hosts() {
        let unix = engine("unix:///var/run/docker.sock").unwrap();
        assert_eq!(unix.target, Target::Unix("/var/run/docker.sock".into()));
        assert_eq!(unix.host(), "localhost");
        assert_eq!(unix.uri("/session"), "/v1.41/session");
        let tcp = engine("tcp://10.0.0.2:2375").unwrap();
        assert_eq!(tcp.target, Target::Tcp("10.0.0.2:2375".into()));
        assert_eq!(tcp.host(), "10.0.0.2:2375");
        assert_eq!(
            engine("http://gpu-box/").unwrap().target,
            Target::Tcp("gpu-box:80".into())
        );
        assert_eq!(
            engine("tcp://[::1]:2375").unwrap().target,
            Target::Tcp("[::1]:2375".into())
        );
        assert_eq!(
            engine("tcp://[::1]").unwrap().target,
            Target::Tcp("[::1]:80".into())
        );
        assert!(engine("tcp://").is_err());
        assert!(engine("ssh://me@box").is_err());
    }

    #[test]
    fn the_build_query_is_encoded_as_bollard_does() {
        let options = BuildImageOptions {
            t: Some("imgctl/x:latest".into()),
            nocache: true,
            buildargs: Some(HashMap::from([("A".to_string(), "1 2&3".to_string())])),
            labels: Some(HashMap::from([("k".to_string(), "v".to_string())])),
            version: BuilderVersion::BuilderBuildKit,
            session: Some("abc123".into()),
            ..Default::default()
        };
        let query = build_query(&options).unwrap();
        let pairs: HashMap<String, String> = serde_urlencoded::from_str(&query).unwrap();
        assert_eq!(pairs["dockerfile"], "Dockerfile");
        assert_eq!(pairs["t"], "imgctl/x:latest");
        assert_eq!(pairs["nocache"], "true");
        assert_eq!(pairs["rm"], "true");
        assert_eq!(pairs["version"], "2");
        assert_eq!(pairs["session"], "abc123");
        assert_eq!(pairs["buildargs"], r#"{"A":"1 2&3"}"#);
        assert_eq!(pairs["labels"], r#"{"k":"v"}"#);
        assert!(!pairs.contains_key("pull"), "{query}");
        assert!(
            query.contains("buildargs=%7B%22A%22%3A%221+2%263%22%7D"),
            "{query}"
        );
    }

    #[test]
    fn lines_split_across_chunks_and_crlf() {
        let mut lines = LineBuffer::default();
        lines.push(b"{\"stream\":\"a\"}\r\n{\"str").unwrap();
        assert_eq!(lines.line().unwrap(), b"{\"stream\":\"a\"}");
        assert!(lines.line().is_none());
        lines.push(b"eam\":\"b\"}\n\n{\"x\":1}").unwrap();
        assert_eq!(lines.line().unwrap(), b"{\"stream\":\"b\"}");
        assert_eq!(lines.line().unwrap(), b"");
        assert!(lines.line().is_none());
        assert_eq!(lines.rest().unwrap(), b"{\"x\":1}");
        assert!(lines.rest().is_none());
    }

    #[test]
    fn a_message_without_an_end_is_refused_at_the_limit() {
        let mut lines = LineBuffer::new(10);
        lines.push(b"0123\n56789").unwrap();
        assert_eq!(lines.line().unwrap(), b"0123");
        assert!(lines.line().is_none());
        // 5 + 5: at the limit; one more byte passes it.
        lines.push(b"abcde").unwrap();
        assert_eq!(lines.push(b"f"), Err(10));
        // A newline resets the count.
        let mut lines = LineBuffer::new(10);
        for _ in 0..100 {
            lines.push(b"12345678\n").unwrap();
            assert_eq!(lines.line().unwrap(), b"12345678");
        }
        assert_eq!(MESSAGE_LIMIT, 16 * 1024 * 1024);
    }

    #[test]
    fn messages_decode_into_build_info_and_errors() {
        use bollard::moby::buildkit::v1::{StatusResponse, Vertex};
        use prost::Message as _;
        // BuildKit's progress: a base64 protobuf StatusResponse in `aux`.
        let status = StatusResponse {
            vertexes: vec![Vertex {
                digest: "sha256:d".into(),
                name: "[2/3] RUN true".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        use base64::Engine as _;
        let aux = base64::engine::general_purpose::STANDARD.encode(status.encode_to_vec());
        let line = format!(r#"{{"id":"moby.buildkit.trace","aux":"{aux}"}}"#);
        match parse_message(line.as_bytes()).unwrap().aux {
            Some(BuildInfoAux::BuildKit(s)) => assert_eq!(s.vertexes[0].name, "[2/3] RUN true"),
            other => panic!("{other:?}"),
        }
        let id = br#"{"id":"moby.image.id","aux":{"ID":"sha256:abc"}}"#;
        match parse_message(id).unwrap().aux {
            Some(BuildInfoAux::Default(image)) => {
                assert_eq!(image.id.as_deref(), Some("sha256:abc"))
            }
            other => panic!("{other:?}"),
        }
        let failed = br#"{"errorDetail":{"message":"secret nope: not found "},"error":"secret nope: not found"}"#;
        assert_eq!(parse_message(failed).unwrap_err(), "secret nope: not found");
        let broken = parse_message(b"{\"stream\":").unwrap_err();
        assert!(broken.starts_with("unreadable build message"), "{broken}");
    }

    #[test]
    fn failed_requests_give_the_engines_message() {
        let body = r#"{"message":"session abc already exists"}"#;
        assert_eq!(
            error_of(StatusCode::INTERNAL_SERVER_ERROR, body),
            "session abc already exists"
        );
        assert_eq!(
            error_of(StatusCode::NOT_FOUND, "page not found\n"),
            "404 Not Found: page not found"
        );
        assert_eq!(error_of(StatusCode::BAD_GATEWAY, ""), "502 Bad Gateway");
    }
}
