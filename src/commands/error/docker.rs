//! What the engine side's errors mean for the user of `imgctl build` and
//! `verify --image`: their exit status, the flag names in their lines
//! (`--tag`), and the hints (start the engine, build the image, log
//! in to the registry).

use super::advice::Advice;
use crate::docker::run::GpuRequestRejected;
use crate::docker::DockerError;

/// Advice for [`DockerError`] and [`GpuRequestRejected`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    if let Some(e) = err.downcast_ref::<DockerError>() {
        return Some(docker_error(e));
    }
    err.downcast_ref::<GpuRequestRejected>()
        .map(|_| Advice::failure(None))
}

fn docker_error(e: &DockerError) -> Advice {
    let usage = |hint: &str| Advice::usage(hint.to_string());
    match e {
        DockerError::Connect { .. } => Advice::failure(
            "start the engine (`sudo systemctl start docker`, or `scripts/setup.sh`), or point DOCKER_HOST at a running one".to_string(),
        ),
        DockerError::InvalidTag { reference, why } => usage(crate::reference::GRAMMAR)
            .with_message(format!("invalid --tag '{}': {why}", reference.escape_debug())),
        DockerError::TagWithDigest { reference } => usage("use NAME[:TAG], e.g. `--tag imgctl/cu124:dev`")
            .with_message(format!(
                "invalid --tag '{reference}': a tag names no @sha256: digest (the build makes the image, and so its digest)"
            )),
        DockerError::Push {
            registry,
            name,
            config,
            had_credentials,
            ..
        } => Advice::failure(if *had_credentials {
            format!("check that {registry} is reachable from the engine and that the credentials for it in {config} may push {name}")
        } else {
            format!(
                "no credentials for {registry} in {config}; log in with `docker login {registry}` or add an `auths` entry"
            )
        }),
        DockerError::ImageNotFound { .. } => {
            usage("build it with `imgctl build`, or check the tag with `docker images`")
        }
        DockerError::NoImageForContainer { .. } => {
            usage("build it with `imgctl build`, or check `docker images`")
        }
        DockerError::InvalidImageReference { .. } => usage(
            "an image is NAME[:TAG] or NAME@sha256:DIGEST, in lower case, e.g. imgctl/pytorch:2.7.0-cu124",
        ),
        DockerError::Timeout { .. } => Advice::failure(
            "raise --check-timeout, or look for a hung GPU (nvidia-smi, dmesg)".to_string(),
        ),
        DockerError::Interrupted { .. } => Advice::interrupted(None),
        DockerError::SignalHandler { .. }
        | DockerError::InspectImage { .. }
        | DockerError::CreateContainer { .. }
        | DockerError::StartContainer { .. }
        | DockerError::WaitContainer { .. }
        | DockerError::WaitStreamClosed
        | DockerError::Logs { .. }
        | DockerError::RemoveContainer { .. }
        | DockerError::AuthNotBase64 { .. }
        | DockerError::AuthNotUtf8 { .. }
        | DockerError::AuthNotUserPassword { .. }
        | DockerError::CredentialHelper { .. }
        | DockerError::ContextPath { .. }
        | DockerError::ContextDuplicate { .. } => Advice::failure(None),
    }
}
