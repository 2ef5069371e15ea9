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

/// In a build without the `torch` feature: execs the full imgctl beside this
/// one for a command that needs libtorch. Returns only when there is none
/// (or it is this very front end again): the command then runs here, and
/// says what it cannot do. A failed exec is an error naming the file.
#[cfg(not(feature = "torch"))]
pub fn hand_over(command: &Command) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    if !needs_torch(command) || std::env::var_os(HANDED_OVER).is_some() {
        return Ok(());
    }
    let Some(part) = std::env::current_exe().ok().and_then(|e| part_beside(&e)) else {
        return Ok(());
    };
    let error = std::process::Command::new(&part)
        .args(std::env::args_os().skip(1))
        .env(HANDED_OVER, "1")
        .exec();
    Err(crate::commands::error::CliError::failure(format!(
        "cannot start {}: {error}",
        part.display()
    ))
    .with_hint(format!(
        "reinstall imgctl (`make install`), or run {} directly",
        part.display()
    ))
    .into())
}

/// A full imgctl needs no hand-over.
#[cfg(feature = "torch")]
pub fn hand_over(_command: &Command) -> anyhow::Result<()> {
    let _ = HANDED_OVER;
    Ok(())
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
}
