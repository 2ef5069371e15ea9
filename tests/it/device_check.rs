//! The GPU issue's device script, rehearsed on the CPU (`DEVICE_CHECK_CPU=1`):
//! every stage of `scripts/device-check.sh` runs with a tiny model against the
//! imgctl under test, so the script cannot rot between the sessions that are
//! lent a GPU. What needs a GPU is only the figures, not the orchestration.
use std::process::Command;

use crate::common::{imgctl_bin, repo_root, texts, venv_python};

#[test]
fn device_check_rehearses_every_stage_on_the_cpu() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/device-check.sh"))
        .env("DEVICE_CHECK_CPU", "1")
        .env("DEVICE_CHECK_BUDGET_S", "900")
        .env("OUT", out_dir.path())
        .env("IMGCTL_BIN", imgctl_bin())
        .env("IMGCTL_PYTHON", venv_python())
        .env("NO_COLOR", "1")
        .output()
        .expect("run device-check.sh");
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let summary = std::fs::read_to_string(out_dir.path().join("summary.tsv")).unwrap();
    let mut stages = 0;
    for row in summary.lines().skip(1) {
        let cols: Vec<&str> = row.split('\t').collect();
        let (name, exit) = (cols[0], cols[1]);
        if exit == "skipped" {
            // Only what cannot run without a GPU (fp16 autocast) is skipped.
            assert!(
                cols[3].contains("needs a GPU"),
                "stage {name} was skipped: {row}"
            );
            continue;
        }
        // On one GPU (or none), --expect-gpus 2 must fail: that stage expects
        // exit 1; a batch beyond the device's memory is a usage error (exit 2).
        let want = match name {
            "verify_expect2" => "1",
            "budget_device" => "2",
            _ => "0",
        };
        assert_eq!(exit, want, "stage {name}: {row}\n{summary}\n{stderr}");
        stages += 1;
    }
    assert!(stages >= 15, "only {stages} stages ran:\n{summary}");
    // The stages each open issue's device part needs ran, and passed above.
    for must in [
        "verify_full",
        "fleet_full",
        "train_bf16",
        "bench_bf16",
        "op_profile_bf16",
    ] {
        assert!(
            summary.lines().any(|l| l.split('\t').next() == Some(must)),
            "stage {must} did not run:\n{summary}"
        );
    }
    assert!(out_dir.path().join("fleet-full-table.txt").is_file());
    assert!(out_dir.path().join("results.tar.gz").is_file());
    assert!(
        stderr.contains("best bf16 batch:"),
        "the sweep chose no batch:\n{stderr}"
    );
}
