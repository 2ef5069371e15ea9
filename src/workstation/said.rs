//! Notes said once per engine (#53 F11): a warning the user cannot act on
//! from `up` (an engine's own ulimit) is said at the first `up` on that
//! engine, not at every one. What was said is a file per note under
//! `$XDG_STATE_HOME/imgctl/said/` (default `~/.local/state`), named by a
//! digest of the engine and the note.
use std::path::PathBuf;

use sha2::{Digest as _, Sha256};

/// The folder of said notes; None without a usable HOME.
fn folder() -> Option<PathBuf> {
    let state = match std::env::var_os(crate::env_vars::XDG_STATE_HOME).map(PathBuf::from) {
        Some(s) if s.is_absolute() => s,
        _ => PathBuf::from(std::env::var_os(crate::env_vars::HOME)?).join(".local/state"),
    };
    state.is_absolute().then(|| state.join("imgctl/said"))
}

/// Whether the note `key` (the engine's address and the note's words) is
/// said for the first time; it is remembered from now on. A folder that
/// cannot be written makes every time the first (said again, never lost).
pub fn first_time(key: &str) -> bool {
    match folder() {
        Some(dir) => first_time_in(&dir, key),
        None => true,
    }
}

/// [`first_time`] with its folder given.
fn first_time_in(dir: &std::path::Path, key: &str) -> bool {
    let name: String = Sha256::digest(key.as_bytes())
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = dir.join(name);
    if std::fs::symlink_metadata(&path).is_ok() {
        return false;
    }
    let _ = std::fs::create_dir_all(dir);
    // create_new: never through a planted link, never over a file.
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_first_once_per_engine_and_note() {
        let dir = tempfile::tempdir().unwrap();
        let said = dir.path().join("imgctl/said");
        assert!(first_time_in(
            &said,
            "Docker unix:///var/run/docker.sock memlock"
        ));
        assert!(!first_time_in(
            &said,
            "Docker unix:///var/run/docker.sock memlock"
        ));
        assert!(first_time_in(
            &said,
            "Podman unix:///run/podman.sock memlock"
        ));
        // A folder that cannot be made: said every time.
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        assert!(first_time_in(&file.join("said"), "k"));
        assert!(first_time_in(&file.join("said"), "k"));
    }
}
