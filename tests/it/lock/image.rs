//! A lock in a built image: installed with its hashes and named in its label; a
//! package whose hash does not match fails the build naming it.
use super::*;

/// A template for the busybox base: the lock COPYs of the bundled template
/// and a check that the files arrived whole (each step's entries, each with
/// its hash), nothing installed.
const LOCK_TEMPLATE: &str = r#"FROM {{ base_image }}
{% if lock %}
COPY {{ files.pip_lock }} {{ lock.path }}
COPY {{ files.pip_lock_torch }} {{ lock.torch_path }}
COPY {{ files.pip_lock_deps }} {{ lock.deps_path }}
COPY {{ files.pip_lock_pins }} {{ lock.pins_path }}
RUN test "$(grep -c '^[a-z0-9].*==' {{ lock.path }})" = "{{ lock.packages }}" && \
    test "$(grep -c '^[a-z0-9].*==' {{ lock.torch_path }})" = "{{ lock.torch_packages }}" && \
    test "$(grep -c '^ *--hash=sha256:' {{ lock.torch_path }})" = "{{ lock.torch_packages }}" && \
    test "$(grep -c '^[a-z0-9].*==' {{ lock.pins_path }})" = "{{ lock.named_packages }}" && \
    test "$(grep -c '^diffusers==0.33.1 ' {{ lock.pins_path }})" = 1 && \
    test "$(grep -c '^[a-z0-9].*==' {{ lock.deps_path }})" = "{{ lock.deps_packages }}" && \
    test "$(grep -c '^numpy==2.2.6 ' {{ lock.deps_path }})" = 1 && \
    test "$(grep -c '^ *--hash=sha256:' {{ lock.deps_path }})" = 2 && \
    test "{{ lock.named_packages + lock.deps_packages }}" = "{{ lock.pins_packages }}"
{% endif %}
COPY {{ files.imgctl }} /usr/local/bin/imgctl
LABEL \
{% for key, value in labels %}
    {{ key }}={{ value | dq }}{{ " \\" if not loop.last else "" }}
{% endfor %}
"#;

#[test]
fn a_fresh_lock_goes_into_the_image_and_its_label() {
    ensure_bases();
    let dir = tempfile::tempdir().unwrap();
    let yaml = std::fs::read_to_string(repo_root().join("tests/fixtures/specs/busybox.yaml"))
        .unwrap()
        .replace(
            "template: busybox.Dockerfile.j2",
            "template: lock.Dockerfile.j2",
        );
    let spec_path = dir.path().join("bb.yaml");
    std::fs::write(&spec_path, &yaml).unwrap();
    std::fs::write(dir.path().join("lock.Dockerfile.j2"), LOCK_TEMPLATE).unwrap();
    // The lock, written with the library (its resolution is tested above).
    let loaded = specs::load(&SpecSource::File(spec_path.clone())).unwrap();
    let lock_text = LockFile::new(
        &LockInputs::of(&loaded.spec),
        [
            ("diffusers", Locked::new("0.33.1", Step::Pins, [SIX_WHEEL])),
            ("torch", Locked::new("2.7.0", Step::Torch, [SIX_WHEEL])),
            (
                "numpy",
                Locked::new("2.2.6", Step::Pins, [SIX_WHEEL, DATEUTIL_WHEEL]),
            ),
        ],
    )
    .to_text(
        &loaded.origin,
        &imgctl::commands::lock::lock_command(&loaded),
    );
    let lock_path = dir.path().join("bb.lock");
    std::fs::write(&lock_path, &lock_text).unwrap();

    let mut guard = EngineGuard::default();
    let tag = format!("imgctl-test/it-build:{}-lock", std::process::id());
    guard.image(&tag);
    let build = |tag: &str| {
        let out = imgctl_in(
            dir.path(),
            &["build", "--spec", spec_path.to_str().unwrap(), "--tag", tag],
            &[],
        );
        let (_, stderr) = texts(&out);
        assert!(out.status.success(), "{stderr}");
        stderr
    };
    let stderr = build(&tag);
    assert!(
        stderr.contains(&format!("pip lock: {} (3 packages)", lock_path.display())),
        "{stderr}"
    );
    let in_image = docker_ok(&[
        "run",
        "--rm",
        &tag,
        "cat",
        imgctl::image::lock::IMAGE_LOCK_PATH,
    ]);
    assert_eq!(in_image, lock_text.trim_end());
    let sha = docker_ok(&[
        "inspect",
        "--format",
        "{{index .Config.Labels \"io.imgctl.pip_lock.sha256\"}} {{index .Config.Labels \"io.imgctl.pip_lock.packages\"}}",
        &tag,
    ]);
    assert_eq!(
        sha,
        format!("{} 3", specs::sha256_hex(lock_text.as_bytes()))
    );

    // Stale (a pin changed): the build warns, succeeds, and leaves the lock out.
    std::fs::write(
        &spec_path,
        yaml.replace("diffusers==0.33.1", "diffusers==0.34.0"),
    )
    .unwrap();
    let stale_tag = format!("{tag}-stale");
    guard.image(&stale_tag);
    let stderr = build(&stale_tag);
    assert!(
        stderr.contains(&format!(
            "warning: pip lock {} is stale (pin diffusers 0.33.1 → 0.34.0) and not used",
            lock_path.display()
        )),
        "{stderr}"
    );
    let out = docker(&[
        "run",
        "--rm",
        &stale_tag,
        "test",
        "-e",
        imgctl::image::lock::IMAGE_LOCK_PATH,
    ]);
    assert_eq!(out.status.code(), Some(1), "no lock in the image");
    let label = docker_ok(&[
        "inspect",
        "--format",
        "{{index .Config.Labels \"io.imgctl.pip_lock.sha256\"}}",
        &stale_tag,
    ]);
    assert!(label.is_empty() || label == "<no value>", "{label}");
}

/// The bundled template cut down for a build without torch: its apt, venv and
/// lock layers, and its pip layer with its own pip lines, without the torch
/// layer (the pins check that imports torch becomes `true`), ending before
/// the user layer (which the image's imgctl, linked to torch, follows).
fn template_without_torch() -> String {
    let t = imgctl::image::render::WORKSTATION_TEMPLATE;
    let torch = t.find("# Layer 3: torch").expect("the torch layer");
    let pins = t.find("{% if pip %}").expect("the pip layer");
    let user = t.find("{# Layers 5-7:").expect("the user layer");
    assert!(torch < pins && pins < user);
    let cut = format!("{}{}", &t[..torch], &t[pins..user]).replace("{{ check_pins }}", "true");
    // What is tested is the bundled template's own pip line.
    assert!(
        cut.contains("{{ lock_install }}{{ lock_flags }} -r {{ lock.pins_path }}; \\\n{% endif %}\n{{ uv_end }}    pip check; \\\n")
            && cut.contains("{{ lock_install }}{{ lock_flags }} -r {{ lock.deps_path }}; \\\n")
            && cut.contains(" --require-hashes --no-deps --only-binary :all:\") if lock else \"\" %}"),
        "{cut}"
    );
    cut
}

#[test]
fn a_package_that_does_not_match_its_hash_fails_the_build_naming_it() {
    ensure_bases();
    let dir = tempfile::tempdir().unwrap();
    // The cu124 spec with one tiny pin and the template above.
    let yaml = specs::bundled()
        .into_iter()
        .find(|(n, _)| *n == "cu124")
        .unwrap()
        .1;
    let pins_start = yaml.find("\npip:\n").unwrap();
    let pins_end = yaml.find("\napt:\n").unwrap();
    let yaml = format!(
        "{}\npip:\n  - six==1.16.0{}template: no-torch.Dockerfile.j2\n",
        &yaml[..pins_start],
        &yaml[pins_end..]
    );
    let spec_path = dir.path().join("tiny.yaml");
    std::fs::write(&spec_path, &yaml).unwrap();
    std::fs::write(
        dir.path().join("no-torch.Dockerfile.j2"),
        template_without_torch(),
    )
    .unwrap();
    let loaded = specs::load(&SpecSource::File(spec_path.clone())).unwrap();
    let write_lock = |six_hash: &str| {
        let text = LockFile::new(
            &LockInputs::of(&loaded.spec),
            [
                // Never installed here: the torch layer is cut out.
                ("torch", Locked::new("2.7.0", Step::Torch, [SIX_WHEEL])),
                ("six", Locked::new("1.16.0", Step::Pins, [six_hash])),
            ],
        )
        .to_text(
            &loaded.origin,
            &imgctl::commands::lock::lock_command(&loaded),
        );
        std::fs::write(dir.path().join("tiny.lock"), text).unwrap();
    };
    let spec_arg = spec_path.to_str().unwrap();
    let args = [
        "--spec",
        spec_arg,
        "--base-image",
        DEBIAN_BASE,
        "--ca-cert",
        "/etc/ssl/certs/ca-certificates.crt",
    ];
    let mut guard = EngineGuard::default();

    // The right hash: pip installs six from PyPI, checks it, and pip check passes.
    write_lock(SIX_WHEEL);
    let tag = format!("imgctl-test/it-build:{}-hash-ok", std::process::id());
    guard.image(&tag);
    let mut build: Vec<&str> = vec!["build", "--tag", &tag];
    build.extend_from_slice(&args);
    let out = imgctl_in(dir.path(), &build, &[]);
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("pip lock: "), "{stderr}");
    let six = docker_ok(&[
        "run",
        "--rm",
        "--entrypoint",
        "/opt/venv/bin/python",
        &tag,
        "-c",
        "import importlib.metadata as m; print(m.version('six'))",
    ]);
    assert_eq!(six, "1.16.0");

    // One hex digit changed: the pip layer fails, and its output names six.
    let mut wrong = SIX_WHEEL.to_string();
    wrong.replace_range(0..1, "9");
    write_lock(&wrong);
    let bad_tag = format!("imgctl-test/it-build:{}-hash-bad", std::process::id());
    guard.image(&bad_tag);
    let tail = check_failing_build(&args, &bad_tag, 1).join("\n");
    eprintln!("lock: the pip layer's output with a wrong hash for six:\n{tail}");
    assert!(tail.contains("DO NOT MATCH THE HASHES"), "{tail}");
    assert!(tail.contains("six==1.16.0 from https://"), "{tail}");
    assert!(tail.contains(&format!("Expected sha256 {wrong}")), "{tail}");
    assert!(tail.contains(&format!("Got        {SIX_WHEEL}")), "{tail}");

    // The same with BuildKit, whose locked steps install through uv.
    let mut bk = args.to_vec();
    bk.extend_from_slice(&["--builder", "buildkit"]);
    let tail = check_failing_build(&bk, &bad_tag, 1).join("\n");
    eprintln!("lock: the uv step's output with a wrong hash for six:\n{tail}");
    assert!(tail.contains("six==1.16.0"), "{tail}");
    assert!(tail.contains(&format!("sha256:{wrong}")), "{tail}");
    assert!(tail.contains(&format!("sha256:{SIX_WHEEL}")), "{tail}");
}
