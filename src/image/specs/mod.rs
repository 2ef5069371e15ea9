//! Image specs: `images/*.yaml` (bundled, embedded in the binary) or a user's
//! spec file → a validated [`ImageSpec`], plus the compatibility table
//! ([`compat`]) that validation and the image labels draw their pins from.
//!
//! This module reads spec files and nothing else (their pip lock files are
//! [`crate::image::lock`]'s, the bundled ones are embedded here); it renders nothing (see
//! [`crate::image::render`]) and never talks to Docker. Every problem in a spec is
//! reported at once as a [`SpecError`], one `field.path: message` line each;
//! its messages name no command-line flag (`commands/` adds those and the
//! hints).
//!
//! Part: the build wing (`docs/architecture.md`).
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

pub mod compat;
mod error;
pub mod limits;
pub mod schema;
pub mod url;
pub mod validate;
mod walker;

pub use error::{problems_message, SpecError};
pub use schema::{normalize_name, ImageRef, ImageSpec, LockSetting, PipPin, TorchSpec, UserSpec};
pub use validate::{Mention, Problem};

/// The profile `imgctl build` uses without `--cuda`/`--spec`.
pub const DEFAULT_CUDA: &str = "12.4";

/// The bundled specs: (profile name, CUDA `major.minor` accepted by `--cuda`, YAML).
const BUNDLED: &[(&str, &str, &str)] = &[
    ("cu124", "12.4", include_str!("../../../images/cu124.yaml")),
    ("cu126", "12.6", include_str!("../../../images/cu126.yaml")),
    ("cu128", "12.8", include_str!("../../../images/cu128.yaml")),
];

/// The pip lock files of the bundled specs (`imgctl lock --cuda X` writes them
/// in the source tree), embedded like the specs: (profile name, path in the
/// repository, lock text). A profile missing here has no lock (cu128: its
/// torch index, download.pytorch.org, was unreachable where the others were
/// locked); a test checks that every `images/*.lock` is listed.
const BUNDLED_LOCKS: &[(&str, &str, &str)] = &[
    (
        "cu124",
        "images/cu124.lock",
        include_str!("../../../images/cu124.lock"),
    ),
    (
        "cu126",
        "images/cu126.lock",
        include_str!("../../../images/cu126.lock"),
    ),
];

/// Where a spec comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecSource {
    /// A bundled profile chosen by CUDA version (`12.4`, also `12.4.1` or `cu124`).
    Bundled {
        /// The `--cuda` value.
        cuda: String,
    },
    /// A user's spec file (`--spec FILE`).
    File(PathBuf),
}

impl SpecSource {
    /// `--spec` wins; else `--cuda`, defaulting to [`DEFAULT_CUDA`].
    pub fn from_args(cuda: Option<&str>, spec: Option<&Path>) -> SpecSource {
        match spec {
            Some(p) => SpecSource::File(p.to_path_buf()),
            None => SpecSource::Bundled {
                cuda: cuda.unwrap_or(DEFAULT_CUDA).to_string(),
            },
        }
    }
}

/// A validated spec with where it came from.
#[derive(Debug, Clone)]
pub struct LoadedSpec {
    /// The spec.
    pub spec: ImageSpec,
    /// Profile name (`cu124`), the spec's `name`.
    pub name: String,
    /// sha256 (hex) of the spec text, recorded in the image labels.
    pub sha256: String,
    /// The folder of a user spec (its `template` is relative to it); `None` when bundled.
    pub dir: Option<PathBuf>,
    /// Where the spec was read, for messages (`images/cu124.yaml` when bundled).
    pub origin: String,
    /// The spec file (`--spec`); `None` when bundled.
    pub file: Option<PathBuf>,
}

/// The embedded copies of the bundled specs: (profile name, YAML text).
pub fn bundled() -> Vec<(&'static str, &'static str)> {
    BUNDLED.iter().map(|(n, _, y)| (*n, *y)).collect()
}

/// The embedded lock of a bundled profile (`cu124`), when it has one.
pub fn bundled_lock(name: &str) -> Option<&'static str> {
    BUNDLED_LOCKS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, _, text)| *text)
}

/// The embedded locks of the bundled profiles: (path in the repository, text).
pub fn bundled_locks() -> Vec<(&'static str, &'static str)> {
    BUNDLED_LOCKS.iter().map(|(_, p, t)| (*p, *t)).collect()
}

/// The CUDA `major.minor` of every bundled profile, in order (`12.4`, …):
/// what `--cuda` accepts.
pub fn bundled_cudas() -> Vec<&'static str> {
    BUNDLED.iter().map(|(_, mm, _)| *mm).collect()
}

/// The CUDA `major.minor` that selects a bundled profile (`cu124` → `12.4`).
pub fn bundled_cuda(name: &str) -> Option<&'static str> {
    BUNDLED
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, mm, _)| *mm)
}

/// The profile name for a `--cuda` value (`12.4`, `12.4.1`, `cu124` → `cu124`).
pub fn profile_for_cuda(cuda: &str) -> Option<&'static str> {
    let c = cuda.trim();
    BUNDLED
        .iter()
        .find(|(name, mm, _)| {
            c == *name || c == *mm || (c.starts_with(mm) && c[mm.len()..].starts_with('.'))
        })
        .map(|(name, _, _)| *name)
}

/// The largest spec file `load` reads (256 KiB); the bundled specs are under 4 KiB.
pub const MAX_SPEC_BYTES: u64 = crate::yaml::MAX_YAML_BYTES;

/// Reads a user's spec file, refusing one over [`MAX_SPEC_BYTES`] (at most
/// that many bytes are read, so `/dev/zero` or a growing file costs nothing)
/// and one that is not UTF-8 text.
fn read_spec_file(path: &Path) -> Result<String, SpecError> {
    let shown = crate::error::printable(&path.display().to_string()).into_owned();
    let cannot = |error: std::io::Error| SpecError::Unreadable {
        shown: shown.clone(),
        error,
    };
    if path.is_dir() {
        return Err(SpecError::IsDirectory { shown });
    }
    // A regular file only (a FIFO would block the read forever).
    let bytes = match crate::sys::fs::read_regular(path, MAX_SPEC_BYTES) {
        Ok(bytes) => bytes,
        Err(e) if crate::sys::fs::is_too_large(&e) => {
            return Err(SpecError::TooLarge {
                shown,
                max_kib: MAX_SPEC_BYTES / 1024,
            })
        }
        Err(e) => return Err(cannot(e)),
    };
    String::from_utf8(bytes).map_err(|e| SpecError::NotUtf8 {
        shown,
        offset: e.utf8_error().valid_up_to(),
    })
}

/// Loads and validates a spec. Bad input is a [`SpecError`] (for
/// `commands/`, a usage error, exit 2) listing every problem.
pub fn load(src: &SpecSource) -> anyhow::Result<LoadedSpec> {
    let (text, origin, dir, file) = match src {
        SpecSource::Bundled { cuda } => {
            let name = profile_for_cuda(cuda).ok_or_else(|| {
                let valid: Vec<&str> = BUNDLED.iter().map(|(_, mm, _)| *mm).collect();
                SpecError::UnknownCuda {
                    cuda: cuda.clone(),
                    valid: valid.join(", "),
                }
            })?;
            let (_, _, yaml) = BUNDLED
                .iter()
                .find(|(n, _, _)| *n == name)
                .copied()
                .unwrap_or(BUNDLED[0]);
            (yaml.to_string(), format!("images/{name}.yaml"), None, None)
        }
        SpecSource::File(path) => {
            let text = read_spec_file(path)?;
            let dir = path
                .parent()
                .map(|p| {
                    if p.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        p
                    }
                })
                .unwrap_or(Path::new("."))
                .to_path_buf();
            (
                text,
                path.display().to_string(),
                Some(dir),
                Some(path.clone()),
            )
        }
    };
    if is_empty_yaml(&text) {
        return Err(SpecError::Empty {
            origin: crate::error::printable(&origin).into_owned(),
        }
        .into());
    }
    let spec = validate::validate(&text, dir.as_deref())
        .map_err(|problems| problems_error(&origin, &problems))?;
    Ok(LoadedSpec {
        name: spec.name.clone(),
        sha256: sha256_hex(text.as_bytes()),
        spec,
        dir,
        origin,
        file,
    })
}

/// Whether YAML `text` holds no document content: only blank lines, comments
/// and document markers.
fn is_empty_yaml(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
    })
}

/// The error for a spec with problems: `spec X has N problems` and one
/// indented line per problem.
pub fn problems_error(origin: &str, problems: &[Problem]) -> SpecError {
    SpecError::Problems {
        origin: origin.to_string(),
        problems: problems.to_vec(),
    }
}

/// Lowercase hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
