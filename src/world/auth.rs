//! The rendezvous's optional shared secret: with `IMGCTL_RENDEZVOUS_TOKEN`
//! (or a file named by `IMGCTL_RENDEZVOUS_TOKEN_FILE`) set on every rank,
//! each side proves it holds the token, with HMAC-SHA256, on every message
//! that decides something: a rank's hello (over a fresh nonce of its own),
//! rank 0's answer (over that nonce, so it cannot be replayed to another
//! rank or job), and the fleet's verdict. What it protects: a process on
//! the network that is not one of the job's ranks can neither join as a
//! rank nor tell a rank "the fleet passed". What it does not: it encrypts
//! nothing (the reports and gradients cross the network in the clear), and
//! torchrun's own c10d store, which imgctl meets first under torchrun, is
//! just as open without it. This module owns the token and its MACs; the
//! wire format is [`super::rendezvous`]'s.
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::error::LaunchError;
use crate::env_vars as ev;

/// Bytes of a nonce.
pub const NONCE_BYTES: usize = 16;
/// Bytes of a MAC (HMAC-SHA256).
pub const MAC_BYTES: usize = 32;
/// The most bytes of a token file read (a token is a line of text).
const MAX_TOKEN_FILE: u64 = 4096;

/// A nonce: a rank's hello names it, rank 0's answers are bound to it.
pub type Nonce = [u8; NONCE_BYTES];

/// The shared secret. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// A token from its bytes (tests; the launch reads [`Token::from_env`]).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Token(bytes.into())
    }

    /// The token the environment gives through `get`: the value of
    /// `IMGCTL_RENDEZVOUS_TOKEN`, else the first line of the file
    /// `IMGCTL_RENDEZVOUS_TOKEN_FILE` names; `None` when neither is set.
    /// Both set, an unreadable file or an empty token: a usage error.
    pub fn from_env(get: &impl Fn(&str) -> Option<String>) -> Result<Option<Self>, LaunchError> {
        let bad = |why: String| LaunchError::BadToken { why };
        match (
            get(ev::IMGCTL_RENDEZVOUS_TOKEN),
            get(ev::IMGCTL_RENDEZVOUS_TOKEN_FILE),
        ) {
            (Some(_), Some(_)) => Err(bad(format!(
                "both {} and {} are set",
                ev::IMGCTL_RENDEZVOUS_TOKEN,
                ev::IMGCTL_RENDEZVOUS_TOKEN_FILE
            ))),
            // Set but blank (`export IMGCTL_RENDEZVOUS_TOKEN=$RDZV` with RDZV
            // unset): refused, never taken as "no token" (#50 M7).
            (Some(value), None) if value.trim().is_empty() => Err(bad(format!(
                "{} is set but empty, which would turn the rendezvous's authentication off",
                ev::IMGCTL_RENDEZVOUS_TOKEN
            ))),
            (Some(value), None) => Ok(Some(Token(value.into_bytes()))),
            (None, Some(path)) => {
                let text =
                    crate::sys::fs::read_regular_text(std::path::Path::new(&path), MAX_TOKEN_FILE)
                        .map_err(|e| {
                            bad(format!("{}={path}: {e}", ev::IMGCTL_RENDEZVOUS_TOKEN_FILE))
                        })?;
                let line = text.lines().next().unwrap_or("").trim();
                if line.is_empty() {
                    return Err(bad(format!(
                        "{}={path}: the file holds no token",
                        ev::IMGCTL_RENDEZVOUS_TOKEN_FILE
                    )));
                }
                Ok(Some(Token(line.as_bytes().to_vec())))
            }
            (None, None) => Ok(None),
        }
    }

    fn keyed(&self, label: &[u8], parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        // Each part with its length, so no two messages share a MAC input.
        for part in std::iter::once(label).chain(parts.iter().copied()) {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part);
        }
        mac
    }

    /// The MAC of `parts` under `label` (what the message is: `hello`,
    /// `session`, `verdict`).
    pub fn mac(&self, label: &[u8], parts: &[&[u8]]) -> [u8; MAC_BYTES] {
        self.keyed(label, parts).finalize().into_bytes().into()
    }

    /// Whether `tag` is the MAC of `parts` under `label` (compared in
    /// constant time).
    pub fn verify(&self, label: &[u8], parts: &[&[u8]], tag: &[u8]) -> bool {
        self.keyed(label, parts).verify_slice(tag).is_ok()
    }
}

/// A fresh random nonce.
pub fn nonce() -> Nonce {
    rand::random()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_bind_the_label_the_parts_and_the_token() {
        let t = Token::new("s3cret");
        let tag = t.mac(b"hello", &[b"ab", b"c"]);
        assert!(t.verify(b"hello", &[b"ab", b"c"], &tag));
        // Another split of the same bytes, another label, another token.
        assert!(!t.verify(b"hello", &[b"a", b"bc"], &tag));
        assert!(!t.verify(b"verdict", &[b"ab", b"c"], &tag));
        assert!(!Token::new("other").verify(b"hello", &[b"ab", b"c"], &tag));
        assert!(!t.verify(b"hello", &[b"ab", b"c"], &tag[..31]));
        assert_eq!(format!("{t:?}"), "Token(<redacted>)");
        assert_ne!(nonce(), nonce());
    }

    #[test]
    fn a_blank_token_is_refused_not_taken_as_none() {
        let env = |pairs: Vec<(&'static str, String)>| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        for blank in ["", "  ", "\t\n"] {
            let e = Token::from_env(&env(vec![(ev::IMGCTL_RENDEZVOUS_TOKEN, blank.into())]))
                .unwrap_err();
            assert!(e.to_string().contains("is set but empty"), "{e}");
        }
    }

    #[test]
    fn the_token_comes_from_the_variable_or_the_file_and_never_both() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "from-file\nignored\n").unwrap();
        let path = file.to_str().unwrap().to_string();
        let env = |pairs: Vec<(&'static str, String)>| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(Token::from_env(&env(vec![])).unwrap(), None);
        assert_eq!(
            Token::from_env(&env(vec![(ev::IMGCTL_RENDEZVOUS_TOKEN, "t".into())])).unwrap(),
            Some(Token::new("t"))
        );
        assert_eq!(
            Token::from_env(&env(vec![(ev::IMGCTL_RENDEZVOUS_TOKEN_FILE, path.clone())])).unwrap(),
            Some(Token::new("from-file"))
        );
        let both = env(vec![
            (ev::IMGCTL_RENDEZVOUS_TOKEN, "t".into()),
            (ev::IMGCTL_RENDEZVOUS_TOKEN_FILE, path),
        ]);
        assert!(Token::from_env(&both)
            .unwrap_err()
            .to_string()
            .contains("both"));
        std::fs::write(&file, "\n").unwrap();
        let empty = env(vec![(
            ev::IMGCTL_RENDEZVOUS_TOKEN_FILE,
            file.to_str().unwrap().into(),
        )]);
        let e = Token::from_env(&empty).unwrap_err().to_string();
        assert!(
            e.contains("holds no token") && !e.contains("from-file"),
            "{e}"
        );
    }
}
