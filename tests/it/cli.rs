//! Command-line conventions shared by every command.
use crate::common::{imgctl, texts};

#[test]
fn version_and_help() {
    let out = imgctl(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        texts(&out).0.trim(),
        format!("imgctl {}", env!("CARGO_PKG_VERSION"))
    );
    let out = imgctl(&["--help"]);
    let (stdout, _) = texts(&out);
    for cmd in ["build", "render", "verify", "train-demo", "sample"] {
        assert!(stdout.contains(cmd), "--help lacks {cmd}:\n{stdout}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let out = imgctl(&["no-such-command"]);
    assert_eq!(out.status.code(), Some(2));
    let out = imgctl(&["verify", "--level", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let (_, stderr) = texts(&out);
    assert!(stderr.contains("bogus"), "{stderr}");
}
