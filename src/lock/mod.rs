//! Pip lock files: every Python package an image installs, pinned, so that
//! rebuilding a spec next month installs the same transitive versions.
//!
//! This module owns the lock file format ([`LockFile`]: sorted `name==version`
//! lines under a header that records the inputs), the inputs and their digest
//! ([`LockInputs`]: torch, the pins, Python, platform and indexes of a spec),
//! where a spec's lock lives and whether it is fresh ([`state`]), and the
//! resolution itself with pip's own resolver ([`resolve`]). It reads lock files
//! and runs pip on the host; it renders nothing (the Dockerfile side is
//! [`crate::render`]) and never talks to Docker.
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::spec::normalize_name;
use crate::spec::{compat, ImageSpec, LoadedSpec, LockSetting};

pub mod resolve;

/// Version of the lock file format (the `# lock-version:` header line).
pub const LOCK_VERSION: u32 = 1;

/// Where the image keeps its lock (the template COPYs it there and passes it
/// to both pip steps as `--constraint`).
pub const IMAGE_LOCK_PATH: &str = "/etc/imgctl/pip.lock";

/// The architecture imgctl builds for (specs have no architecture field; every
/// bundled base is linux/amd64).
pub const ARCH: &str = "x86_64";

/// The index the image installs the non-torch pins from without
/// `--pip-index-url` (pip's default, PyPI).
pub const PIP_INDEX: &str = compat::PYPI_INDEX;

/// glibc minor of each distribution a base image may be built from (all glibc
/// 2.x), so that the lock admits exactly the manylinux wheels the image's pip
/// admits. (distro as it appears in the image name or tag, glibc minor, source)
pub const DISTRO_GLIBC: &[(&str, u32, &str)] = &[
    (
        "ubuntu20.04",
        31,
        "https://packages.ubuntu.com/focal/libc6 (2.31)",
    ),
    (
        "ubuntu22.04",
        35,
        "https://packages.ubuntu.com/jammy/libc6 (2.35)",
    ),
    (
        "ubuntu24.04",
        39,
        "https://packages.ubuntu.com/noble/libc6 (2.39)",
    ),
    (
        "bookworm",
        36,
        "https://packages.debian.org/bookworm/libc6 (2.36)",
    ),
];

/// glibc minor assumed for a base of unknown distribution: torch 2.6/2.7's
/// Linux wheels are tagged manylinux_2_28 (torch-2.7.0-cp310-cp310-manylinux_2_28_x86_64.whl
/// on PyPI), so any base that runs them has glibc 2.28 or newer.
pub const FALLBACK_GLIBC: u32 = 28;

/// The oldest manylinux glibc (PEP 600: manylinux_2_5 is manylinux1).
const OLDEST_MANYLINUX_GLIBC: u32 = 5;

/// The platform a lock is resolved for: linux, [`ARCH`], and the base's glibc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Platform {
    /// glibc minor version (glibc 2.35 → 35).
    pub glibc: u32,
    /// The distribution it was judged from (`ubuntu22.04`), `None` when unknown.
    pub distro: Option<&'static str>,
}

impl Platform {
    /// The platform of a base image, judged from its name and tag
    /// (`nvidia/cuda:12.4.1-base-ubuntu22.04` → glibc 2.35).
    pub fn of_base(base_image: &str) -> Platform {
        match DISTRO_GLIBC.iter().find(|(d, _, _)| base_image.contains(d)) {
            Some((distro, glibc, _)) => Platform {
                glibc: *glibc,
                distro: Some(distro),
            },
            None => Platform {
                glibc: FALLBACK_GLIBC,
                distro: None,
            },
        }
    }

    /// The canonical one-line form recorded in the lock (`linux_x86_64 glibc 2.35`).
    pub fn canonical(&self) -> String {
        format!("linux_{ARCH} glibc 2.{}", self.glibc)
    }

    /// The `--platform` tags pip must accept, most specific first, as the
    /// image's pip would on that glibc: manylinux_2_N for N from the glibc
    /// down to 5 (PEP 600), the legacy aliases manylinux2014/2010/1 (PEP 599,
    /// 571, 513; pip matches tags literally), and plain linux.
    pub fn pip_tags(&self) -> Vec<String> {
        let mut tags: Vec<String> = (OLDEST_MANYLINUX_GLIBC..=self.glibc)
            .rev()
            .map(|n| format!("manylinux_2_{n}_{ARCH}"))
            .collect();
        for legacy in ["manylinux2014", "manylinux2010", "manylinux1"] {
            tags.push(format!("{legacy}_{ARCH}"));
        }
        tags.push(format!("linux_{ARCH}"));
        tags
    }
}

/// Everything a lock depends on. Its digest changes when any of them does,
/// and never with the YAML's comments, key order or pin order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInputs {
    /// Python minor (`3.10`).
    pub python: String,
    /// The platform (from the spec's base image).
    pub platform: Platform,
    /// The torch requirement (`torch==2.7.0`, `torch==2.7.0+cu128`).
    pub torch: String,
    /// The index torch comes from.
    pub torch_index: String,
    /// The index the other pins come from.
    pub pip_index: String,
    /// The pins as `name[extras]==version`, names normalised, sorted.
    pub pins: Vec<String>,
}

impl LockInputs {
    /// The inputs of a validated spec.
    pub fn of(spec: &ImageSpec) -> LockInputs {
        let torch = match compat::lookup(&spec.torch.version, &spec.torch.variant) {
            Some(wheel) => compat::torch_requirement(wheel, &spec.torch.index),
            // validate() guarantees the wheel exists; a hand-made spec may not.
            None => format!("torch=={}", spec.torch.version),
        };
        let mut pins: Vec<String> = spec
            .pip
            .iter()
            .map(|p| canonical_pin(&p.name, &p.version))
            .collect();
        pins.sort();
        LockInputs {
            python: spec.python.clone(),
            platform: Platform::of_base(&spec.base_image.to_string()),
            torch,
            torch_index: spec.torch.index.trim_end_matches('/').to_string(),
            pip_index: PIP_INDEX.to_string(),
            pins,
        }
    }

    /// The inputs as (key, value) lines, in the order the lock header records them.
    pub fn lines(&self) -> Vec<(String, String)> {
        let mut v = vec![
            ("python".to_string(), self.python.clone()),
            ("platform".to_string(), self.platform.canonical()),
            ("torch".to_string(), self.torch.clone()),
            ("torch-index".to_string(), self.torch_index.clone()),
            ("pip-index".to_string(), self.pip_index.clone()),
        ];
        v.extend(self.pins.iter().map(|p| ("pin".to_string(), p.clone())));
        v
    }

    /// sha256 (hex) of the canonical inputs.
    pub fn sha256(&self) -> String {
        digest_of_lines(&self.lines())
    }
}

/// `name[extras]==version` with the name and extras normalised and the extras sorted.
fn canonical_pin(name: &str, version: &str) -> String {
    let (base, extras) = match name.split_once('[') {
        Some((b, e)) => (b, Some(e.trim_end_matches(']'))),
        None => (name, None),
    };
    let mut out = normalize_name(base);
    if let Some(e) = extras {
        let mut list: Vec<String> = e
            .split(',')
            .map(normalize_name)
            .filter(|x| !x.is_empty())
            .collect();
        list.sort();
        list.dedup();
        if !list.is_empty() {
            out.push_str(&format!("[{}]", list.join(",")));
        }
    }
    out.push_str("==");
    out.push_str(version.trim());
    out
}

fn digest_of_lines(lines: &[(String, String)]) -> String {
    let mut text = format!("imgctl pip lock v{LOCK_VERSION}\n");
    for (k, v) in lines {
        text.push_str(&format!("{k} {v}\n"));
    }
    crate::spec::sha256_hex(text.as_bytes())
}

/// A parsed or freshly resolved lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockFile {
    /// Format version ([`LOCK_VERSION`] when written by this imgctl).
    pub version: u32,
    /// The inputs it was resolved from, as recorded (key, value).
    pub inputs: Vec<(String, String)>,
    /// The recorded digest of those inputs.
    pub inputs_sha256: String,
    /// Every package: normalised name → version.
    pub packages: BTreeMap<String, String>,
}

/// Header key of the format version.
const KEY_VERSION: &str = "lock-version";
/// Header key of the inputs digest.
const KEY_DIGEST: &str = "inputs-sha256";
/// Prefix of a recorded input line.
const INPUT_PREFIX: &str = "# input ";

impl LockFile {
    /// A lock of `packages` (any spelling of names; they are normalised)
    /// resolved from `inputs`.
    pub fn new<I, N, V>(inputs: &LockInputs, packages: I) -> LockFile
    where
        I: IntoIterator<Item = (N, V)>,
        N: AsRef<str>,
        V: AsRef<str>,
    {
        LockFile {
            version: LOCK_VERSION,
            inputs: inputs.lines(),
            inputs_sha256: inputs.sha256(),
            packages: packages
                .into_iter()
                .map(|(n, v)| (normalize_name(n.as_ref()), v.as_ref().trim().to_string()))
                .collect(),
        }
    }

    /// The file text: a header (what made it, from which spec, how to
    /// regenerate and check it, the inputs and their digest), then one
    /// `name==version` line per package, sorted by name.
    pub fn to_text(&self, spec_origin: &str, regenerate: &str) -> String {
        let get = |k: &str| {
            self.inputs
                .iter()
                .find(|(key, _)| key == k)
                .map_or("?", |(_, v)| v.as_str())
        };
        let mut out = String::new();
        out.push_str(&format!(
            "# imgctl pip lock of {spec_origin}: every Python package the image installs, pinned.\n"
        ));
        out.push_str(&format!(
            "# Generated by imgctl {} with pip's resolver; do not edit. Regenerate: {regenerate}\n",
            env!("CARGO_PKG_VERSION")
        ));
        out.push_str(&format!(
            "# Check: {regenerate} --check. Resolved for CPython {} on {}.\n",
            get("python"),
            get("platform")
        ));
        out.push_str(&format!("# {KEY_VERSION}: {}\n", self.version));
        for (k, v) in &self.inputs {
            out.push_str(&format!("{INPUT_PREFIX}{k}: {v}\n"));
        }
        out.push_str(&format!("# {KEY_DIGEST}: {}\n", self.inputs_sha256));
        for (name, version) in &self.packages {
            out.push_str(&format!("{name}=={version}\n"));
        }
        out
    }

    /// Parses a lock file; `Err` names the line that is wrong.
    pub fn parse(text: &str) -> Result<LockFile, String> {
        let mut version = None;
        let mut inputs = Vec::new();
        let mut digest = None;
        let mut packages = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            let at = || format!("line {}", i + 1);
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix(INPUT_PREFIX) {
                let (k, v) = rest.split_once(": ").ok_or_else(|| {
                    format!("{}: an input line must be `# input KEY: VALUE`", at())
                })?;
                inputs.push((k.trim().to_string(), v.trim().to_string()));
            } else if let Some(rest) = line.strip_prefix(&format!("# {KEY_VERSION}:")) {
                version = Some(rest.trim().parse::<u32>().map_err(|_| {
                    format!("{}: lock-version '{}' is not a number", at(), rest.trim())
                })?);
            } else if let Some(rest) = line.strip_prefix(&format!("# {KEY_DIGEST}:")) {
                digest = Some(rest.trim().to_string());
            } else if line.starts_with('#') {
                continue;
            } else {
                let (name, ver) = parse_package_line(line).ok_or_else(|| {
                    format!(
                        "{}: '{}' is not a `name==version` line (a lock holds nothing else: no pip options, URLs, markers or ranges)",
                        at(),
                        line.escape_debug()
                    )
                })?;
                let name = normalize_name(name);
                if packages.insert(name.clone(), ver.to_string()).is_some() {
                    return Err(format!("{}: '{name}' is listed twice", at()));
                }
            }
        }
        Ok(LockFile {
            version: version.ok_or("no `# lock-version:` line (not written by `imgctl lock`)")?,
            inputs,
            inputs_sha256: digest
                .ok_or("no `# inputs-sha256:` line (not written by `imgctl lock`)")?,
            packages,
        })
    }

    /// What differs between the inputs this lock was resolved from and
    /// `current`, and pins the package list contradicts; empty when fresh.
    pub fn changes(&self, current: &LockInputs) -> Vec<String> {
        let mut out = Vec::new();
        if self.version != LOCK_VERSION {
            out.push(format!("lock format {} → {LOCK_VERSION}", self.version));
        }
        let now = current.lines();
        let single = |lines: &[(String, String)], k: &str| {
            lines
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        for key in ["python", "platform", "torch", "torch-index", "pip-index"] {
            let (was, is) = (single(&self.inputs, key), single(&now, key));
            if was != is {
                out.push(format!(
                    "{key} {} → {}",
                    was.as_deref().unwrap_or("(none)"),
                    is.as_deref().unwrap_or("(none)")
                ));
            }
        }
        let pins = |lines: &[(String, String)]| -> BTreeMap<String, String> {
            lines
                .iter()
                .filter(|(k, _)| k == "pin")
                .map(|(_, v)| match v.split_once("==") {
                    Some((n, ver)) => (n.to_string(), ver.to_string()),
                    None => (v.clone(), String::new()),
                })
                .collect()
        };
        let (was, is) = (pins(&self.inputs), pins(&now));
        for (name, v) in &is {
            match was.get(name) {
                None => out.push(format!("pin added: {name}=={v}")),
                Some(old) if old != v => out.push(format!("pin {name} {old} → {v}")),
                Some(_) => {}
            }
        }
        for (name, v) in &was {
            if !is.contains_key(name) {
                out.push(format!("pin removed: {name}=={v}"));
            }
        }
        if out.is_empty() {
            if digest_of_lines(&self.inputs) != self.inputs_sha256 {
                out.push(
                    "the recorded inputs do not match their inputs-sha256 (edited by hand?)"
                        .to_string(),
                );
            }
            // The package list must hold what was asked for.
            let torch_version = current.torch.split_once("==").map(|(_, v)| v);
            let mut wanted: Vec<(String, String)> = is
                .iter()
                .map(|(n, v)| (n.split('[').next().unwrap_or(n).to_string(), v.clone()))
                .collect();
            if let Some(v) = torch_version {
                wanted.push(("torch".to_string(), v.to_string()));
            }
            for (name, v) in wanted {
                match self.packages.get(&name) {
                    Some(got) if *got == v => {}
                    Some(got) => out.push(format!(
                        "the package list holds {name}=={got}, the spec pins {v} (edited by hand?)"
                    )),
                    None => out.push(format!(
                        "{name}=={v} is not in the package list (edited by hand?)"
                    )),
                }
            }
        }
        out
    }
}

/// Where a spec's lock lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockLocation {
    /// A bundled profile's lock, embedded in imgctl (written to
    /// `images/<name>.lock` of imgctl's source tree).
    Bundled {
        /// Profile name (`cu124`).
        name: String,
    },
    /// A file next to a user's spec.
    File(PathBuf),
}

impl LockLocation {
    /// The lock of `spec`, `None` when the spec says `lock: false`.
    pub fn of(spec: &LoadedSpec) -> Option<LockLocation> {
        match (&spec.spec.lock, &spec.file, &spec.dir) {
            (LockSetting::Disabled, _, _) => None,
            (LockSetting::Path(p), _, Some(dir)) => Some(LockLocation::File(dir.join(p))),
            (LockSetting::Default, Some(file), _) => {
                Some(LockLocation::File(file.with_extension("lock")))
            }
            // Bundled (validation rejects `lock: PATH` there).
            _ => Some(LockLocation::Bundled {
                name: spec.name.clone(),
            }),
        }
    }

    /// How to name it in messages (`images/cu124.lock`, or the path).
    pub fn display(&self) -> String {
        match self {
            LockLocation::Bundled { name } => format!("images/{name}.lock"),
            LockLocation::File(p) => p.display().to_string(),
        }
    }

    /// The lock's text; `Ok(None)` when there is none.
    pub fn read(&self) -> Result<Option<String>, String> {
        match self {
            LockLocation::Bundled { name } => {
                Ok(crate::spec::bundled_lock(name).map(str::to_string))
            }
            LockLocation::File(p) => match std::fs::read_to_string(p) {
                Ok(t) => Ok(Some(t)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("cannot read {}: {e}", p.display())),
            },
        }
    }
}

/// The state of a spec's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    /// The spec says `lock: false`.
    Disabled,
    /// No lock file yet.
    Missing {
        /// Where it would be.
        path: String,
        /// Whether the spec names it (`lock: PATH`) rather than the default.
        explicit: bool,
    },
    /// A file that is not a lock (or cannot be read).
    Invalid {
        /// Its path.
        path: String,
        /// What is wrong.
        error: String,
    },
    /// A lock resolved from other inputs than the spec's.
    Stale {
        /// Its path.
        path: String,
        /// What changed (`pin diffusers 0.33.1 → 0.34.0`).
        changes: Vec<String>,
    },
    /// A lock of the spec's current inputs.
    Fresh {
        /// Its path.
        path: String,
        /// The parsed lock.
        lock: LockFile,
        /// The file's exact text (COPYed into the image).
        text: String,
    },
}

impl LockState {
    /// Whether the lock is fresh.
    pub fn is_fresh(&self) -> bool {
        matches!(self, LockState::Fresh { .. })
    }
    /// A short word for JSON output: disabled, missing, invalid, stale, fresh.
    pub fn word(&self) -> &'static str {
        match self {
            LockState::Disabled => "disabled",
            LockState::Missing { .. } => "missing",
            LockState::Invalid { .. } => "invalid",
            LockState::Stale { .. } => "stale",
            LockState::Fresh { .. } => "fresh",
        }
    }
}

/// The state of `spec`'s lock: read it, parse it, compare its inputs with the spec's.
pub fn state(spec: &LoadedSpec) -> LockState {
    let Some(location) = LockLocation::of(spec) else {
        return LockState::Disabled;
    };
    let path = location.display();
    let text = match location.read() {
        Ok(Some(t)) => t,
        Ok(None) => {
            return LockState::Missing {
                path,
                explicit: matches!(spec.spec.lock, LockSetting::Path(_)),
            }
        }
        Err(error) => return LockState::Invalid { path, error },
    };
    state_of_text(&path, text, &LockInputs::of(&spec.spec))
}

/// The state of lock `text` (read from `path`) against the inputs `current`.
pub fn state_of_text(path: &str, text: String, current: &LockInputs) -> LockState {
    let lock = match LockFile::parse(&text) {
        Ok(l) => l,
        Err(error) => {
            return LockState::Invalid {
                path: path.to_string(),
                error,
            }
        }
    };
    let changes = lock.changes(current);
    if changes.is_empty() {
        LockState::Fresh {
            path: path.to_string(),
            lock,
            text,
        }
    } else {
        LockState::Stale {
            path: path.to_string(),
            changes,
        }
    }
}

/// The command that (re)generates `spec`'s lock (`imgctl lock --cuda 12.4`).
pub fn lock_command(spec: &LoadedSpec) -> String {
    match (&spec.file, crate::spec::bundled_cuda(&spec.name)) {
        (Some(file), _) => format!("imgctl lock --spec {}", file.display()),
        (None, Some(cuda)) => format!("imgctl lock --cuda {cuda}"),
        (None, None) => format!("imgctl lock --spec {}", spec.origin),
    }
}

/// A lock body line, `name==version` and nothing else: a PEP 508 name and a
/// PEP 440 version (public, optionally `+local`). The whole lock file goes
/// into the image as pip's `--constraint` file, so any other line (a pip option
/// such as `--extra-index-url=…`, a URL, a marker) would change what pip does.
fn parse_package_line(line: &str) -> Option<(&str, &str)> {
    let (name, version) = line.split_once("==")?;
    (is_package_name(name) && is_version(version)).then_some((name, version))
}

/// A PEP 508 distribution name: ASCII letters and digits, with `.`, `_` or
/// `-` only between them.
fn is_package_name(name: &str) -> bool {
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    alnum(name.chars().next())
        && alnum(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// A PEP 440 version as pip spells it (the specification's own pattern,
/// <https://packaging.python.org/en/latest/specifications/version-specifiers/#appendix-parsing-version-strings-with-regular-expressions>),
/// without wildcards.
fn is_version(version: &str) -> bool {
    use std::sync::OnceLock;
    static PEP440: OnceLock<regex::Regex> = OnceLock::new();
    PEP440
        .get_or_init(|| {
            regex::Regex::new(
                r"(?i)^v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?(?:[-_.]?dev[-_.]?[0-9]*)?(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?$",
            )
            .expect("static regex")
        })
        .is_match(version)
}

/// What `imgctl build`/`render` say about the lock: (is it a warning, the line).
pub fn build_line(state: &LockState, spec: &LoadedSpec) -> (bool, String) {
    let cmd = lock_command(spec);
    match state {
        LockState::Fresh { path, lock, .. } => (
            false,
            format!("pip lock: {path} ({} packages)", lock.packages.len()),
        ),
        LockState::Disabled => (
            false,
            "pip lock: none (the spec says `lock: false`; transitive Python packages float)"
                .to_string(),
        ),
        LockState::Missing { path, explicit } => (
            *explicit,
            format!(
                "pip lock: {path} does not exist, so transitive Python packages float; create it with `{cmd}`"
            ),
        ),
        LockState::Invalid { path, error } => (
            true,
            format!("pip lock {path} is not used, it is not a lock file ({error}); regenerate it with `{cmd}`"),
        ),
        LockState::Stale { path, changes } => (
            true,
            format!(
                "pip lock {path} is stale ({}) and not used; regenerate it with `{cmd}`",
                changes.join("; ")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_text(extra: &str) -> String {
        format!(
            "schema_version: 1\nname: t\nbase_image: nvidia/cuda:12.4.1-base-ubuntu22.04\ncuda: \"12.4.1\"\npython: \"3.10\"\ntorch:\n  version: \"2.7.0\"\n  variant: cu126\n  index: https://pypi.org/simple\n{extra}user:\n  name: dev\napt: []\nports: []\n"
        )
    }

    fn inputs(text: &str) -> LockInputs {
        LockInputs::of(&crate::spec::validate::validate(text, None).unwrap())
    }

    #[test]
    fn bundled_locks_are_fresh() {
        for (name, _) in crate::spec::bundled() {
            let cuda = crate::spec::bundled_cuda(name).unwrap();
            let spec =
                crate::spec::load(&crate::spec::SpecSource::Bundled { cuda: cuda.into() }).unwrap();
            match state(&spec) {
                LockState::Fresh { lock, .. } => {
                    assert!(lock.packages.len() > 100, "{name}: {}", lock.packages.len())
                }
                // cu128's torch index was unreachable where the locks were made.
                LockState::Missing { .. } if name == "cu128" => {}
                other => panic!("{name}: {other:?}; run `imgctl lock --cuda {cuda}`"),
            }
        }
    }

    #[test]
    fn names_are_pep503_normalised() {
        assert_eq!(normalize_name("PyYAML"), "pyyaml");
        assert_eq!(normalize_name("typing_extensions"), "typing-extensions");
        assert_eq!(normalize_name("zope.interface"), "zope-interface");
        assert_eq!(normalize_name("A-_.b"), "a-b");
        assert_eq!(
            canonical_pin("Uvicorn[Standard,a_b]", "1.0"),
            "uvicorn[a-b,standard]==1.0"
        );
    }

    #[test]
    fn platform_tags_follow_the_base_glibc() {
        let p = Platform::of_base("nvidia/cuda:12.4.1-base-ubuntu22.04");
        assert_eq!(p.glibc, 35);
        let tags = p.pip_tags();
        assert_eq!(tags[0], "manylinux_2_35_x86_64");
        assert!(tags.contains(&"manylinux_2_28_x86_64".to_string()));
        assert!(tags.contains(&"manylinux_2_5_x86_64".to_string()));
        assert!(tags.contains(&"manylinux2014_x86_64".to_string()));
        assert_eq!(tags.last().unwrap(), "linux_x86_64");
        assert!(!tags.contains(&"manylinux_2_36_x86_64".to_string()));
        assert_eq!(Platform::of_base("my/base:1").glibc, FALLBACK_GLIBC);
    }

    #[test]
    fn lock_text_round_trips() {
        let i = inputs(&spec_text(
            "pip:\n  - diffusers==0.33.1\n  - Jinja2==3.1.6\n",
        ));
        let lock = LockFile::new(
            &i,
            [
                ("Jinja2", "3.1.6"),
                ("diffusers", "0.33.1"),
                ("torch", "2.7.0"),
                ("typing_extensions", "4.13.2"),
            ],
        );
        let text = lock.to_text("images/t.yaml", "imgctl lock --spec t.yaml");
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                "diffusers==0.33.1",
                "jinja2==3.1.6",
                "torch==2.7.0",
                "typing-extensions==4.13.2"
            ]
        );
        let back = LockFile::parse(&text).unwrap();
        assert_eq!(back, lock);
        assert_eq!(
            back.to_text("images/t.yaml", "imgctl lock --spec t.yaml"),
            text
        );
        assert!(back.changes(&i).is_empty(), "{:?}", back.changes(&i));
        assert!(text.contains("# input pin: jinja2==3.1.6\n"), "{text}");
        assert!(
            text.contains("Resolved for CPython 3.10 on linux_x86_64 glibc 2.35"),
            "{text}"
        );
    }

    #[test]
    fn parse_errors_name_the_line() {
        assert!(LockFile::parse("six==1.16.0\n")
            .unwrap_err()
            .contains("lock-version"));
        let err = LockFile::parse("# lock-version: 1\n# inputs-sha256: x\nsix>=1\n").unwrap_err();
        assert!(err.contains("line 3"), "{err}");
        let err =
            LockFile::parse("# lock-version: 1\n# inputs-sha256: x\nsix==1\nSix==2\n").unwrap_err();
        assert!(err.contains("twice"), "{err}");
    }

    #[test]
    fn only_name_version_lines_are_packages() {
        let head = "# lock-version: 1\n# inputs-sha256: x\n";
        for good in [
            "six==1.16.0",
            "torch==2.7.0+cu126",
            "python-dateutil==2.9.0.post0",
            "tzdata==2026.10.19.post1",
            "zope.interface==7.0rc1",
            "Foo_Bar==1!2.0.dev3",
        ] {
            let lock = LockFile::parse(&format!("{head}\n# a comment\n{good}\n"));
            assert!(lock.is_ok(), "{good}: {lock:?}");
        }
        for bad in [
            "--extra-index-url=http://evil.example/simple==1",
            "--index-url http://evil.example/simple",
            "-e git+https://evil.example/x.git#egg=x==1",
            "six==1.16.0 --hash=sha256:00",
            "six==1.16.0; python_version<'3'",
            "six==1.*",
            "six==${VERSION}",
            "six==1.0 \\",
            "https://evil.example/six.whl==1",
            "-c other.txt==1",
            "six == 1.16.0",
        ] {
            let err = LockFile::parse(&format!("{head}{bad}\n")).unwrap_err();
            assert!(
                err.starts_with("line 3: ") && err.contains("is not a `name==version` line"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn digest_follows_inputs_not_yaml_layout() {
        let base = inputs(&spec_text("pip:\n  - six==1.16.0\n  - packaging==24.0\n"));
        // Comments, key order and pin order do not matter.
        let reordered = format!(
            "# a comment\npip: [packaging==24.0, six==1.16.0]  # pins\n{}",
            spec_text("")
        );
        assert_eq!(inputs(&reordered).sha256(), base.sha256());
        // A pin, the python, an index do.
        let bumped = inputs(&spec_text("pip:\n  - six==1.17.0\n  - packaging==24.0\n"));
        assert_ne!(bumped.sha256(), base.sha256());
        let mut py = base.clone();
        py.python = "3.11".into();
        assert_ne!(py.sha256(), base.sha256());
        let mut idx = base.clone();
        idx.torch_index = "https://mirror.example/simple".into();
        assert_ne!(idx.sha256(), base.sha256());
        let mut pip_idx = base.clone();
        pip_idx.pip_index = "https://mirror.example/simple".into();
        assert_ne!(pip_idx.sha256(), base.sha256());
        let on_noble = inputs(
            &spec_text("pip: []\n")
                .replace("ubuntu22.04", "ubuntu24.04")
                .replace("3.10", "3.12"),
        );
        assert_ne!(on_noble.sha256(), inputs(&spec_text("pip: []\n")).sha256());
    }

    #[test]
    fn changes_name_what_changed() {
        let old = inputs(&spec_text("pip:\n  - six==1.16.0\n  - packaging==24.0\n"));
        let lock = LockFile::new(
            &old,
            [("six", "1.16.0"), ("packaging", "24.0"), ("torch", "2.7.0")],
        );
        let new = inputs(&spec_text("pip:\n  - six==1.17.0\n  - attrs==25.3.0\n"));
        assert_eq!(
            lock.changes(&new),
            [
                "pin added: attrs==25.3.0",
                "pin six 1.16.0 → 1.17.0",
                "pin removed: packaging==24.0"
            ]
        );
        let mut py = old.clone();
        py.python = "3.11".into();
        assert_eq!(lock.changes(&py), ["python 3.10 → 3.11"]);
        // A hand edit of the body or of the digest is caught too.
        let mut edited = lock.clone();
        edited.packages.insert("six".into(), "1.15.0".into());
        assert_eq!(edited.changes(&old).len(), 1);
        let mut edited = lock.clone();
        edited.inputs_sha256 = "0".repeat(64);
        assert!(edited.changes(&old)[0].contains("edited by hand"));
    }
}
