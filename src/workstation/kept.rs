//! What `up` keeps for a workstation between its containers (#53 F10), in
//! its state folder beside the host key ([`super::host_key::state_folder`]):
//! JupyterLab's token, so a bookmarked URL opens after `down` and `up` (and
//! after an image upgrade), until `up --new-token` makes another; and the
//! host ports it last had, which the next `up` asks for first when they are
//! free, so the addresses stay where they were.
//!
//! The token is a secret: a regular file of the caller's, mode 0600, in a
//! folder nobody else can write, read without following a link and written
//! atomically. Anything wrong there comes back as why, and `up` makes a
//! token for this container alone (as before) and says so.
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The token's file in the state folder.
pub const TOKEN_FILE: &str = "jupyter_token";
/// The ports' file in the state folder (`jupyter=8888` lines).
pub const PORTS_FILE: &str = "ports";
/// The most bytes either file may have.
const FILE_MAX: u64 = 4096;

/// Where a workstation's token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenFrom {
    /// The one kept from an earlier `up`.
    Kept,
    /// A new one: none was kept.
    New,
    /// A new one in place of the kept one (`--new-token`).
    Rotated,
}

/// Workstation `name`'s JupyterLab token: the kept one, or (none kept, or
/// `rotate`) one from `make`, kept for the next `up`. Err: why it cannot be
/// kept (the caller makes one for this container alone).
pub fn token(
    name: &str,
    rotate: bool,
    make: impl FnOnce() -> anyhow::Result<String>,
) -> Result<(String, TokenFrom), String> {
    token_in(&super::host_key::state_folder(name)?, rotate, make)
}

/// [`token`] in the state folder `dir`.
pub fn token_in(
    dir: &Path,
    rotate: bool,
    make: impl FnOnce() -> anyhow::Result<String>,
) -> Result<(String, TokenFrom), String> {
    let path = dir.join(TOKEN_FILE);
    let kept = match crate::sys::fs::read_private(&path, FILE_MAX) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(format!(
                "{} {e}; remove it, and the next `up` keeps a new one",
                path.display()
            ))
        }
    };
    if let (Some(bytes), false) = (&kept, rotate) {
        let text = String::from_utf8_lossy(bytes).trim().to_string();
        if is_token(&text) {
            return Ok((text, TokenFrom::Kept));
        }
    }
    let from = match (kept.is_some(), rotate) {
        (true, true) => TokenFrom::Rotated,
        _ => TokenFrom::New,
    };
    let token = make().map_err(|e| format!("no new token: {e}"))?;
    crate::sys::fs::write_atomic(&path, |tmp| {
        std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::write(tmp, format!("{token}\n"))
    })
    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok((token, from))
}

/// A token as `up` makes one: 16 to 128 hex digits (a damaged file is
/// replaced, not served).
fn is_token(text: &str) -> bool {
    (16..=128).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The host ports a workstation last had (None: none kept for it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ports {
    /// JupyterLab's.
    pub jupyter: Option<u16>,
    /// SSH's.
    pub ssh: Option<u16>,
    /// TensorBoard's.
    pub tensorboard: Option<u16>,
}

/// Workstation `name`'s kept ports; none when nothing is kept or the state
/// folder cannot be used (the defaults then apply, as before).
pub fn ports(name: &str) -> Ports {
    super::host_key::state_folder(name)
        .map(|dir| ports_in(&dir))
        .unwrap_or_default()
}

/// [`ports`] in the state folder `dir`: `jupyter=`, `ssh=` and
/// `tensorboard=` lines; anything else is passed over.
pub fn ports_in(dir: &Path) -> Ports {
    let Ok(text) = crate::sys::fs::read_regular_text(&dir.join(PORTS_FILE), FILE_MAX) else {
        return Ports::default();
    };
    let mut ports = Ports::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let port = value.trim().parse::<u16>().ok().filter(|p| *p > 0);
        match key.trim() {
            "jupyter" => ports.jupyter = port,
            "ssh" => ports.ssh = port,
            "tensorboard" => ports.tensorboard = port,
            _ => {}
        }
    }
    ports
}

/// Keeps `ports` as workstation `name`'s. Err: why not (a note at most).
pub fn save_ports(name: &str, ports: &Ports) -> Result<(), String> {
    save_ports_in(&super::host_key::state_folder(name)?, ports)
}

/// [`save_ports`] in the state folder `dir`.
pub fn save_ports_in(dir: &Path, ports: &Ports) -> Result<(), String> {
    let mut text = String::new();
    for (key, port) in [
        ("jupyter", ports.jupyter),
        ("ssh", ports.ssh),
        ("tensorboard", ports.tensorboard),
    ] {
        if let Some(p) = port {
            text.push_str(&format!("{key}={p}\n"));
        }
    }
    let path = dir.join(PORTS_FILE);
    crate::sys::fs::write_file_atomic(&path, text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn the_token_is_kept_until_rotated() {
        let dir = private_dir();
        let made = |t: &'static str| move || Ok(t.to_string());
        let first = token_in(dir.path(), false, made("0123456789abcdef0123456789abcdef")).unwrap();
        assert_eq!(first.1, TokenFrom::New);
        let path = dir.path().join(TOKEN_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // The next up gets the same one, and makes none.
        let again = token_in(dir.path(), false, || panic!("made a token")).unwrap();
        assert_eq!(again, (first.0.clone(), TokenFrom::Kept));
        // --new-token replaces it, and the one after keeps the new one.
        let rotated = token_in(dir.path(), true, made("fedcba9876543210fedcba9876543210")).unwrap();
        assert_eq!(rotated.1, TokenFrom::Rotated);
        assert_ne!(rotated.0, first.0);
        let kept = token_in(dir.path(), false, || panic!("made a token")).unwrap();
        assert_eq!(kept.0, rotated.0);
        // A damaged file is replaced, not served.
        std::fs::write(&path, "not a token; rm -rf /").unwrap();
        let fixed = token_in(dir.path(), false, made("00112233445566778899aabbccddeeff")).unwrap();
        assert_eq!(fixed.0, "00112233445566778899aabbccddeeff");
    }

    #[test]
    fn a_token_file_others_can_read_or_a_link_is_refused() {
        let dir = private_dir();
        let path = dir.path().join(TOKEN_FILE);
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = token_in(dir.path(), false, || panic!("made a token")).unwrap_err();
        assert!(
            err.contains(TOKEN_FILE) && err.contains("remove it"),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "0123456789abcdef0123456789abcdef\n").unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(token_in(dir.path(), false, || panic!("made a token")).is_err());
    }

    #[test]
    fn ports_round_trip_and_junk_is_passed_over() {
        let dir = private_dir();
        assert_eq!(ports_in(dir.path()), Ports::default());
        let ports = Ports {
            jupyter: Some(8890),
            ssh: None,
            tensorboard: Some(6007),
        };
        save_ports_in(dir.path(), &ports).unwrap();
        assert_eq!(ports_in(dir.path()), ports);
        std::fs::write(
            dir.path().join(PORTS_FILE),
            "jupyter=x\nssh=0\nnoise\ntensorboard=6010\n",
        )
        .unwrap();
        assert_eq!(
            ports_in(dir.path()),
            Ports {
                tensorboard: Some(6010),
                ..Ports::default()
            }
        );
    }
}
