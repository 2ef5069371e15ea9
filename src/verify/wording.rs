//! [`Wording`]: the command-line words that verify's check results quote.
//!
//! A check's hint is report data (the table, `--json`, JUnit, and what the
//! host reads back from a container), and some hints tell the user what to
//! type: a flag of imgctl, a command of imgctl, Docker or the NVIDIA
//! Container Toolkit. Verify does not know those words; the command layer
//! (`commands/verify.rs`) hands them in through [`Options`] and the checks
//! format their texts with them. A leaf: it imports nothing.
//!
//! [`Options`]: super::context::Options

/// The command-line words quoted in check results, filled in by the command
/// layer. Plain `&'static str`s, so the command layer keeps them in a `const`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wording {
    /// The flag that says how many GPUs must be present.
    pub expect_gpus: &'static str,
    /// The flag that sets the deadline of each check.
    pub check_timeout: &'static str,
    /// The flag that gives the container GPUs.
    pub gpus: &'static str,
    /// The flag that bind-mounts a host path into the container.
    pub mount: &'static str,
    /// The flag that runs verify inside a container of an image.
    pub image: &'static str,
    /// The command that runs verify.
    pub verify: &'static str,
    /// The command that builds an image.
    pub build: &'static str,
    /// What shows every column of the table in full.
    pub full_view: &'static str,
    /// Docker's command that starts a container with GPUs (followed by `all`).
    pub docker_run_gpus: &'static str,
    /// Docker's command that runs a container once with another entrypoint
    /// (followed by the entrypoint, the image and its arguments).
    pub docker_run_entrypoint: &'static str,
    /// The NVIDIA Container Toolkit's command that registers its runtime
    /// with Docker.
    pub toolkit_configure: &'static str,
}

impl Wording {
    /// `text` with `{expect_gpus}` replaced by [`Wording::expect_gpus`]: the
    /// check descriptions are `&'static str`, written with that slot where
    /// they name the flag.
    pub fn fill(&self, text: &str) -> String {
        text.replace("{expect_gpus}", self.expect_gpus)
    }
}

/// The words verify's own tests hand in: each field's own name in angle
/// brackets, on purpose, not the command layer's flags. The core must not
/// spell a flag (an architecture rule), and its tests check where a word
/// goes, not how the user's command line spells it; `commands/verify.rs`'s
/// tests check the real words.
#[cfg(test)]
pub(crate) const TEST_WORDS: Wording = Wording {
    expect_gpus: "<expect_gpus>",
    check_timeout: "<check_timeout>",
    gpus: "<gpus>",
    mount: "<mount>",
    image: "<image>",
    verify: "<verify>",
    build: "<build>",
    full_view: "<full_view>",
    docker_run_gpus: "<docker_run_gpus>",
    docker_run_entrypoint: "<docker_run_entrypoint>",
    toolkit_configure: "<toolkit_configure>",
};
