//! Size limits on a spec, checked before its fields: bracket nesting (scanned
//! before the YAML parser sees the text) and the length of every string and
//! joined list, against what Docker reads on one Dockerfile line.
//!
//! The field checks live in [`super::validate`]; this module only measures.
use serde_yaml::Value;

use super::walker::{join, Walker};

/// The deepest nesting of flow collections (`[` and `{`) a spec may have.
/// libyaml's scanner is quadratic in the nesting depth (50 000 brackets take
/// seconds to minutes of CPU before its own recursion limit answers), so
/// [`super::validate::validate`] measures the depth with [`flow_depth_exceeds`] before parsing.
pub const MAX_NESTING: usize = 64;

/// The longest string a spec may hold (16 KiB). Docker reads a Dockerfile
/// line of at most 64 KiB, and a spec's values are written on one line each,
/// quoted (which can double their length) and next to other text.
pub const MAX_STRING_BYTES: usize = 16 * 1024;

/// The longest a list may be once joined onto one Dockerfile line (`apt`,
/// `ports`): half of Docker's 64 KiB line limit.
pub const MAX_JOINED_BYTES: usize = 32 * 1024;

/// Refuses YAML (any imgctl reads: training and model configs) whose
/// brackets nest deeper than a spec's may ([`MAX_NESTING`]) before libyaml sees it: its
/// scanner is quadratic in the depth (100,000 brackets cost 27 s of CPU).
pub fn nesting_ok(text: &str) -> Result<(), String> {
    match flow_depth_exceeds(text, MAX_NESTING) {
        Some((line, column)) => Err(format!(
            "line {line} column {column}: brackets nest deeper than {MAX_NESTING} levels"
        )),
        None => Ok(()),
    }
}

/// Where (1-based line and column) the nesting of `[`/`{` in `text` first
/// goes deeper than `max`, counting only brackets outside quoted scalars and
/// comments. A cheap linear pre-scan: it may over-count brackets inside plain
/// scalars, never under-count what the YAML parser will nest.
pub fn flow_depth_exceeds(text: &str, max: usize) -> Option<(usize, usize)> {
    #[derive(PartialEq)]
    enum State {
        Plain,
        Single,
        Double,
        DoubleEscape,
        Comment,
    }
    let mut state = State::Plain;
    let mut depth = 0usize;
    let (mut line, mut col) = (1usize, 0usize);
    // Whether the previous character ends a token, so that a quote or `#` here starts one.
    let mut boundary = true;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        col += 1;
        if c == '\n' {
            line += 1;
            col = 0;
        }
        match state {
            State::Plain => match c {
                '[' | '{' => {
                    depth += 1;
                    if depth > max {
                        return Some((line, col));
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                '\'' if boundary => state = State::Single,
                '"' if boundary => state = State::Double,
                '#' if boundary => state = State::Comment,
                _ => {}
            },
            State::Single => {
                if c == '\'' {
                    if chars.peek() == Some(&'\'') {
                        chars.next();
                        col += 1;
                    } else {
                        state = State::Plain;
                    }
                }
            }
            State::Double => match c {
                '\\' => state = State::DoubleEscape,
                '"' => state = State::Plain,
                _ => {}
            },
            State::DoubleEscape => state = State::Double,
            State::Comment => {
                if c == '\n' {
                    state = State::Plain;
                }
            }
        }
        boundary = c.is_whitespace() || "[]{},:-?".contains(c);
    }
    None
}

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
