//! Rendering: golden Dockerfiles per profile (insta), the Dockerfile.cuda124
//! drift test, layer order for the build cache, strict templates, the cu124
//! note, the build options (--ca-cert, --uid/--gid, --sudo, --pip-index-url,
//! --base-image), the embedded copies of images/, and the image's entrypoint
//! and healthcheck scripts run for real with `sh` on this host.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use imgctl::render::{self, RenderOptions};
use imgctl::spec::{self, SpecSource};

use crate::common::{imgctl, imgctl_bin, repo_root, texts};

fn render_ok(args: &[&str]) -> String {
    let mut all = vec!["render"];
    all.extend_from_slice(args);
    let out = imgctl(&all);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "imgctl {all:?} failed:\n{stderr}");
    stdout
}

/// The Dockerfile's instructions (continuation lines joined, comments dropped).
pub fn instructions(dockerfile: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in dockerfile.lines() {
        let t = line.trim();
        if cur.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(body) = t.strip_suffix('\\') {
            cur.push_str(body);
            cur.push(' ');
        } else {
            cur.push_str(t);
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

/// Index of the first instruction containing `needle`.
fn position(ins: &[String], needle: &str) -> usize {
    ins.iter()
        .position(|i| i.contains(needle))
        .unwrap_or_else(|| panic!("no instruction contains {needle:?}:\n{}", ins.join("\n")))
}

#[test]
fn dockerfile_cuda124_is_exactly_render_cuda_124() {
    let rendered = render_ok(&["--cuda", "12.4"]);
    let on_disk = std::fs::read_to_string(repo_root().join("Dockerfile.cuda124")).unwrap();
    assert!(
        rendered == on_disk,
        "Dockerfile.cuda124 drifted from `imgctl render --cuda 12.4`; regenerate it with:\n  cargo run -- render --cuda 12.4 -o Dockerfile.cuda124"
    );
}

#[test]
fn golden_dockerfiles_per_profile() {
    insta::assert_snapshot!("render_cu124", render_ok(&["--cuda", "12.4"]));
    insta::assert_snapshot!("render_cu126", render_ok(&["--cuda", "12.6"]));
    insta::assert_snapshot!("render_cu128", render_ok(&["--cuda", "12.8"]));
}

#[test]
fn output_file_holds_the_same_text() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("Dockerfile");
    let out = imgctl(&["render", "--cuda", "12.6", "-o", path.to_str().unwrap()]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.is_empty(), "-o writes the file, not stdout");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        render_ok(&["--cuda", "12.6"])
    );
}

#[test]
fn layers_are_ordered_for_the_cache() {
    for cuda in ["12.4", "12.6", "12.8"] {
        let ins = instructions(&render_ok(&["--cuda", cuda]));
        assert!(ins[0].starts_with("FROM "), "{cuda}: FROM first");
        // The pip layers: torch + nvidia wheels, then the other pins; with a
        // lock, what the pins need has a layer of its own before theirs.
        let pip: Vec<usize> = (0..ins.len())
            .filter(|&k| ins[k].starts_with("RUN ") && ins[k].contains("pip install"))
            .collect();
        let locked = cuda != "12.8";
        assert_eq!(pip.len(), if locked { 3 } else { 2 }, "{cuda}: {pip:?}");
        if locked {
            assert!(
                pip[0] < pip[1]
                    && pip[1] < pip[2]
                    && ins[pip[1]].contains("-r /etc/imgctl/pip-lock-deps.txt;"),
                "{cuda}: the pins' dependencies sit between torch and the pins"
            );
        }
        let order = [
            position(&ins, "apt-get install"),
            position(&ins, "python3 -m venv /opt/venv"),
            pip[0],
            pip[pip.len() - 1],
            position(&ins, "useradd"),
            position(&ins, "COPY image/rootfs/ /"),
            position(&ins, "COPY imgctl /usr/local/bin/imgctl"),
        ];
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "{cuda}: layers out of order: {order:?}"
        );
        // cu124/cu126 install their lock's torch step, cu128 (no lock) torch itself.
        assert!(
            ins[order[2]].contains("torch==2.7.0")
                || ins[order[2]].contains("-r /etc/imgctl/pip-lock-torch.txt;"),
            "{cuda}: torch has its own layer"
        );
        assert!(
            ins[order[3]].contains("diffusers==0.33.1")
                || ins[order[3]].contains("-r /etc/imgctl/pip-lock-pins.txt;"),
            "{cuda}: the other pins have theirs"
        );
        assert!(
            !ins[order[2]].contains("diffusers"),
            "{cuda}: torch layer holds only torch"
        );
        // After the imgctl COPY: only its smoke run and metadata, which cost no rebuild.
        let copy = order[6];
        for i in &ins[copy + 1..] {
            let keyword = i.split_whitespace().next().unwrap();
            assert!(
                i == "RUN imgctl --version"
                    || [
                        "ENV",
                        "USER",
                        "WORKDIR",
                        "EXPOSE",
                        "HEALTHCHECK",
                        "STOPSIGNAL",
                        "ENTRYPOINT",
                        "CMD",
                        "LABEL"
                    ]
                    .contains(&keyword),
                "{cuda}: `{i}` after the imgctl COPY would rebuild with every imgctl change"
            );
        }
        // Nothing before the imgctl COPY refers to the binary.
        assert_eq!(ins.iter().filter(|i| i.contains(" imgctl /")).count(), 1);
    }
}

#[test]
fn image_shape_matches_issue_3() {
    let d = render_ok(&["--cuda", "12.4"]);
    for needle in [
        "ENTRYPOINT [\"/usr/bin/tini\", \"--\", \"/usr/local/bin/imgctl-entrypoint\"]",
        "WORKDIR /workspace",
        "EXPOSE 8888 22",
        "HEALTHCHECK --interval=5s",
        "apt-get install -y --no-install-recommends",
        "rm -rf /var/lib/apt/lists/*",
        "rm -f /etc/ssh/ssh_host_*",
        "ln -sfn \"$site/torch\" /opt/imgctl/libtorch",
        "--shm-size=16g (or --ipc=host)",
        // images/cu124.lock holds the torch step too, installed with hash checking.
        "pip install --no-cache-dir --index-url https://pypi.org/simple --require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-torch.txt; \\\n    pip check; \\\n",
        "--require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-pins.txt; \\\n    pip check; \\\n",
    ] {
        assert!(d.contains(needle), "missing {needle:?}");
    }
    // The base is the `base` flavour and the choice is explained.
    assert!(d.contains("FROM nvidia/cuda:12.4.1-base-ubuntu22.04\n"));
    assert!(d.contains("# Base flavour: `base`"));
    // No sudo unless asked for; the shm size is left alone.
    assert!(!d.contains("sudoers"));
    assert!(!d.contains("--shm-size ") && !d.contains("/dev/shm "));
}

#[test]
fn cu124_says_it_carries_the_cu126_wheel() {
    let loaded = spec::load(&SpecSource::Bundled {
        cuda: "12.4".into(),
    })
    .unwrap();
    let r = render::render(&loaded, &RenderOptions::default()).unwrap();
    let note = r
        .notes
        .iter()
        .find(|n| n.contains("there is no cu124 build of torch 2.7.0"))
        .expect("a note for the build output");
    assert!(
        note.contains("cu126 wheel") && note.contains("minor-version compatibility"),
        "{note}"
    );
    assert!(note.contains("525.60.13"), "{note}");
    assert!(r
        .dockerfile
        .contains("# NOTE: cu124: there is no cu124 build of torch 2.7.0"));
    assert_eq!(r.labels["io.imgctl.compat"], "minor-version-compatibility");
    assert_eq!(&r.labels["io.imgctl.compat.note"], note);
    // Every pin is a label.
    for (k, v) in [
        ("io.imgctl.torch", "2.7.0"),
        ("io.imgctl.torch.variant", "cu126"),
        ("io.imgctl.cuda.base", "12.4.1"),
        ("io.imgctl.cuda.runtime", "12.6.77"),
        ("io.imgctl.cudnn", "9.5.1.17"),
        ("io.imgctl.nccl", "2.26.2"),
        ("io.imgctl.python", "3.10"),
        ("io.imgctl.profile", "cu124"),
        ("io.imgctl.version", env!("CARGO_PKG_VERSION")),
        ("io.imgctl.pip.diffusers", "0.33.1"),
        ("io.imgctl.pip.jupyterlab", "4.4.1"),
        (
            "org.opencontainers.image.base.name",
            "nvidia/cuda:12.4.1-base-ubuntu22.04",
        ),
    ] {
        assert_eq!(r.labels.get(k).map(String::as_str), Some(v), "label {k}");
    }
    assert_eq!(r.labels["io.imgctl.spec.sha256"], loaded.sha256);
    // The Dockerfile's LABEL carries them all.
    for (k, v) in &r.labels {
        assert!(
            r.dockerfile.contains(&format!("    {k}=\"")),
            "LABEL lacks {k}={v}"
        );
    }
    // The build prints the note (imgctl render prints it on stderr).
    let out = imgctl(&["render", "--cuda", "12.4"]);
    let (_, stderr) = texts(&out);
    assert!(
        stderr.contains("note: cu124: there is no cu124 build of torch 2.7.0"),
        "{stderr}"
    );

    // A toolkit-exact profile has no such note.
    let loaded = spec::load(&SpecSource::Bundled {
        cuda: "12.6".into(),
    })
    .unwrap();
    let r = render::render(&loaded, &RenderOptions::default()).unwrap();
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    assert_eq!(r.labels["io.imgctl.compat"], "exact");
    assert!(!r.labels.contains_key("io.imgctl.compat.note"));
}

#[test]
fn build_options_shape_the_dockerfile() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("proxy-ca.crt");
    let pem = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";
    std::fs::write(&ca, pem).unwrap();
    let d = render_ok(&[
        "--cuda",
        "12.4",
        "--ca-cert",
        ca.to_str().unwrap(),
        "--uid",
        "1234",
        "--gid",
        "2345",
        "--sudo",
        "--pip-index-url",
        "https://pypi.example.com/simple",
        "--base-image",
        "imgctl-test/debian:bookworm",
    ]);
    let ins = instructions(&d);
    // The CA is in before the first RUN, trusted by apt, then by the system store and pip.
    let copy_ca = position(
        &ins,
        "COPY image/ca.crt /usr/local/share/ca-certificates/imgctl-proxy-ca.crt",
    );
    let apt = position(&ins, "apt-get install");
    assert!(copy_ca < apt);
    assert!(ins[apt].contains("Acquire::https::CaInfo"));
    assert!(ins[apt].contains("update-ca-certificates"));
    assert!(
        ins[apt].contains(" sudo;"),
        "sudo is installed with --sudo: {}",
        ins[apt]
    );
    assert!(
        position(&ins, "PIP_CERT=/etc/ssl/certs/ca-certificates.crt")
            < position(&ins, "python3 -m venv")
    );
    // --uid/--gid/--sudo.
    let user = &ins[position(&ins, "useradd")];
    assert!(user.contains("useradd --uid 1234 --gid 2345"), "{user}");
    assert!(user.contains("groupadd --gid 2345 dev"), "{user}");
    assert!(user.contains("NOPASSWD:ALL"), "{user}");
    assert!(
        user.contains("chown 1234:2345 /workspace /home/dev/.ssh"),
        "{user}"
    );
    // --pip-index-url, a PyPI mirror, serves the other packages and PyPI's torch wheel...
    assert!(ins[position(&ins, "-r /etc/imgctl/pip-lock-pins.txt")].contains(
        "pip install --no-cache-dir --index-url https://pypi.example.com/simple --require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-pins.txt;"
    ));
    assert!(ins[position(&ins, "-r /etc/imgctl/pip-lock-torch.txt")].contains(
        "--index-url https://pypi.example.com/simple --require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-torch.txt;"
    ));
    assert!(d.contains("io.imgctl.torch.index=\"https://pypi.example.com/simple\""));
    // ...but a torch from PyTorch's own index keeps that index.
    let d128 = render_ok(&[
        "--cuda",
        "12.8",
        "--pip-index-url",
        "https://pypi.example.com/simple",
    ]);
    assert!(d128.contains("--index-url https://download.pytorch.org/whl/cu128 torch==2.7.0+cu128;"));
    assert!(d128.contains("--index-url https://pypi.example.com/simple --constraint"));
    // --base-image: FROM changes, the python check becomes a record, and it is said.
    assert!(d.contains("\nFROM imgctl-test/debian:bookworm\n"));
    assert!(!d.contains("the spec expects 3.10\" >&2"));
    assert!(d.contains("echo \"$found\" > /etc/imgctl/python-version"));
    assert!(
        d.contains("# NOTE: base image overridden with --base-image imgctl-test/debian:bookworm")
    );
    assert!(d.contains("io.imgctl.python.checked=\"false\""));
    assert!(d.contains("io.imgctl.uid=\"1234\""));
    assert!(d.contains("io.imgctl.sudo=\"true\""));

    // The library view: the CA is a context file with the given bytes.
    let args = imgctl::cli::ImageArgs {
        cuda: None,
        spec: None,
        base_image: None,
        ca_cert: Some(ca.clone()),
        ca_cert_secret: None,
        builder: imgctl::docker::build::BuilderChoice::Auto,
        pip_index_url: None,
        uid: None,
        gid: None,
        sudo: false,
    };
    let opts = RenderOptions::from_args(&args).unwrap();
    assert_eq!((opts.uid, opts.gid), (1000, 1000));
    let loaded = spec::load(&SpecSource::Bundled {
        cuda: "12.4".into(),
    })
    .unwrap();
    let r = render::render(&loaded, &opts).unwrap();
    let f = r
        .files
        .iter()
        .find(|f| f.path == render::CA_CERT_PATH)
        .expect("ca file");
    assert_eq!(f.contents, pem.as_bytes());
    assert_eq!(
        r.labels["io.imgctl.ca_cert.sha256"],
        spec::sha256_hex(pem.as_bytes())
    );
    let entry = r
        .files
        .iter()
        .find(|f| f.path.ends_with("usr/local/bin/imgctl-entrypoint"))
        .unwrap();
    assert_eq!(entry.mode, 0o755);
    assert!(r.files.iter().all(|f| f.path.starts_with("image/")));
}

#[test]
fn bad_build_options_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not-a-cert.txt");
    std::fs::write(&not_pem, "hello").unwrap();
    let cases: [(&[&str], &str); 7] = [
        (
            &["--uid", "abc"],
            "invalid value 'abc' for '--uid <UID>': expected an integer 1000-60000 (0 is root)",
        ),
        (
            &["--uid", "0"],
            "invalid value '0' for '--uid <UID>': expected an integer 1000-60000 (0 is root)",
        ),
        (
            &["--gid", "70000"],
            "invalid value '70000' for '--gid <GID>'",
        ),
        (
            &["--ca-cert", not_pem.to_str().unwrap()],
            "is not a PEM certificate",
        ),
        (
            &["--ca-cert", "/nonexistent/ca.crt"],
            "cannot read --ca-cert /nonexistent/ca.crt",
        ),
        (
            &["--pip-index-url", "ftp://x"],
            "invalid --pip-index-url 'ftp://x'",
        ),
        (
            &["--base-image", "bad image"],
            "invalid --base-image 'bad image'",
        ),
    ];
    for (args, message) in cases {
        let mut all = vec!["render"];
        all.extend_from_slice(args);
        let out = imgctl(&all);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(message),
            "{args:?}: {stderr}"
        );
        // clap reads --uid/--gid: its one line carries the hint.
        let hinted = stderr.contains("\nhint: ")
            || stderr.lines().next().unwrap().contains("; use your own ");
        assert!(hinted, "{args:?}: no hint: {stderr}");
    }
}

/// Runs `imgctl render --ca-cert PATH`: (exit code, stderr).
fn render_with_ca(path: &Path) -> (Option<i32>, String) {
    let out = imgctl(&[
        "render",
        "--cuda",
        "12.4",
        "--ca-cert",
        path.to_str().unwrap(),
    ]);
    (out.status.code(), texts(&out).1)
}

#[test]
fn ca_cert_takes_certificates_only() {
    let dir = tempfile::tempdir().unwrap();
    let cert = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";
    let key = |label: &str| format!("-----BEGIN {label}-----\nMIIBfake\n-----END {label}-----\n");
    let big = dir.path().join("big.crt");
    let mut f = std::fs::File::create(&big).unwrap();
    f.write_all(cert.as_bytes()).unwrap();
    f.write_all(&vec![b'#'; 1024 * 1024]).unwrap();
    let mut cases: Vec<(PathBuf, String)> = Vec::new();
    for (name, text, message) in [
        (
            "with-key.pem",
            format!("{cert}{}", key("PRIVATE KEY")),
            "has a PRIVATE KEY block at line 4: only CERTIFICATE blocks are accepted",
        ),
        (
            "rsa.pem",
            key("RSA PRIVATE KEY"),
            "has a RSA PRIVATE KEY block at line 1",
        ),
        (
            "ec.pem",
            format!("{cert}{}", key("EC PRIVATE KEY")),
            "has a EC PRIVATE KEY block at line 4",
        ),
        (
            "not-base64.pem",
            "-----BEGIN CERTIFICATE-----\n%%%%\n-----END CERTIFICATE-----\n".to_string(),
            "has a CERTIFICATE block at line 1 that is not valid base64",
        ),
        (
            "not-der.pem",
            "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n".to_string(),
            "that is not a DER certificate (starts with byte 0x68",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        cases.push((path, message.to_string()));
    }
    cases.push((big, "is larger than 1048576 bytes (1 MiB)".to_string()));
    cases.push((
        dir.path().to_path_buf(),
        "is a directory, not a certificate file".to_string(),
    ));
    cases.push((
        "/dev/zero".into(),
        "/dev/zero is a device, not a certificate file".to_string(),
    ));
    for (path, message) in cases {
        let started = Instant::now();
        let (code, stderr) = render_with_ca(&path);
        assert_eq!(code, Some(2), "{}: {stderr}", path.display());
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{}",
            path.display()
        );
        let first = stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(message.as_str()),
            "{}: {stderr}",
            path.display()
        );
        assert!(stderr.contains("\nhint: "), "{stderr}");
    }
    // A real bundle of many certificates passes.
    let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if bundle.is_file() {
        let (code, stderr) = render_with_ca(bundle);
        assert_eq!(code, Some(0), "{stderr}");
    }
}

#[test]
fn pip_index_url_with_credentials_is_refused() {
    for url in [
        "https://user:s3cret-pw@mirror.example/simple",
        "https://s3cret-token@mirror.example/simple",
    ] {
        for command in [
            &["render", "--cuda", "12.4", "--pip-index-url", url][..],
            &[
                "build",
                "--cuda",
                "12.4",
                "--dry-run",
                "--pip-index-url",
                url,
            ],
            &["lock", "--cuda", "12.4", "--check", "--pip-index-url", url],
        ] {
            let out = imgctl(command);
            let (stdout, stderr) = texts(&out);
            assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
            assert!(stdout.is_empty(), "{command:?}: {stdout}");
            assert!(!stderr.contains("s3cret"), "{command:?}: {stderr}");
            let first = stderr.lines().next().unwrap_or_default();
            assert_eq!(
                first,
                "error: --pip-index-url 'https://***@mirror.example/simple' contains credentials (user or password before '@'), which would be stored in the image's history and labels",
                "{command:?}"
            );
            assert!(
                stderr.contains("\nhint: ") && stderr.contains("~/.netrc"),
                "{stderr}"
            );
        }
    }
}

#[test]
fn image_references_are_parsed_before_the_engine_sees_them() {
    let grammar = "hint: an image reference is [HOST[:PORT]/]PATH[:TAG][@sha256:<64 hex>]";
    for (args, line) in [
        (
            &["render", "--base-image", "UPPER/Case:@@::"][..],
            "error: invalid --base-image 'UPPER/Case:@@::': the digest '@::' is not sha256:<64 hex digits>",
        ),
        (
            &["render", "--base-image", "UPPER/case:1"][..],
            "error: invalid --base-image 'UPPER/case:1': 'UPPER' is not a lower-case path component [a-z0-9]+([._-][a-z0-9]+)*",
        ),
        (
            &["render", "--base-image", ""][..],
            "error: invalid --base-image '': it is empty",
        ),
        (
            &["verify", "--image", "", "--expect-gpus", "0"][..],
            "error: invalid --image '': it is empty",
        ),
        (
            &["verify", "--image", "UPPER/Case:@@::", "--expect-gpus", "0"][..],
            "error: invalid --image 'UPPER/Case:@@::': the digest '@::' is not sha256:<64 hex digits>",
        ),
        (
            &["build", "--dry-run", "--tag", "me/x:a:b"][..],
            "error: invalid --tag 'me/x:a:b': 'x:a' is not a lower-case path component [a-z0-9]+([._-][a-z0-9]+)*",
        ),
    ] {
        let out = imgctl(args);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(stderr.lines().next(), Some(line), "{args:?}: {stderr}");
        assert!(stderr.contains(grammar), "{args:?}: {stderr}");
    }
    // Registry hosts with ports, digests and docker's separators pass.
    let digest = format!("sha256:{}", "0a".repeat(32));
    for good in [
        "localhost:5000/me/base:1.0".to_string(),
        format!("registry.example.com/a__b/c--d.e:tag_1@{digest}"),
    ] {
        let out = imgctl(&["render", "--cuda", "12.4", "--base-image", &good]);
        assert!(out.status.success(), "{good}: {}", texts(&out).1);
    }
}

#[test]
fn templates_are_strict_about_undefined_variables() {
    let out = Command::new(imgctl_bin())
        .args([
            "render",
            "--spec",
            "tests/fixtures/specs/undefined-variable.yaml",
        ])
        .current_dir(repo_root())
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty());
    insta::assert_snapshot!("render_undefined_variable", stderr);

    #[derive(serde::Serialize)]
    struct Ctx {
        defined: u8,
    }
    assert_eq!(
        render::render_template("t", "{{ defined }}", &Ctx { defined: 7 }).unwrap(),
        "7"
    );
    let err = render::render_template("t", "{{ defined }}\n{{ missing }}", &Ctx { defined: 7 })
        .unwrap_err();
    assert!(err.contains("line 2") && err.contains("undefined"), "{err}");
}

#[test]
fn busybox_fixture_renders_with_the_same_labels() {
    let out = Command::new(imgctl_bin())
        .args(["render", "--spec", "tests/fixtures/specs/busybox.yaml"])
        .current_dir(repo_root())
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    let ins = instructions(&stdout);
    assert_eq!(ins[0], "FROM imgctl-test/busybox:latest");
    assert!(
        position(&ins, "ARG IMGCTL_TEST_FAIL=0")
            < position(&ins, "COPY imgctl /usr/local/bin/imgctl")
    );
    for label in [
        "io.imgctl.torch=\"2.7.0\"",
        "io.imgctl.cudnn=\"9.5.1.17\"",
        "io.imgctl.profile=\"busybox-test\"",
    ] {
        assert!(stdout.contains(label), "{label}");
    }
}

#[test]
fn embedded_copies_equal_the_files() {
    let mut seen = Vec::new();
    for (path, embedded) in render::embedded_files() {
        let on_disk = std::fs::read_to_string(repo_root().join(path)).unwrap();
        assert!(
            embedded == on_disk,
            "{path}: the embedded copy differs; rebuild imgctl"
        );
        seen.push(path);
    }
    // Every file of images/ is embedded.
    for entry in std::fs::read_dir(repo_root().join("images")).unwrap() {
        let name = format!("images/{}", entry.unwrap().file_name().to_string_lossy());
        assert!(seen.contains(&name.as_str()), "{name} is not embedded");
    }
    for (name, yaml) in spec::bundled() {
        let on_disk =
            std::fs::read_to_string(repo_root().join(format!("images/{name}.yaml"))).unwrap();
        assert_eq!(yaml, on_disk);
    }
    // And it works from any directory.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(imgctl_bin())
        .args(["render"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
}

// ---- the image's scripts, run with sh on this host -------------------------

fn entrypoint() -> PathBuf {
    repo_root().join("images/entrypoint.sh")
}

/// The IMGCTL_USER of the host tests: a user that exists on every Debian-like
/// host (the entrypoint refuses an unknown one when it runs as root). As root,
/// the stand-in services run as this user, so their files must be reachable
/// by it: see [`open_to_all`].
const SERVICE_USER: &str = "nobody";

/// Lets every user traverse and write `dir` (a test's temporary folder), so
/// that services started as [`SERVICE_USER`] can run its stand-ins and write
/// their records there.
fn open_to_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
}

/// Whether the tests run as root (then the entrypoint switches users).
fn running_as_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

/// Runs the entrypoint in validation-only mode with `env` (and no inherited
/// IMGCTL_/JUPYTER_/SSH_ variables).
fn check_entrypoint(env: &[(&str, &str)], args: &[&str]) -> Output {
    assert!(
        Command::new("ssh-keygen").arg("-?").output().is_ok(),
        "ssh-keygen is needed (scripts/setup.sh installs openssh-client)"
    );
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("sh");
    cmd.arg(entrypoint())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("IMGCTL_ENTRYPOINT_CHECK_ONLY", "1")
        .env("IMGCTL_USER", SERVICE_USER)
        .env("IMGCTL_AUTHORIZED_KEYS_FILE", dir.path().join("none"))
        .current_dir(dir.path());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn fresh_public_key(dir: &Path) -> String {
    let key = dir.join("id_ed25519");
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "imgctl-test", "-f"])
        .arg(&key)
        .output()
        .expect("ssh-keygen");
    assert!(out.status.success(), "{out:?}");
    std::fs::read_to_string(dir.join("id_ed25519.pub"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn entrypoint_refuses_bad_settings_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let key = fresh_public_key(dir.path());
    let private = std::fs::read_to_string(dir.path().join("id_ed25519")).unwrap();
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (
            vec![("IMGCTL_MODE", "bogus")],
            "IMGCTL_MODE='bogus' is not a mode; use one of: jupyter, ssh, both, none",
        ),
        (vec![("IMGCTL_MODE", "")], "IMGCTL_MODE='' is not a mode"),
        (
            vec![("JUPYTER_TOKEN", "")],
            "JUPYTER_TOKEN is set but empty",
        ),
        (
            vec![("JUPYTER_TOKEN", "has space")],
            "JUPYTER_TOKEN may only hold",
        ),
        (
            vec![("JUPYTER_TOKEN", "x")],
            "JUPYTER_TOKEN has 1 characters, too few to resist guessing; use at least 16 (e.g. openssl rand -hex 24), or unset it to get a generated 48-character token",
        ),
        (
            vec![("JUPYTER_TOKEN", "fifteen-chars-x")],
            "JUPYTER_TOKEN has 15 characters, too few",
        ),
        (
            vec![("JUPYTER_PASSWORD", "")],
            "JUPYTER_PASSWORD is set but empty",
        ),
        (
            vec![("SSH_AUTHORIZED_KEYS", "ssh-ed25519 AAAAnot-base64!! x")],
            "SSH_AUTHORIZED_KEYS line 1 is not a valid SSH public key",
        ),
        (
            vec![("SSH_AUTHORIZED_KEYS", private.as_str())],
            "SSH_AUTHORIZED_KEYS line 1 is a PRIVATE key",
        ),
        (
            vec![("IMGCTL_MODE", "ssh")],
            "IMGCTL_MODE=ssh but sshd cannot start: no authorized key given",
        ),
    ];
    for (env, message) in cases {
        let out = check_entrypoint(&env, &[]);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {stderr}{stdout}");
        assert!(
            stderr.contains(&format!("imgctl-entrypoint: error: {message}")),
            "{env:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{env:?}: one line: {stderr}");
    }
    // A malformed line after a good one is still caught, with its line number.
    let two = format!("{key}\nssh-rsa AAAA-broken");
    let out = check_entrypoint(&[("SSH_AUTHORIZED_KEYS", &two)], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(texts(&out)
        .1
        .contains("SSH_AUTHORIZED_KEYS line 2 is not a valid SSH public key"));
    // A mounted key file is validated the same way.
    let mounted = dir.path().join("authorized_keys");
    std::fs::write(&mounted, "# comment\n\nnot a key at all\n").unwrap();
    let out = check_entrypoint(
        &[("IMGCTL_AUTHORIZED_KEYS_FILE", mounted.to_str().unwrap())],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(texts(&out).1.contains(&format!(
        "{} line 3 is not a valid SSH public key",
        mounted.display()
    )));
}

#[test]
fn entrypoint_accepts_good_settings() {
    let dir = tempfile::tempdir().unwrap();
    let key = fresh_public_key(dir.path());
    let plan = |env: &[(&str, &str)], args: &[&str]| {
        let out = check_entrypoint(env, args);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{env:?}: {stderr}");
        stderr
    };
    assert!(plan(&[("SSH_AUTHORIZED_KEYS", &key)], &[]).contains("mode=both jupyter=yes ssh=yes"));
    let keys = format!("# mine\n{key}\n\n{key}\r\n");
    assert!(plan(
        &[("SSH_AUTHORIZED_KEYS", &keys), ("IMGCTL_MODE", "ssh")],
        &[]
    )
    .contains("jupyter=no ssh=yes"));
    // No key: sshd is skipped, and the log says why.
    let s = plan(&[], &[]);
    assert!(
        s.contains("ssh=no (sshd not started: no authorized key given"),
        "{s}"
    );
    assert!(plan(&[("IMGCTL_MODE", "none")], &[]).contains("jupyter=no ssh=no"));
    // A token of 16 characters is long enough.
    assert!(plan(&[("JUPYTER_TOKEN", "sixteen-chars-xy")], &[]).contains("jupyter=yes"));
    // A command passes through; service settings do not matter then.
    let s = plan(&[("JUPYTER_TOKEN", "")], &["python", "train.py"]);
    assert!(s.contains("would run: python train.py"), "{s}");
    // But a bogus mode is refused even then.
    assert_eq!(
        check_entrypoint(&[("IMGCTL_MODE", "bogus")], &["true"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn entrypoint_refuses_an_unknown_user_as_root() {
    if !running_as_root() {
        eprintln!("skipped: the user check applies to a root container, and this test is not root");
        return;
    }
    let message = "imgctl-entrypoint: error: IMGCTL_USER='nosuch' is not a user of this image, and the workload would run as root; name an existing user, or leave IMGCTL_USER as the image sets it\n";
    // Validation alone, for the services and for a command.
    for args in [&[][..], &["python", "train.py"]] {
        let out = check_entrypoint(&[("IMGCTL_USER", "nosuch")], args);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr, message, "{args:?}");
    }
    // For real: the command does not run (it would have printed uid 0).
    let run = |user: &str| {
        let dir = tempfile::tempdir().unwrap();
        Command::new("sh")
            .arg(entrypoint())
            .args(["id", "-u"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("IMGCTL_USER", user)
            .env("IMGCTL_RUN_DIR", dir.path().join("run"))
            .output()
            .unwrap()
    };
    let out = run("nosuch");
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "the command ran: {stdout}");
    assert_eq!(stderr, message);
    // An option-like name is no user either, and a newline cannot split the line.
    let out = check_entrypoint(&[("IMGCTL_USER", "--help\nx")], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(texts(&out)
        .1
        .starts_with("imgctl-entrypoint: error: IMGCTL_USER='--help?x' is not a user"));
    assert_eq!(texts(&out).1.lines().count(), 1);
    // An existing user runs the command with its uid.
    let out = run(SERVICE_USER);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    let uid = Command::new("id")
        .args(["-u", SERVICE_USER])
        .output()
        .unwrap();
    assert_eq!(texts(&out).0, texts(&uid).0);
}

/// Starts the entrypoint for real with a stand-in `jupyter` on PATH, and
/// checks the token handling, the services list, the healthcheck, and that
/// SIGTERM stops everything promptly.
#[test]
fn entrypoint_runs_services_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let run = dir.path().join("run");
    let ws = dir.path().join("workspace");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    open_to_all(dir.path());
    let record = dir.path().join("jupyter.txt");
    // The stand-in records how it was started, then waits to be stopped.
    let fake = format!(
        "#!/bin/sh\ntrap 'echo stand-in: TERM >&2; exit 0' TERM\nprintf 'args=%s\\ntoken=%s\\npwd=%s\\n' \"$*\" \"$JUPYTER_TOKEN\" \"$(pwd)\" > {}.tmp\nmv {}.tmp {}\nwhile :; do sleep 0.1; done\n",
        record.display(), record.display(), record.display()
    );
    std::fs::write(bin.join("jupyter"), fake).unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("jupyter"))
        .status()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = Command::new("sh")
        .arg(entrypoint())
        .env_clear()
        .env("PATH", &path)
        .env("IMGCTL_MODE", "jupyter")
        .env("IMGCTL_USER", SERVICE_USER)
        .env("IMGCTL_RUN_DIR", &run)
        .env("IMGCTL_WORKSPACE", &ws)
        .env("IMGCTL_JUPYTER_PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !record.exists() {
        assert!(
            Instant::now() < deadline,
            "the stand-in jupyter never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let rec = std::fs::read_to_string(&record).unwrap();
    assert!(
        rec.contains(&format!("--ip=0.0.0.0 --port={port} --no-browser")),
        "{rec}"
    );
    assert!(
        rec.contains(&format!("--ServerApp.root_dir={}", ws.display())),
        "{rec}"
    );
    let token = rec
        .lines()
        .find_map(|l| l.strip_prefix("token="))
        .unwrap()
        .to_string();
    assert_eq!(token.len(), 48, "a generated 192-bit hex token: {rec}");
    assert!(
        !rec.lines().next().unwrap().contains(&token),
        "the token stays out of argv"
    );
    assert_eq!(
        std::fs::read_to_string(run.join("services")).unwrap(),
        "jupyter\n"
    );

    // The healthcheck probes what was started: nothing listens on the port yet.
    let health = |services: &Path| {
        Command::new("sh")
            .arg(repo_root().join("images/healthcheck.sh"))
            .env("IMGCTL_RUN_DIR", services)
            .env("IMGCTL_JUPYTER_PORT", port.to_string())
            .output()
            .unwrap()
    };
    let out = health(&run);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // Something answering GET /api with 200 on that port makes it healthy.
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let server = std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 1024];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}");
        }
    });
    let out = health(&run);
    server.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // No services file (a passed-through command) is healthy.
    assert_eq!(health(&dir.path().join("nothing")).status.code(), Some(0));
    // sshd is healthy while a socket listens on its port (read from /proc, no connection).
    let ssh_dir = dir.path().join("ssh-run");
    std::fs::create_dir_all(&ssh_dir).unwrap();
    std::fs::write(ssh_dir.join("services"), "sshd\n").unwrap();
    let ssh_health = |port: u16| {
        Command::new("sh")
            .arg(repo_root().join("images/healthcheck.sh"))
            .env("IMGCTL_RUN_DIR", &ssh_dir)
            .env("IMGCTL_SSH_PORT", port.to_string())
            .output()
            .unwrap()
    };
    let ssh_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ssh_port = ssh_listener.local_addr().unwrap().port();
    let out = ssh_health(ssh_port);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    drop(ssh_listener);
    let out = ssh_health(ssh_port);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(texts(&out)
        .0
        .contains(&format!("sshd: nothing listens on port {ssh_port}")));

    // docker stop: SIGTERM to the entrypoint stops the service and exits 0, quickly.
    let t0 = Instant::now();
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "not stopped within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let stopped = t0.elapsed();
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = texts(&out);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stopped < Duration::from_secs(5),
        "stopping took {stopped:?}:\n{stderr}"
    );
    // The generated token is printed exactly once.
    assert_eq!(stderr.matches(&token).count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "http://127.0.0.1:{port}/lab?token={token} (generated token"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("stopping (SIGTERM)"), "{stderr}");
}

/// When a service dies, the entrypoint stops and exits with its status.
#[test]
fn entrypoint_exits_when_a_service_dies() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    open_to_all(dir.path());
    std::fs::write(bin.join("jupyter"), "#!/bin/sh\nsleep 0.3\nexit 7\n").unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("jupyter"))
        .status()
        .unwrap();
    let out = Command::new("sh")
        .arg(entrypoint())
        .env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("IMGCTL_MODE", "jupyter")
        .env("JUPYTER_TOKEN", "fixed-token-0123456789")
        .env("IMGCTL_USER", SERVICE_USER)
        .env("IMGCTL_RUN_DIR", dir.path().join("run"))
        .env("IMGCTL_WORKSPACE", dir.path())
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("exited with status 7"), "{stderr}");
    assert!(
        !stderr.contains("fixed-token-0123456789"),
        "a given token is never printed: {stderr}"
    );
}

/// The cu124 Dockerfile with the lock's lines taken out and its pip lines
/// as they are without one: the two COPY blocks, the `pip check`s, the two
/// labels; the torch step's install back to `torch==2.7.0`, the pins step's
/// back to the spec's pins held by torch-constraints.txt.
fn without_lock_lines(dockerfile: &str, pins: &[&str]) -> String {
    let mut out = String::new();
    let mut skipping = false;
    // The pins step's blocks (its comment, the dependencies' COPY and layer,
    // the named pins' COPY) end at the blank line after that last COPY.
    let mut in_pins_step = false;
    for line in dockerfile.split_inclusive('\n') {
        if line.starts_with("# The spec's pip lock, made by `imgctl lock`")
            || line.starts_with("# The whole lock, for the record")
        {
            skipping = true;
        }
        if line.starts_with("# The lock's pins step") {
            in_pins_step = true;
        }
        if in_pins_step {
            if line.starts_with("COPY image/pip-lock-pins.txt ") {
                in_pins_step = false;
                skipping = true;
            }
            continue;
        }
        if skipping {
            // Each block ends with its COPY lines and one blank line.
            if line == "\n" {
                skipping = false;
            }
            continue;
        }
        let line = match line.strip_prefix("# Layer 4: the pins the spec names (") {
            Some(rest) => format!(
                "# Layer 4: the other pinned packages{}",
                &rest[rest.find(')').unwrap() + 1..]
            ),
            None => line.to_string(),
        };
        if line.contains("io.imgctl.pip_lock.") || line == "    pip check; \\\n" {
            continue;
        }
        if line.contains(" -r /etc/imgctl/pip-lock-pins.txt; \\") {
            out.push_str("    pip install --no-cache-dir --constraint /etc/imgctl/torch-constraints.txt \\\n");
            for (i, pin) in pins.iter().enumerate() {
                let end = if i + 1 == pins.len() { "; \\" } else { " \\" };
                out.push_str(&format!("        {pin}{end}\n"));
            }
            continue;
        }
        out.push_str(
            &line
                .replace(
                    " --require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-torch.txt;",
                    " torch==2.7.0;",
                )
                .replace(
                    "pip installs them alone, with hashes and no dependencies",
                    "torch-constraints.txt",
                ),
        );
    }
    out
}

#[test]
fn without_a_lock_the_dockerfile_is_as_before() {
    let mut loaded = spec::load(&SpecSource::Bundled {
        cuda: "12.4".into(),
    })
    .unwrap();
    loaded.spec.lock = spec::LockSetting::Disabled;
    let r = render::render(&loaded, &RenderOptions::default()).unwrap();
    assert_eq!(r.lock, imgctl::lock::LockState::Disabled);
    assert!(!r.files.iter().any(|f| f.path == render::PIP_LOCK_PATH));
    assert!(!r.labels.keys().any(|k| k.contains("pip_lock")));
    // Byte for byte the Dockerfile of cu124 before locks existed (this
    // snapshot is the earlier render_cu124 snapshot, unchanged), so images
    // built without a lock keep their layer cache.
    insta::assert_snapshot!("render_cu124_without_lock", r.dockerfile);
    // cu128 has no lock file: its golden Dockerfile is the one it always had.
    let d128 = render_ok(&["--cuda", "12.8"]);
    assert!(!d128.contains("pip.lock"));
    // And the locked cu124 is that text plus the lock's lines, nothing else.
    let locked = render_ok(&["--cuda", "12.4"]);
    assert!(locked.contains("COPY image/pip.lock /etc/imgctl/pip.lock\n"));
    let pins: Vec<String> = loaded.spec.pip.iter().map(|p| p.requirement()).collect();
    let pins: Vec<&str> = pins.iter().map(String::as_str).collect();
    assert_eq!(without_lock_lines(&locked, &pins), r.dockerfile);
}

/// A copy of the cu124 spec in a folder of its own (so that its lock is a file
/// next to it), with `edit` applied to its text.
fn user_spec(dir: &Path, edit: &dyn Fn(&str) -> String) -> PathBuf {
    let yaml = spec::bundled()
        .into_iter()
        .find(|(n, _)| *n == "cu124")
        .unwrap()
        .1;
    let path = dir.join("my.yaml");
    std::fs::write(&path, edit(yaml)).unwrap();
    path
}

/// A sha256 for the locks these tests write (rendering does not check it).
const SOME_HASH: &str = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254";

/// Writes a lock for the spec at `spec_path` with the library (the format is
/// tested in src/lock; these tests are about rendering): torch and
/// typing-extensions in the torch step, the pins and numpy in the pins step.
fn write_lock(spec_path: &Path, lock_path: &Path) -> String {
    use imgctl::lock::{Locked, Step};
    let loaded = spec::load(&SpecSource::File(spec_path.to_path_buf())).unwrap();
    let inputs = imgctl::lock::LockInputs::of(&loaded.spec);
    let mut packages: Vec<(String, Locked)> = loaded
        .spec
        .pip
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                Locked::new(&p.version, Step::Pins, [SOME_HASH]),
            )
        })
        .collect();
    packages.push((
        "torch".into(),
        Locked::new("2.7.0", Step::Torch, [SOME_HASH]),
    ));
    packages.push((
        "numpy".into(),
        Locked::new("2.2.6", Step::Pins, [SOME_HASH]),
    ));
    packages.push((
        "typing_extensions".into(),
        Locked::new("4.13.2", Step::Torch, [SOME_HASH]),
    ));
    let text = imgctl::lock::LockFile::new(&inputs, packages).to_text(
        &loaded.origin,
        &imgctl::commands::lock::lock_command(&loaded),
    );
    std::fs::write(lock_path, &text).unwrap();
    text
}

fn render_spec(spec: &Path) -> (String, String) {
    let out = imgctl(&["render", "--spec", spec.to_str().unwrap()]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    (stdout, stderr)
}

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
        stderr.contains(&format!("pip lock: {} (9 packages)", lock_path.display())),
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
    let sha = spec::sha256_hex(text.as_bytes());
    assert!(
        d.contains(&format!("io.imgctl.pip_lock.sha256=\"{sha}\"")),
        "{d}"
    );
    assert!(d.contains("io.imgctl.pip_lock.packages=\"9\""));
    assert!(
        d.contains(&format!("9 packages,\n# sha256 {sha}.\n")),
        "{d}"
    );
    assert!(d.contains("Its torch step (2 packages)"), "{d}");
    assert!(d.contains("# The lock's pins step (7 packages: "), "{d}");
    assert!(
        d.contains("# Layer 4a: what the pins need (1 package)"),
        "{d}"
    );
    assert!(
        d.contains("# Layer 4: the pins the spec names (6 packages)"),
        "{d}"
    );

    // The library view: the context holds the lock byte for byte.
    let loaded = spec::load(&SpecSource::File(spec_path.clone())).unwrap();
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

/// Root's Python runs nothing the image's user can write (reliability and
/// security III, N2). Started as root (`--user 0`), the healthcheck and the
/// entrypoint's password hashing run in /workspace, the user's folder: a
/// planted `urllib/` or `jupyter_server/` there, or on a PYTHONPATH, used to
/// run as root within one healthcheck interval.
#[test]
fn root_run_python_imports_nothing_from_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("workspace");
    let bin = dir.path().join("bin");
    let run = dir.path().join("run");
    let marker = dir.path().join("planted-code-ran");
    for d in [&ws, &bin, &run] {
        std::fs::create_dir_all(d).unwrap();
    }
    open_to_all(dir.path());
    // What the user plants: packages that shadow the ones root's Python imports.
    let payload = format!(
        "import os\nopen({:?}, 'a').write(__name__ + ' as uid ' + str(os.getuid()) + '\\n')\n",
        marker.display().to_string()
    );
    for package in ["urllib", "jupyter_server"] {
        std::fs::create_dir_all(ws.join(package)).unwrap();
        std::fs::write(ws.join(package).join("__init__.py"), &payload).unwrap();
    }
    let python3 = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v python3"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    std::os::unix::fs::symlink(python3.trim(), bin.join("python")).unwrap();
    // A stand-in jupyter that exits at once: the entrypoint then stops.
    std::fs::write(bin.join("jupyter"), "#!/bin/sh\nexit 0\n").unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(bin.join("jupyter"))
        .status()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );

    // The healthcheck, as Docker runs it: in the WORKDIR, with a PYTHONPATH
    // the environment could carry.
    std::fs::write(run.join("services"), "jupyter\n").unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let health = Command::new("sh")
        .arg(repo_root().join("images/healthcheck.sh"))
        .current_dir(&ws)
        .env("PATH", &path)
        .env("PYTHONPATH", &ws)
        .env("IMGCTL_RUN_DIR", &run)
        .env("IMGCTL_JUPYTER_PORT", port.to_string())
        .output()
        .unwrap();
    let planted = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        planted.is_empty(),
        "the healthcheck ran code planted in the workspace:\n{planted}"
    );
    // Nothing listens: unhealthy, having imported the real urllib.
    assert_eq!(health.status.code(), Some(1), "{health:?}");
    assert!(texts(&health).0.contains("jupyter: "), "{health:?}");

    // The entrypoint hashes JUPYTER_PASSWORD before starting JupyterLab.
    let out = Command::new("sh")
        .arg(entrypoint())
        .env_clear()
        .current_dir(&ws)
        .env("PATH", &path)
        .env("PYTHONPATH", &ws)
        .env("IMGCTL_MODE", "jupyter")
        .env("IMGCTL_USER", SERVICE_USER)
        .env("IMGCTL_RUN_DIR", &run)
        .env("IMGCTL_WORKSPACE", &ws)
        .env("IMGCTL_JUPYTER_PORT", port.to_string())
        .env("JUPYTER_TOKEN", "a-token-long-enough-0123")
        .env("JUPYTER_PASSWORD", "correct horse")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, stderr) = texts(&out);
    let planted = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        planted.is_empty(),
        "code planted in the workspace ran:\n{planted}\nentrypoint: {stderr}"
    );
}

/// Two settings that used to fail without a word (reliability and security
/// III): a HOME the user cannot write (a read-only root with a root-owned
/// `--tmpfs /home/dev`) ended JupyterLab in a Python traceback; it is now one
/// line naming the mount that works. And IMGCTL_USER, read only when the
/// container starts as root, says so when it is ignored.
#[test]
fn entrypoint_names_an_unwritable_home_and_an_ignored_user() {
    let home = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = check_entrypoint(
        &[
            ("IMGCTL_MODE", "jupyter"),
            ("IMGCTL_HOME_DIR", home.path().to_str().unwrap()),
        ],
        &[],
    );
    let (_, stderr) = texts(&out);
    if running_as_root() {
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        let uid = texts(
            &Command::new("id")
                .args(["-u", SERVICE_USER])
                .output()
                .unwrap(),
        )
        .0
        .trim()
        .to_string();
        assert!(
            stderr.contains(&format!(
                "imgctl-entrypoint: error: HOME {} (owned by uid 0) is not writable by uid {uid}, and JupyterLab writes its runtime files there; mount a writable one: --tmpfs {}:uid={uid},gid=",
                home.path().display(),
                home.path().display()
            )),
            "{stderr}"
        );
        // Started as another user, the entrypoint says IMGCTL_USER is ignored.
        let out = Command::new("setpriv")
            .args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "sh"])
            .arg(entrypoint())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("IMGCTL_ENTRYPOINT_CHECK_ONLY", "1")
            .env("IMGCTL_MODE", "none")
            .env("IMGCTL_USER", "dev")
            .env("IMGCTL_RUN_DIR", "/nonexistent")
            .current_dir("/")
            .output()
            .unwrap();
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(
            stderr.contains(
                "imgctl-entrypoint: IMGCTL_USER=dev is ignored: the container runs as uid "
            ),
            "{stderr}"
        );
    } else {
        // Not root: the folder is this user's own, so writable.
        assert_eq!(out.status.code(), Some(0), "{stderr}");
    }
}
