//! Helpers shared by the integration tests.
#![allow(dead_code)]
use std::path::PathBuf;
use std::process::{Command, Output};

/// The imgctl binary under test.
pub fn imgctl_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_imgctl"))
}

/// Runs imgctl with `args` and returns its output.
pub fn imgctl(args: &[&str]) -> Output {
    Command::new(imgctl_bin())
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run imgctl")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// stdout and stderr of an output as strings.
pub fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
