//! Size limits on a spec, checked before its fields: bracket nesting (scanned
//! before the YAML parser sees the text) and the length of every string and
//! joined list, against what Docker reads on one Dockerfile line.
//!
//! The field checks live in [`super::validate`]; this module only measures.
use serde_yaml::Value;

use super::walker::{join, Walker};
pub use crate::yaml::{flow_depth_exceeds, nesting_ok, MAX_NESTING};

/// The longest string a spec may hold (16 KiB). Docker reads a Dockerfile
/// line of at most 64 KiB, and a spec's values are written on one line each,
/// quoted (which can double their length) and next to other text.
pub const MAX_STRING_BYTES: usize = 16 * 1024;

/// The longest a list may be once joined onto one Dockerfile line (`apt`,
/// `ports`): half of Docker's 64 KiB line limit.
pub const MAX_JOINED_BYTES: usize = 32 * 1024;

/// Every string (key or value) in `value` longer than [`MAX_STRING_BYTES`],
/// as a problem at its field path.
pub(super) fn long_strings(w: &mut Walker, value: &Value, path: &str) {
    let too_long = |s: &str| s.len() > MAX_STRING_BYTES;
    let problem = |w: &mut Walker, path: &str, len: usize| {
        w.problem(
            if path.is_empty() { "(spec)" } else { path },
            format!(
                "is {len} bytes long; at most {MAX_STRING_BYTES} (Docker reads a Dockerfile line of at most 64 KiB, and this value is written on one)"
            ),
            None,
        )
    };
    match value {
        Value::String(s) if too_long(s) => problem(w, path, s.len()),
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                long_strings(w, item, &format!("{path}[{i}]"));
            }
        }
        Value::Mapping(map) => {
            for (k, v) in map {
                match k.as_str() {
                    Some(key) if too_long(key) => {
                        problem(w, &join(path, "(a key)"), key.len());
                    }
                    Some(key) => long_strings(w, v, &join(path, key)),
                    None => long_strings(w, v, path),
                }
            }
        }
        Value::Tagged(t) => long_strings(w, &t.value, path),
        _ => {}
    }
}
