//! DSSE v1 envelopes (<https://github.com/secure-systems-lab/dsse>,
//! `envelope.md` and `protocol.md`): a payload, its type, and signatures
//! over the pre-authentication encoding [`pae`] of both, never over the
//! payload alone, so that a signature cannot be moved to another type.
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::keys::PublicKey;
use super::{SignError, Signer};

/// The media type of a DSSE envelope (the DSSE spec's `envelope.md`).
pub const ENVELOPE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";

/// DSSE's pre-authentication encoding:
/// `"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`, lengths as ASCII
/// decimal byte counts (`protocol.md`).
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// One envelope, as JSON (`payload` and each `sig` standard base64).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The payload, base64.
    pub payload: String,
    /// What the payload is (`application/vnd.in-toto+json`).
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// Its signatures.
    pub signatures: Vec<Signature>,
}

/// One signature of an [`Envelope`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The signer's key id (a hint: every given key is tried when it is
    /// empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub keyid: String,
    /// The signature over [`pae`], base64.
    pub sig: String,
}

/// What a checked envelope says.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The payload's bytes.
    pub payload: Vec<u8>,
    /// The payload type.
    pub payload_type: String,
    /// The key id of the key whose signature holds.
    pub key_id: String,
}

impl Envelope {
    /// Signs `payload` of `payload_type` with `signer`.
    pub fn sign(
        payload_type: &str,
        payload: &[u8],
        signer: &dyn Signer,
    ) -> Result<Self, SignError> {
        let sig = signer.sign(&pae(payload_type, payload))?;
        Ok(Envelope {
            payload: STANDARD.encode(payload),
            payload_type: payload_type.to_string(),
            signatures: vec![Signature {
                keyid: signer.key_id().to_string(),
                sig: STANDARD.encode(sig),
            }],
        })
    }

    /// Parses an envelope's JSON.
    pub fn parse(bytes: &[u8]) -> Result<Self, SignError> {
        serde_json::from_slice(bytes)
            .map_err(|e| SignError::MalformedEnvelope { why: e.to_string() })
    }

    /// The payload's bytes, unchecked (to name what an unsigned or
    /// wrongly signed envelope claims).
    pub fn payload_bytes(&self) -> Result<Vec<u8>, SignError> {
        STANDARD
            .decode(&self.payload)
            .map_err(|e| SignError::MalformedEnvelope {
                why: format!("its payload is not base64: {e}"),
            })
    }

    /// Checks the envelope against `keys`: it holds when one signature is
    /// that of one of the keys over the payload as it is now. No
    /// signature, signatures only by other keys, and a signature of a
    /// known key that does not match (the payload or its type was changed
    /// after signing) are each their own error.
    pub fn verify(&self, keys: &[PublicKey]) -> Result<Verified, SignError> {
        let payload = self.payload_bytes()?;
        if self.signatures.is_empty() {
            return Err(SignError::Unsigned);
        }
        let message = pae(&self.payload_type, &payload);
        let mut known_but_wrong = None;
        for s in &self.signatures {
            let Ok(sig) = STANDARD.decode(&s.sig) else {
                continue;
            };
            for key in keys
                .iter()
                .filter(|k| s.keyid.is_empty() || s.keyid == k.key_id())
            {
                if key.verifies(&message, &sig) {
                    return Ok(Verified {
                        payload,
                        payload_type: self.payload_type.clone(),
                        key_id: key.key_id().to_string(),
                    });
                }
                if !s.keyid.is_empty() {
                    known_but_wrong = Some(key.key_id().to_string());
                }
            }
        }
        match known_but_wrong {
            Some(key_id) => Err(SignError::BadSignature { key_id }),
            None => Err(SignError::UnknownKey {
                key_ids: self
                    .signatures
                    .iter()
                    .map(|s| {
                        if s.keyid.is_empty() {
                            "(no key id)".to_string()
                        } else {
                            s.keyid.clone()
                        }
                    })
                    .collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_is_the_specs_encoding() {
        // DSSE protocol.md's example.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
    }

    #[test]
    fn another_key_under_our_key_id_is_not_called_only_a_changed_payload() {
        // #50 low: such a signature read "the payload was changed".
        let dir = tempfile::tempdir().unwrap();
        let made = |name: &str| {
            let d = dir.path().join(name);
            let g =
                crate::image::sign::keys::generate(&d, crate::image::sign::KeyKind::Ed25519, None)
                    .unwrap();
            crate::image::sign::PrivateKey::read(&g.private, None).unwrap()
        };
        let (ours, theirs) = (made("ours"), made("theirs"));
        let mut envelope = Envelope::sign("text/plain", b"verdict", &theirs).unwrap();
        envelope.signatures[0].keyid = ours.public().key_id().to_string();
        let e = envelope
            .verify(std::slice::from_ref(ours.public()))
            .unwrap_err();
        assert!(matches!(e, SignError::BadSignature { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("the payload was changed after signing, or another key signed it"),
            "{text}"
        );
        // Its own id, its own key: it holds.
        let signed = Envelope::sign("text/plain", b"verdict", &ours).unwrap();
        assert!(signed.verify(std::slice::from_ref(ours.public())).is_ok());
    }
}
