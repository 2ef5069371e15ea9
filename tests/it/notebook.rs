//! imgctl as a notebook cell's `!imgctl …` runs it: under a Jupyter kernel
//! (`JPY_PARENT_PID` in the environment) on ipykernel's pseudo-terminal of
//! 80 columns, whose output area handles `\r` but not the line erase a
//! progress bar draws with (#45 F11: residue such as `loss 1.1631 at the
//! first step →s]`, and the verify table cut to 80 columns in a notebook
//! 1000 pixels wide). Here `script(1)` gives the pseudo-terminal.
#![cfg(feature = "torch")]

use std::process::Command;

use crate::common::imgctl_bin;

/// Runs `args` of imgctl on a pseudo-terminal of 80 columns, as a notebook
/// cell (`JPY_PARENT_PID` set) or as a terminal; what the terminal showed.
fn on_a_pty(args: &str, notebook: bool) -> String {
    let jpy = if notebook { "JPY_PARENT_PID=4242 " } else { "" };
    let shell = format!(
        "stty cols 80 2>/dev/null; {jpy}NO_COLOR=1 {} {args}",
        imgctl_bin().display()
    );
    let out = Command::new("script")
        .args(["-qec", &shell, "/dev/null"])
        .env_remove("COLUMNS")
        .env_remove("JPY_PARENT_PID")
        .output()
        .expect("run script(1) (util-linux)");
    let seen = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{args}:\n{seen}");
    seen
}

#[test]
fn a_notebook_cell_gets_plain_lines_full_width_tables_and_how_to_show_the_pictures() {
    let dir = tempfile::tempdir().unwrap();
    let train = format!(
        "train-demo --preset tiny --device cpu --steps 6 --out {}",
        dir.path().join("run").display()
    );
    // On a terminal the bar erases its line; in a notebook nothing does.
    let terminal = on_a_pty(&train, false);
    assert!(
        terminal.contains("\x1b[2K"),
        "no progress bar on a terminal:\n{terminal}"
    );
    assert!(!terminal.contains("IPython.display"), "{terminal}");
    let dir = tempfile::tempdir().unwrap();
    let train = format!(
        "train-demo --preset tiny --device cpu --steps 6 --out {}",
        dir.path().join("run").display()
    );
    let cell = on_a_pty(&train, true);
    assert!(
        !cell.contains("\x1b[2K") && !cell.contains("\x1b[1A"),
        "{cell:?}"
    );
    let show = cell
        .lines()
        .find(|l| {
            l.contains("show them here: from IPython.display import Image, display; display(Image(")
        })
        .unwrap_or_else(|| panic!("no IPython.display line:\n{cell}"));
    assert!(show.contains("loss.png"), "{show}");
    // verify's table wider than the pty's 80 columns, every cell whole,
    // wrapped inside its column to the notebook's 118 (no line the output
    // area would wrap again).
    let verify = on_a_pty("verify --level quick --expect-gpus 0", true);
    let widest = verify
        .split(['\r', '\n'])
        .filter(|l| l.starts_with('|'))
        .map(|l| l.trim_end().chars().count())
        .max()
        .unwrap_or(0);
    assert!(
        widest > 80,
        "the table was fitted to the pty's 80 columns:\n{verify}"
    );
    assert!(!verify.contains('…'), "a cell was cut:\n{verify}");
    assert!(widest <= 118, "wider than a notebook's line:\n{verify}");
}
