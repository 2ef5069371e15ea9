//! The platform a lock is resolved for: Linux on [`ARCH`] with the base
//! image's glibc, judged from the base image's name, and its name for uv's
//! resolver (`x86_64-manylinux_2_35`). It knows nothing of the lock file.
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

/// The glibc minors uv's `--python-platform x86_64-manylinux_2_N` knows
/// (uv 0.13.8 `uv pip compile --help`: manylinux_2_17, 2_28, 2_31 … 2_40).
const UV_MANYLINUX_GLIBC: &[u32] = &[17, 28, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40];

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

    /// uv's `--python-platform` for it: `x86_64-manylinux_2_N` with N the
    /// newest glibc minor uv knows that is not newer than the base's, so that uv
    /// admits the manylinux wheels (PEP 600: manylinux_2_N runs on glibc 2.N and
    /// newer) the image's pip admits; `None` for a glibc older than any uv knows.
    pub fn uv_platform(&self) -> Option<String> {
        UV_MANYLINUX_GLIBC
            .iter()
            .rev()
            .find(|&&n| n <= self.glibc)
            .map(|n| format!("{ARCH}-manylinux_2_{n}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_uv_platform_follows_the_base_glibc() {
        let p = Platform::of_base("nvidia/cuda:12.4.1-base-ubuntu22.04");
        assert_eq!(p.glibc, 35);
        assert_eq!(p.uv_platform().unwrap(), "x86_64-manylinux_2_35");
        let bookworm = Platform::of_base("debian:bookworm-slim");
        assert_eq!(bookworm.uv_platform().unwrap(), "x86_64-manylinux_2_36");
        assert_eq!(
            Platform::of_base("nvidia/cuda:12.8.1-base-ubuntu24.04")
                .uv_platform()
                .unwrap(),
            "x86_64-manylinux_2_39"
        );
        // Unknown distribution: the glibc torch's wheels need.
        let other = Platform::of_base("my/base:1");
        assert_eq!(other.glibc, FALLBACK_GLIBC);
        assert_eq!(other.uv_platform().unwrap(), "x86_64-manylinux_2_28");
        // Between two that uv knows: the older one; newer than any: the newest.
        let mid = Platform {
            glibc: 30,
            distro: None,
        };
        assert_eq!(mid.uv_platform().unwrap(), "x86_64-manylinux_2_28");
        let new = Platform {
            glibc: 42,
            distro: None,
        };
        assert_eq!(new.uv_platform().unwrap(), "x86_64-manylinux_2_40");
        assert_eq!(
            Platform {
                glibc: 12,
                distro: None
            }
            .uv_platform(),
            None
        );
        // Every distribution in the table has one.
        for (d, glibc, _) in DISTRO_GLIBC {
            let p = Platform {
                glibc: *glibc,
                distro: Some(d),
            };
            assert!(
                p.uv_platform().unwrap().ends_with(&format!("_2_{glibc}")),
                "{d}"
            );
        }
    }
}
