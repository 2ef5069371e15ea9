//! `imgctl lock` for real: uv's resolver on this host against PyPI, the lock
//! file it writes (every package hashed, in the torch or the pins step),
//! `--check` following edits of the spec, the one-line errors (no uv, no
//! network, a conflict, a spec error), the bundled locks, a real build on the
//! busybox base that copies a lock into the image, and a real build on the
//! Debian base whose pip refuses a package that does not match its hash.
//!
//! The fixture specs pin torch 2.7.0 (every spec does) plus a few small
//! pure-Python packages. torch is resolved for real, with all of its
//! dependencies: uv reads wheel metadata and the index's hashes only, so
//! this costs seconds, not a 900 MB download. Versions of unpinned packages
//! change as PyPI moves on, so the assertions name packages, and versions
//! only where the spec or torch pins them.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use imgctl::image::lock::{LockFile, LockInputs, Locked, Step};
use imgctl::image::specs::{self, SpecSource};

use crate::build::{
    check_failing_build, docker, docker_ok, ensure_bases, EngineGuard, DEBIAN_BASE,
};
use crate::common::{imgctl_bin, one_error_line, repo_root, texts};

mod check;
mod image;

/// sha256 of python_dateutil-2.9.0.post0-py2.py3-none-any.whl on PyPI.
const DATEUTIL_WHEEL: &str = "a8b2bc7bffae282281c8140a97d3aa9c14da0b136dfe83f850eea9a5f7470427";
/// sha256 of six-1.16.0-py2.py3-none-any.whl on PyPI.
const SIX_WHEEL: &str = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254";

/// A spec like the bundled cu126 one, with `pins` instead of its packages.
fn fixture_spec(dir: &Path, name: &str, pins: &[&str]) -> PathBuf {
    let mut text = format!(
        "# A test spec for imgctl lock.\nschema_version: 1\nname: {name}\ndescription: imgctl lock test\nbase_image: nvidia/cuda:12.6.3-base-ubuntu22.04\ncuda: \"12.6.3\"\npython: \"3.10\"\ntorch:\n  version: \"2.7.0\"\n  variant: cu126\n  index: https://pypi.org/simple\npip:\n"
    );
    for p in pins {
        text.push_str(&format!("  - {p}\n"));
    }
    text.push_str("apt: []\nuser:\n  name: dev\nports: []\n");
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs imgctl in `cwd` with `envs`.
fn imgctl_in(cwd: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(imgctl_bin());
    c.args(args).current_dir(cwd).env("NO_COLOR", "1");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("run imgctl")
}

/// The `name==version` of each entry of a lock file (or of a step of it), in order.
fn body(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with(' '))
        .map(|l| l.trim_end_matches(" \\"))
        .collect()
}

/// The environment of a run without uv anywhere: no set-up venv, a PATH without it.
fn without_uv() -> Vec<(&'static str, &'static str)> {
    vec![
        ("IMGCTL_VENV", "/nonexistent"),
        ("VIRTUAL_ENV", ""),
        ("IMGCTL_CACHE", "/nonexistent-cache"),
        ("PATH", "/usr/bin:/bin"),
    ]
}

#[test]
fn lock_writes_the_pins_and_their_dependencies_and_check_follows_the_spec() {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = fixture_spec(
        dir.path(),
        "app",
        &["python-dateutil==2.9.0.post0", "anyio==4.9.0"],
    );
    let spec_arg = spec_path.to_str().unwrap();
    let lock_path = dir.path().join("app.lock");

    let started = Instant::now();
    let out = imgctl_in(dir.path(), &["lock", "--spec", spec_arg, "--json"], &[]);
    let resolve_s = started.elapsed().as_secs_f64();
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    eprintln!("lock: resolved the fixture in {resolve_s:.1} s");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON alone on stdout");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["locks"][0]["status"], "written");
    assert_eq!(v["locks"][0]["lock"], lock_path.display().to_string());
    // Plain progress lines without a terminal, and the outcome.
    assert!(
        stderr.contains("app: resolving torch==2.7.0 + 2 pins with uv ")
            && stderr.contains("for CPython 3.10 on linux_x86_64 glibc 2.35"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("app: wrote {} (", lock_path.display()))
            && stderr.contains(" in torch's step; resolved in "),
        "{stderr}"
    );

    let text = std::fs::read_to_string(&lock_path).unwrap();
    let lock = LockFile::parse(&text).unwrap();
    assert_eq!(v["locks"][0]["packages"], lock.packages.len());
    let step = |s: Step| -> Vec<String> {
        lock.step(s)
            .map(|(n, l)| format!("{n}=={}", l.version))
            .collect()
    };
    let (torch_step, pins_step) = (step(Step::Torch), step(Step::Pins));
    // Each step sorted by name in the file, the torch step first.
    let lines = body(&text);
    assert_eq!(lines, [torch_step.clone(), pins_step.clone()].concat());
    // torch's step: torch and what it needs (its METADATA; src/image/specs/compat.rs).
    for exact in [
        "torch==2.7.0",
        "nvidia-cudnn-cu12==9.5.1.17",
        "nvidia-nccl-cu12==2.26.2",
        "nvidia-cuda-runtime-cu12==12.6.77",
        "triton==3.3.0",
    ] {
        assert!(
            torch_step.iter().any(|l| l == exact),
            "{exact} not in torch's step:\n{text}"
        );
    }
    for name in [
        "sympy",
        "mpmath",
        "jinja2",
        "typing-extensions",
        "filelock",
        "networkx",
    ] {
        assert!(
            torch_step
                .iter()
                .any(|l| l.starts_with(&format!("{name}=="))),
            "{name} not in torch's step:\n{text}"
        );
    }
    // The pins step: the pins and what they need beyond torch's set, at
    // whatever version uv chose: python-dateutil needs six; anyio needs idna
    // and sniffio, and on Python 3.10 (only) exceptiongroup, whatever Python
    // runs here (uv resolves for --python-version).
    for exact in ["python-dateutil==2.9.0.post0", "anyio==4.9.0"] {
        assert!(
            pins_step.iter().any(|l| l == exact),
            "{exact} not in the pins step:\n{text}"
        );
    }
    for name in ["six", "idna", "sniffio", "exceptiongroup"] {
        assert!(
            pins_step
                .iter()
                .any(|l| l.starts_with(&format!("{name}=="))),
            "{name} not in the pins step:\n{text}"
        );
    }
    // Every package is hashed; python-dateutil's wheel with PyPI's sha256.
    assert!(lock.packages.values().all(|l| !l.hashes.is_empty()));
    assert!(
        lock.packages["python-dateutil"]
            .hashes
            .iter()
            .any(|h| h == DATEUTIL_WHEEL),
        "{:?}",
        lock.packages["python-dateutil"]
    );
    // Names are normalised; the header says where it came from.
    assert!(lines.iter().all(|l| {
        let n = l.split("==").next().unwrap();
        n == imgctl::image::specs::normalize_name(n)
    }));
    assert!(
        text.starts_with(&format!("# imgctl pip lock of {spec_arg}:")),
        "{text}"
    );
    assert!(text.contains(&format!("Regenerate: imgctl lock --spec {spec_arg}\n")));
    assert!(text.contains("# input python: 3.10\n# input platform: linux_x86_64 glibc 2.35\n"));
    let loaded = specs::load(&SpecSource::File(spec_path.clone())).unwrap();
    assert_eq!(lock.inputs_sha256, LockInputs::of(&loaded.spec).sha256());

    check_follows_the_spec(
        dir.path(),
        &spec_path,
        &lock_path,
        &text,
        lock.packages.len(),
    );
}

/// The second half of the test above: `--check` is fresh right after, a
/// fresh lock is left alone, reordering changes nothing, a changed pin is
/// named and nothing is written.
fn check_follows_the_spec(
    dir: &Path,
    spec_path: &Path,
    lock_path: &Path,
    text: &str,
    packages: usize,
) {
    let spec_arg = spec_path.to_str().unwrap();
    // --check right after: fresh.
    let out = imgctl_in(dir, &["lock", "--spec", spec_arg, "--check"], &[]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "app: {} is up to date ({} packages)",
            lock_path.display(),
            packages
        )),
        "{stderr}"
    );
    // Locking again leaves a fresh lock alone (no resolution, so no uv needed).
    let started = Instant::now();
    let out = imgctl_in(dir, &["lock", "--spec", spec_arg], &without_uv());
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("is up to date"), "{stderr}");
    assert!(started.elapsed().as_secs_f64() < 10.0);
    assert_eq!(std::fs::read_to_string(lock_path).unwrap(), text);

    // Comments and the order of keys and pins do not make it stale.
    let yaml = std::fs::read_to_string(spec_path).unwrap();
    let reordered = yaml
        .replace(
            "  - python-dateutil==2.9.0.post0\n  - anyio==4.9.0\n",
            "  - anyio==4.9.0        # async\n  - python-dateutil==2.9.0.post0\n",
        )
        .replace("ports: []\n", "")
        .replace("# A test spec", "ports: []\n# A test spec");
    assert_ne!(reordered, yaml);
    std::fs::write(spec_path, &reordered).unwrap();
    let out = imgctl_in(dir, &["lock", "--spec", spec_arg, "--check"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);

    // A pin changes: --check fails (exit 1) and names the change; nothing is written.
    std::fs::write(spec_path, reordered.replace("anyio==4.9.0", "anyio==4.8.0")).unwrap();
    let out = imgctl_in(dir, &["lock", "--spec", spec_arg, "--check"], &[]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with(&format!(
            "error: app: {} is stale: pin anyio 4.9.0 → 4.8.0\n",
            lock_path.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "hint: regenerate it with `imgctl lock --spec {spec_arg}`"
        )),
        "{stderr}"
    );
    let out = imgctl_in(dir, &["lock", "--spec", spec_arg, "--check", "--json"], &[]);
    let v: serde_json::Value = serde_json::from_str(&texts(&out).0).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["locks"][0]["status"].as_str()),
        (Some(false), Some("stale"))
    );
    assert_eq!(v["locks"][0]["changes"][0], "pin anyio 4.9.0 → 4.8.0");
    assert_eq!(std::fs::read_to_string(lock_path).unwrap(), text);
    // The Python version counts too.
    std::fs::write(
        spec_path,
        reordered
            .replace("python: \"3.10\"", "python: \"3.12\"")
            .replace("ubuntu22.04", "ubuntu24.04"),
    )
    .unwrap();
    let out = imgctl_in(dir, &["lock", "--spec", spec_arg, "--check"], &[]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "python 3.10 → 3.12; platform linux_x86_64 glibc 2.35 → linux_x86_64 glibc 2.39"
        ),
        "{stderr}"
    );
}

/// A PEP 503 index of its own that forwards to PyPI (pages and their
/// metadata links unchanged) except for the projects named on its command
/// line, which it does not know (404), standing in for a torch index other
/// than PyPI, which serves torch and what it needs but not everything
/// (`download.pytorch.org/whl/cu128` is unreachable here). It prints its
/// port, then serves until killed.
const FORWARDING_INDEX: &str = r#"
import http.server, sys, urllib.error, urllib.request
unknown = set(sys.argv[1:])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        parts = self.path.strip("/").split("/")
        if len(parts) >= 2 and parts[0] == "simple" and parts[1] in unknown:
            self.send_response(404)
            self.end_headers()
            return
        req = urllib.request.Request("https://pypi.org" + self.path, headers={"Accept": self.headers.get("Accept", "*/*")})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                body, ct = r.read(), r.headers.get("Content-Type")
            self.send_response(200)
            self.send_header("Content-Type", ct)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except urllib.error.HTTPError as e:
            self.send_response(e.code)
            self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// Kills the forwarding index when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn torch_from_another_index_serves_torchs_step() {
    use std::io::BufRead;
    // The stand-in torch index knows neither python-dateutil nor six.
    let mut child = Command::new("python3")
        .args(["-c", FORWARDING_INDEX, "--", "python-dateutil", "six"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the forwarding index");
    let stdout = child.stdout.take();
    let child = Child(child);
    let mut port = String::new();
    std::io::BufReader::new(stdout.unwrap())
        .read_line(&mut port)
        .unwrap();
    let index = format!("http://127.0.0.1:{}/simple", port.trim());

    let dir = tempfile::tempdir().unwrap();
    let spec_path = fixture_spec(dir.path(), "two", &["python-dateutil==2.9.0.post0"]);
    let yaml = std::fs::read_to_string(&spec_path)
        .unwrap()
        .replace("index: https://pypi.org/simple", &format!("index: {index}"));
    std::fs::write(&spec_path, yaml).unwrap();
    let out = imgctl_in(
        dir.path(),
        &["lock", "--spec", spec_path.to_str().unwrap(), "-v"],
        &[],
    );
    let (_, stderr) = texts(&out);
    drop(child);
    assert!(out.status.success(), "{stderr}");
    // The whole set from both indexes, torch's first (uv takes a name it
    // finds there from there alone); then torch's set from torch's index
    // alone, every version held.
    let runs: Vec<&str> = stderr.lines().filter(|l| l.starts_with("$ ")).collect();
    assert_eq!(runs.len(), 2, "{stderr}");
    assert!(
        runs[0].contains(&format!(
            "--index-strategy first-index --index {index} --default-index https://pypi.org/simple  (stdin: torch==2.7.0, python-dateutil==2.9.0.post0)"
        )),
        "{}",
        runs[0]
    );
    assert!(
        runs[1].contains(&format!("--default-index {index} --constraints "))
            && runs[1].ends_with("(stdin: torch==2.7.0)"),
        "{}",
        runs[1]
    );
    let text = std::fs::read_to_string(dir.path().join("two.lock")).unwrap();
    assert!(
        text.contains(&format!("# input torch-index: {index}\n")),
        "{text}"
    );
    let lock = LockFile::parse(&text).unwrap();
    for (name, version, step) in [
        ("torch", "2.7.0", Step::Torch),
        ("nvidia-cudnn-cu12", "9.5.1.17", Step::Torch),
        ("python-dateutil", "2.9.0.post0", Step::Pins),
    ] {
        let l = &lock.packages[name];
        assert_eq!((l.version.as_str(), l.step), (version, step), "{text}");
    }
    assert_eq!(lock.packages["six"].step, Step::Pins);
    assert!(lock.packages["python-dateutil"]
        .hashes
        .iter()
        .any(|h| h == DATEUTIL_WHEEL));

    // The image: torch's layer from torch's index, the pip layer from PyPI
    // with torch's index as an extra one (uv may have taken a package of the
    // pins step, and its hashes, from there).
    let out = imgctl_in(
        dir.path(),
        &["render", "--spec", spec_path.to_str().unwrap()],
        &[],
    );
    let (d, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        d.contains(&format!("pip install --no-cache-dir --index-url {index} --require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-torch.txt;")),
        "{d}"
    );
    assert!(
        d.contains(&format!("pip install --no-cache-dir --extra-index-url {index} --require-hashes --no-deps --only-binary :all: -r /etc/imgctl/pip-lock-pins.txt;")),
        "{d}"
    );
}

#[test]
fn a_conflict_shows_uvs_reason() {
    let dir = tempfile::tempdir().unwrap();
    // referencing 0.36.2 requires attrs>=22.2.0 (its METADATA).
    let spec_path = fixture_spec(
        dir.path(),
        "clash",
        &["referencing==0.36.2", "attrs==21.4.0"],
    );
    let out = imgctl_in(
        dir.path(),
        &["lock", "--spec", spec_path.to_str().unwrap()],
        &[],
    );
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty());
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line:\n{stderr}"));
    assert!(
        error.starts_with("error: uv cannot resolve the pins: Because referencing==0.36.2 depends on attrs>=22.2.0")
            && error.contains("you require attrs==21.4.0")
            && error.ends_with("your requirements are unsatisfiable."),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "hint: change the spec's pins so that they agree, then run imgctl lock again"
        ),
        "{stderr}"
    );
    assert!(!dir.path().join("clash.lock").exists(), "nothing written");
}

#[test]
fn errors_are_one_line_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = fixture_spec(dir.path(), "small", &["six==1.16.0"]);
    let spec_arg = spec_path.to_str().unwrap();
    let check = |out: &Output, code: i32, message: &str| {
        let (stdout, stderr) = texts(out);
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        // One error (after progress lines, if pip ran; a spec error lists its problems below it).
        one_error_line(&stderr);
        assert!(
            stderr.contains(message),
            "{message:?} not in the one error:\n{stderr}"
        );
        assert!(stderr.contains("\n\nhint: "), "no hint:\n{stderr}");
    };

    // No uv: neither in the set-up venv nor on PATH. Exit 3, the install command.
    let out = imgctl_in(dir.path(), &["lock", "--spec", spec_arg], &without_uv());
    check(
        &out,
        3,
        "error: uv was not found (/nonexistent/bin/uv, /nonexistent-cache/venv-torch-2.7.0/bin/uv, uv on PATH); imgctl lock resolves with uv\n",
    );
    assert!(
        texts(&out).1.contains(
            "run scripts/setup.sh full, which installs it into /nonexistent-cache/venv-torch-2.7.0"
        ),
        "{}",
        texts(&out).1
    );
    assert!(
        texts(&out).1.contains(&format!(
            "hint: install it: pip install uv=={}",
            imgctl::image::lock::uv::UV_VERSION
        )),
        "{}",
        texts(&out).1
    );
    // --check needs no uv.
    let out = imgctl_in(
        dir.path(),
        &["lock", "--spec", spec_arg, "--check"],
        &without_uv(),
    );
    assert_eq!(out.status.code(), Some(1), "{}", texts(&out).1);
    assert!(
        texts(&out).1.contains("does not exist"),
        "{}",
        texts(&out).1
    );
    // uv on PATH serves when no venv has one (no IMGCTL_VENV, no
    // VIRTUAL_ENV, no set-up venv in the cache).
    let venv_bin = crate::common::venv().join("bin");
    let path = format!("{}:/usr/bin:/bin", venv_bin.display());
    let mut c = Command::new(imgctl_bin());
    c.args(["lock", "--spec", spec_arg, "-v"])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("PATH", &path)
        .env("IMGCTL_CACHE", "/nonexistent-cache")
        .env_remove("VIRTUAL_ENV")
        .env_remove("IMGCTL_VENV");
    let out = c.output().unwrap();
    let (_, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("$ {}/uv pip compile", venv_bin.display())),
        "{stderr}"
    );
    std::fs::remove_file(dir.path().join("small.lock")).unwrap();

    // No network: a proxy that refuses every connection (uv retries it 3 times).
    let started = Instant::now();
    let dead = "http://127.0.0.1:9";
    let out = imgctl_in(
        dir.path(),
        &["lock", "--spec", spec_arg],
        &[
            ("HTTPS_PROXY", dead),
            ("https_proxy", dead),
            ("HTTP_PROXY", dead),
            ("http_proxy", dead),
            ("ALL_PROXY", dead),
            ("NO_PROXY", ""),
            ("no_proxy", ""),
            // Not from the cache: uv would resolve offline from a warm one.
            ("UV_NO_CACHE", "1"),
        ],
    );
    check(
        &out,
        1,
        "cannot reach https://pypi.org/simple: tunnel error",
    );
    assert!(
        texts(&out).1.contains("Connection refused"),
        "{}",
        texts(&out).1
    );
    assert!(texts(&out).1.contains("HTTPS_PROXY"));
    eprintln!(
        "lock: no-network error after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(!dir.path().join("small.lock").exists());

    // Spec errors are exit 2, before uv runs.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&spec_path)
            .unwrap()
            .replace("six==1.16.0", "six>=1.16"),
    )
    .unwrap();
    check(
        &imgctl_in(dir.path(), &["lock", "--spec", bad.to_str().unwrap()], &[]),
        2,
        "pip[0]: 'six>=1.16' is not pinned (>=)",
    );
    // `lock: false` has nothing to write (exit 2); --check has nothing to check (exit 0).
    let off = dir.path().join("off.yaml");
    std::fs::write(
        &off,
        format!(
            "{}lock: false\n",
            std::fs::read_to_string(&spec_path).unwrap()
        ),
    )
    .unwrap();
    check(
        &imgctl_in(dir.path(), &["lock", "--spec", off.to_str().unwrap()], &[]),
        2,
        "says `lock: false`; there is no lock to write",
    );
    let out = imgctl_in(
        dir.path(),
        &["lock", "--spec", off.to_str().unwrap(), "--check"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    // A missing lock fails --check.
    check(
        &imgctl_in(dir.path(), &["lock", "--spec", spec_arg, "--check"], &[]),
        1,
        &format!(
            "small: {} does not exist",
            dir.path().join("small.lock").display()
        ),
    );
    // A bundled profile's lock belongs in imgctl's source tree.
    check(
        &imgctl_in(dir.path(), &["lock", "--cuda", "12.6"], &[]),
        2,
        "the bundled profile cu126 is embedded in imgctl, and its lock is written into imgctl's source tree, but images/cu126.yaml is not here",
    );
    // Flags that contradict each other are clap's usage errors.
    let out = imgctl_in(dir.path(), &["lock", "--all", "--spec", spec_arg], &[]);
    assert_eq!(out.status.code(), Some(2));
    let out = imgctl_in(dir.path(), &["lock", "--check", "--upgrade"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn setup_installs_the_uv_imgctl_expects() {
    let want = format!("uv=={}", imgctl::image::lock::uv::UV_VERSION);
    let req = std::fs::read_to_string(repo_root().join("scripts/requirements-test.txt")).unwrap();
    assert!(
        req.lines().any(|l| l.trim() == want),
        "scripts/requirements-test.txt does not pin {want}:\n{req}"
    );
    // The uv the BuildKit variant installs in its pip steps is the same one.
    let build = imgctl::image::render::UV_REQUIREMENTS;
    assert!(
        build
            .lines()
            .any(|l| l.trim_end_matches([' ', '\\']) == want),
        "images/uv-requirements.txt does not pin {want}"
    );
    assert!(build.matches("--hash=sha256:").count() >= 2, "{build}");
    // scripts/setup.sh put it into the venv that IMGCTL_VENV names.
    let uv = crate::common::venv().join("bin").join("uv");
    // #53 F14: with no IMGCTL_VENV and no uv on PATH, lock finds the one
    // of the set-up's venv in the cache (the venv the full imgctl uses).
    let real = std::fs::canonicalize(crate::common::venv()).unwrap();
    assert!(
        real.file_name().is_some_and(|n| n == "venv-torch-2.7.0"),
        "the set-up's venv is CACHE/venv-torch-2.7.0: {}",
        real.display()
    );
    {
        let cache = real.parent().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let spec = fixture_spec(dir.path(), "found", &["six==1.16.0"]);
        let out = imgctl_in(
            dir.path(),
            &["lock", "--spec", spec.to_str().unwrap(), "-v"],
            &[
                ("IMGCTL_VENV", ""),
                ("VIRTUAL_ENV", ""),
                ("IMGCTL_CACHE", cache.to_str().unwrap()),
                ("PATH", "/usr/bin:/bin"),
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    }
    let out = Command::new(&uv)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/setup.sh", uv.display()));
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.starts_with(&format!("uv {} ", imgctl::image::lock::uv::UV_VERSION)),
        "{version}"
    );
}
