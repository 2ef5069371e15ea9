//! The lock file format: under a header that records what made the lock, how
//! to regenerate it, its inputs and their digest, two steps of packages (the
//! image's torch layer, then its pip layer), each package as
//! `name==version` with the sha256 of every file pip may install for it
//! (`--hash=sha256:…` lines, pip's hash-checking mode). It owns writing
//! ([`LockFile::to_text`], and each step as a requirements file of its own,
//! [`LockFile::step_text`]), parsing ([`LockFile::parse`], which admits
//! nothing but those entries in the body, since they go into the image as
//! pip's requirements) and comparing a lock with a spec's current inputs
//! ([`LockFile::changes`]). It reads and writes no file.
use std::collections::BTreeMap;

use super::inputs::digest_of_lines;
use super::{LockFileError, LockInputs, LOCK_VERSION};
use crate::image::specs::normalize_name;

/// The image layer that installs a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// The torch layer: torch and everything it needs, from torch's index.
    Torch,
    /// The pip layer after it: the other pins and what they need beyond torch's set.
    Pins,
}

impl Step {
    /// Both steps, in the order the image installs them.
    pub const ALL: [Step; 2] = [Step::Torch, Step::Pins];

    /// Its word in the lock file (`# step torch`) and in messages.
    pub fn word(self) -> &'static str {
        match self {
            Step::Torch => "torch",
            Step::Pins => "pins",
        }
    }

    /// What the step holds, for the lock's comment line.
    fn what(self) -> &'static str {
        match self {
            Step::Torch => "torch and what it needs; the image's torch layer installs them first",
            Step::Pins => {
                "the other pins and what they need; the image's pip layer installs them next"
            }
        }
    }
}

/// One package of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locked {
    /// The exact version.
    pub version: String,
    /// The layer that installs it.
    pub step: Step,
    /// sha256 (64 lowercase hex digits) of each file pip may install for it,
    /// sorted, without repeats (empty only in a lock of format 1).
    pub hashes: Vec<String>,
}

impl Locked {
    /// A package at `version` in `step` with the sha256 `hashes` (any order;
    /// they are sorted and deduplicated).
    pub fn new<H: AsRef<str>>(
        version: &str,
        step: Step,
        hashes: impl IntoIterator<Item = H>,
    ) -> Locked {
        let mut hashes: Vec<String> = hashes
            .into_iter()
            .map(|h| h.as_ref().to_ascii_lowercase())
            .collect();
        hashes.sort();
        hashes.dedup();
        Locked {
            version: version.trim().to_string(),
            step,
            hashes,
        }
    }
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
    /// The recorded digest of the package list ([`LockFile::packages_digest`]);
    /// `None` in a lock written before imgctl recorded it.
    pub packages_sha256: Option<String>,
    /// Every package: normalised name → its version, step and hashes.
    pub packages: BTreeMap<String, Locked>,
}

/// Header key of the format version.
const KEY_VERSION: &str = "lock-version";
/// Header key of the inputs digest.
const KEY_DIGEST: &str = "inputs-sha256";
/// Header key of the package list's digest.
const KEY_PACKAGES_DIGEST: &str = "packages-sha256";
/// Prefix of a recorded input line.
const INPUT_PREFIX: &str = "# input ";
/// Prefix of the line that starts a step (`# step torch: …`).
const STEP_PREFIX: &str = "# step ";
/// How a hash is written after a requirement (pip's per-requirement option).
const HASH_PREFIX: &str = "--hash=sha256:";
/// The first format whose packages all carry hashes and steps.
const FIRST_HASHED_VERSION: u32 = 2;

impl LockFile {
    /// A lock of `packages` (any spelling of names; they are normalised)
    /// resolved from `inputs`.
    pub fn new<I, N>(inputs: &LockInputs, packages: I) -> LockFile
    where
        I: IntoIterator<Item = (N, Locked)>,
        N: AsRef<str>,
    {
        let mut lock = LockFile {
            version: LOCK_VERSION,
            inputs: inputs.lines(),
            inputs_sha256: inputs.sha256(),
            packages_sha256: None,
            packages: packages
                .into_iter()
                .map(|(n, l)| (normalize_name(n.as_ref()), l))
                .collect(),
        };
        lock.packages_sha256 = Some(lock.packages_digest());
        lock
    }

    /// The packages of `step`, sorted by name.
    pub fn step(&self, step: Step) -> impl Iterator<Item = (&String, &Locked)> {
        self.packages.iter().filter(move |(_, l)| l.step == step)
    }

    /// The file text: a header (what made it, from which spec, how to
    /// regenerate and check it, the inputs and their digest), then each step:
    /// its `# step` line and its packages, sorted by name, each with its hashes.
    pub fn to_text(&self, spec_origin: &str, regenerate: &str) -> String {
        let get = |k: &str| {
            self.inputs
                .iter()
                .find(|(key, _)| key == k)
                .map_or("?", |(_, v)| v.as_str())
        };
        let mut out = String::new();
        out.push_str(&format!(
            "# imgctl pip lock of {spec_origin}: every Python package the image installs, pinned, with the sha256 of its files.\n"
        ));
        out.push_str(&format!(
            "# Generated by imgctl {} with uv's resolver; do not edit. Regenerate: {regenerate}\n",
            env!("CARGO_PKG_VERSION")
        ));
        out.push_str(&format!(
            "# Check: {regenerate} --check. Resolved for CPython {} on {}, binary wheels only.\n",
            get("python"),
            get("platform")
        ));
        out.push_str(&format!("# {KEY_VERSION}: {}\n", self.version));
        for (k, v) in &self.inputs {
            out.push_str(&format!("{INPUT_PREFIX}{k}: {v}\n"));
        }
        out.push_str(&format!("# {KEY_DIGEST}: {}\n", self.inputs_sha256));
        out.push_str(&format!(
            "# {KEY_PACKAGES_DIGEST}: {}\n",
            self.packages_digest()
        ));
        for step in Step::ALL {
            out.push_str(&format!("{STEP_PREFIX}{}: {}\n", step.word(), step.what()));
            for (name, locked) in self.step(step) {
                push_entry(&mut out, name, locked);
            }
        }
        out
    }

    /// The digest of the package list: every step's packages, in order, each
    /// `step name==version` and its hashes on one line. Recorded in the
    /// header, so that `--check` sees a package added, removed or changed in
    /// the body, which the inputs alone cannot show.
    pub fn packages_digest(&self) -> String {
        let mut text = String::from("imgctl pip lock packages\n");
        for step in Step::ALL {
            for (name, locked) in self.step(step) {
                text.push_str(&format!("{} {name}=={}", step.word(), locked.version));
                for h in &locked.hashes {
                    text.push(' ');
                    text.push_str(h);
                }
                text.push('\n');
            }
        }
        crate::image::specs::sha256_hex(text.as_bytes())
    }

    /// The packages of `step` as a requirements file of their own (what the
    /// image's layer of that step hands pip), under a comment naming `origin`.
    pub fn step_text(&self, step: Step, origin: &str) -> String {
        self.part_text(step, step.word(), origin, |_| true)
    }

    /// The packages of `step` whose normalised name `keep` accepts, as a
    /// requirements file of their own: the image installs a step in more than
    /// one layer this way (`part` names the layer in the file's comment).
    pub fn part_text(
        &self,
        step: Step,
        part: &str,
        origin: &str,
        keep: impl Fn(&str) -> bool,
    ) -> String {
        let mut out = if part == step.word() {
            format!("# The {part} step of the imgctl pip lock {origin}: pip installs these, and only these files.\n")
        } else {
            format!(
                "# The {part} part of the {} step of the imgctl pip lock {origin}: pip installs these, and only these files.\n",
                step.word()
            )
        };
        for (name, locked) in self.step(step).filter(|(name, _)| keep(name)) {
            push_entry(&mut out, name, locked);
        }
        out
    }

    /// Parses a lock file; `Err` names the line that is wrong.
    pub fn parse(text: &str) -> Result<LockFile, LockFileError> {
        let mut version = None;
        let mut inputs = Vec::new();
        let mut digest = None;
        let mut packages_digest = None;
        let mut step = None;
        let mut packages = BTreeMap::new();
        // Where each package starts, and its step as written (format checks at the end).
        let mut starts: Vec<(usize, String, bool)> = Vec::new();
        let mut lines = text.lines().enumerate();
        while let Some((i, raw)) = lines.next() {
            let line = raw.trim();
            let at = i + 1;
            if line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix(INPUT_PREFIX) {
                let (k, v) = rest
                    .split_once(": ")
                    .ok_or(LockFileError::InputLine { line: at })?;
                inputs.push((k.trim().to_string(), v.trim().to_string()));
            } else if let Some(rest) = line.strip_prefix(&format!("# {KEY_VERSION}:")) {
                version = Some(
                    rest.trim()
                        .parse::<u32>()
                        .map_err(|_| LockFileError::Version {
                            line: at,
                            value: rest.trim().to_string(),
                        })?,
                );
            } else if let Some(rest) = line.strip_prefix(&format!("# {KEY_DIGEST}:")) {
                digest = Some(rest.trim().to_string());
            } else if let Some(rest) = line.strip_prefix(&format!("# {KEY_PACKAGES_DIGEST}:")) {
                packages_digest = Some(rest.trim().to_string());
            } else if let Some(rest) = line.strip_prefix(STEP_PREFIX) {
                let word = rest.split(':').next().unwrap_or("").trim();
                step = Some(
                    Step::ALL
                        .into_iter()
                        .find(|s| s.word() == word)
                        .ok_or_else(|| LockFileError::Step {
                            line: at,
                            word: word.escape_debug().to_string(),
                        })?,
                );
            } else if line.starts_with('#') {
                continue;
            } else {
                // A requirement and its hashes, continued over lines ending with `\`.
                let mut entry = line.to_string();
                while let Some(head) = entry.strip_suffix('\\') {
                    entry = head.trim_end().to_string();
                    match lines.next() {
                        Some((_, next))
                            if !next.trim().is_empty() && !next.trim().starts_with('#') =>
                        {
                            entry.push(' ');
                            entry.push_str(next.trim());
                        }
                        _ => {
                            return Err(LockFileError::NotAPackage {
                                line: at,
                                text: format!("{line} …").escape_debug().to_string(),
                            })
                        }
                    }
                }
                let (name, ver, hashes) =
                    parse_entry(&entry).ok_or_else(|| LockFileError::NotAPackage {
                        line: at,
                        text: entry.escape_debug().to_string(),
                    })?;
                let name = normalize_name(name);
                let locked = Locked::new(ver, step.unwrap_or(Step::Pins), hashes);
                starts.push((at, name.clone(), step.is_some()));
                if packages.insert(name.clone(), locked).is_some() {
                    return Err(LockFileError::Twice { line: at, name });
                }
            }
        }
        let version = version.ok_or(LockFileError::NoVersion)?;
        if version >= FIRST_HASHED_VERSION {
            for (line, name, in_step) in starts {
                if !in_step {
                    return Err(LockFileError::NoStep { line });
                }
                if packages[&name].hashes.is_empty() {
                    return Err(LockFileError::NoHash { line, name });
                }
            }
        }
        Ok(LockFile {
            version,
            inputs,
            inputs_sha256: digest.ok_or(LockFileError::NoDigest)?,
            packages_sha256: packages_digest,
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
            match &self.packages_sha256 {
                Some(d) if *d == self.packages_digest() => {}
                Some(_) => out.push(
                    "the package list does not match its packages-sha256 (a package added, removed or changed by hand?)"
                        .to_string(),
                ),
                None => out.push(
                    "the lock records no packages-sha256 (written before imgctl checked the package list)"
                        .to_string(),
                ),
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
                    Some(got) if got.version == v => {}
                    Some(got) => out.push(format!(
                        "the package list holds {name}=={}, the spec pins {v} (edited by hand?)",
                        got.version
                    )),
                    None => out.push(format!(
                        "{name}=={v} is not in the package list (edited by hand?)"
                    )),
                }
            }
            if let Some(torch) = self.packages.get("torch") {
                if torch.step != Step::Torch {
                    out.push(format!(
                        "torch is in the {} step, not the torch step (edited by hand?)",
                        torch.step.word()
                    ));
                }
            }
        }
        out
    }
}

/// Appends `name==version` and its hashes, one per continued line.
fn push_entry(out: &mut String, name: &str, locked: &Locked) {
    out.push_str(&format!("{name}=={}", locked.version));
    for h in &locked.hashes {
        out.push_str(" \\\n    ");
        out.push_str(HASH_PREFIX);
        out.push_str(h);
    }
    out.push('\n');
}

/// One requirement with its hashes, its continued lines joined
/// (`six==1.16.0 --hash=sha256:… --hash=sha256:…`), as pip's requirements
/// files and `uv pip compile` write them: (name, version, hashes), or `None`
/// for anything else.
pub(super) fn parse_entry(entry: &str) -> Option<(&str, &str, Vec<&str>)> {
    let mut words = entry.split_whitespace();
    let (name, version) = words.next().and_then(parse_package_line)?;
    let hashes = words
        .map(|w| w.strip_prefix(HASH_PREFIX).filter(|h| is_sha256(h)))
        .collect::<Option<Vec<&str>>>()?;
    Some((name, version, hashes))
}

/// 64 lowercase hex digits.
fn is_sha256(h: &str) -> bool {
    h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A package requirement, `name==version` and nothing else: a PEP 508 name
/// and a PEP 440 version (public, optionally `+local`). The lock's steps go
/// into the image as pip's requirements files, so anything else (a pip option
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::lock::testing::inputs;
    use crate::image::lock::testing::spec_text;

    const H1: &str = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254";
    const H2: &str = "f375db73a39f5cf83696d500e21a67f418dc9a988955756f254be8f03b7b3651";

    fn torch(v: &str) -> Locked {
        Locked::new(v, Step::Torch, [H1])
    }
    fn pins(v: &str) -> Locked {
        Locked::new(v, Step::Pins, [H2, H1])
    }

    #[test]
    fn lock_text_round_trips() {
        let i = inputs(&spec_text(
            "pip:\n  - diffusers==0.33.1\n  - Jinja2==3.1.6\n",
        ));
        let lock = LockFile::new(
            &i,
            [
                ("Jinja2", pins("3.1.6")),
                ("diffusers", pins("0.33.1")),
                ("torch", torch("2.7.0")),
                ("typing_extensions", torch("4.13.2")),
            ],
        );
        let text = lock.to_text("images/t.yaml", "imgctl lock --spec t.yaml");
        let body: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("# step torch"))
            .collect();
        assert_eq!(
            body.join("\n"),
            format!(
                "# step torch: torch and what it needs; the image's torch layer installs them first
torch==2.7.0 \\
    --hash=sha256:{H1}
typing-extensions==4.13.2 \\
    --hash=sha256:{H1}
# step pins: the other pins and what they need; the image's pip layer installs them next
diffusers==0.33.1 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}
jinja2==3.1.6 \\
    --hash=sha256:{H1} \\
    --hash=sha256:{H2}"
            )
        );
        let back = LockFile::parse(&text).unwrap();
        assert_eq!(back, lock);
        assert_eq!(
            back.to_text("images/t.yaml", "imgctl lock --spec t.yaml"),
            text
        );
        assert!(back.changes(&i).is_empty(), "{:?}", back.changes(&i));
        assert!(text.contains("# input pin: jinja2==3.1.6\n"), "{text}");
        assert!(text.contains("# lock-version: 2\n"), "{text}");
        assert!(
            text.contains(
                "Resolved for CPython 3.10 on linux_x86_64 glibc 2.35, binary wheels only"
            ),
            "{text}"
        );
        // Each step on its own, as the image's layers get it.
        let t = lock.step_text(Step::Torch, "images/t.lock");
        assert_eq!(
            t,
            format!("# The torch step of the imgctl pip lock images/t.lock: pip installs these, and only these files.\ntorch==2.7.0 \\\n    --hash=sha256:{H1}\ntyping-extensions==4.13.2 \\\n    --hash=sha256:{H1}\n")
        );
        assert!(lock
            .step_text(Step::Pins, "x")
            .contains("\njinja2==3.1.6 \\\n"));
        assert!(!lock.step_text(Step::Pins, "x").contains("torch=="));
        // A part of a step: only the entries kept, under a comment naming the part.
        let named = lock.part_text(Step::Pins, "named pins", "x", |n| n == "diffusers");
        assert!(
            named.starts_with("# The named pins part of the pins step of the imgctl pip lock x:"),
            "{named}"
        );
        assert!(named.contains("\ndiffusers==0.33.1 \\\n") && !named.contains("jinja2"));
    }

    #[test]
    fn parse_errors_name_the_line() {
        assert_eq!(
            LockFile::parse("six==1.16.0\n").unwrap_err(),
            LockFileError::NoVersion
        );
        let head = "# lock-version: 2\n# inputs-sha256: x\n# step pins: …\n";
        let err = LockFile::parse(&format!("{head}six>=1\n")).unwrap_err();
        assert!(
            matches!(err, LockFileError::NotAPackage { line: 4, .. }),
            "{err}"
        );
        let err = LockFile::parse(&format!(
            "{head}six==1 --hash=sha256:{H1}\nSix==2 \\\n  --hash=sha256:{H1}\n"
        ))
        .unwrap_err();
        assert_eq!(
            err,
            LockFileError::Twice {
                line: 5,
                name: "six".into()
            }
        );
        // Format 2: every package has a hash and a step.
        let err = LockFile::parse(&format!("{head}six==1.16.0\n")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 4: 'six' has no sha256 hash (every package of a lock has one)"
        );
        let err = LockFile::parse(&format!(
            "# lock-version: 2\n# inputs-sha256: x\nsix==1 --hash=sha256:{H1}\n"
        ))
        .unwrap_err();
        assert_eq!(err, LockFileError::NoStep { line: 3 });
        let err = LockFile::parse(&format!("{head}# step extra: more\n")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 4: 'extra' is not a step (a lock has the steps torch and pins)"
        );
        // A continuation into nothing.
        let err = LockFile::parse(&format!("{head}six==1 \\\n\n")).unwrap_err();
        assert!(
            matches!(err, LockFileError::NotAPackage { line: 4, .. }),
            "{err}"
        );
        // Format 1 (bare lines) still parses, to be reported as stale.
        let v1 = LockFile::parse("# lock-version: 1\n# inputs-sha256: x\nsix==1.16.0\n").unwrap();
        assert_eq!(
            v1.packages["six"],
            Locked::new("1.16.0", Step::Pins, [""; 0])
        );
    }

    #[test]
    fn only_name_version_lines_with_hashes_are_packages() {
        let head = "# lock-version: 2\n# inputs-sha256: x\n# step pins: …\n";
        for good in [
            "six==1.16.0",
            "torch==2.7.0+cu126",
            "python-dateutil==2.9.0.post0",
            "tzdata==2026.10.19.post1",
            "zope.interface==7.0rc1",
            "Foo_Bar==1!2.0.dev3",
        ] {
            let one_line = format!("{head}\n# a comment\n{good} --hash=sha256:{H1}\n");
            let continued =
                format!("{head}{good} \\\n    --hash=sha256:{H1} \\\n    --hash=sha256:{H2}\n");
            for text in [one_line, continued] {
                let lock = LockFile::parse(&text);
                assert!(lock.is_ok(), "{good}: {lock:?}");
            }
        }
        for bad in [
            "--extra-index-url=http://evil.example/simple==1",
            "--index-url http://evil.example/simple",
            "-e git+https://evil.example/x.git#egg=x==1",
            "six==1.16.0 --hash=sha256:00",
            "six==1.16.0 --hash=md5:00",
            "six==1.16.0 --hash=sha256:{H1} --extra-index-url=http://evil.example/simple",
            "six==1.16.0 --hash=sha256:{H1} \\\n--index-url=http://evil.example/simple",
            "six==1.16.0 --hash=sha256:{H1}; python_version<'3'",
            "six==1.*",
            "six==${VERSION}",
            "https://evil.example/six.whl==1",
            "-c other.txt==1",
            "six == 1.16.0",
        ] {
            let bad = bad.replace("{H1}", H1);
            let err = LockFile::parse(&format!("{head}{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("line 4: ")
                    && err.contains("is not a `name==version` line with sha256 hashes"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn changes_name_what_changed() {
        let old = inputs(&spec_text("pip:\n  - six==1.16.0\n  - packaging==24.0\n"));
        let lock = LockFile::new(
            &old,
            [
                ("six", pins("1.16.0")),
                ("packaging", pins("24.0")),
                ("torch", torch("2.7.0")),
            ],
        );
        assert!(lock.changes(&old).is_empty());
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
        let digest = "the package list does not match its packages-sha256 (a package added, removed or changed by hand?)";
        let mut edited = lock.clone();
        edited.packages.insert("six".into(), pins("1.15.0"));
        assert_eq!(edited.changes(&old).len(), 2);
        assert_eq!(edited.changes(&old)[0], digest);
        let mut edited = lock.clone();
        edited.inputs_sha256 = "0".repeat(64);
        assert!(edited.changes(&old)[0].contains("edited by hand"));
        let mut edited = lock.clone();
        edited.packages.insert("torch".into(), pins("2.7.0"));
        assert_eq!(
            edited.changes(&old),
            [
                digest,
                "torch is in the pins step, not the torch step (edited by hand?)"
            ]
        );
        // A lock of format 1 (no hashes) is stale, whatever else it holds.
        let mut v1 = lock.clone();
        v1.version = 1;
        assert_eq!(v1.changes(&old), ["lock format 1 → 2"]);
    }
}
