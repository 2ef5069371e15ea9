//! The release tarballs (#51 part 2), as `make test` makes them with
//! `scripts/dist.sh --profile dev` (made here when missing or stale): what
//! each holds, a front end linked statically, `install.sh` that installs
//! without root and refuses a damaged file, and the aarch64 front end's
//! `--version`, `specs` and `render` under qemu. The whole first hour from
//! the x86_64 tarball is `image_e2e`'s stranger step.
use std::path::Path;
use std::process::Command;

use crate::common::texts;
use crate::image_e2e::stranger::tarball;

/// Unpacks `tarball` into a new folder; returns it and the unpacked folder.
fn unpacked(tarball: &Path) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("tar")
        .arg("xzf")
        .arg(tarball)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", texts(&out).1);
    let name = crate::image_e2e::stranger::folder_name(tarball);
    let folder = dir.path().join(name);
    (dir, folder)
}

/// `readelf -lW`'s program headers of `file`: a static binary has no
/// INTERP (no dynamic loader) and no DYNAMIC segment naming libraries.
fn is_static(file: &Path) -> bool {
    let out = Command::new("readelf")
        .arg("-lW")
        .arg(file)
        .output()
        .unwrap();
    let headers = texts(&out).0;
    !headers.contains("INTERP") && !headers.contains("Requesting program interpreter")
}

#[test]
fn the_x86_64_tarball_holds_a_static_front_end_the_full_build_and_its_papers() {
    let (_dir, folder) = unpacked(&tarball("x86_64"));
    for f in [
        "imgctl",
        "imgctl-torch",
        "install.sh",
        "LICENSE",
        "SHA256SUMS",
        "imgctl.cdx.json",
        "imgctl-torch.cdx.json",
        "man/imgctl.1",
        "man/imgctl-build.1",
        "completions/imgctl.bash",
        "completions/_imgctl",
        "completions/imgctl.fish",
    ] {
        assert!(folder.join(f).is_file(), "no {f} in the tarball");
    }
    assert!(
        is_static(&folder.join("imgctl")),
        "the front end is not static"
    );
    // The full build links libtorch, found at run time (RUNPATH).
    let dynamic = texts(
        &Command::new("readelf")
            .arg("-d")
            .arg(folder.join("imgctl-torch"))
            .output()
            .unwrap(),
    )
    .0;
    assert!(dynamic.contains("libtorch_cpu.so"), "{dynamic}");
    // The SBOMs list the crates: bollard in both, tch only in the full build's.
    let sbom = |f: &str| std::fs::read_to_string(folder.join(f)).unwrap();
    let front: serde_json::Value = serde_json::from_str(&sbom("imgctl.cdx.json")).unwrap();
    assert_eq!(front["bomFormat"], "CycloneDX");
    let names = |v: &serde_json::Value| -> Vec<String> {
        v["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(names(&front).contains(&"bollard".to_string()));
    assert!(!names(&front).contains(&"tch".to_string()));
    let full: serde_json::Value = serde_json::from_str(&sbom("imgctl-torch.cdx.json")).unwrap();
    assert!(names(&full).contains(&"tch".to_string()));
    // It runs here with nothing else: --version at once.
    let out = Command::new(folder.join("imgctl"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        texts(&out).0.trim(),
        format!("imgctl {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn install_sh_installs_without_root_and_refuses_a_damaged_file() {
    let (_dir, folder) = unpacked(&tarball("x86_64"));
    let prefix = tempfile::tempdir().unwrap();
    let install = |extra: &[&str]| {
        Command::new("sh")
            .arg(folder.join("install.sh"))
            .args(extra)
            .env("PREFIX", prefix.path())
            .output()
            .unwrap()
    };
    // --dry-run says where, installs nothing.
    let out = install(&["--dry-run"]);
    assert!(out.status.success(), "{}", texts(&out).1);
    assert!(texts(&out).0.contains(&format!(
        "would install {}/bin/imgctl ",
        prefix.path().display()
    )));
    assert!(!prefix.path().join("bin/imgctl").exists());
    let out = install(&[]);
    let (_, err) = texts(&out);
    assert!(out.status.success(), "{err}");
    for f in [
        "bin/imgctl",
        "bin/imgctl-torch",
        "share/man/man1/imgctl.1",
        "share/bash-completion/completions/imgctl",
        "share/zsh/site-functions/_imgctl",
    ] {
        assert!(prefix.path().join(f).is_file(), "{f} not installed: {err}");
    }
    assert!(err.contains("is not on your PATH"), "{err}");
    // A changed byte: nothing is installed, and it says why.
    let again = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(folder.join("imgctl")).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(folder.join("imgctl"), bytes).unwrap();
    let out = Command::new("sh")
        .arg(folder.join("install.sh"))
        .env("PREFIX", again.path())
        .output()
        .unwrap();
    let (_, err) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("a file differs from SHA256SUMS"), "{err}");
    assert!(!again.path().join("bin").exists());
}

#[test]
fn the_aarch64_front_end_runs_under_qemu() {
    let qemu = Path::new("/usr/bin/qemu-aarch64-static");
    assert!(
        qemu.is_file(),
        "no qemu-aarch64-static: run scripts/setup.sh test"
    );
    let (_dir, folder) = unpacked(&tarball("aarch64"));
    let front = folder.join("imgctl");
    let header = texts(
        &Command::new("readelf")
            .arg("-h")
            .arg(&front)
            .output()
            .unwrap(),
    )
    .0;
    assert!(header.contains("AArch64"), "{header}");
    assert!(is_static(&front), "the aarch64 front end is not static");
    assert!(
        !folder.join("imgctl-torch").exists(),
        "imgctl-torch is x86_64 only"
    );
    let run = |args: &[&str]| {
        let out = Command::new(qemu)
            .arg(&front)
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let (o, e) = texts(&out);
        assert!(out.status.success(), "{args:?}: {e}");
        o
    };
    assert_eq!(
        run(&["--version"]).trim(),
        format!("imgctl {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(run(&["specs"]).contains("cu124 (default)"));
    assert!(run(&["render", "--cuda", "12.4"]).contains("FROM nvidia/cuda:12.4.1-base-ubuntu22.04"));
}
