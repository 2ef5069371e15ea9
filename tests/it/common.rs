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

/// The set-up venv (torch 2.7.0, diffusers, safetensors, tensorboard):
/// `$IMGCTL_VENV` (set in .cargo/config.toml [env]), else the repo's `.venv`.
pub fn venv() -> PathBuf {
    std::env::var_os("IMGCTL_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv"))
}

/// The set-up venv's Python.
pub fn venv_python() -> PathBuf {
    let py = venv().join("bin").join("python");
    assert!(
        py.exists(),
        "{} does not exist: run scripts/setup.sh",
        py.display()
    );
    py
}
