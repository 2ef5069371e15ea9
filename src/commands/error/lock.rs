//! What the lock's errors mean for the user of `imgctl lock`, `build` and
//! `render`: their exit status, the command names in their lines, and the hints
//! (how to get a working pip, the network, a conflict in the pins).

use super::advice::Advice;
use crate::env_vars::IMGCTL_PYTHON;
use crate::lock::resolve::MIN_PIP;
use crate::lock::{LockError, LockFileError};

/// Advice for [`LockError`] and [`LockFileError`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    if let Some(e) = err.downcast_ref::<LockError>() {
        return Some(lock_error(e));
    }
    err.downcast_ref::<LockFileError>().map(file_error)
}

fn lock_error(e: &LockError) -> Advice {
    match e {
        LockError::NoPython { program } => Advice::failure(format!(
            "install Python 3 with pip (Debian/Ubuntu: apt-get install python3-pip), or point {IMGCTL_PYTHON} at one"
        ))
        .with_message(format!(
            "no Python on this host: `{program}` was not found on PATH; imgctl lock resolves with pip"
        )),
        LockError::CannotRunPython { .. } => {
            Advice::failure(format!("point {IMGCTL_PYTHON} at a working python3"))
        }
        LockError::NoPip { program, why } => Advice::failure(format!(
            "install pip (Debian/Ubuntu: apt-get install python3-pip; else {program} -m ensurepip), or point {IMGCTL_PYTHON} at a python3 with pip"
        ))
        .with_message(format!(
            "`{program} -m pip` does not work ({why}); imgctl lock resolves with pip"
        )),
        LockError::OldPip { program, version } => Advice::failure(format!(
            "upgrade it: {program} -m pip install --upgrade pip"
        ))
        .with_message(format!(
            "pip {version} of `{program}` cannot resolve without installing (`pip install --dry-run --report` needs pip {}.{} or newer)",
            MIN_PIP.0, MIN_PIP.1
        )),
        LockError::TempDir { .. }
        | LockError::WriteConstraints { .. }
        | LockError::NoReport { .. }
        | LockError::BadReport(_)
        | LockError::SpawnPip { .. }
        | LockError::WaitPip { .. } => Advice::failure(None),
        LockError::Interrupted => Advice::interrupted(None)
            .with_message("imgctl lock interrupted by Ctrl-C; no lock was written"),
        LockError::Tls { .. } => Advice::failure(
            "behind a TLS-intercepting proxy, give pip its CA: `pip config set global.cert /path/ca.crt` (or PIP_CERT)".to_string(),
        ),
        LockError::Unreachable { .. } => Advice::failure(
            "imgctl lock needs the network to reach the spec's indexes; behind a proxy set HTTPS_PROXY, or resolve through a mirror of PyPI with --pip-index-url URL".to_string(),
        ),
        LockError::Conflict { causes, .. } => Advice::failure(if causes.is_empty() {
            "change the spec's pins so that they agree, then run imgctl lock again".to_string()
        } else {
            format!(
                "the conflict: {}; change the spec's pins so that they agree",
                causes.join("; ")
            )
        }),
        LockError::NoMatch {
            target,
            indexes,
            versions,
            ..
        } => Advice::failure(if versions.is_empty() {
            format!("no release of it publishes a wheel for {target} on {indexes}, or the index did not answer; check the name and version, and rerun with -v to see pip's output")
        } else {
            let tail = versions[versions.len().saturating_sub(8)..].join(", ");
            format!("releases with a fitting wheel: … {tail}; pick one of them")
        }),
        LockError::PipFailed { .. } => Advice::failure(
            "rerun with -v to see pip's command line and full output".to_string(),
        ),
    }
}

fn file_error(e: &LockFileError) -> Advice {
    match e {
        LockFileError::Read { .. }
        | LockFileError::InputLine { .. }
        | LockFileError::Version { .. }
        | LockFileError::NotAPackage { .. }
        | LockFileError::Twice { .. } => Advice::failure(None),
        LockFileError::NoVersion => Advice::failure(None)
            .with_message("no `# lock-version:` line (not written by `imgctl lock`)"),
        LockFileError::NoDigest => Advice::failure(None)
            .with_message("no `# inputs-sha256:` line (not written by `imgctl lock`)"),
    }
}
