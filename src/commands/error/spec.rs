//! What the spec and render side's errors mean for the user: spec loading
//! ([`SpecError`]), rendering ([`RenderError`], [`CaError`]), image
//! references ([`ImageRefError`]) and environment variables ([`EnvError`]).
//! Every one of them is bad input (exit 2) but a bug in the bundled template
//! or the context (exit 1). The flag names and the hints live here.
use super::advice::Advice;
use crate::env_vars::EnvError;
use crate::image::render::ca::{CaError, MAX_CA_CERT_BYTES};
use crate::image::render::RenderError;
use crate::image::specs::{problems_message, Mention, Problem, SpecError};
use crate::image_ref::{ImageRefError, Role, GRAMMAR};

/// The hint of a spec file that cannot be used as one.
const SPEC_FILE_HINT: &str = "--spec takes a YAML spec file; see examples/custom-spec.yaml";
/// The hint of a CA certificate file that cannot be read.
const CA_FILE_HINT: &str = "pass a PEM certificate file, e.g. /etc/ssl/certs/ca-certificates.crt";

/// The advice for `err` when it is one of this area's errors.
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    if let Some(e) = err.downcast_ref::<SpecError>() {
        return Some(spec(e));
    }
    if let Some(e) = err.downcast_ref::<RenderError>() {
        return Some(render(e));
    }
    if let Some(e) = err.downcast_ref::<CaError>() {
        return Some(ca(e));
    }
    if let Some(e) = err.downcast_ref::<ImageRefError>() {
        return Some(reference(e));
    }
    if let Some(e) = err.downcast_ref::<EnvError>() {
        return Some(env(e));
    }
    None
}

fn spec(e: &SpecError) -> Advice {
    match e {
        SpecError::Unreadable { .. } | SpecError::IsDirectory { .. } | SpecError::NotUtf8 { .. } => {
            Advice::usage(SPEC_FILE_HINT.to_string())
        }
        SpecError::TooLarge { .. } => Advice::usage(
            "a spec lists pins and names, a few KiB at most; check that --spec names the right file"
                .to_string(),
        ),
        SpecError::UnknownCuda { cuda, valid } => Advice::usage(
            "`imgctl specs` lists the bundled profiles; --spec FILE takes a spec of your own"
                .to_string(),
        )
        .with_message(format!(
            "unknown --cuda '{cuda}': no bundled profile for it (valid: {valid})"
        )),
        SpecError::Empty { .. } => Advice::usage(
            "a spec is a YAML mapping of fields; examples/custom-spec.yaml shows every field"
                .to_string(),
        ),
        SpecError::Problems { origin, problems } => Advice::usage(
            "fix the fields above; examples/custom-spec.yaml shows every field, and `imgctl specs` lists the bundled profiles"
                .to_string(),
        )
        .with_message(problems_message(origin, problems, problem_line)),
    }
}

/// One problem's line, with the flag or command its remedy names.
fn problem_line(p: &Problem) -> String {
    let message = match &p.mention {
        None => return p.to_string(),
        Some(Mention::TemplateNeedsSpecFile) => {
            "bundled specs use the bundled template; only a spec file (--spec) may name its own"
                .to_string()
        }
        Some(Mention::LockNeedsSpecFile) => {
            "bundled specs use their bundled lock (images/<name>.lock); only a spec file (--spec) may name its own"
                .to_string()
        }
        Some(Mention::LockNotLockFile { value }) => format!(
            "'{value}' does not end in .lock (a lock file is written by `imgctl lock`, not a requirements file)"
        ),
    };
    Problem {
        message,
        ..p.clone()
    }
    .to_string()
}

fn render(e: &RenderError) -> Advice {
    match e {
        RenderError::NoWheel { .. } | RenderError::TemplateUnreadable { .. } => {
            Advice::usage(None)
        }
        RenderError::UserTemplate(_) => Advice::usage(
            "every variable a template uses must exist; the bundled images/workstation.Dockerfile.j2 shows them all"
                .to_string(),
        ),
        RenderError::BundledTemplate(_) | RenderError::ContextUnserializable { .. } => {
            Advice::failure(None)
        }
        RenderError::LineTooLong { .. } => Advice::usage(
            "shorten the spec values (or the template text) that land on that line".to_string(),
        ),
        RenderError::ControlCharacter { path, ch } => {
            let parts: Vec<&str> = path.iter().map(String::as_str).collect();
            let field = match parts.as_slice() {
                ["base_image"] => "the base image (`base_image` or --base-image)".to_string(),
                ["pip_index_url"] => "--pip-index-url".to_string(),
                _ => crate::image::render::field_name(path),
            };
            Advice::usage(
                "every value that reaches the Dockerfile must be one line of text without control characters; remove it (or rename the file)"
                    .to_string(),
            )
            .with_message(format!(
                "{field} contains the control character {} and cannot be written into a Dockerfile",
                crate::image::render::describe_char(*ch)
            ))
        }
        RenderError::PipIndexUrlInvalid { masked } => {
            Advice::usage("e.g. --pip-index-url https://pypi.example.com/simple".to_string())
                .with_message(format!(
                    "invalid --pip-index-url '{masked}': expected an http(s) URL without spaces or quotes"
                ))
        }
        RenderError::PipIndexUrlCredentials { masked } => Advice::usage(
            "pass the URL without them: pip reads an index's credentials from ~/.netrc or the keyring (on the host, for `imgctl lock`); for a build use a mirror that needs none from the build network, or a template of your own that mounts a ~/.netrc as a BuildKit build secret"
                .to_string(),
        )
        .with_message(format!(
            "--pip-index-url '{masked}' contains credentials (user or password before '@'), which would be stored in the image's history and labels"
        )),
    }
}

fn ca(e: &CaError) -> Advice {
    match e {
        CaError::Unreadable { path, error } => Advice::usage(CA_FILE_HINT.to_string())
            .with_message(format!("cannot read --ca-cert {}: {error}", path.display())),
        CaError::TooLarge { path } => Advice::usage(CA_FILE_HINT.to_string()).with_message(format!(
            "--ca-cert {} is larger than {MAX_CA_CERT_BYTES} bytes (1 MiB): not a CA certificate file",
            path.display()
        )),
        CaError::NotRegular { path, what } => Advice::usage(CA_FILE_HINT.to_string())
            .with_message(format!(
                "--ca-cert {} is {what}, not a certificate file",
                path.display()
            )),
        CaError::NotPem { path, problem } => Advice::usage(
            "pass only the proxy's CA certificate(s) in PEM, never a key, e.g. `openssl x509 -in bundle.pem -out ca.crt` (a DER file: add `-inform der`)"
                .to_string(),
        )
        .with_message(format!("--ca-cert {} {problem}", path.display())),
    }
}

fn reference(e: &ImageRefError) -> Advice {
    match e {
        ImageRefError::Invalid {
            role,
            value,
            reason,
        } => {
            let flag = match role {
                Role::BaseImage => "--base-image",
                Role::Image => "--image",
                Role::Pushed => "REF",
            };
            Advice::usage(GRAMMAR.to_string())
                .with_message(format!("invalid {flag} '{value}': {reason}"))
        }
    }
}

fn env(e: &EnvError) -> Advice {
    match e {
        EnvError::NotSeconds { var, default, .. } => Advice::usage(format!(
            "e.g. {var}=600, or unset it for {} s",
            default.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::commands::error::{render_error, status_of};
    use crate::error::ExitStatus;

    #[test]
    fn problems_name_the_flag_and_the_command_their_remedy_is() {
        let base = crate::image::specs::bundled()[0].1;
        let problems = crate::image::specs::validate::validate(
            &format!("{base}lock: my.lock\ntemplate: t.j2\n"),
            None,
        )
        .unwrap_err();
        let err = anyhow::Error::from(crate::image::specs::problems_error(
            "images/cu124.yaml",
            &problems,
        ));
        assert_eq!(status_of(&err), ExitStatus::Usage);
        let text = render_error(&err);
        assert!(text.contains("  template: bundled specs use the bundled template; only a spec file (--spec) may name its own\n"), "{text}");
        assert!(text.contains("  lock: bundled specs use their bundled lock (images/<name>.lock); only a spec file (--spec) may name its own\n"), "{text}");
        // The core's own words name neither.
        assert!(!err.to_string().contains("--spec"), "{err}");
    }

    #[test]
    fn references_name_the_flag_of_their_role() {
        use crate::image_ref::{check, Role};
        for (role, flag) in [
            (Role::BaseImage, "--base-image"),
            (Role::Image, "--image"),
            (Role::Pushed, "REF"),
        ] {
            let err = anyhow::Error::from(check(role, "Bad!").unwrap_err());
            assert_eq!(status_of(&err), ExitStatus::Usage);
            assert!(
                render_error(&err).starts_with(&format!("error: invalid {flag} 'Bad!': ")),
                "{}",
                render_error(&err)
            );
        }
    }
}
