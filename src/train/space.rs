//! Disk space for a training run: what its files take, what the output
//! directory's file system has free, and a full disk as one line with the
//! space needed (not the I/O error's debug text from deep in a writer).
//!
//! A run checks before its first step that its output directory has room
//! for one checkpoint and the final model ([`preflight`]); a disk that fills
//! up later ([`explain_disk_full`]) names what was being written and how
//! much a checkpoint needs.
use std::path::{Path, PathBuf};

/// Bytes of one checkpoint of a model with `params` parameters: fp32
/// weights, fp32 EMA weights and the two fp32 AdamW moments (16 bytes per
/// parameter), plus headers and the small JSON files (1 % and 64 KiB).
pub fn checkpoint_bytes(params: u64) -> u64 {
    let tensors = 16 * params;
    tensors + tensors / 100 + (64 << 10)
}

/// Bytes a run needs free before its first step: one more checkpoint (a new
/// one is written before the oldest is pruned) and the final diffusers
/// model folder (fp32 EMA weights, 4 bytes per parameter).
pub fn run_bytes(params: u64) -> u64 {
    checkpoint_bytes(params) + 4 * params + params / 25
}

/// Bytes available to this user on the file system holding `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    crate::sys::fs::available_bytes(path)
}

/// Whether an I/O error means the disk (or the user's quota) is full.
pub fn is_full(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Whether any error in the chain is a full disk (a plain I/O error or one
/// wrapped by the safetensors writer).
pub fn chain_is_full(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return is_full(io);
        }
        matches!(
            e.downcast_ref::<safetensors::SafeTensorError>(),
            Some(safetensors::SafeTensorError::IoError(io)) if is_full(io)
        )
    })
}

/// `12.3 MB`.
pub fn human_bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.1} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.1} kB", n / 1e3)
    } else {
        format!("{n} B")
    }
}

/// Free space in words (`3.1 MB are free`; `free` from [`free_bytes`]).
pub fn free_words(free: Option<u64>) -> String {
    match free {
        Some(free) => format!("{} are free", human_bytes(free)),
        None => "the free space is unknown".into(),
    }
}

/// Exit 1 before the first step when `out`'s file system lacks room for
/// [`run_bytes`]: the run would fail at its first checkpoint.
pub fn preflight(out: &Path, params: u64) -> anyhow::Result<()> {
    let need = run_bytes(params);
    match free_bytes(out) {
        Some(free) if free < need => Err(SpaceError::NotEnough {
            path: out.to_path_buf(),
            free,
            need,
            checkpoint: checkpoint_bytes(params),
        }
        .into()),
        _ => Ok(()),
    }
}

/// A full disk in `err` becomes one line (exit 1): what was being written
/// (the error's outermost context) and a hint with the space a checkpoint
/// of `params` parameters needs and what is free. Other errors pass.
pub fn explain_disk_full(err: anyhow::Error, out: &Path, params: u64) -> anyhow::Error {
    if !chain_is_full(&err) {
        return err;
    }
    SpaceError::DiskFull {
        what: what(&err),
        out: out.to_path_buf(),
        checkpoint: checkpoint_bytes(params),
        free: free_bytes(out),
    }
    .into()
}

/// The outermost message of `err`, as a clause (`writing …`).
fn what(err: &anyhow::Error) -> String {
    let top = err.to_string();
    let mut chars = top.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => "writing".into(),
    }
}

/// No room for a run's files (runtime failures: exit 1).
#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    /// Too little free space before the first step.
    #[error("not enough free space in {}: {} are free, the run needs about {} (a checkpoint of {} and the final model)", .path.display(), human_bytes(*.free), human_bytes(*.need), human_bytes(*.checkpoint))]
    NotEnough {
        /// The output directory.
        path: PathBuf,
        /// Bytes free there.
        free: u64,
        /// Bytes the run needs ([`run_bytes`]).
        need: u64,
        /// Bytes of one checkpoint.
        checkpoint: u64,
    },
    /// The disk filled up while the run wrote something.
    #[error("no space left on the device while {what}")]
    DiskFull {
        /// What was being written, as a clause (`writing …`).
        what: String,
        /// The output directory.
        out: PathBuf,
        /// Bytes of one checkpoint.
        checkpoint: u64,
        /// Bytes free there, when known.
        free: Option<u64>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_anywhere_in_the_chain_is_one_line() {
        let enospc = || std::io::Error::from_raw_os_error(libc::ENOSPC);
        let deep = anyhow::Error::from(safetensors::SafeTensorError::IoError(enospc()))
            .context("writing safetensors x/model.safetensors")
            .context("writing the checkpoint of step 3 under x");
        let e = explain_disk_full(deep, Path::new("/"), 1_000_000);
        assert_eq!(
            e.to_string(),
            "no space left on the device while writing the checkpoint of step 3 under x"
        );
        assert_eq!(e.chain().count(), 1, "no debug text below it");
        // What the hint needs: the size of one checkpoint, and where.
        assert!(
            matches!(
                e.downcast_ref::<SpaceError>(),
                Some(SpaceError::DiskFull { out, checkpoint, .. })
                    if out == Path::new("/") && *checkpoint == checkpoint_bytes(1_000_000)
            ),
            "{e:?}"
        );
        // Other errors pass unchanged.
        let other = anyhow::Error::from(std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(explain_disk_full(other, Path::new("/"), 1)
            .downcast_ref::<SpaceError>()
            .is_none());
        assert!(chain_is_full(
            &anyhow::Error::from(enospc()).context("metrics")
        ));
    }

    #[test]
    fn preflight_needs_a_checkpoint_and_the_model() {
        assert_eq!(checkpoint_bytes(1_000_000), 16_160_000 + 65_536);
        assert!(preflight(Path::new("/"), 1).is_ok());
        let e = preflight(Path::new("/"), u64::MAX / 64).unwrap_err();
        assert!(
            e.to_string().starts_with("not enough free space in /: "),
            "{e}"
        );
    }
}
