//! What a lock depends on ([`LockInputs`]: torch, the pins, Python, platform
//! and indexes of a spec) in canonical form, and their digest, which changes
//! when any of them does and never with the YAML's layout. It reads a
//! validated spec; it neither reads files nor runs pip.
use super::{Platform, LOCK_VERSION, PIP_INDEX};
use crate::image::specs::normalize_name;
use crate::image::specs::{compat, ImageSpec};

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

/// sha256 (hex) of the inputs `lines` under the format's first line.
pub(super) fn digest_of_lines(lines: &[(String, String)]) -> String {
    let mut text = format!("imgctl pip lock v{LOCK_VERSION}\n");
    for (k, v) in lines {
        text.push_str(&format!("{k} {v}\n"));
    }
    crate::image::specs::sha256_hex(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::lock::testing::inputs;
    use crate::image::lock::testing::spec_text;

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
}
