//! Signed attestations: keys ([`keys`]), DSSE envelopes ([`dsse`]) and the
//! Sigstore bundle that carries one to a registry ([`bundle`]).
//!
//! What is signed is an in-toto statement (`application/vnd.in-toto+json`)
//! of [`crate::image::attest`]; what signs is a [`Signer`]. The one signer today is
//! a key the user holds ([`keys::PrivateKey`]). Keyless signing (a Fulcio
//! certificate, a Rekor entry) would be a second [`Signer`]: it signs the
//! same DSSE pre-authentication encoding and gives the bundle its
//! certificate chain and log entries through [`Signer::material`]; nothing
//! else here changes. It is not written: it needs Fulcio and Rekor, which
//! no test here can reach.
//!
//! No key material leaves this module: errors name files and key ids,
//! never bytes of a key, a passphrase or a signature's secret.
//!
//! Part: the build wing (`docs/architecture.md`).
use std::path::PathBuf;

pub mod bundle;
pub mod dsse;
pub mod keys;
pub mod policy;
pub mod rules;
pub mod time;

pub use keys::{KeyKind, PrivateKey, PublicKey};

/// What signs a DSSE envelope.
pub trait Signer {
    /// The key id its signatures carry.
    fn key_id(&self) -> &str;
    /// Signs `message` (DSSE's pre-authentication encoding).
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignError>;
    /// A Sigstore bundle's `verificationMaterial` for its signatures: a
    /// public-key hint for a key; a certificate chain and transparency log
    /// entries for a keyless signer.
    fn material(&self) -> serde_json::Value;
}

impl Signer for PrivateKey {
    fn key_id(&self) -> &str {
        self.public().key_id()
    }

    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, SignError> {
        Ok(PrivateKey::sign(self, message))
    }

    fn material(&self) -> serde_json::Value {
        serde_json::json!({"publicKey": {"hint": self.public().key_id()}})
    }
}

/// Why a key could not be made or read, or a signature does not hold.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// A key file could not be read.
    #[error("cannot read the key file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key file is already there.
    #[error("{} already exists; imgctl never overwrites a key", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// Not a PKCS#8 PEM private key.
    #[error("{} is not a PKCS#8 PEM private key (BEGIN PRIVATE KEY or BEGIN ENCRYPTED PRIVATE KEY)", path.display())]
    NotAPrivateKey {
        /// The file.
        path: PathBuf,
    },
    /// A PKCS#8 key of another algorithm.
    #[error("{} holds a key of another algorithm than ECDSA P-256 or Ed25519", path.display())]
    UnsupportedKey {
        /// The file.
        path: PathBuf,
    },
    /// Not an SPKI PEM public key of a supported kind.
    #[error("{} is not an SPKI PEM public key (BEGIN PUBLIC KEY) of ECDSA P-256 or Ed25519", path.display())]
    NotAPublicKey {
        /// The file.
        path: PathBuf,
    },
    /// An encrypted private key and no passphrase.
    #[error("{} is encrypted and no passphrase was given", path.display())]
    NeedsPassphrase {
        /// The file.
        path: PathBuf,
    },
    /// The passphrase does not decrypt the key.
    #[error("the passphrase does not decrypt {}", path.display())]
    WrongPassphrase {
        /// The file.
        path: PathBuf,
    },
    /// A key could not be encoded (a bug of the encoder, not of the input).
    #[error("a key could not be encoded")]
    Encode,
    /// Not a DSSE envelope.
    #[error("not a DSSE envelope: {why}")]
    MalformedEnvelope {
        /// What is wrong.
        why: String,
    },
    /// An envelope without signatures.
    #[error("the envelope has no signature")]
    Unsigned,
    /// Signed, but by none of the given keys.
    #[error("signed by an unknown key ({})", key_ids.join(", "))]
    UnknownKey {
        /// The key ids the signatures name.
        key_ids: Vec<String>,
    },
    /// A wrong signature under a known key id is one of two things, which
    /// no check can tell apart: the payload (or its type) was changed after
    /// signing, or another key signed and wrote this key's id (#50 low).
    #[error("the signature under key id {key_id} does not verify with that key: the payload was changed after signing, or another key signed it")]
    BadSignature {
        /// The key.
        key_id: String,
    },
}
