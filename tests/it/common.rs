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

/// The one `error: ` line of `text` (a command's stderr, or the part of it
/// after a build log); panics, printing `text`, when there is none or more
/// than one: every failure must say its cause once.
pub fn one_error_line(text: &str) -> &str {
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "not exactly one error line:\n{text}");
    errors[0]
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
