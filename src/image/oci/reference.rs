//! Which registry and repository an image reference names, by docker's rules
//! (distribution/reference's normalisation): a first path component with a
//! `.` or `:`, or `localhost`, is the registry host; otherwise the registry is
//! Docker Hub, and a one-component name is under `library/`. Docker Hub's API
//! is served by `registry-1.docker.io`. Loopback registries (`localhost`,
//! 127.0.0.0/8, `::1`) are spoken to over plain HTTP, as dockerd treats them
//! as insecure by default; every other registry over HTTPS.
use std::net::IpAddr;

use anyhow::anyhow;

/// The host Docker Hub's registry API answers on.
pub const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// One repository of one registry, as an image reference names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoRef {
    /// The registry as docker names it (`docker.io`, `127.0.0.1:5000`): the
    /// key of its credentials and the name errors give.
    pub registry: String,
    /// `scheme://host[:port]` of the registry's API.
    pub base_url: String,
    /// The repository path inside the registry (`library/busybox`).
    pub name: String,
    /// The tag or digest the reference names, when it names one (a digest
    /// wins over a tag, as in docker).
    pub tag_or_digest: Option<String>,
}

/// Parses `reference` (`[HOST[:PORT]/]PATH[:TAG][@sha256:…]`).
pub fn parse(reference: &str) -> anyhow::Result<RepoRef> {
    let parsed = crate::image_ref::parse(reference).map_err(|reason| {
        anyhow!(
            "invalid image reference '{}': {reason}",
            reference.escape_debug()
        )
    })?;
    let (registry, api_host) = match parsed.host.as_deref() {
        None | Some("docker.io" | "index.docker.io" | "registry-1.docker.io") => {
            ("docker.io".to_string(), DOCKER_HUB_API.to_string())
        }
        Some(host) => (host.to_string(), host.to_string()),
    };
    let name = if registry == "docker.io" && !parsed.path.contains('/') {
        format!("library/{}", parsed.path)
    } else {
        parsed.path.clone()
    };
    let scheme = if is_loopback(&api_host) {
        "http"
    } else {
        "https"
    };
    Ok(RepoRef {
        base_url: format!("{scheme}://{api_host}"),
        registry,
        name,
        tag_or_digest: parsed.digest.or(parsed.tag),
    })
}

/// Whether `host` (`host[:port]`, `[v6]:port`) is `localhost` or a loopback
/// address.
pub fn is_loopback(host: &str) -> bool {
    let bare = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if host.matches(':').count() > 1 {
        host // a bare IPv6 address
    } else {
        host.split(':').next().unwrap_or(host)
    };
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RepoRef {
        parse(s).unwrap()
    }

    #[test]
    fn docker_hub_names_get_library_and_the_api_host() {
        let r = p("busybox");
        assert_eq!(r.registry, "docker.io");
        assert_eq!(r.base_url, "https://registry-1.docker.io");
        assert_eq!(r.name, "library/busybox");
        assert_eq!(r.tag_or_digest, None);
        let r = p("nvidia/cuda:12.4.1-base-ubuntu22.04");
        assert_eq!(r.name, "nvidia/cuda");
        assert_eq!(r.tag_or_digest.as_deref(), Some("12.4.1-base-ubuntu22.04"));
        assert_eq!(p("docker.io/busybox:1").name, "library/busybox");
        assert_eq!(p("index.docker.io/me/x").registry, "docker.io");
    }

    #[test]
    fn hosts_ports_and_digests() {
        let r = p("127.0.0.1:5000/me/img:tag");
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.base_url, "http://127.0.0.1:5000");
        assert_eq!(r.name, "me/img");
        assert_eq!(r.tag_or_digest.as_deref(), Some("tag"));
        let r = p("ghcr.io/org/img");
        assert_eq!(r.base_url, "https://ghcr.io");
        assert_eq!(r.name, "org/img");
        let d = format!("sha256:{}", "a".repeat(64));
        let r = p(&format!("registry.example.com:443/x/y:t@{d}"));
        assert_eq!(r.registry, "registry.example.com:443");
        assert_eq!(r.tag_or_digest.as_deref(), Some(d.as_str()));
        assert_eq!(p("localhost/x").base_url, "http://localhost");
        // One component without a dot or colon is a Hub name, not a host.
        assert_eq!(p("myhost/x").registry, "docker.io");
        assert_eq!(p("myhost/x").name, "myhost/x");
    }

    #[test]
    fn bad_references_are_errors() {
        let e = parse("Upper/Case").unwrap_err().to_string();
        assert!(e.starts_with("invalid image reference 'Upper/Case'"), "{e}");
        assert!(parse("").is_err());
    }

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "localhost:5000",
            "127.0.0.1:5000",
            "127.1.2.3",
            "[::1]:5000",
            "::1",
        ] {
            assert!(is_loopback(h), "{h}");
        }
        for h in [
            "example.com",
            "10.0.0.1:5000",
            "[::2]:5000",
            "localhost.example.com",
        ] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
