//! [`VerifyError`]: why verify could not produce a report. A check that
//! fails is not an error (it is a FAIL or ERROR result in the report); these
//! are the problems that stop the run. The command layer
//! (`commands/error/verify.rs`) gives each its exit status, flag names and
//! hint; nothing here names a flag or an imgctl command.

/// Why verify could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The GPU expectation is neither `any` nor a count.
    #[error("the GPU expectation takes a number or `any`, not `{value}`")]
    ExpectGpus {
        /// The text given.
        value: String,
    },
    /// The image has no `imgctl` for the container to run.
    #[error("the image {image} has no imgctl on its PATH: {error}")]
    NoImgctlInImage {
        /// The image.
        image: String,
        /// The engine's error (its first line, as the engine said it).
        error: String,
    },
}
