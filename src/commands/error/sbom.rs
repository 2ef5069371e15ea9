//! What an image whose contents cannot be read ([`SbomError`]) means for the
//! user of `imgctl sbom`: a failure (exit 1) and what to look at.

use super::advice::Advice;
use crate::image::sbom::SbomError;

/// Advice for [`SbomError`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    err.downcast_ref::<SbomError>().map(|e| match e {
        SbomError::MissingSection { .. } => Advice::failure(
            "the image needs a POSIX sh at /bin/sh (every image imgctl builds has one); look at what it printed above".to_string(),
        ),
        SbomError::Lock(_) => Advice::failure(
            "the lock in the image was changed after the build; rebuild the image with `imgctl build`".to_string(),
        ),
    })
}
