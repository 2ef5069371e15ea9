//! `imgctl key generate DIR`: a signing key pair for `build --sign-key` and
//! `verify-image --key`. The passphrase comes from `IMGCTL_KEY_PASSPHRASE`
//! only (a flag's value shows in `ps` and shell history) and is never
//! printed; the output names the files and the key id, nothing secret.
use crate::cli::KeyGenerateArgs;
use crate::commands::error::CliError;
use crate::env_vars::IMGCTL_KEY_PASSPHRASE;
use crate::error::ExitStatus;
use crate::image::sign::keys::{self, KeyKind};
use crate::output::printer;

/// The passphrase from [`IMGCTL_KEY_PASSPHRASE`], when set; set but empty,
/// or not UTF-8, is a usage error (an empty passphrase encrypts nothing).
pub fn passphrase() -> anyhow::Result<Option<zeroize::Zeroizing<Vec<u8>>>> {
    match std::env::var_os(IMGCTL_KEY_PASSPHRASE) {
        None => Ok(None),
        Some(v) if v.is_empty() => Err(CliError::usage(format!(
            "{IMGCTL_KEY_PASSPHRASE} is set but empty"
        ))
        .with_hint(format!(
            "set {IMGCTL_KEY_PASSPHRASE} to the passphrase, or unset it for a key without one"
        ))
        .into()),
        Some(v) => {
            use std::os::unix::ffi::OsStringExt as _;
            Ok(Some(zeroize::Zeroizing::new(v.into_vec())))
        }
    }
}

/// Runs `imgctl key generate`.
pub fn generate(args: KeyGenerateArgs) -> anyhow::Result<ExitStatus> {
    let kind = match args.key_type.as_str() {
        "ed25519" => KeyKind::Ed25519,
        _ => KeyKind::EcdsaP256,
    };
    let pass = passphrase()?;
    let made = keys::generate(&args.dir, kind, pass.as_deref().map(Vec::as_slice))?;
    let p = printer();
    p.info(format!(
        "{} key pair, key id {}",
        kind.name(),
        &made.key_id[..16]
    ));
    p.info(format!(
        "private key: {} (mode 0600{}); keep it secret",
        made.private.display(),
        if made.encrypted {
            format!(", encrypted with {IMGCTL_KEY_PASSPHRASE}")
        } else {
            String::new()
        }
    ));
    p.info(format!(
        "public key: {}; `imgctl verify-image --key {}` checks what `imgctl build --sign-key {}` signs",
        made.public.display(),
        made.public.display(),
        made.private.display()
    ));
    p.data(made.public.display().to_string());
    Ok(ExitStatus::Success)
}
