//! A spec's lock file in the rendered Dockerfile: a fresh lock is copied in for both
//! pip steps, a stale or unusable one warns and is left out.
use super::*;

#[test]
fn a_fresh_lock_is_copied_in_and_holds_both_pip_steps() {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = user_spec(dir.path(), &|y| y.to_string());
    let lock_path = dir.path().join("my.lock");

    // No lock yet: said, and the Dockerfile has none.
    let (d, stderr) = render_spec(&spec_path);
    assert!(!d.contains("pip.lock"), "{d}");
    assert!(
        stderr.contains(&format!(
            "pip lock: {} does not exist, so transitive Python packages float; create it with `imgctl lock --spec {}`",
            lock_path.display(),
            spec_path.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("warning"), "{stderr}");

    let text = write_lock(&spec_path, &lock_path);
    let (d, stderr) = render_spec(&spec_path);
    assert!(
        stderr.contains(&format!("pip lock: {} (10 packages)", lock_path.display())),
        "{stderr}"
    );
    let ins = instructions(&d);
    let copy = position(&ins, "COPY image/pip.lock /etc/imgctl/pip.lock");
    let copy_torch = position(
        &ins,
        "COPY image/pip-lock-torch.txt /etc/imgctl/pip-lock-torch.txt",
    );
    let torch = position(&ins, "-r /etc/imgctl/pip-lock-torch.txt;");
    let copy_pins = position(
        &ins,
        "COPY image/pip-lock-pins.txt /etc/imgctl/pip-lock-pins.txt",
    );
    let pins = position(&ins, "-r /etc/imgctl/pip-lock-pins.txt;");
    let copy_deps = position(
        &ins,
        "COPY image/pip-lock-deps.txt /etc/imgctl/pip-lock-deps.txt",
    );
    let deps = position(&ins, "-r /etc/imgctl/pip-lock-deps.txt;");
    assert!(
        position(&ins, "python3 -m venv") < copy_torch && copy_torch < torch,
        "the torch step arrives before the torch layer"
    );
    assert!(
        torch < copy_deps && copy_deps < deps && deps < copy_pins && copy_pins < pins && pins < copy,
        "the pins' dependencies, the named pins and then the whole lock arrive after the torch layer \
         (a change of the pins keeps its cache, a pin changed alone keeps the dependencies' too)"
    );
    // The dependencies' layer installs them alone; `pip check` waits for the pins.
    assert!(
        ins[deps].contains(
            "pip install --no-cache-dir --require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-deps.txt;"
        ) && !ins[deps].contains("pip check"),
        "{}",
        ins[deps]
    );
    // Both layers install their step alone, in pip's hash-checking mode, then check.
    assert!(
        ins[torch].contains(
            "pip install --no-cache-dir --index-url https://pypi.org/simple --require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-torch.txt;"
        ) && ins[torch].contains(" pip check;"),
        "{}",
        ins[torch]
    );
    assert!(
        ins[pins].contains(
            "pip install --no-cache-dir --require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-pins.txt;"
        ) && ins[pins].contains(" pip check;"),
        "{}",
        ins[pins]
    );
    assert!(
        !ins[pins].contains("diffusers==") && !d.contains("--constraint"),
        "{d}"
    );
    // The torch pins are still frozen and checked.
    assert!(ins[torch].contains("pip freeze | grep -E '^(torch|triton|nvidia-)'"));
    assert!(ins[pins].contains("installed pins differ from the compatibility table"));
    let sha = specs::sha256_hex(text.as_bytes());
    assert!(
        d.contains(&format!("io.imgctl.pip_lock.sha256=\"{sha}\"")),
        "{d}"
    );
    assert!(d.contains("io.imgctl.pip_lock.packages=\"10\""));
    assert!(
        d.contains(&format!("10 packages,\n# sha256 {sha}.\n")),
        "{d}"
    );
    assert!(d.contains("Its torch step (2 packages)"), "{d}");
    assert!(d.contains("# The lock's pins step (8 packages: "), "{d}");
    assert!(
        d.contains("# Layer 4a: what the pins need (1 package)"),
        "{d}"
    );
    assert!(
        d.contains("# Layer 4: the pins the spec names (7 packages)"),
        "{d}"
    );

    // The library view: the context holds the lock byte for byte.
    let loaded = specs::load(&SpecSource::File(spec_path.clone())).unwrap();
    let r = render::render(&loaded, &RenderOptions::default()).unwrap();
    let f = r
        .files
        .iter()
        .find(|f| f.path == render::PIP_LOCK_PATH)
        .expect("the lock is a context file");
    assert_eq!(f.contents, text.as_bytes());
    assert_eq!((f.mode, r.lock.is_fresh()), (0o644, true));
    assert_eq!(r.labels["io.imgctl.pip_lock.sha256"], sha);
    // Each step is a requirements file of its own: its entries, each hashed.
    let step = |path: &str| {
        let f = r
            .files
            .iter()
            .find(|f| f.path == path)
            .expect("a step file");
        assert_eq!(f.mode, 0o644);
        String::from_utf8(f.contents.clone()).unwrap()
    };
    let torch_step = step(render::PIP_LOCK_TORCH_PATH);
    assert_eq!(
        torch_step
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>(),
        [
            "torch==2.7.0 \\".to_string(),
            format!("    --hash=sha256:{SOME_HASH}"),
            "typing-extensions==4.13.2 \\".to_string(),
            format!("    --hash=sha256:{SOME_HASH}"),
        ]
    );
    // The pins step in two files: what the spec names, and the rest.
    let pins_step = step(render::PIP_LOCK_PINS_PATH);
    let deps_step = step(render::PIP_LOCK_DEPS_PATH);
    assert!(
        pins_step.contains("\ndiffusers==0.33.1 \\\n") && !pins_step.contains("numpy"),
        "{pins_step}"
    );
    assert_eq!(
        deps_step
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>(),
        [
            "numpy==2.2.6 \\".to_string(),
            format!("    --hash=sha256:{SOME_HASH}"),
        ]
    );
    for text in [&pins_step, &deps_step] {
        assert!(!text.contains("torch=="), "{text}");
    }
}

#[test]
fn a_stale_or_unusable_lock_warns_and_is_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = user_spec(dir.path(), &|y| y.to_string());
    let lock_path = dir.path().join("my.lock");
    write_lock(&spec_path, &lock_path);
    let cmd = format!("imgctl lock --spec {}", spec_path.display());

    // A pin changes: the lock is stale, said in one line, and not used.
    user_spec(dir.path(), &|y| {
        y.replace("diffusers==0.33.1", "diffusers==0.34.0")
    });
    let (d, stderr) = render_spec(&spec_path);
    assert!(
        stderr.contains(&format!(
            "warning: pip lock {} is stale (pin diffusers 0.33.1 → 0.34.0) and not used; regenerate it with `{cmd}`",
            lock_path.display()
        )),
        "{stderr}"
    );
    assert_eq!(stderr.matches("warning").count(), 1, "{stderr}");
    assert!(!d.contains("pip.lock") && !d.contains("pip_lock"), "{d}");

    // Comments and key order do not make it stale.
    user_spec(dir.path(), &|y| {
        format!("# a comment on top\nlock: true\n{y}")
    });
    let (d, stderr) = render_spec(&spec_path);
    assert!(d.contains("COPY image/pip.lock"), "{stderr}");

    // `lock: false` leaves even a fresh lock out, and says so.
    user_spec(dir.path(), &|y| format!("{y}lock: false\n"));
    let (d, stderr) = render_spec(&spec_path);
    assert!(!d.contains("pip.lock"));
    assert!(
        stderr.contains(
            "pip lock: none (the spec says `lock: false`; transitive Python packages float)"
        ),
        "{stderr}"
    );

    // `lock: PATH` names another file: a missing one is a warning...
    user_spec(dir.path(), &|y| format!("{y}lock: locks/other.lock\n"));
    let (d, stderr) = render_spec(&spec_path);
    assert!(!d.contains("pip.lock"));
    assert!(
        stderr.contains(&format!(
            "warning: pip lock: {} does not exist",
            dir.path().join("locks/other.lock").display()
        )),
        "{stderr}"
    );
    // ...and an existing one is used.
    std::fs::create_dir(dir.path().join("locks")).unwrap();
    std::fs::copy(&lock_path, dir.path().join("locks/other.lock")).unwrap();
    let (d, _) = render_spec(&spec_path);
    assert!(d.contains("COPY image/pip.lock"));

    // A file that is not a lock is a warning, not a failure.
    user_spec(dir.path(), &|y| y.to_string());
    std::fs::write(&lock_path, "diffusers==0.33.1\n").unwrap();
    let (d, stderr) = render_spec(&spec_path);
    assert!(!d.contains("pip.lock"));
    assert!(
        stderr.contains("is not used, it is not a lock file (no `# lock-version:` line"),
        "{stderr}"
    );
}
