//! The `--ca-cert` file: read with a size cap, from a regular file only, and
//! parsed as PEM so that nothing but `CERTIFICATE` blocks reaches the image.
//!
//! The file is copied into the image's trust store, where every user of the
//! image (and `docker history`'s readers) can see it: a private key that came
//! along in the same PEM file would leak, so any other PEM block type is
//! refused, naming it. Each certificate's base64 must decode to DER that
//! starts with a SEQUENCE (`0x30`). Reading stops after [`MAX_CA_CERT_BYTES`]
//! (a `/dev/zero` argument is refused before it is read at all).
//!
//! Its errors ([`CaError`]) name no flag; `commands/` does.
use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine as _;

/// The largest `--ca-cert` file accepted (1 MiB; a full system bundle is ~200 KiB).
pub const MAX_CA_CERT_BYTES: u64 = 1024 * 1024;

/// The only PEM block type `--ca-cert` accepts.
const CERTIFICATE: &str = "CERTIFICATE";

/// A CA certificate file that cannot be used. The messages say "CA
/// certificate"; `commands/` names the flag and gives the hint.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// The file cannot be read.
    #[error("cannot read CA certificate {}: {error}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// The file is larger than [`MAX_CA_CERT_BYTES`].
    #[error("CA certificate {} is larger than {MAX_CA_CERT_BYTES} bytes (1 MiB): not a CA certificate file", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// A directory, device, FIFO or socket.
    #[error("CA certificate {} is {what}, not a certificate file", path.display())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is instead (`a directory`).
        what: &'static str,
    },
    /// Not PEM certificates only ([`check_pem`]'s reason).
    #[error("CA certificate {} {problem}", path.display())]
    NotPem {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line number.
        problem: String,
    },
}

/// Reads and checks a `--ca-cert` file; every problem is a [`CaError`].
pub fn read_ca_cert(path: &Path) -> Result<Vec<u8>, CaError> {
    let bytes = read_capped(path)?;
    check_pem(&bytes).map_err(|problem| CaError::NotPem {
        path: path.to_path_buf(),
        problem,
    })?;
    Ok(bytes)
}

/// The file's bytes: a regular file (symlinks followed) of at most
/// [`MAX_CA_CERT_BYTES`], read without ever holding more than one byte over it.
fn read_capped(path: &Path) -> Result<Vec<u8>, CaError> {
    let cannot = |error: std::io::Error| CaError::Unreadable {
        path: path.to_path_buf(),
        error,
    };
    // Checked before opening: opening a FIFO would wait for a writer.
    refuse_non_regular(path, &std::fs::metadata(path).map_err(cannot)?)?;
    let file = std::fs::File::open(path).map_err(cannot)?;
    refuse_non_regular(path, &file.metadata().map_err(cannot)?)?;
    let mut bytes = Vec::new();
    file.take(MAX_CA_CERT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_CA_CERT_BYTES {
        return Err(CaError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(bytes)
}

/// A directory, device, FIFO or socket is an error naming what it is.
fn refuse_non_regular(path: &Path, meta: &std::fs::Metadata) -> Result<(), CaError> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(CaError::NotRegular {
        path: path.to_path_buf(),
        what,
    })
}

/// Checks that `bytes` hold one or more PEM `CERTIFICATE` blocks and no other
/// PEM block; text outside the blocks (comments, `openssl x509 -text` output)
/// is allowed. The error is what is wrong, with the line number.
pub fn check_pem(bytes: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(bytes);
    let mut certificates = 0;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
    while let Some((number, line)) = lines.next() {
        let Some(label) = pem_label(line, "BEGIN") else {
            continue;
        };
        if label != CERTIFICATE {
            return Err(format!(
                "has a {label} block at line {number}: only CERTIFICATE blocks are accepted (a key must never go into an image)"
            ));
        }
        let mut body = String::new();
        let mut ended = false;
        for (_, line) in lines.by_ref() {
            if let Some(end) = pem_label(line, "END") {
                if end != CERTIFICATE {
                    return Err(format!(
                        "has a CERTIFICATE block at line {number} that ends with END {end}"
                    ));
                }
                ended = true;
                break;
            }
            body.push_str(line);
        }
        if !ended {
            return Err(format!(
                "has a CERTIFICATE block at line {number} without an END CERTIFICATE line"
            ));
        }
        check_der(&body)
            .map_err(|e| format!("has a CERTIFICATE block at line {number} that {e}"))?;
        certificates += 1;
    }
    if certificates == 0 {
        return Err("is not a PEM certificate (no BEGIN CERTIFICATE line)".to_string());
    }
    Ok(())
}

/// `-----BEGIN X-----` → `X` (for `kind` BEGIN or END); any other line → `None`.
fn pem_label<'a>(line: &'a str, kind: &str) -> Option<&'a str> {
    line.strip_prefix("-----")?
        .strip_prefix(kind)?
        .strip_prefix(' ')?
        .strip_suffix("-----")
}

/// The block's base64 decodes to DER starting with a SEQUENCE.
fn check_der(body: &str) -> Result<(), String> {
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| format!("is not valid base64 ({e})"))?;
    match der.first() {
        Some(0x30) => Ok(()),
        Some(b) => Err(format!(
            "is not a DER certificate (starts with byte 0x{b:02x}, not a SEQUENCE 0x30)"
        )),
        None => Err("is empty".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

    #[test]
    fn certificates_pass() {
        assert_eq!(check_pem(CERT.as_bytes()), Ok(()));
        let two = format!("# a comment\n{CERT}subject=CN = x\n{CERT}");
        assert_eq!(check_pem(two.as_bytes()), Ok(()));
    }

    #[test]
    fn other_blocks_and_bad_bodies_are_refused() {
        for (text, wanted) in [
            (
                format!("{CERT}-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"),
                "has a PRIVATE KEY block at line 4",
            ),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n".to_string(),
                "has a RSA PRIVATE KEY block at line 1",
            ),
            (
                "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_string(),
                "is not valid base64",
            ),
            (
                "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n".to_string(),
                "starts with byte 0x68",
            ),
            (
                "-----BEGIN CERTIFICATE-----\nMIIBfake\n".to_string(),
                "without an END CERTIFICATE line",
            ),
            (
                "-----BEGIN CERTIFICATE-----\nMIIB\n-----END EC PRIVATE KEY-----\n".to_string(),
                "ends with END EC PRIVATE KEY",
            ),
            ("hello".to_string(), "no BEGIN CERTIFICATE line"),
        ] {
            let err = check_pem(text.as_bytes()).unwrap_err();
            assert!(err.contains(wanted), "{text:?}: {err}");
        }
    }
}
