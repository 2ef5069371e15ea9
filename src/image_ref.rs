//! Image references as the Docker engine reads them, parsed before any
//! request: `--base-image` and `verify --image` go through [`check`] (and
//! `build --tag` through [`parse`]), so that a bad name is an error naming
//! what is wrong (for `commands/`, a usage error, exit 2), not the engine's
//! raw "status code 400" or a redirect. The errors name the reference's
//! role, not a flag: `commands/` names the flag.
//!
//! The grammar is docker's (distribution/reference): an optional registry host
//! (`host[:port]`, recognised by a `.` or `:` or as `localhost`), then
//! lower-case path components `[a-z0-9]+` joined by `.`, `_`, `__` or dashes,
//! separated by `/`; an optional `:tag` (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`);
//! an optional `@sha256:` digest of 64 hex digits.
/// The grammar, for hints.
pub const GRAMMAR: &str = "an image reference is [HOST[:PORT]/]PATH[:TAG][@sha256:<64 hex>]: PATH is lower-case components [a-z0-9]+([._-][a-z0-9]+)* separated by /, TAG is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127} (e.g. nvidia/cuda:12.4.1-base-ubuntu22.04)";

/// The longest repository name docker accepts (host and path together).
const MAX_NAME: usize = 255;

/// A parsed image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// Registry host and port, when the first component names one.
    pub host: Option<String>,
    /// The repository path (`nvidia/cuda`).
    pub path: String,
    /// The tag, when given.
    pub tag: Option<String>,
    /// `sha256:<64 hex>`, when given.
    pub digest: Option<String>,
}

/// Parses `s`; `Err` says what is wrong with it.
pub fn parse(s: &str) -> Result<Reference, String> {
    if s.is_empty() {
        return Err("it is empty".to_string());
    }
    let (rest, digest) = match s.split_once('@') {
        Some((rest, d)) => (rest, Some(parse_digest(d)?)),
        None => (s, None),
    };
    // The tag follows the last ':' after the last '/' (host:port/x has none).
    let slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[slash..].rfind(':') {
        Some(i) => (&rest[..slash + i], Some(&rest[slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(t) = tag {
        if !is_tag(t) {
            return Err(format!(
                "the tag '{t}' is not [A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}"
            ));
        }
    }
    if name.len() > MAX_NAME {
        return Err(format!("the name is longer than {MAX_NAME} characters"));
    }
    let (host, path) = match name.split_once('/') {
        Some((first, path)) if first.contains(['.', ':']) || first == "localhost" => {
            if !is_host(first) {
                return Err(format!("'{first}' is not a registry HOST[:PORT]"));
            }
            (Some(first.to_string()), path)
        }
        _ => (None, name),
    };
    if let Some(bad) = path.split('/').find(|c| !is_path_component(c)) {
        return Err(if bad.is_empty() {
            format!("'{name}' has an empty path component")
        } else {
            format!("'{bad}' is not a lower-case path component [a-z0-9]+([._-][a-z0-9]+)*")
        });
    }
    Ok(Reference {
        host,
        path: path.to_string(),
        tag: tag.map(str::to_string),
        digest,
    })
}

/// What a checked reference is for; the error names it, and `commands/`
/// names the flag that gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The base image that replaces a spec's own.
    BaseImage,
    /// The image to verify inside.
    Image,
    /// A pushed image named by position (`imgctl inspect REF`).
    Pushed,
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::BaseImage => "base image",
            Role::Image => "image",
            Role::Pushed => "image reference",
        })
    }
}

/// An image reference that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ImageRefError {
    /// `value` is not a reference: `reason` says why ([`GRAMMAR`] says what is).
    #[error("invalid {role} '{value}': {reason}")]
    Invalid {
        /// What the reference is for.
        role: Role,
        /// The value as given, escaped (`escape_debug`).
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Parses `value`, a reference for `role`; a [`ImageRefError`] naming what
/// is wrong otherwise.
pub fn check(role: Role, value: &str) -> Result<Reference, ImageRefError> {
    parse(value).map_err(|reason| ImageRefError::Invalid {
        role,
        value: value.escape_debug().to_string(),
        reason,
    })
}

/// `sha256:<64 lower-case hex>` → itself.
fn parse_digest(d: &str) -> Result<String, String> {
    let hex = d.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(d.to_string())
    } else {
        Err(format!("the digest '{d}' is not sha256:<64 hex digits>"))
    }
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn is_tag(t: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    t.len() <= 128
        && t.chars().next().is_some_and(word)
        && t.chars().all(|c| word(c) || c == '.' || c == '-')
}

/// `[a-z0-9]+` runs joined by `.`, `_`, `__` or one or more `-`.
fn is_path_component(c: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = c.as_bytes();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    if !alnum(first) || !alnum(last) {
        return false;
    }
    // Between runs: `.`, `_`, `__` or dashes; nothing else, and no other mix.
    c.split(|ch: char| ch.is_ascii_lowercase() || ch.is_ascii_digit())
        .filter(|sep| !sep.is_empty())
        .all(|sep| matches!(sep, "." | "_" | "__") || sep.bytes().all(|b| b == b'-'))
        && c.bytes().all(|b| alnum(b) || b"._-".contains(&b))
}

/// A registry `host[:port]`: dot-separated labels of letters, digits and inner
/// dashes, then an optional numeric port.
fn is_host(h: &str) -> bool {
    let (host, port) = match h.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (h, None),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    host.split('.').all(label_ok)
        && port.map_or(true, |p| {
            !p.is_empty() && p.len() <= 5 && p.chars().all(|c| c.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_references() {
        let d = format!("sha256:{}", "ab".repeat(32));
        for ok in [
            "busybox",
            "imgctl/cu124:dev",
            "nvidia/cuda:12.4.1-base-ubuntu22.04",
            "localhost:5000/a/b:1.0",
            "localhost/x",
            "registry.example.com/team/img",
            "Registry.Example.com:443/x__y/a-b--c.d:V1_x",
            &format!("nvidia/cuda:12.4.1@{d}"),
            &format!("nvidia/cuda@{d}"),
        ] {
            assert!(parse(ok).is_ok(), "{ok}: {:?}", parse(ok));
        }
        let r = parse("localhost:5000/a/b:1.0").unwrap();
        assert_eq!(r.host.as_deref(), Some("localhost:5000"));
        assert_eq!((r.path.as_str(), r.tag.as_deref()), ("a/b", Some("1.0")));
        for (bad, why) in [
            ("", "it is empty"),
            ("UPPER/Case:@@::", "the digest '@::' is not sha256"),
            ("UPPER/Case:x", "'UPPER' is not a lower-case path component"),
            ("a b", "'a b' is not a lower-case path component"),
            ("a:b:c", "'a:b' is not a lower-case path component"),
            ("a.b:x/c", "'a.b:x' is not a registry HOST[:PORT]"),
            ("a:-x", "the tag '-x'"),
            ("-a", "'-a' is not"),
            ("a//b", "has an empty path component"),
            ("a/b/", "has an empty path component"),
            ("a._b", "'a._b' is not"),
            ("x@sha256:abc", "not sha256:<64 hex digits>"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert!(parse(&format!("x:{}", "t".repeat(129))).is_err());
    }
}
