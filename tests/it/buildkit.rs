//! `imgctl build` with BuildKit against the real engine (Docker 20.10 serves
//! it through `/build?version=2` as well as current engines do), and the
//! builder choice: the same report, progress and failure report as the
//! classic builder, unchanged rebuilds that give the same image id with both
//! builders (no wall clock in the labels), a client pinned to API 1.41 that
//! still builds with the classic builder, the rendered BuildKit variant, and
//! build secrets (`--ca-cert-secret`) served by imgctl's own BuildKit session.
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::build::{
    busybox_spec, check_failing_build, docker_ok, ensure_bases, test_tag, EngineGuard,
};
use crate::common::{imgctl_bin, one_error_line, texts};

/// imgctl with `env`, without the engine settings of the caller's shell
/// (`DOCKER_BUILDKIT`, `DOCKER_API_VERSION`, `SOURCE_DATE_EPOCH`).
pub fn imgctl(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(imgctl_bin());
    cmd.args(args)
        .env("NO_COLOR", "1")
        .env_remove("DOCKER_BUILDKIT")
        .env_remove("DOCKER_API_VERSION")
        .env_remove("SOURCE_DATE_EPOCH")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run imgctl")
}

/// Builds the busybox spec twice with `builder` and returns both reports.
fn build_twice(builder: &str, tag: &str) -> (Value, Value, String) {
    let spec = busybox_spec();
    let args = [
        "build",
        "--spec",
        spec.to_str().unwrap(),
        "--builder",
        builder,
        "--tag",
        tag,
        // A cache chain of this test's own (see build.rs's rebuild test).
        "--build-arg",
        &format!("IMGCTL_TEST_FAIL=reproducible-{builder}"),
        "--json",
    ];
    let first = imgctl(&args, &[]);
    let (stdout, stderr) = texts(&first);
    assert!(
        first.status.success(),
        "first {builder} build failed:\n{stderr}"
    );
    let first: Value = serde_json::from_str(&stdout).expect("report JSON");
    let second = imgctl(&args, &[]);
    let (stdout, stderr2) = texts(&second);
    assert!(
        second.status.success(),
        "{builder} rebuild failed:\n{stderr2}"
    );
    let second: Value = serde_json::from_str(&stdout).expect("report JSON");
    (first, second, format!("{stderr}\n{stderr2}"))
}

/// Held by the tests that compare image ids of the busybox spec, so that
/// one's `--no-cache` builds (and their removal) never run beside the
/// other's cached rebuilds on the classic builder's shared image store (a
/// cached rebuild gave a new id once when they ran together).
static IMAGE_ID_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn unchanged_rebuilds_give_the_same_image_with_both_builders() {
    let _one_at_a_time = IMAGE_ID_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    ensure_bases();
    let mut guard = EngineGuard::default();
    for builder in ["buildkit", "classic"] {
        let tag = test_tag(&format!("repro-{builder}"));
        guard.image(&tag);
        let (first, second, stderr) = build_twice(builder, &tag);
        assert_eq!(first["builder"], builder, "{first}");
        assert!(
            stderr.contains(&format!(", builder {builder} (requested)")),
            "no engine line naming the builder:\n{stderr}"
        );
        assert!(stderr.contains("engine: Docker "), "{stderr}");
        assert_eq!(
            first["image_id"], second["image_id"],
            "{builder}: an unchanged rebuild (no SOURCE_DATE_EPOCH) gave a new image"
        );
        assert_eq!(
            second["steps"]["executed"], 0,
            "{builder}: {}",
            second["steps"]
        );
        // Every step but the FROM came from the cache, and the FROM is never
        // counted as a cache hit (BuildKit marks a local base's vertex cached).
        let total = second["steps"]["total"].as_u64().unwrap();
        assert_eq!(
            second["steps"]["cached"].as_u64().unwrap(),
            total - 1,
            "{builder}: {}",
            second["steps"]
        );
        // The same fields in both builders' reports.
        for key in [
            "image_id",
            "tags",
            "size_bytes",
            "duration_s",
            "pins",
            "steps",
        ] {
            assert!(first.get(key).is_some(), "{builder}: no {key} in {first}");
        }
        // The created label comes from the spec's inputs, not the clock.
        let created = &first["pins"]["org.opencontainers.image.created"];
        assert_eq!(created, &second["pins"]["org.opencontainers.image.created"]);
        let labels = docker_ok(&[
            "image",
            "inspect",
            "--format",
            "{{index .Config.Labels \"io.imgctl.torch\"}}",
            &tag,
        ]);
        assert_eq!(labels, "2.7.0");
    }
}

/// The engine's major version (`28` of `28.5.2+dfsg4`).
fn engine_major() -> u32 {
    docker_ok(&["version", "--format", "{{.Server.Version}}"])
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

/// #29 item 3.5: two `--no-cache` builds of the busybox spec with
/// `SOURCE_DATE_EPOCH` set. With BuildKit on an engine whose BuildKit reads
/// it (0.11 and later: Docker 23 and later), to which imgctl passes it,
/// they give the same image id: the config's and history's times come from
/// it, the context's files have fixed times, and the template's RUN step
/// clamps the times of what it wrote. Docker 20.10's BuildKit (0.8) and the
/// classic builder write the wall clock into the config: there the ids
/// differ, as the README says, and this test checks that they still do (so
/// the README's table is held to the engines CI runs).
#[test]
fn fresh_builds_give_the_same_image_where_the_engine_allows() {
    let _one_at_a_time = IMAGE_ID_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    ensure_bases();
    let mut guard = EngineGuard::default();
    let major = engine_major();
    for builder in ["buildkit", "classic"] {
        let tag = test_tag(&format!("fresh-{builder}"));
        guard.image(&tag);
        let spec = busybox_spec();
        let build = || {
            let out = imgctl(
                &[
                    "build",
                    "--spec",
                    spec.to_str().unwrap(),
                    "--builder",
                    builder,
                    "--tag",
                    &tag,
                    "--no-cache",
                    "--json",
                    // A step chain of its own, shared with no other test's builds.
                    "--build-arg",
                    &format!("IMGCTL_TEST_FAIL=fresh-{builder}"),
                ],
                &[("SOURCE_DATE_EPOCH", "1764720000")],
            );
            let (stdout, stderr) = texts(&out);
            assert!(out.status.success(), "{builder}: {stderr}");
            let report: Value = serde_json::from_str(&stdout).expect("report JSON");
            report["image_id"].as_str().unwrap().to_string()
        };
        let (first, second) = (build(), build());
        let reproducible = builder == "buildkit" && major >= 23;
        eprintln!(
            "fresh builds, {builder} on Docker {major}: {}",
            if first == second {
                "same image id"
            } else {
                "different image ids"
            }
        );
        if reproducible {
            assert_eq!(
                first, second,
                "{builder} on Docker {major}: fresh builds differ"
            );
        } else {
            assert_ne!(
                first, second,
                "{builder} on Docker {major} is reproducible now: update the table in docs/build.md"
            );
        }
        let _ = docker_ok(&["image", "inspect", "--format", "{{.Id}}", &tag]);
        let _ = crate::build::docker(&["rmi", "-f", &first]);
    }
}

#[test]
fn buildkit_failure_names_the_step_exit_code_and_stderr() {
    ensure_bases();
    let mut guard = EngineGuard::default();
    let tag = test_tag("bk-fail");
    guard.image(&tag);
    let spec = busybox_spec();
    // The same checks as the classic builder's failure (one error line naming
    // the step, the RUN and exit code 3, a tail of at most 20 lines, a hint,
    // nothing tagged).
    let tail = check_failing_build(
        &[
            "--builder",
            "buildkit",
            "--spec",
            spec.to_str().unwrap(),
            "--build-arg",
            "IMGCTL_TEST_FAIL=1",
        ],
        &tag,
        3,
    );
    assert_eq!(tail.len(), 20, "{tail:?}");
    // stderr's line is kept even when more stdout arrived after it.
    assert!(
        tail.iter()
            .any(|l| l == "failing on purpose (IMGCTL_TEST_FAIL=1)"),
        "{tail:?}"
    );
    assert!(tail.iter().any(|l| l == "test output line 30"), "{tail:?}");
}

#[test]
fn a_client_pinned_to_api_1_41_builds_with_the_classic_builder() {
    ensure_bases();
    let mut guard = EngineGuard::default();
    let tag = test_tag("pinned");
    guard.image(&tag);
    let spec = busybox_spec();
    let args = [
        "build",
        "--spec",
        spec.to_str().unwrap(),
        "--tag",
        &tag,
        "--json",
    ];
    let out = imgctl(&args, &[("DOCKER_API_VERSION", "1.41")]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("(API 1.41") && stderr.contains("builder classic (auto: engine API 1.41)"),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["builder"], "classic");
    // DOCKER_BUILDKIT=1 is the docker CLI's way to ask for BuildKit.
    let out = imgctl(
        &args,
        &[("DOCKER_API_VERSION", "1.41"), ("DOCKER_BUILDKIT", "1")],
    );
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("builder buildkit (DOCKER_BUILDKIT=1)"),
        "{stderr}"
    );
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["builder"], "buildkit");
    // Bad values are usage errors before anything is built.
    for (env, needle) in [
        (("DOCKER_BUILDKIT", "maybe"), "DOCKER_BUILDKIT=\"maybe\""),
        (("DOCKER_API_VERSION", "one"), "DOCKER_API_VERSION=\"one\""),
        // Below every engine's minimum (20.10: 1.12, 28: 1.24): refused only
        // when the request really carries the pinned version in its path
        // (bollard 0.21 drops the `/v1.xx` prefix; engine.rs puts it back).
        (
            ("DOCKER_API_VERSION", "1.5"),
            "refuses DOCKER_API_VERSION=1.5",
        ),
    ] {
        let out = imgctl(&args, &[env]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(needle), "{stderr}");
    }
}

#[test]
fn the_buildkit_variant_mounts_caches_and_the_build_only_ca() {
    let ca = "/etc/ssl/certs/ca-certificates.crt";
    let render = |extra: &[&str]| {
        let mut args = vec!["render", "--cuda", "12.4"];
        args.extend_from_slice(extra);
        let out = imgctl(&args, &[]);
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "{stderr}");
        stdout
    };
    let classic = render(&[]);
    assert!(!classic.contains("--mount="), "{classic}");
    assert_eq!(classic, render(&["--builder", "auto"]));
    let bk = render(&["--builder", "buildkit"]);
    assert!(bk.contains("--mount=type=cache,id=imgctl-pip,target=/root/.cache/pip"));
    assert!(bk.contains("target=/var/lib/apt/lists,sharing=locked"));
    assert!(bk.contains("env -u PIP_NO_CACHE_DIR pip install --cache-dir /root/.cache/pip"));
    // With a lock, the pip steps install through a hash-checked uv, kept in
    // /tmp of the step only.
    assert!(bk.contains("--require-hashes --no-deps --only-binary :all: --target /tmp/imgctl-uv -r /run/imgctl-build/uv-requirements.txt"), "{bk}");
    assert!(
        bk.contains("/tmp/imgctl-uv/bin/uv pip install --python /opt/venv/bin/python"),
        "{bk}"
    );
    assert!(bk.contains("rm -rf /tmp/imgctl-uv"), "{bk}");
    assert!(!classic.contains("imgctl-uv"), "{classic}");
    // The layers' cleanup must not empty the cache mounts.
    assert!(!bk.contains("rm -rf /var/lib/apt/lists/*"), "{bk}");
    // After the layer of what the pins need, a changed pin or a new imgctl
    // rebuilds two layers: the pins' RUN (their lock part bind-mounted) and one
    // RUN for the user, the image files, imgctl and the whole lock. Each layer
    // more cost about 8 s of export on fuse-overlayfs (build issue).
    let ins = crate::render::instructions(&bk);
    let deps = ins
        .iter()
        .position(|i| i.contains("-r /etc/imgctl/pip-lock-deps.txt;"))
        .expect("the dependencies' layer");
    let after: Vec<&str> = ins[deps + 1..]
        .iter()
        .map(|i| i.split_whitespace().next().unwrap())
        .filter(|k| ["RUN", "COPY", "ADD", "WORKDIR"].contains(k))
        .collect();
    assert_eq!(after, ["RUN", "RUN"], "{bk}");
    let last = ins.iter().rfind(|i| i.starts_with("RUN ")).unwrap();
    for needle in [
        "--mount=type=bind,source=image/rootfs,target=/run/imgctl-build/rootfs",
        "--mount=type=bind,source=imgctl,target=/run/imgctl-build/imgctl",
        "useradd --uid 1000",
        "cp -R /run/imgctl-build/rootfs/. /",
        "install -D -m 0644 /run/imgctl-build/pip.lock /etc/imgctl/pip.lock",
        "imgctl --version",
    ] {
        assert!(last.contains(needle), "{needle}: {last}");
    }
    assert!(
        bk.contains(
            "install -D -m 0644 /run/imgctl-build/pip-lock-pins.txt /etc/imgctl/pip-lock-pins.txt"
        ),
        "{bk}"
    );
    let secret = render(&["--builder", "buildkit", "--ca-cert-secret", ca]);
    assert!(
        secret.contains(
            "--mount=type=secret,id=proxy-ca,required=true,mode=0444,target=/run/imgctl-build/proxy-ca.crt"
        ),
        "{secret}"
    );
    assert!(!secret.contains("build-only/proxy-ca.crt"), "{secret}");
    assert!(!secret.contains("COPY image/ca.crt"), "{secret}");
    assert!(!secret.contains("update-ca-certificates"), "{secret}");
    assert!(!secret.contains("io.imgctl.ca_cert.sha256"), "{secret}");
    // The classic builder has no build secrets.
    let out = imgctl(
        &[
            "render",
            "--cuda",
            "12.4",
            "--builder",
            "classic",
            "--ca-cert-secret",
            ca,
        ],
        &[],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--ca-cert-secret needs BuildKit"),
        "{stderr}"
    );
}

#[test]
fn ctrl_c_cancels_a_buildkit_build_on_the_engine() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    ensure_bases();
    let _guard = EngineGuard::default();
    let tag = test_tag("bk-cancel");
    // A spec whose RUN step sleeps for a time no other process here uses, so
    // the host's process list shows whether the engine stopped it.
    let dir = tempfile::tempdir().unwrap();
    let fixtures = busybox_spec().parent().unwrap().to_path_buf();
    let spec = std::fs::read_to_string(fixtures.join("busybox.yaml"))
        .unwrap()
        .replace(
            "template: busybox.Dockerfile.j2",
            "template: slow.Dockerfile.j2",
        );
    std::fs::write(dir.path().join("slow.yaml"), spec).unwrap();
    let nonce = std::process::id() % 1000 + 1000;
    std::fs::write(
        dir.path().join("slow.Dockerfile.j2"),
        format!("FROM {{{{ base_image }}}}\nRUN echo started-{nonce}; sleep {nonce}\nLABEL a=b\n"),
    )
    .unwrap();
    let sleeping = || {
        Command::new("pgrep")
            .args(["-f", &format!("sleep {nonce}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    let mut child = Command::new(imgctl_bin())
        .args([
            "build",
            "-v",
            "--builder",
            "buildkit",
            "--no-cache",
            "--tag",
            &tag,
            "--spec",
        ])
        .arg(dir.path().join("slow.yaml"))
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start imgctl build");
    let pid = child.id() as libc::pid_t;
    let stderr = child.stderr.take().unwrap();
    let mut log = Vec::new();
    let mut signalled = None;
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.unwrap_or_default();
        if signalled.is_none()
            && line.contains(&format!("started-{nonce}"))
            && !line.contains("RUN")
        {
            // The step's own output: it runs. Wait until its sleep shows, then SIGINT.
            let t = Instant::now();
            while !sleeping() && t.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(100));
            }
            assert!(
                sleeping(),
                "the step's sleep never showed in the process list"
            );
            // SAFETY: kill(2) on our own child's pid has no memory effects.
            unsafe { libc::kill(pid, libc::SIGINT) };
            signalled = Some(Instant::now());
        }
        log.push(line);
    }
    let status = child.wait().unwrap();
    let log = log.join("\n");
    let signalled = signalled.unwrap_or_else(|| panic!("the step never started:\n{log}"));
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(signalled.elapsed() < Duration::from_secs(30), "{log}");
    assert!(log.contains("build interrupted by SIGINT"), "{log}");
    // The engine stopped the step: its process is gone soon after.
    let t = Instant::now();
    while sleeping() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!sleeping(), "the cancelled step still runs on the engine");
    let listed = docker_ok(&["images", "-q", &tag]);
    assert!(listed.is_empty(), "a cancelled build was tagged");
}

/// A spec in `dir` like the busybox one, with `template` as its Dockerfile.
fn spec_with_template(dir: &std::path::Path, template: &str) -> std::path::PathBuf {
    let fixtures = busybox_spec().parent().unwrap().to_path_buf();
    let spec = std::fs::read_to_string(fixtures.join("busybox.yaml"))
        .unwrap()
        .replace(
            "template: busybox.Dockerfile.j2",
            "template: custom.Dockerfile.j2",
        );
    std::fs::write(dir.join("custom.yaml"), spec).unwrap();
    std::fs::write(dir.join("custom.Dockerfile.j2"), template).unwrap();
    dir.join("custom.yaml")
}

#[test]
fn the_build_secret_reaches_the_step_and_leaves_no_trace() {
    use sha2::Digest as _;
    ensure_bases();
    let mut guard = EngineGuard::default();
    let tag = test_tag("bk-secret");
    guard.image(&tag);
    let dir = tempfile::tempdir().unwrap();
    // A "certificate" (imgctl checks the PEM framing and the DER tag only)
    // whose body is a marker found nowhere else.
    let marker = format!("MIIBimgctlSecretMarker{:010}", std::process::id());
    let pem = format!("-----BEGIN CERTIFICATE-----\n{marker}\n-----END CERTIFICATE-----\n");
    let ca = dir.path().join("proxy-ca.crt");
    std::fs::write(&ca, &pem).unwrap();
    let sha = hex(&sha2::Sha256::digest(pem.as_bytes()));
    // The step checks the secret by its hash, so that its text (which
    // `docker history` keeps) holds no part of it, and that every user can
    // read it, with the mount of the bundled template's downloading steps
    // (apt's https method reads the CA as the user _apt).
    let bundled = imgctl::image::render::WORKSTATION_TEMPLATE;
    let mount = "--mount=type=secret,id=proxy-ca,required=true,mode=0444,target=";
    assert!(bundled.contains(mount));
    let spec = spec_with_template(
        dir.path(),
        &format!(
            "FROM {{{{ base_image }}}}\n\
             RUN {mount}/run/imgctl-build/proxy-ca.crt \\\n    \
             test \"$(sha256sum < /run/imgctl-build/proxy-ca.crt | cut -c1-64)\" = {sha} && \\\n    \
             test \"$(stat -c %a /run/imgctl-build/proxy-ca.crt)\" = 444 && echo secret-sha-ok\n\
             LABEL a=b\n"
        ),
    );
    let args = [
        "build",
        "-v",
        "--builder",
        "buildkit",
        "--no-cache",
        "--ca-cert-secret",
        ca.to_str().unwrap(),
        "--tag",
        &tag,
        "--spec",
        spec.to_str().unwrap(),
    ];
    // The secret is not in the build context.
    let mut dry = args.to_vec();
    dry.extend(["--dry-run", "--json"]);
    let out = imgctl(&dry, &[]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let plan: Value = serde_json::from_str(&stdout).unwrap();
    let listing = plan["context"].to_string();
    assert!(listing.contains("imgctl"), "{listing}");
    assert!(!listing.contains("proxy-ca"), "{listing}");
    let out = imgctl(&dry[..dry.len() - 1], &[]);
    let (_, stderr) = texts(&out);
    assert!(
        stderr.contains(
            "build secrets (served by imgctl's BuildKit session, not in the context): proxy-ca"
        ),
        "{stderr}"
    );
    let out = imgctl(&args, &[]);
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("\nsecret-sha-ok\n"), "{stderr}");
    // No trace of it in the image's history, config or files.
    let history = docker_ok(&["history", "--no-trunc", "--format", "{{.CreatedBy}}", &tag]);
    assert!(
        history.contains("id=proxy-ca") || history.contains("sha256sum"),
        "{history}"
    );
    let inspect = docker_ok(&["image", "inspect", &tag]);
    let container = format!("imgctl-test-secret-{}", std::process::id());
    guard.container(&container);
    docker_ok(&["create", "--name", &container, &tag, "true"]);
    let export = crate::build::docker(&["export", &container]);
    assert!(export.status.success());
    assert!(export.stdout.len() > 100_000, "an empty export");
    for (what, text) in [
        ("docker history", history.as_bytes()),
        ("docker image inspect", inspect.as_bytes()),
        ("docker export", export.stdout.as_slice()),
    ] {
        let found = text.windows(marker.len()).any(|w| w == marker.as_bytes());
        assert!(!found, "the secret shows in {what}");
    }
}

#[test]
fn a_build_secret_nobody_serves_fails_naming_it() {
    ensure_bases();
    let _guard = EngineGuard::default();
    let tag = test_tag("bk-nosecret");
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_with_template(
        dir.path(),
        "FROM {{ base_image }}\nRUN --mount=type=secret,id=nope,required=true cat /run/secrets/nope\nLABEL a=b\n",
    );
    let out = imgctl(
        &[
            "build",
            "--builder",
            "buildkit",
            "--no-cache",
            "--tag",
            &tag,
            "--spec",
            spec.to_str().unwrap(),
        ],
        &[],
    );
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let error = one_error_line(&stderr);
    assert!(
        error.contains("build failed at step 2/")
            && error.contains("needs the build secret `nope`")
            && error.contains(": RUN --mount=type=secret,id=nope"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nhint: imgctl serves one build secret, `proxy-ca`"),
        "{stderr}"
    );
    assert!(
        !crate::build::docker(&["image", "inspect", &tag])
            .status
            .success(),
        "a failed build was tagged"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
