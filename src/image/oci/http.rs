//! The HTTP side of the registry client: one hyper client (plain HTTP for
//! loopback registries without a CA of their own, HTTPS through rustls with
//! the ring provider and the CAs [`super::tls`] finds for the rest), the 401 → challenge → retry dance of
//! [`super::auth`] with the resulting `Authorization` header cached, redirects
//! of GET and HEAD followed (blob stores on other hosts), credentials sent
//! only to the registry's own scheme, host and port (whatever URL a `Link`,
//! a `Location` or a redirect names), an HTTPS registry never followed to
//! plain HTTP, bounded replies, a deadline per request and one for the
//! whole command (every request, redirect, page and token of it), and the
//! one-line errors that name the registry, the repository, the status and the
//! registry's own error message, never a credential.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use bollard::auth::DockerCredentials;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, LOCATION, WWW_AUTHENTICATE};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::auth::{self, Challenge};
use super::tls::Trust;

/// How long one request may take, reply body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// How long all the requests of one registry command may take together
/// unless it says otherwise (`inspect --registry-timeout`): 120 s a
/// request, 5 redirects, a 401 retry and 100 pages would otherwise let a
/// slow or hostile registry hold a command for hours.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(300);
/// The most bytes of a reply that is not a blob (manifests, indexes, errors,
/// tokens): the registries' own manifest limit is 4 MiB.
pub const MAX_DOCUMENT: usize = 4 << 20;
/// Redirects followed per request.
const MAX_REDIRECTS: usize = 5;
/// The most characters of a non-JSON error body an error quotes.
const BODY_EXCERPT: usize = 200;

/// A registry's reply, its body read.
#[derive(Debug)]
pub struct Reply {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body (empty for HEAD).
    pub body: Bytes,
}

impl Reply {
    /// A header's value as text, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// One request: method, URL (absolute, or a path on the registry), extra
/// headers, body, and the most body bytes to read of the reply.
pub struct Call<'a> {
    /// The method.
    pub method: Method,
    /// `/v2/...` or an absolute URL (an upload's Location).
    pub url: &'a str,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// The request body.
    pub body: Bytes,
    /// The most bytes of reply body read.
    pub limit: usize,
}

impl<'a> Call<'a> {
    /// A GET of `url` with the document limit.
    pub fn get(url: &'a str) -> Self {
        Call {
            method: Method::GET,
            url,
            headers: Vec::new(),
            body: Bytes::new(),
            limit: MAX_DOCUMENT,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
}

/// The client of one repository of one registry.
pub struct Transport {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// `scheme://host[:port]`.
    base_url: String,
    /// The registry as errors name it.
    pub registry: String,
    /// The repository.
    pub name: String,
    credentials: Option<DockerCredentials>,
    /// The `Authorization` value the last challenge gave.
    auth: Mutex<Option<Arc<str>>>,
    /// When every request of the command must be done.
    deadline: Deadline,
    /// The CAs its certificate is checked against.
    trust: Trust,
}

/// The one deadline of a registry command: when, how long it was in all,
/// and the flag that sets it (named in the error), if the command has one.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: tokio::time::Instant,
    total: Duration,
    flag: Option<&'static str>,
}

impl Deadline {
    fn new(total: Duration, flag: Option<&'static str>) -> Self {
        Deadline {
            at: tokio::time::Instant::now() + total,
            total,
            flag,
        }
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No credentials, no token.
        f.debug_struct("Transport")
            .field("base_url", &self.base_url)
            .field("name", &self.name)
            .field("has_credentials", &self.credentials.is_some())
            .finish()
    }
}

impl Transport {
    /// A client for `name` at `base_url`, HTTPS checked against the
    /// system's CAs.
    pub fn new(
        registry: &str,
        base_url: &str,
        name: &str,
        credentials: Option<DockerCredentials>,
    ) -> anyhow::Result<Self> {
        Self::with_trust(registry, base_url, name, credentials, Trust::default())
    }

    /// A client for `name` at `base_url`, HTTPS checked against `trust`.
    pub fn with_trust(
        registry: &str,
        base_url: &str,
        name: &str,
        credentials: Option<DockerCredentials>,
        trust: Trust,
    ) -> anyhow::Result<Self> {
        let loopback = super::reference::is_loopback(registry);
        let connector = trust
            .connector(loopback)
            .with_context(|| format!("cannot set up HTTPS for registry {registry}"))?;
        Ok(Transport {
            client: Client::builder(TokioExecutor::new()).build(connector),
            base_url: base_url.to_string(),
            registry: registry.to_string(),
            name: name.to_string(),
            credentials,
            auth: Mutex::new(None),
            deadline: Deadline::new(DEFAULT_DEADLINE, None),
            trust,
        })
    }

    /// The same client with `trust` and `base_url` instead (the deadline
    /// and credentials kept).
    pub fn retrust(self, base_url: &str, trust: Trust) -> anyhow::Result<Self> {
        let mut t = Self::with_trust(
            &self.registry,
            base_url,
            &self.name,
            self.credentials,
            trust,
        )?;
        t.deadline = self.deadline;
        Ok(t)
    }

    /// Gives every request from now on `total` in all ([`DEFAULT_DEADLINE`]
    /// otherwise); `flag` (`--registry-timeout`) is named in the error when
    /// it runs out.
    pub fn set_deadline(&mut self, total: Duration, flag: Option<&'static str>) {
        self.deadline = Deadline::new(total, flag);
    }

    fn cached_auth(&self) -> Option<Arc<str>> {
        self.auth.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Sends `call`, answering one 401 with its challenge; returns whatever
    /// the registry replied (the caller judges the status). `Err` only when
    /// the registry could not be reached, or a token service refused.
    pub async fn send(&self, call: Call<'_>) -> anyhow::Result<Reply> {
        let mut authorization = self.cached_auth();
        let (mut reply, at_registry) = self.send_following(&call, authorization.as_deref()).await?;
        // A 401 from another host (a `Link` or `Location` that left the
        // registry) stands: its challenge would draw our credentials to it.
        if reply.status == StatusCode::UNAUTHORIZED && at_registry {
            if let Some(header) = self.authenticate(&reply).await? {
                let header: Arc<str> = header.into();
                if authorization.as_deref() != Some(&*header) {
                    *self.auth.lock().unwrap_or_else(|e| e.into_inner()) = Some(header.clone());
                    authorization = Some(header);
                    reply = self
                        .send_following(&call, authorization.as_deref())
                        .await?
                        .0;
                }
            }
        }
        Ok(reply)
    }

    /// Sends `call`, following redirects of GET and HEAD, with the
    /// `Authorization` header only on the registry's own origin; the reply,
    /// and whether it came from that origin.
    async fn send_following(
        &self,
        call: &Call<'_>,
        authorization: Option<&str>,
    ) -> anyhow::Result<(Reply, bool)> {
        let base = self.base();
        let mut url = self.absolute(call.url)?;
        for _ in 0..=MAX_REDIRECTS {
            self.refuse_downgrade(&base, &url, "a URL")?;
            // The registry's own authority, never the call's: a `Link`, an
            // upload `Location` or a redirect can name any host.
            let same_origin = same_origin(&base, &url);
            let reply = self
                .send_once(call, &url, authorization.filter(|_| same_origin))
                .await?;
            let follow = matches!(call.method, Method::GET | Method::HEAD)
                && reply.status.is_redirection()
                && reply.status != StatusCode::NOT_MODIFIED;
            match reply.header(LOCATION.as_str()).filter(|_| follow) {
                Some(location) => url = resolve(&url, location)?,
                None => return Ok((reply, same_origin)),
            }
        }
        Err(anyhow!(
            "registry {} sent more than {MAX_REDIRECTS} redirects for {} {}",
            self.registry,
            call.method,
            strip_query(call.url)
        ))
    }

    async fn send_once(
        &self,
        call: &Call<'_>,
        url: &Uri,
        authorization: Option<&str>,
    ) -> anyhow::Result<Reply> {
        let mut request = Request::builder()
            .method(call.method.clone())
            .uri(url.clone())
            .header("User-Agent", concat!("imgctl/", env!("CARGO_PKG_VERSION")));
        for (name, value) in &call.headers {
            request = request.header(*name, value.as_str());
        }
        if let Some(a) = authorization {
            let mut value = HeaderValue::from_str(a).map_err(|_| {
                anyhow!(
                    "the credentials for registry {} are not a valid header",
                    self.registry
                )
            })?;
            value.set_sensitive(true);
            request = request.header(AUTHORIZATION, value);
        }
        let request = request
            .body(Full::new(call.body.clone()))
            .map_err(|e| anyhow!("cannot make a request to registry {}: {e}", self.registry))?;
        let unreachable = |e: &(dyn std::error::Error + 'static)| {
            let loopback = super::reference::is_loopback(&self.registry);
            if let Some(line) = self.trust.explain(&self.registry, loopback, e) {
                return anyhow!("{line}");
            }
            anyhow!(
                "cannot reach registry {} ({} {}): {}",
                self.registry,
                call.method,
                strip_query(&url.to_string()),
                chain(e)
            )
        };
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| unreachable(&e))?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, call.limit)
                .collect()
                .await
                .map_err(|e| {
                    anyhow!(
                    "the reply of registry {} to {} {} was cut short or longer than {} bytes: {e}",
                    self.registry,
                    call.method,
                    strip_query(&url.to_string()),
                    call.limit
                )
                })?;
            Ok::<_, anyhow::Error>(Reply {
                status: parts.status,
                headers: parts.headers,
                body: body.to_bytes(),
            })
        };
        // The request's own bound, or what is left of the command's.
        let left = self
            .deadline
            .at
            .saturating_duration_since(tokio::time::Instant::now());
        tokio::time::timeout(left.min(REQUEST_TIMEOUT), exchange)
            .await
            .map_err(|_| {
                let what = format!("{} {}", call.method, strip_query(&url.to_string()));
                if left < REQUEST_TIMEOUT {
                    let d = &self.deadline;
                    anyhow!(
                        "registry {} did not finish within the command's deadline of {} s ({what} was under way){}",
                        self.registry,
                        d.total.as_secs_f64(),
                        d.flag.map(|f| format!("; {f} SECS gives it longer")).unwrap_or_default()
                    )
                } else {
                    anyhow!(
                        "registry {} did not answer {what} within {} s",
                        self.registry,
                        REQUEST_TIMEOUT.as_secs()
                    )
                }
            })?
    }

    /// The `Authorization` value that answers a 401's challenge; `None`
    /// when there is none to give (no credentials for Basic, an unknown
    /// scheme): the 401 then stands.
    async fn authenticate(&self, reply: &Reply) -> anyhow::Result<Option<String>> {
        let challenge = reply
            .headers
            .get_all(WWW_AUTHENTICATE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(auth::parse_challenge);
        match challenge {
            Some(Challenge::Basic) => Ok(self.credentials.as_ref().and_then(auth::basic_header)),
            Some(Challenge::Bearer { realm, service, .. }) => {
                if let Some(token) = self
                    .credentials
                    .as_ref()
                    .and_then(|c| c.registrytoken.clone())
                {
                    return Ok(Some(format!("Bearer {token}")));
                }
                self.token(&realm, service.as_deref())
                    .await
                    .map(|t| Some(format!("Bearer {t}")))
            }
            None => Ok(None),
        }
    }

    /// A token for pull and push of the repository from `realm`: with an
    /// identity token, the OAuth2 refresh-token grant (POST); else a GET
    /// with basic auth when there are credentials, anonymous otherwise.
    async fn token(&self, realm: &str, service: Option<&str>) -> anyhow::Result<String> {
        let scope = auth::scope_for(&self.name);
        let mut params = vec![("scope", scope.as_str())];
        if let Some(s) = service {
            params.push(("service", s));
        }
        let identity = self
            .credentials
            .as_ref()
            .and_then(|c| c.identitytoken.clone());
        let url = match &identity {
            Some(_) => realm.to_string(),
            None => {
                let query = serde_urlencoded::to_string(&params).unwrap_or_default();
                let sep = if realm.contains('?') { '&' } else { '?' };
                format!("{realm}{sep}{query}")
            }
        };
        let mut call = Call::get(&url);
        let basic = match &identity {
            Some(refresh) => {
                params.extend([
                    ("grant_type", "refresh_token"),
                    ("client_id", "imgctl"),
                    ("refresh_token", refresh.as_str()),
                ]);
                call.method = Method::POST;
                call.body = serde_urlencoded::to_string(&params)
                    .unwrap_or_default()
                    .into();
                call = call.header("Content-Type", "application/x-www-form-urlencoded");
                None
            }
            None => self.credentials.as_ref().and_then(auth::basic_header),
        };
        let url = self.absolute(&url)?;
        // The token protocol sends the credentials to the realm, whatever
        // its host (as the docker CLI does), but never over plain HTTP
        // when the registry itself is HTTPS.
        self.refuse_downgrade(&self.base(), &url, "a token service")?;
        let reply = self.send_once(&call, &url, basic.as_deref()).await?;
        if !reply.status.is_success() {
            return Err(anyhow!(
                "the token service of registry {} ({}) refused a token for {}: {}{}",
                self.registry,
                strip_query(realm),
                self.name,
                status_and_message(&reply),
                self.credentials_hint(reply.status)
            ));
        }
        serde_json::from_slice(&reply.body)
            .ok()
            .as_ref()
            .and_then(auth::token_of)
            .ok_or_else(|| {
                anyhow!(
                    "the token service of registry {} ({}) sent no token",
                    self.registry,
                    strip_query(realm)
                )
            })
    }

    /// `scheme://host[:port]` of the registry's API.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `host[:port]` of the registry's API.
    pub fn host(&self) -> &str {
        self.base_url
            .split_once("://")
            .map_or(&self.base_url, |(_, h)| h)
    }

    /// The registry's base URL.
    fn base(&self) -> Uri {
        self.base_url.parse().expect("a valid base URL")
    }

    /// `url` made absolute against the registry's base URL.
    fn absolute(&self, url: &str) -> anyhow::Result<Uri> {
        resolve(&self.base(), url)
    }

    /// An error when `url` would take an HTTPS registry's traffic to plain
    /// HTTP (`what` names where the URL came from).
    fn refuse_downgrade(&self, base: &Uri, url: &Uri, what: &str) -> anyhow::Result<()> {
        if base.scheme_str() == Some("https") && url.scheme_str() != Some("https") {
            return Err(anyhow!(
                "registry {} named {what} over plain HTTP ({}); refused: an HTTPS registry is never followed to HTTP",
                self.registry,
                strip_query(&url.to_string())
            ));
        }
        Ok(())
    }

    /// The one-line error for a reply the caller did not expect: `registry R
    /// refused WHAT of NAME: STATUS CODE: message`.
    pub fn refused(&self, what: &str, reply: &Reply) -> anyhow::Error {
        // Go's TLS server answers plain HTTP so: the registry has TLS, and
        // imgctl spoke HTTP to it for want of its CA.
        let tls = reply.status == StatusCode::BAD_REQUEST
            && String::from_utf8_lossy(&reply.body).contains("HTTP request to an HTTPS server");
        anyhow!(
            "registry {} refused {what} of {}: {}{}",
            self.registry,
            self.name,
            status_and_message(reply),
            match tls {
                true => format!(" (it speaks HTTPS; {})", self.trust.fix(&self.registry)),
                false => self.credentials_hint(reply.status).to_string(),
            }
        )
    }

    fn credentials_hint(&self, status: StatusCode) -> &'static str {
        match (status, self.credentials.is_some()) {
            (StatusCode::UNAUTHORIZED, true) => " (the credentials were refused)",
            (StatusCode::UNAUTHORIZED, false) => " (no credentials were given for it)",
            (StatusCode::FORBIDDEN, _) => " (the credentials may not do this)",
            _ => "",
        }
    }
}

/// `STATUS CODE: message` of a registry's error reply (its JSON
/// `errors[0]`), else `STATUS Reason: <start of the body>`.
pub fn status_and_message(reply: &Reply) -> String {
    let status = reply.status.as_u16();
    let json: Option<serde_json::Value> = serde_json::from_slice(&reply.body).ok();
    let first = json
        .as_ref()
        .and_then(|j| j.get("errors"))
        .and_then(|e| e.get(0));
    if let Some(error) = first {
        let code = error.get("code").and_then(|c| c.as_str()).unwrap_or("");
        let message = error.get("message").and_then(|m| m.as_str()).unwrap_or("");
        return one_line(&format!("{status} {code}: {message}"));
    }
    let reason = reply.status.canonical_reason().unwrap_or("");
    let text = String::from_utf8_lossy(&reply.body);
    let text = text.trim();
    if text.is_empty() {
        format!("{status} {reason}")
    } else {
        let excerpt: String = text.chars().take(BODY_EXCERPT).collect();
        one_line(&format!("{status} {reason}: {excerpt}"))
    }
}

/// `s` on one line (runs of whitespace, newlines included, → one space),
/// every other control character escaped (`\u{1b}`): a registry's words
/// can neither start a line of an error nor drive the terminal.
fn one_line(s: &str) -> String {
    let joined = s.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::error::escape_controls(&joined).into_owned()
}

/// An error and its sources, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    one_line(&parts.join(": "))
}

/// Whether `url` is on the registry at `base`: the same scheme, host and
/// port. Only then does a request carry the registry's `Authorization`.
pub fn same_origin(base: &Uri, url: &Uri) -> bool {
    let port = |u: &Uri| {
        u.port_u16().or(match u.scheme_str() {
            Some("http") => Some(80),
            Some("https") => Some(443),
            _ => None,
        })
    };
    base.scheme_str() == url.scheme_str()
        && base.host().map(str::to_ascii_lowercase) == url.host().map(str::to_ascii_lowercase)
        && port(base) == port(url)
}

/// `url` without its query (upload URLs carry state in it).
pub fn strip_query(url: &str) -> &str {
    url.split('?').next().unwrap_or(url)
}

/// `location` resolved against `base`: absolute URLs as they are, `/path`
/// on `base`'s scheme and host, `path` beside `base`'s path.
pub fn resolve(base: &Uri, location: &str) -> anyhow::Result<Uri> {
    let bad = |e: &dyn std::fmt::Display| {
        anyhow!(
            "'{}' is not a URL: {e}",
            strip_query(location).escape_debug()
        )
    };
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.parse().map_err(|e| bad(&e));
    }
    let scheme = base.scheme_str().unwrap_or("https");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or("");
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{location}")
    };
    format!("{scheme}://{authority}{path}")
        .parse()
        .map_err(|e| bad(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str) -> Reply {
        Reply {
            status: StatusCode::from_u16(status).unwrap(),
            headers: HeaderMap::new(),
            body: Bytes::from(body.to_string()),
        }
    }

    #[test]
    fn locations_resolve_against_the_registry() {
        let base: Uri = "http://127.0.0.1:5000/v2/x/blobs/uploads/".parse().unwrap();
        assert_eq!(
            resolve(&base, "/v2/x/blobs/uploads/abc?_state=1")
                .unwrap()
                .to_string(),
            "http://127.0.0.1:5000/v2/x/blobs/uploads/abc?_state=1"
        );
        assert_eq!(
            resolve(&base, "https://other.example/u?x=1")
                .unwrap()
                .to_string(),
            "https://other.example/u?x=1"
        );
        assert_eq!(
            resolve(&base, "abc").unwrap().to_string(),
            "http://127.0.0.1:5000/v2/x/blobs/uploads/abc"
        );
        assert_eq!(strip_query("/a?b=c"), "/a");
    }

    #[test]
    fn credentials_go_only_to_the_registrys_own_origin() {
        let base: Uri = "https://reg.example".parse().unwrap();
        let at = |u: &str| same_origin(&base, &u.parse().unwrap());
        assert!(at("https://reg.example/v2/x/referrers/a?page=2"));
        assert!(at("https://REG.example:443/v2/"));
        assert!(!at("http://reg.example/v2/"));
        assert!(!at("https://reg.example:8443/v2/"));
        assert!(!at("https://other.example/v2/"));
        assert!(!at("https://reg.example.other.example/v2/"));
        let local: Uri = "http://127.0.0.1:5000".parse().unwrap();
        assert!(same_origin(
            &local,
            &"http://127.0.0.1:5000/v2/".parse().unwrap()
        ));
        assert!(!same_origin(
            &local,
            &"http://127.0.0.1:5001/v2/".parse().unwrap()
        ));
        assert!(!same_origin(
            &local,
            &"http://localhost:5000/v2/".parse().unwrap()
        ));
    }

    #[tokio::test]
    async fn an_https_registry_is_never_followed_to_http() {
        // setup.sh installs ca-certificates: the HTTPS client builds.
        let t = Transport::new("reg.example", "https://reg.example", "me/x", None).unwrap();
        let e = t
            .send(Call::get(
                "http://reg.example/v2/me/x/referrers/sha256:a?page=2",
            ))
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "registry reg.example named a URL over plain HTTP (http://reg.example/v2/me/x/referrers/sha256:a); refused: an HTTPS registry is never followed to HTTP"
        );
    }

    #[test]
    fn error_messages_quote_the_registrys_error() {
        let r = reply(
            400,
            r#"{"errors":[{"code":"MANIFEST_INVALID","message":"manifest invalid","detail":{}}]}"#,
        );
        assert_eq!(
            status_and_message(&r),
            "400 MANIFEST_INVALID: manifest invalid"
        );
        assert_eq!(
            status_and_message(&reply(404, "404 page not found\n")),
            "404 Not Found: 404 page not found"
        );
        assert_eq!(status_and_message(&reply(502, "")), "502 Bad Gateway");
        let evil = reply(
            500,
            "{\"errors\":[{\"code\":\"X\",\"message\":\"\\u001b]0;pwned\\u0007\\u001b[2Jgone\\r\\nerror: forged\"}]}",
        );
        assert_eq!(
            status_and_message(&evil),
            "500 X: \\u{1b}]0;pwned\\u{7}\\u{1b}[2Jgone error: forged"
        );
        assert_eq!(
            status_and_message(&reply(502, "\u{1b}[31mred\u{7}")),
            "502 Bad Gateway: \\u{1b}[31mred\\u{7}"
        );
        let long = "x\n".repeat(500);
        let m = status_and_message(&reply(500, &long));
        assert!(!m.contains('\n') && m.len() < 260, "{m}");
    }

    #[tokio::test]
    async fn refusals_name_the_registry_and_no_secret() {
        let creds = DockerCredentials {
            username: Some("me".into()),
            password: Some("hunter2-secret".into()),
            ..Default::default()
        };
        let t = Transport::new(
            "127.0.0.1:5000",
            "http://127.0.0.1:5000",
            "me/x",
            Some(creds),
        )
        .unwrap();
        *t.auth.lock().unwrap() = Some(
            auth::basic_header(t.credentials.as_ref().unwrap())
                .unwrap()
                .into(),
        );
        let r = reply(
            401,
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
        );
        let e = t.refused("the manifest", &r).to_string();
        assert_eq!(
            e,
            "registry 127.0.0.1:5000 refused the manifest of me/x: 401 UNAUTHORIZED: authentication required (the credentials were refused)"
        );
        let debug = format!("{t:?}");
        let b64 = auth::basic_header(t.credentials.as_ref().unwrap()).unwrap();
        for shown in [&e, &debug] {
            assert!(
                !shown.contains("hunter2") && !shown.contains(&b64[6..]),
                "{shown}"
            );
        }
    }

    #[tokio::test]
    async fn an_unreachable_registry_is_one_line() {
        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let base = format!("http://127.0.0.1:{port}");
        let t = Transport::new(&format!("127.0.0.1:{port}"), &base, "me/x", None).unwrap();
        let e = t.send(Call::get("/v2/")).await.unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "cannot reach registry 127.0.0.1:{port} (GET {base}/v2/)"
            )),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn https_clients_build_with_the_ring_provider() {
        // No process-wide provider is installed; both kinds must build. The
        // system roots may be missing in a bare container: that is an error
        // naming the registry, not a panic.
        assert!(Trust::default().connector(true).is_ok());
        let has_roots = std::fs::read_dir("/etc/ssl/certs").is_ok_and(|mut d| d.next().is_some());
        match Transport::new("ghcr.io", "https://ghcr.io", "o/x", None) {
            Ok(_) => {}
            Err(e) if !has_roots => assert!(e.to_string().contains("registry ghcr.io"), "{e}"),
            Err(e) => panic!("the system has roots, yet: {e:#}"),
        }
    }
}
