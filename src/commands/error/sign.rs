//! What a key that cannot be made or read, or a signature that does not
//! hold ([`SignError`]), means for the user: a bad key file or passphrase is
//! a usage error (exit 2); a refused signature is a failed check (exit 1).

use super::advice::Advice;
use crate::env_vars::IMGCTL_KEY_PASSPHRASE;
use crate::image::sign::SignError;

/// Advice for [`SignError`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    err.downcast_ref::<SignError>().map(|e| match e {
        SignError::Read { .. } => Advice::usage("pass a key file that exists and you can read".to_string()),
        SignError::Write { .. } => Advice::usage("pass a folder you can write".to_string()),
        SignError::Exists { .. } => Advice::usage(
            "pass another folder, or move the old pair away first (signatures made with it then no longer verify with a new one)".to_string(),
        ),
        SignError::NotAPrivateKey { .. } | SignError::UnsupportedKey { .. } => Advice::usage(
            "`imgctl key generate DIR` makes one; an OpenSSL key works too: `openssl genpkey -algorithm ed25519 -out key.pem`".to_string(),
        ),
        SignError::NotAPublicKey { .. } => Advice::usage(
            "pass the .pub file of `imgctl key generate`, or `openssl pkey -in KEY -pubout`'s output".to_string(),
        ),
        SignError::NeedsPassphrase { .. } | SignError::WrongPassphrase { .. } => Advice::usage(
            format!("set {IMGCTL_KEY_PASSPHRASE} to the passphrase the key was made with"),
        ),
        SignError::Encode => Advice::failure("this is a bug in imgctl; please report it".to_string()),
        SignError::MalformedEnvelope { .. } => Advice::failure(
            "the registry holds an attachment that is not an envelope imgctl or cosign wrote; look at it with `imgctl inspect REF --save DIR`".to_string(),
        ),
        SignError::Unsigned | SignError::UnknownKey { .. } | SignError::BadSignature { .. } => {
            Advice::failure(
                "pass the public key of whoever signed the image with --key; do not trust the statement otherwise".to_string(),
            )
        }
    })
}
