//! The typed image spec (schema version 1), as produced by [`super::validate`].
//!
//! These types hold a spec that passed validation; they are never deserialized
//! directly (the validator walks the YAML itself so that it can report every
//! problem at once). They serialize for `imgctl specs --json`.
use std::collections::BTreeMap;

use serde::Serialize;

/// The only spec schema version this imgctl reads.
pub const SCHEMA_VERSION: u64 = 1;

/// Every top-level key of a version-1 spec, in documentation order.
pub const TOP_LEVEL_KEYS: &[&str] = &[
    "schema_version",
    "name",
    "description",
    "base_image",
    "cuda",
    "python",
    "torch",
    "pip",
    "apt",
    "user",
    "ports",
    "labels",
    "template",
    "lock",
];

/// Keys of the `torch` mapping.
pub const TORCH_KEYS: &[&str] = &["version", "variant", "index"];

/// Keys of the `user` mapping.
pub const USER_KEYS: &[&str] = &["name"];

/// A validated image spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageSpec {
    /// Always [`SCHEMA_VERSION`].
    pub schema_version: u64,
    /// Profile name (`cu124`): names the image and appears in its labels.
    pub name: String,
    /// One line saying what the image is.
    pub description: String,
    /// The base image.
    pub base_image: ImageRef,
    /// Full CUDA toolkit version of the base (`12.4.1`).
    pub cuda: String,
    /// Python minor the image is meant to run (`3.10`).
    pub python: String,
    /// The torch wheel.
    pub torch: TorchSpec,
    /// Pinned (`==`) pip packages installed after torch.
    pub pip: Vec<PipPin>,
    /// Debian/Ubuntu packages installed first.
    pub apt: Vec<String>,
    /// The non-root user.
    pub user: UserSpec,
    /// Ports the image exposes.
    pub ports: Vec<u16>,
    /// Extra labels of the image (key → value).
    pub labels: BTreeMap<String, String>,
    /// A Dockerfile template to use instead of the bundled workstation one:
    /// a path relative to the spec file.
    pub template: Option<String>,
    /// Which pip lock file holds the image's Python packages (see [`crate::image::lock`]).
    pub lock: LockSetting,
}

/// The spec's `lock` field: where its pip lock file lives, or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "path")]
pub enum LockSetting {
    /// No `lock` key (or `lock: true`): `<spec file stem>.lock` next to the spec
    /// (`images/<name>.lock` for a bundled profile), used when it exists.
    Default,
    /// `lock: false`: the image installs without a lock; transitive Python
    /// packages float.
    Disabled,
    /// `lock: PATH`: that file, relative to the spec file.
    Path(String),
}

/// A base image reference: `name:tag` with an optional `@sha256:` digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageRef {
    /// Repository (`nvidia/cuda`).
    pub name: String,
    /// Tag (`12.4.1-base-ubuntu22.04`).
    pub tag: String,
    /// `sha256:<64 hex>` when pinned.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parses `name:tag[@sha256:hex]`; `Err` says what is wrong.
    pub fn parse(s: &str) -> Result<ImageRef, String> {
        let (rest, digest) = match s.split_once('@') {
            Some((rest, d)) => {
                let hex = d
                    .strip_prefix("sha256:")
                    .ok_or_else(|| format!("digest '{d}' must be sha256:<64 hex digits>"))?;
                if hex.len() != 64
                    || !hex
                        .chars()
                        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
                {
                    return Err(format!(
                        "digest '{d}' must be sha256:<64 lowercase hex digits>"
                    ));
                }
                (rest, Some(d.to_string()))
            }
            None => (s, None),
        };
        // The tag is after the last ':' that follows the last '/' (a registry
        // host may carry a port: registry:5000/x:tag).
        let slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[slash..].rfind(':') {
            Some(i) => (&rest[..slash + i], &rest[slash + i + 1..]),
            None => {
                return Err(format!(
                    "'{rest}' has no tag; name one (e.g. {rest}:12.4.1-base-ubuntu22.04)"
                ))
            }
        };
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/:".contains(c));
        if !name_ok {
            return Err(format!(
                "'{name}' is not a valid image name (lowercase letters, digits, . _ - /)"
            ));
        }
        // Docker's tag grammar: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
        let tag_ok = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
            && !tag.starts_with(['.', '-']);
        if !tag_ok {
            return Err(format!("'{tag}' is not a valid tag"));
        }
        Ok(ImageRef {
            name: name.to_string(),
            tag: tag.to_string(),
            digest,
        })
    }
}

impl std::fmt::Display for ImageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name, self.tag)?;
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// The torch wheel of a spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TorchSpec {
    /// torch version (`2.7.0`).
    pub version: String,
    /// Wheel CUDA variant (`cu126`).
    pub variant: String,
    /// The pip index that serves that wheel.
    pub index: String,
}

/// One pinned pip package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PipPin {
    /// Distribution name as written (`diffusers`, `uvicorn[standard]`).
    pub name: String,
    /// The pinned version (`0.33.1`).
    pub version: String,
}

impl PipPin {
    /// The requirement string for pip (`diffusers==0.33.1`).
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.name, self.version)
    }
    /// The name without extras, normalised per PEP 503 ([`normalize_name`]).
    pub fn normalized_name(&self) -> String {
        normalize_name(self.name.split('[').next().unwrap_or(&self.name))
    }
}

/// Parses `name==version`; `Err` explains what is wrong.
pub(super) fn parse_pin(s: &str) -> Result<PipPin, String> {
    let ops = ["===", "==", ">=", "<=", "~=", "!=", ">", "<"];
    let cut = ops
        .iter()
        .filter_map(|op| s.find(op).map(|i| (i, *op)))
        .min_by_key(|(i, op)| (*i, std::cmp::Reverse(op.len())));
    let name_part = cut.map_or(s, |(i, _)| &s[..i]).trim();
    let name_re_ok = {
        let (base, extras) = match name_part.split_once('[') {
            Some((b, e)) => (b, Some(e)),
            None => (name_part, None),
        };
        let base_ok = !base.is_empty()
            && base
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric())
            && base
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric())
            && base
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        let extras_ok = extras.map_or(true, |e| {
            e.ends_with(']')
                && e[..e.len() - 1]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ",._-".contains(c))
        });
        base_ok && extras_ok
    };
    if !name_re_ok {
        return Err(format!(
            "'{s}' is not a package requirement (name==version)"
        ));
    }
    match cut {
        Some((i, "==")) => {
            let version = s[i + 2..].trim();
            let version_ok = !version.is_empty()
                && !version.contains('*')
                && version
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".+!_-".contains(c));
            if !version_ok {
                return Err(format!(
                    "'{s}' is not pinned to one version; use an exact version (e.g. {name_part}==1.2.3)"
                ));
            }
            Ok(PipPin {
                name: name_part.to_string(),
                version: version.to_string(),
            })
        }
        Some((_, op)) => Err(format!(
            "'{s}' is not pinned ({op}); use == with one exact version (e.g. {name_part}==1.2.3)"
        )),
        None => Err(format!(
            "'{s}' is not pinned; use == with one exact version (e.g. {name_part}==1.2.3)"
        )),
    }
}

/// PEP 503 normalised project name: runs of `-`, `_`, `.` become one `-`,
/// lowercase (<https://peps.python.org/pep-0503/#normalized-names>).
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The non-root user of the image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserSpec {
    /// Login name (`dev`). Its UID/GID come from `--uid`/`--gid` at build time.
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_refs() {
        let r = ImageRef::parse("nvidia/cuda:12.4.1-base-ubuntu22.04").unwrap();
        assert_eq!(
            (r.name.as_str(), r.tag.as_str()),
            ("nvidia/cuda", "12.4.1-base-ubuntu22.04")
        );
        let d = format!("sha256:{}", "a".repeat(64));
        let r = ImageRef::parse(&format!("registry:5000/x/y:1@{d}")).unwrap();
        assert_eq!(r.name, "registry:5000/x/y");
        assert_eq!(r.digest.as_deref(), Some(d.as_str()));
        assert!(ImageRef::parse("nvidia/cuda").is_err());
        assert!(ImageRef::parse("nvidia/cuda:1@sha256:abc").is_err());
        assert!(ImageRef::parse("Nvidia/cuda:1").is_err());
    }
}
