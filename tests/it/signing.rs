//! Signed attestations (issue 44), checked by verifiers imgctl did not
//! write: `imgctl key generate` makes ECDSA P-256 and Ed25519 pairs that
//! OpenSSL reads (the encrypted one with the passphrase), the DSSE
//! signatures imgctl makes verify with `openssl` over DSSE's
//! pre-authentication encoding and with securesystemslib (PyPI) over the
//! envelope, and a changed payload fails all three verifiers.
use std::path::Path;
use std::process::{Command, Output};

use imgctl::image::sign::dsse::{pae, Envelope};
use imgctl::image::sign::{PrivateKey, PublicKey, SignError};

use crate::common::{imgctl_bin, one_error_line, repo_root, texts, venv_python};

mod gate;
mod https;
mod round_trip;

/// The passphrase of the encrypted keys: it must never be printed.
const PASSPHRASE: &str = "h0rse-b4ttery-s1gn";
const IN_TOTO: &str = "application/vnd.in-toto+json";

/// `imgctl key generate DIR --type KIND` (with the passphrase when given).
pub fn key_generate(dir: &Path, kind: &str, passphrase: Option<&str>) -> Output {
    let mut cmd = Command::new(imgctl_bin());
    cmd.args(["key", "generate", dir.to_str().unwrap(), "--type", kind])
        .env("NO_COLOR", "1")
        .env_remove("IMGCTL_KEY_PASSPHRASE");
    if let Some(p) = passphrase {
        cmd.env("IMGCTL_KEY_PASSPHRASE", p);
    }
    cmd.output().unwrap()
}

/// Runs `openssl ARGS` with the passphrase in its environment.
fn openssl(args: &[&str]) -> Output {
    Command::new("openssl")
        .args(args)
        .env("IMGCTL_KEY_PASSPHRASE", PASSPHRASE)
        .output()
        .unwrap()
}

/// Whether `openssl` says `sig` is `public`'s signature over `message`.
fn openssl_verifies(kind: &str, public: &Path, message: &[u8], sig: &[u8]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let (msg, sig_file) = (dir.path().join("pae"), dir.path().join("sig"));
    std::fs::write(&msg, message).unwrap();
    std::fs::write(&sig_file, sig).unwrap();
    let (public, msg, sig_file) = (
        public.to_str().unwrap(),
        msg.to_str().unwrap(),
        sig_file.to_str().unwrap(),
    );
    let out = if kind == "ed25519" {
        openssl(&[
            "pkeyutl", "-verify", "-pubin", "-inkey", public, "-rawin", "-in", msg, "-sigfile",
            sig_file,
        ])
    } else {
        openssl(&[
            "dgst",
            "-sha256",
            "-verify",
            public,
            "-signature",
            sig_file,
            msg,
        ])
    };
    let (stdout, _) = texts(&out);
    out.status.success() && stdout.contains("Verified")
}

/// securesystemslib's verdict on an envelope (or bundle) file: its output
/// when the signature holds, `Err` with its words when it does not.
pub fn securesystemslib_verifies(doc: &Path, public: &Path, keyid: &str) -> Result<String, String> {
    let out = Command::new(venv_python())
        .arg(repo_root().join("tests/signing/dsse_verify.py"))
        .args([doc.to_str().unwrap(), public.to_str().unwrap(), keyid])
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(
        !stderr.contains("Traceback"),
        "securesystemslib did not run: {stderr}"
    );
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(stderr)
    }
}

fn statement() -> Vec<u8> {
    br#"{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"x","digest":{"sha256":"aa"}}],"predicateType":"urn:imgctl:predicate:verify:v1","predicate":{"passed":true}}"#.to_vec()
}

#[test]
fn key_pairs_sign_dsse_that_openssl_and_securesystemslib_verify() {
    for (kind, passphrase) in [
        ("ecdsa-p256", Some(PASSPHRASE)),
        ("ed25519", None),
        ("ed25519", Some(PASSPHRASE)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("keys");
        let out = key_generate(&keys, kind, passphrase);
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "{kind}: {stderr}");
        let (private, public) = (keys.join("imgctl.key"), keys.join("imgctl.pub"));
        assert_eq!(stdout.trim(), public.display().to_string());
        let key_text = std::fs::read_to_string(&private).unwrap();
        for line in key_text.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!stderr.contains(line) && !stdout.contains(line));
        }
        assert!(!stderr.contains(PASSPHRASE) && !stdout.contains(PASSPHRASE));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&private).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{kind}: the private key's mode");
        assert_eq!(
            key_text.starts_with("-----BEGIN ENCRYPTED PRIVATE KEY-----"),
            passphrase.is_some()
        );
        // OpenSSL reads the private key (decrypting it) and derives the same public key.
        let mut args = vec!["pkey", "-in", private.to_str().unwrap(), "-pubout"];
        if passphrase.is_some() {
            args.extend(["-passin", "env:IMGCTL_KEY_PASSPHRASE"]);
        }
        let derived = openssl(&args);
        assert!(derived.status.success(), "{kind}: {}", texts(&derived).1);
        let public_text = std::fs::read_to_string(&public).unwrap();
        assert_eq!(texts(&derived).0, public_text, "{kind}");

        // imgctl signs; openssl checks the raw signature over the PAE.
        let key = PrivateKey::read(&private, passphrase.map(str::as_bytes)).unwrap();
        let envelope = Envelope::sign(IN_TOTO, &statement(), &key).unwrap();
        let sig = base64_decode(&envelope.signatures[0].sig);
        let message = pae(IN_TOTO, &statement());
        assert!(message.starts_with(b"DSSEv1 28 application/vnd.in-toto+json "));
        assert!(openssl_verifies(kind, &public, &message, &sig), "{kind}");
        let mut changed = message.clone();
        *changed.last_mut().unwrap() = b' ';
        assert!(
            !openssl_verifies(kind, &public, &changed, &sig),
            "{kind}: changed PAE"
        );

        // securesystemslib checks the envelope; a changed payload fails it.
        let keyid = key.public().key_id().to_string();
        let file = dir.path().join("envelope.json");
        std::fs::write(&file, serde_json::to_vec(&envelope).unwrap()).unwrap();
        let said = securesystemslib_verifies(&file, &public, &keyid).unwrap();
        assert!(said.contains("urn:imgctl:predicate:verify:v1"), "{said}");
        let mut forged = envelope.clone();
        forged.payload = base64_encode(&statement().replace_true_with_false());
        std::fs::write(&file, serde_json::to_vec(&forged).unwrap()).unwrap();
        let refused = securesystemslib_verifies(&file, &public, &keyid).unwrap_err();
        assert!(refused.contains("refused"), "{refused}");

        // imgctl's own check agrees, and tells the refusals apart.
        let public_key = PublicKey::read(&public).unwrap();
        let held = envelope.verify(std::slice::from_ref(&public_key)).unwrap();
        assert_eq!((held.payload, held.key_id), (statement(), keyid.clone()));
        assert!(matches!(
            forged.verify(std::slice::from_ref(&public_key)),
            Err(SignError::BadSignature { .. })
        ));
        let other = tempfile::tempdir().unwrap();
        assert!(key_generate(other.path(), kind, None).status.success());
        let other_key = PublicKey::read(&other.path().join("imgctl.pub")).unwrap();
        assert!(matches!(
            envelope.verify(&[other_key]),
            Err(SignError::UnknownKey { .. })
        ));
        let mut unsigned = envelope.clone();
        unsigned.signatures.clear();
        assert!(matches!(
            unsigned.verify(&[public_key]),
            Err(SignError::Unsigned)
        ));
    }
}

#[test]
fn key_generate_refuses_to_overwrite_and_an_empty_passphrase() {
    let dir = tempfile::tempdir().unwrap();
    assert!(key_generate(dir.path(), "ed25519", None).status.success());
    let before = std::fs::read(dir.path().join("imgctl.key")).unwrap();
    let again = key_generate(dir.path(), "ecdsa-p256", None);
    assert_eq!(again.status.code(), Some(2));
    let (_, stderr) = texts(&again);
    assert!(
        one_error_line(&stderr).contains("imgctl.key already exists"),
        "{stderr}"
    );
    assert!(stderr.contains("hint: "), "{stderr}");
    assert_eq!(
        std::fs::read(dir.path().join("imgctl.key")).unwrap(),
        before
    );

    let empty = key_generate(&dir.path().join("new"), "ed25519", Some(""));
    assert_eq!(empty.status.code(), Some(2));
    assert!(one_error_line(&texts(&empty).1).contains("IMGCTL_KEY_PASSPHRASE is set but empty"));

    // An encrypted key without, or with a wrong, passphrase: usage errors naming the file.
    let enc = dir.path().join("enc");
    assert!(key_generate(&enc, "ecdsa-p256", Some(PASSPHRASE))
        .status
        .success());
    let private = enc.join("imgctl.key");
    assert!(matches!(
        PrivateKey::read(&private, None),
        Err(SignError::NeedsPassphrase { .. })
    ));
    let wrong = PrivateKey::read(&private, Some(b"not-it")).unwrap_err();
    assert!(matches!(wrong, SignError::WrongPassphrase { .. }));
    assert!(!format!("{wrong} {wrong:?}").contains("not-it"));
}

trait Forge {
    fn replace_true_with_false(&self) -> Vec<u8>;
}

impl Forge for Vec<u8> {
    fn replace_true_with_false(&self) -> Vec<u8> {
        String::from_utf8_lossy(self)
            .replace("\"passed\":true", "\"passed\":false")
            .into_bytes()
    }
}

pub fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

pub fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// `build --sign-key` reads the key before anything is built: a key given
/// without --attest/--push, a missing file, an encrypted key without or with
/// a wrong passphrase are usage errors naming the cause, and none prints
/// the passphrase (`--dry-run` stops before the engine).
#[test]
fn build_sign_key_errors_are_usage_errors_before_building() {
    let dir = tempfile::tempdir().unwrap();
    assert!(key_generate(dir.path(), "ed25519", Some(PASSPHRASE))
        .status
        .success());
    let key = dir.path().join("imgctl.key");
    let key = key.to_str().unwrap();
    let build = |args: &[&str], passphrase: Option<&str>| {
        let mut cmd = Command::new(imgctl_bin());
        cmd.args(["build", "--cuda", "12.4", "--dry-run"])
            .args(args)
            .env("NO_COLOR", "1")
            .env_remove("IMGCTL_SIGN_KEY")
            .env_remove("IMGCTL_KEY_PASSPHRASE");
        if let Some(p) = passphrase {
            cmd.env("IMGCTL_KEY_PASSPHRASE", p);
        }
        let out = cmd.output().unwrap();
        let (stdout, stderr) = texts(&out);
        assert!(!stdout.contains(PASSPHRASE) && !stderr.contains(PASSPHRASE));
        (out.status.code(), one_error_line(&stderr).to_string())
    };
    let (code, line) = build(&["--sign-key", key], None);
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.contains("signs what --attest or --push writes"),
        "{line}"
    );
    let (code, line) = build(&["--push", "--sign-key", "/nonexistent/imgctl.key"], None);
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.contains("cannot read the key file /nonexistent/imgctl.key"),
        "{line}"
    );
    let (code, line) = build(&["--push", "--sign-key", key], None);
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.contains("is encrypted and no passphrase was given"),
        "{line}"
    );
    let (code, line) = build(&["--push", "--sign-key", key], Some("wrong-one"));
    assert_eq!(code, Some(2), "{line}");
    assert!(line.contains("the passphrase does not decrypt"), "{line}");
    // The right one reads it; --dry-run then builds nothing.
    let mut cmd = Command::new(imgctl_bin());
    let out = cmd
        .args([
            "build",
            "--cuda",
            "12.4",
            "--dry-run",
            "--push",
            "--sign-key",
            key,
        ])
        .env("IMGCTL_KEY_PASSPHRASE", PASSPHRASE)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    assert!(
        !texts(&out).1.contains("can be read by others"),
        "{}",
        texts(&out).1
    );
    // #50 low: a private key others can read is named, with the fix.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    let stderr = texts(&out).1;
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("warning: the signing key ")
                && l.contains("can be read by others (mode 0644)")
                && l.contains(&format!("`chmod 600 {key}`"))),
        "{stderr}"
    );
}
