//! The front end's torch commands without a usable `imgctl-torch` (#51
//! part 3): `train-demo` and `sample` run inside the image (`IMGCTL_IMAGE`,
//! else build's default tag) with its own full imgctl, in the foreground,
//! as `docker run --rm` would run them: the current folder at /workspace
//! (and the working folder there), `--out` and any other absolute path given
//! mapped at the same path, as the caller's uid and gid (what it writes is
//! the caller's), the host's GPUs when the engine can give them, Ctrl-C
//! passed on, and the exit code passed through. `verify` runs as
//! `verify --image` does (`torch_part.rs`).
use std::path::{Path, PathBuf};

use crate::commands::error::CliError;
use crate::docker::attached::{run_foreground, Event, Foreground, Stream};
use crate::docker::run::RunRequest;
use crate::error::ExitStatus;
use crate::gpus::GpuSelection;
use crate::output::printer;

/// Build's default tag: the image torch commands run in by default.
pub const DEFAULT_IMAGE: &str = "imgctl/cu124:latest";

/// Where the mounted folder appears (the images' WORKDIR).
const WORKSPACE: &str = "/workspace";

/// The image torch commands run in: `IMGCTL_IMAGE`, else [`DEFAULT_IMAGE`].
pub fn image() -> String {
    std::env::var(crate::env_vars::IMGCTL_IMAGE)
        .ok()
        .map(|i| i.trim().to_string())
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| DEFAULT_IMAGE.to_string())
}

/// Host folders that are never mapped into the image (they are the
/// image's own): a path argument under one is refused.
const SYSTEM: &[&str] = &[
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    "/workspace",
];

/// The arguments after the binary's name, without the global `--context`
/// (the engine is this process's business, not the image's imgctl's).
fn inner_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if skip {
            skip = false;
        } else if a == "--context" {
            skip = true;
        } else if !a.starts_with("--context=") {
            out.push(a.clone());
        }
    }
    out
}

/// The host paths to map: `--out`'s folder (made first, so the caller owns
/// it) and every other absolute path among `args` that exists. Err: a path
/// under a folder of [`SYSTEM`].
fn mapped_paths(args: &[String]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut iter = args.iter().peekable();
    while let Some(a) = iter.next() {
        let (value, is_out) = match a.split_once('=') {
            Some(("--out", v)) => (Some(v.to_string()), true),
            _ if a == "--out" => (iter.peek().map(|v| v.to_string()), true),
            _ => (Some(a.clone()), false),
        };
        let Some(value) = value.filter(|v| v.starts_with('/')) else {
            continue;
        };
        let path = PathBuf::from(&value);
        if is_out {
            std::fs::create_dir_all(&path).map_err(|e| {
                CliError::failure(format!("cannot make --out {}: {e}", path.display()))
            })?;
        } else if !path.exists() {
            continue;
        }
        let system = SYSTEM.iter().any(|s| {
            path == Path::new(s)
                || (*s != "/" && path.starts_with(s) && !path.starts_with("/var/tmp"))
        });
        if system {
            return Err(CliError::usage(format!(
                "{} is a folder of the image's own, so it cannot be mapped into the image the command runs in",
                path.display()
            ))
            .with_hint("use a path under the current folder (mounted at /workspace), or install imgctl-torch to run it here")
            .into());
        }
        if !out.iter().any(|p| path.starts_with(p)) {
            out.push(path);
        }
    }
    Ok(out)
}

/// Runs `args` (the command line after `imgctl`) with the image's imgctl,
/// in the foreground; `why`: why not here (said once).
pub fn run(args: &[String], why: &str) -> anyhow::Result<ExitStatus> {
    let image = image();
    let command = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .cloned()
        .unwrap_or_default();
    let cwd = std::env::current_dir()?;
    let mut binds = vec![format!("{}:{WORKSPACE}", cwd.display())];
    for p in mapped_paths(args)? {
        binds.push(format!("{}:{}", p.display(), p.display()));
    }
    printer().info(format!(
        "imgctl {command} runs inside {image} (its own full imgctl), with {} at /workspace: {why}",
        cwd.display()
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let docker = crate::docker::connect().await?.docker;
        if crate::docker::run::image_labels(&docker, &image).await.is_err() {
            return Err(CliError::usage(format!(
                "`imgctl {command}` runs inside the image {image} here (no imgctl-torch that can load torch 2.7.0), and the engine has no such image"
            ))
            .with_hint(format!(
                "make it with `imgctl build --cuda 12.4 --tag {image}`, name another with IMGCTL_IMAGE=REF, or install imgctl-torch with a torch 2.7.0 venv"
            ))
            .into());
        }
        // The caller's ids, so what the command writes is theirs.
        let uid = crate::sys::process::real_uid();
        let gid = crate::sys::process::real_gid();
        let mut fg = Foreground {
            request: RunRequest {
                image: image.clone(),
                entrypoint: Some(vec!["imgctl".into()]),
                cmd: inner_args(args),
                // No home of the caller's uid in the image: caches go to /tmp.
                env: vec!["HOME=/tmp".into()],
                gpus: Some(GpuSelection::All),
                binds,
                ..Default::default()
            },
            user: Some(format!("{uid}:{gid}")),
            working_dir: Some(WORKSPACE.into()),
        };
        let mut sink = |stream: Stream, bytes: &[u8]| match stream {
            Stream::Out => printer().data_bytes(bytes),
            Stream::Err => printer().stderr_text(String::from_utf8_lossy(bytes)),
        };
        let event = |e: Event| match e {
            Event::Passed(sig) => printer().info(format!("{sig}: passed on to imgctl {command} inside {image}")),
            Event::Killing(sig) => printer().info(format!("{sig} again: removing the container at once")),
        };
        let code = match run_foreground(&docker, fg.clone(), &mut sink, &event).await {
            Err(e) if e.chain().any(|c| c.is::<crate::docker::run::GpuRequestRejected>()) => {
                printer().info("the engine cannot give containers GPUs here: the command runs on the CPU");
                fg.request.gpus = None;
                run_foreground(&docker, fg, &mut sink, &event).await?
            }
            other => other?,
        };
        Ok(match code {
            0 => ExitStatus::Success,
            2 => ExitStatus::Usage,
            3 => ExitStatus::MissingTool,
            130 => ExitStatus::Interrupted,
            _ => ExitStatus::Failure,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_engine_context_stays_here_and_the_rest_goes_in() {
        assert_eq!(
            inner_args(&strings(&[
                "--context",
                "x",
                "train-demo",
                "--context=y",
                "--steps",
                "5"
            ])),
            strings(&["train-demo", "--steps", "5"])
        );
    }

    #[test]
    fn out_is_made_and_mapped_and_a_system_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("runs/a");
        let given = format!("--out={}", out.display());
        let mapped = mapped_paths(&strings(&["train-demo", &given, "--steps", "5"])).unwrap();
        assert_eq!(mapped, vec![out.clone()]);
        assert!(out.is_dir());
        // A relative --out stays under the current folder: nothing to map.
        assert!(mapped_paths(&strings(&["train-demo", "--out", "runs"]))
            .unwrap()
            .is_empty());
        let e = mapped_paths(&strings(&["sample", "--checkpoint", "/etc"])).unwrap_err();
        assert!(
            e.to_string()
                .contains("/etc is a folder of the image's own"),
            "{e}"
        );
    }
}
