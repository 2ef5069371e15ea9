//! The YAML walker behind spec validation: the [`Problem`] it records (one
//! line each, control characters escaped), the mapping check that reports
//! unknown keys with a did-you-mean and missing required keys, and the typed
//! getters for strings and lists.
//!
//! It knows no field of the schema: [`super::validate`] says which keys a
//! mapping allows and what each value must be. No I/O.
use std::collections::BTreeMap;

use serde_yaml::Value;

/// One thing wrong with a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted field path (`torch.variant`, `pip[2]`, `(file)` for syntax errors).
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// The valid choices, when there is a short list of them.
    pub valid: Option<String>,
    /// What the message points at on the command line, when it does
    /// (`message` then says it without naming a flag or a command).
    pub mention: Option<Mention>,
}

/// A problem whose remedy is on the command line. Core words it without a
/// flag or a command name; `commands/` words it with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mention {
    /// `template` in a bundled spec: only a spec file of the user's own may
    /// name a template.
    TemplateNeedsSpecFile,
    /// A `lock` path in a bundled spec: only a spec file of the user's own may
    /// name a lock file.
    LockNeedsSpecFile,
    /// A `lock` path that does not end in `.lock`: lock files are written by
    /// the lock command.
    LockNotLockFile {
        /// The path as written (control characters escaped).
        value: String,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)?;
        if let Some(v) = &self.valid {
            write!(f, " (valid: {v})")?;
        }
        Ok(())
    }
}

/// Collects problems while walking the YAML.
#[derive(Default)]
pub(super) struct Walker {
    pub(super) problems: Vec<Problem>,
}

impl Walker {
    /// Records a problem. Values from the spec that the path or message quote
    /// may hold newlines or escape sequences: they are written escaped, so each
    /// problem stays one line of plain text.
    pub(super) fn problem(
        &mut self,
        path: &str,
        message: impl Into<String>,
        valid: Option<String>,
    ) {
        self.push(path, message.into(), valid, None);
    }

    /// Records a problem whose remedy is on the command line ([`Mention`]);
    /// `message` says it without naming a flag or a command.
    pub(super) fn problem_mentioning(
        &mut self,
        path: &str,
        message: impl Into<String>,
        valid: Option<String>,
        mention: Mention,
    ) {
        self.push(path, message.into(), valid, Some(mention));
    }

    fn push(
        &mut self,
        path: &str,
        message: String,
        valid: Option<String>,
        mention: Option<Mention>,
    ) {
        use crate::error::escape_controls;
        let path = if path.is_empty() { "(top level)" } else { path };
        self.problems.push(Problem {
            path: escape_controls(path).into_owned(),
            message: escape_controls(&message).into_owned(),
            valid: valid.map(|v| escape_controls(&v).into_owned()),
            mention,
        });
    }

    /// The known entries of a mapping; unknown keys and missing required keys
    /// become problems.
    pub(super) fn mapping<'a>(
        &mut self,
        value: &'a Value,
        path: &str,
        allowed: &[&str],
        required: &[&str],
    ) -> Option<BTreeMap<String, &'a Value>> {
        let Value::Mapping(map) = value else {
            self.problem(
                path,
                format!("expected a mapping, found {}", kind(value)),
                None,
            );
            return None;
        };
        let mut known = BTreeMap::new();
        for (k, v) in map {
            let Some(key) = k.as_str() else {
                self.problem(
                    path,
                    format!("keys must be strings, found {}", kind(k)),
                    None,
                );
                continue;
            };
            let field = join(path, key);
            if allowed.contains(&key) {
                known.insert(key.to_string(), v);
            } else {
                let message = match did_you_mean(key, allowed) {
                    Some(s) => format!("unknown key; did you mean `{s}`?"),
                    None => "unknown key".to_string(),
                };
                self.problem(&field, message, Some(allowed.join(", ")));
            }
        }
        for r in required {
            if !known.contains_key(*r) {
                self.problem(&join(path, r), "missing", None);
            }
        }
        Some(known)
    }

    /// A string field. Numbers get a hint to quote them (YAML reads `3.10` as 3.1).
    pub(super) fn string(
        &mut self,
        map: &BTreeMap<String, &Value>,
        key: &str,
        path: &str,
    ) -> Option<String> {
        let v = map.get(key)?;
        let field = join(path, key);
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => {
                self.problem(
                    &field,
                    format!("expected a string, found the number {n} (YAML reads an unquoted 3.10 as 3.1); quote it as written, e.g. {key}: \"3.10\""),
                    None,
                );
                None
            }
            other => {
                self.problem(
                    &field,
                    format!("expected a string, found {}", kind(other)),
                    None,
                );
                None
            }
        }
    }

    pub(super) fn list<'a>(
        &mut self,
        map: &BTreeMap<String, &'a Value>,
        key: &str,
        path: &str,
    ) -> Vec<&'a Value> {
        match map.get(key) {
            None => Vec::new(),
            Some(Value::Sequence(items)) => items.iter().collect(),
            Some(other) => {
                self.problem(
                    &join(path, key),
                    format!("expected a list, found {}", kind(other)),
                    None,
                );
                Vec::new()
            }
        }
    }
}

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// The closest of `choices` to `word`, when close enough to be a likely typo.
pub fn did_you_mean<'a>(word: &str, choices: &[&'a str]) -> Option<&'a str> {
    choices
        .iter()
        .map(|c| (strsim::jaro_winkler(word, c), *c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

pub(super) fn show(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{s}'"),
        other => kind(other).to_string(),
    }
}
