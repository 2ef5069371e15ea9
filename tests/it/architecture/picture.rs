//! The picture stays true: `docs/architecture.md`'s table of parts names only
//! paths that exist and every top entry of `src/`, each folder's `mod.rs`
//! names its part, the nevers the picture lists are tests; and the part-level
//! rules can fail (on a made-up tree).
use super::*;

/// Folders whose opening comment cannot name its part yet, each with its
/// reason; the rule fails when one does (take it off the list).
const PART_LINE_PENDING: &[(&str, &str)] = &[];

/// The rows of the picture's table of parts: (part, paths).
fn parts() -> Vec<(String, Vec<String>)> {
    let doc = std::fs::read_to_string(repo_root().join("docs/architecture.md")).unwrap();
    let mut out = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[2].starts_with('`') {
            continue;
        }
        let paths = cells[2]
            .split(',')
            .map(|p| p.trim().trim_matches('`').to_string())
            .collect();
        out.push((cells[1].to_string(), paths));
    }
    out
}

#[test]
fn the_picture_names_only_parts_that_exist() {
    let root = repo_root();
    let parts = parts();
    assert!(
        parts.len() >= 8,
        "the table of parts is not read: {parts:?}"
    );
    let mut wrong = Vec::new();
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for (part, paths) in &parts {
        for p in paths {
            if !root.join(p).exists() {
                wrong.push(format!("{part}: {p} does not exist"));
            }
            if let Some(other) = owner.insert(p.trim_end_matches('/').to_string(), part.clone()) {
                wrong.push(format!("{p} is in two parts: {other} and {part}"));
            }
        }
    }
    // Every top entry of src/ is in a part.
    for entry in std::fs::read_dir(root.join("src")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let path = format!("src/{name}");
        if !owner.contains_key(&path) {
            wrong.push(format!("{path} is in no part of docs/architecture.md"));
        }
    }
    // Every folder's mod.rs names the part of its top folder.
    let mut files = Vec::new();
    rs_files(&root.join("src"), &mut files);
    for path in files.iter().filter(|p| p.ends_with("mod.rs")) {
        let file = path.strip_prefix(&root).unwrap().display().to_string();
        let top = file.splitn(3, '/').take(2).collect::<Vec<_>>().join("/");
        let Some(part) = owner.get(&top) else {
            continue;
        };
        let text = std::fs::read_to_string(path).unwrap();
        let opening: String = text
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        let names = opening.contains(&format!("Part: the {part} "));
        let pending = PART_LINE_PENDING.iter().find(|(f, _)| *f == file);
        match (names, pending) {
            (true, Some((_, why))) => wrong.push(format!(
                "{file} names its part now: take it off PART_LINE_PENDING ({why})"
            )),
            (false, None) => wrong.push(format!(
                "{file}'s opening comment does not say `Part: the {part} (…)`"
            )),
            _ => {}
        }
    }
    // The nevers the picture lists are tests of tests/it/architecture.rs.
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    // The rules: architecture.rs and its own files (root.rs, …).
    let mut rules = std::fs::read_to_string(root.join("tests/it/architecture.rs")).unwrap();
    for entry in std::fs::read_dir(root.join("tests/it/architecture")).unwrap() {
        rules.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default());
    }
    let nevers = &doc[doc.find("## The nevers").expect("a section of nevers")..];
    let named: Vec<&str> = nevers
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| {
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                && n.contains('_')
        })
        .collect();
    assert!(named.len() >= 8, "the nevers name too few tests: {named:?}");
    for n in named {
        if !rules.contains(&format!("fn {n}()")) {
            wrong.push(format!(
                "docs/architecture.md names the rule {n}, which is no test"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_part_rules_can_fail() {
    // A made-up tree that breaks each never once, written as the tree writes imports.
    let src = |file: &str, module: &[&str], code: &str| Source {
        file: file.into(),
        module: module.iter().map(|m| m.to_string()).collect(),
        code: code.into(),
    };
    let tree = [
        src(
            "src/lib.rs",
            &[],
            "pub mod commands;\npub mod train;\npub mod verify;",
        ),
        src("src/commands/mod.rs", &["commands"], "pub fn dispatch() {}"),
        src(
            "src/train/mod.rs",
            &["train"],
            "use crate::verify::Check;\npub fn t() {}",
        ),
        src(
            "src/verify/mod.rs",
            &["verify"],
            "pub struct Check;\nfn v() { crate::commands::dispatch() }",
        ),
    ];
    let graph = edges(&tree);
    assert_eq!(
        arrows(&graph, |f| part(f) == "train", |t| part(t) == "verify"),
        vec!["src/train/mod.rs -> src/verify/mod.rs"]
    );
    assert_eq!(
        arrows(&graph, |f| part(f) != "commands", |t| part(t) == "commands"),
        vec!["src/verify/mod.rs -> src/commands/mod.rs"]
    );
}
