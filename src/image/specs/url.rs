//! The one rule for every URL imgctl writes into an image or a lock: an
//! http(s) URL without spaces, quotes or shell characters, and without
//! credentials. A `user:password@` in a URL would be stored in RUN lines
//! (`docker history`), comments, labels and the lock's header, so a URL that
//! carries one is refused wherever it comes from (a spec field or a flag),
//! and shown with the credentials masked.

/// Whether `s` is an http(s) URL with nothing a shell or a Dockerfile would
/// read as syntax (no spaces, quotes, `$`, `;`, `&`, `|`, redirections or
/// brackets).
pub fn is_clean_url(s: &str) -> bool {
    (s.starts_with("https://") || s.starts_with("http://"))
        && s.len() > "https://".len()
        && s.chars()
            .all(|c| c.is_ascii_graphic() && !"\"'`$\\;&|<>(){}".contains(c))
}

/// The userinfo of an `scheme://userinfo@host/…` URL (`None` without an `@`
/// in the authority).
pub fn userinfo(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority.rsplit_once('@').map(|(user, _)| user)
}

/// `url` with its userinfo replaced by `***`.
pub fn mask_userinfo(url: &str) -> String {
    match (userinfo(url), url.split_once("://")) {
        (Some(user), Some((scheme, rest))) => {
            format!("{scheme}://***{}", &rest[user.len()..])
        }
        _ => url.to_string(),
    }
}

/// Every `scheme://…` word of free text (a label's value) that carries
/// credentials, masked: what a label must not store.
pub fn urls_with_credentials(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "\"'<>()".contains(c))
        .filter(|word| {
            word.split_once("://").is_some_and(|(scheme, _)| {
                !scheme.is_empty()
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
            }) && userinfo(word).is_some()
        })
        .map(mask_userinfo)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_found_and_masked() {
        assert_eq!(userinfo("https://u:pw@mirror/simple"), Some("u:pw"));
        assert_eq!(userinfo("https://token@mirror/simple"), Some("token"));
        assert_eq!(userinfo("https://mirror/simple?x=a@b"), None);
        assert_eq!(userinfo("https://mirror:8443/simple"), None);
        assert_eq!(
            mask_userinfo("https://u:pw@mirror/simple"),
            "https://***@mirror/simple"
        );
        assert_eq!(
            urls_with_credentials("see https://u:pw@git.example/x and mailto:a@b"),
            ["https://***@git.example/x"]
        );
        assert!(urls_with_credentials("https://git.example/x, a@b.c").is_empty());
    }

    #[test]
    fn clean_urls() {
        assert!(is_clean_url("https://mirror:8443/simple"));
        assert!(!is_clean_url("https://"));
        assert!(!is_clean_url("ftp://mirror/simple"));
        assert!(!is_clean_url("https://mirror/$(id)"));
    }
}
