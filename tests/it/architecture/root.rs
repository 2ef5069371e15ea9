//! The crate root declares modules and nothing more (#52 item 1): no file
//! names an item of `lib.rs` by path, so the root sits under nothing.
use super::*;

/// The modules `src/lib.rs` declares (`pub mod NAME;`).
fn root_modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("pub mod ")
                .or_else(|| l.trim().strip_prefix("mod "))
        })
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// `crate::NAME` paths in `sources` whose NAME is no module of the crate
/// root: an item of lib.rs itself, which would put the root under
/// whatever imports it (#52 item 1).
fn root_items_named(sources: &[Source]) -> Vec<String> {
    let lib = sources
        .iter()
        .find(|s| s.file == "src/lib.rs")
        .map(|s| root_modules(&s.code))
        .unwrap_or_default();
    let mut found = Vec::new();
    for s in sources.iter().filter(|s| s.file != "src/main.rs") {
        for (head, segments) in paths(&s.code) {
            if head == "crate" && segments.len() > 1 && !lib.contains(&segments[1]) {
                found.push(format!("{}: crate::{}", s.file, segments[1]));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_crate_root_declares_modules_and_nothing_imports_it_by_path() {
    let sources = sources();
    let found = root_items_named(&sources);
    assert!(
        found.is_empty(),
        "lib.rs declares modules and nothing more; name an item by its module (crate::error::ExitStatus): {found:#?}"
    );
    let lib = sources.iter().find(|s| s.file == "src/lib.rs").unwrap();
    assert!(
        !lib.code.contains("pub use ") && !lib.code.contains("pub fn "),
        "lib.rs re-exports or defines nothing"
    );
    // The rule can fail: a made-up file that names a root item.
    let made_up = [
        Source {
            file: "src/lib.rs".into(),
            module: vec![],
            code: "pub mod error;\npub use error::ExitStatus;".into(),
        },
        Source {
            file: "src/sys/process.rs".into(),
            module: vec!["sys".into(), "process".into()],
            code: "fn f(s: crate::ExitStatus) {}\nuse crate::error::ExitStatus;".into(),
        },
    ];
    assert_eq!(
        root_items_named(&made_up),
        vec!["src/sys/process.rs: crate::ExitStatus"]
    );
}
