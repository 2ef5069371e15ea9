//! Rendering: golden Dockerfiles per profile (insta), the Dockerfile.cuda124
//! drift test, layer order for the build cache, strict templates, the cu124
//! note, the build options (--ca-cert, --uid/--gid, --sudo, --pip-index-url,
//! --base-image), the embedded copies of images/, and the image's entrypoint
//! and healthcheck scripts run for real with `sh` on this host.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use imgctl::image::render::{self, RenderOptions};
use imgctl::image::specs::{self, SpecSource};

use crate::common::{imgctl, imgctl_bin, repo_root, texts};

mod entrypoint;
mod entrypoint_idle;
mod locks;
mod refused;

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
    let loaded = specs::load(&SpecSource::Bundled {
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
    let loaded = specs::load(&SpecSource::Bundled {
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
    let loaded = specs::load(&SpecSource::Bundled {
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
        specs::sha256_hex(pem.as_bytes())
    );
    let entry = r
        .files
        .iter()
        .find(|f| f.path.ends_with("usr/local/bin/imgctl-entrypoint"))
        .unwrap();
    assert_eq!(entry.mode, 0o755);
    assert!(r.files.iter().all(|f| f.path.starts_with("image/")));
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
    for (name, yaml) in specs::bundled() {
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
    let mut loaded = specs::load(&SpecSource::Bundled {
        cuda: "12.4".into(),
    })
    .unwrap();
    loaded.spec.lock = specs::LockSetting::Disabled;
    let r = render::render(&loaded, &RenderOptions::default()).unwrap();
    assert_eq!(r.lock, imgctl::image::lock::LockState::Disabled);
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
    let yaml = specs::bundled()
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
/// tested in src/image/lock; these tests are about rendering): torch and
/// typing-extensions in the torch step, the pins and numpy in the pins step.
fn write_lock(spec_path: &Path, lock_path: &Path) -> String {
    use imgctl::image::lock::{Locked, Step};
    let loaded = specs::load(&SpecSource::File(spec_path.to_path_buf())).unwrap();
    let inputs = imgctl::image::lock::LockInputs::of(&loaded.spec);
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
    let text = imgctl::image::lock::LockFile::new(&inputs, packages).to_text(
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
