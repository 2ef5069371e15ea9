//! Command-line conventions shared by every command.
use std::process::Command;

use crate::common::{imgctl, imgctl_bin, texts};

#[test]
fn version_and_help() {
    let out = imgctl(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        texts(&out).0.trim(),
        format!("imgctl {}", env!("CARGO_PKG_VERSION"))
    );
    let out = imgctl(&["--help"]);
    let (stdout, _) = texts(&out);
    for cmd in ["build", "render", "verify", "train-demo", "sample"] {
        assert!(stdout.contains(cmd), "--help lacks {cmd}:\n{stdout}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let out = imgctl(&["no-such-command"]);
    assert_eq!(out.status.code(), Some(2));
    let out = imgctl(&["verify", "--level", "bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let (_, stderr) = texts(&out);
    assert!(stderr.contains("bogus"), "{stderr}");
}

/// A flag with a closed set of values: clap's error names the flag and the
/// bad value on its first line and lists the possible values (exit 2,
/// before any work); every former spelling (aliases, any case) is still
/// read.
#[test]
fn closed_value_sets_are_checked_by_clap() {
    for (args, first, values) in [
        (
            &["train-demo", "--precision", "fp8"][..],
            "error: invalid value 'fp8' for '--precision <PRECISION>'",
            "[possible values: fp32, fp16, bf16]",
        ),
        (
            &["train-demo", "--grad-reduce", "fp16"][..],
            "error: invalid value 'fp16' for '--grad-reduce <fp32|bf16>'",
            "[possible values: fp32, bf16]",
        ),
        (
            &["train-demo", "--overlap-grad-reduce", "maybe"][..],
            "error: invalid value 'maybe' for '--overlap-grad-reduce <on|off>'",
            "[possible values: on, off]",
        ),
        (
            &["train-demo", "--preset", "tinyy"][..],
            "error: invalid value 'tinyy' for '--preset <PRESET>'",
            "[possible values: default, tiny, smoke]",
        ),
        (
            &["sample", "--checkpoint", "none", "--sampler", "euler"][..],
            "error: invalid value 'euler' for '--sampler <SAMPLER>'",
            "[possible values: ddpm, ddim]",
        ),
        (
            &["verify", "--level", "slow"][..],
            "error: invalid value 'slow' for '--level <LEVEL>'",
            "[possible values: quick, full]",
        ),
    ] {
        let out = imgctl(args);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(stderr.lines().next(), Some(first), "{args:?}: {stderr}");
        assert!(stderr.contains(values), "{args:?}: {stderr}");
    }
    use clap::Parser;
    let parses = |args: &[&str]| {
        imgctl::cli::Cli::try_parse_from(["imgctl"].iter().chain(args))
            .map_err(|e| e.to_string())
            .map(|_| ())
    };
    for spelling in [
        "fp32", "float32", "no", "FP16", "float16", "half", "bf16", "BFloat16",
    ] {
        assert_eq!(
            parses(&["train-demo", "--precision", spelling]),
            Ok(()),
            "{spelling}"
        );
    }
    for spelling in ["fp32", "float32", "BF16", "bfloat16"] {
        assert_eq!(
            parses(&["train-demo", "--grad-reduce", spelling]),
            Ok(()),
            "{spelling}"
        );
    }
    for spelling in ["on", "OFF", "true", "false", "yes", "no", "1", "0"] {
        assert_eq!(
            parses(&["train-demo", "--overlap-grad-reduce", spelling]),
            Ok(()),
            "{spelling}"
        );
    }
    assert_eq!(
        parses(&["sample", "--checkpoint", "c", "--sampler", "DDPM"]),
        Ok(())
    );
}

#[test]
fn negative_and_tiny_numbers_get_the_range_error() {
    for (args, line) in [
        (
            &["train-demo", "--batch-size", "-1"][..],
            "error: --batch-size -1 is not positive",
        ),
        (
            &["verify", "--expect-gpus", "0", "--check-timeout", "-1"][..],
            "error: --check-timeout -1.0 is not a number of seconds from 0.1 to 3600.0",
        ),
        (
            &["verify", "--expect-gpus", "0", "--check-timeout", "1e-300"][..],
            "error: --check-timeout 1e-300 is not a number of seconds from 0.1 to 3600.0",
        ),
        (
            &["verify", "--expect-gpus", "0", "--check-timeout", "0.05"][..],
            "error: --check-timeout 0.05 is not a number of seconds from 0.1 to 3600.0",
        ),
        (
            &["render", "--uid", "-5"][..],
            "error: invalid value '-5' for '--uid <UID>': expected an integer 1000-60000 (0 is root); use your own UID (`id -u`) so files in mounted folders keep sane owners",
        ),
        (
            &["render", "--gid", "-1000"][..],
            "error: invalid value '-1000' for '--gid <GID>': expected an integer 1000-60000 (0 is root); use your own GID (`id -g`) so files in mounted folders keep sane owners",
        ),
        (
            &["train-demo", "--lr", "-0.1"][..],
            "error: invalid training setting: lr is -0.1",
        ),
        (
            &["sample", "--checkpoint", "none", "--num", "-2"][..],
            "error: --num -2 is not positive",
        ),
        (
            &["train-demo", "--steps", "-3"][..],
            "error: invalid value '-3' for '--steps <STEPS>': invalid digit found in string",
        ),
    ] {
        let out = imgctl(args);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(stderr.lines().next(), Some(line), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("unexpected argument"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn check_timeout_bounds_are_inclusive() {
    use clap::Parser;
    let options = |secs: &str| {
        let cli = imgctl::cli::Cli::try_parse_from([
            "imgctl",
            "verify",
            "--expect-gpus",
            "0",
            "--check-timeout",
            secs,
        ])
        .unwrap();
        let imgctl::cli::Command::Verify(args) = cli.command else {
            unreachable!()
        };
        imgctl::commands::verify::options(&args)
    };
    for ok in ["0.1", "30", "3600"] {
        assert!(options(ok).is_ok(), "{ok}");
    }
    for bad in ["0.0999", "3600.5", "NaN", "inf", "-0"] {
        assert!(options(bad).is_err(), "{bad}");
    }
}

/// The subcommands, as `imgctl --help` lists them.
fn subcommands() -> Vec<String> {
    let out = imgctl(&["--help"]);
    let (stdout, _) = texts(&out);
    let list = stdout
        .split("Commands:")
        .nth(1)
        .expect("a Commands: section");
    let names: Vec<String> = list
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|n| n != "help")
        .collect();
    assert!(names.len() >= 9, "{names:?}");
    names
}

#[test]
fn completion_scripts_name_every_subcommand() {
    let subs = subcommands();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = imgctl(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let (script, _) = texts(&out);
        for sub in &subs {
            assert!(
                script.contains(sub.as_str()),
                "{shell}'s script lacks {sub}"
            );
        }
        // Flags of a subcommand complete too, not only the command names.
        assert!(
            script.contains("gradient-checkpointing"),
            "{shell}: no train-demo flags"
        );
        // The global --context completes before and after every subcommand.
        let context = if shell == "fish" {
            "-l context"
        } else {
            "--context"
        };
        let n = script.matches(context).count();
        assert!(n > subs.len(), "{shell}: --context completes in {n} places");
    }
    let out = imgctl(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    // Values that are no file names do not complete as files (#45 F20).
    let bash = texts(&imgctl(&["completions", "bash"])).0;
    let lines: Vec<&str> = bash.lines().collect();
    for flag in ["--cuda)", "--gpus)", "--only)", "--skip)", "--name)"] {
        let at: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].trim() == flag)
            .collect();
        assert!(!at.is_empty(), "no {flag} in the bash script");
        for i in at {
            assert!(
                !lines[i + 1].contains("compgen -f"),
                "{flag} completes file names: {}",
                lines[i + 1]
            );
        }
    }
}

#[test]
fn man_pages_for_imgctl_and_each_subcommand() {
    let out = imgctl(&["man"]);
    assert!(out.status.success());
    let (page, _) = texts(&out);
    assert!(page.contains(".TH imgctl 1"), "{page}");
    assert!(
        page.contains(".SH SUBCOMMANDS") || page.contains("train\\-demo"),
        "{page}"
    );
    let out = imgctl(&["man", "train-demo"]);
    let (page, _) = texts(&out);
    assert!(page.contains(".TH imgctl-train-demo 1"), "{page}");
    assert!(page.contains("\\-\\-gradient\\-checkpointing"), "{page}");

    let out = imgctl(&["man", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    let (_, stderr) = texts(&out);
    assert!(
        stderr.starts_with("error: no subcommand `nope`\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: the pages are: build, render, verify, train-demo"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().unwrap();
    let out = imgctl(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    let mut want: Vec<String> = subcommands()
        .iter()
        .map(|s| format!("imgctl-{s}.1"))
        .collect();
    want.push("imgctl.1".into());
    want.sort();
    assert_eq!(pages, want);
}

/// Runs imgctl at the repository root with `COLUMNS` set (or removed).
fn imgctl_columns(args: &[&str], columns: Option<&str>) -> std::process::Output {
    let mut cmd = std::process::Command::new(crate::common::imgctl_bin());
    cmd.args(args)
        .current_dir(crate::common::repo_root())
        .env("NO_COLOR", "1");
    match columns {
        Some(c) => cmd.env("COLUMNS", c),
        None => cmd.env_remove("COLUMNS"),
    };
    cmd.output().expect("run imgctl")
}

/// Lines wider than `width` terminal columns (every character here takes one).
fn too_wide(text: &str, width: usize) -> Vec<String> {
    text.lines()
        .filter(|l| l.chars().count() > width)
        .map(str::to_string)
        .collect()
}

#[test]
fn tables_fit_columns_80() {
    // COLUMNS forces the width even though the output is piped.
    let out = imgctl_columns(&["verify", "--expect-gpus", "0"], Some("80"));
    let (stdout, stderr) = texts(&out);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("verify passed") || stderr.contains("verify FAILED"),
        "{stderr}"
    );
    assert!(stderr.contains("torch.version"), "{stderr}");
    let wide = too_wide(&stderr, 80);
    assert!(
        wide.is_empty(),
        "lines over 80 columns:\n{}",
        wide.join("\n")
    );
    // Cut text says where the rest is.
    assert!(stderr.contains("--json"), "{stderr}");

    let out = imgctl_columns(&["specs"], Some("80"));
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stderr}");
    for needle in [
        "cu124 (default)",
        "2.7.0+cu126",
        "9.5.1.17",
        "525.60.13",
        "pip lock",
    ] {
        assert!(stdout.contains(needle), "{needle:?} not in:\n{stdout}");
    }
    let wide = too_wide(&format!("{stdout}{stderr}"), 80);
    assert!(
        wide.is_empty(),
        "lines over 80 columns:\n{}",
        wide.join("\n")
    );
    // The columns left out are named, with where they are (#53 F17).
    assert!(
        stderr.contains("left out to fit 80 columns: --cuda"),
        "{stderr}"
    );

    // -v adds every field in full, wrapped to the width.
    let out = imgctl_columns(&["-v", "specs"], Some("80"));
    let (stdout, _) = texts(&out);
    assert!(stdout.contains("nvidia/cuda:12.4.1"), "{stdout}");
    assert!(stdout.contains("native"), "{stdout}");
    assert!(too_wide(&stdout, 80).is_empty(), "{stdout}");
}

#[test]
fn piped_output_has_no_progress_or_escapes() {
    for args in [
        &["verify", "--expect-gpus", "0"][..],
        &["verify", "--expect-gpus", "0", "--json"][..],
        &["specs"][..],
    ] {
        let out = imgctl_columns(args, None);
        let (stdout, stderr) = texts(&out);
        for (name, text) in [("stdout", &stdout), ("stderr", &stderr)] {
            assert!(
                !text.contains('\x1b'),
                "{args:?} {name} has an escape:\n{text}"
            );
            assert!(
                !text.contains('\r'),
                "{args:?} {name} has a carriage return:\n{text}"
            );
            assert!(
                !text.contains("verify ["),
                "{args:?} {name} has a progress bar:\n{text}"
            );
        }
        // Piped and without COLUMNS, tables keep every column in full.
        if args == ["specs"] {
            assert!(stdout.contains("nvidia/cuda:12.4.1"), "{stdout}");
        }
    }
}

/// Data that cannot be written to stdout is exit 1 with one line
/// (reliability and security III, N12): every `--json`, `completions`,
/// `man`, `render` and `--list-checks` used to exit 0 with nothing written
/// to /dev/full.
#[test]
fn a_failed_write_to_stdout_is_exit_1() {
    for args in [
        &["specs", "--json"][..],
        &["specs"],
        &["render", "--cuda", "12.4"],
        &["completions", "bash"],
        &["man"],
        &["verify", "--list-checks"],
        &["lock", "--cuda", "12.4", "--check", "--json"],
        &["build", "--cuda", "12.4", "--dry-run", "--json"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = std::process::Command::new(crate::common::imgctl_bin())
            .args(args)
            .env("NO_COLOR", "1")
            .stdout(full)
            .output()
            .unwrap();
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("error: cannot write the output to stdout: No space left on device"),
            "{args:?}: {stderr}"
        );
    }
}

/// `render -o` and `verify --junit` replace their file whole or not at all
/// (reliability and security III, N13): on a full disk the previous file used
/// to become a fragment. A 64 KiB tmpfs, filled up, is the full disk.
#[test]
fn output_files_survive_a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&disk)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount a tmpfs (the tests run as root)");
    struct Unmount<'a>(&'a std::path::Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(&disk);
    let dockerfile = disk.join("Dockerfile");
    let junit = disk.join("junit.xml");
    let previous = "previous contents\n".repeat(8);
    std::fs::write(&dockerfile, &previous).unwrap();
    std::fs::write(&junit, &previous).unwrap();
    // Fill what is left.
    let filler = disk.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    while std::io::Write::write_all(&mut f, &[0u8; 4096]).is_ok() {}
    drop(f);
    for (args, path) in [
        (
            vec![
                "render",
                "--cuda",
                "12.4",
                "-o",
                dockerfile.to_str().unwrap(),
            ],
            &dockerfile,
        ),
        (
            vec![
                "verify",
                "--level",
                "quick",
                "--expect-gpus",
                "0",
                "--junit",
                junit.to_str().unwrap(),
            ],
            &junit,
        ),
    ] {
        let out = imgctl(&args);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("No space left on device"),
            "{args:?}: {stderr}"
        );
        assert_eq!(std::fs::read_to_string(path).unwrap(), previous, "{args:?}");
    }
    // No temporary file is left behind.
    let mut names: Vec<String> = std::fs::read_dir(&disk)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["Dockerfile", "filler", "junit.xml"]);
}

/// `error:` and `hint:` are coloured as cargo colours them when colour is
/// on (`--color always`), and plain otherwise: the text is the same.
#[test]
fn error_labels_are_coloured_like_cargos_only_when_colour_is_on() {
    let coloured = imgctl(&["--color", "always", "render", "--cuda", "9.9"]);
    let (_, stderr) = texts(&coloured);
    assert_eq!(coloured.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("\x1b[1;31merror\x1b[0m: unknown --cuda '9.9'"),
        "{stderr:?}"
    );
    assert!(
        stderr.contains("\n\x1b[1;36mhint\x1b[0m: `imgctl specs`"),
        "{stderr:?}"
    );
    let plain = imgctl(&["render", "--cuda", "9.9"]);
    let (_, plain_err) = texts(&plain);
    assert!(!plain_err.contains('\x1b'), "{plain_err:?}");
    assert_eq!(
        stderr
            .replace("\x1b[1;31m", "")
            .replace("\x1b[1;36m", "")
            .replace("\x1b[0m", ""),
        plain_err
    );
}

/// The table of JSON outputs (docs/reference/json.md) states each
/// document's `schema_version`: the cheap commands are run, the rest read
/// from the constants their documents are built from.
#[cfg(feature = "torch")]
#[test]
fn every_json_output_carries_the_schema_version_the_readme_states() {
    let readme =
        std::fs::read_to_string(crate::common::repo_root().join("docs/reference/json.md")).unwrap();
    let table: Vec<&str> = readme
        .split("# JSON outputs")
        .nth(1)
        .expect("a JSON outputs section")
        .lines()
        .filter(|l| l.starts_with("| `imgctl "))
        .collect();
    assert!(table.len() >= 9, "{table:?}");
    let stated = |command: &str| -> u64 {
        let row = table
            .iter()
            .find(|l| l.starts_with(&format!("| `{command}")))
            .unwrap_or_else(|| panic!("no row in docs/reference/json.md for {command}"));
        row.split('|').nth(3).unwrap().trim().parse().unwrap()
    };
    let root = crate::common::repo_root();
    for (command, args) in [
        ("imgctl specs --json", vec!["specs", "--json"]),
        (
            "imgctl build --dry-run --json",
            vec!["build", "--cuda", "12.4", "--dry-run", "--json"],
        ),
        (
            "imgctl lock --json",
            vec!["lock", "--all", "--check", "--json"],
        ),
        (
            "imgctl verify --json",
            vec![
                "verify",
                "--expect-gpus",
                "0",
                "--only",
                "torch.version",
                "--json",
            ],
        ),
    ] {
        let out = std::process::Command::new(crate::common::imgctl_bin())
            .args(&args)
            .current_dir(&root)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let (stdout, stderr) = texts(&out);
        let v: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{command}: {e}\n{stderr}"));
        assert_eq!(
            v["schema_version"].as_u64(),
            Some(stated(command)),
            "{command}"
        );
    }
    assert_eq!(
        stated("imgctl build --json"),
        u64::from(imgctl::commands::build::REPORT_SCHEMA_VERSION)
    );
    assert_eq!(
        stated("imgctl verify --fleet --json"),
        u64::from(imgctl::verify::fleet::FLEET_SCHEMA_VERSION)
    );
    assert_eq!(
        stated("imgctl train-demo --json"),
        u64::from(imgctl::train::summary::SUMMARY_SCHEMA_VERSION)
    );
    assert_eq!(
        stated("imgctl train-demo --benchmark --json"),
        u64::from(imgctl::train::bench::SCHEMA_VERSION)
    );
    assert_eq!(
        stated("imgctl train-demo --benchmark --op-profile --json"),
        u64::from(imgctl::train::bench::ops::SCHEMA_VERSION)
    );
    assert_eq!(
        stated("imgctl sample --json"),
        u64::from(imgctl::commands::sample::SAMPLE_REPORT_VERSION)
    );
    for command in ["imgctl up --json", "imgctl ps --json"] {
        assert_eq!(
            stated(command),
            u64::from(imgctl::commands::workstation::SCHEMA_VERSION),
            "{command}"
        );
    }
}

/// #29 item 3.10: on a terminal, messages break between words at its width
/// (here `COLUMNS` under `script`'s pseudo-terminal), continuation lines
/// indented; in a pipe each message stays one line, for logs and grep.
#[test]
fn messages_wrap_between_words_on_a_terminal_and_stay_whole_in_a_pipe() {
    let bin = imgctl_bin();
    let shell = format!(
        "COLUMNS=60 NO_COLOR=1 {} render --cuda 12.4 > /dev/null",
        bin.display()
    );
    // util-linux's script(1) runs the command on a pseudo-terminal.
    let out = Command::new("script")
        .args(["-qec", &shell, "/dev/null"])
        .output()
        .expect("run script(1) (util-linux)");
    let seen = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(out.status.success(), "{seen}");
    let note: Vec<&str> = seen
        .lines()
        .take_while(|l| !l.starts_with("pip lock:"))
        .collect();
    assert!(note.len() >= 3, "the note was not wrapped:\n{seen}");
    assert!(note[0].starts_with("note: cu124: "), "{seen}");
    assert!(note[1..].iter().all(|l| l.starts_with("  ")), "{seen}");
    assert!(
        note.iter().all(|l| l.chars().count() <= 60),
        "a line is wider than the terminal:\n{seen}"
    );
    // The same words in the same order as the one line a pipe gets.
    let piped = Command::new(&bin)
        .args(["render", "--cuda", "12.4"])
        .env("COLUMNS", "60")
        .env("NO_COLOR", "1")
        .output()
        .expect("run imgctl");
    let (_, stderr) = texts(&piped);
    let line = stderr.lines().next().expect("a note");
    assert!(
        line.starts_with("note: cu124: ") && line.chars().count() > 60,
        "{stderr}"
    );
    let words = |t: &str| t.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(words(&note.join(" ")), words(line));
}

/// #29 item 3.9: every option that takes a value shows its default in
/// `--help` (clap's `[default: …]`, or the same words in its help where the
/// default is computed), unless leaving it out means "none": those are
/// listed here, and a new option must join one side or the other.
#[test]
fn every_option_with_a_value_shows_its_default_or_means_none_without_it() {
    use clap::CommandFactory;
    const NONE_WITHOUT_IT: &[&str] = &[
        "build --spec",
        "build --ca-cert",
        "build --ca-cert-secret",
        "build --build-arg",
        "build --label",
        "render --spec",
        "render --ca-cert",
        "render --ca-cert-secret",
        "verify --image",
        "verify --only",
        "verify --skip",
        "verify --junit",
        "verify --mount",
        "train-demo --config",
        "train-demo --init-from",
        "lock --spec",
    ];
    let mut missing = Vec::new();
    let cli = imgctl::cli::Cli::command();
    for sub in cli.get_subcommands() {
        for arg in sub.get_arguments() {
            if arg.is_positional()
                || arg.is_hide_set()
                || arg.is_required_set()
                || !arg.get_action().takes_values()
            {
                continue;
            }
            let long = format!(
                "{} --{}",
                sub.get_name(),
                arg.get_long().unwrap_or_default()
            );
            let help = format!(
                "{}{}",
                arg.get_help().map(|h| h.to_string()).unwrap_or_default(),
                arg.get_long_help()
                    .map(|h| h.to_string())
                    .unwrap_or_default()
            );
            let shown = !arg.get_default_values().is_empty() || help.contains("[default:");
            if !shown && !NONE_WITHOUT_IT.contains(&long.as_str()) {
                missing.push(long);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "no default shown:\n{}",
        missing.join("\n")
    );
}
