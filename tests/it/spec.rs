//! Image specs: the bundled profiles and their pins, the compatibility table,
//! user specs, and the spec errors (every problem at once, exit 2) as insta
//! snapshots of what `imgctl render --spec` prints.
use std::path::Path;
use std::process::{Command, Output};

use imgctl::image::specs::{self, compat, SpecSource};

use crate::common::{imgctl_bin, repo_root, texts};

/// Runs imgctl from the repository root, so spec paths print as written.
fn imgctl_at_root(args: &[&str]) -> Output {
    Command::new(imgctl_bin())
        .args(args)
        .current_dir(repo_root())
        .env("NO_COLOR", "1")
        .output()
        .expect("run imgctl")
}

/// `imgctl render --spec FIXTURE` must fail with exit 2 and print nothing on stdout.
fn spec_error(fixture: &str) -> String {
    let path = format!("tests/fixtures/specs/{fixture}");
    let out = imgctl_at_root(&["render", "--spec", &path]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{fixture}: expected exit 2\n{stderr}"
    );
    assert!(
        stdout.is_empty(),
        "{fixture}: stdout must stay empty on errors: {stdout}"
    );
    assert!(
        stderr.starts_with(&format!("error: spec {path} has ")),
        "{fixture}: first line names the spec and the count:\n{stderr}"
    );
    stderr
}

#[test]
fn many_problems_are_reported_at_once() {
    let stderr = spec_error("bad-many.yaml");
    // Unknown CUDA, a torch/wheel pair that does not exist, unpinned pip
    // packages and an unknown key with a typo: all in one run.
    assert!(stderr.contains("has 5 problems"), "{stderr}");
    for needle in [
        "cuda: unknown CUDA toolkit '12.5.0'",
        "torch.variant: no torch 2.7.0 wheel for cu124",
        "(valid: cu118, cu126, cu128)",
        "pip[1]: 'transformers>=4.51' is not pinned",
        "pip[2]: 'accelerate' is not pinned",
        "tempalte: unknown key; did you mean `template`?",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in:\n{stderr}");
    }
    insta::assert_snapshot!("spec_bad_many", stderr);
}

#[test]
fn type_and_field_problems_have_paths_and_hints() {
    let stderr = spec_error("bad-types.yaml");
    for needle in [
        "python: expected a string, found the number 3.1",
        "torch.extra_index: unknown key (valid: version, variant, index)",
        "torch.index: PyPI serves torch 2.7.0's cu126 wheel, not cu128",
        "pip[0]: torch is chosen by the `torch` mapping",
        "user: missing",
        "ports[0]: expected a port number 1-65535, found '8888'",
        "base_image: digest 'sha256:1234'",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in:\n{stderr}");
    }
    insta::assert_snapshot!("spec_bad_types", stderr);
}

#[test]
fn unknown_schema_version_is_one_clear_error() {
    let stderr = spec_error("bad-schema-version.yaml");
    assert!(stderr.contains("has 1 problem\n"), "{stderr}");
    insta::assert_snapshot!("spec_bad_schema_version", stderr);
}

#[test]
fn yaml_syntax_error_names_the_line() {
    let stderr = spec_error("bad-yaml.yaml");
    assert!(stderr.contains("line 3 column 1"), "{stderr}");
    insta::assert_snapshot!("spec_bad_yaml", stderr);
}

#[test]
fn missing_spec_file_and_unknown_cuda_are_usage_errors() {
    let out = imgctl_at_root(&["render", "--spec", "tests/fixtures/specs/no-such-spec.yaml"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot read spec tests/fixtures/specs/no-such-spec.yaml"),
        "{stderr}"
    );

    let out = imgctl_at_root(&["render", "--cuda", "12.5"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty());
    insta::assert_snapshot!("spec_unknown_cuda", stderr);
}

#[test]
fn bundled_profiles_carry_the_pins() {
    let want_pip = [
        "diffusers==0.33.1",
        "transformers==4.51.3",
        "accelerate==1.6.0",
        "datasets==3.5.0",
        "tensorboard==2.19.0",
        // tensorboard imports pkg_resources, gone from setuptools 82 (#45 F3).
        "setuptools==81.0.0",
        "jupyterlab==4.4.1",
    ];
    for (cuda, name, base, variant, index) in [
        (
            "12.4",
            "cu124",
            "nvidia/cuda:12.4.1-base-ubuntu22.04",
            "cu126",
            "https://pypi.org/simple",
        ),
        (
            "12.6",
            "cu126",
            "nvidia/cuda:12.6.3-base-ubuntu22.04",
            "cu126",
            "https://pypi.org/simple",
        ),
        (
            "12.8",
            "cu128",
            "nvidia/cuda:12.8.1-base-ubuntu22.04",
            "cu128",
            "https://download.pytorch.org/whl/cu128",
        ),
    ] {
        let loaded = specs::load(&SpecSource::Bundled { cuda: cuda.into() }).unwrap();
        let s = &loaded.spec;
        assert_eq!(loaded.name, name);
        assert_eq!(s.base_image.to_string(), base);
        assert_eq!(s.torch.version, "2.7.0");
        assert_eq!(s.torch.variant, variant);
        assert_eq!(s.torch.index, index);
        assert_eq!(s.python, "3.10");
        assert_eq!(s.user.name, "dev");
        assert_eq!(s.ports, vec![8888, 22]);
        let pip: Vec<String> = s.pip.iter().map(|p| p.requirement()).collect();
        assert_eq!(pip, want_pip, "{name}");
        for pkg in [
            "tini",
            "openssh-server",
            "python3",
            "python3-venv",
            "ca-certificates",
        ] {
            assert!(
                s.apt.iter().any(|a| a == pkg),
                "{name} lacks apt package {pkg}"
            );
        }
        // The hash is of the embedded text, which equals the file (see render::embedded_*).
        let on_disk = std::fs::read(repo_root().join(format!("images/{name}.yaml"))).unwrap();
        assert_eq!(loaded.sha256, specs::sha256_hex(&on_disk));
    }
    // The default, and the other spellings of --cuda.
    assert_eq!(
        SpecSource::from_args(None, None),
        SpecSource::Bundled {
            cuda: "12.4".into()
        }
    );
    for alias in ["12.4.1", "cu124"] {
        assert_eq!(
            specs::load(&SpecSource::Bundled { cuda: alias.into() })
                .unwrap()
                .name,
            "cu124"
        );
    }
    assert_eq!(
        SpecSource::from_args(Some("12.6"), Some(Path::new("x.yaml"))),
        SpecSource::File("x.yaml".into())
    );
}

#[test]
fn compat_table_knows_torch_270_wheels_and_drivers() {
    // torch 2.7.0 was published for cu118, cu126 (PyPI) and cu128 only.
    assert_eq!(compat::variants("2.7.0"), vec!["cu118", "cu126", "cu128"]);
    assert!(compat::lookup("2.7.0", "cu124").is_none());
    let cu126 = compat::lookup("2.7.0", "cu126").unwrap();
    assert!(cu126.pypi_default);
    assert_eq!(
        (cu126.cudnn, cu126.nccl, cu126.cuda_runtime),
        ("9.5.1.17", "2.26.2", "12.6.77")
    );
    let cu128 = compat::lookup("2.7.0", "cu128").unwrap();
    assert_eq!(
        (cu128.cudnn, cu128.nccl, cu128.cuda_runtime),
        ("9.7.1.26", "2.26.2", "12.8.57")
    );
    // torch 2.6.0's PyPI wheel is the one that matches CUDA 12.4.1.
    let t26 = compat::pypi_default("2.6.0").unwrap();
    assert_eq!(
        (t26.variant, t26.cudnn, t26.nccl),
        ("cu124", "9.1.0.70", "2.21.5")
    );
    // Every row cites where it was read.
    for w in compat::TORCH_WHEELS {
        assert!(w.source.starts_with("https://"), "{w:?}");
    }
    for t in compat::CUDA_TOOLKITS {
        assert!(t.source.starts_with("https://docs.nvidia.com/"), "{t:?}");
    }
    // Drivers from NVIDIA's release notes.
    assert_eq!(
        compat::min_driver("12.4").unwrap().native_driver,
        "550.54.14"
    );
    assert_eq!(
        compat::min_driver("12.6").unwrap().native_driver,
        "560.28.03"
    );
    assert_eq!(compat::min_driver("12.8").unwrap().native_driver, "570.26");
    assert_eq!(
        compat::min_driver("11.8").unwrap().native_driver,
        "520.61.05"
    );
    assert_eq!(
        compat::min_driver("12.6").unwrap().minor_compat_driver,
        "525.60.13"
    );
    assert_eq!(compat::fit("12.6", "12.4.1"), compat::Fit::MinorCompat);
}

#[test]
fn the_example_spec_is_valid_and_renders() {
    let out = imgctl_at_root(&["render", "--spec", "examples/custom-spec.yaml"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("FROM nvidia/cuda:12.8.1-base-ubuntu22.04\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("--index-url https://download.pytorch.org/whl/cu128 torch==2.7.0+cu128")
    );
    assert!(stdout.contains("opencv-python-headless==4.11.0.86"));
    assert!(stdout.contains("useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash vision"));
    assert!(stdout.contains("org.example.team=\"vision\""));
}

#[test]
fn user_template_paths_are_relative_to_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        std::fs::read_to_string(repo_root().join("tests/fixtures/specs/busybox.yaml")).unwrap();
    // The template is missing next to this copy: a spec problem, not a crash.
    std::fs::write(dir.path().join("s.yaml"), &text).unwrap();
    let out = imgctl_at_root(&[
        "render",
        "--spec",
        dir.path().join("s.yaml").to_str().unwrap(),
    ]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("template: 'busybox.Dockerfile.j2' does not exist next to the spec"),
        "{stderr}"
    );
    // With the template next to it, it renders from any working directory.
    std::fs::copy(
        repo_root().join("tests/fixtures/specs/busybox.Dockerfile.j2"),
        dir.path().join("busybox.Dockerfile.j2"),
    )
    .unwrap();
    let out = Command::new(imgctl_bin())
        .args(["render", "--spec", "s.yaml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("FROM imgctl-test/busybox:latest"),
        "{stdout}"
    );
}

#[test]
fn template_and_lock_stay_in_the_spec_folder() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("specs");
    std::fs::create_dir(&dir).unwrap();
    let text =
        std::fs::read_to_string(repo_root().join("tests/fixtures/specs/busybox.yaml")).unwrap();
    let template = repo_root().join("tests/fixtures/specs/busybox.Dockerfile.j2");
    // A template and a lock outside the folder, reached through symlinks.
    std::fs::copy(&template, outer.path().join("outside.j2")).unwrap();
    std::os::unix::fs::symlink(outer.path().join("outside.j2"), dir.join("link.j2")).unwrap();
    std::os::unix::fs::symlink(outer.path(), dir.join("up")).unwrap();
    std::fs::copy(&template, dir.join("busybox.Dockerfile.j2")).unwrap();
    let real_outer = outer.path().canonicalize().unwrap();
    let render = |replace: (&str, &str)| {
        let path = dir.join("s.yaml");
        std::fs::write(&path, text.replace(replace.0, replace.1)).unwrap();
        let out = imgctl_at_root(&["render", "--spec", path.to_str().unwrap()]);
        let (stdout, stderr) = texts(&out);
        (out.status.code(), stdout, stderr)
    };
    let tpl = "template: busybox.Dockerfile.j2";
    let lock = |l: &str| format!("{tpl}\nlock: {l}");
    for (replace, message) in [
        (
            (tpl, "template: ../../../../etc/passwd".to_string()),
            "template: '../../../../etc/passwd' leaves the spec's folder (a `..` component or an absolute path); keep it in the spec's folder or below".to_string(),
        ),
        (
            (tpl, "template: /etc/passwd".to_string()),
            "template: '/etc/passwd' must be a path relative to the spec file".to_string(),
        ),
        (
            (tpl, "template: link.j2".to_string()),
            format!(
                "template: 'link.j2' resolves to {} (through a symlink), outside the spec's folder {}",
                real_outer.join("outside.j2").display(),
                real_outer.join("specs").display()
            ),
        ),
        (
            (tpl, lock("../x.lock")),
            "lock: '../x.lock' leaves the spec's folder".to_string(),
        ),
        (
            (tpl, lock("sub/../../x.lock")),
            "lock: 'sub/../../x.lock' leaves the spec's folder".to_string(),
        ),
        (
            (tpl, lock("up/specs-escape.lock")),
            format!(
                "lock: 'up/specs-escape.lock' resolves to {} (through a symlink), outside the spec's folder",
                real_outer.display()
            ),
        ),
    ] {
        let (code, stdout, stderr) = render((replace.0, &replace.1));
        assert_eq!(code, Some(2), "{}: {stderr}", replace.1);
        assert!(stdout.is_empty(), "{stdout}");
        assert!(
            stderr.lines().any(|l| l.trim_start().starts_with(&message)),
            "{}: wanted {message:?} in\n{stderr}",
            replace.1
        );
        assert!(!stderr.contains("root:"), "{stderr}");
    }
    // Inside the folder (also through ./ and a subfolder that does not exist yet) is fine.
    for good in [
        tpl.to_string(),
        "template: ./busybox.Dockerfile.j2".to_string(),
        lock("locks/s.lock"),
    ] {
        let (code, _, stderr) = render((tpl, &good));
        assert_eq!(code, Some(0), "{good}: {stderr}");
    }
}

#[test]
fn specs_lists_the_profiles() {
    let out = imgctl_at_root(&["specs", "--json"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON alone on stdout");
    assert_eq!(v["schema_version"], 1);
    let profiles = v["profiles"].as_array().unwrap();
    let names: Vec<&str> = profiles
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cu124", "cu126", "cu128"]);
    assert_eq!(profiles[0]["default"], true);
    assert_eq!(profiles[0]["torch_variant"], "cu126");
    assert_eq!(profiles[0]["compat"], "minor-version-compatibility");
    assert_eq!(profiles[0]["cudnn"], "9.5.1.17");
    assert_eq!(profiles[1]["compat"], "exact");
    assert_eq!(profiles[2]["cudnn"], "9.7.1.26");
    // The bundled locks: cu124 and cu126 are fresh; cu128's torch index
    // (download.pytorch.org) could not be resolved where they were made.
    let count = |i: usize| {
        std::fs::read_to_string(
            crate::common::repo_root().join(format!("images/{}.lock", names[i])),
        )
        .unwrap()
        .lines()
        // One `name==version` line per package; its hash lines are indented.
        .filter(|l| !l.starts_with('#') && !l.starts_with(' ') && !l.trim().is_empty())
        .count()
    };
    for i in [0, 1] {
        assert_eq!(profiles[i]["lock"], "fresh", "{}", profiles[i]);
        assert_eq!(profiles[i]["lock_packages"].as_u64(), Some(count(i) as u64));
    }
    assert_eq!(profiles[2]["lock"], "disabled");
    assert!(profiles[2]["lock_packages"].is_null());

    let out = imgctl_at_root(&["specs"]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    for needle in [
        "cu124 (default)",
        "2.7.0+cu126",
        "9.5.1.17",
        "2.26.2",
        "525.60.13",
        "pip lock",
    ] {
        assert!(
            stdout.contains(needle),
            "{needle:?} not in table:\n{stdout}"
        );
    }
    // The cu124 caveat is said, on stderr.
    assert!(stderr.contains("cu124 carries the cu126 wheel"), "{stderr}");
}

#[test]
fn the_lock_field_is_validated() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(repo_root().join("images/cu126.yaml")).unwrap();
    let render = |lock_line: &str| {
        let path = dir.path().join("s.yaml");
        std::fs::write(&path, format!("{base}{lock_line}\n")).unwrap();
        let out = imgctl_at_root(&["render", "--spec", path.to_str().unwrap()]);
        let (_, stderr) = texts(&out);
        (out.status.code(), stderr)
    };
    for bad in [
        (
            "lock: 3",
            "lock: expected true, false or a path, found a number (valid: false, true, or a relative path like my.lock)",
        ),
        (
            "lock: /etc/x.lock",
            "lock: '/etc/x.lock' must be a path relative to the spec file",
        ),
        (
            "lock: requirements.txt",
            "lock: 'requirements.txt' does not end in .lock",
        ),
        ("lokc: false", "lokc: unknown key; did you mean `lock`?"),
    ] {
        let (code, stderr) = render(bad.0);
        assert_eq!(code, Some(2), "{}: {stderr}", bad.0);
        assert!(stderr.contains(bad.1), "{}: {stderr}", bad.0);
    }
    for good in ["lock: true", "lock: false", "lock: locks/s.lock", ""] {
        let (code, stderr) = render(good);
        assert_eq!(code, Some(0), "{good}: {stderr}");
    }
    // A bundled spec takes its lock from images/; only a spec file names its own.
    let problems = specs::validate::validate(&format!("{base}lock: my.lock\n"), None).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0]
        .message
        .contains("bundled specs use their bundled lock"));
    let ok = specs::validate::validate(&format!("{base}lock: false\n"), None).unwrap();
    assert_eq!(ok.lock, specs::LockSetting::Disabled);
}

/// A copy of the example spec with `edit` applied, written to `dir/s.yaml`; its path.
fn edited_example(dir: &Path, edit: impl Fn(String) -> String) -> String {
    let text = std::fs::read_to_string(repo_root().join("examples/custom-spec.yaml")).unwrap();
    let path = dir.join("s.yaml");
    std::fs::write(&path, edit(text)).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn deep_nesting_and_huge_specs_are_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    // 200 KB of brackets took libyaml 80 s of CPU; the pre-scan answers at once.
    let deep = dir.path().join("deep.yaml");
    std::fs::write(
        &deep,
        format!("a: {}", "[".repeat(100_000) + &"]".repeat(100_000)),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = imgctl_at_root(&["render", "--spec", deep.to_str().unwrap()]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("(line 1 column 68): brackets nest deeper than 64 levels"),
        "{stderr}"
    );
    // The parse this refuses took 80 s of CPU; a debug imgctl (libtorch
    // loaded) starts in 1-2 s alone and took 3.3-5.9 s while the suite ran
    // training tests beside it on 2 cores, so the bound is far from both.
    assert!(
        started.elapsed().as_secs() < 20,
        "took {:?}",
        started.elapsed()
    );
    // Brackets inside quoted strings and comments do not count.
    let quoted = edited_example(dir.path(), |t| {
        let b = "[".repeat(100);
        let t =
            regex_free_replace_line(&t, "description:", &format!("# {b}\ndescription: \"{b}\""));
        t.replacen(
            "\nlabels:\n",
            &format!("\nlabels:\n  org.example.b: '{b}'\n"),
            1,
        )
    });
    let out = imgctl_at_root(&["render", "--spec", &quoted]);
    assert!(out.status.success(), "{}", texts(&out).1);
    // /dev/zero is no spec file (it is not read at all).
    let out = imgctl_at_root(&["render", "--spec", "/dev/zero"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: cannot read spec /dev/zero: is a device, not a regular file\n"),
        "{stderr}"
    );
    // Over 256 KiB: refused without reading more.
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat(300_000)).unwrap();
    let path = big.to_str().unwrap();
    let out = imgctl_at_root(&["render", "--spec", path]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: spec {path} is larger than 256 KiB, the most a spec file may be\n"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("hint: "), "{stderr}");
}

#[test]
fn values_too_long_for_a_dockerfile_line_are_spec_problems() {
    let dir = tempfile::tempdir().unwrap();
    // A 20 KB description (and label) rendered, then failed the build.
    let long = "x".repeat(20_000);
    let spec = edited_example(dir.path(), |t| {
        let t = regex_free_replace_line(&t, "description:", &format!("description: {long}"));
        t.replacen(
            "\nlabels:\n",
            &format!("\nlabels:\n  org.example.note: {long}\n"),
            1,
        )
    });
    let out = imgctl_at_root(&["render", "--spec", &spec]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty());
    for needle in [
        "has 2 problems",
        "\n  description: is 20000 bytes long; at most 16384 (Docker reads a Dockerfile line of at most 64 KiB, and this value is written on one)\n",
        "\n  labels.org.example.note: is 20000 bytes long; at most 16384",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in:\n{stderr}");
    }
}

/// `text` with its line starting with `prefix` replaced by `line`.
fn regex_free_replace_line(text: &str, prefix: &str, line: &str) -> String {
    text.lines()
        .map(|l| if l.starts_with(prefix) { line } else { l })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[test]
fn empty_specs_directory_templates_and_control_characters_read_clearly() {
    let dir = tempfile::tempdir().unwrap();
    // An empty spec (or only comments) was `  : expected a mapping, found nothing (null)`.
    for text in ["", "# nothing yet\n---\n"] {
        let path = dir.path().join("empty.yaml");
        std::fs::write(&path, text).unwrap();
        let out = imgctl_at_root(&["render", "--spec", path.to_str().unwrap()]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.starts_with(&format!("error: spec {} is empty\n", path.display())),
            "{stderr}"
        );
        assert!(stderr.contains("\nhint: "), "{stderr}");
    }
    // Not a mapping at the top: the field path says so.
    std::fs::write(dir.path().join("list.yaml"), "- a\n").unwrap();
    let out = imgctl_at_root(&[
        "render",
        "--spec",
        dir.path().join("list.yaml").to_str().unwrap(),
    ]);
    let (_, stderr) = texts(&out);
    assert!(
        stderr.contains("\n  (top level): expected a mapping, found a list\n"),
        "{stderr}"
    );
    // A directory named as the template is not "missing"; a value with a
    // newline or escape sequence is printed escaped, one problem per line.
    std::fs::create_dir(dir.path().join("tdir")).unwrap();
    let spec = edited_example(dir.path(), |t| {
        let t = regex_free_replace_line(&t, "# template:", "template: tdir");
        regex_free_replace_line(&t, "  - git", "  - \"gi\\nt\\e[31m\"")
    });
    let out = imgctl_at_root(&["render", "--spec", &spec]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for needle in [
        "has 2 problems\n",
        "\n  apt[5]: 'gi\\nt\\u{1b}[31m' is not a Debian package name",
        "\n  template: 'tdir' is a directory, not a template file (",
    ] {
        assert!(stderr.contains(needle), "missing {needle:?} in:\n{stderr}");
    }
    assert!(!stderr.contains('\x1b'), "{stderr}");
}

/// A URL with credentials in a spec (torch.index, a label) is refused like
/// `--pip-index-url`'s (reliability and security III, N1): it used to land in
/// a RUN line (`docker history`), a comment and the `io.imgctl.torch.index`
/// label. No command that reads the spec prints the secret.
#[test]
fn spec_urls_with_credentials_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = std::fs::read_to_string(repo_root().join("images/cu126.yaml"))
        .unwrap()
        .replace(
            "index: https://pypi.org/simple",
            "index: https://u:s3cret-pw@mirror.example/simple",
        )
        .replace(
            "org.opencontainers.image.licenses: Apache-2.0",
            "org.opencontainers.image.licenses: Apache-2.0\n  org.opencontainers.image.source: https://s3cret-token@git.example/team/repo",
        );
    let path = dir.path().join("creds.yaml");
    std::fs::write(&path, spec).unwrap();
    let p = path.to_str().unwrap();
    for command in [
        &["render", "--spec", p][..],
        &["build", "--spec", p, "--dry-run"],
        &["lock", "--spec", p, "--check"],
    ] {
        let out = imgctl_at_root(command);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(stdout.is_empty(), "{command:?}: {stdout}");
        assert!(!stderr.contains("s3cret"), "{command:?}: {stderr}");
        assert!(stderr.contains("has 2 problems"), "{command:?}: {stderr}");
        for needle in [
            "torch.index: 'https://***@mirror.example/simple' contains credentials",
            "labels.org.opencontainers.image.source: 'https://***@git.example/team/repo' contains credentials",
        ] {
            assert!(stderr.contains(needle), "{command:?}: no {needle:?} in\n{stderr}");
        }
    }
}
