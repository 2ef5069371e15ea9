//! `imgctl completions SHELL` and `imgctl man [COMMAND]`: the shell completion
//! scripts (clap_complete) and the roff man pages (clap_mangen), both generated
//! from the clap definition in [`crate::cli`], so they never drift from it.
use std::path::Path;

use anyhow::Context as _;
use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::commands::error::CliError;
use crate::error::ExitStatus;

/// Prints the completion script for one shell on stdout.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<ExitStatus> {
    let CompletionsArgs { shell } = args;
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "imgctl", &mut out);
    crate::output::printer().data(String::from_utf8_lossy(&out).trim_end());
    Ok(ExitStatus::Success)
}

/// Prints one man page on stdout, or writes every page into `--out-dir`.
pub fn man(args: ManArgs) -> anyhow::Result<ExitStatus> {
    let ManArgs { command, out_dir } = args;
    let mut root = Cli::command();
    root.build();
    if let Some(dir) = out_dir {
        let written = write_pages(&root, &dir)?;
        crate::output::printer().info(format!("wrote {written} man pages to {}", dir.display()));
        return Ok(ExitStatus::Success);
    }
    let page = match command.as_deref() {
        None => root,
        Some(name) => root
            .get_subcommands()
            .find(|c| c.get_name() == name)
            .cloned()
            .map(|c| c.name(format!("imgctl-{name}")))
            .ok_or_else(|| {
                let known: Vec<&str> = root
                    .get_subcommands()
                    .filter(|c| !c.is_hide_set())
                    .map(|c| c.get_name())
                    .filter(|n| *n != "help")
                    .collect();
                CliError::usage(format!("no subcommand `{}`", crate::error::printable(name)))
                    .with_hint(format!("the pages are: {}", known.join(", ")))
            })?,
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    crate::output::printer().data(String::from_utf8_lossy(&out).trim_end());
    Ok(ExitStatus::Success)
}

/// Writes `imgctl.1` and `imgctl-<sub>.1` for every subcommand into `dir`.
fn write_pages(root: &clap::Command, dir: &Path) -> anyhow::Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut pages = vec![(String::from("imgctl"), root.clone())];
    // Not the hidden ones (`idle-watch`, run by the image's entrypoint).
    for sub in root
        .get_subcommands()
        .filter(|c| c.get_name() != "help" && !c.is_hide_set())
    {
        let name = format!("imgctl-{}", sub.get_name());
        pages.push((name.clone(), sub.clone().name(name)));
    }
    for (name, page) in &pages {
        let mut out = Vec::new();
        clap_mangen::Man::new(page.clone()).render(&mut out)?;
        let path = dir.join(format!("{name}.1"));
        crate::sys::fs::write_file_atomic(&path, &out)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(pages.len())
}
