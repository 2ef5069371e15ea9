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

/// Whether the file system holding `path` is mounted read-only (statvfs's
/// `ST_RDONLY`); `false` when the call fails.
pub fn read_only_fs(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return false;
    }
    s.f_flag & libc::ST_RDONLY != 0
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

/// Reads the regular file `path` whole, refusing anything else and anything
/// larger than `max` bytes, so that no input can hang or exhaust imgctl:
/// the file is opened with `O_NONBLOCK`, so a FIFO in its place does not
/// block the open (then it is refused, as sockets, devices such as
/// /dev/zero, and folders are); a file over `max` (or one that grows past it
/// while being read) is an error [`is_too_large`] recognises. The errors'
/// texts say what the path is ("is a FIFO, not a regular file").
pub fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    read_whole(file, max)
}

/// The whole of an open regular `file`, at most `max` bytes (also when it
/// grows while being read): [`read_regular`]'s and [`read_private`]'s read.
fn read_whole(file: File, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let too_large = || std::io::Error::other(TooLarge { max });
    let len = file.metadata()?.len();
    if len > max {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Opens `path` with `options`, never through a symbolic link at its last
/// component (`O_NOFOLLOW`): in a folder that someone else can write, a
/// link planted under a name imgctl writes would make it truncate or write
/// any file the user can. A link is a `PermissionDenied` error saying so.
pub fn open_nofollow(options: &mut std::fs::OpenOptions, path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    options
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!(
                        "{} is a symbolic link, which imgctl does not write through (remove it, or use another folder)",
                        path.display()
                    ),
                )
            } else {
                e
            }
        })
}

/// Opens `path` for reading if it is a regular file, without blocking: the
/// open uses `O_NONBLOCK` (a FIFO with no writer would block a plain open
/// forever), and anything but a regular file is an `InvalidInput` error
/// saying what it is ("is a FIFO, not a regular file"). Reads from the
/// returned file block as usual (`O_NONBLOCK` means nothing to a regular
/// file).
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    let what = if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a folder")
    } else if kind.is_fifo() {
        Some("a FIFO")
    } else if kind.is_socket() {
        Some("a socket")
    } else if kind.is_char_device() || kind.is_block_device() {
        Some("a device")
    } else {
        Some("not a file")
    };
    match what {
        Some(what) => Err(Error::new(
            ErrorKind::InvalidInput,
            format!("is {what}, not a regular file"),
        )),
        None => Ok(file),
    }
}

/// Reads `path` whole if it is a private file of this user's, as ssh asks
/// of a private key: opened without following a symbolic link at its last
/// component (`O_NOFOLLOW`) and without blocking (`O_NONBLOCK`), a regular
/// file, owned by the effective user, readable and writable by nobody else
/// (mode 0600 or stricter), and at most `max` bytes. The error's text says
/// which rule the path breaks ("is a symbolic link", "is owned by uid 0,
/// not by you (uid 1000)", "is mode 0644; a private file is 0600").
pub fn read_private(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Error::new(ErrorKind::PermissionDenied, "is a symbolic link")
            } else {
                e
            }
        })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(Error::new(ErrorKind::InvalidInput, "is not a regular file"));
    }
    // SAFETY: geteuid has no failure mode and touches no memory.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!("is owned by uid {}, not by you (uid {me})", meta.uid()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "is mode {:04o}; a private file is 0600",
                meta.mode() & 0o7777
            ),
        ));
    }
    read_whole(file, max)
}

/// Checks that `dir` is a folder of this user's that nobody else can
/// change, as ssh's StrictModes asks of `~/.ssh`: with `follow` false, not
/// a symbolic link itself; a folder; owned by the effective user; and not
/// writable by its group or others. Err: which rule it breaks, as a phrase
/// ("is a symbolic link", "is writable by others (mode 0777)").
pub fn check_private_dir(dir: &Path, follow: bool) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let meta = if follow {
        std::fs::metadata(dir)
    } else {
        std::fs::symlink_metadata(dir)
    }
    .map_err(|e| e.to_string())?;
    if meta.file_type().is_symlink() {
        return Err("is a symbolic link".into());
    }
    if !meta.is_dir() {
        return Err("is not a folder".into());
    }
    // SAFETY: geteuid has no failure mode and touches no memory.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "is owned by uid {}, not by you (uid {me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "is writable by {} (mode {:04o})",
            if meta.mode() & 0o002 != 0 {
                "others"
            } else {
                "its group"
            },
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// [`read_regular`] as UTF-8 text (invalid UTF-8: an `InvalidData` error).
pub fn read_regular_text(path: &Path, max: u64) -> std::io::Result<String> {
    String::from_utf8(read_regular(path, max)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// A file larger than its reader's cap ([`read_regular`]).
#[derive(Debug)]
struct TooLarge {
    max: u64,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "is larger than the {} this file may have",
            human(self.max)
        )
    }
}

impl std::error::Error for TooLarge {}

/// Whether `e` is [`read_regular`]'s "larger than its cap" error.
pub fn is_too_large(e: &std::io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<TooLarge>())
}

/// `n` bytes as KiB, MiB or GiB.
fn human(n: u64) -> String {
    const KIB: u64 = 1024;
    match n {
        n if n >= KIB * KIB * KIB => format!("{:.1} GiB", n as f64 / (KIB * KIB * KIB) as f64),
        n if n >= KIB * KIB => format!("{} MiB", n / (KIB * KIB)),
        n => format!("{} KiB", n.div_ceil(KIB)),
    }
}

/// Writes the file `path` atomically: `write` fills a temporary sibling
/// (`.imgctl-NAME.<random>.tmp`, mode 0666 less the umask, like
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
    fn open_nofollow_refuses_a_link_and_leaves_its_target_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        let link = dir.path().join("lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = open_nofollow(
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true),
            &link,
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        // A plain file opens as usual.
        let plain = dir.path().join("plain");
        open_nofollow(std::fs::OpenOptions::new().write(true).create(true), &plain).unwrap();
        assert!(plain.is_file());
    }

    #[test]
    fn reads_only_regular_files_within_their_cap() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"12345").unwrap();
        assert_eq!(read_regular(&file, 5).unwrap(), b"12345");
        let e = read_regular(&file, 4).unwrap_err();
        assert!(is_too_large(&e), "{e}");
        assert_eq!(e.to_string(), "is larger than the 1 KiB this file may have");
        let e = read_regular(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "is a device, not a regular file");
        let e = read_regular(dir.path(), 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "is a folder, not a regular file");
        // A FIFO with no writer: refused at once, where a plain open blocks.
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = read_regular(&fifo, 1 << 20).unwrap_err();
        assert_eq!(e.to_string(), "is a FIFO, not a regular file");
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        let e = read_regular_text(&file, 16).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }

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
