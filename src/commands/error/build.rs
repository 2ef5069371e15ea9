//! What a failed build means for the user of `imgctl build`: the step and
//! its exit code in one line, the build secret it lacked, the base image it
//! could not pull, and the hints (`--builder`, `--ca-cert-secret`,
//! `--base-image`, `-v`).

use super::advice::Advice;
use crate::commands::build::progress::cut;
use crate::docker::build::BuildError;

/// Advice for [`BuildError`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    err.downcast_ref::<BuildError>().map(build_error)
}

fn build_error(e: &BuildError) -> Advice {
    match e {
        BuildError::StepFailed {
            n,
            total,
            instruction,
            message,
            exit_code,
            ..
        } => {
            let instruction = cut(instruction, 300);
            if let Some(id) = crate::docker::build::missing_secret(message) {
                return Advice::failure(format!(
                    "imgctl serves one build secret, `{}`, when given --ca-cert-secret FILE (the engine said: {message})",
                    crate::image::render::CA_CERT_SECRET_ID
                ))
                .with_message(format!(
                    "build failed at step {n}/{total}: it needs the build secret `{id}`, which this build does not have: {instruction}"
                ));
            }
            let (code, hint) = match exit_code {
                Some(c) => (
                    format!(" with exit code {c}"),
                    "the step's last output lines are above; rerun with -v for the full build log"
                        .to_string(),
                ),
                None => (
                    String::new(),
                    format!("the engine said: {message}; rerun with -v for the full build log"),
                ),
            };
            Advice::failure(hint).with_message(format!(
                "build failed at step {n}/{total}{code}: {instruction}"
            ))
        }
        BuildError::BaseUnavailable { .. } => Advice::failure(
            "imgctl needs no registry for a base the engine already has: pass --base-image IMAGE with one `docker images` lists (or build or `docker load` it first)".to_string(),
        ),
        BuildError::BuildKitUnsupported { .. } => Advice::usage(
            "build with --builder classic (or auto), and --ca-cert instead of --ca-cert-secret"
                .to_string(),
        ),
        BuildError::BuildKitOnPodman => Advice::usage(
            "build with --builder classic (or auto; unset DOCKER_BUILDKIT), and --ca-cert instead of --ca-cert-secret, or build on a Docker engine"
                .to_string(),
        ),
        BuildError::BadDockerBuildkit { .. } => Advice::usage(
            "set DOCKER_BUILDKIT=1 (BuildKit) or 0 (classic), or unset it (the docker CLI refuses other values too)"
                .to_string(),
        ),
        // The engine side's advice (commands/error/docker.rs).
        BuildError::TooMuch(too_much) => super::docker::engine_too_much(too_much),
        BuildError::Engine(message) => Advice::failure(
            "check the base image exists on the engine (no registry is needed for a local base; see --base-image)".to_string(),
        )
        .with_message(format!("the build failed: {message}")),
    }
}
