//! Signing keys: a pair made by [`generate`] (ECDSA P-256 or Ed25519, the
//! private key as PKCS#8 PEM, optionally encrypted, the public key as SPKI
//! PEM), read back by [`PrivateKey::read`] and [`PublicKey::read`].
//!
//! The cryptography is RustCrypto's (`p256`, `ed25519-dalek`, `pkcs8`); this
//! file only chooses and names. No error and no `Debug` output carries key
//! bytes: [`PrivateKey`]'s `Debug` prints its kind and key id, and the
//! crates zeroize their secret scalars on drop.
use std::path::{Path, PathBuf};

use ed25519_dalek::Signer as _;
use p256::ecdsa::signature::Verifier as _;
use pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding};
use rand::RngCore as _;
use sha2::{Digest as _, Sha256};
use zeroize::Zeroizing;

use super::SignError;

/// The most bytes a key file may have (a PEM key is under 1 KiB): a FIFO,
/// a device or /dev/zero given as a key is refused at once (#50 M8).
const KEY_FILE_MAX: u64 = 1024 * 1024;

/// PBKDF2-HMAC-SHA256 iterations of an encrypted private key: OWASP's
/// Password Storage Cheat Sheet (2023) asks for 600,000. PBKDF2 rather than
/// `pkcs8`'s default scrypt (log N 17, 128 MiB), which OpenSSL 3 refuses to
/// decrypt with its default 32 MiB scrypt memory limit.
pub const PBKDF2_ITERATIONS: u32 = 600_000;

/// The PEM label of an encrypted PKCS#8 private key (RFC 7468 §11).
const ENCRYPTED_LABEL: &str = "ENCRYPTED PRIVATE KEY";

/// The two kinds of key imgctl signs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// ECDSA over NIST P-256 with SHA-256, signatures DER-encoded (cosign's
    /// default key type).
    EcdsaP256,
    /// Ed25519 (RFC 8032), 64-byte signatures.
    Ed25519,
}

impl KeyKind {
    /// Its name in reports and in `key generate`'s output.
    pub fn name(self) -> &'static str {
        match self {
            KeyKind::EcdsaP256 => "ecdsa-p256",
            KeyKind::Ed25519 => "ed25519",
        }
    }
}

/// The secret half, ready to sign.
pub struct PrivateKey {
    inner: Secret,
    public: PublicKey,
}

enum Secret {
    EcdsaP256(p256::ecdsa::SigningKey),
    Ed25519(ed25519_dalek::SigningKey),
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateKey")
            .field("kind", &self.public.kind())
            .field("key_id", &self.public.key_id())
            .finish_non_exhaustive()
    }
}

/// A public key that checks signatures.
#[derive(Debug, Clone)]
pub struct PublicKey {
    inner: Public,
    key_id: String,
}

#[derive(Debug, Clone)]
enum Public {
    EcdsaP256(p256::ecdsa::VerifyingKey),
    Ed25519(ed25519_dalek::VerifyingKey),
}

/// The files [`generate`] wrote.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The private key (mode 0600).
    pub private: PathBuf,
    /// The public key (SPKI PEM).
    pub public: PathBuf,
    /// The key id signatures carry: [`PublicKey::key_id`].
    pub key_id: String,
    /// Whether the private key is encrypted.
    pub encrypted: bool,
}

/// The private key file's name in `generate`'s folder.
pub const PRIVATE_FILE: &str = "imgctl.key";
/// The public key file's name in `generate`'s folder.
pub const PUBLIC_FILE: &str = "imgctl.pub";

/// Makes a key pair of `kind` in `dir` (made when missing): [`PRIVATE_FILE`]
/// (PKCS#8 PEM, mode 0600, encrypted with PBES2 PBKDF2-SHA256/AES-256-CBC
/// when `passphrase` is given) and [`PUBLIC_FILE`] (SPKI PEM). An existing
/// key file is never overwritten.
pub fn generate(
    dir: &Path,
    kind: KeyKind,
    passphrase: Option<&[u8]>,
) -> Result<Generated, SignError> {
    let private = dir.join(PRIVATE_FILE);
    let public = dir.join(PUBLIC_FILE);
    // `symlink_metadata`: a link under either name, dangling or not, is
    // taken (#50: a planted `imgctl.pub` link left half a pair).
    for p in [&private, &public] {
        if std::fs::symlink_metadata(p).is_ok() {
            return Err(SignError::Exists { path: p.clone() });
        }
    }
    std::fs::create_dir_all(dir).map_err(|source| SignError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let key = match kind {
        KeyKind::EcdsaP256 => PrivateKey::from_secret(Secret::EcdsaP256(
            p256::ecdsa::SigningKey::random(&mut rand::rngs::OsRng),
        )),
        KeyKind::Ed25519 => PrivateKey::from_secret(Secret::Ed25519(
            ed25519_dalek::SigningKey::generate(&mut rand::rngs::OsRng),
        )),
    };
    let der = match &key.inner {
        Secret::EcdsaP256(k) => k.to_pkcs8_der(),
        // PKCS#8 v1 (RFC 8410 §7, no public key inside): OpenSSL 3.0 does
        // not read the v2 form `SigningKey::to_pkcs8_der` writes.
        Secret::Ed25519(k) => ed25519_dalek::pkcs8::KeypairBytes {
            secret_key: k.to_bytes(),
            public_key: None,
        }
        .to_pkcs8_der(),
    }
    .map_err(|_| SignError::Encode)?;
    let pem: Zeroizing<String> = match passphrase {
        None => der
            .to_pem("PRIVATE KEY", LineEnding::LF)
            .map_err(|_| SignError::Encode)?,
        Some(pass) => {
            let mut salt = [0u8; 16];
            let mut iv = [0u8; 16];
            rand::rngs::OsRng.fill_bytes(&mut salt);
            rand::rngs::OsRng.fill_bytes(&mut iv);
            let params = pkcs8::pkcs5::pbes2::Parameters::pbkdf2_sha256_aes256cbc(
                PBKDF2_ITERATIONS,
                &salt,
                &iv,
            )
            .map_err(|_| SignError::Encode)?;
            let info =
                pkcs8::PrivateKeyInfo::try_from(der.as_bytes()).map_err(|_| SignError::Encode)?;
            info.encrypt_with_params(params, pass)
                .map_err(|_| SignError::Encode)?
                .to_pem(ENCRYPTED_LABEL, LineEnding::LF)
                .map_err(|_| SignError::Encode)?
        }
    };
    let public_pem = key.public.to_pem()?;
    write_new(&private, pem.as_bytes(), 0o600)?;
    // Both halves or neither: a public half that cannot be written (a name
    // taken since the check above) takes the new private half with it.
    if let Err(e) = write_new(&public, public_pem.as_bytes(), 0o644) {
        let _ = std::fs::remove_file(&private);
        return Err(e);
    }
    Ok(Generated {
        private,
        public,
        key_id: key.public.key_id.clone(),
        encrypted: passphrase.is_some(),
    })
}

/// Creates `path` with `mode` (never an existing file: `create_new`), then
/// writes `bytes`. The mode is set at creation, so the secret is never
/// readable by others, not even for a moment.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), SignError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let wrap = |source| SignError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(wrap)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(e) = written {
        // No half-written key is left under the name.
        let _ = std::fs::remove_file(path);
        return Err(wrap(e));
    }
    Ok(())
}

/// The mode of the private key file `path` when its group or others may
/// read or write it (ssh refuses such a key as "UNPROTECTED"; imgctl says
/// so and goes on), else `None`.
pub fn readable_by_others(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then_some(mode)
}

impl PrivateKey {
    fn from_secret(inner: Secret) -> Self {
        let public = match &inner {
            Secret::EcdsaP256(k) => PublicKey::from_inner(Public::EcdsaP256(*k.verifying_key())),
            Secret::Ed25519(k) => PublicKey::from_inner(Public::Ed25519(k.verifying_key())),
        };
        PrivateKey { inner, public }
    }

    /// Reads a PKCS#8 PEM private key of either kind; an encrypted one needs
    /// `passphrase`.
    pub fn read(path: &Path, passphrase: Option<&[u8]>) -> Result<Self, SignError> {
        let text = Zeroizing::new(
            crate::sys::fs::read_regular_text(path, KEY_FILE_MAX).map_err(|source| {
                SignError::Read {
                    path: path.to_path_buf(),
                    source,
                }
            })?,
        );
        let not_a_key = || SignError::NotAPrivateKey {
            path: path.to_path_buf(),
        };
        let (label, doc) = pkcs8::SecretDocument::from_pem(&text).map_err(|_| not_a_key())?;
        let der = if label == ENCRYPTED_LABEL {
            let Some(pass) = passphrase else {
                return Err(SignError::NeedsPassphrase {
                    path: path.to_path_buf(),
                });
            };
            pkcs8::EncryptedPrivateKeyInfo::try_from(doc.as_bytes())
                .map_err(|_| not_a_key())?
                .decrypt(pass)
                .map_err(|_| SignError::WrongPassphrase {
                    path: path.to_path_buf(),
                })?
        } else if label == "PRIVATE KEY" {
            doc
        } else {
            return Err(not_a_key());
        };
        if let Ok(k) = p256::ecdsa::SigningKey::from_pkcs8_der(der.as_bytes()) {
            return Ok(PrivateKey::from_secret(Secret::EcdsaP256(k)));
        }
        if let Ok(k) = ed25519_dalek::SigningKey::from_pkcs8_der(der.as_bytes()) {
            return Ok(PrivateKey::from_secret(Secret::Ed25519(k)));
        }
        Err(SignError::UnsupportedKey {
            path: path.to_path_buf(),
        })
    }

    /// Its public half.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// Signs `message`: ECDSA P-256 with SHA-256 (RFC 6979 nonces), the
    /// signature DER-encoded as OpenSSL and cosign write it; or Ed25519.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        match &self.inner {
            Secret::EcdsaP256(k) => {
                let sig: p256::ecdsa::Signature = k.sign(message);
                sig.to_der().as_bytes().to_vec()
            }
            Secret::Ed25519(k) => k.sign(message).to_bytes().to_vec(),
        }
    }
}

impl PublicKey {
    fn from_inner(inner: Public) -> Self {
        let der = match &inner {
            Public::EcdsaP256(k) => k.to_public_key_der(),
            Public::Ed25519(k) => k.to_public_key_der(),
        }
        .map(|d| d.as_bytes().to_vec())
        .unwrap_or_default();
        PublicKey {
            key_id: hex(&Sha256::digest(&der)),
            inner,
        }
    }

    /// Reads an SPKI PEM public key (`BEGIN PUBLIC KEY`) of either kind.
    pub fn read(path: &Path) -> Result<Self, SignError> {
        let text = crate::sys::fs::read_regular_text(path, KEY_FILE_MAX).map_err(|source| {
            SignError::Read {
                path: path.to_path_buf(),
                source,
            }
        })?;
        Self::from_pem(&text).ok_or_else(|| SignError::NotAPublicKey {
            path: path.to_path_buf(),
        })
    }

    /// An SPKI PEM public key of either kind.
    pub fn from_pem(text: &str) -> Option<Self> {
        if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_pem(text) {
            return Some(Self::from_inner(Public::EcdsaP256(k)));
        }
        ed25519_dalek::VerifyingKey::from_public_key_pem(text)
            .ok()
            .map(|k| Self::from_inner(Public::Ed25519(k)))
    }

    /// Its kind.
    pub fn kind(&self) -> KeyKind {
        match self.inner {
            Public::EcdsaP256(_) => KeyKind::EcdsaP256,
            Public::Ed25519(_) => KeyKind::Ed25519,
        }
    }

    /// The key id: the SHA-256 of its SPKI DER encoding, hex (what a DSSE
    /// signature's `keyid` and a bundle's public-key hint carry).
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// SPKI PEM.
    pub fn to_pem(&self) -> Result<String, SignError> {
        match &self.inner {
            Public::EcdsaP256(k) => k.to_public_key_pem(LineEnding::LF),
            Public::Ed25519(k) => k.to_public_key_pem(LineEnding::LF),
        }
        .map_err(|_| SignError::Encode)
    }

    /// Whether `signature` is this key's over `message`. ECDSA signatures
    /// are DER; Ed25519's are checked strictly (no malleable encodings).
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        match &self.inner {
            Public::EcdsaP256(k) => p256::ecdsa::Signature::from_der(signature)
                .is_ok_and(|s| k.verify(message, &s).is_ok()),
            Public::Ed25519(k) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|s| k.verify_strict(message, &s).is_ok()),
        }
    }
}

/// Lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_or_a_fifo_given_as_a_key_is_refused_at_once() {
        // #50 M8: /dev/zero grew without bound, a FIFO blocked forever.
        let e = PublicKey::read(Path::new("/dev/zero")).unwrap_err();
        assert!(
            e.to_string().contains("not a regular file")
                || format!("{e:?}").contains("not a regular file"),
            "{e:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("key.pem");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let started = std::time::Instant::now();
            assert!(PrivateKey::read(&fifo, None).is_err());
            assert!(started.elapsed() < std::time::Duration::from_secs(2));
        }
    }

    #[test]
    fn a_planted_link_under_either_name_leaves_no_half_pair() {
        // #50 low: a dangling `imgctl.pub` link passed `exists()`, the
        // private half was written, and the public half then failed.
        for planted in [PUBLIC_FILE, PRIVATE_FILE] {
            let dir = tempfile::tempdir().unwrap();
            let target = dir.path().join("elsewhere");
            std::os::unix::fs::symlink(&target, dir.path().join(planted)).unwrap();
            let e = generate(dir.path(), KeyKind::Ed25519, None).unwrap_err();
            assert!(
                matches!(&e, SignError::Exists { path } if path.ends_with(planted)),
                "{planted}: {e:?}"
            );
            let other = if planted == PUBLIC_FILE {
                PRIVATE_FILE
            } else {
                PUBLIC_FILE
            };
            assert!(
                std::fs::symlink_metadata(dir.path().join(other)).is_err(),
                "{planted}: the other half was written"
            );
            assert!(!target.exists(), "{planted}: written through the link");
        }
    }

    #[test]
    fn a_private_key_others_can_read_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let made = generate(dir.path(), KeyKind::Ed25519, None).unwrap();
        assert_eq!(readable_by_others(&made.private), None);
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&made.private, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(readable_by_others(&made.private), Some(0o644));
        std::fs::set_permissions(&made.private, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(readable_by_others(&made.private), Some(0o640));
    }
}
