//! The architecture's rules, checked on the source tree (see the README's
//! "Layout" and `shared/DESIGN.md`): no import circle between files, no file
//! over 800 lines, `unsafe` only in `src/sys/`, the user's words (`CliError`,
//! flags, `imgctl …` commands, clap types) only in `cli.rs`, `commands/` and
//! `main.rs`.
//!
//! The rules read source text, not the compiler's view: a `use`/path that
//! starts with `crate::`, `super::` or a child module's name is an edge from
//! the file that writes it to the file that defines the module it names.
//! Comment lines and `#[cfg(test)] mod tests` blocks are skipped.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::repo_root;

/// One source file: its module path (`["train", "sync"]`) and its code
/// without comment lines and without its trailing `#[cfg(test)] mod tests`.
struct Source {
    file: String,
    module: Vec<String>,
    code: String,
    lines: usize,
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<Source> {
    let root = repo_root();
    let mut files = Vec::new();
    rs_files(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let rel = path.strip_prefix(root.join("src")).unwrap();
            let file = format!("src/{}", rel.display());
            let mut module: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let body = &text[..test_module_start(&text)];
            let code = body
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            Source {
                file,
                module,
                code,
                lines: text.lines().count(),
            }
        })
        .collect()
}

/// Where `text`'s trailing test module starts (`#[cfg(test)]` or another
/// cfg naming `test`, such as `#[cfg(all(test, feature = "torch"))]`, on the
/// line before `mod tests {`); its length when it has none.
fn test_module_start(text: &str) -> usize {
    let Some(at) = text.find("\nmod tests {") else {
        return text.len();
    };
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let attr = &text[line_start..at];
    if attr.starts_with("#[cfg(") && attr.contains("test") {
        line_start
    } else {
        text.len()
    }
}

/// Whether a file holds only tests (declared `#[cfg(test)] mod …;` by its parent).
fn test_only(file: &str) -> bool {
    file.ends_with("/tests.rs") || file.ends_with("_tests.rs")
}

/// The path segments after each `crate::`/`super::`/child-module prefix in `code`.
fn paths(code: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let start = i;
        let mut segments = Vec::new();
        let mut j = i;
        loop {
            let s = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            if s == j {
                break;
            }
            segments.push(code[s..j].to_string());
            if code[j..].starts_with("::") {
                j += 2;
                if code[j..].starts_with('{') {
                    // A group: each item names a path of its own.
                    let end = code[j..].find('}').map_or(code.len(), |e| j + e);
                    for item in code[j + 1..end].split(',') {
                        let item: Vec<String> = item
                            .trim()
                            .split("::")
                            .map(|p| p.split_whitespace().next().unwrap_or("").to_string())
                            .filter(|p| {
                                !p.is_empty() && p != "self" && p != "*" && !p.starts_with('{')
                            })
                            .collect();
                        let mut full = segments.clone();
                        full.extend(item);
                        out.push((segments[0].clone(), full));
                    }
                    j = end;
                    break;
                }
            } else {
                break;
            }
        }
        if segments.len() > 1 {
            out.push((segments[0].clone(), segments));
        }
        i = j.max(start + 1);
    }
    out
}

/// File-to-file edges of the library's non-test code.
fn edges(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let by_module: BTreeMap<Vec<String>, &str> = sources
        .iter()
        .filter(|s| s.file != "src/main.rs")
        .map(|s| (s.module.clone(), s.file.as_str()))
        .collect();
    let resolve = |parts: &[String]| -> Option<&str> {
        (1..=parts.len())
            .rev()
            .find_map(|n| by_module.get(&parts[..n]).copied())
    };
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources
        .iter()
        .filter(|s| s.file != "src/main.rs" && !test_only(&s.file))
    {
        let is_mod = s.file.ends_with("mod.rs") || s.file == "src/lib.rs";
        let dir: Vec<String> = if is_mod {
            s.module.clone()
        } else {
            s.module[..s.module.len() - 1].to_vec()
        };
        for (head, segments) in paths(&s.code) {
            let target = match head.as_str() {
                "crate" => resolve(&segments[1..]),
                "super" => {
                    // The nearest ancestor with a child of that name (inline
                    // modules add `super`s the file layout doesn't show).
                    let rest: Vec<String> = segments
                        .iter()
                        .skip_while(|p| *p == "super")
                        .cloned()
                        .collect();
                    let ups = segments.len() - rest.len();
                    let mut base = if is_mod {
                        s.module[..s.module.len().saturating_sub(1)].to_vec()
                    } else {
                        dir.clone()
                    };
                    let mut found = None;
                    for _ in 0..ups.max(1) {
                        let mut full = base.clone();
                        full.extend(rest.iter().cloned());
                        if rest.first().is_some_and(|r| {
                            by_module.contains_key(&[base.clone(), vec![r.clone()]].concat())
                        }) {
                            found = resolve(&full);
                            break;
                        }
                        if base.pop().is_none() {
                            break;
                        }
                    }
                    found
                }
                child if is_mod => {
                    let mut full = s.module.clone();
                    full.extend(segments.iter().cloned());
                    if by_module.contains_key(&[s.module.clone(), vec![child.to_string()]].concat())
                    {
                        resolve(&full)
                    } else {
                        None
                    }
                }
                _ => None,
            };
            if let Some(t) = target {
                if t != s.file && !test_only(t) {
                    out.entry(s.file.clone()).or_default().insert(t.to_string());
                }
            }
        }
    }
    out
}

/// The strongly connected components with more than one file (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(st: &mut State<'a>, v: &'a str) {
        st.index.insert(v, st.next);
        st.low.insert(v, st.next);
        st.next += 1;
        st.stack.push(v);
        st.on.insert(v);
        if let Some(ws) = st.graph.get(v) {
            for w in ws {
                let w = w.as_str();
                if !st.index.contains_key(w) {
                    visit(st, w);
                    let lw = st.low[w];
                    let lv = st.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if st.on.contains(w) {
                    let iw = st.index[w];
                    let lv = st.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if st.low[v] == st.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = st.stack.pop() {
                st.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                st.out.push(comp);
            }
        }
    }
    let mut st = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.out
}

/// Lines outside the command layer that may name a flag, each with its reason.
const ALLOWED: &[(&str, &str, &str)] = &[(
    "src/lock/file.rs",
    "# Check: {regenerate} --check.",
    "file content, not a message: a lock file's header says how to check it",
)];

/// imgctl's subcommands, as a message would name them (`imgctl build`).
const SUBCOMMANDS: &[&str] = &[
    "build",
    "render",
    "verify",
    "train-demo",
    "sample",
    "specs",
    "lock",
    "completions",
    "man",
];

/// Whether `file` may speak the user's language (flags, `CliError`, clap).
fn user_facing(file: &str) -> bool {
    file.starts_with("src/commands/") || file == "src/cli.rs" || file == "src/main.rs"
}

#[test]
fn no_import_circle_between_files() {
    let graph = edges(&sources());
    // The reader sees the tree's imports (hundreds of edges), not nothing.
    let count: usize = graph.values().map(BTreeSet::len).sum();
    assert!(
        count > 300,
        "only {count} import edges found: the reader is broken"
    );
    let found = circles(&graph);
    assert!(found.is_empty(), "import circles: {found:#?}");
}

#[test]
fn the_circle_finder_finds_a_circle() {
    // The rule above can fail: a two-file circle written the way the tree writes them.
    let a = "use crate::b::Thing;\npub fn f() {}";
    let b = "pub struct Thing;\nfn g() { super::a::f() }";
    let src = |file: &str, module: &[&str], code: &str| Source {
        file: file.into(),
        module: module.iter().map(|m| m.to_string()).collect(),
        code: code.into(),
        lines: 1,
    };
    let tree = [
        src("src/lib.rs", &[], "pub mod a;\npub mod b;"),
        src("src/a.rs", &["a"], a),
        src("src/b.rs", &["b"], b),
    ];
    assert_eq!(
        circles(&edges(&tree)),
        vec![vec!["src/a.rs".to_string(), "src/b.rs".to_string()]]
    );
}

#[test]
fn no_source_file_over_800_lines() {
    let long: Vec<String> = sources()
        .iter()
        .filter(|s| s.lines > 800)
        .map(|s| format!("{} ({} lines)", s.file, s.lines))
        .collect();
    assert!(
        long.is_empty(),
        "files over 800 lines (split them by job): {long:?}"
    );
}

#[test]
fn unsafe_lives_in_sys_only() {
    let found: Vec<String> = sources()
        .iter()
        .filter(|s| !s.file.starts_with("src/sys/"))
        .flat_map(|s| {
            s.code
                .lines()
                .filter(|l| l.contains("unsafe ") || l.contains("unsafe{"))
                .map(|l| format!("{}: {}", s.file, l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(found.is_empty(), "unsafe outside src/sys/: {found:#?}");
    let lib = std::fs::read_to_string(repo_root().join("src/lib.rs")).unwrap();
    assert!(
        lib.contains("#![deny(unsafe_code)]"),
        "lib.rs must deny unsafe_code outside sys/"
    );
}

#[test]
fn only_the_command_layer_speaks_the_users_language() {
    let mut found = Vec::new();
    for s in sources()
        .iter()
        .filter(|s| !user_facing(&s.file) && !test_only(&s.file))
    {
        for line in s.code.lines() {
            // String literals that read as messages (they hold a space):
            // an argv entry such as "--json" handed to a program is not one.
            let strings: Vec<&str> = line
                .split('"')
                .skip(1)
                .step_by(2)
                .filter(|t| t.contains(' '))
                .collect();
            let flag = strings.iter().any(|t| {
                t.split(|c: char| c.is_whitespace() || c == '`' || c == '(')
                    .any(|w| {
                        w.len() > 2 && w.starts_with("--") && w.as_bytes()[2].is_ascii_lowercase()
                    })
            });
            let command = strings.iter().any(|t| {
                SUBCOMMANDS
                    .iter()
                    .any(|c| t.contains(&format!("imgctl {c}")))
            });
            let allowed = ALLOWED
                .iter()
                .any(|(file, text, _why)| s.file == *file && line.contains(text));
            if !allowed
                && (line.contains("CliError") || line.contains("crate::cli") || flag || command)
            {
                found.push(format!("{}: {}", s.file, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "{} lines outside cli.rs/commands/ name CliError, clap types, a flag or an imgctl command: {found:#?}", found.len());
}

/// Core error enums that never reach the user as an error: the core turns
/// them into something else where it meets them (the file named), so they
/// need no advice table: (enum, the file that consumes it, the call there
/// that yields it, why).
const NO_TABLE: &[(&str, &str, &str, &str)] = &[
    (
        "RawNvmlError",
        "src/nvml/real.rs",
        "RawNvmlError::Code",
        "mapped to NvmlErr, then to a check's verdict",
    ),
    (
        "NvmlLoadError",
        "src/verify/run.rs",
        "RealNvml::load",
        "becomes the driver check's verdict (no NVIDIA driver)",
    ),
    (
        "DeadlineError",
        "src/verify/run.rs",
        "run_with_deadline",
        "a hung or panicking check is that check's FAIL",
    ),
];

#[test]
fn every_core_error_enum_has_exactly_one_advice_table() {
    let sources = sources();
    // `pub enum NameError` in core (outside commands/).
    let mut enums: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in sources
        .iter()
        .filter(|s| !s.file.starts_with("src/commands/"))
    {
        for line in s.code.lines() {
            let Some(rest) = line.trim().strip_prefix("pub enum ") else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.ends_with("Error") {
                enums.entry(name).or_default().push(s.file.clone());
            }
        }
    }
    assert!(
        enums.len() > 30,
        "only {} core error enums found: the reader is broken",
        enums.len()
    );
    // The tables: files under commands/error/ and the names they downcast to.
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources
        .iter()
        .filter(|s| s.file.starts_with("src/commands/error/"))
    {
        for piece in s.code.split("downcast_ref::<").skip(1) {
            let path: String = piece.chars().take_while(|c| *c != '>').collect();
            let name = path.rsplit("::").next().unwrap_or_default().to_string();
            tables.entry(name).or_default().insert(s.file.clone());
        }
    }
    let mut wrong = Vec::new();
    for (name, defined_in) in &enums {
        assert_eq!(
            defined_in.len(),
            1,
            "two core error enums are named {name} ({defined_in:?}): name them apart"
        );
        let found = tables.get(name).map_or(0, BTreeSet::len);
        match NO_TABLE.iter().find(|(n, ..)| n == name) {
            Some((_, consumer, call, why)) => {
                let code = &sources.iter().find(|s| s.file == *consumer).unwrap().code;
                if found != 0 || !code.contains(call) {
                    wrong.push(format!(
                        "{name} is listed as needing no table ({why}) but {consumer} no longer calls {call}, or a table names it"
                    ));
                }
            }
            None if found != 1 => wrong.push(format!(
                "{name} ({}) has {found} advice tables under src/commands/error/: {:?}",
                defined_in[0],
                tables.get(name)
            )),
            None => {}
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
