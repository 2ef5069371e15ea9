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
            // Only what cannot run without a GPU (fp16 autocast, the fused
            // GroupNorm) is skipped, and the sweep's row of a lever not built.
            assert!(
                cols[3].contains("needs a GPU") || cols[3].starts_with("not built yet"),
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
        "sweep_baseline",
        "sweep_cl",
        "sweep_ref",
        "sweep_table",
    ] {
        assert!(
            summary.lines().any(|l| l.split('\t').next() == Some(must)),
            "stage {must} did not run:\n{summary}"
        );
    }
    assert!(out_dir.path().join("fleet-full-table.txt").is_file());
    // The lever sweep (issue 41) ran first and came back as a table: one row
    // per variant, figures where the CPU can measure them.
    let first = summary.lines().nth(2).unwrap_or_default();
    assert!(first.starts_with("sweep_baseline\t"), "{summary}");
    let sweep = std::fs::read_to_string(out_dir.path().join("sweep.tsv")).unwrap();
    let rows: Vec<Vec<&str>> = sweep.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 9, "{sweep}");
    assert_eq!(
        rows[0],
        [
            "variant",
            "img_per_s",
            "step_ms_median",
            "mfu",
            "peak_gib",
            "levers"
        ]
    );
    for r in &rows[1..] {
        assert_eq!(r.len(), 6, "{sweep}");
    }
    for (i, label) in [
        (1, "imgctl baseline"),
        (2, "imgctl + channels-last"),
        (6, "PyTorch eager, imgctl's recipe"),
    ] {
        assert!(rows[i][0].starts_with(label), "{sweep}");
        assert!(
            rows[i][1].parse::<f64>().is_ok_and(|v| v > 0.0),
            "no img/s: {sweep}"
        );
    }
    assert!(rows[4][5].contains("not built yet"), "{sweep}");
    assert!(out_dir.path().join("results.tar.gz").is_file());
    assert!(
        stderr.contains("best bf16 batch:"),
        "the sweep chose no batch:\n{stderr}"
    );
}
