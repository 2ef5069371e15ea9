//! Pip lock files: every Python package an image installs, pinned and hashed,
//! so that rebuilding a spec next month installs the same transitive
//! versions, and only the files they were resolved to.
//!
//! This module owns the lock file format ([`LockFile`]: two steps of sorted
//! `name==version` entries with their sha256 hashes under a header that
//! records the inputs, in `file.rs`), the inputs and their digest
//! ([`LockInputs`], `inputs.rs`) on a [`Platform`] (`platform.rs`), where a
//! spec's lock lives and whether it is fresh ([`state()`], `state.rs`), the
//! resolution itself with uv ([`resolve`], running uv in [`uv`]), and their
//! errors (`error.rs`). It reads lock files and runs uv on the host; it
//! renders nothing (the Dockerfile side is [`crate::image::render`]), never talks to
//! Docker, and never names a flag or an imgctl command: what to tell the user
//! is `commands/`'s.
//!
//! Part: the build wing (`docs/architecture.md`).
use crate::image::specs::compat;

mod error;
mod file;
mod inputs;
mod platform;
pub mod resolve;
mod state;
pub mod uv;

pub use error::{LockError, LockFileError};
pub use file::{LockFile, Locked, Step};
pub use inputs::LockInputs;
pub use platform::{Platform, DISTRO_GLIBC, FALLBACK_GLIBC};
pub use state::{state, state_of_text, LockLocation, LockState};

/// Version of the lock file format (the `# lock-version:` header line): 2
/// since every package carries its hashes and its step (1: bare
/// `name==version` lines, resolved with pip).
pub const LOCK_VERSION: u32 = 2;

/// Where the image keeps its lock (the template COPYs it there, as the
/// record of what the image installed).
pub const IMAGE_LOCK_PATH: &str = "/etc/imgctl/pip.lock";

/// Where the image keeps the lock's torch step, the requirements (with
/// hashes) its torch layer installs.
pub const IMAGE_LOCK_TORCH_PATH: &str = "/etc/imgctl/pip-lock-torch.txt";

/// Where the image keeps the packages of the lock's pins step that the spec
/// names (with hashes): the last pip layer installs them.
pub const IMAGE_LOCK_PINS_PATH: &str = "/etc/imgctl/pip-lock-pins.txt";

/// Where the image keeps the rest of the lock's pins step, what the named
/// pins need (with hashes): the pip layer before the pins' own installs them.
pub const IMAGE_LOCK_DEPS_PATH: &str = "/etc/imgctl/pip-lock-deps.txt";

/// The architecture imgctl builds for (specs have no architecture field; every
/// bundled base is linux/amd64).
pub const ARCH: &str = "x86_64";

/// The index the image installs the non-torch pins from without
/// `--pip-index-url` (pip's default, PyPI).
pub const PIP_INDEX: &str = compat::PYPI_INDEX;

/// Spec texts and their inputs for the unit tests of this module's files.
#[cfg(test)]
pub(crate) mod testing {
    use super::LockInputs;

    /// A valid spec (cu126 torch from PyPI, Ubuntu 22.04) with `extra` YAML.
    pub(crate) fn spec_text(extra: &str) -> String {
        format!(
            "schema_version: 1\nname: t\nbase_image: nvidia/cuda:12.4.1-base-ubuntu22.04\ncuda: \"12.4.1\"\npython: \"3.10\"\ntorch:\n  version: \"2.7.0\"\n  variant: cu126\n  index: https://pypi.org/simple\n{extra}user:\n  name: dev\napt: []\nports: []\n"
        )
    }

    /// The lock inputs of spec `text`.
    pub(crate) fn inputs(text: &str) -> LockInputs {
        LockInputs::of(&crate::image::specs::validate::validate(text, None).unwrap())
    }
}
