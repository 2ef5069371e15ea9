//! `up`'s SSH host key, one per workstation name (#45 F4). It is made once
//! on this machine with `ssh-keygen` and kept in
//! `$XDG_STATE_HOME/imgctl/workstations/NAME/` (default
//! `~/.local/state/…`, folder 0700, key 0600), placed into every container
//! of that name before it starts (the entrypoint's sshd serves it), and
//! remembered in `~/.ssh/known_hosts` under the alias `NAME.imgctl`, which
//! the printed `ssh` line names with `HostKeyAlias`. So the host key holds
//! across `down` and `up` and across ports, and the first `ssh` neither asks
//! nor warns that the host identification has changed.
//!
//! Anything that fails here (no `ssh-keygen`, no HOME, a read-only
//! `~/.ssh`) is one note, and the workstation makes its own host key as
//! before.
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file the host key goes to inside the container (the entrypoint
/// reads it; `IMGCTL_SSH_HOST_KEY` there names another).
pub(super) const IN_CONTAINER: &str = "/etc/imgctl/ssh_host_ed25519_key";

/// A workstation's host key, ready to place and remembered.
#[derive(Debug)]
pub(super) struct HostKey {
    /// The private key (OpenSSH PEM).
    pub(super) private: Vec<u8>,
    /// The alias the known_hosts line and the `ssh` line name.
    pub(super) alias: String,
    /// Whether `~/.ssh/known_hosts` was changed now (a new line).
    pub(super) remembered_now: bool,
    /// The known_hosts file.
    pub(super) known_hosts: PathBuf,
}

/// The `HostKeyAlias` of workstation `name`: a name no real host has.
pub(super) fn alias(name: &str) -> String {
    format!("{name}.imgctl")
}

fn home() -> Result<PathBuf, String> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .ok_or_else(|| "HOME is not set".to_string())
}

/// Workstation `name`'s host key: made on first use, then the same; its
/// public half remembered in `~/.ssh/known_hosts`. Err: why not (a note).
pub(super) fn prepare(name: &str) -> Result<HostKey, String> {
    let home = home()?;
    let state = match std::env::var_os("XDG_STATE_HOME").map(PathBuf::from) {
        Some(b) if b.is_absolute() => b,
        _ => home.join(".local/state"),
    };
    prepare_in(&home, &state, name)
}

/// [`prepare`] with HOME and the state folder given.
fn prepare_in(home: &Path, state: &Path, name: &str) -> Result<HostKey, String> {
    let dir = state.join("imgctl/workstations").join(name);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let key = dir.join("ssh_host_ed25519_key");
    if !key.exists() {
        make_key(&dir, &key, &alias(name))?;
    }
    let private = std::fs::read(&key).map_err(|e| format!("{}: {e}", key.display()))?;
    let public_file = key.with_extension("pub");
    let public = std::fs::read_to_string(&public_file)
        .map_err(|e| format!("{}: {e}", public_file.display()))?;
    let public: Vec<&str> = public.split_whitespace().take(2).collect();
    if public.len() != 2 {
        return Err(format!("{} holds no public key", public_file.display()));
    }
    let known_hosts = home.join(".ssh/known_hosts");
    let remembered_now = remember(&known_hosts, &alias(name), &public.join(" "))?;
    Ok(HostKey {
        private,
        alias: alias(name),
        remembered_now,
        known_hosts,
    })
}

/// `ssh-keygen` into a temporary name in `dir`, then renamed into place
/// (public half first): a killed `up` leaves no half pair.
fn make_key(dir: &Path, key: &Path, comment: &str) -> Result<(), String> {
    let tmp = dir.join(format!(".new-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let _ = std::fs::remove_file(tmp.with_extension("pub"));
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
        .arg(&tmp)
        .output()
        .map_err(|e| format!("ssh-keygen cannot run ({e}); install openssh-client"))?;
    if !out.status.success() {
        return Err(format!(
            "ssh-keygen failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    std::fs::rename(tmp.with_extension("pub"), key.with_extension("pub"))
        .and_then(|()| std::fs::rename(&tmp, key))
        .map_err(|e| format!("cannot keep the host key in {}: {e}", dir.display()))
}

/// `known_hosts` text with `alias`'s line set to `public`: None when it
/// already is; else the text without any other line for `alias` (a key
/// of an earlier imgctl), plus the line.
pub(super) fn known_hosts_with(text: &str, alias: &str, public: &str) -> Option<String> {
    let line = format!("{alias} {public}");
    let names_alias = |l: &str| {
        l.split_whitespace()
            .next()
            .is_some_and(|hosts| hosts.split(',').any(|h| h == alias))
    };
    if text.lines().any(|l| l.trim() == line)
        && text.lines().filter(|l| names_alias(l)).count() == 1
    {
        return None;
    }
    let mut out: String = text
        .lines()
        .filter(|l| !names_alias(l))
        .map(|l| format!("{l}\n"))
        .collect();
    out.push_str(&line);
    out.push('\n');
    Some(out)
}

/// Sets `alias`'s line in the known_hosts file `path` (atomically, its mode
/// kept; a new file 0644 in a new 0700 folder). Returns whether it changed.
fn remember(path: &Path, alias: &str, public: &str) -> Result<bool, String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    let (text, mode) = match std::fs::read_to_string(path) {
        Ok(t) => (
            t,
            std::fs::metadata(path).map_or(0o644, |m| m.permissions().mode() & 0o777),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), 0o644),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let Some(new) = known_hosts_with(&text, alias, public) else {
        return Ok(false);
    };
    crate::sys::fs::write_atomic(path, |tmp| {
        std::fs::write(tmp, &new)?;
        std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(mode))
    })
    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(true)
}

/// The private key beside the first `--ssh-key FILE.pub` that has one: the
/// `-i` of the printed `ssh` line (ssh finds only its default names itself).
pub(super) fn identity(given: &[PathBuf]) -> Option<PathBuf> {
    given.iter().find_map(|public| {
        let private = public.with_extension("");
        (public.extension().is_some_and(|e| e == "pub") && private.is_file())
            .then(|| std::path::absolute(&private).unwrap_or(private))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alias_s_line_is_added_once_and_replaced_when_the_key_changed() {
        let other = "[127.0.0.1]:2222 ssh-ed25519 AAAAold\nexample.org ssh-rsa AAAAx\n";
        let added = known_hosts_with(other, "p.imgctl", "ssh-ed25519 AAAAnew").unwrap();
        assert_eq!(added, format!("{other}p.imgctl ssh-ed25519 AAAAnew\n"));
        assert_eq!(
            known_hosts_with(&added, "p.imgctl", "ssh-ed25519 AAAAnew"),
            None
        );
        let changed = known_hosts_with(&added, "p.imgctl", "ssh-ed25519 AAAAnewer").unwrap();
        assert_eq!(changed, format!("{other}p.imgctl ssh-ed25519 AAAAnewer\n"));
        // Another workstation's alias that starts alike is left alone, and
        // a file without a final newline keeps its last line whole.
        let two =
            known_hosts_with("p.imgctl2 ssh-ed25519 AAAA2", "p.imgctl", "ssh-ed25519 B").unwrap();
        assert_eq!(two, "p.imgctl2 ssh-ed25519 AAAA2\np.imgctl ssh-ed25519 B\n");
    }

    #[test]
    fn a_workstation_keeps_one_host_key_and_known_hosts_gets_its_line() {
        let home = tempfile::tempdir().unwrap();
        let state = home.path().join(".local/state");
        let first = prepare_in(home.path(), &state, "proj").unwrap();
        let second = prepare_in(home.path(), &state, "proj").unwrap();
        assert_eq!(first.private, second.private);
        assert!(first.remembered_now && !second.remembered_now);
        assert_eq!(first.alias, "proj.imgctl");
        let dir = home.path().join(".local/state/imgctl/workstations/proj");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("ssh_host_ed25519_key")), 0o600);
        let known = std::fs::read_to_string(&first.known_hosts).unwrap();
        assert!(known.starts_with("proj.imgctl ssh-ed25519 AAAA"), "{known}");
        assert_eq!(known.lines().count(), 1);
        assert_eq!(mode(&home.path().join(".ssh")), 0o700);
    }

    #[test]
    fn the_identity_is_the_private_key_beside_a_given_public_one() {
        let dir = tempfile::tempdir().unwrap();
        let (lone, pair) = (dir.path().join("lone.pub"), dir.path().join("me.pub"));
        std::fs::write(&lone, "ssh-ed25519 A").unwrap();
        std::fs::write(&pair, "ssh-ed25519 B").unwrap();
        std::fs::write(dir.path().join("me"), "private").unwrap();
        assert_eq!(identity(std::slice::from_ref(&lone)), None);
        assert_eq!(identity(&[lone, pair]), Some(dir.path().join("me")));
    }
}
