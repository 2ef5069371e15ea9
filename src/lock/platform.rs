//! The platform a lock is resolved for: Linux on [`ARCH`] with the base
//! image's glibc, judged from the base image's name, and the wheel tags pip
//! must accept there. It knows nothing of the lock file or of pip.
use super::ARCH;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
