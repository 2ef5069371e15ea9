//! The build options that shape the Dockerfile ([`RenderOptions`]) and the
//! check of a pip index URL, shared with locking.
//!
//! `commands/` builds the options from the command line (it parses and
//! checks each flag); this module names no flag and reads no file.
use super::error::RenderError;
use crate::image::specs::url::{is_clean_url, mask_userinfo, userinfo};

/// The default UID/GID of the image's user (the first regular user on Debian
/// and Ubuntu: `UID_MIN`/`GID_MIN` in /etc/login.defs).
pub const DEFAULT_ID: u32 = 1000;
/// Accepted `--uid`/`--gid` range: login.defs' `UID_MIN`..`UID_MAX` (1000..60000).
pub const ID_RANGE: std::ops::RangeInclusive<u32> = 1000..=60000;

/// Build options that shape the Dockerfile (`commands/` builds them from the
/// command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    /// Replaces the spec's base image (`--base-image`).
    pub base_image: Option<String>,
    /// How the replacement of the base image was asked for, quoted before it
    /// in the note the build prints and the Dockerfile carries (`commands/`
    /// passes its flag); empty: nothing is quoted.
    pub base_image_source: String,
    /// A proxy CA certificate (PEM) that apt and pip must trust (`--ca-cert`).
    pub ca_cert: Option<Vec<u8>>,
    /// pip index for the other packages (`--pip-index-url`); also for torch
    /// when the spec takes torch from PyPI (a PyPI mirror serves that wheel).
    pub pip_index_url: Option<String>,
    /// UID of the image's user (`--uid`, default 1000).
    pub uid: u32,
    /// GID of the image's user (`--gid`, default 1000).
    pub gid: u32,
    /// Passwordless sudo for the user (`--sudo`).
    pub sudo: bool,
    /// Render the BuildKit variant: apt and pip downloads through cache
    /// mounts (`RUN --mount=type=cache`), which the classic builder rejects.
    pub buildkit: bool,
    /// A proxy CA (PEM) that apt and pip trust during the build only: bound
    /// into the downloading RUN steps from the build context, never copied
    /// into a layer (BuildKit only).
    pub ca_cert_build_only: Option<Vec<u8>>,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            base_image: None,
            base_image_source: String::new(),
            ca_cert: None,
            pip_index_url: None,
            uid: DEFAULT_ID,
            gid: DEFAULT_ID,
            sudo: false,
            buildkit: false,
            ca_cert_build_only: None,
        }
    }
}

/// Checks a `--pip-index-url` (of `build`, `render` and `lock`): an http(s)
/// URL without spaces, quotes or shell characters, and without credentials. A
/// `user:password@` would be written into RUN lines (`docker history`),
/// comments, a label and the lock's header; the error shows the URL with the
/// credentials masked.
pub fn check_pip_index_url(url: &str) -> Result<(), RenderError> {
    if !is_clean_url(url) {
        return Err(RenderError::PipIndexUrlInvalid {
            masked: mask_userinfo(url),
        });
    }
    if userinfo(url).is_some() {
        return Err(RenderError::PipIndexUrlCredentials {
            masked: mask_userinfo(url),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_index_url_credentials() {
        assert!(check_pip_index_url("https://mirror:8443/simple").is_ok());
        let err = check_pip_index_url("https://u:pw@mirror/simple").unwrap_err();
        assert!(
            matches!(&err, RenderError::PipIndexUrlCredentials { masked } if !masked.contains("pw")),
            "{err}"
        );
    }
}
