//! The user namespace a workstation is made with: on rootless Podman the
//! caller becomes the image's user inside (`keep-id:uid=U,gid=G`), so what
//! it writes in the mounted folder is the caller's own.

/// The user namespace `up` asks for. `given`: `--userns`;
/// `rootless_podman`: the version of the rootless Podman that answered
/// (None: another engine); `image_ids`: the image's user's uid and gid
/// (its labels). On rootless Podman 4.3 and later, `keep-id` (given, or
/// by default there) becomes `keep-id:uid=U,gid=G`: your uid is the image's
/// user's, so what it writes in /workspace is yours and the image's files
/// under its home stay its own. Plain `keep-id` would run the container as
/// your own uid, which the image's home and services do not know; without
/// keep-id the image's user is one of your subordinate uids, and cannot
/// write your folder. Anything else is the engine's to read, as given.
pub fn user_namespace(
    given: Option<&str>,
    rootless_podman: Option<&str>,
    image_ids: Option<(u64, u64)>,
) -> Option<String> {
    let options = rootless_podman.is_some_and(|v| {
        let mut parts = v.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (major, minor) >= (4, 3)
    });
    let keep_id = match image_ids {
        Some((uid, gid)) if options => format!("keep-id:uid={uid},gid={gid}"),
        _ => "keep-id".to_string(),
    };
    match given {
        Some("keep-id") => Some(keep_id),
        Some(mode) => Some(mode.to_string()),
        None if options && image_ids.is_some() => Some(keep_id),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::user_namespace;

    #[test]
    fn rootless_podman_makes_you_the_images_user() {
        let ids = Some((1000, 1000));
        let mapped = Some("keep-id:uid=1000,gid=1000".to_string());
        // By default, and for a plain keep-id, on rootless Podman 4.3+.
        assert_eq!(user_namespace(None, Some("4.3.1"), ids), mapped);
        assert_eq!(
            user_namespace(Some("keep-id"), Some("5.2.0-dev"), ids),
            mapped
        );
        // Podman before 4.3 has no keep-id options: as given, no default.
        assert_eq!(
            user_namespace(Some("keep-id"), Some("4.2.0"), ids).as_deref(),
            Some("keep-id")
        );
        assert_eq!(user_namespace(None, Some("4.2.0"), ids), None);
        // Another engine, or an image without its user's ids: as given.
        assert_eq!(user_namespace(None, None, ids), None);
        assert_eq!(
            user_namespace(Some("keep-id"), None, ids).as_deref(),
            Some("keep-id")
        );
        assert_eq!(
            user_namespace(Some("keep-id"), Some("4.3.1"), None).as_deref(),
            Some("keep-id")
        );
        // Any other mode passes through, options included.
        for mode in ["host", "keep-id:uid=7", "auto"] {
            assert_eq!(
                user_namespace(Some(mode), Some("4.3.1"), ids).as_deref(),
                Some(mode)
            );
        }
    }
}
