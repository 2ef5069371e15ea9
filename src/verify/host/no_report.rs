//! What the host says of a container of `verify --image` whose stdout is
//! no report: an imgctl the image cannot start at all (#53 F18), one that
//! refused its arguments, or one that said nothing usable.
use super::CheckResult;

/// The `host.container` error for a container whose stdout is no report
/// (`parse` says why): an imgctl the image cannot start at all (#53 F18),
/// one that refused its arguments (exit 2), or one that said nothing usable.
pub(super) fn no_report(
    out: &crate::docker::run::RunOutput,
    parse: &serde_json::Error,
    image: &str,
    words: &crate::verify::wording::Wording,
    this_binary: &str,
) -> CheckResult {
    // Its last lines say why, quoted on one line: the end of them (a 100 MB
    // line of stderr is 500 characters here).
    let tail: Vec<&str> = out.stderr.lines().rev().take(3).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    let mut said = crate::docker::tail::excerpt(&tail.join(" | "));
    if out.stdout_cut > 0 {
        said = format!(
            "its stdout passed {} MiB; {said}",
            crate::docker::run::STDOUT_LIMIT / (1024 * 1024)
        );
    }
    let silent = out.stdout.trim().is_empty();
    // A binary whose loader the image lacks never starts: say that, not the
    // JSON parser's "EOF".
    if silent && cannot_exec(&out.stderr) {
        return CheckResult::error(
            "host.container",
            format!("the image's imgctl cannot run in {image}: the engine could not start it ({said})"),
        )
        .measured(format!("exit code {}", out.exit_code))
        .hint(format!("imgctl is linked against glibc, and this image has no glibc loader (ld-linux: a busybox or Alpine base has none); build on a glibc base such as Debian, Ubuntu or the CUDA images, or mount a static imgctl (the release's musl front end) with {} PATH:/usr/local/bin/imgctl:ro", words.mount));
    }
    let parse = if silent {
        "it printed nothing on stdout".to_string()
    } else {
        format!("its stdout is not a report: {parse}")
    };
    CheckResult::error(
        "host.container",
        format!("the image's imgctl gave no JSON report (exit code {}): {said}", out.exit_code),
    )
    .measured(format!("exit code {}", out.exit_code))
    .hint(if out.exit_code == 2 {
        // Its own usage error: an imgctl of another version that does not
        // know an option or a check id.
        format!("the image's imgctl refused the arguments: its stderr above says why; an image built by another imgctl version may not know every option or check id (rebuild it, or mount this binary with {} {this_binary}:/usr/local/bin/imgctl:ro)", words.mount)
    } else {
        format!("is imgctl on the image's PATH? `{} imgctl {} verify` shows its output ({parse})", words.docker_run_entrypoint, image)
    })
}

/// Whether a container's stderr says its program could not be executed at
/// all: the runtime's exec failed with "no such file or directory" for a
/// file that is there (its ELF interpreter is missing), or the kernel
/// refused the format. runc says "exec user process caused: no such file or
/// directory" (or "exec /usr/local/bin/imgctl: no such file or directory"),
/// crun "execvp `imgctl`: No such file or directory".
pub(super) fn cannot_exec(stderr: &str) -> bool {
    let text = stderr.to_ascii_lowercase();
    text.contains("exec format error")
        || (text.contains("exec") && text.contains("no such file or directory"))
}
