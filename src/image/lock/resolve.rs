//! Resolution with uv (`uv pip compile`) on the host, for the image's Python
//! and platform (`--python-version`, `--python-platform
//! x86_64-manylinux_2_N` for the base's glibc), binary wheels only, with the
//! sha256 of every file the index publishes for each chosen version (uv's
//! `--generate-hashes`), so that the image's pip finds the wheel of its own
//! Python among them also on a base with another Python (`--base-image`).
//!
//! Two passes. The whole set: torch and every pin together, from torch's
//! index and the pip index (torch's first when they differ, uv's default
//! `first-index` strategy: a name found on torch's index comes from there
//! alone, as in the image's torch layer). Then torch's own set: torch alone,
//! from torch's index alone, with every version of the whole set held — the
//! packages the image's torch layer installs, with the hashes of the files
//! torch's index serves. The rest is the pip layer's.
//!
//! This file owns the uv command lines, reading uv's output (a requirements
//! file with hashes), and putting the two passes together; running uv and its
//! errors are [`super::uv`]'s.
use std::collections::BTreeMap;
use std::path::Path;

use super::uv::{self, Uv};
use super::{LockError, LockInputs, Locked, Step};
use crate::image::specs::compat;
use crate::image::specs::normalize_name;

/// The indexes a resolution uses: the spec's, or a mirror of PyPI
/// (`--pip-index-url`), which also serves torch when the spec takes torch
/// from PyPI, as in the image build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Indexes {
    /// Where torch comes from.
    pub torch: String,
    /// Where the other pins come from.
    pub pip: String,
}

impl Indexes {
    /// The indexes of `inputs`, through `mirror` when given.
    pub fn new(inputs: &LockInputs, mirror: Option<&str>) -> Indexes {
        let mirror = mirror.map(|m| m.trim_end_matches('/').to_string());
        let torch = match &mirror {
            Some(m) if inputs.torch_index == compat::PYPI_INDEX => m.clone(),
            _ => inputs.torch_index.clone(),
        };
        Indexes {
            torch,
            pip: mirror.unwrap_or_else(|| inputs.pip_index.clone()),
        }
    }

    /// The indexes of the whole set, in uv's order of priority (torch's first).
    fn whole(&self) -> Vec<&str> {
        if self.torch == self.pip {
            vec![&self.pip]
        } else {
            vec![&self.torch, &self.pip]
        }
    }
}

/// The `uv pip compile` arguments that resolve the requirements on stdin for
/// the lock's Python and `platform` (uv's `--python-platform`) from `indexes`
/// (in uv's order of priority, the last one uv's default index), holding
/// `constraints`, and print a requirements file with hashes and nothing else.
pub fn uv_args(
    inputs: &LockInputs,
    platform: &str,
    indexes: &[&str],
    constraints: Option<&Path>,
) -> Vec<String> {
    let mut a: Vec<String> = [
        "pip",
        "compile",
        "-",
        "--generate-hashes",
        "--no-header",
        "--no-annotate",
        "--python-version",
        &inputs.python,
        "--python-platform",
        platform,
        "--only-binary",
        ":all:",
        // uv's configuration files and managed Pythons play no part: the
        // arguments say everything, and nothing is built from source.
        "--no-config",
        "--no-python-downloads",
        "--color",
        "never",
        "--index-strategy",
        "first-index",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some((default, rest)) = indexes.split_last() {
        for i in rest {
            a.push("--index".into());
            a.push(i.to_string());
        }
        a.push("--default-index".into());
        a.push(default.to_string());
    }
    if let Some(c) = constraints {
        a.push("--constraints".into());
        a.push(c.display().to_string());
    }
    a
}

/// One package as uv lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The name, normalised.
    pub name: String,
    /// The version.
    pub version: String,
    /// sha256 of each file the index publishes for that version.
    pub hashes: Vec<String>,
}

/// Reads uv's output: a requirements file of `name==version` entries, each
/// with its `--hash=sha256:` lines (continued with `\`), comments and
/// nothing else. Every entry must carry a hash.
pub fn parse_uv_output(text: &str) -> Result<Vec<Resolved>, String> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut entry = line.to_string();
        while let Some(head) = entry.strip_suffix('\\') {
            entry = head.trim_end().to_string();
            match lines.next() {
                Some(next) if !next.trim().starts_with('#') => {
                    entry.push(' ');
                    entry.push_str(next.trim());
                }
                _ => return Err(format!("'{line}' continues into nothing")),
            }
        }
        let (name, version, hashes) = super::file::parse_entry(&entry).ok_or_else(|| {
            format!(
                "'{}' is not a requirement with hashes",
                crate::error::printable(&entry)
            )
        })?;
        if hashes.is_empty() {
            return Err(format!("{name}=={version} has no hash"));
        }
        out.push(Resolved {
            name: normalize_name(name),
            version: version.to_string(),
            hashes: hashes.into_iter().map(str::to_string).collect(),
        });
    }
    Ok(out)
}

/// Resolves the full package set of `inputs` with `uv` (see the module's
/// documentation): torch's set for the torch step, the rest for the pins
/// step, each package with its hashes. `requirements` are the pins as the
/// spec writes them; `on_line` sees each uv command line and uv's stderr
/// lines (see [`uv::run`]).
pub fn resolve(
    uv: &Uv,
    inputs: &LockInputs,
    requirements: &[String],
    mirror: Option<&str>,
    on_line: &mut dyn FnMut(&str),
) -> Result<Vec<(String, Locked)>, LockError> {
    let idx = Indexes::new(inputs, mirror);
    let platform = inputs
        .platform
        .uv_platform()
        .ok_or_else(|| LockError::NoPlatform {
            platform: inputs.platform.canonical(),
        })?;
    let target = format!(
        "CPython {} on {}, binary wheels only",
        inputs.python,
        inputs.platform.canonical()
    );
    let whole_indexes = idx.whole();
    let mut stdin = format!("{}\n", inputs.torch);
    for r in requirements {
        stdin.push_str(r);
        stdin.push('\n');
    }
    let args = uv_args(inputs, &platform, &whole_indexes, None);
    let text = uv::run(
        uv,
        &args,
        &stdin,
        &whole_indexes.join(" and "),
        &target,
        on_line,
    )?;
    let whole = parse_uv_output(&text).map_err(LockError::BadOutput)?;

    // Torch's set, with every version of the whole set held.
    let dir = tempfile::Builder::new()
        .prefix("imgctl-lock-")
        .tempdir()
        .map_err(|error| LockError::TempDir { error })?;
    let constraints = dir.path().join("whole-set.txt");
    let held: String = whole
        .iter()
        .map(|r| format!("{}=={}\n", r.name, r.version))
        .collect();
    if let Err(error) = std::fs::write(&constraints, held) {
        return Err(LockError::WriteConstraints {
            path: constraints,
            error,
        });
    }
    let args = uv_args(inputs, &platform, &[&idx.torch], Some(&constraints));
    let text = uv::run(
        uv,
        &args,
        &format!("{}\n", inputs.torch),
        &idx.torch,
        &target,
        on_line,
    )?;
    let torch_set = parse_uv_output(&text).map_err(LockError::BadOutput)?;
    merge(whole, torch_set)
}

/// The lock's packages: `torch_set` (torch's own, from torch's index) in the
/// torch step with its hashes, the rest of `whole` in the pins step. Every
/// package of torch's set must be in the whole set at the same version.
pub fn merge(
    whole: Vec<Resolved>,
    torch_set: Vec<Resolved>,
) -> Result<Vec<(String, Locked)>, LockError> {
    let mut torch: BTreeMap<String, Resolved> =
        torch_set.into_iter().map(|r| (r.name.clone(), r)).collect();
    let whole_versions: BTreeMap<&str, &str> = whole
        .iter()
        .map(|r| (r.name.as_str(), r.version.as_str()))
        .collect();
    if let Some(r) = torch
        .values()
        .find(|r| whole_versions.get(r.name.as_str()) != Some(&r.version.as_str()))
    {
        return Err(LockError::TorchSet {
            what: format!(
                "{}=={} (the whole set has {})",
                r.name,
                r.version,
                whole_versions
                    .get(r.name.as_str())
                    .map_or_else(|| "none".to_string(), |v| format!("{}=={v}", r.name))
            ),
        });
    }
    Ok(whole
        .into_iter()
        .map(|r| match torch.remove(&r.name) {
            Some(t) => (r.name, Locked::new(&t.version, Step::Torch, t.hashes)),
            None => (r.name, Locked::new(&r.version, Step::Pins, r.hashes)),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> LockInputs {
        crate::image::lock::testing::inputs(&crate::image::lock::testing::spec_text(
            "pip: [six==1.16.0]\n",
        ))
    }

    #[test]
    fn the_command_line_pins_python_platform_and_indexes() {
        let i = inputs();
        let a = uv_args(
            &i,
            "x86_64-manylinux_2_35",
            &["https://pypi.org/simple"],
            None,
        );
        let s = a.join(" ");
        for needle in [
            "pip compile - --generate-hashes --no-header --no-annotate",
            "--python-version 3.10 --python-platform x86_64-manylinux_2_35",
            "--only-binary :all:",
            "--no-config",
            "--index-strategy first-index --default-index https://pypi.org/simple",
        ] {
            assert!(s.contains(needle), "{needle} not in {s}");
        }
        assert!(
            !s.contains("--index ") && !s.contains("--constraints"),
            "{s}"
        );
        // Two indexes: torch's first (priority), the pip index uv's default.
        let a = uv_args(
            &i,
            "x86_64-manylinux_2_35",
            &[
                "https://download.pytorch.org/whl/cu128",
                "https://pypi.org/simple",
            ],
            Some(Path::new("/t/held.txt")),
        );
        assert!(a.join(" ").ends_with("--index https://download.pytorch.org/whl/cu128 --default-index https://pypi.org/simple --constraints /t/held.txt"), "{a:?}");
    }

    #[test]
    fn a_mirror_serves_pypis_torch_too() {
        let i = inputs();
        let idx = Indexes::new(&i, Some("https://mirror.example/simple/"));
        assert_eq!(idx.torch, "https://mirror.example/simple");
        assert_eq!(idx.pip, "https://mirror.example/simple");
        assert_eq!(idx.whole(), ["https://mirror.example/simple"]);
        let mut cu128 = i.clone();
        cu128.torch_index = "https://download.pytorch.org/whl/cu128".into();
        let idx = Indexes::new(&cu128, Some("https://mirror.example/simple"));
        assert_eq!(idx.torch, "https://download.pytorch.org/whl/cu128");
        assert_eq!(
            idx.whole(),
            [
                "https://download.pytorch.org/whl/cu128",
                "https://mirror.example/simple"
            ]
        );
    }

    const H1: &str = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254";
    const H2: &str = "f375db73a39f5cf83696d500e21a67f418dc9a988955756f254be8f03b7b3651";

    #[test]
    fn uv_output_parses() {
        // As uv 0.13.8 writes it with --no-header --no-annotate.
        let text = format!(
            "six==1.16.0 \\\n    --hash=sha256:{H1}\ntyping-extensions==4.16.0 \\\n    --hash=sha256:{H2} \\\n    --hash=sha256:{H1}\n"
        );
        let got = parse_uv_output(&text).unwrap();
        assert_eq!(
            got,
            [
                Resolved {
                    name: "six".into(),
                    version: "1.16.0".into(),
                    hashes: vec![H1.into()]
                },
                Resolved {
                    name: "typing-extensions".into(),
                    version: "4.16.0".into(),
                    hashes: vec![H2.into(), H1.into()]
                }
            ]
        );
        // With uv's annotations too (comments are skipped).
        let annotated = format!(
            "# header\nsix==1.16.0 \\\n    --hash=sha256:{H1}\n    # via python-dateutil\n"
        );
        assert_eq!(parse_uv_output(&annotated).unwrap().len(), 1);
        for bad in [
            "six==1.16.0\n".to_string(),
            "--index-url https://x.example/simple\n".to_string(),
            "six==1.16.0 \\\n".to_string(),
            format!("six>=1 --hash=sha256:{H1}\n"),
        ] {
            assert!(parse_uv_output(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn torch_set_is_the_torch_step() {
        let r = |n: &str, v: &str, h: &str| Resolved {
            name: n.into(),
            version: v.into(),
            hashes: vec![h.into()],
        };
        let whole = vec![
            r("six", "1.16.0", H1),
            r("torch", "2.7.0", H1),
            r("sympy", "1.14.0", H1),
        ];
        // torch's index serves other files (hashes) for its own set.
        let torch_set = vec![r("torch", "2.7.0", H2), r("sympy", "1.14.0", H2)];
        let got: BTreeMap<String, Locked> = merge(whole.clone(), torch_set)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(got["torch"], Locked::new("2.7.0", Step::Torch, [H2]));
        assert_eq!(got["sympy"], Locked::new("1.14.0", Step::Torch, [H2]));
        assert_eq!(got["six"], Locked::new("1.16.0", Step::Pins, [H1]));
        // A version the whole set does not hold: refused, named.
        let err = merge(whole, vec![r("sympy", "1.13.0", H2)]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "torch's index does not serve what the whole resolution chose: sympy==1.13.0 (the whole set has sympy==1.14.0)"
        );
    }
}
