//! The software bill of materials of an image imgctl built: what is really
//! in it, read from the image (not from the template), as CycloneDX 1.5 JSON.
//!
//! A container of the image runs [`INVENTORY_SCRIPT`] (dpkg's database, the
//! Python distributions the image's `python3` sees, the OS release and the
//! pip lock the image was installed with); [`parse_inventory`] reads its
//! output and [`cyclonedx`] writes the document: the image itself, its base
//! (reference and digest), imgctl, every dpkg package (`pkg:deb/…`), every
//! Python package (`pkg:pypi/…`, with the sha256 hashes the lock allowed for
//! it) and the CUDA stack torch loads (runtime, cuBLAS, cuDNN, NCCL, from
//! the wheels that carry them). The same image gives the same bytes: the
//! serial number comes from the image id, the time from its `created` label,
//! and every list is sorted. This module runs nothing and prints nothing.
use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::image::lock::LockFile;
use crate::image::render::labels;

/// What the image's inventory command prints: sections headed by `#dpkg`,
/// `#os`, `#python` and `#lock`. Runs as the image's user with `sh`.
pub const INVENTORY_SCRIPT: &str = r#"set -eu
echo '#dpkg'
if command -v dpkg-query >/dev/null 2>&1; then dpkg-query -W -f '${Package}\t${Version}\t${Architecture}\n'; fi
echo '#os'
if [ -r /etc/os-release ]; then . /etc/os-release; printf '%s\t%s\n' "${ID:-}" "${VERSION_ID:-}"; fi
echo '#python'
if command -v python3 >/dev/null 2>&1; then python3 -I -c 'import importlib.metadata as m
for d in m.distributions():
    print("%s\t%s" % (d.metadata["Name"], d.version))'; fi
echo '#lock'
if [ -r /etc/imgctl/pip.lock ]; then cat /etc/imgctl/pip.lock; fi
"#;

/// A dpkg package as dpkg-query lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deb {
    /// Package name.
    pub name: String,
    /// Version (with any epoch: `1:2.38-4`).
    pub version: String,
    /// Architecture (`amd64`, `all`).
    pub arch: String,
}

/// A Python distribution the image's `python3` imports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PyDist {
    /// Its name as its metadata gives it.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// What the inventory command found in an image.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    /// dpkg's packages, sorted.
    pub debs: Vec<Deb>,
    /// The OS release: `(ID, VERSION_ID)` (`debian`, `12`).
    pub os: Option<(String, String)>,
    /// Python distributions, sorted by normalized name.
    pub python: Vec<PyDist>,
    /// The pip lock the image was installed with, when it has one.
    pub lock: Option<LockFile>,
}

/// An inventory that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SbomError {
    /// The output lacks a section (not an image imgctl can read).
    #[error("the image's inventory has no {section} section (its output: {output})")]
    MissingSection {
        /// The section (`#dpkg`).
        section: &'static str,
        /// The start of what it printed.
        output: String,
    },
    /// The image carries a pip lock that does not parse.
    #[error("the image's /etc/imgctl/pip.lock does not parse: {0}")]
    Lock(String),
}

/// PEP 503's normalized name: lower case, runs of `-_.` as one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut dash = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            dash = true;
        } else {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Reads [`INVENTORY_SCRIPT`]'s output.
pub fn parse_inventory(text: &str) -> Result<Inventory, SbomError> {
    let mut sections: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut current: Option<&str> = None;
    for line in text.lines() {
        match line {
            "#dpkg" | "#os" | "#python" | "#lock" => {
                current = Some(line);
                sections.entry(line).or_default();
            }
            _ => {
                if let Some(c) = current {
                    sections.entry(c).or_default().push(line);
                }
            }
        }
    }
    for section in ["#dpkg", "#os", "#python", "#lock"] {
        if !sections.contains_key(section) {
            return Err(SbomError::MissingSection {
                section,
                output: text.chars().take(200).collect(),
            });
        }
    }
    let fields = |l: &str| l.split('\t').map(str::to_string).collect::<Vec<_>>();
    let mut debs: Vec<Deb> = sections["#dpkg"]
        .iter()
        .map(|l| fields(l))
        .filter(|f| f.len() == 3 && !f[0].is_empty() && !f[1].is_empty())
        .map(|f| Deb {
            name: f[0].clone(),
            version: f[1].clone(),
            arch: f[2].clone(),
        })
        .collect();
    debs.sort();
    debs.dedup();
    let os = sections["#os"]
        .first()
        .map(|l| fields(l))
        .filter(|f| f.len() == 2 && !f[0].is_empty())
        .map(|f| (f[0].clone(), f[1].clone()));
    let mut python: Vec<PyDist> = sections["#python"]
        .iter()
        .map(|l| fields(l))
        .filter(|f| f.len() == 2 && !f[0].is_empty())
        .map(|f| PyDist {
            name: f[0].clone(),
            version: f[1].clone(),
        })
        .collect();
    python.sort_by(|a, b| (normalize(&a.name), &a.version).cmp(&(normalize(&b.name), &b.version)));
    // One dist found under two spellings (`PyYAML` and `pyyaml`, two
    // dist-info folders) is one component: its purl is the normalized name.
    python.dedup_by(|a, b| normalize(&a.name) == normalize(&b.name) && a.version == b.version);
    let lock_text = sections["#lock"].join("\n");
    let lock = if lock_text.trim().is_empty() {
        None
    } else {
        Some(LockFile::parse(&lock_text).map_err(|e| SbomError::Lock(e.to_string()))?)
    };
    Ok(Inventory {
        debs,
        os,
        python,
        lock,
    })
}

/// `text` for a purl's name or version: everything but `A-Za-z0-9.-_~`
/// percent-encoded (`1:2.3+dfsg` → `1%3A2.3%2Bdfsg`).
fn purl_part(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A UUID (version 5 layout) from the first 16 bytes of `sha256(text)`, for
/// the serial number: the same image, the same document.
fn serial(text: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(text.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The CUDA libraries torch loads, by the wheel that carries each.
pub const CUDA_WHEELS: &[(&str, &str)] = &[
    ("nvidia-cuda-runtime-cu12", "CUDA runtime (cudart)"),
    ("nvidia-cublas-cu12", "cuBLAS"),
    ("nvidia-cudnn-cu12", "cuDNN"),
    ("nvidia-nccl-cu12", "NCCL"),
];

/// What the SBOM describes besides the inventory.
#[derive(Debug, Clone)]
pub struct ImageFacts<'a> {
    /// The image id (`sha256:…`).
    pub id: &'a str,
    /// The reference it was asked by (`imgctl/cu124:latest`).
    pub reference: &'a str,
    /// Its labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// The CycloneDX 1.5 document of an image.
pub fn cyclonedx(image: &ImageFacts, inv: &Inventory) -> Value {
    let label = |k: &str| image.labels.get(k).cloned();
    let hex = |d: &str| d.trim_start_matches("sha256:").to_string();
    let mut components = Vec::new();
    if let Some(base) = label(labels::BASE) {
        let mut c = json!({
            "type": "container", "bom-ref": "base-image", "name": base,
        });
        if let Some(digest) = label("org.opencontainers.image.base.digest") {
            c["hashes"] = json!([{ "alg": "SHA-256", "content": hex(&digest) }]);
            c["version"] = json!(digest);
        }
        components.push(c);
    }
    let imgctl_version = label(labels::VERSION).unwrap_or_default();
    components.push(json!({
        "type": "application", "bom-ref": "imgctl", "name": "imgctl",
        "version": imgctl_version,
        "description": "installed at /usr/local/bin/imgctl",
    }));
    let distro = inv.os.as_ref().map(|(id, v)| (purl_part(id), purl_part(v)));
    for d in &inv.debs {
        let (ns, q) = match &distro {
            Some((id, v)) => (id.clone(), format!("&distro={id}-{v}")),
            None => ("debian".to_string(), String::new()),
        };
        let purl = format!(
            "pkg:deb/{ns}/{}@{}?arch={}{q}",
            purl_part(&d.name),
            purl_part(&d.version),
            purl_part(&d.arch)
        );
        components.push(json!({
            "type": "library", "bom-ref": purl, "name": d.name, "version": d.version, "purl": purl,
        }));
    }
    let locked = inv.lock.as_ref().map(|l| &l.packages);
    for p in &inv.python {
        let n = normalize(&p.name);
        let purl = format!("pkg:pypi/{}@{}", purl_part(&n), purl_part(&p.version));
        let mut c = json!({
            "type": "library", "bom-ref": purl, "name": p.name, "version": p.version, "purl": purl,
        });
        if let Some(l) = locked
            .and_then(|m| m.get(&n))
            .filter(|l| l.version == p.version)
        {
            c["hashes"] = Value::Array(
                l.hashes
                    .iter()
                    .map(
                        |h| json!({ "alg": "SHA-256", "content": h.trim_start_matches("sha256:") }),
                    )
                    .collect(),
            );
            c["properties"] = json!([{ "name": "imgctl:pip-lock", "value": "the sha256 of every file the image's pip lock allowed for this version; pip installed one of them and checked its hash" }]);
        }
        components.push(c);
    }
    for (wheel, what) in CUDA_WHEELS {
        if let Some(p) = inv.python.iter().find(|p| normalize(&p.name) == *wheel) {
            components.push(json!({
                "type": "library", "bom-ref": format!("cuda:{wheel}"), "name": what,
                "version": p.version, "group": "nvidia",
                "description": format!("loaded by torch from the {wheel} wheel"),
            }));
        }
    }
    // Every bom-ref once (CycloneDX requires it): the first stands.
    let mut seen = std::collections::BTreeSet::new();
    components.retain(|c| seen.insert(c["bom-ref"].as_str().unwrap_or_default().to_string()));
    let mut properties: Vec<Value> = image
        .labels
        .iter()
        .filter(|(k, _)| k.starts_with("io.imgctl.") && !k.starts_with(labels::PIP_PREFIX))
        .map(|(k, v)| json!({ "name": k, "value": v }))
        .collect();
    properties.sort_by_key(|p| p["name"].as_str().unwrap_or_default().to_string());
    let mut doc = json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": serial(image.id),
        "version": 1,
        "metadata": {
            "tools": { "components": [{ "type": "application", "name": "imgctl", "version": env!("CARGO_PKG_VERSION") }] },
            "component": {
                "type": "container", "bom-ref": "image", "name": image.reference,
                "version": image.id,
                "hashes": [{ "alg": "SHA-256", "content": hex(image.id) }],
                "properties": properties,
            },
        },
        "components": components,
    });
    // The image's `created` label when it is an RFC 3339 time (as
    // CycloneDX's dateTime needs); a free-text label is left out, never
    // copied into an invalid document.
    if let Some(t) = label("org.opencontainers.image.created").and_then(|t| timestamp(&t)) {
        doc["metadata"]["timestamp"] = json!(t);
    }
    doc
}

/// `text` as an RFC 3339 UTC time to the second (`2026-12-03T00:00:00Z`),
/// when it is one.
fn timestamp(text: &str) -> Option<String> {
    let t = humantime::parse_rfc3339(text.trim()).ok()?;
    Some(humantime::format_rfc3339_seconds(t).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "#dpkg\nbash\t5.2.15-2+b2\tamd64\nlibc6\t2.36-9+deb12u4\tamd64\ntzdata\t2024a-0+deb12u1\tall\n#os\ndebian\t12\n#python\ntorch\t2.7.0\nnvidia-cudnn-cu12\t9.5.1.17\nMarkupSafe\t3.0.2\n#lock\n";

    #[test]
    fn the_inventory_reads_every_section_and_sorts() {
        let inv = parse_inventory(OUTPUT).unwrap();
        assert_eq!(inv.debs.len(), 3);
        assert_eq!(inv.os, Some(("debian".into(), "12".into())));
        let names: Vec<_> = inv.python.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["MarkupSafe", "nvidia-cudnn-cu12", "torch"]);
        assert!(inv.lock.is_none());
        assert!(matches!(
            parse_inventory("#dpkg\n#os\n"),
            Err(SbomError::MissingSection {
                section: "#python",
                ..
            })
        ));
    }

    #[test]
    fn the_document_is_the_same_for_the_same_image_and_names_every_package() {
        let inv = parse_inventory(OUTPUT).unwrap();
        let labels: BTreeMap<String, String> = [
            (labels::BASE, "debian:bookworm"),
            ("org.opencontainers.image.base.digest", "sha256:ab12"),
            (labels::VERSION, "0.1.0"),
            ("org.opencontainers.image.created", "2026-12-03T00:00:00Z"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let facts = ImageFacts {
            id: "sha256:ffee",
            reference: "imgctl/cu124:latest",
            labels: &labels,
        };
        let a = serde_json::to_string(&cyclonedx(&facts, &inv)).unwrap();
        assert_eq!(a, serde_json::to_string(&cyclonedx(&facts, &inv)).unwrap());
        for want in [
            "pkg:deb/debian/bash@5.2.15-2%2Bb2?arch=amd64&distro=debian-12",
            "pkg:pypi/markupsafe@3.0.2",
            "\"name\":\"cuDNN\"",
            "\"timestamp\":\"2026-12-03T00:00:00Z\"",
            "\"content\":\"ab12\"",
        ] {
            assert!(a.contains(want), "{want}: {a}");
        }
        let other = ImageFacts {
            id: "sha256:ffef",
            ..facts
        };
        assert_ne!(
            cyclonedx(&other, &inv)["serialNumber"],
            cyclonedx(&facts, &inv)["serialNumber"]
        );
    }

    #[test]
    fn a_free_text_created_label_and_two_spellings_keep_the_document_valid() {
        let text =
            "#dpkg\n#os\ndebian\t12\n#python\nPyYAML\t6.0.2\npyyaml\t6.0.2\nPYYAML\t6.0.2\n#lock\n";
        let inv = parse_inventory(text).unwrap();
        assert_eq!(inv.python.len(), 1, "{:?}", inv.python);
        let mut labels = BTreeMap::new();
        labels.insert(
            "org.opencontainers.image.created".to_string(),
            "yesterday at noon".to_string(),
        );
        let image = ImageFacts {
            id: "sha256:00",
            reference: "x:1",
            labels: &labels,
        };
        let doc = cyclonedx(&image, &inv);
        assert!(doc["metadata"].get("timestamp").is_none(), "{doc}");
        let refs: Vec<_> = doc["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["bom-ref"].as_str().unwrap().to_string())
            .collect();
        let unique: std::collections::BTreeSet<_> = refs.iter().collect();
        assert_eq!(refs.len(), unique.len(), "{refs:?}");
        assert_eq!(
            timestamp("2026-12-03T00:00:00Z").as_deref(),
            Some("2026-12-03T00:00:00Z")
        );
        assert_eq!(
            timestamp("2026-12-03T00:00:00.5Z").as_deref(),
            Some("2026-12-03T00:00:00Z")
        );
        assert_eq!(timestamp("yesterday at noon"), None);
        assert_eq!(timestamp("2026-13-03T00:00:00Z"), None);
    }

    #[test]
    fn names_normalize_as_pep_503_says() {
        assert_eq!(normalize("MarkupSafe"), "markupsafe");
        assert_eq!(
            normalize("nvidia_cuda.runtime--cu12"),
            "nvidia-cuda-runtime-cu12"
        );
    }
}
