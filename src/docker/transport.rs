//! The connection under bollard, with a bound on what it buffers.
//!
//! bollard collects a whole response body before decoding it, and its
//! decoders of streams (JSON lines, a container's log frames) buffer each
//! message until it ends, all without a cap: an engine, a proxy or another
//! service at the engine's address that streams an endless body made imgctl
//! run out of memory. So imgctl gives bollard its own transport
//! ([`bollard::Docker::connect_with_custom_transport`]): each request gets a
//! connection of its own to the engine's unix socket or TCP address, driven
//! by hyper, whose reads are watched as they arrive:
//!
//! - an answer bollard reads whole (`/version`, an inspect, a list, and any
//!   answer with an error status) may be at most [`ANSWER_LIMIT`];
//! - a stream bollard decodes as it comes (a push's or a classic build's
//!   JSON lines, a wait, a container's logs) may run for as long as it does,
//!   each of its messages at most [`STREAM_MESSAGE_LIMIT`].
//!
//! Past a limit the read fails with [`TooMuch`], which names the address,
//! the request and the limit; it stays in the error's source chain
//! ([`too_much`], [`words`]), or, where bollard keeps only the words of the
//! failed read (its stream decoders), is recorded for [`too_much`] to find. An upgraded connection (`101`: an attach, a
//! BuildKit session) is not watched.
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bollard::errors::Error as BollardError;
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod inspect;
use inspect::Inspector;

/// The most of an answer bollard reads whole: 16 MiB. The engine's answers
/// imgctl reads so (its version, an image's inspect, a list of containers,
/// an error) are kilobytes; a list of thousands of containers still fits.
pub const ANSWER_LIMIT: usize = 16 * 1024 * 1024;

/// The most of one message of a stream bollard decodes (a JSON line of a
/// push, a classic build or a wait; a frame of a container's logs): 1 MiB.
/// The engine splits log lines at 16 KiB and writes a build's output in
/// chunks of at most 32 KiB; progress lines are shorter still.
pub const STREAM_MESSAGE_LIMIT: usize = 1024 * 1024;

/// The engine sent more than imgctl reads (see the module's limits).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooMuch {
    /// The engine's address (`unix:///var/run/docker.sock`).
    pub address: String,
    /// The request (`GET /v1.41/version`, without its query).
    pub request: String,
    /// The limit passed, in bytes.
    pub limit: usize,
    /// Whether it was one message of a stream (else a whole answer).
    pub stream: bool,
}

impl fmt::Display for TooMuch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (address, request, size) = (&self.address, &self.request, size_text(self.limit));
        if self.stream {
            write!(f, "the Docker engine at {address} sent more than imgctl reads: a message of its stream for {request} passed {size}")
        } else {
            write!(f, "the Docker engine at {address} sent more than imgctl reads: its answer to {request} passed {size}")
        }
    }
}

impl std::error::Error for TooMuch {}

/// `16 MiB`, `64 KiB`, `100 bytes`.
fn size_text(bytes: usize) -> String {
    if bytes >= 1024 * 1024 && bytes % (1024 * 1024) == 0 {
        format!("{} MiB", bytes / (1024 * 1024))
    } else if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} bytes")
    }
}

/// The last [`TooMuch`] this process's transport refused a read with.
/// bollard's stream decoders keep only the words of a body's read error
/// ("error reading a body from connection"), not its cause; this is where
/// [`too_much`] finds it then. One process talks to one engine.
static REFUSED: std::sync::Mutex<Option<TooMuch>> = std::sync::Mutex::new(None);

/// hyper's words for a failed read of a body, which bollard's stream
/// decoders keep without the cause.
const BODY_READ_FAILED: &str = "error reading a body from connection";

/// The [`TooMuch`] that ended `err`, if one did: it is somewhere in its
/// source chain, inside an I/O error (whose `source` skips what it wraps);
/// or, where bollard kept only the words of the failed read, the one this
/// process's transport last refused a read with.
pub fn too_much(err: &(dyn std::error::Error + 'static)) -> Option<TooMuch> {
    let mut current = Some(err);
    let mut body_read_failed = false;
    while let Some(e) = current {
        if let Some(t) = e.downcast_ref::<TooMuch>() {
            return Some(t.clone());
        }
        // bollard's own I/O error is transparent: its source is past the
        // io::Error it holds.
        let io = match e.downcast_ref::<BollardError>() {
            Some(BollardError::IOError { err }) => Some(err),
            _ => e.downcast_ref::<io::Error>(),
        };
        let inner = io
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<TooMuch>());
        if let Some(t) = inner {
            return Some(t.clone());
        }
        body_read_failed |= e.to_string().contains(BODY_READ_FAILED);
        current = e.source();
    }
    if body_read_failed {
        return REFUSED.lock().ok()?.clone();
    }
    None
}

/// A bollard error in words, with the causes its `Display` leaves out
/// (hyper's "error reading a body from connection" says nothing of why).
pub fn words(err: &BollardError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text = format!("{text}: {said}");
        }
        source = cause.source();
    }
    text
}

/// Where the engine listens: one parser and one connector for bollard's
/// transport here and the raw `/build` and session requests
/// (`build/raw.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A unix socket.
    Unix(PathBuf),
    /// `host:port`.
    Tcp(String),
}

impl Target {
    /// The target of `address` (`unix:///var/run/docker.sock`,
    /// `tcp://10.0.0.2:2375`, `http://…`). Without a port, a TCP address
    /// uses port 80, as bollard does.
    pub(crate) fn parse(address: &str) -> Result<Self, String> {
        if let Some(path) = address.strip_prefix("unix://") {
            return Ok(Target::Unix(PathBuf::from(path)));
        }
        let Some(rest) = address
            .strip_prefix("tcp://")
            .or_else(|| address.strip_prefix("http://"))
        else {
            return Err(format!(
                "cannot reach the engine at {address} outside bollard (unix:// or tcp:// only)"
            ));
        };
        let host = rest.split('/').next().unwrap_or_default();
        if host.is_empty() {
            return Err(format!("the engine address {address} names no host"));
        }
        let has_port = host
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && !port.contains(']'));
        Ok(Target::Tcp(if has_port {
            host.to_string()
        } else {
            format!("{host}:80")
        }))
    }

    /// The `Host` header (Go's HTTP server requires one).
    pub(crate) fn host(&self) -> &str {
        match self {
            Target::Unix(_) => "localhost",
            Target::Tcp(host) => host,
        }
    }

    /// A new connection to it.
    pub(crate) async fn connect(&self) -> io::Result<Box<dyn Io>> {
        Ok(match self {
            Target::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            Target::Tcp(host) => Box::new(tokio::net::TcpStream::connect(host.as_str()).await?),
        })
    }
}

/// A connection's IO, whichever socket it is.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The transport: where to connect, the `Host` header, and the address for
/// [`TooMuch`].
#[derive(Debug)]
struct Transport {
    target: Target,
    host: String,
    address: String,
}

/// A bollard client for the engine at `address` (`unix://…`, `tcp://…`,
/// `http://…`, as [`super::endpoint`] let through) whose responses are
/// bounded (see the module). Without a port, a TCP address uses port 80, as
/// bollard's own HTTP client does.
pub fn connect(
    address: &str,
    timeout_s: u64,
    version: &bollard::ClientVersion,
) -> Result<bollard::Docker, BollardError> {
    let target = Target::parse(address).map_err(|_| BollardError::UnsupportedURISchemeError {
        uri: address.to_string(),
    })?;
    if let Target::Unix(path) = &target {
        // As bollard's own unix client says when the socket is missing.
        if !path.exists() {
            return Err(BollardError::SocketNotFoundError(
                path.display().to_string(),
            ));
        }
    }
    let host = target.host().to_string();
    let transport = Arc::new(Transport {
        target,
        host: host.clone(),
        address: address.to_string(),
    });
    bollard::Docker::connect_with_custom_transport(
        move |request: bollard::BollardRequest| {
            let transport = Arc::clone(&transport);
            async move { transport.send(request).await }
        },
        Some(format!("http://{host}")),
        timeout_s,
        version,
    )
}

impl Transport {
    async fn connect(&self) -> io::Result<Box<dyn Io>> {
        self.target.connect().await
    }

    /// Sends `request` on a connection of its own; the response's body is
    /// read through a [`Watched`] connection.
    async fn send(
        &self,
        request: bollard::BollardRequest,
    ) -> Result<Response<Incoming>, BollardError> {
        let (mut parts, body) = request.into_parts();
        let path = parts.uri.path().to_string();
        let inspector = Inspector::new(
            TooMuch {
                address: self.address.clone(),
                request: format!("{} {path}", parts.method),
                limit: ANSWER_LIMIT,
                stream: false,
            },
            rule_for(&parts.method, &path),
            parts.method == Method::HEAD,
        );
        // The request line takes the path (origin form), not the whole URI.
        let origin = parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |pq| pq.as_str().to_string());
        parts.uri = hyper::Uri::builder()
            .path_and_query(origin)
            .build()
            .map_err(BollardError::from)?;
        if !parts.headers.contains_key(hyper::header::HOST) {
            let host = hyper::header::HeaderValue::from_str(&self.host)
                .map_err(|e| BollardError::from(hyper::http::Error::from(e)))?;
            parts.headers.insert(hyper::header::HOST, host);
        }
        let io = Watched {
            inner: self.connect().await?,
            inspector,
            failed: None,
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
        tokio::spawn(async move {
            let _ = conn.with_upgrades().await;
        });
        Ok(sender
            .send_request(Request::from_parts(parts, body))
            .await?)
    }
}

/// How a response's body is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Read whole by bollard: at most [`ANSWER_LIMIT`] in all.
    Whole,
    /// Newline-delimited messages, each at most [`STREAM_MESSAGE_LIMIT`].
    Lines,
    /// A container's multiplexed stdout/stderr frames (8-byte headers), or
    /// lines where no header starts (bollard's reading), each at most
    /// [`STREAM_MESSAGE_LIMIT`].
    Frames,
}

/// The rule for the answer to `method path` (`/v1.41/…` or unversioned):
/// the streams bollard decodes as they come are the build, a pull, a push,
/// the events, a wait, stats, and a container's logs; everything else it
/// reads whole. A stream imgctl starts to use (an export, an archive) must
/// be added here, or its answer is refused past [`ANSWER_LIMIT`].
fn rule_for(method: &Method, path: &str) -> Rule {
    let path = path.strip_prefix('/').unwrap_or(path);
    let path = match path.split_once('/') {
        Some((v, rest))
            if v.strip_prefix('v').is_some_and(|n| {
                !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            }) =>
        {
            rest
        }
        _ => path,
    };
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("POST", ["build"])
        | ("POST", ["images", "create"])
        | ("POST", ["images", .., "push"])
        | ("GET", ["events"])
        | ("POST", ["containers", _, "wait"])
        | ("GET", ["containers", _, "stats"]) => Rule::Lines,
        ("GET", ["containers", _, "logs"]) | ("POST", ["containers", _, "attach"]) => Rule::Frames,
        _ => Rule::Whole,
    }
}

/// A connection whose reads pass through an [`Inspector`]; past a limit
/// every read fails with the [`TooMuch`].
struct Watched<S> {
    inner: S,
    inspector: Inspector,
    failed: Option<TooMuch>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(e) = &this.failed {
            return Poll::Ready(Err(io::Error::other(e.clone())));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        if let Err(e) = this.inspector.feed(&buf.filled()[before..]) {
            if let Ok(mut refused) = REFUSED.lock() {
                *refused = Some(e.clone());
            }
            this.failed = Some(e.clone());
            return Poll::Ready(Err(io::Error::other(e)));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
