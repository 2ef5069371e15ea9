//! Which GPUs to use: [`GpuSelection`], the one grammar of a GPU selection,
//! and its errors ([`GpuSelectionError`]).
//!
//! The grammar is the union of what the training launcher and docker take:
//! - `all`: every visible GPU;
//! - `N` (a bare number, 1 or more): any N GPUs;
//! - a comma-separated list of devices, each a device index (`0,2,5`) or a
//!   `GPU-…`/`MIG-…` UUID as `nvidia-smi -L` prints it; a list with one index
//!   is written with a trailing comma (`3,`) or docker's `device=3` (a bare
//!   `3` is a count); `device=` may prefix any list (`device=0,2`, also
//!   quoted: `device="0,2"`); a single UUID needs neither.
//!
//! Each device once, no empty entry but one trailing comma. [`fmt::Display`]
//! writes the canonical spelling, which parses back to the same selection
//! (`device=3` for one index). What a caller can honour is the caller's to
//! check: docker passes UUIDs on to the engine; local training ranks take
//! indices only. This module names no flag.
use std::fmt;
use std::str::FromStr;

/// One device of a GPU list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GpuId {
    /// A device index, counted from 0 among the visible devices.
    Index(u32),
    /// A `GPU-…` or `MIG-…` UUID.
    Uuid(String),
}

impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuId::Index(i) => write!(f, "{i}"),
            GpuId::Uuid(u) => f.write_str(u),
        }
    }
}

/// Which GPUs to use, as parsed from a selection (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSelection {
    /// Every visible GPU.
    All,
    /// Any N GPUs (at least 1): the first N for local ranks.
    Count(u32),
    /// These devices, in this order: at least one, each once.
    Devices(Vec<GpuId>),
}

/// A GPU selection that does not parse (all usage errors; the one line names
/// the text and the bad part).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuSelectionError {
    /// Nothing (or only blanks) given.
    #[error("the GPU selection is empty")]
    Empty,
    /// A count of 0.
    #[error("the GPU selection 0 asks for no GPU")]
    Zero,
    /// One word that is neither `all`, a count nor a UUID.
    #[error("GPU selection {text:?} is not `all`, a count or a list of device ids")]
    NotUnderstood {
        /// The selection as given (trimmed).
        text: String,
    },
    /// An empty entry in a list (`0,,2`, a leading comma).
    #[error("GPU selection {text:?} is a malformed GPU list: entry {entry} is empty")]
    EmptyEntry {
        /// The selection as given (trimmed).
        text: String,
        /// The entry, counted from 1.
        entry: usize,
    },
    /// A list entry that is neither an index nor a UUID.
    #[error("GPU selection {text:?} is a malformed GPU list: {part:?} is not a device index or a GPU-/MIG- UUID")]
    BadEntry {
        /// The selection as given (trimmed).
        text: String,
        /// The entry.
        part: String,
    },
    /// A list naming a device twice.
    #[error("GPU selection {text:?} lists GPU {device} twice")]
    Twice {
        /// The selection as given (trimmed).
        text: String,
        /// The device named twice.
        device: GpuId,
    },
}

/// The longest UUID taken: `MIG-GPU-<36>/<gi>/<ci>`, with room to spare.
const UUID_MAX: usize = 64;

/// Whether `p` is a UUID as NVIDIA spells them: `GPU-` or `MIG-` and hex
/// digits and dashes (a whole UUID, or a prefix of one as CUDA takes in
/// `CUDA_VISIBLE_DEVICES`), or the older `MIG-GPU-<uuid>/<gi>/<ci>`. Only
/// these characters: the text goes on to the engine and to the ranks'
/// environment (#50 low: `GPU-x;rm` passed the prefix check).
fn is_uuid(p: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    if p.len() > UUID_MAX {
        return false;
    }
    if let Some(rest) = p.strip_prefix("MIG-GPU-") {
        let mut parts = rest.split('/');
        let (Some(uuid), Some(gi), Some(ci), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        return hex(uuid) && digits(gi) && digits(ci);
    }
    match p.strip_prefix("GPU-").or_else(|| p.strip_prefix("MIG-")) {
        Some(rest) => hex(rest) && rest.bytes().any(|b| b.is_ascii_hexdigit()),
        None => false,
    }
}

/// A device index: ASCII digits only (no sign), within `u32`.
fn index(p: &str) -> Option<u32> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse().ok()
}

impl GpuSelection {
    /// Parses a selection (see the module docs); the error names the bad part.
    pub fn parse(s: &str) -> Result<Self, GpuSelectionError> {
        let text = s.trim();
        if text.is_empty() {
            return Err(GpuSelectionError::Empty);
        }
        if text.eq_ignore_ascii_case("all") {
            return Ok(GpuSelection::All);
        }
        // `device=…` (docker's spelling) is always a list: `device=0` is GPU 0.
        let (body, list) = match text.strip_prefix("device=") {
            Some(rest) => (rest.trim().trim_matches('"'), true),
            None => (text, text.contains(',')),
        };
        if !list {
            if let Some(n) = index(body) {
                return if n == 0 {
                    Err(GpuSelectionError::Zero)
                } else {
                    Ok(GpuSelection::Count(n))
                };
            }
            if !is_uuid(body) {
                return Err(GpuSelectionError::NotUnderstood { text: text.into() });
            }
        }
        let parts: Vec<&str> = body.split(',').collect();
        let mut ids: Vec<GpuId> = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            let p = part.trim();
            if p.is_empty() {
                // One trailing comma makes a list of what precedes it (`3,`).
                if i + 1 == parts.len() && !ids.is_empty() {
                    continue;
                }
                return Err(GpuSelectionError::EmptyEntry {
                    text: text.into(),
                    entry: i + 1,
                });
            }
            let id = match index(p) {
                Some(n) => GpuId::Index(n),
                None if is_uuid(p) => GpuId::Uuid(p.into()),
                None => {
                    return Err(GpuSelectionError::BadEntry {
                        text: text.into(),
                        part: p.into(),
                    })
                }
            };
            if ids.contains(&id) {
                return Err(GpuSelectionError::Twice {
                    text: text.into(),
                    device: id,
                });
            }
            ids.push(id);
        }
        Ok(GpuSelection::Devices(ids))
    }
}

impl FromStr for GpuSelection {
    type Err = GpuSelectionError;
    fn from_str(s: &str) -> Result<Self, GpuSelectionError> {
        Self::parse(s)
    }
}

impl fmt::Display for GpuSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuSelection::All => f.write_str("all"),
            GpuSelection::Count(n) => write!(f, "{n}"),
            // A lone index would read as a count.
            GpuSelection::Devices(ids) if matches!(ids[..], [GpuId::Index(_)]) => {
                write!(f, "device={}", ids[0])
            }
            GpuSelection::Devices(ids) => {
                let parts: Vec<String> = ids.iter().map(GpuId::to_string).collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use GpuSelectionError as E;

    fn devices(ids: &[&str]) -> GpuSelection {
        GpuSelection::Devices(
            ids.iter()
                .map(|s| match s.parse() {
                    Ok(i) => GpuId::Index(i),
                    Err(_) => GpuId::Uuid(s.to_string()),
                })
                .collect(),
        )
    }

    #[test]
    fn a_uuid_is_hex_digits_and_dashes_after_its_prefix() {
        for good in [
            "GPU-6e6a7a7d-1c2b-4f3e-9a8b-0c1d2e3f4a5b",
            "GPU-6e6a7a7d",
            "MIG-0c1d2e3f-4a5b-5c6d-8e7f-112233445566",
            "MIG-GPU-6e6a7a7d-1c2b-4f3e-9a8b-0c1d2e3f4a5b/1/0",
        ] {
            assert!(is_uuid(good), "{good}");
            assert_eq!(
                GpuSelection::parse(good).unwrap(),
                GpuSelection::Devices(vec![GpuId::Uuid(good.into())])
            );
        }
        for bad in [
            "GPU-x;rm -rf ~",
            "GPU-6e6a 7a7d",
            "GPU--",
            "GPU-g000",
            "MIG-GPU-6e6a7a7d/1",
            "MIG-GPU-6e6a7a7d/1/x",
            "GPU-6e6a\n7a7d",
            &format!("GPU-{}", "a".repeat(70)),
        ] {
            assert!(!is_uuid(bad), "{bad:?}");
            assert!(GpuSelection::parse(bad).is_err(), "{bad:?}");
            assert!(GpuSelection::parse(&format!("0,{bad}")).is_err(), "{bad:?}");
        }
    }

    /// What the launcher's and docker's parsers each took, read alike.
    #[test]
    fn the_union_of_both_grammars() {
        let ok = |s: &str| GpuSelection::parse(s).unwrap();
        assert_eq!(ok("all"), GpuSelection::All);
        assert_eq!(ok(" ALL "), GpuSelection::All);
        assert_eq!(ok("4"), GpuSelection::Count(4));
        assert_eq!(ok("0,2,5"), devices(&["0", "2", "5"]));
        assert_eq!(ok("0, 2"), devices(&["0", "2"]));
        assert_eq!(ok("3,"), devices(&["3"]));
        assert_eq!(ok("device=0"), devices(&["0"]));
        assert_eq!(ok("device=0,2"), devices(&["0", "2"]));
        assert_eq!(ok("device=\"0,2\""), devices(&["0", "2"]));
        assert_eq!(ok("GPU-8f3c0000-1111"), devices(&["GPU-8f3c0000-1111"]));
        assert_eq!(ok("MIG-a,1"), devices(&["MIG-a", "1"]));
    }

    #[test]
    fn errors_name_the_bad_part() {
        let err = |s: &str| GpuSelection::parse(s).unwrap_err();
        assert_eq!(err(""), E::Empty);
        assert_eq!(err("  "), E::Empty);
        assert_eq!(err("0"), E::Zero);
        for s in ["two", "-1", "+2", "GPU-", "device"] {
            assert_eq!(err(s), E::NotUnderstood { text: s.into() }, "{s}");
        }
        assert_eq!(
            err("0,,1"),
            E::EmptyEntry {
                text: "0,,1".into(),
                entry: 2
            }
        );
        assert_eq!(
            err(",3"),
            E::EmptyEntry {
                text: ",3".into(),
                entry: 1
            }
        );
        assert!(matches!(err("device="), E::EmptyEntry { entry: 1, .. }));
        assert!(matches!(err("3,,"), E::EmptyEntry { entry: 2, .. }));
        assert_eq!(
            err("0,x").to_string(),
            "GPU selection \"0,x\" is a malformed GPU list: \"x\" is not a device index or a GPU-/MIG- UUID"
        );
        assert!(matches!(err("0,-1"), E::BadEntry { part, .. } if part == "-1"));
        assert!(matches!(err("0,99999999999"), E::BadEntry { .. }));
        assert_eq!(
            err("0,1,0"),
            E::Twice {
                text: "0,1,0".into(),
                device: GpuId::Index(0)
            }
        );
        assert_eq!(
            err("0,1,0").to_string(),
            "GPU selection \"0,1,0\" lists GPU 0 twice"
        );
        assert!(matches!(err("GPU-a,GPU-a"), E::Twice { .. }));
    }

    #[test]
    fn display_is_canonical() {
        let canon = |s: &str| GpuSelection::parse(s).unwrap().to_string();
        assert_eq!(canon(" all"), "all");
        assert_eq!(canon("2"), "2");
        assert_eq!(canon("3,"), "device=3");
        assert_eq!(canon("device=0, 2"), "0,2");
        assert_eq!(canon("GPU-a"), "GPU-a");
    }

    fn selection() -> impl Strategy<Value = GpuSelection> {
        let id = prop_oneof![
            (0u32..64).prop_map(GpuId::Index),
            "(GPU|MIG)-[0-9a-f]{1,8}(-[0-9a-f]{1,4}){0,2}".prop_map(GpuId::Uuid),
        ];
        prop_oneof![
            Just(GpuSelection::All),
            (1u32..=u32::MAX).prop_map(GpuSelection::Count),
            proptest::collection::vec(id, 1..6).prop_filter_map("distinct devices", |ids| {
                let mut seen = std::collections::HashSet::new();
                ids.iter()
                    .all(|i| seen.insert(i.clone()))
                    .then_some(GpuSelection::Devices(ids))
            }),
        ]
    }

    proptest! {
        /// Whatever selection Display writes parses back to itself.
        #[test]
        fn display_round_trips(sel in selection()) {
            let text = sel.to_string();
            prop_assert_eq!(GpuSelection::parse(&text), Ok(sel.clone()), "{}", text);
        }

        /// Any text: a selection or an error, never a panic; what parses
        /// prints as text that parses to the same selection.
        #[test]
        fn any_text_parses_or_errs(text in "[ 0-9a-zA-Z,=\"+-]{0,16}") {
            if let Ok(sel) = GpuSelection::parse(&text) {
                prop_assert_eq!(GpuSelection::parse(&sel.to_string()), Ok(sel));
            }
        }
    }
}
