//! #51 part 1: each set-up target's plan (`scripts/setup.sh TARGET
//! --dry-run`, which changes nothing) names only packages, users and Python
//! installs that docs/getting-started.md's table names for that target.
use std::process::Command;

use crate::common::{repo_root, texts};

/// The table's rows a target stands on, in order.
fn chain(target: &str) -> &'static [&'static str] {
    match target {
        "front" => &["front"],
        "full" => &["front", "full"],
        "image" => &["front", "full", "image"],
        "dist" => &["front", "full", "dist"],
        _ => &["front", "full", "image", "dist", "test"],
    }
}

/// The text of the rows of `targets` in the table.
fn rows(targets: &[&str]) -> String {
    let doc = std::fs::read_to_string(repo_root().join("docs/getting-started.md")).unwrap();
    doc.lines()
        .filter(|l| {
            targets.iter().any(|t| {
                l.starts_with(&format!("| `{t}` |")) || l.starts_with(&format!("| `{t}` ("))
            })
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What a plan installs or changes: package names, the user, Python installs.
fn planned(plan: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in plan.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("packages:") {
            let list = rest.split(" (Debian").next().unwrap_or(rest);
            let list = list.split(", only when").next().unwrap_or(list);
            out.extend(list.split_whitespace().map(str::to_string));
        } else if let Some(rest) = line.strip_prefix("user:") {
            out.extend(rest.split_whitespace().next().map(str::to_string));
        } else if let Some(rest) = line.strip_prefix("python:") {
            out.extend(
                rest.split_whitespace()
                    .filter(|w| w.contains("==") || *w == "ziglang")
                    .map(str::to_string),
            );
        }
    }
    out
}

#[test]
fn every_target_s_plan_is_in_the_getting_started_table() {
    for target in ["front", "full", "image", "dist", "test"] {
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/setup.sh"))
            .args([target, "--dry-run"])
            .output()
            .unwrap();
        let (plan, err) = texts(&out);
        assert!(out.status.success(), "{target}: {err}");
        assert!(plan.contains(&format!("target '{target}'")), "{plan}");
        let table = rows(chain(target));
        let things = planned(&plan);
        assert!(things.len() >= 3, "{target}: {plan}");
        let missing: Vec<&String> = things
            .iter()
            .filter(|t| !table.contains(&format!("`{t}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "{target}'s plan installs {missing:?}, which docs/getting-started.md's table does not name for it:\n{plan}"
        );
    }
    // The test can fail: a package no row names.
    assert!(!rows(chain("test")).contains("`left-pad`"));
    // A dry run changes nothing, and an unknown target is a usage error.
    let bad = Command::new("bash")
        .arg(repo_root().join("scripts/setup.sh"))
        .arg("everything")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
