//! What the engine side's errors mean for the user of `imgctl build` and
//! `verify --image`: their exit status, the flag names in their lines
//! (`--tag`, `--gpus`, `--context`), and the hints (start the engine, choose
//! a context, build the image, log in to the registry, fix a credential helper).

use super::advice::Advice;
use crate::docker::endpoint::Origin;
use crate::docker::run::GpuRequestRejected;
use crate::docker::transport::TooMuch;
use crate::docker::{DockerError, PushFailure};

/// Advice for [`DockerError`] and [`GpuRequestRejected`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    if let Some(e) = err.downcast_ref::<DockerError>() {
        return Some(docker_error(e));
    }
    // A bollard error in a chain (`inspecting image …: error reading a body
    // from connection`) whose cause is the transport's refusal.
    let refused = err
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
        .and_then(|inner| inner.downcast_ref::<TooMuch>());
    if let Some(too_much) = refused {
        return Some(engine_too_much(too_much));
    }
    err.downcast_ref::<GpuRequestRejected>()
        .map(|_| Advice::failure(None))
}

fn docker_error(e: &DockerError) -> Advice {
    let usage = |hint: &str| Advice::usage(hint.to_string());
    match e {
        DockerError::BadApiVersion { .. } => usage(
            "set DOCKER_API_VERSION to MAJOR.MINOR (e.g. 1.41), or unset it to negotiate",
        ),
        DockerError::ApiVersionRefused { .. } => usage(
            "set DOCKER_API_VERSION to an API version the engine speaks (`docker version` shows its range), or unset it to negotiate",
        ),
        DockerError::Connect { context: None, .. } => Advice::failure(
            "start the engine (`sudo systemctl start docker`, or `scripts/setup.sh`), or Podman's service (`systemctl start podman.socket`, or `systemctl --user start podman.socket` rootless), or point DOCKER_HOST at a running one".to_string(),
        ),
        DockerError::Connect {
            context: Some(context),
            ..
        } => Advice::failure(format!(
            "check that the engine of context `{context}` runs (`docker --context {context} version`), or choose another with --context NAME (`docker context ls` lists them)"
        )),
        DockerError::EngineTooMuch(too_much) => engine_too_much(too_much),
        DockerError::AddressUnsupported { .. } | DockerError::ContextUnsupported { .. } => usage(
            "imgctl reaches engines over unix://, tcp:// and http:// only: choose another context (--context NAME, `docker context ls`), or forward a remote engine's socket (`ssh -NL /tmp/docker.sock:/var/run/docker.sock HOST`, then DOCKER_HOST=unix:///tmp/docker.sock)",
        ),
        DockerError::AddressInvalid {
            from_host_env: true,
            ..
        } => usage(
            "set DOCKER_HOST to unix:///PATH/TO/docker.sock or tcp://HOST:PORT (a port from 1 to 65535), or unset it to use the local socket",
        ),
        DockerError::AddressInvalid {
            context: Some(context),
            ..
        } => Advice::usage(format!(
            "fix its address (`docker context update {context} --docker host=tcp://HOST:PORT`), or choose another with --context NAME"
        )),
        DockerError::AddressInvalid { .. } => {
            usage("an engine address is unix:///PATH/TO/docker.sock or tcp://HOST:PORT (a port from 1 to 65535)")
        }
        DockerError::UnknownContext {
            name,
            origin,
            known,
        } => unknown_context(name, origin, known),
        DockerError::ContextInvalid { name, .. } => Advice::failure(format!(
            "recreate it (`docker context rm {name}`, then `docker context create {name} --docker host=…`), or choose another with --context NAME"
        )),
        DockerError::Config { .. } => Advice::failure(
            "fix the file's JSON, or point DOCKER_CONFIG at a folder with a valid config.json".to_string(),
        ),
        DockerError::CredentialHelper {
            program, server, ..
        } => Advice::failure(format!(
            "run `echo {server} | {program} get` to see what the helper says, or log in again with `docker login {server}`"
        )),
        DockerError::CredentialHelperReplyTooLarge {
            program, server, ..
        } => Advice::failure(format!(
            "run `echo {server} | {program} get | wc -c` to see how much it prints (a reply is one small {{\"Username\",\"Secret\"}} object), or change credsStore / credHelpers in the docker config"
        )),
        DockerError::CredentialHelperTimeout {
            program, server, ..
        } => Advice::failure(format!(
            "run `echo {server} | {program} get` to see whether it waits (for a locked keychain, a prompt), or change credsStore / credHelpers in the docker config"
        )),
        DockerError::CredentialHelperRun { program, .. } => Advice::failure(format!(
            "install {program} on PATH, or change credsStore / credHelpers in the docker config"
        )),
        DockerError::InvalidTag { reference, why } => usage(crate::image_ref::GRAMMAR)
            .with_message(format!("invalid --tag '{}': {why}", reference.escape_debug())),
        DockerError::TagWithDigest { reference } => usage("use NAME[:TAG], e.g. `--tag imgctl/cu124:dev`")
            .with_message(format!(
                "invalid --tag '{reference}': a tag names no @sha256: digest (the build makes the image, and so its digest)"
            )),
        DockerError::Push(push) => Advice::failure(push_hint(push)),
        DockerError::ImageNotFound { .. } | DockerError::NoImageForContainer { .. } => {
            // The engine that answered, by name (#53 F21: Podman through
            // DOCKER_HOST was told to run `docker images`).
            let engine = crate::docker::engine::connected_product().unwrap_or_default();
            Advice::usage(format!(
                "this {engine} engine has no image of that name: build it with `imgctl build`, or check the tag with `{} images`",
                engine.cli()
            ))
        }
        DockerError::InvalidImageReference { .. } => usage(
            "an image is NAME[:TAG] or NAME@sha256:DIGEST, in lower case, e.g. imgctl/cu124:latest",
        ),
        DockerError::Timeout { .. } => Advice::failure(
            "raise --check-timeout, or look for a hung GPU (nvidia-smi, dmesg)".to_string(),
        ),
        DockerError::Interrupted { .. } | DockerError::Signalled { .. } => {
            Advice::interrupted(None)
        }
        DockerError::SignalHandler { .. }
        | DockerError::InspectImage { .. }
        | DockerError::CreateContainer { .. }
        | DockerError::StartContainer { .. }
        | DockerError::WaitContainer { .. }
        | DockerError::WaitStreamClosed
        | DockerError::Logs { .. }
        | DockerError::RemoveContainer { .. }
        | DockerError::InspectContainer { .. }
        | DockerError::Exec { .. }
        | DockerError::ListContainers { .. }
        | DockerError::AuthNotBase64 { .. }
        | DockerError::AuthNotUtf8 { .. }
        | DockerError::AuthNotUserPassword { .. }
        | DockerError::CredentialHelperReply { .. }
        | DockerError::ContextPath { .. }
        | DockerError::ContextDuplicate { .. } => Advice::failure(None),
    }
}

/// The engine sent more than imgctl reads: a failure whose hint asks what
/// answers at the address.
pub(super) fn engine_too_much(too_much: &TooMuch) -> Advice {
    let address = &too_much.address;
    Advice::failure(format!(
        "check that {address} is a Docker engine and nothing else answers there (`docker -H {address} version`), and that no proxy in between is broken"
    ))
}

/// An unknown context: a usage error (exit 2) listing the known ones, worded
/// for the setting that named it.
fn unknown_context(name: &str, origin: &Origin, known: &[String]) -> Advice {
    let name = crate::error::printable(name);
    let known = known.join(", ");
    let create = format!("or create it with `docker context create {name} --docker host=unix:///var/run/docker.sock`");
    match origin {
        Origin::Chosen => Advice::usage(format!("pass one of them to --context, {create}"))
            .with_message(format!(
                "--context {name}: no such Docker context; the contexts are: {known}"
            )),
        Origin::ContextEnv => Advice::usage(format!(
            "set DOCKER_CONTEXT to one of them or unset it, {create}"
        )),
        Origin::CurrentContext(_) => Advice::usage(format!(
            "choose one with `docker context use NAME` or --context NAME, {create}"
        )),
        Origin::HostEnv | Origin::Default | Origin::Podman(_) => {
            Advice::usage(format!("choose one with --context NAME, {create}"))
        }
    }
}

/// The hint of a refused push: where its credentials came from, or that
/// there were none.
fn push_hint(push: &PushFailure) -> String {
    let (registry, name, config) = (&push.registry, &push.name, &push.config);
    let reachable = format!("check that {registry} is reachable from the engine");
    match (push.had_credentials, &push.helper) {
        (true, Some(helper)) => {
            format!("{reachable} and that the credentials {helper} gives for it may push {name}")
        }
        (true, None) => {
            format!("{reachable} and that the credentials for it in {config} may push {name}")
        }
        (false, Some(helper)) => format!(
            "{helper} (named in {config}) has no credentials for {registry}; log in with `docker login {registry}`"
        ),
        (false, None) => format!(
            "no credentials for {registry} in {config}; log in with `docker login {registry}` or add an `auths` entry"
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_engines_error_answer_names_the_engine_not_docker() {
        let err = anyhow::Error::new(bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message: "unresolvable CDI devices nvidia.com/gpu=all".into(),
        })
        .context("starting the container");
        let text = super::super::render_error(&err);
        assert_eq!(
            text,
            "error: starting the container\n  caused by: the engine answered 500: unresolvable CDI devices nvidia.com/gpu=all\n"
        );
        assert_eq!(
            super::super::status_of(&err),
            crate::error::ExitStatus::Failure
        );
        // A line that quotes the engine's answer in its own words.
        let quoted = bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message: "rootlessport cannot expose privileged port 80".into(),
        };
        let err = anyhow::anyhow!("starting the container of img: {quoted}");
        assert_eq!(
            super::super::render_error(&err),
            "error: starting the container of img: the engine answered 500: rootlessport cannot expose privileged port 80\n"
        );
    }
}
