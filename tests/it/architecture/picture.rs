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
    floored_parts()
        .into_iter()
        .map(|(part, paths, _)| (part, paths))
        .collect()
}

/// The rows of the picture's table of parts with their floors: (part,
/// paths, floor).
fn floored_parts() -> Vec<(String, Vec<String>, u32)> {
    let doc = std::fs::read_to_string(repo_root().join("docs/architecture.md")).unwrap();
    let mut out = Vec::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 || !cells[2].starts_with('`') {
            continue;
        }
        let paths = cells[2]
            .split(',')
            .map(|p| p.trim().trim_matches('`').to_string())
            .collect();
        let floor = cells[3]
            .parse()
            .unwrap_or_else(|_| panic!("the part {} has no floor: {line}", cells[1]));
        out.push((cells[1].to_string(), paths, floor));
    }
    out
}

/// The part of the table holding `file` (its longest path that is `file`
/// or a folder above it) and that part's floor.
fn part_of(table: &[(String, Vec<String>, u32)], file: &str) -> Option<(String, u32)> {
    table
        .iter()
        .flat_map(|(part, paths, floor)| paths.iter().map(move |p| (p, part, floor)))
        .filter(|(p, _, _)| {
            file == p.as_str() || (p.ends_with('/') && file.starts_with(p.as_str()))
        })
        .max_by_key(|(p, _, _)| p.len())
        .map(|(_, part, floor)| (part.clone(), *floor))
}

/// Arrows between wings that the picture allows, each with its reason; the
/// rule fails when one is no longer there (take it off the list).
const WING_CROSSINGS: &[(&str, &str, &str)] = &[
    (
        "src/image/attest.rs",
        "src/verify/",
        "the verdict statement carries verify's report: it is what is signed",
    ),
    (
        "src/workstation/",
        "src/verify/",
        "the quick verify inside reads verify's report and the expected GPU count",
    ),
];

/// The file-to-file arrows between parts that do not point to a lower
/// floor: (from, to, from's part and floor, to's part and floor).
fn upward_arrows(
    graph: &BTreeMap<String, BTreeSet<String>>,
    table: &[(String, Vec<String>, u32)],
) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (from, tos) in graph {
        let Some((fp, ff)) = part_of(table, from) else {
            continue;
        };
        for to in tos {
            let Some((tp, tf)) = part_of(table, to) else {
                continue;
            };
            if fp != tp && tf >= ff {
                out.push((
                    from.clone(),
                    to.clone(),
                    format!("{from} ({fp}, floor {ff}) -> {to} ({tp}, floor {tf})"),
                ));
            }
        }
    }
    out
}

#[test]
fn every_arrow_between_parts_points_down() {
    let table = floored_parts();
    let graph = edges(&sources());
    let found = upward_arrows(&graph, &table);
    let crossing = |from: &str, to: &str| {
        WING_CROSSINGS
            .iter()
            .position(|(f, t, _)| from.starts_with(f) && to.starts_with(t))
    };
    let mut used = BTreeSet::new();
    let mut wrong = Vec::new();
    for (from, to, words) in &found {
        match crossing(from, to) {
            Some(i) => {
                used.insert(i);
            }
            None => wrong.push(words.clone()),
        }
    }
    for (i, (f, t, why)) in WING_CROSSINGS.iter().enumerate() {
        if !used.contains(&i) {
            wrong.push(format!(
                "{f} -> {t} is no longer there: take it off WING_CROSSINGS ({why})"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The reader sees arrows that do point down (the command layer's).
    assert!(graph.keys().any(|f| f.starts_with("src/commands/")));
}

#[test]
fn no_wing_imports_another_wing() {
    let table = floored_parts();
    let wings: Vec<&str> = table
        .iter()
        .filter(|(part, _, _)| part.ends_with(" wing"))
        .map(|(part, _, _)| part.as_str())
        .collect();
    assert_eq!(wings.len(), 4, "{wings:?}");
    let graph = edges(&sources());
    let mut found = Vec::new();
    for (from, tos) in &graph {
        let Some((fp, _)) = part_of(&table, from) else {
            continue;
        };
        for to in tos {
            let Some((tp, _)) = part_of(&table, to) else {
                continue;
            };
            let listed = WING_CROSSINGS
                .iter()
                .any(|(f, t, _)| from.starts_with(f) && to.starts_with(t));
            if fp != tp && wings.contains(&fp.as_str()) && wings.contains(&tp.as_str()) && !listed {
                found.push(format!("{from} ({fp}) -> {to} ({tp})"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the wings stand side by side (what two need lives on the shared floor): {found:#?}"
    );
}

#[test]
fn the_floor_rule_can_fail() {
    // A made-up table and graph: the shared floor importing a wing is
    // caught, a wing importing the base is not.
    let row = |part: &str, path: &str, floor| (part.to_string(), vec![path.to_string()], floor);
    let table = [
        row("train wing", "src/train/", 3),
        row("shared floor", "src/docker/", 2),
        row("base", "src/sys/", 1),
    ];
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph
        .entry("src/docker/run.rs".into())
        .or_default()
        .insert("src/train/mod.rs".into());
    graph
        .entry("src/train/run.rs".into())
        .or_default()
        .insert("src/sys/fs.rs".into());
    let up: Vec<String> = upward_arrows(&graph, &table)
        .into_iter()
        .map(|(_, _, words)| words)
        .collect();
    assert_eq!(
        up,
        vec!["src/docker/run.rs (shared floor, floor 2) -> src/train/mod.rs (train wing, floor 3)"]
    );
    assert_eq!(
        part_of(&table, "src/train/parallel/mod.rs"),
        Some(("train wing".to_string(), 3))
    );
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
