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
//! `~/.ssh`) comes back as why, which the command layer says in one note;
//! the workstation then makes its own host key as before.
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file the host key goes to inside the container (the entrypoint
/// reads it; `IMGCTL_SSH_HOST_KEY` there names another).
pub const IN_CONTAINER: &str = "/etc/imgctl/ssh_host_ed25519_key";

/// A workstation's host key, ready to place and remembered.
#[derive(Debug)]
pub struct HostKey {
    /// The private key (OpenSSH PEM).
    pub private: Vec<u8>,
    /// The alias the known_hosts line and the `ssh` line name.
    pub alias: String,
    /// Whether `~/.ssh/known_hosts` was changed now (a new line).
    pub remembered_now: bool,
    /// The known_hosts file.
    pub known_hosts: PathBuf,
}

/// The `HostKeyAlias` of workstation `name`: a name no real host has.
pub fn alias(name: &str) -> String {
    format!("{name}.imgctl")
}

fn home() -> Result<PathBuf, String> {
    std::env::var_os(crate::env_vars::HOME)
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
        .ok_or_else(|| "HOME is not set".to_string())
}

/// Workstation `name`'s host key: made on first use, then the same; its
/// public half remembered in `~/.ssh/known_hosts`. Err: why not (a note).
pub fn prepare(name: &str) -> Result<HostKey, String> {
    let home = home()?;
    prepare_in(&home, &state_base(&home), name)
}

/// `$XDG_STATE_HOME` when absolute, else `HOME/.local/state`.
fn state_base(home: &Path) -> PathBuf {
    match std::env::var_os(crate::env_vars::XDG_STATE_HOME).map(PathBuf::from) {
        Some(b) if b.is_absolute() => b,
        _ => home.join(".local/state"),
    }
}

/// The most bytes a host key file may have (an ed25519 key is about 400).
const KEY_MAX: u64 = 64 * 1024;

/// Workstation `name`'s own state folder (made when missing):
/// `$XDG_STATE_HOME/imgctl/workstations/NAME/` (default under
/// `~/.local/state`), which holds its host key and what `up` keeps between
/// containers ([`super::kept`]). Err: why it cannot be used (a note).
pub fn state_folder(name: &str) -> Result<PathBuf, String> {
    state_folder_in(&state_base(&home()?), name)
}

/// [`state_folder`] under the state folder `state`: made 0700 and checked
/// as [`prepare_in`] says (real folders, the caller's, writable by nobody
/// else).
fn state_folder_in(state: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = state.join("imgctl/workstations").join(name);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    crate::sys::fs::check_private_dir(state, true).map_err(|why| {
        format!(
            "the state folder {} {why}; imgctl keeps host keys only in a folder of yours",
            state.display()
        )
    })?;
    for folder in [
        state.join("imgctl"),
        state.join("imgctl/workstations"),
        dir.clone(),
    ] {
        crate::sys::fs::check_private_dir(&folder, false).map_err(|why| {
            format!(
                "{} {why}; imgctl keeps host keys only in a folder of yours that nobody else can write (fix it, or remove it)",
                folder.display()
            )
        })?;
    }
    Ok(dir)
}

/// [`prepare`] with HOME and the state folder given.
///
/// The key is copied into a container that the workstation's user owns, so
/// nothing on the path may be anyone else's (#50 H1, M6): the folders
/// `imgctl/`, `workstations/` and `NAME/` under the state folder are real
/// folders (no symbolic links), the caller's, and writable by nobody else;
/// the key is a regular file of the caller's, mode 0600, opened without
/// following a link; and the `.pub` beside it must be the key's own public
/// half, which is what `known_hosts` pins. A run as root with a user's
/// HOME (sudo) therefore never reads root's files through a link the user
/// planted: the folders are the user's, not root's, and the workstation
/// makes its own host key.
fn prepare_in(home: &Path, state: &Path, name: &str) -> Result<HostKey, String> {
    let dir = state_folder_in(state, name)?;
    let key = dir.join("ssh_host_ed25519_key");
    let public_file = key.with_extension("pub");
    if std::fs::symlink_metadata(&key).is_err() && std::fs::symlink_metadata(&public_file).is_err()
    {
        make_key(&dir, &key, &alias(name))?;
    }
    let refuse = |path: &Path, why: &dyn std::fmt::Display| {
        format!(
            "{} {why}; remove {} and its .pub, and the next start makes a new pair",
            path.display(),
            key.display()
        )
    };
    let private = crate::sys::fs::read_private(&key, KEY_MAX).map_err(|e| refuse(&key, &e))?;
    let derived = openssh_public(&private).map_err(|why| refuse(&key, &why))?;
    if std::fs::symlink_metadata(&public_file).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(refuse(&public_file, &"is a symbolic link"));
    }
    let public = crate::sys::fs::read_regular_text(&public_file, KEY_MAX)
        .map_err(|e| refuse(&public_file, &e))?;
    let public: Vec<&str> = public.split_whitespace().take(2).collect();
    if public.join(" ") != derived {
        return Err(refuse(
            &public_file,
            &"is not the public half of the key beside it",
        ));
    }
    let known_hosts = home.join(".ssh/known_hosts");
    let remembered_now = remember(&known_hosts, &alias(name), &derived)?;
    Ok(HostKey {
        private,
        alias: alias(name),
        remembered_now,
        known_hosts,
    })
}

/// The public line (`ssh-ed25519 BASE64`) of an unencrypted OpenSSH ed25519
/// private key, as `ssh-keygen -y` prints it, derived from the key's seed
/// and checked against the two copies of the public key the file carries
/// (PROTOCOL.key in OpenSSH's sources gives the layout). Err: why the bytes
/// are not such a key.
pub fn openssh_public(private: &[u8]) -> Result<String, String> {
    use base64::Engine as _;
    const BEGIN: &str = "-----BEGIN OPENSSH PRIVATE KEY-----";
    const END: &str = "-----END OPENSSH PRIVATE KEY-----";
    let bad = |what: &str| format!("is not an unencrypted OpenSSH ed25519 key ({what})");
    let text = std::str::from_utf8(private).map_err(|_| bad("not text"))?;
    let body = text
        .split_once(BEGIN)
        .and_then(|(_, rest)| rest.split_once(END))
        .map(|(body, _)| body)
        .ok_or_else(|| bad("no OPENSSH PRIVATE KEY block"))?;
    let body: String = body.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|_| bad("bad base64"))?;
    let mut r = Wire(&raw);
    if r.take(15) != Some(b"openssh-key-v1\0".as_slice()) {
        return Err(bad("no openssh-key-v1 header"));
    }
    if r.string() != Some(b"none".as_slice()) {
        return Err(bad("encrypted"));
    }
    let (_kdf, _options) = (r.string(), r.string());
    if r.u32() != Some(1) {
        return Err(bad("not exactly one key"));
    }
    let blob = r.string().ok_or_else(|| bad("truncated"))?.to_vec();
    let mut p = Wire(r.string().ok_or_else(|| bad("truncated"))?);
    let (check1, check2) = (p.u32(), p.u32());
    if check1.is_none() || check1 != check2 {
        return Err(bad("its check words differ"));
    }
    if p.string() != Some(b"ssh-ed25519".as_slice()) {
        return Err(bad("not ed25519"));
    }
    let public = p.string().ok_or_else(|| bad("truncated"))?;
    let secret = p.string().ok_or_else(|| bad("truncated"))?;
    let (Ok(public), Some(seed)) = (
        <[u8; 32]>::try_from(public),
        secret.get(..32).and_then(|s| <[u8; 32]>::try_from(s).ok()),
    ) else {
        return Err(bad("wrong key sizes"));
    };
    let derived = ed25519_dalek::SigningKey::from_bytes(&seed)
        .verifying_key()
        .to_bytes();
    let mut expected = Vec::new();
    for field in [b"ssh-ed25519".as_slice(), derived.as_slice()] {
        expected.extend_from_slice(&(field.len() as u32).to_be_bytes());
        expected.extend_from_slice(field);
    }
    if derived != public || secret.get(32..) != Some(derived.as_slice()) || blob != expected {
        return Err(bad("its public key is not its private key's"));
    }
    Ok(format!(
        "ssh-ed25519 {}",
        base64::engine::general_purpose::STANDARD.encode(&blob)
    ))
}

/// A reader of SSH's wire encoding (RFC 4251 §5): big-endian `uint32`s and
/// length-prefixed strings; each read is None past the end.
struct Wire<'a>(&'a [u8]);

impl<'a> Wire<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn string(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
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
/// already is; else the text without any other key for `alias` (a key of
/// an earlier imgctl), plus the line. A line that names `alias` beside
/// other hosts keeps them and their key, without `alias` (#50 low).
pub fn known_hosts_with(text: &str, alias: &str, public: &str) -> Option<String> {
    let line = format!("{alias} {public}");
    let hosts_of = |l: &str| -> Vec<String> {
        l.split_whitespace()
            .next()
            .map(|h| h.split(',').map(str::to_string).collect())
            .unwrap_or_default()
    };
    let names_alias = |l: &str| hosts_of(l).iter().any(|h| h == alias);
    if text.lines().any(|l| l.trim() == line)
        && text.lines().filter(|l| names_alias(l)).count() == 1
    {
        return None;
    }
    let mut out = String::new();
    for l in text.lines() {
        if !names_alias(l) {
            out.push_str(l);
            out.push('\n');
            continue;
        }
        let others: Vec<String> = hosts_of(l).into_iter().filter(|h| h != alias).collect();
        if !others.is_empty() {
            let rest = l
                .trim_start()
                .split_once(char::is_whitespace)
                .map_or("", |(_, r)| r);
            out.push_str(&format!("{} {}\n", others.join(","), rest.trim_start()));
        }
    }
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
    // A known_hosts that is a link (to a dotfiles folder) stays one: the
    // file it points at is written (#50 low).
    let target = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?
        }
        _ => path.to_path_buf(),
    };
    let path = target.as_path();
    crate::sys::fs::write_atomic(path, |tmp| {
        std::fs::write(tmp, &new)?;
        std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(mode))
    })
    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(true)
}

/// The private key beside the first `--ssh-key FILE.pub` that has one: the
/// `-i` of the printed `ssh` line (ssh finds only its default names itself).
pub fn identity(given: &[PathBuf]) -> Option<PathBuf> {
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
        // A line naming the alias beside other hosts keeps them and their key.
        let shared = known_hosts_with(
            "gpu1,p.imgctl,10.0.0.5 ssh-ed25519 AAAAgpu\n",
            "p.imgctl",
            "ssh-ed25519 B",
        )
        .unwrap();
        assert_eq!(
            shared,
            "gpu1,10.0.0.5 ssh-ed25519 AAAAgpu\np.imgctl ssh-ed25519 B\n"
        );
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
    /// A made workstation key folder in a fresh HOME: (home, state, dir).
    fn made(name: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let home = tempfile::tempdir().unwrap();
        let state = home.path().join(".local/state");
        prepare_in(home.path(), &state, name).unwrap();
        let dir = state.join("imgctl/workstations").join(name);
        (home, state, dir)
    }

    #[test]
    fn a_host_key_linked_to_another_file_is_never_read() {
        // #50 H1: a link to a root-only file (here: a 0600 file holding a
        // secret) planted as the key is refused, and its bytes go nowhere.
        let (home, state, dir) = made("h1");
        let secret = home.path().join("secret");
        std::fs::write(&secret, "root's secret").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let key = dir.join("ssh_host_ed25519_key");
        std::fs::remove_file(&key).unwrap();
        std::os::unix::fs::symlink(&secret, &key).unwrap();
        let e = prepare_in(home.path(), &state, "h1").unwrap_err();
        assert!(e.contains("is a symbolic link"), "{e}");
        assert!(e.contains("remove"), "{e}");
        assert!(!e.contains("root's secret"), "{e}");
    }

    #[test]
    fn a_key_others_can_read_a_foreign_public_half_or_garbage_is_refused() {
        let (home, state, dir) = made("m");
        let key = dir.join("ssh_host_ed25519_key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = prepare_in(home.path(), &state, "m").unwrap_err();
        assert!(e.contains("is mode 0644; a private file is 0600"), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        // Another pair's public half beside this key: known_hosts would pin
        // a key the workstation does not serve.
        let (_other_home, _, other) = made("other");
        std::fs::copy(
            other.join("ssh_host_ed25519_key.pub"),
            dir.join("ssh_host_ed25519_key.pub"),
        )
        .unwrap();
        let e = prepare_in(home.path(), &state, "m").unwrap_err();
        assert!(e.contains("is not the public half"), "{e}");
        // A file that is no OpenSSH key at all.
        std::fs::write(&key, "not a key").unwrap();
        let e = prepare_in(home.path(), &state, "m").unwrap_err();
        assert!(
            e.contains("is not an unencrypted OpenSSH ed25519 key"),
            "{e}"
        );
    }

    #[test]
    fn a_key_folder_that_is_a_link_or_writable_by_others_is_refused() {
        // #50 M6: the folder, or one above it, is a link, or others can write it.
        let (home, state, dir) = made("f");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = prepare_in(home.path(), &state, "f").unwrap_err();
        assert!(e.contains("is writable by others (mode 0777)"), "{e}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let elsewhere = home.path().join("elsewhere");
        std::fs::rename(state.join("imgctl/workstations"), &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, state.join("imgctl/workstations")).unwrap();
        let e = prepare_in(home.path(), &state, "f").unwrap_err();
        assert!(e.contains("workstations is a symbolic link"), "{e}");
    }

    #[test]
    fn a_key_of_another_user_is_refused() {
        // As root (CI), hand the key to nobody (65534); as another user,
        // chown is refused and there is nothing to try.
        let (home, state, dir) = made("o");
        let key = dir.join("ssh_host_ed25519_key");
        if std::os::unix::fs::chown(&key, Some(65534), None).is_err() {
            return;
        }
        let e = prepare_in(home.path(), &state, "o").unwrap_err();
        assert!(e.contains("is owned by uid 65534, not by you"), "{e}");
    }

    #[test]
    fn the_public_line_derived_from_a_key_is_ssh_keygen_s() {
        let (_home, _, dir) = made("d");
        let private = std::fs::read(dir.join("ssh_host_ed25519_key")).unwrap();
        let written = std::fs::read_to_string(dir.join("ssh_host_ed25519_key.pub")).unwrap();
        let written: Vec<&str> = written.split_whitespace().take(2).collect();
        assert_eq!(openssh_public(&private).unwrap(), written.join(" "));
    }
}
