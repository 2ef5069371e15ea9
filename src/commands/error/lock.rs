//! What the lock's errors mean for the user of `imgctl lock`, `build` and
//! `render`: their exit status, the command names in their lines, and the hints
//! (how to install uv, the network, a conflict in the pins).

use super::advice::Advice;
use crate::image::lock::uv::{MIN_UV, UV_VERSION};
use crate::image::lock::{LockError, LockFileError};

/// Advice for [`LockError`] and [`LockFileError`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    if let Some(e) = err.downcast_ref::<LockError>() {
        return Some(lock_error(e));
    }
    err.downcast_ref::<LockFileError>().map(file_error)
}

/// How to install the uv imgctl locks with.
fn install_uv() -> String {
    let venv = crate::sys::venv::candidates().last().map_or_else(
        || "~/.cache/imgctl/venv-torch-2.7.0".to_string(),
        |v| v.display().to_string(),
    );
    format!("install it: pip install uv=={UV_VERSION}, or run scripts/setup.sh full, which installs it into {venv}; IMGCTL_VENV=DIR names another venv")
}

fn lock_error(e: &LockError) -> Advice {
    match e {
        LockError::NoUv { tried } => Advice::missing_tool(install_uv()).with_message(format!(
            "uv was not found ({}); imgctl lock resolves with uv",
            tried.join(", ")
        )),
        LockError::CannotRunUv { .. } => Advice::missing_tool(install_uv()),
        LockError::OldUv { program, version } => Advice::missing_tool(install_uv()).with_message(
            format!(
                "uv {version} (`{program}`) is too old for imgctl lock: it needs uv {}.{} or newer",
                MIN_UV.0, MIN_UV.1
            ),
        ),
        LockError::NoPlatform { .. } => Advice::failure(
            "base the spec on a distribution with glibc 2.17 or newer (the oldest manylinux platform uv knows)".to_string(),
        ),
        LockError::TempDir { .. }
        | LockError::WriteConstraints { .. }
        | LockError::SpawnUv { .. }
        | LockError::WaitUv { .. } => Advice::failure(None),
        LockError::BadOutput(_) => Advice::failure(format!(
            "rerun with -v to see uv's command line; imgctl is tested with uv {UV_VERSION}"
        )),
        LockError::Interrupted => Advice::interrupted(None)
            .with_message("imgctl lock interrupted by Ctrl-C; no lock was written"),
        LockError::Tls { .. } => Advice::failure(
            "behind a TLS-intercepting proxy, point SSL_CERT_FILE at a CA bundle that holds its CA (uv reads it), or set UV_NATIVE_TLS=1 to use the system's store".to_string(),
        ),
        LockError::Unreachable { .. } => Advice::failure(
            "imgctl lock needs the network to reach the spec's indexes; behind a proxy set HTTPS_PROXY, or resolve through a mirror of PyPI with --pip-index-url URL".to_string(),
        ),
        LockError::Conflict { .. } => Advice::failure(
            "change the spec's pins so that they agree, then run imgctl lock again".to_string(),
        ),
        LockError::NoMatch {
            target, indexes, ..
        } => Advice::failure(format!(
            "no release of it publishes a wheel for {target} on {indexes}; check the name and version, and rerun with -v to see uv's output"
        )),
        LockError::TorchSet { .. } => Advice::failure(
            "the image's torch layer installs torch's set from torch's index alone: pin the named package to a version that index serves".to_string(),
        ),
        LockError::UvFailed { .. } => Advice::failure(
            "rerun with -v to see uv's command line and full output".to_string(),
        ),
    }
}

fn file_error(e: &LockFileError) -> Advice {
    match e {
        LockFileError::Read { .. }
        | LockFileError::InputLine { .. }
        | LockFileError::Version { .. }
        | LockFileError::NotAPackage { .. }
        | LockFileError::Step { .. }
        | LockFileError::NoStep { .. }
        | LockFileError::NoHash { .. }
        | LockFileError::Twice { .. } => Advice::failure(None),
        LockFileError::NoVersion => Advice::failure(None)
            .with_message("no `# lock-version:` line (not written by `imgctl lock`)"),
        LockFileError::NoDigest => Advice::failure(None)
            .with_message("no `# inputs-sha256:` line (not written by `imgctl lock`)"),
    }
}

#[cfg(test)]
mod tests {
    use crate::commands::error::{render_error, status_of};
    use crate::error::ExitStatus;
    use crate::image::lock::LockError;

    /// The error line, the hint and the exit status the user gets; the line
    /// must be the error's own text (uv's failures keep their words).
    fn message(e: LockError) -> (String, String, ExitStatus) {
        let own = e.to_string();
        let e = anyhow::Error::from(e);
        let text = render_error(&e);
        let (line, hint) = text.split_once("\n\nhint: ").unwrap();
        assert_eq!(line.strip_prefix("error: ").unwrap(), own);
        (own, hint.trim_end().to_string(), status_of(&e))
    }

    #[test]
    fn uvs_failures_are_one_line_with_what_to_do_about_them() {
        let idx = "https://pypi.org/simple";
        let (m, h, s) = message(LockError::Unreachable {
            indexes: idx.into(),
            cause: "tunnel error: failed to create underlying connection: tcp connect error: Connection refused (os error 111)".into(),
        });
        assert_eq!(m, "cannot reach https://pypi.org/simple: tunnel error: failed to create underlying connection: tcp connect error: Connection refused (os error 111)");
        assert!(h.contains("HTTPS_PROXY"), "{h}");
        assert_eq!(s, ExitStatus::Failure);

        let (_, h, s) = message(LockError::Conflict {
            explanation: "Because referencing==0.36.2 depends on attrs>=22.2.0 and you require referencing==0.36.2, we can conclude that you require attrs>=22.2.0. And because you require attrs==21.4.0, we can conclude that your requirements are unsatisfiable.".into(),
        });
        assert!(h.contains("pins so that they agree"), "{h}");
        assert_eq!(s, ExitStatus::Failure);

        let target = "CPython 3.10 on linux_x86_64 glibc 2.35, binary wheels only";
        for what in ["six==9.9", "numpy==1.21.0", "nonexistent-pkg-zzqq"] {
            let (m, h, s) = message(LockError::NoMatch {
                what: what.into(),
                target: target.into(),
                indexes: idx.into(),
            });
            assert_eq!(m, format!("uv finds no {what} for {target}"));
            assert!(h.contains(idx), "{h}");
            assert_eq!(s, ExitStatus::Failure);
        }

        let (_, h, s) = message(LockError::Tls {
            indexes: idx.into(),
            cause: "invalid peer certificate: UnknownIssuer".into(),
        });
        assert!(h.contains("SSL_CERT_FILE"), "{h}");
        assert_eq!(s, ExitStatus::Failure);

        let (m, _, s) = message(LockError::UvFailed {
            code: Some(2),
            last: "something odd".into(),
        });
        assert_eq!(m, "uv failed (exit 2): something odd");
        assert_eq!(s, ExitStatus::Failure);
    }
}
