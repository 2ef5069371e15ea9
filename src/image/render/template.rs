//! Templates and escaping: the strict minijinja rendering, the Dockerfile
//! string quoting (`dq`), the word wrap of notes, and the one choke point that
//! refuses control characters anywhere in the context before rendering.
//!
//! It knows the context only as serialized data (field paths); it reads no
//! file and names no flag.
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

use super::error::RenderError;

/// The one choke point between input and the Dockerfile text: every string
/// the template can reach (the whole context, serialized as the template sees
/// it) must be free of control characters. A newline in a spec's path, its
/// `lock:` value, a label or a name would otherwise start a new Dockerfile
/// instruction (a `RUN` as root); CR, NUL, escape sequences and the rest have
/// no business in a Dockerfile either. Refused naming the field and the
/// character ([`RenderError::ControlCharacter`]).
pub(super) fn refuse_control_characters<S: Serialize>(ctx: &S) -> Result<(), RenderError> {
    let value =
        serde_json::to_value(ctx).map_err(|error| RenderError::ContextUnserializable { error })?;
    match find_control(&value, &mut Vec::new()) {
        None => Ok(()),
        Some((path, ch)) => Err(RenderError::ControlCharacter { path, ch }),
    }
}

/// The first control character in any string of `value`: (the path to it, the character).
fn find_control(value: &serde_json::Value, path: &mut Vec<String>) -> Option<(Vec<String>, char)> {
    use serde_json::Value;
    match value {
        Value::String(s) => s
            .chars()
            .find(|c| c.is_control())
            .map(|c| (path.clone(), c)),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            path.push(i.to_string());
            let found = find_control(v, path);
            path.pop();
            found
        }),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            path.push(k.clone());
            let found = find_control(v, path);
            path.pop();
            found
        }),
        _ => None,
    }
}

/// Renders `source` with `ctx` in strict mode; the error names the template,
/// the line and what was undefined or wrong.
pub fn render_template<S: Serialize>(name: &str, source: &str, ctx: &S) -> Result<String, String> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(true);
    env.add_filter("dq", |value: String| docker_quote(&value));
    let describe = |e: minijinja::Error| {
        let line = e.line().map(|l| format!(" line {l}")).unwrap_or_default();
        let detail = e.detail().map(|d| format!(": {d}")).unwrap_or_default();
        let text = e
            .line()
            .and_then(|l| source.lines().nth(l.saturating_sub(1)))
            .map(|t| format!(" in `{}`", t.trim()))
            .unwrap_or_default();
        format!("template {name}{line}: {}{detail}{text}", e.kind())
    };
    env.add_template(name, source).map_err(describe)?;
    let tmpl = env.get_template(name).map_err(describe)?;
    tmpl.render(ctx).map_err(describe)
}

/// A Dockerfile double-quoted string (LABEL values): `"` and `\` escaped, and
/// `$` too, because LABEL substitutes variables.
pub fn docker_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Greedy word wrap to `width` columns.
pub(super) fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_and_wrapping() {
        assert_eq!(docker_quote("a \"b\" $c \\"), r#""a \"b\" \$c \\""#);
        assert_eq!(wrap("aa bb cc", 5), vec!["aa bb", "cc"]);
    }

    #[test]
    fn strict_undefined_is_an_error() {
        #[derive(Serialize)]
        struct C {
            a: u8,
        }
        assert_eq!(render_template("t", "{{ a }}", &C { a: 1 }).unwrap(), "1");
        let err = render_template("t", "x\n{{ nope }}", &C { a: 1 }).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("undefined"), "{err}");
    }
}
