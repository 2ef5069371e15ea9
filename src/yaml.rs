//! What every YAML text imgctl reads passes before the parser sees it
//! (specs, training and model configs, policies): a size cap and a cap on
//! bracket nesting. A leaf of the base, so that each wing that reads YAML
//! guards it alike without importing another wing.
//!
//! Part: the base (`docs/architecture.md`).

/// The largest YAML file imgctl reads (256 KiB): a spec, a training or
/// model config; the bundled specs are under 4 KiB.
pub const MAX_YAML_BYTES: u64 = 256 * 1024;

/// The deepest nesting of flow collections (`[` and `{`) a spec may have.
/// libyaml's scanner is quadratic in the nesting depth (50 000 brackets take
/// seconds to minutes of CPU before its own recursion limit answers), so
/// a spec's validation and every other YAML reader measure the depth with [`flow_depth_exceeds`] before parsing.
pub const MAX_NESTING: usize = 64;

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
