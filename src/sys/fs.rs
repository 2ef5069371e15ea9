//! Files, through libc: whether this process may write a path (access(2)),
//! the space free on a file system (statvfs(3)), and an exclusive advisory
//! lock (flock(2)). Safe wrappers only; what a path is for, and the messages
//! about it, belong to the callers.
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

#[cfg(test)]
mod tests {
    use super::*;

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
