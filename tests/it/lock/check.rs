//! `lock --check` and the lock's integrity: a tampered line, a package added to the
//! body, the bundled locks kept fresh.
use super::*;

/// A fresh lock of the `small` fixture spec (six and torch), written with
/// the library (no uv needed).
fn small_lock_text(spec_path: &Path) -> String {
    let loaded = specs::load(&SpecSource::File(spec_path.to_path_buf())).unwrap();
    LockFile::new(
        &LockInputs::of(&loaded.spec),
        [
            ("six", Locked::new("1.16.0", Step::Pins, [SIX_WHEEL])),
            ("torch", Locked::new("2.7.0", Step::Torch, [SIX_WHEEL])),
        ],
    )
    .to_text(
        &loaded.origin,
        &imgctl::commands::lock::lock_command(&loaded),
    )
}

#[test]
fn a_tampered_lock_fails_check_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = fixture_spec(dir.path(), "small", &["six==1.16.0"]);
    let spec_arg = spec_path.to_str().unwrap();
    let text = small_lock_text(&spec_path);
    let lock_path = dir.path().join("small.lock");
    std::fs::write(&lock_path, &text).unwrap();
    let out = imgctl_in(dir.path(), &["lock", "--spec", spec_arg, "--check"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    // A pip option that passes for `name==version`: refused with its line number.
    let evil = "--extra-index-url=http://evil.example/simple==1";
    let line = text.lines().count() + 1;
    let short_hash = "six==1.16.0 --hash=sha256:0";
    let another_index =
        format!("six==1.16.0 --hash=sha256:{SIX_WHEEL} --index-url=http://evil.example/simple");
    for tampered in [evil, short_hash, "-r other.txt", &another_index] {
        std::fs::write(&lock_path, format!("{text}{tampered}\n")).unwrap();
        let out = imgctl_in(dir.path(), &["lock", "--spec", spec_arg, "--check"], &[]);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{tampered}: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        let first = stderr.lines().next().unwrap_or_default();
        assert_eq!(
            first,
            format!(
                "error: small: {} is not a lock file: line {line}: '{tampered}' is not a `name==version` line with sha256 hashes (a lock holds nothing else: no pip options, URLs, markers or ranges)",
                lock_path.display()
            )
        );
        // A build does not use it either.
        let out = imgctl_in(dir.path(), &["render", "--spec", spec_arg], &[]);
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "{stderr}");
        assert!(
            !stdout.contains("evil.example") && !stdout.contains("pip.lock"),
            "{stdout}"
        );
        assert!(
            stderr.contains("is not used, it is not a lock file (line"),
            "{stderr}"
        );
    }
}

/// `--check` compares the package list too, not only the header
/// (reliability and security III): a package added to the body with a
/// well-formed hash line used to read "up to date".
#[test]
fn a_package_added_to_the_body_makes_the_lock_stale() {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = fixture_spec(dir.path(), "small", &["six==1.16.0"]);
    let spec_arg = spec_path.to_str().unwrap();
    let text = small_lock_text(&spec_path);
    assert!(text.contains("\n# packages-sha256: "), "{text}");
    let lock_path = dir.path().join("small.lock");
    let check = || {
        let out = imgctl_in(dir.path(), &["lock", "--spec", spec_arg, "--check"], &[]);
        let (_, stderr) = texts(&out);
        (out.status.code(), stderr)
    };
    std::fs::write(&lock_path, &text).unwrap();
    assert_eq!(check().0, Some(0), "{}", check().1);
    for (what, tampered) in [
        (
            "added",
            format!("{text}attacker-pkg==6.6.6 \\\n    --hash=sha256:{SIX_WHEEL}\n"),
        ),
        (
            "changed",
            text.replacen(
                &format!("--hash=sha256:{SIX_WHEEL}"),
                &format!(
                    "--hash=sha256:{}",
                    SIX_WHEEL.replacen(
                        &SIX_WHEEL[..1],
                        if &SIX_WHEEL[..1] == "0" { "1" } else { "0" },
                        1
                    )
                ),
                1,
            ),
        ),
        (
            "without a digest",
            text.lines()
                .filter(|l| !l.starts_with("# packages-sha256"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
    ] {
        std::fs::write(&lock_path, &tampered).unwrap();
        let (code, stderr) = check();
        assert_eq!(code, Some(1), "{what}: {stderr}");
        let needle = if what == "without a digest" {
            "the lock records no packages-sha256"
        } else {
            "the package list does not match its packages-sha256"
        };
        assert!(stderr.contains(needle), "{what}: {stderr}");
    }
}

#[test]
fn the_bundled_locks_are_fresh() {
    for cuda in ["12.4", "12.6"] {
        let out = imgctl_in(&repo_root(), &["lock", "--cuda", cuda, "--check"], &[]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("is up to date (1"), "{stderr}");
    }
    let out = imgctl_in(&repo_root(), &["lock", "--all", "--check", "--json"], &[]);
    let (stdout, stderr) = texts(&out);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let statuses: Vec<&str> = v["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    // cu128's torch index is unreachable where the locks are made: its spec
    // says `lock: false`, so the documented CI command passes on main.
    assert_eq!(statuses, ["fresh", "fresh", "disabled"]);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("cu128: the spec says `lock: false`; nothing to check"),
        "{stderr}"
    );
}
