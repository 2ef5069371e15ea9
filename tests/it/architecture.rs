//! The architecture's rules, checked on the source tree (see
//! `docs/architecture.md` and the README's "Layout"): no import circle
//! between files, no file over 800 lines (test files too, a `#[path]` test
//! file with its module), `unsafe` only in `src/sys/`, the user's words
//! (`CliError`, flags, `imgctl …` commands, clap types) only in `cli.rs`,
//! `commands/` and `main.rs`, the parts' nevers (train and verify never
//! import each other, core never imports `commands/`, `printer()` only in
//! the command layer and `output.rs`), and a picture that names only parts
//! that exist.
//!
//! The rules read source text, not the compiler's view: a `use`/path that
//! starts with `crate::`, `super::` or a child module's name is an edge from
//! the file that writes it to the file that defines the module it names.
//! Comment lines and `#[cfg(test)] mod tests` blocks are skipped.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::repo_root;

mod picture;
mod root;

/// One source file: its module path (`["train", "sync"]`) and its code
/// without comment lines and without its trailing `#[cfg(test)] mod tests`.
struct Source {
    file: String,
    module: Vec<String>,
    code: String,
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
            Source { file, module, code }
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
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "src/image/lock/file.rs",
        "# Check: {regenerate} --check.",
        "file content, not a message: a lock file's header says how to check it",
    ),
    (
        "src/verify/report.rs",
        "<testsuites name=\\\"imgctl verify\\\"",
        "file content, not a message: the JUnit document's suite name",
    ),
    (
        "src/verify/fleet/render.rs",
        "<testsuites name=\\\"imgctl verify --fleet\\\"",
        "file content, not a message: the JUnit document's suite name",
    ),
];

/// imgctl's subcommands, as a message would name them (`imgctl build`):
/// every one `cli::Command` declares, through clap's `CommandFactory`.
fn subcommands() -> Vec<String> {
    use clap::CommandFactory;
    imgctl::cli::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

/// The string literals of one line of code, unescaped enough to read
/// (`\"` is a quote inside the literal, not its end); a literal left open at
/// the line's end runs to it. Raw strings (`r"…"`, `r#"…"#`) end at their
/// own closing; a `'"'` char literal opens nothing.
fn string_literals(line: &str) -> Vec<String> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\'' if i + 2 < b.len() && b[i + 2] == b'\'' => i += 3,
            b'\'' if i + 3 < b.len() && b[i + 1] == b'\\' && b[i + 3] == b'\'' => i += 4,
            b'r' if (i == 0 || !b[i - 1].is_ascii_alphanumeric())
                && line[i + 1..].trim_start_matches('#').starts_with('"') =>
            {
                let hashes = line[i + 1..].len() - line[i + 1..].trim_start_matches('#').len();
                let start = i + 2 + hashes;
                let close = format!("\"{}", "#".repeat(hashes));
                let end = line[start..].find(&close).map_or(line.len(), |e| start + e);
                out.push(line[start..end].to_string());
                i = end + close.len();
            }
            b'"' => {
                let mut text = String::new();
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    if b[j] == b'\\' && j + 1 < b.len() {
                        text.push(match b[j + 1] {
                            b'n' | b't' => ' ',
                            c => c as char,
                        });
                        j += 2;
                    } else {
                        let c = line[j..].chars().next().unwrap();
                        text.push(c);
                        j += c.len_utf8();
                    }
                }
                out.push(text);
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// Whether `file` may speak the user's language (flags, `CliError`, clap).
fn user_facing(file: &str) -> bool {
    file.starts_with("src/commands/")
        || file == "src/cli.rs"
        || file.starts_with("src/cli/")
        || file == "src/main.rs"
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

/// Files over 800 lines for now, each with its reason; the rule fails when
/// one is no longer over (take it off the list).
const LONG_FOR_NOW: &[(&str, &str)] = &[];

/// Every `.rs` file under `src/` and `tests/` with its line count; a file a
/// `#[path = "…"]` module declaration names counts with the file that
/// declares it (moving tests out does not make a module shorter).
fn line_counts() -> BTreeMap<String, usize> {
    let root = repo_root();
    let mut files = Vec::new();
    rs_files(&root.join("src"), &mut files);
    rs_files(&root.join("tests"), &mut files);
    let mut counts = BTreeMap::new();
    let mut declared = BTreeMap::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let rel = path.strip_prefix(&root).unwrap().display().to_string();
        counts.insert(rel.clone(), text.lines().count());
        for line in text.lines() {
            let Some(piece) = line.trim_start().strip_prefix("#[path = \"") else {
                continue;
            };
            let name = &piece[..piece.find('"').unwrap()];
            let target = path.parent().unwrap().join(name);
            let target = target.strip_prefix(&root).unwrap().display().to_string();
            declared.insert(target, rel.clone());
        }
    }
    for (target, owner) in &declared {
        let n = counts
            .remove(target)
            .unwrap_or_else(|| panic!("{owner} names {target}, which is not there"));
        *counts.get_mut(owner).unwrap() += n;
    }
    counts
}

#[test]
fn no_file_over_800_lines() {
    let counts = line_counts();
    assert!(
        counts.keys().any(|f| f.starts_with("tests/it/")) && counts.len() > 200,
        "only {} files found: the reader is broken",
        counts.len()
    );
    assert!(
        counts["src/docker/transport.rs"]
            > std::fs::read_to_string(repo_root().join("src/docker/transport.rs"))
                .unwrap()
                .lines()
                .count(),
        "transport_tests.rs (#[path]) must count with transport.rs"
    );
    let mut wrong: Vec<String> = counts
        .iter()
        .filter(|(f, n)| **n > 800 && !LONG_FOR_NOW.iter().any(|(l, _)| l == f))
        .map(|(f, n)| format!("{f} ({n} lines)"))
        .collect();
    for (file, why) in LONG_FOR_NOW {
        if counts.get(*file).map_or(true, |n| *n <= 800) {
            wrong.push(format!(
                "{file} is no longer over 800 lines: take it off LONG_FOR_NOW ({why})"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "files over 800 lines (split them by topic; moving tests out does not count): {wrong:?}"
    );
}

/// The part a source file belongs to: its top folder or file under `src/`
/// (`src/train/parallel/mod.rs` → `train`, `src/cli.rs` → `cli`).
fn part(file: &str) -> &str {
    let rest = file.strip_prefix("src/").unwrap_or(file);
    let top = rest.split('/').next().unwrap_or(rest);
    top.strip_suffix(".rs").unwrap_or(top)
}

/// The file-to-file edges from part `from` to part `to`.
fn arrows(
    graph: &BTreeMap<String, BTreeSet<String>>,
    from: impl Fn(&str) -> bool,
    to: impl Fn(&str) -> bool,
) -> Vec<String> {
    graph
        .iter()
        .filter(|(f, _)| from(f))
        .flat_map(|(f, ts)| {
            ts.iter()
                .filter(|t| to(t))
                .map(move |t| format!("{f} -> {t}"))
        })
        .collect()
}

#[test]
fn train_and_verify_never_import_each_other() {
    let graph = edges(&sources());
    let mut found = arrows(&graph, |f| part(f) == "train", |t| part(t) == "verify");
    found.extend(arrows(
        &graph,
        |f| part(f) == "verify",
        |t| part(t) == "train",
    ));
    assert!(
        found.is_empty(),
        "train/ and verify/ stand side by side (what both need lives in world/, nvml/, gpus/): {found:#?}"
    );
    // The reader sees both parts' imports of the floor under them.
    assert!(!arrows(&graph, |f| part(f) == "verify", |t| part(t) == "world").is_empty());
    assert!(!arrows(&graph, |f| part(f) == "train", |t| part(t) == "nvml").is_empty());
}

#[test]
fn the_core_never_imports_the_command_layer() {
    let graph = edges(&sources());
    let found = arrows(&graph, |f| part(f) != "commands", |t| part(t) == "commands");
    assert!(
        found.is_empty(),
        "nothing below commands/ points up at it (main.rs calls commands::dispatch): {found:#?}"
    );
    // The reader sees the command layer's own imports of the core.
    assert!(!arrows(&graph, |f| part(f) == "commands", |t| part(t) == "verify").is_empty());
}

/// Core files that still call `printer()`, each with its reason; the rule
/// fails when one no longer does (take it off the list).
const PRINTS_FOR_NOW: &[(&str, &str)] = &[
    (
        "src/train/interrupt.rs",
        "the Ctrl-C handler's own lines, on the signal's thread: no caller to return them to",
    ),
    (
        "src/train/parallel/supervisor.rs",
        "relays each worker's stdout line as the run's data, from its reader thread",
    ),
];

#[test]
fn only_the_command_layer_and_output_call_the_printer() {
    let allowed = |f: &str| {
        part(f) == "commands" || f == "src/main.rs" || f == "src/output.rs" || test_only(f)
    };
    let sources = sources();
    let mut found = Vec::new();
    for s in sources.iter().filter(|s| !allowed(&s.file)) {
        let lines: Vec<&str> = s.code.lines().filter(|l| l.contains("printer()")).collect();
        if !lines.is_empty() && !PRINTS_FOR_NOW.iter().any(|(f, _)| *f == s.file) {
            found.extend(lines.iter().map(|l| format!("{}: {}", s.file, l.trim())));
        }
    }
    for (file, why) in PRINTS_FOR_NOW {
        let s = sources.iter().find(|s| s.file == *file);
        if !s.is_some_and(|s| s.code.contains("printer()")) {
            found.push(format!(
                "{file} no longer calls printer(): take it off PRINTS_FOR_NOW ({why})"
            ));
        }
    }
    assert!(
        found.is_empty(),
        "core speaks through its callbacks, events and typed results, not the printer: {found:#?}"
    );
}

#[test]
fn string_literals_are_read_past_escaped_quotes() {
    let line = r#"out.push_str(&format!("<a name=\"imgctl verify --fleet\" t=\"{:.3}\">\n", s));"#;
    assert_eq!(
        string_literals(line),
        vec![r#"<a name="imgctl verify --fleet" t="{:.3}"> "#.to_string()]
    );
    assert_eq!(
        string_literals(r##"let (q, r) = ('"', r#"say "imgctl up""#);"##),
        vec![r#"say "imgctl up""#.to_string()]
    );
}

#[test]
fn the_cuda_help_lists_the_bundled_specs() {
    use clap::CommandFactory;
    // The CUDA major.minor of every spec in images/, as its `cuda:` says.
    let mut from_specs = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("images")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let cuda = text
                .lines()
                .find_map(|l| l.strip_prefix("cuda:"))
                .unwrap_or_else(|| panic!("{} has no cuda:", path.display()));
            let mm: Vec<&str> = cuda.trim().trim_matches('"').split('.').take(2).collect();
            from_specs.push(mm.join("."));
        }
    }
    from_specs.sort();
    let mut bundled: Vec<String> = imgctl::image::specs::bundled_cudas()
        .iter()
        .map(|s| s.to_string())
        .collect();
    bundled.sort();
    assert_eq!(
        bundled, from_specs,
        "the bundled profiles are images/*.yaml"
    );
    let cli = imgctl::cli::Cli::command();
    for sub in ["build", "render", "lock"] {
        let cmd = cli.find_subcommand(sub).unwrap();
        let Some(arg) = cmd.get_arguments().find(|a| a.get_id() == "cuda") else {
            continue;
        };
        let help = arg.get_help().unwrap().to_string();
        assert!(
            help.contains(&format!(
                "({})",
                imgctl::image::specs::bundled_cudas().join(", ")
            )),
            "imgctl {sub} --cuda: {help}"
        );
    }
    // No hand-written list of versions left in cli.rs.
    let cli_rs = std::fs::read_to_string(repo_root().join("src/cli.rs")).unwrap();
    for v in &from_specs {
        assert!(
            !cli_rs.contains(&format!("{v}, ")),
            "src/cli.rs lists CUDA {v} by hand"
        );
    }
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
    let commands = subcommands();
    assert!(
        commands.len() >= 15 && commands.iter().any(|c| c == "up"),
        "clap lists too few subcommands: {commands:?}"
    );
    let mut found = Vec::new();
    for s in sources()
        .iter()
        .filter(|s| !user_facing(&s.file) && !test_only(&s.file))
    {
        for line in s.code.lines() {
            // String literals that read as messages (they hold a space):
            // an argv entry such as "--json" handed to a program is not one.
            let strings: Vec<String> = string_literals(line)
                .into_iter()
                .filter(|t| t.contains(' '))
                .collect();
            let flag = strings.iter().any(|t| {
                t.split(|c: char| c.is_whitespace() || c == '`' || c == '(')
                    .any(|w| {
                        w.len() > 2 && w.starts_with("--") && w.as_bytes()[2].is_ascii_lowercase()
                    })
            });
            let command = strings
                .iter()
                .any(|t| commands.iter().any(|c| t.contains(&format!("imgctl {c}"))));
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
