//! The linking facts, checked on the built binaries: with the `torch`
//! feature libtorch_cuda.so is NEEDED (not dropped by --as-needed) and a
//! RUNPATH points at libtorch so the binary runs without LD_LIBRARY_PATH;
//! without it (the front end) no libtorch is loaded at all.
#![cfg(feature = "torch")]

use std::process::Command;

use crate::common::{imgctl_bin, texts};

fn dynamic_section() -> String {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(imgctl_bin())
        .output()
        .expect("run readelf -d (binutils)");
    assert!(out.status.success(), "readelf failed: {:?}", out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn libtorch_cuda_is_needed() {
    let libdir = std::fs::canonicalize(crate::common::repo_root().join(".libtorch/lib"))
        .or_else(|_| {
            std::fs::canonicalize(
                std::path::Path::new(&std::env::var("LIBTORCH").unwrap()).join("lib"),
            )
        })
        .expect("libtorch lib dir");
    if !libdir.join("libtorch_cuda.so").exists() {
        panic!("the libtorch under test ({}) has no libtorch_cuda.so: scripts/setup.sh installs the CUDA wheel", libdir.display());
    }
    let dynamic = dynamic_section();
    assert!(
        dynamic.contains("Shared library: [libtorch_cuda.so]"),
        "libtorch_cuda.so is not NEEDED:\n{dynamic}"
    );
    assert!(
        dynamic.contains("Shared library: [libtorch_cpu.so]"),
        "libtorch_cpu.so is not NEEDED:\n{dynamic}"
    );
}

#[test]
fn runpath_points_at_libtorch() {
    let dynamic = dynamic_section();
    let runpath = dynamic
        .lines()
        .find(|l| l.contains("(RUNPATH)"))
        .unwrap_or_else(|| panic!("no RUNPATH in the binary:\n{dynamic}"));
    let libdir = std::fs::canonicalize(crate::common::repo_root().join(".libtorch/lib"))
        .or_else(|_| {
            std::fs::canonicalize(
                std::path::Path::new(&std::env::var("LIBTORCH").unwrap()).join("lib"),
            )
        })
        .unwrap();
    assert!(
        runpath.contains(&*libdir.to_string_lossy()),
        "RUNPATH {runpath} does not name {}",
        libdir.display()
    );
    assert!(
        runpath.contains("/opt/imgctl/libtorch/lib"),
        "RUNPATH {runpath} lacks the image libtorch path"
    );
}

#[test]
fn runs_without_ld_library_path() {
    let out = Command::new(imgctl_bin())
        .arg("--version")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(
        out.status.success(),
        "imgctl --version failed without LD_LIBRARY_PATH: {stderr}"
    );
    assert!(stdout.starts_with("imgctl "), "{stdout}");
}

/// The front end (#29 item 3.11): the same sources built without the `torch`
/// feature. `make test` leaves it at `target/imgctl-front`; when that is
/// missing or older than the sources, it is built here, into its own target
/// folder (`target/front`), so the full binary under test is never replaced.
pub(crate) fn front_binary() -> std::path::PathBuf {
    let root = crate::common::repo_root();
    let copied = root.join("target/imgctl-front");
    let newest_source = newest_source();
    let fresh = |p: &std::path::Path| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .is_ok_and(|t| newest_source.is_some_and(|s| t >= s))
    };
    if fresh(&copied) {
        return copied;
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--no-default-features",
            "--target-dir",
            "target/front",
        ])
        .current_dir(&root)
        .output()
        .expect("run cargo build --no-default-features");
    assert!(out.status.success(), "{}", texts(&out).1);
    root.join("target/front/debug/imgctl")
}

/// The newest modification time of the sources (`src/`).
pub(crate) fn newest_source() -> Option<std::time::SystemTime> {
    walk_newest(&crate::common::repo_root().join("src"))
}

/// The newest modification time of the files under `dir`.
fn walk_newest(dir: &std::path::Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let t = if path.is_dir() {
            walk_newest(&path)
        } else {
            entry.metadata().and_then(|m| m.modified()).ok()
        };
        newest = newest.max(t);
    }
    newest
}

/// The front end loads no libtorch (so `--version`, `specs`, `build` … start
/// in milliseconds: 5 ms against 657 ms, README), runs the commands that need
/// none itself, hands those that need libtorch to `imgctl-torch` beside it
/// (the same output as the full binary), and without one runs them inside
/// the image (here: one that is missing, named in one line).
#[test]
fn the_front_end_loads_no_libtorch_and_hands_torch_commands_over() {
    let front = front_binary();
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&front)
        .output()
        .unwrap();
    let dynamic = texts(&out).0;
    assert!(dynamic.contains("Shared library: [libc.so.6]"), "{dynamic}");
    assert!(
        !dynamic.contains("torch"),
        "the front end links libtorch:\n{dynamic}"
    );

    let dir = tempfile::tempdir().unwrap();
    let installed = dir.path().join("imgctl");
    std::fs::copy(&front, &installed).unwrap();
    let run = |args: &[&str]| {
        Command::new(&installed)
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    };
    let version = run(&["--version"]);
    assert_eq!(
        texts(&version).0.trim(),
        format!("imgctl {}", env!("CARGO_PKG_VERSION"))
    );
    // Alone, a torch command runs inside the image (#51 part 3); with no
    // such image, one line names it and the command that makes it.
    let alone = Command::new(&installed)
        .args(["train-demo", "--print-config"])
        .env("NO_COLOR", "1")
        .env("IMGCTL_IMAGE", "imgctl-test/no-such-image:0")
        .output()
        .unwrap();
    let (_, err) = texts(&alone);
    assert_eq!(alone.status.code(), Some(2), "{err}");
    assert!(
        err.contains("imgctl train-demo runs inside imgctl-test/no-such-image:0"),
        "{err}"
    );
    assert!(
        crate::common::one_error_line(&err).contains("the engine has no such image"),
        "{err}"
    );
    assert!(
        err.contains("imgctl build --cuda 12.4 --tag imgctl-test/no-such-image:0"),
        "{err}"
    );
    // verify of this host alone runs as `verify --image` of that image
    // (never a pass that checked nothing of the sort, #45 F8).
    let alone = Command::new(&installed)
        .args(["verify", "--expect-gpus", "0"])
        .env("NO_COLOR", "1")
        .env("IMGCTL_IMAGE", "imgctl-test/no-such-image:0")
        .output()
        .unwrap();
    let (_, err) = texts(&alone);
    assert_eq!(alone.status.code(), Some(2), "{err}");
    assert!(
        err.contains("imgctl verify runs inside imgctl-test/no-such-image:0"),
        "{err}"
    );
    assert!(
        crate::common::one_error_line(&err).contains("not found in the engine"),
        "{err}"
    );
    // verify --image and --list-checks need no libtorch here.
    assert_eq!(run(&["verify", "--list-checks"]).status.code(), Some(0));

    // A front end reached through a symlink in another folder finds the
    // full imgctl beside the link (how /usr/local/bin/imgctl → a build
    // folder is installed), and on PATH.
    let bin = tempfile::tempdir().unwrap();
    let link = bin.path().join("imgctl");
    std::os::unix::fs::symlink(&installed, &link).unwrap();
    std::os::unix::fs::symlink(imgctl_bin(), bin.path().join("imgctl-torch")).unwrap();
    let through_link = Command::new(&link)
        .args(["train-demo", "--preset", "smoke", "--print-config"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(
        through_link.status.code(),
        Some(0),
        "{}",
        texts(&through_link).1
    );
    let on_path = Command::new(&installed)
        .args(["train-demo", "--preset", "smoke", "--print-config"])
        .env("NO_COLOR", "1")
        .env("PATH", bin.path())
        .output()
        .unwrap();
    assert_eq!(on_path.status.code(), Some(0), "{}", texts(&on_path).1);
    assert_eq!(texts(&through_link).0, texts(&on_path).0);

    // With the full imgctl beside it, the same command gives the full one's output.
    std::os::unix::fs::symlink(imgctl_bin(), dir.path().join("imgctl-torch")).unwrap();
    let handed = run(&["train-demo", "--preset", "smoke", "--print-config"]);
    let direct = Command::new(imgctl_bin())
        .args(["train-demo", "--preset", "smoke", "--print-config"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(handed.status.code(), Some(0), "{}", texts(&handed).1);
    assert_eq!(texts(&handed).0, texts(&direct).0);
    // verify of this host runs the torch checks (in imgctl-torch), not SKIPs.
    let verify = run(&[
        "verify",
        "--expect-gpus",
        "0",
        "--only",
        "torch.version",
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&texts(&verify).0).unwrap();
    assert_eq!(report["results"][0]["status"], "pass", "{report}");
}
