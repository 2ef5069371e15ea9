//! verify tests: the real no-GPU path on this machine, usage errors, the
//! report formats, and `verify --image` against the real Docker engine (a
//! small image with this imgctl inside, the host's libtorch mounted read-only).
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{imgctl, imgctl_bin, texts};

pub(crate) mod image;

/// Whether this machine has an NVIDIA driver (then the no-GPU tests do not apply).
fn has_nvidia_driver() -> bool {
    // SAFETY: loading (and immediately unloading) the NVML library, as verify does.
    unsafe { libloading::Library::new("libnvidia-ml.so.1") }.is_ok()
}

fn json_of(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{stdout}"))
}

fn results<'a>(report: &'a serde_json::Value, id: &str) -> Vec<&'a serde_json::Value> {
    report["results"]
        .as_array()
        .expect("results array")
        .iter()
        .filter(|r| r["id"] == id)
        .collect()
}

fn status(report: &serde_json::Value, id: &str) -> String {
    let r = results(report, id);
    assert!(!r.is_empty(), "no result {id} in {report:#}");
    r[0]["status"].as_str().unwrap().to_string()
}

/// Checks an XML file is well-formed with Python's parser (the venv or the system's).
fn assert_well_formed_xml(path: &Path) {
    let venv = std::env::var("IMGCTL_VENV").map(|v| PathBuf::from(v).join("bin/python3"));
    let python = venv
        .ok()
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("python3"));
    let out = Command::new(python)
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])",
        ])
        .arg(path)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "JUnit XML is not well-formed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn no_gpu_default_fails_with_one_clear_line() {
    if has_nvidia_driver() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let out = imgctl(&["verify"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    let first = stderr.lines().next().unwrap_or("");
    assert_eq!(
        first,
        "error: no NVIDIA driver: libnvidia-ml.so.1 not found"
    );
    assert!(stderr.contains("hint: "), "{stderr}");
    assert!(stderr.contains("--expect-gpus 0"), "{stderr}");
    // No table of SKIPs that could be read as a pass.
    assert!(!stderr.contains("PASS"), "{stderr}");
}

#[test]
fn no_gpu_default_json_still_reports_the_failure() {
    if has_nvidia_driver() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let out = imgctl(&["verify", "--json", "--only", "nvml"]);
    let (stdout, _) = texts(&out);
    assert_eq!(out.status.code(), Some(1));
    let report = json_of(&stdout);
    assert_eq!(report["passed"], false);
    assert_eq!(status(&report, "nvml.driver"), "fail");
    assert_eq!(
        results(&report, "nvml.driver")[0]["message"],
        "no NVIDIA driver: libnvidia-ml.so.1 not found"
    );
    // torch's side names the CUDA runtime's own reason, from the libcudart
    // libtorch loaded (CUDA reports a missing driver as error 35).
    let out = imgctl(&["verify", "--json", "--only", "torch.cuda_available"]);
    let report = json_of(&texts(&out).0);
    let cuda = &results(&report, "torch.cuda_available")[0];
    assert_eq!(cuda["status"], "fail");
    assert_eq!(
        cuda["message"],
        "torch cannot use CUDA: CUDA error 35 (CUDA driver version is insufficient for CUDA runtime version)"
    );
    assert!(
        cuda["hint"]
            .as_str()
            .unwrap()
            .contains("no NVIDIA driver here"),
        "{cuda}"
    );
}

#[test]
fn expect_zero_passes_with_skips_json_and_junit() {
    if has_nvidia_driver() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("verify.xml");
    let out = imgctl(&[
        "verify",
        "--expect-gpus",
        "0",
        "--json",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = json_of(&stdout);
    assert_eq!(report["schema_version"], 1);
    assert_eq!(report["passed"], true);
    assert_eq!(report["expect_gpus"], "0");
    assert_eq!(report["level"], "quick");
    // Every NVML check is SKIP with a reason; none is PASS.
    for r in report["results"].as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        if id.starts_with("nvml.") {
            assert_eq!(r["status"], "skip", "{r}");
            assert!(
                r["message"].as_str().unwrap().contains("libnvidia-ml.so.1"),
                "{r}"
            );
        }
    }
    assert_eq!(report["summary"]["fail"], 0);
    assert_eq!(report["summary"]["error"], 0);
    // The table went to stderr, with its summary.
    assert!(stderr.contains("| nvml.driver"), "{stderr}");
    assert!(stderr.contains("verify passed:"), "{stderr}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_well_formed_xml(&junit);
    assert!(xml.contains("name=\"nvml.ecc[node]\""), "{xml}");
    assert!(xml.contains("<skipped message="), "{xml}");
    assert!(!xml.contains("<failure"), "{xml}");
    let cases = xml.matches("<testcase ").count();
    assert_eq!(cases, report["results"].as_array().unwrap().len());
}

#[cfg(feature = "torch")]
#[test]
fn torch_facts_and_library_provenance_on_cpu() {
    if has_nvidia_driver() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let out = imgctl(&["verify", "--expect-gpus", "0", "--json", "--only", "torch"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = json_of(&stdout);
    let version = &results(&report, "torch.version")[0];
    assert_eq!(version["status"], "pass", "{version}");
    assert!(
        version["measured"].as_str().unwrap().starts_with("2.7.0"),
        "{version}"
    );
    // No GPU and none expected: honest SKIP, not PASS.
    assert_eq!(status(&report, "torch.cuda_available"), "skip");
    // The libraries libtorch_cuda.so maps, with the versions they report, from
    // the wheel folders of the venv torch lives in.
    for (id, lib, version) in [
        ("torch.cudart_loaded", "libcudart.so.12", "12.6"),
        ("torch.cublas_loaded", "libcublas.so.12", "12.6.4"),
        ("torch.cudnn_loaded", "libcudnn.so.9", "9.5.1"),
        ("torch.nccl_loaded", "libnccl.so.2", "2.26.2"),
    ] {
        let r = &results(&report, id)[0];
        assert_eq!(r["status"], "pass", "{r}");
        let measured = r["measured"].as_str().unwrap();
        assert!(measured.starts_with(version), "{measured}");
        assert!(
            measured.contains("/site-packages/nvidia/") && measured.ends_with(lib),
            "{measured}"
        );
    }
}

#[cfg(feature = "torch")]
#[test]
fn pin_mismatch_from_the_environment_fails() {
    if has_nvidia_driver() {
        eprintln!("skipped: this machine has an NVIDIA driver");
        return;
    }
    let out = Command::new(imgctl_bin())
        .args([
            "verify",
            "--expect-gpus",
            "0",
            "--json",
            "--only",
            "torch.version",
            "torch.cudnn_loaded",
            "torch.cublas_loaded",
        ])
        .env("NO_COLOR", "1")
        .env(
            "IMGCTL_VERIFY_PINS",
            r#"{"torch":"2.6.0","cudnn":"9.1.0.70"}"#,
        )
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report = json_of(&stdout);
    assert_eq!(status(&report, "torch.version"), "fail");
    let cudnn = &results(&report, "torch.cudnn_loaded")[0];
    assert_eq!(cudnn["status"], "fail");
    assert!(
        cudnn["threshold"].as_str().unwrap().contains("9.1.0.70"),
        "{cudnn}"
    );
    // cuBLAS, which the pins leave out, is held to the loaded wheel's METADATA.
    let cublas = &results(&report, "torch.cublas_loaded")[0];
    assert_eq!(cublas["status"], "pass", "{cublas}");
    assert!(
        cublas["threshold"].as_str().unwrap().contains("12.6.4.1")
            && cublas["threshold"].as_str().unwrap().contains("gaps from"),
        "{cublas}"
    );
    assert!(stderr.contains("verify FAILED"), "{stderr}");
}

#[test]
fn list_checks_names_every_check_with_its_level() {
    let out = imgctl(&["verify", "--list-checks", "--json"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, imgctl::verify::all_ids());
    let level = |id: &str| rows.iter().find(|r| r["id"] == id).unwrap()["level"].clone();
    assert_eq!(level("nvml.ecc"), "quick");
    assert_eq!(level("func.nccl_allreduce"), "full");
    assert!(rows
        .iter()
        .all(|r| !r["description"].as_str().unwrap().is_empty()));
    let out = imgctl(&["verify", "--list-checks"]);
    let (stdout, _) = texts(&out);
    assert!(stdout.contains("host.gpu_uuids") && stdout.contains("what it checks"));
}

#[test]
fn usage_errors_exit_2() {
    let out = imgctl(&["verify", "--expect-gpus", "two"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: --expect-gpus takes a number or `any`, not `two`"),
        "{stderr}"
    );

    let out = imgctl(&["verify", "--only", "nvml.eccc"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: unknown check id(s): nvml.eccc"),
        "{stderr}"
    );
    assert!(stderr.contains("valid ids"), "{stderr}");
    assert!(stderr.contains("nvml.ecc,"), "{stderr}");
    assert!(stderr.contains("torch.cudnn_loaded"), "{stderr}");

    let out = imgctl(&["verify", "--skip", "bogus"]);
    assert_eq!(out.status.code(), Some(2));

    let out = imgctl(&["verify", "--check-timeout", "0"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--check-timeout"), "{stderr}");

    let out = imgctl(&["verify", "--image", "imgctl-test/none:x", "--gpus", "0,x"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: --gpus \"0,x\" is a malformed GPU list: \"x\" is not a device index or a GPU-/MIG- UUID\n"
        ),
        "{stderr}"
    );

    // --level is checked by clap (its message: tests/it/cli.rs).
    assert_eq!(
        imgctl(&["verify", "--level", "slow"]).status.code(),
        Some(2)
    );

    // A selection that leaves nothing to run cannot pass on nothing.
    for (args, line) in [
        (
            &["verify", "--expect-gpus", "0", "--only", "host.gpu_uuids"][..],
            "error: --only host.gpu_uuids selects host-side checks, which run only with --image",
        ),
        (
            &["verify", "--only", "torch.version", "--skip", "torch"][..],
            "error: --only / --skip leave no check to run",
        ),
        (
            &["verify", "--gpus", "2"][..],
            "error: the following required arguments were not provided",
        ),
        (
            &["verify", "--image", "Not A Tag!!", "--expect-gpus", "0"][..],
            "error: invalid --image 'Not A Tag!!': 'Not A Tag!!' is not a lower-case path component",
        ),
        (
            &["verify", "--image", "", "--expect-gpus", "0"][..],
            "error: invalid --image '': it is empty",
        ),
    ] {
        let out = imgctl(args);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with(line), "{args:?}: {stderr}");
    }
}

#[test]
fn selection_runs_only_what_was_asked() {
    let out = imgctl(&[
        "verify",
        "--expect-gpus",
        "0",
        "--json",
        "--only",
        "nvml",
        "--skip",
        "nvml.ecc",
    ]);
    let report = json_of(&texts(&out).0);
    let ids: Vec<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(ids.iter().all(|i| i.starts_with("nvml.")), "{ids:?}");
    assert!(!ids.contains(&"nvml.ecc"));
    assert!(ids.contains(&"nvml.pcie"));
}

// ---------------------------------------------------------------------------
// verify --image against the real engine

#[test]
fn empty_or_control_character_check_ids_are_usage_errors() {
    // `--only ''` selected every check (an empty prefix matches all).
    for flag in ["--only", "--skip"] {
        let out = imgctl(&["verify", "--expect-gpus", "0", flag, ""]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "error: {flag} '' names no check (an empty id would select every one)\n"
            )),
            "{stderr}"
        );
        assert!(stderr.contains("\nhint: "), "{stderr}");
    }
    // An unknown id with a newline or escape is quoted and escaped, on one line.
    let out = imgctl(&["verify", "--only", "nvml\nerror: fake\x1b[31m"]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: unknown check id(s): \"nvml\\nerror: fake\\u{1b}[31m\"\n"),
        "{stderr}"
    );
}

#[test]
fn junit_paths_are_checked_before_the_checks_run() {
    // `--junit DIR` ran every check, then failed writing (exit 1, report lost).
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope/report.xml");
    for path in [dir.path().to_path_buf(), missing] {
        let out = imgctl(&[
            "verify",
            "--expect-gpus",
            "0",
            "--junit",
            path.to_str().unwrap(),
        ]);
        let (_, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.starts_with(&format!("error: --junit {}", path.display())),
            "nothing may run before the error:\n{stderr}"
        );
    }
    let out = imgctl(&[
        "verify",
        "--expect-gpus",
        "0",
        "--junit",
        dir.path().to_str().unwrap(),
    ]);
    let (_, stderr) = texts(&out);
    assert!(
        stderr.starts_with(&format!(
            "error: --junit {0} is a directory; it takes a file path (e.g. {0}/report)\n",
            dir.path().display()
        )),
        "{stderr}"
    );
}
