//! The exclusive lock a training run holds on its output directory, so two
//! runs on one `--out` cannot interleave their checkpoints and metrics.
//!
//! The lock is a `flock(LOCK_EX | LOCK_NB)` on `OUT/.imgctl.lock`, taken by
//! the one process that writes `--out` (rank 0) before it reads anything
//! there, and held until the process ends: the kernel releases it when the
//! file is closed, also after SIGKILL, so a crashed run never leaves a stale
//! lock. The holder writes its pid into the file; a second run reads it to
//! name the holder. The file itself stays (removing it would race with a
//! run that has just opened it).
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The lock file's name inside the output directory.
pub const LOCK_FILE: &str = ".imgctl.lock";

/// A held lock on an output directory; dropping it releases the lock.
#[derive(Debug)]
pub struct OutLock {
    /// The open lock file (closing it releases the flock).
    _file: Option<File>,
    /// The lock file's path.
    path: PathBuf,
    /// The output folder, when acquiring the lock created it: a run that
    /// ends before writing anything there takes it away again.
    created: Option<PathBuf>,
    /// Why the file system refused the lock, when it did (no `flock`
    /// support): the run goes on unlocked.
    unlocked: Option<std::io::Error>,
}

impl Drop for OutLock {
    fn drop(&mut self) {
        let Some(dir) = &self.created else { return };
        // Only the lock file in it: the run wrote nothing, so a refused or
        // failed command leaves no empty output folder behind.
        let only_lock = std::fs::read_dir(dir).is_ok_and(|entries| {
            entries
                .filter_map(|e| e.ok())
                .all(|e| e.file_name() == LOCK_FILE)
        });
        if only_lock {
            let _ = std::fs::remove_file(&self.path);
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl OutLock {
    /// Takes the lock on `out` (created when missing). Another live run
    /// holding it is exit 2 naming that run's pid. On a file system without
    /// `flock` support the run goes on unlocked ([`OutLock::unlocked`] says
    /// why, for the caller's warning).
    pub fn acquire(out: &Path) -> anyhow::Result<Self> {
        let path = out.join(LOCK_FILE);
        let cannot = |error: std::io::Error| -> anyhow::Error {
            OutLockError::CannotWrite {
                path: out.to_path_buf(),
                error,
            }
            .into()
        };
        let created = (!out.exists()).then(|| out.to_path_buf());
        std::fs::create_dir_all(out).map_err(cannot)?;
        // Never through a link: in a shared run folder, a planted
        // `.imgctl.lock` link would have the pid written over its target.
        let mut file = crate::sys::fs::open_nofollow(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &path,
        )
        .map_err(cannot)?;
        if let Err(err) = crate::sys::fs::try_lock_exclusive(&file) {
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(held_error(out, &path));
            }
            return Ok(Self {
                _file: None,
                path,
                created,
                unlocked: Some(err),
            });
        }
        // Ours now: record the pid for a second run's message. Only that
        // message needs it, so a failure (a full disk) is left to the run's
        // own write checks.
        let _ = file
            .set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(drop))
            .and_then(|()| writeln!(file, "{}", std::process::id()));
        Ok(Self {
            _file: Some(file),
            path,
            created,
            unlocked: None,
        })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the run holds no lock (the file system refused `flock`), if so.
    pub fn unlocked(&self) -> Option<&std::io::Error> {
        self.unlocked.as_ref()
    }
}

/// The pid the holder wrote into `path`, if it has written it yet.
fn holder_pid(path: &Path) -> Option<u32> {
    let mut text = String::new();
    File::open(path).ok()?.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// Exit 2: another run holds the lock on `out`.
fn held_error(out: &Path, path: &Path) -> anyhow::Error {
    // The holder writes its pid right after locking: give it a moment.
    let mut pid = holder_pid(path);
    for _ in 0..20 {
        if pid.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
        pid = holder_pid(path);
    }
    OutLockError::Held {
        out: out.to_path_buf(),
        pid,
    }
    .into()
}

/// The output directory cannot be locked (usage errors: exit 2).
#[derive(Debug, thiserror::Error)]
pub enum OutLockError {
    /// The output directory or its lock file cannot be created.
    #[error("cannot write to the output directory {}: {error}", .path.display())]
    CannotWrite {
        /// The output directory.
        path: PathBuf,
        /// Why not.
        error: std::io::Error,
    },
    /// Another live run holds the lock.
    #[error("{} is in use by another imgctl run ({})", .out.display(), holder(*.pid))]
    Held {
        /// The output directory.
        out: PathBuf,
        /// The holder's pid, when it has written it.
        pid: Option<u32>,
    },
}

/// The holder of a lock in words: `pid 123` or `pid unknown`.
pub fn holder(pid: Option<u32>) -> String {
    match pid {
        Some(p) => format!("pid {p}"),
        None => "pid unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_the_lock_created_goes_when_nothing_was_written() {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("run");
        drop(OutLock::acquire(&out).unwrap());
        assert!(!out.exists(), "an empty output folder was left behind");
        // With something written, the folder stays.
        let lock = OutLock::acquire(&out).unwrap();
        std::fs::write(out.join("metrics.jsonl"), "{}\n").unwrap();
        drop(lock);
        assert!(out.join("metrics.jsonl").exists());
        // A folder that existed before is never removed.
        let kept = root.path().join("kept");
        std::fs::create_dir(&kept).unwrap();
        drop(OutLock::acquire(&kept).unwrap());
        assert!(kept.is_dir());
    }

    #[test]
    fn a_planted_link_as_the_lock_is_refused_and_its_target_kept() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        std::fs::create_dir(&out).unwrap();
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, "precious\n").unwrap();
        std::os::unix::fs::symlink(&victim, out.join(LOCK_FILE)).unwrap();
        let e = OutLock::acquire(&out).unwrap_err();
        assert!(matches!(
            e.downcast_ref::<OutLockError>(),
            Some(OutLockError::CannotWrite { .. })
        ));
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    }

    #[test]
    fn a_second_lock_names_the_holder_and_a_released_lock_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let first = OutLock::acquire(&out).unwrap();
        assert_eq!(
            std::fs::read_to_string(first.path()).unwrap().trim(),
            std::process::id().to_string()
        );
        // flock locks belong to the open file: a second open conflicts,
        // even in the same process.
        let e = OutLock::acquire(&out).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is in use by another imgctl run (pid {})",
                out.display(),
                std::process::id()
            )
        );
        assert!(
            matches!(
                e.downcast_ref::<OutLockError>(),
                Some(OutLockError::Held { out: o, pid: Some(p) })
                    if *o == out && *p == std::process::id()
            ),
            "{e:?}"
        );
        drop(first);
        OutLock::acquire(&out).unwrap();
    }
}
