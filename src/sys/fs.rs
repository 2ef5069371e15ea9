//! Files, through libc: whether this process may write a path (access(2)),
//! the space free on a file system (statvfs(3)), an exclusive advisory
//! lock (flock(2)), and the one atomic file writer ([`write_atomic`]) every
//! output goes through. Safe wrappers only; what a path is for, and the
//! messages about it, belong to the callers.
use std::ffi::CString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Whether this process may write `path` (access(2) with `W_OK`); false for
/// a path holding a NUL byte.
pub fn writable(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Bytes available to this user on the file system holding `path`
/// (statvfs's `f_bavail * f_frsize`); `None` when the call fails.
pub fn available_bytes(path: &Path) -> Option<u64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

/// Takes `flock(LOCK_EX | LOCK_NB)` on `file`, held until it is closed; the
/// error is the call's errno (`EWOULDBLOCK`: another open file holds it).
pub fn try_lock_exclusive(file: &File) -> std::io::Result<()> {
    // SAFETY: flock on a descriptor `file` owns, open for the whole call; no
    // memory is shared.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Writes the file `path` atomically: `write` fills a temporary sibling
/// (`.imgctl-NAME.XXXXXX.tmp`, mode 0666 less the umask, like
/// `File::create`), given by its path so that writers that open a path
/// (an image encoder, safetensors) can use it; the file is then fsynced and
/// renamed over `path`, and the folder fsynced. A reader sees the old file
/// or the new one, never a part, also when the disk fills or the process
/// dies mid-write; on any error the temporary file is removed and `path` is
/// untouched.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".imgctl-{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    write(tmp.path())?;
    // fsync through our descriptor flushes the inode, whoever wrote it
    // (a writer that reopens the path truncates the same file).
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()
}

/// [`write_atomic`] of `bytes`.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic(path, |tmp| {
        let mut f = std::fs::OpenOptions::new().write(true).open(tmp)?;
        std::io::Write::write_all(&mut f, bytes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_writes_replace_whole_or_not_at_all() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        write_file_atomic(&path, b"first").unwrap();
        write_file_atomic(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        // The mode is the umask's, as File::create gives (0644 under 022).
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        let plain = dir.path().join("plain");
        File::create(&plain).unwrap();
        let want = std::fs::metadata(&plain).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, want);
        // A failing writer leaves the old file and no temporary file.
        let e = write_atomic(&path, |tmp| {
            std::fs::write(tmp, b"par")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "disk full");
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn access_statvfs_and_flock() {
        let dir = tempfile::tempdir().unwrap();
        assert!(writable(dir.path()));
        assert!(!writable(Path::new("/nonexistent/imgctl")));
        assert!(!writable(Path::new("nul\0byte")));
        assert!(available_bytes(dir.path()).is_some());
        assert_eq!(available_bytes(Path::new("/nonexistent/imgctl")), None);
        let path = dir.path().join("lock");
        let a = File::create(&path).unwrap();
        try_lock_exclusive(&a).unwrap();
        let b = File::open(&path).unwrap();
        let e = try_lock_exclusive(&b).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EWOULDBLOCK));
        drop(a);
        try_lock_exclusive(&b).unwrap();
    }
}
