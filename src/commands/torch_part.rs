//! The front end: an imgctl built without the `torch` feature starts in
//! milliseconds (no libtorch to load: `--version`, `--help`, `specs`,
//! `render`, `build`, `lock`, `up`, … run in it), and hands the commands that
//! need libtorch (`train-demo`, `sample`, `verify` on this host) to the full
//! imgctl installed beside it as [`TORCH_PART`], by exec: same arguments,
//! same process id, same signals. `make install` installs the pair.
//!
//! A full imgctl (the default build) runs everything itself and never execs.
use std::path::{Path, PathBuf};

use crate::cli::Command;

/// The file name of the full imgctl the front end execs.
pub const TORCH_PART: &str = "imgctl-torch";

/// Set in the environment of the exec'd part: a part that is itself a front
/// end (a wrong install) must not exec again, in a loop.
const HANDED_OVER: &str = "IMGCTL_FRONT_HANDED_OVER";

/// Whether `command` needs libtorch: training, sampling, and verify's checks
/// of this host (`verify --image` runs them inside the image's own imgctl).
pub fn needs_torch(command: &Command) -> bool {
    match command {
        Command::TrainDemo(_) | Command::Sample(_) => true,
        Command::Verify(args) => args.image.is_none() && !args.list_checks,
        _ => false,
    }
}

/// The full imgctl beside the executable `exe` (its real path: a symlink to
/// the front end finds the part beside the front end's file).
pub fn part_beside(exe: &Path) -> Option<PathBuf> {
    let dir = exe.canonicalize().ok()?.parent()?.to_path_buf();
    let part = dir.join(TORCH_PART);
    part.is_file().then_some(part)
}

/// The folders the full imgctl is looked for in, in order (#45 F8): beside
/// the front end's real file (`exe`, already resolved), beside the path it
/// was started by (`argv0`: `/usr/local/bin/imgctl`, a symlink to a build
/// folder, keeps `imgctl-torch` beside the link), then every folder of
/// `path` (PATH). Each folder once.
pub fn part_folders(
    exe: &Path,
    argv0: Option<&Path>,
    path: Option<&std::ffi::OsStr>,
) -> Vec<PathBuf> {
    let mut folders: Vec<PathBuf> = Vec::new();
    let mut add = |dir: Option<&Path>| {
        if let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            let d = d.to_path_buf();
            if !folders.contains(&d) {
                folders.push(d);
            }
        }
    };
    add(exe.canonicalize().ok().as_deref().and_then(Path::parent));
    // argv[0] names a file only when it holds a slash (else PATH found it).
    if let Some(a) = argv0.filter(|a| a.components().count() > 1) {
        let abs = std::env::current_dir().map(|c| c.join(a)).ok();
        add(abs.as_deref().and_then(Path::parent));
    }
    for dir in path.map(std::env::split_paths).into_iter().flatten() {
        add(Some(&dir));
    }
    folders
}

/// The first `imgctl-torch` in [`part_folders`], or the folders looked in.
pub fn find_part(exe: &Path) -> Result<PathBuf, Vec<PathBuf>> {
    let argv0 = std::env::args_os().next().map(PathBuf::from);
    let folders = part_folders(exe, argv0.as_deref(), std::env::var_os("PATH").as_deref());
    folders
        .iter()
        .map(|d| d.join(TORCH_PART))
        .find(|p| p.is_file())
        .ok_or(folders)
}

/// Which binary did the work, for `--json` reports (#51 part 3): its path,
/// whether it is the full build (libtorch) or the front end, and whether a
/// front end handed the command over to it.
pub fn ran_by() -> serde_json::Value {
    serde_json::json!({
        "binary": std::env::current_exe().ok().map(|p| p.display().to_string()),
        "build": if cfg!(feature = "torch") { "full" } else { "front end" },
        "handed_over": std::env::var_os(HANDED_OVER).is_some(),
    })
}

/// What the front end does with a command.
#[derive(Debug)]
pub enum Handed {
    /// Runs it here (it needs no libtorch, or this is a full imgctl).
    Here(Box<crate::cli::Cli>),
    /// Ran it elsewhere (inside the image) and ended with this status.
    Done(crate::error::ExitStatus),
}

/// In a build without the `torch` feature, a command that needs libtorch
/// goes to the full imgctl beside this one by exec, when that one can load
/// torch 2.7.0 here ([`crate::commands::libtorch_here`]; a venv's is put on
/// `LD_LIBRARY_PATH`); else inside the image: `verify` as `verify --image`
/// (the host's GPUs passed through), `train-demo` and `sample` in the
/// foreground ([`crate::commands::through_image`]). A failed exec is an
/// error naming the file. `-v` says which binary does the work.
#[cfg(not(feature = "torch"))]
pub fn hand_over(mut cli: crate::cli::Cli) -> anyhow::Result<Handed> {
    use crate::commands::libtorch_here::{self, Libtorch};
    use std::os::unix::process::CommandExt;
    if !needs_torch(&cli.command) || std::env::var_os(HANDED_OVER).is_some() {
        return Ok(Handed::Here(Box::new(cli)));
    }
    let part = std::env::current_exe()
        .ok()
        .and_then(|e| find_part(&e).ok());
    let why = match part.as_deref().map(|p| (p, libtorch_here::find(p))) {
        Some((part, Ok(found))) => {
            let mut exec = std::process::Command::new(part);
            exec.args(std::env::args_os().skip(1)).env(HANDED_OVER, "1");
            let from = match &found {
                Libtorch::Runpath(dir) => dir.clone(),
                Libtorch::Venv { lib, .. } => {
                    let mut path = std::ffi::OsString::from(lib);
                    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
                        path.push(":");
                        path.push(old);
                    }
                    exec.env("LD_LIBRARY_PATH", path);
                    lib.clone()
                }
            };
            crate::output::printer().verbose(format!(
                "{} runs it (the full imgctl), with libtorch from {}",
                part.display(),
                from.display()
            ));
            let error = exec.exec();
            return Err(crate::commands::error::CliError::failure(format!(
                "cannot start {}: {error}",
                part.display()
            ))
            .with_hint(format!(
                "reinstall imgctl (`make install-full`), or run {} directly",
                part.display()
            ))
            .into());
        }
        Some((part, Err(why))) => format!("{} is here, but {why}", part.display()),
        None => format!("no {TORCH_PART} beside this imgctl or on PATH"),
    };
    if let Command::Verify(args) = &mut cli.command {
        let image = crate::commands::through_image::image();
        crate::output::printer().info(format!(
            "imgctl verify runs inside {image} with this host's GPUs passed through ({why}); `--image REF` names another"
        ));
        args.image = Some(image);
        return Ok(Handed::Here(Box::new(cli)));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    crate::commands::through_image::run(&args, &why).map(Handed::Done)
}

/// A full imgctl needs no hand-over.
#[cfg(feature = "torch")]
pub fn hand_over(cli: crate::cli::Cli) -> anyhow::Result<Handed> {
    let _ = HANDED_OVER;
    Ok(Handed::Here(Box::new(cli)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn command(args: &[&str]) -> Command {
        crate::cli::Cli::parse_from(std::iter::once("imgctl").chain(args.iter().copied())).command
    }

    #[test]
    fn only_training_sampling_and_verify_of_this_host_need_libtorch() {
        for yes in [
            &["train-demo"][..],
            &["sample", "--checkpoint", "x"],
            &["verify"],
            &["verify", "--fleet"],
        ] {
            assert!(needs_torch(&command(yes)), "{yes:?}");
        }
        for no in [
            &["verify", "--image", "x"][..],
            &["verify", "--list-checks"],
            &["specs"],
            &["render"],
            &["build"],
            &["lock"],
            &["up"],
            &["ps"],
            &["completions", "bash"],
        ] {
            assert!(!needs_torch(&command(no)), "{no:?}");
        }
    }

    #[test]
    fn the_part_is_found_beside_the_real_file_of_the_front_end() {
        let dir = tempfile::tempdir().unwrap();
        let front = dir.path().join("imgctl");
        std::fs::write(&front, "").unwrap();
        assert_eq!(part_beside(&front), None);
        std::fs::write(dir.path().join(TORCH_PART), "").unwrap();
        assert_eq!(
            part_beside(&front),
            Some(dir.path().canonicalize().unwrap().join(TORCH_PART))
        );
        // Through a symlink in another folder (/usr/local/bin/imgctl → …).
        let bin = tempfile::tempdir().unwrap();
        let link = bin.path().join("imgctl");
        std::os::unix::fs::symlink(&front, &link).unwrap();
        assert_eq!(
            part_beside(&link),
            Some(dir.path().canonicalize().unwrap().join(TORCH_PART))
        );
    }

    #[test]
    fn the_part_is_looked_for_beside_the_file_beside_the_link_then_on_path() {
        let real = tempfile::tempdir().unwrap();
        let front = real.path().join("imgctl");
        std::fs::write(&front, "").unwrap();
        let bin = tempfile::tempdir().unwrap();
        let link = bin.path().join("imgctl");
        std::os::unix::fs::symlink(&front, &link).unwrap();
        let on_path = tempfile::tempdir().unwrap();
        let path = std::env::join_paths([on_path.path(), real.path()]).unwrap();
        // exe is what current_exe gives: the real file.
        let folders = part_folders(&front, Some(&link), Some(&path));
        assert_eq!(
            folders,
            vec![
                real.path().canonicalize().unwrap(),
                bin.path().to_path_buf(),
                on_path.path().to_path_buf(),
                real.path().to_path_buf(),
            ]
            .into_iter()
            .fold(Vec::new(), |mut v, d| {
                if !v.contains(&d) {
                    v.push(d);
                }
                v
            })
        );
        // A bare argv[0] (found on PATH) names no folder of its own.
        let bare = part_folders(&front, Some(Path::new("imgctl")), None);
        assert_eq!(bare, vec![real.path().canonicalize().unwrap()]);
    }
}
