//! Version strings shared by the pins ([`super::pins`]) and the torch checks
//! ([`super::torch`]): comparing a found version with a pin, and reading the
//! version of a torch package from its files.
//!
//! A leaf: it reads files only and imports nothing from `verify`, so pins and
//! torch can both use it without depending on each other. It judges nothing.
use std::path::Path;

/// torch's version and the CUDA version its build targets, from the package's
/// `version.py` (pip wheel: `__version__ = '2.7.0+cu126'`, `cuda = '12.6'`) or
/// a standalone libtorch's `build-version` file.
pub fn torch_version_info(torch_dir: &Path) -> Option<(String, Option<String>)> {
    if let Ok(text) = std::fs::read_to_string(torch_dir.join("version.py")) {
        let field = |key: &str| {
            text.lines().find_map(|l| {
                let l = l.trim();
                let rest = l.strip_prefix(key)?;
                let rest = rest.trim_start_matches(|c: char| {
                    c == ' ' || c == ':' || c.is_alphabetic() || c == '[' || c == ']'
                });
                let rest = rest.trim_start_matches([' ', '=']).trim();
                let v = rest.trim_matches(|c| c == '\'' || c == '"');
                (v != "None" && !v.is_empty()).then(|| v.to_string())
            })
        };
        if let Some(v) = field("__version__") {
            return Some((v, field("cuda")));
        }
    }
    let text = std::fs::read_to_string(torch_dir.join("build-version")).ok()?;
    let v = text.trim().to_string();
    let cuda = v.split_once("+cu").map(|(_, c)| {
        // `cu126` → `12.6`, `cu118` → `11.8`
        let (major, minor) = c.split_at(c.len().saturating_sub(1));
        format!("{major}.{minor}")
    });
    Some((v, cuda))
}

/// `2.7.0+cu126` → `2.7.0`.
pub fn strip_local(v: &str) -> &str {
    v.split('+').next().unwrap_or(v)
}

/// Whether `found` agrees with `pin` on every component both carry
/// (`9.5.1` from cudnnGetVersion agrees with the pin `9.5.1.17`; `9.1.0` does not).
pub fn version_matches(found: &str, pin: &str) -> bool {
    let f: Vec<&str> = strip_local(found).split('.').collect();
    let p: Vec<&str> = strip_local(pin).split('.').collect();
    let n = f.len().min(p.len());
    n > 0 && f[..n] == p[..n]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_prefix_matching() {
        assert!(version_matches("9.5.1", "9.5.1.17"));
        assert!(version_matches("2.7.0+cu126", "2.7.0"));
        assert!(!version_matches("9.1.0", "9.5.1.17"));
        assert!(!version_matches("2.21.5", "2.26.2"));
        assert!(version_matches("12.6", "12.6.77"));
    }

    #[test]
    fn version_py_parsing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("version.py"),
            "__version__ = '2.7.0+cu126'\ndebug = False\ncuda: Optional[str] = '12.6'\n",
        )
        .unwrap();
        assert_eq!(
            torch_version_info(dir.path()),
            Some(("2.7.0+cu126".to_string(), Some("12.6".to_string())))
        );
        let cpu = tempfile::tempdir().unwrap();
        std::fs::write(
            cpu.path().join("version.py"),
            "__version__ = '2.7.0+cpu'\ncuda: Optional[str] = None\n",
        )
        .unwrap();
        assert_eq!(
            torch_version_info(cpu.path()),
            Some(("2.7.0+cpu".to_string(), None))
        );
        let standalone = tempfile::tempdir().unwrap();
        std::fs::write(standalone.path().join("build-version"), "2.7.0+cu128\n").unwrap();
        assert_eq!(
            torch_version_info(standalone.path()),
            Some(("2.7.0+cu128".to_string(), Some("12.8".to_string())))
        );
    }
}
