//! Where a spec's lock lives ([`LockLocation`]: embedded for a bundled
//! profile, a file next to a user's spec) and what state it is in
//! ([`LockState`]: disabled, missing, invalid, stale or fresh). It reads the
//! lock; it never writes one and says nothing to the user.
use std::path::PathBuf;

use super::{LockFile, LockFileError, LockInputs};
use crate::image::specs::{LoadedSpec, LockSetting};

/// The largest lock file read (4 MiB; a bundled lock with every hash is
/// about 230 KiB).
pub const MAX_LOCK_BYTES: u64 = 4 << 20;

/// Where a spec's lock lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockLocation {
    /// A bundled profile's lock, embedded in imgctl (written to
    /// `images/<name>.lock` of imgctl's source tree).
    Bundled {
        /// Profile name (`cu124`).
        name: String,
    },
    /// A file next to a user's spec.
    File(PathBuf),
}

impl LockLocation {
    /// The lock of `spec`, `None` when the spec says `lock: false`.
    pub fn of(spec: &LoadedSpec) -> Option<LockLocation> {
        match (&spec.spec.lock, &spec.file, &spec.dir) {
            (LockSetting::Disabled, _, _) => None,
            (LockSetting::Path(p), _, Some(dir)) => Some(LockLocation::File(dir.join(p))),
            (LockSetting::Default, Some(file), _) => {
                Some(LockLocation::File(file.with_extension("lock")))
            }
            // Bundled (validation rejects `lock: PATH` there).
            _ => Some(LockLocation::Bundled {
                name: spec.name.clone(),
            }),
        }
    }

    /// How to name it in messages (`images/cu124.lock`, or the path).
    pub fn display(&self) -> String {
        match self {
            LockLocation::Bundled { name } => format!("images/{name}.lock"),
            LockLocation::File(p) => p.display().to_string(),
        }
    }

    /// The lock's text; `Ok(None)` when there is none.
    pub fn read(&self) -> Result<Option<String>, LockFileError> {
        match self {
            LockLocation::Bundled { name } => {
                Ok(crate::image::specs::bundled_lock(name).map(str::to_string))
            }
            LockLocation::File(p) => match crate::sys::fs::read_regular_text(p, MAX_LOCK_BYTES) {
                Ok(t) => Ok(Some(t)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(LockFileError::Read {
                    path: p.display().to_string(),
                    error: e.to_string(),
                }),
            },
        }
    }
}

/// The state of a spec's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    /// The spec says `lock: false`.
    Disabled,
    /// No lock file yet.
    Missing {
        /// Where it would be.
        path: String,
        /// Whether the spec names it (`lock: PATH`) rather than the default.
        explicit: bool,
    },
    /// A file that is not a lock (or cannot be read).
    Invalid {
        /// Its path.
        path: String,
        /// What is wrong.
        error: LockFileError,
    },
    /// A lock resolved from other inputs than the spec's.
    Stale {
        /// Its path.
        path: String,
        /// What changed (`pin diffusers 0.33.1 → 0.34.0`).
        changes: Vec<String>,
    },
    /// A lock of the spec's current inputs.
    Fresh {
        /// Its path.
        path: String,
        /// The parsed lock.
        lock: LockFile,
        /// The file's exact text (COPYed into the image).
        text: String,
    },
}

impl LockState {
    /// Whether the lock is fresh.
    pub fn is_fresh(&self) -> bool {
        matches!(self, LockState::Fresh { .. })
    }
    /// A short word for JSON output: disabled, missing, invalid, stale, fresh.
    pub fn word(&self) -> &'static str {
        match self {
            LockState::Disabled => "disabled",
            LockState::Missing { .. } => "missing",
            LockState::Invalid { .. } => "invalid",
            LockState::Stale { .. } => "stale",
            LockState::Fresh { .. } => "fresh",
        }
    }
}

/// The state of `spec`'s lock: read it, parse it, compare its inputs with the spec's.
pub fn state(spec: &LoadedSpec) -> LockState {
    let Some(location) = LockLocation::of(spec) else {
        return LockState::Disabled;
    };
    let path = location.display();
    let text = match location.read() {
        Ok(Some(t)) => t,
        Ok(None) => {
            return LockState::Missing {
                path,
                explicit: matches!(spec.spec.lock, LockSetting::Path(_)),
            }
        }
        Err(error) => return LockState::Invalid { path, error },
    };
    state_of_text(&path, text, &LockInputs::of(&spec.spec))
}

/// The state of lock `text` (read from `path`) against the inputs `current`.
pub fn state_of_text(path: &str, text: String, current: &LockInputs) -> LockState {
    let lock = match LockFile::parse(&text) {
        Ok(l) => l,
        Err(error) => {
            return LockState::Invalid {
                path: path.to_string(),
                error,
            }
        }
    };
    let changes = lock.changes(current);
    if changes.is_empty() {
        LockState::Fresh {
            path: path.to_string(),
            lock,
            text,
        }
    } else {
        LockState::Stale {
            path: path.to_string(),
            changes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_locks_are_fresh() {
        for (name, _) in crate::image::specs::bundled() {
            let cuda = crate::image::specs::bundled_cuda(name).unwrap();
            let spec = crate::image::specs::load(&crate::image::specs::SpecSource::Bundled {
                cuda: cuda.into(),
            })
            .unwrap();
            match state(&spec) {
                LockState::Fresh { lock, .. } => {
                    assert!(lock.packages.len() > 100, "{name}: {}", lock.packages.len())
                }
                // cu128's torch index is unreachable where the locks are made:
                // its spec says `lock: false`; every other profile is locked.
                LockState::Disabled if name == "cu128" => {}
                other => panic!("{name}: {other:?}; run `imgctl lock --cuda {cuda}`"),
            }
        }
    }
}
