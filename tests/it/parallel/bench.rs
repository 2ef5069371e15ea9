//! The CPU benchmark over ranks: its JSON, bf16 gradient reduction, scaling, and the
//! PyTorch reference comparison.
use super::*;

#[test]
fn cpu_benchmark_reports_a_sane_json() {
    let dir = tempfile::tempdir().unwrap();
    let v = small_bench(dir.path(), None, "3", &[]);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["kind"], "imgctl.train_benchmark");
    assert_eq!(v["world_size"], 1);
    assert_eq!(v["global_batch"], 2);
    assert_eq!(v["timed_steps"], 3);
    assert_eq!(v["device_name"], "cpu");
    assert!(v["img_per_s"].as_f64().unwrap() > 0.0, "{v}");
    let b = &v["breakdown_ms"];
    for k in ["data", "forward", "backward", "optimizer"] {
        assert!(b[k].as_f64().unwrap() >= 0.0, "{k}: {v}");
    }
    // One rank all-reduces nothing: only the call's own overhead shows.
    let total = b["total"].as_f64().unwrap();
    assert!(b["all_reduce"].as_f64().unwrap() < 0.05 * total, "{v}");
    assert!(b["forward"].as_f64().unwrap() > 0.0 && b["backward"].as_f64().unwrap() > 0.0);
    assert!(v["memory"].is_null(), "no device memory on the CPU");
    assert!(v["flops"]["mfu"].is_null());
    assert!(v["flops"]["train_flops_per_image"].as_f64().unwrap() > 0.0);
    assert!(v["last_loss"].as_f64().unwrap().is_finite());
}

#[test]
fn bf16_gradients_are_reduced_in_fp32_unless_bf16_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let fp32 = bf16_two_rank_bench(dir.path(), &[]);
    let bf16 = bf16_two_rank_bench(dir.path(), &["--grad-reduce", "bf16"]);
    let params = fp32["params"].as_u64().unwrap();
    assert_eq!(fp32["world_size"], 2, "{fp32}");
    assert_eq!(fp32["precision"], "bf16");
    assert_eq!(fp32["grad_reduce"], "fp32", "DDP's numerics by default");
    // The flat buffer reduced holds every parameter plus the gaps that start
    // each one on a 128-element boundary (under 5 % here).
    let padded = |v: &serde_json::Value, elem: u64| {
        let bytes = v["all_reduce_bytes_per_step"].as_u64().unwrap();
        assert_eq!(bytes % elem, 0, "{v}");
        let n = bytes / elem;
        assert!(
            n >= params && n * 100 <= params * 105,
            "{n} elements for {params} parameters"
        );
        n
    };
    let n32 = padded(&fp32, 4);
    assert_eq!(bf16["grad_reduce"], "bf16");
    assert_eq!(
        padded(&bf16, 2),
        n32,
        "bf16 halves the bytes of the same buffer"
    );
    for v in [&fp32, &bf16] {
        assert!(v["last_loss"].as_f64().unwrap().is_finite(), "{v}");
    }
    // Training with the fp32 reduction keeps the ranks bit-identical.
    train_with(dir.path(), "bf16", Some(2), 2, 2, &["--precision", "bf16"]);
    let hashes = dir.path().join("bf16-hashes");
    let h0 = std::fs::read_to_string(hashes.join("rank-0.txt")).unwrap();
    let h1 = std::fs::read_to_string(hashes.join("rank-1.txt")).unwrap();
    assert_eq!(h0.lines().count(), 2 + 2 * 2, "{h0}");
    assert_eq!(h0, h1, "ranks hold different parameters or gradients");
    let bad = run(&mut cmd(&[
        "train-demo",
        "--grad-reduce",
        "fp8",
        "--steps",
        "1",
    ]));
    assert_eq!(bad.status.code(), Some(2), "{}", texts(&bad).1);
    assert!(texts(&bad).1.contains("fp8"), "{}", texts(&bad).1);
}

#[test]
fn cpu_scaling_benchmark_over_two_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("scaling.png");
    let v = small_bench(
        dir.path(),
        Some(2),
        "3",
        &["--scaling", "--plot", chart.to_str().unwrap()],
    );
    assert_eq!(v["kind"], "imgctl.train_scaling");
    // The chart: img/s and efficiency panels against the rank count.
    let png = image::open(&chart).expect("the --plot chart").to_rgb8();
    assert_eq!((png.width(), png.height()), (960, 34 + 2 * 250));
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!(rows[0]["ranks"], 1);
    assert_eq!(rows[1]["ranks"], 2);
    assert!((rows[0]["efficiency"].as_f64().unwrap() - 1.0).abs() < 1e-12);
    assert!(rows[1]["efficiency"].as_f64().unwrap() > 0.0);
    let two = &v["runs"][1];
    assert_eq!(two["backend"], "cpu");
    assert_eq!(two["global_batch"], 4);
    assert!(
        two["breakdown_ms"]["all_reduce"].as_f64().unwrap() > 0.0,
        "{two}"
    );
}

#[test]
fn compare_runs_the_pytorch_reference_on_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("cmp");
    let v = json(&compare(
        dir.path(),
        "3",
        &["--precision", "bf16", "--out", out.to_str().unwrap()],
        &[],
    ));
    assert_eq!(v["kind"], "imgctl.train_compare");
    // The bar chart lands in --out by default.
    assert!(
        image::open(out.join("compare.png")).is_ok(),
        "no OUT/compare.png"
    );
    let eager = &v["pytorch"][0];
    assert_eq!(eager["mode"], "eager");
    assert_eq!(eager["ok"], true, "{eager}");
    assert_eq!(eager["params"], v["imgctl"]["params"], "same architecture");
    // torch's own choice of AdamW implementation is named (a loop on the
    // CPU), and diffusers' recipe: autocast over fp32 weights.
    assert_eq!(eager["optimizer"], "AdamW for-loop", "{eager}");
    assert_eq!(eager["recipe"], "autocast bf16, fp32 weights", "{eager}");
    assert!(v["ratio_vs_eager"].as_f64().unwrap() > 0.0);
    assert!(eager["last_loss"].as_f64().unwrap().is_finite());
    // The same framework with imgctl's recipe: fused AdamW, bf16 weights
    // over fp32 master weights.
    let matched = &v["pytorch"][1];
    assert_eq!(matched["mode"], "eager_matched", "{v}");
    assert_eq!(matched["ok"], true, "{matched}");
    assert_eq!(matched["optimizer"], "AdamW fused", "{matched}");
    assert_eq!(
        matched["recipe"], "bf16 weights over fp32 master weights",
        "{matched}"
    );
    assert!(matched["last_loss"].as_f64().unwrap().is_finite());
    assert!(v["ratio_vs_matched"].as_f64().unwrap() > 0.0);
    // Each reference's wall time, as imgctl measured it.
    for r in [eager, matched] {
        assert!(r["wall_s"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn compare_fails_when_the_reference_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let py = dir.path().join("python");
    // A Python without torch (the system python3 without its site-packages)
    // is refused before imgctl's half runs (#29 item 3.4), naming the
    // interpreter, what it lacks and IMGCTL_PYTHON.
    std::fs::write(&py, "#!/bin/sh\nexec python3 -S \"$@\"\n").unwrap();
    let mut perm = std::fs::metadata(&py).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&py, perm).unwrap();
    let started = std::time::Instant::now();
    let o = compare(
        dir.path(),
        "1",
        &[],
        &[("IMGCTL_PYTHON", py.to_str().unwrap())],
    );
    let (out, err) = texts(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let line = crate::common::one_error_line(&err);
    assert!(
        line.contains(&format!(
            "`{}` cannot import torch, diffusers: ModuleNotFoundError",
            py.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("hint: point IMGCTL_PYTHON at a Python with torch and diffusers"),
        "{err}"
    );
    assert!(
        out.is_empty() && !err.contains("img/s"),
        "imgctl's half ran:\n{err}"
    );
    assert!(started.elapsed().as_secs() < 60, "{:?}", started.elapsed());
    // One that imports fine, then crashes without a result: its last words,
    // after imgctl's own figures.
    std::fs::write(
        &py,
        "#!/bin/sh\ncase \"$1\" in -c) exit 0;; esac\necho 'Segmentation fault' >&2\nexit 139\n",
    )
    .unwrap();
    let o = compare(
        dir.path(),
        "1",
        &[],
        &[("IMGCTL_PYTHON", py.to_str().unwrap())],
    );
    let (out, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: the PyTorch reference did not run"),
        "{err}"
    );
    assert!(
        err.contains("printed no result (exit status: 139): Segmentation fault"),
        "{err}"
    );
    assert!(
        err.contains("hint: imgctl's own figures are above"),
        "{err}"
    );
    // imgctl's own figures are still there (table on stderr, JSON on stdout).
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(v["imgctl"]["img_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["pytorch"][0]["ok"], false, "{v}");
}

/// `--channels-last` and `--gradient-checkpointing` both reach the
/// reference (so `--compare` stays like for like), and channels-last trains
/// alike.
#[test]
fn channels_last_trains_alike_and_reaches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let v = json(&compare(
        dir.path(),
        "2",
        &["--channels-last", "--gradient-checkpointing"],
        &[],
    ));
    assert_eq!(v["imgctl"]["channels_last"], true, "{v}");
    assert_eq!(v["imgctl"]["gradient_checkpointing"], true, "{v}");
    assert_eq!(v["imgctl"]["cudnn_benchmark"], false, "not on the CPU");
    let eager = &v["pytorch"][0];
    assert_eq!(eager["ok"], true, "{eager}");
    assert_eq!(
        eager["channels_last"], true,
        "the flag reaches the reference"
    );
    assert_eq!(
        eager["gradient_checkpointing"], true,
        "the flag reaches the reference"
    );
    // The same run with and without channels-last: the same losses (the
    // layout changes the kernels' summation order, not the maths).
    let losses = |name: &str, extra: &[&str]| -> Vec<f64> {
        let out = train_with(dir.path(), name, None, 2, 4, extra);
        std::fs::read_to_string(out.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"]
                    .as_f64()
                    .unwrap()
            })
            .collect()
    };
    let (a, b) = (losses("nchw", &[]), losses("nhwc", &["--channels-last"]));
    assert_eq!(a.len(), 4);
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= 1e-4 * x.abs(), "{a:?} vs {b:?}");
    }
}

#[test]
fn a_reference_run_past_its_deadline_is_reported_not_ok() {
    let dir = tempfile::tempdir().unwrap();
    // Importing torch alone takes longer than 0.3 s. imgctl's figures are
    // still printed, but without its reference the comparison fails (exit 1).
    let o = compare(dir.path(), "2", &[], &[("IMGCTL_REFERENCE_TIMEOUT", "0.3")]);
    let (out, err) = texts(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error: the PyTorch reference did not run, so there is no comparison: "),
        "{err}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    let eager = &v["pytorch"][0];
    assert_eq!(eager["mode"], "eager");
    assert_eq!(eager["ok"], false, "{eager}");
    let why = eager["error"].as_str().unwrap();
    assert!(
        why.contains("stopped after") && why.contains("IMGCTL_REFERENCE_TIMEOUT"),
        "{why}"
    );
    // Its wall time up to the kill is reported, and without a terminal
    // each reference gets a start line and an end line with that time.
    let wall = eager["wall_s"].as_f64().unwrap();
    assert!(wall >= 0.3, "{eager}");
    assert!(
        err.contains("running the PyTorch reference (eager, with ")
            && err.contains("PyTorch reference (eager, with ")
            && err.contains(&format!("): did not run after {wall:.1} s")),
        "{err}"
    );
    assert!(
        v["ratio_vs_eager"].is_null(),
        "no ratio without a reference: {v}"
    );
    assert!(v["imgctl"]["img_per_s"].as_f64().unwrap() > 0.0);
    let bad = compare(
        dir.path(),
        "2",
        &[],
        &[("IMGCTL_REFERENCE_TIMEOUT", "soon")],
    );
    assert_eq!(bad.status.code(), Some(2), "{}", texts(&bad).1);
    assert!(
        texts(&bad).1.contains("IMGCTL_REFERENCE_TIMEOUT"),
        "{}",
        texts(&bad).1
    );
}

/// One CPU rank says "1 rank", and, as its backend is the single one (no
/// collective runs), reports no all-reduce. One NCCL rank (`--gpus 1`) runs
/// the real all-reduce and reports it (`grad_sync`): found missing on the
/// H200, where a one-rank NCCL summary had `grad_sync: null`; that path needs
/// a GPU (the device check's `nccl_world1` stage).
#[test]
fn one_cpu_rank_says_one_rank_and_reports_no_all_reduce() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = small_config(dir.path());
    let out = dir.path().join("one");
    let o = cmd(&[
        "train-demo",
        "--config",
        cfg.to_str().unwrap(),
        "--steps",
        "2",
        "--sample-every",
        "0",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ])
    .env("IMGCTL_CPU_RANKS", "1")
    .output()
    .unwrap();
    let (stdout, stderr) = texts(&o);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("data parallel: 1 rank, single backend"),
        "{stderr}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("--json summary");
    assert!(v["grad_sync"].is_null(), "{stdout}");
}
