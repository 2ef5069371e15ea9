//! What verify's errors mean for the user of `imgctl verify`: their exit
//! status, the flag names in their lines, and the hints.

use super::advice::Advice;
use crate::verify::VerifyError;

/// Advice for [`VerifyError`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    err.downcast_ref::<VerifyError>().map(verify_error)
}

fn verify_error(e: &VerifyError) -> Advice {
    match e {
        VerifyError::ExpectGpus { value } => Advice::usage(
            "--expect-gpus 8 requires exactly 8 GPUs; `any` at least one; 0 a CPU-only host"
                .to_string(),
        )
        .with_message(format!(
            "--expect-gpus takes a number or `any`, not `{value}`"
        )),
        VerifyError::NoImgctlInImage { .. } => Advice::failure(
            "use an image built by `imgctl build` (it installs /usr/local/bin/imgctl), or mount one with --mount /path/to/imgctl:/usr/local/bin/imgctl:ro".to_string(),
        ),
    }
}
