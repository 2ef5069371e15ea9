//! Registry authentication, the parts that need no network: reading a
//! `WWW-Authenticate` challenge and making the `Authorization` header of
//! docker credentials.
//!
//! The flow (in [`super::http`]): a request goes without credentials (or with
//! the header cached from an earlier challenge); a 401's challenge says how to
//! authenticate. `Basic` is answered with the credentials' user and password
//! (or their `auth` field, base64 `user:password`); `Bearer realm=…,
//! service=…,scope=…` with a token from the realm for
//! `repository:<name>:pull,push`, asked for with basic auth when there are
//! credentials (or, with an identity token, by the OAuth2 refresh-token
//! grant). No function here puts a secret into a message.
use base64::Engine as _;
use bollard::auth::DockerCredentials;

/// What a registry's 401 asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// HTTP basic auth.
    Basic,
    /// A token from `realm`.
    Bearer {
        /// The token endpoint.
        realm: String,
        /// The `service` parameter to pass on, when given.
        service: Option<String>,
        /// The `scope` the registry named, when given.
        scope: Option<String>,
    },
}

/// Parses one `WWW-Authenticate` value: `Basic realm="x"` or `Bearer
/// realm="…",service="…",scope="…"` (quoted values may hold commas; bare
/// tokens are accepted too). `None` for a scheme imgctl does not speak, or a
/// Bearer challenge without a realm.
pub fn parse_challenge(value: &str) -> Option<Challenge> {
    let value = value.trim();
    let (scheme, rest) = value.split_once(char::is_whitespace).unwrap_or((value, ""));
    let params = parse_params(rest);
    let get = |key: &str| {
        params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.clone())
    };
    if scheme.eq_ignore_ascii_case("basic") {
        Some(Challenge::Basic)
    } else if scheme.eq_ignore_ascii_case("bearer") {
        Some(Challenge::Bearer {
            realm: get("realm").filter(|r| !r.is_empty())?,
            service: get("service"),
            scope: get("scope"),
        })
    } else {
        None
    }
}

/// `k1="v1", k2=v2` → pairs (a quoted value's `\"` is an escaped quote).
fn parse_params(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.trim().is_empty() {
            return out;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                value.push(c);
            }
            value = value.trim().to_string();
        }
        out.push((key.trim().to_string(), value));
    }
}

/// `Basic base64(user:password)` of the credentials: their username and
/// password, else their `auth` field (already `base64(user:password)`).
/// `None` when they hold neither.
pub fn basic_header(credentials: &DockerCredentials) -> Option<String> {
    let b64 = &base64::engine::general_purpose::STANDARD;
    match (
        &credentials.username,
        &credentials.password,
        &credentials.auth,
    ) {
        (Some(user), Some(password), _) => Some(format!(
            "Basic {}",
            b64.encode(format!("{user}:{password}"))
        )),
        (_, _, Some(auth)) if !auth.trim().is_empty() => {
            // Decode to be sure it is `user:password`, re-encode canonically.
            let raw = b64.decode(auth.trim()).ok()?;
            let text = String::from_utf8(raw).ok()?;
            text.contains(':')
                .then(|| format!("Basic {}", b64.encode(text)))
        }
        _ => None,
    }
}

/// The scope imgctl asks a token for: pull and push of `name`.
pub fn scope_for(name: &str) -> String {
    format!("repository:{name}:pull,push")
}

/// The token of a token endpoint's JSON reply: `token`, else `access_token`.
pub fn token_of(reply: &serde_json::Value) -> Option<String> {
    ["token", "access_token"]
        .iter()
        .filter_map(|k| reply.get(k).and_then(|v| v.as_str()))
        .find(|t| !t.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_challenges() {
        assert_eq!(
            parse_challenge(r#"Basic realm="imgctl-test""#),
            Some(Challenge::Basic)
        );
        assert_eq!(parse_challenge("basic"), Some(Challenge::Basic));
    }

    #[test]
    fn bearer_challenges_keep_commas_inside_quotes() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/busybox:pull,push""#,
        );
        assert_eq!(
            c,
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/busybox:pull,push".into()),
            })
        );
        let c =
            parse_challenge(r#"Bearer realm=https://ghcr.io/token, service="ghcr.io""#).unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "https://ghcr.io/token".into(),
                service: Some("ghcr.io".into()),
                scope: None,
            }
        );
        let c = parse_challenge(r#"Bearer realm="a\"b""#).unwrap();
        assert!(matches!(c, Challenge::Bearer { realm, .. } if realm == "a\"b"));
    }

    #[test]
    fn unknown_or_incomplete_challenges() {
        assert_eq!(parse_challenge(r#"Negotiate abc"#), None);
        assert_eq!(parse_challenge(r#"Bearer service="x""#), None);
        assert_eq!(parse_challenge(""), None);
    }

    #[test]
    fn basic_headers_from_credentials() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let c = DockerCredentials {
            username: Some("u".into()),
            password: Some("p:w".into()),
            ..Default::default()
        };
        assert_eq!(basic_header(&c), Some(format!("Basic {}", b64("u:p:w"))));
        let c = DockerCredentials {
            auth: Some(b64("me:secret")),
            ..Default::default()
        };
        assert_eq!(
            basic_header(&c),
            Some(format!("Basic {}", b64("me:secret")))
        );
        let c = DockerCredentials {
            auth: Some("not base64!".into()),
            ..Default::default()
        };
        assert_eq!(basic_header(&c), None);
        assert_eq!(basic_header(&DockerCredentials::default()), None);
    }

    #[test]
    fn tokens_and_scopes() {
        assert_eq!(scope_for("me/x"), "repository:me/x:pull,push");
        let v = serde_json::json!({"token": "t1", "access_token": "t2"});
        assert_eq!(token_of(&v).as_deref(), Some("t1"));
        let v = serde_json::json!({"access_token": "t2"});
        assert_eq!(token_of(&v).as_deref(), Some("t2"));
        assert_eq!(token_of(&serde_json::json!({"token": ""})), None);
    }
}
