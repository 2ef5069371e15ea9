//! [`super::Repository`] against an in-process fake registry, for what the
//! integration test's distribution 2.8 cannot show: Bearer tokens (asked for
//! once, then cached), a registry with the referrers API that answers
//! `OCI-Subject` (no fallback tag is written, the API's list is used), blob
//! redirects to another host (followed without the credentials), a token
//! service that refuses the password (one line, no secret), and a registry
//! that honours `If-Match` on the referrers tag (a 412 is read and merged
//! again). Its hostile
//! modes (a HEAD that names another digest, slow replies, big pages) serve
//! `hostile_tests.rs` and `inspect`'s tests too.
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::manifest::{self, Descriptor, OCI_INDEX, OCI_MANIFEST};
use super::Repository;

const TOKEN: &str = "tok-4f1a";
pub(crate) const PASSWORD: &str = "fake-s3cret";

/// The fake's state: what it stores and what it was asked.
#[derive(Default)]
pub(crate) struct Fake {
    pub(crate) port: u16,
    pub(crate) referrers_api: bool,
    /// Basic auth (`me:PASSWORD`) instead of Bearer tokens.
    basic: bool,
    /// Another server's `host:port`: the referrers API's next page and the
    /// upload's `Location` name it (a hostile or careless registry).
    pub(crate) elsewhere: Option<String>,
    pub(crate) blobs: HashMap<String, Bytes>,
    /// reference → (media type, bytes).
    pub(crate) manifests: HashMap<String, (String, Bytes)>,
    /// subject digest → referrer descriptors (the API's own list).
    pub(crate) referrers: HashMap<String, Vec<Descriptor>>,
    /// Referrers a page of the API's list (1 when 0).
    pub(crate) per_page: usize,
    /// The `Docker-Content-Digest` a manifest HEAD answers, whatever was
    /// asked (a registry that names another manifest).
    pub(crate) head_digest: Option<String>,
    /// How long each reply waits (a slow or hostile registry).
    pub(crate) delay: std::time::Duration,
    /// `METHOD path auth` of each request (auth: none, basic, bearer).
    pub(crate) log: Vec<String>,
    /// Honours `If-Match` on manifest PUTs (412 unless it is the stored
    /// manifest's `ETag`), as distribution 2.8 does not.
    if_match: bool,
    /// An index another push "writes" to the tag just before the next
    /// conditional PUT lands (a concurrent push between read and write).
    sneak_in: Option<Bytes>,
    /// The status each conditional PUT got.
    conditional: Vec<u16>,
    /// How many GETs of a tag (not a digest) answer `500 UNKNOWN` first, as
    /// distribution's filesystem store does while another push writes it.
    busy_reads: usize,
}

pub(crate) type Shared = Arc<Mutex<Fake>>;

fn reply(
    status: StatusCode,
    headers: &[(&str, String)],
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::builder().status(status);
    for (k, v) in headers {
        r = r.header(*k, v.as_str());
    }
    r.body(Full::new(body.into())).unwrap()
}

fn unknown() -> Response<Full<Bytes>> {
    reply(
        StatusCode::NOT_FOUND,
        &[("Content-Type", "application/json".into())],
        r#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}"#,
    )
}

/// What distribution's filesystem store answers a read of a tag that
/// another push is writing.
fn busy() -> Response<Full<Bytes>> {
    reply(
        StatusCode::INTERNAL_SERVER_ERROR,
        &[("Content-Type", "application/json".into())],
        r#"{"errors":[{"code":"UNKNOWN","message":"unknown error"}]}"#,
    )
}

/// The token service's answer to a request with `auth`: a token for the
/// fake's password (basic auth), else 401.
fn token(auth: &str) -> Response<Full<Bytes>> {
    let good = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("me:{PASSWORD}"))
    );
    if auth == good {
        reply(
            StatusCode::OK,
            &[],
            format!(r#"{{"access_token":"{TOKEN}"}}"#),
        )
    } else {
        reply(
            StatusCode::UNAUTHORIZED,
            &[],
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"bad password"}]}"#,
        )
    }
}

/// The 401 a request without the fake's credentials gets, if it lacks them.
fn unauthorized(fake: &Fake, auth: &str) -> Option<Response<Full<Bytes>>> {
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("me:{PASSWORD}"))
    );
    if fake.basic && auth != basic {
        return Some(reply(
            StatusCode::UNAUTHORIZED,
            &[("WWW-Authenticate", r#"Basic realm="fake""#.into())],
            "",
        ));
    }
    if !fake.basic && auth != format!("Bearer {TOKEN}") {
        let challenge = format!(
            r#"Bearer realm="http://127.0.0.1:{}/token",service="fake",scope="repository:me/x:pull""#,
            fake.port
        );
        return Some(reply(
            StatusCode::UNAUTHORIZED,
            &[("WWW-Authenticate", challenge)],
            "",
        ));
    }
    None
}

async fn handle(
    state: Shared,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let auth = parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let kind = auth
        .split(' ')
        .next()
        .filter(|k| !k.is_empty())
        .unwrap_or("none");
    let path = parts.uri.path().to_string();
    let delay = state.lock().unwrap().delay;
    tokio::time::sleep(delay).await;
    let mut fake = state.lock().unwrap();
    fake.log.push(format!("{} {path} {kind}", parts.method));
    let port = fake.port;
    // Blob storage "on another host" (localhost, not 127.0.0.1): no auth.
    if let Some(digest) = path.strip_prefix("/storage/") {
        let blob = fake.blobs.get(digest).cloned().unwrap_or_default();
        return Ok(reply(StatusCode::OK, &[], blob));
    }
    if path == "/token" {
        return Ok(token(auth));
    }
    if let Some(challenge) = unauthorized(&fake, auth) {
        return Ok(challenge);
    }
    let Some(rest) = path.strip_prefix("/v2/me/x/") else {
        return Ok(reply(StatusCode::NOT_FOUND, &[], "404 page not found"));
    };
    let (kind, arg) = rest.split_once('/').unwrap_or((rest, ""));
    Ok(match (parts.method.clone(), kind) {
        (Method::HEAD, "blobs") if fake.blobs.contains_key(arg) => reply(StatusCode::OK, &[], ""),
        (Method::HEAD, "blobs") => reply(StatusCode::NOT_FOUND, &[], ""),
        (Method::GET, "blobs") => reply(
            StatusCode::TEMPORARY_REDIRECT,
            &[("Location", format!("http://localhost:{port}/storage/{arg}"))],
            "",
        ),
        (Method::POST, "blobs") => {
            let host = fake.elsewhere.as_ref().map(|h| format!("http://{h}"));
            let location = format!("{}/v2/me/x/upload/1?state=x", host.unwrap_or_default());
            reply(StatusCode::ACCEPTED, &[("Location", location)], "")
        }
        (Method::PUT, "upload") => {
            let query = parts.uri.query().unwrap_or("");
            let digest = query.split("digest=").nth(1).unwrap_or("").to_string();
            assert_eq!(manifest::sha256_digest(&body), digest);
            fake.blobs.insert(digest, body);
            reply(StatusCode::CREATED, &[], "")
        }
        (Method::PUT, "manifests") if fake.if_match && parts.headers.contains_key("if-match") => {
            conditional_put(&mut fake, arg, &parts.headers, body)
        }
        (Method::PUT, "manifests") => {
            let media_type = parts.headers["content-type"].to_str().unwrap().to_string();
            let digest = manifest::sha256_digest(&body);
            let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let mut headers = vec![("Docker-Content-Digest", digest.clone())];
            if let (true, Some(subject)) =
                (fake.referrers_api, parsed["subject"]["digest"].as_str())
            {
                let entry = Descriptor {
                    artifact_type: parsed["artifactType"].as_str().map(str::to_string),
                    annotations: serde_json::from_value(parsed["annotations"].clone())
                        .unwrap_or_default(),
                    ..Descriptor::of(&media_type, &body)
                };
                fake.referrers
                    .entry(subject.to_string())
                    .or_default()
                    .push(entry);
                headers.push(("OCI-Subject", subject.to_string()));
            }
            fake.manifests
                .insert(digest.clone(), (media_type.clone(), body.clone()));
            fake.manifests.insert(arg.to_string(), (media_type, body));
            reply(StatusCode::CREATED, &headers, "")
        }
        (Method::GET, "manifests") if fake.busy_reads > 0 && !arg.starts_with("sha256:") => {
            fake.busy_reads -= 1;
            busy()
        }
        (Method::GET | Method::HEAD, "manifests") => match fake.manifests.get(arg) {
            Some((media_type, bytes)) => {
                let digest = match (&parts.method, &fake.head_digest) {
                    (&Method::HEAD, Some(d)) => d.clone(),
                    _ => manifest::sha256_digest(bytes),
                };
                reply(
                    StatusCode::OK,
                    &[
                        ("Content-Type", media_type.clone()),
                        ("Content-Length", bytes.len().to_string()),
                        ("ETag", format!("\"{}\"", manifest::sha256_digest(bytes))),
                        ("Docker-Content-Digest", digest),
                    ],
                    bytes.clone(),
                )
            }
            None => unknown(),
        },
        (Method::GET, "referrers") if fake.referrers_api => {
            // `per_page` referrers a page, the next page linked (`?page=N`).
            let page: usize = parts
                .uri
                .query()
                .and_then(|q| q.strip_prefix("page="))
                .map_or(0, |n| n.parse().unwrap());
            let per_page = fake.per_page.max(1);
            let all = fake.referrers.get(arg).cloned().unwrap_or_default();
            let mut index = manifest::empty_index();
            let mut headers = vec![("Content-Type", OCI_INDEX.to_string())];
            let listed: Vec<_> = all.iter().skip(page * per_page).take(per_page).collect();
            index["manifests"] = serde_json::to_value(listed).unwrap();
            if (page + 1) * per_page < all.len() {
                let host = fake.elsewhere.as_ref().map(|h| format!("http://{h}"));
                let next = format!(
                    "<{}/v2/me/x/referrers/{arg}?page={}>; rel=\"next\"",
                    host.unwrap_or_default(),
                    page + 1
                );
                headers.push(("Link", next));
            }
            reply(
                StatusCode::OK,
                &headers,
                serde_json::to_vec(&index).unwrap(),
            )
        }
        _ => reply(StatusCode::NOT_FOUND, &[], "404 page not found"),
    })
}

/// A manifest PUT with `If-Match` to a fake that honours it: 412 unless
/// the header is the stored manifest's `ETag` (after [`Fake::sneak_in`]).
fn conditional_put(
    fake: &mut Fake,
    reference: &str,
    headers: &hyper::HeaderMap,
    body: Bytes,
) -> Response<Full<Bytes>> {
    if let Some(other) = fake.sneak_in.take() {
        fake.manifests
            .insert(reference.to_string(), (OCI_INDEX.into(), other));
    }
    let etag = fake
        .manifests
        .get(reference)
        .map(|(_, b)| format!("\"{}\"", manifest::sha256_digest(b)));
    if etag.as_deref() != headers["if-match"].to_str().ok() {
        fake.conditional.push(412);
        return reply(StatusCode::PRECONDITION_FAILED, &[], "");
    }
    fake.conditional.push(201);
    let media_type = headers["content-type"].to_str().unwrap().to_string();
    fake.manifests
        .insert(reference.to_string(), (media_type, body));
    reply(StatusCode::CREATED, &[], "")
}

/// Starts a fake on a free port; returns its state.
pub(crate) async fn start(referrers_api: bool) -> Shared {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let state = Arc::new(Mutex::new(Fake {
        port: listener.local_addr().unwrap().port(),
        referrers_api,
        ..Default::default()
    }));
    let shared = state.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = shared.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(state.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    state
}

/// A client of the fake's `me/x:v1` with `me`'s credentials and `password`.
pub(crate) fn repository(state: &Shared, password: &str) -> Repository {
    let port = state.lock().unwrap().port;
    let credentials = DockerCredentials {
        username: Some("me".into()),
        password: Some(password.into()),
        ..Default::default()
    };
    Repository::new(&format!("127.0.0.1:{port}/me/x:v1"), Some(credentials)).unwrap()
}

/// Stores an image manifest under tag `v1`; its descriptor.
pub(crate) fn subject(state: &Shared) -> Descriptor {
    let bytes = Bytes::from_static(
        br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json"}"#,
    );
    let d = Descriptor::of(OCI_MANIFEST, &bytes);
    let mut fake = state.lock().unwrap();
    fake.manifests
        .insert("v1".into(), (OCI_MANIFEST.into(), bytes.clone()));
    fake.manifests
        .insert(d.digest.clone(), (OCI_MANIFEST.into(), bytes));
    d
}

/// How many requests the fake logged that start with `prefix`.
pub(crate) fn count(state: &Shared, prefix: &str) -> usize {
    state
        .lock()
        .unwrap()
        .log
        .iter()
        .filter(|l| l.starts_with(prefix))
        .count()
}

#[tokio::test]
async fn bearer_tokens_and_the_referrers_api() {
    let state = start(true).await;
    let subject = subject(&state);
    let repo = repository(&state, PASSWORD);
    assert_eq!(repo.resolve("v1").await.unwrap(), subject);
    let mut annotations = BTreeMap::new();
    annotations.insert("k".to_string(), "v".to_string());
    let pushed = repo
        .push_artifact(
            &subject,
            "application/vnd.in-toto+json",
            "application/vnd.in-toto+json",
            b"statement",
            annotations,
        )
        .await
        .unwrap();
    // The registry answered OCI-Subject: no referrers tag was read or written.
    let tag = manifest::fallback_tag(&subject.digest).unwrap();
    assert_eq!(count(&state, &format!("PUT /v2/me/x/manifests/{tag}")), 0);
    assert_eq!(count(&state, &format!("GET /v2/me/x/manifests/{tag}")), 0);
    // The list is the API's, two pages of it.
    let other = push(&repo, &subject, "other").await;
    assert_eq!(
        repo.referrers(&subject.digest, None).await.unwrap().list,
        vec![pushed.clone(), other.clone()]
    );
    assert_eq!(count(&state, "GET /v2/me/x/referrers/"), 2);
    assert_eq!(
        repo.referrers(&subject.digest, Some("other"))
            .await
            .unwrap()
            .list,
        vec![other]
    );
    assert_eq!(count(&state, &format!("GET /v2/me/x/manifests/{tag}")), 0);
    assert_eq!(count(&state, &format!("PUT /v2/me/x/manifests/{tag}")), 0);
    // The blob comes through the redirect, without the token on the other host.
    let (layer, bytes) = repo.fetch_artifact(&pushed.digest).await.unwrap();
    assert_eq!(bytes, b"statement");
    assert_eq!(layer.media_type, "application/vnd.in-toto+json");
    assert_eq!(count(&state, "GET /storage/"), 1);
    let log = state.lock().unwrap().log.clone();
    let storage: Vec<_> = log
        .iter()
        .filter(|l| l.starts_with("GET /storage/"))
        .collect();
    assert!(storage[0].ends_with(" none"), "{storage:?}");
    // One token for everything (cached), asked for with basic auth.
    assert_eq!(
        count(&state, "GET /token Basic"),
        1,
        "{:?}",
        state.lock().unwrap().log
    );
}

/// Pushes a text artifact `what` (its content the same word) referring to
/// `subject`.
async fn push(repo: &Repository, subject: &Descriptor, what: &str) -> Descriptor {
    repo.push_artifact(
        subject,
        what,
        "text/plain",
        what.as_bytes(),
        BTreeMap::new(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn without_the_api_the_fallback_tag_is_kept() {
    let state = start(false).await;
    let subject = subject(&state);
    let repo = repository(&state, PASSWORD);
    let a = push(&repo, &subject, "a").await;
    let b = push(&repo, &subject, "b").await;
    push(&repo, &subject, "a").await;
    let tag = manifest::fallback_tag(&subject.digest).unwrap();
    // a's second push finds its entry listed, and writes nothing.
    assert_eq!(count(&state, &format!("PUT /v2/me/x/manifests/{tag}")), 2);
    assert_eq!(
        repo.referrers(&subject.digest, None).await.unwrap().list,
        vec![a, b.clone()]
    );
    assert_eq!(
        repo.referrers(&subject.digest, Some("b"))
            .await
            .unwrap()
            .list,
        vec![b]
    );
    // Blobs the registry has are not uploaded again.
    assert_eq!(count(&state, "POST /v2/me/x/blobs/uploads/"), 3);
}

#[tokio::test]
async fn a_500_to_a_read_of_the_referrers_tag_is_asked_again() {
    let state = start(false).await;
    let subject = subject(&state);
    let repo = repository(&state, PASSWORD);
    let a = push(&repo, &subject, "a").await;
    // Another push is writing the tag: its reads answer 500 a few times.
    state.lock().unwrap().busy_reads = 3;
    let b = push(&repo, &subject, "b").await;
    assert_eq!(state.lock().unwrap().busy_reads, 0);
    let listed = repo.referrers(&subject.digest, None).await.unwrap().list;
    assert_eq!(listed, vec![a, b]);
    // One that stays busy is named, after FALLBACK_TRIES reads.
    state.lock().unwrap().busy_reads = usize::MAX;
    let e = repo
        .push_artifact(&subject, "c", "text/plain", b"c", BTreeMap::new())
        .await
        .unwrap_err();
    assert!(format!("{e:#}").contains("500 UNKNOWN"), "{e:#}");
}

#[tokio::test]
async fn a_registry_that_honours_if_match_makes_a_lost_update_a_retry() {
    let state = start(false).await;
    let subject = subject(&state);
    let repo = repository(&state, PASSWORD);
    state.lock().unwrap().if_match = true;
    let a = push(&repo, &subject, "a").await;
    // Another push lands between imgctl's read of the tag and its write.
    let other = Descriptor {
        artifact_type: Some("other".into()),
        ..Descriptor::of(OCI_MANIFEST, b"other")
    };
    let mut theirs = manifest::empty_index();
    manifest::merge_into_index(&mut theirs, &a);
    manifest::merge_into_index(&mut theirs, &other);
    state.lock().unwrap().sneak_in = Some(serde_json::to_vec(&theirs).unwrap().into());
    let b = push(&repo, &subject, "b").await;
    // a made the tag (nothing to match); b's write was conditional, met
    // the other push's (412), and was made again over it.
    assert_eq!(state.lock().unwrap().conditional, vec![412, 201]);
    let listed = repo.referrers(&subject.digest, None).await.unwrap().list;
    assert_eq!(listed, vec![a, other, b]);
}

#[tokio::test]
async fn a_refused_token_is_one_line_without_the_password() {
    let state = start(true).await;
    let repo = repository(&state, "wrong-fake-pw");
    let e = repo.resolve("v1").await.unwrap_err();
    let text = format!("{e:#}");
    let port = state.lock().unwrap().port;
    assert_eq!(
        text,
        format!(
            "the token service of registry 127.0.0.1:{port} (http://127.0.0.1:{port}/token) refused a token for me/x: 401 UNAUTHORIZED: bad password (the credentials were refused)"
        )
    );
    assert!(!format!("{e:?}").contains("wrong-fake-pw"));
}

/// What the other server saw: every request carried no credentials.
fn saw_no_credentials(other: &Shared) -> Vec<String> {
    let log = other.lock().unwrap().log.clone();
    assert!(!log.is_empty(), "the other server was never asked");
    for line in &log {
        assert!(
            line.ends_with(" none"),
            "credentials went to another host: {log:?}"
        );
        assert!(
            !line.contains("/token"),
            "a token was asked of another host: {log:?}"
        );
    }
    log
}

#[tokio::test]
async fn a_next_page_on_another_host_gets_no_credentials() {
    for basic in [true, false] {
        let other = start(true).await;
        let state = start(true).await;
        let other_port = other.lock().unwrap().port;
        {
            let mut fake = state.lock().unwrap();
            fake.basic = basic;
            fake.elsewhere = Some(format!("127.0.0.1:{other_port}"));
        }
        let subject = subject(&state);
        let repo = repository(&state, PASSWORD);
        for t in ["a", "b"] {
            repo.push_artifact(&subject, t, "text/plain", t.as_bytes(), BTreeMap::new())
                .await
                .unwrap_err(); // the upload's Location is on the other host
        }
        // Both uploads' PUTs went there without credentials, and failed.
        assert_eq!(count(&other, "PUT /v2/me/x/upload/1 none"), 2);
        // Referrers as a registry that links its next page elsewhere.
        let d = Descriptor::of("text/plain", b"r");
        state
            .lock()
            .unwrap()
            .referrers
            .insert(subject.digest.clone(), vec![d.clone(), d]);
        let e = repo.referrers(&subject.digest, None).await.unwrap_err();
        assert!(format!("{e:#}").contains("401"), "{e:#}");
        let log = saw_no_credentials(&other);
        assert!(
            log.iter().any(|l| l.starts_with("GET /v2/me/x/referrers/")),
            "{log:?}"
        );
    }
}
