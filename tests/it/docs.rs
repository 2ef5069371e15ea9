//! The docs stay true (#51 part 5): every `console` example in the README
//! and docs/ (help, specs, render, usage errors: no engine, no clock) is run
//! and its output compared, line for line; and the reference pages
//! generated from the code (`docs/reference/cli.md` from `Cli::command()`,
//! `docs/reference/environment.md` from `src/env_vars.rs`) are what the code
//! gives now. `IMGCTL_BLESS=1` writes the reference pages anew.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::CommandFactory;

use crate::common::repo_root;

/// The Markdown files with examples: the README and everything in docs/.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![repo_root().join("README.md")];
    walk(&repo_root().join("docs"), &mut out);
    out.sort();
    out
}

/// The `$ command` lines of each ```console block and the lines after each.
fn examples(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if !inside {
            inside = line.trim_end() == "```console";
            continue;
        }
        if line.starts_with("```") {
            inside = false;
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            out.push((cmd.to_string(), Vec::new()));
        } else if let Some(last) = out.last_mut() {
            last.1.push(line.to_string());
        }
    }
    out
}

#[test]
fn every_console_example_prints_what_the_docs_show() {
    // `imgctl` is the front end (the full build prints the same for these).
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(crate::linking::front_binary(), bin.path().join("imgctl")).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut count = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (cmd, expected) in examples(&text) {
            count += 1;
            let work = tempfile::tempdir().unwrap();
            let out = Command::new("bash")
                .arg("-c")
                .arg(format!("( {cmd} ) 2>&1"))
                .current_dir(work.path())
                .env("NO_COLOR", "1")
                .env("COLUMNS", "100")
                .env("PATH", &path)
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .trim_end_matches('\n')
                .split('\n')
                .map(str::to_string)
                .collect();
            if got != expected {
                wrong.push(format!(
                    "{}: $ {cmd}\n--- the page shows\n{}\n--- it printed\n{}",
                    page.strip_prefix(repo_root()).unwrap().display(),
                    expected.join("\n"),
                    got.join("\n")
                ));
            }
        }
    }
    assert!(count >= 5, "only {count} console examples found");
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// `docs/reference/cli.md`: every command's `--help`, from `Cli::command()`.
fn cli_page() -> String {
    let mut root = imgctl::cli::Cli::command().term_width(100);
    root.build();
    let mut out = String::from(
        "# Command-line reference\n\nGenerated from the code (`Cli::command()`); \
         `tests/it/docs.rs` fails when it is stale, and `IMGCTL_BLESS=1 cargo test --test it docs::` \
         writes it anew. The same text is `imgctl COMMAND --help` and `man imgctl-COMMAND`.\n",
    );
    let mut section = |title: &str, cmd: &mut clap::Command| {
        let help = cmd.render_long_help().to_string();
        out.push_str(&format!(
            "\n## `{title}`\n\n```text\n{}\n```\n",
            help.trim_end()
        ));
    };
    section("imgctl", &mut root.clone());
    let subs: Vec<clap::Command> = root
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .cloned()
        .collect();
    for mut sub in subs {
        let name = format!("imgctl {}", sub.get_name());
        let nested: Vec<clap::Command> = sub
            .get_subcommands()
            .filter(|c| !c.is_hide_set() && c.get_name() != "help")
            .cloned()
            .collect();
        section(&name, &mut sub);
        for mut n in nested {
            section(&format!("{name} {}", n.get_name()), &mut n);
        }
    }
    out
}

/// `docs/reference/environment.md`: every variable `src/env_vars.rs`
/// declares, with its doc comment.
fn environment_page() -> String {
    let source = std::fs::read_to_string(repo_root().join("src/env_vars.rs")).unwrap();
    let mut out = String::from(
        "# Environment variables\n\nGenerated from `src/env_vars.rs`, where imgctl declares every \
         variable it reads; `tests/it/docs.rs` fails when this page is stale. The variables \
         `imgctl up` sets inside a workstation are in `src/workstation/contract.rs` and \
         `images/entrypoint.sh`.\n\n| variable | what it does |\n|---|---|\n",
    );
    let mut doc: Vec<String> = Vec::new();
    for line in source.lines().map(str::trim) {
        if let Some(d) = line.strip_prefix("///") {
            doc.push(d.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("pub const ") {
            let name = rest.split(':').next().unwrap_or_default();
            let text = doc.join(" ").replace('|', "\\|");
            out.push_str(&format!("| `{name}` | {text} |\n"));
            doc.clear();
        } else if !line.starts_with("#[") {
            doc.clear();
        }
    }
    out
}

#[test]
fn the_reference_pages_are_what_the_code_gives() {
    let mut stale = Vec::new();
    for (file, text) in [
        ("docs/reference/cli.md", cli_page()),
        ("docs/reference/environment.md", environment_page()),
    ] {
        let path = repo_root().join(file);
        if std::env::var_os("IMGCTL_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        if std::fs::read_to_string(&path).unwrap_or_default() != text {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} are stale: run `IMGCTL_BLESS=1 cargo test --test it docs::` and commit them"
    );
    // The pages hold what they must: every subcommand, every variable.
    let cli = cli_page();
    for c in [
        "## `imgctl build`",
        "## `imgctl verify`",
        "## `imgctl train-demo`",
        "## `imgctl key generate`",
    ] {
        assert!(cli.contains(c), "{c}");
    }
    assert!(environment_page().contains("| `IMGCTL_IMAGE` |"));
}
