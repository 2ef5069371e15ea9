//! Inputs refused before the first step: settings, hostile model settings, bad data
//! folders, bad flags, what the host cannot hold, inputs that would hang or exhaust.
use super::*;

/// `sample_steps: 5000` used to train until the first sample grid, then
/// fail with nothing saved: it is exit 2 before the first step now.
#[test]
fn train_settings_are_validated_before_the_first_step() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let config = dir.path().join("c.yaml");
    std::fs::write(&config, "training:\n  sample_steps: 5000\n").unwrap();
    let args = [
        "--steps",
        "2",
        "--batch-size",
        "2",
        "--sample-every",
        "2",
        "--config",
        config.to_str().unwrap(),
    ];
    let (_, stderr) = assert_code(&train_sampling(&out, &args), 2);
    assert!(
        stderr.contains("error: invalid training setting: sample_steps is 5000, more than the scheduler's 1000 train timesteps")
            && stderr.contains("hint: use 1 to 1000 sampling steps"),
        "{stderr}"
    );
    assert!(!out.join("metrics.jsonl").exists(), "it trained: {stderr}");
}

/// Hostile model and training settings, from a two-line `--config` or from a
/// checkpoint's `state.json`, are one line and exit 2 before anything is
/// built (reliability and security III, N5 and N6): they used to panic
/// (division by zero), print raw libtorch text, or abort in allocation (134).
#[test]
fn hostile_model_settings_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.yaml");
    for (yaml, line) in [
        (
            "model:\n  attn_norm_num_groups: 0\n",
            "error: invalid model config: attn_norm_num_groups is 0",
        ),
        (
            "model:\n  attn_norm_num_groups: -1\n",
            "error: invalid model config: attn_norm_num_groups is -1",
        ),
        (
            "model:\n  layers_per_block: 1000000000\n",
            "error: invalid model config: layers_per_block is 1000000000, more than 16",
        ),
        (
            "model:\n  block_out_channels: [32, 1000000000]\n",
            "error: invalid model config: a block's channels is 1000000000, more than 8192",
        ),
        (
            "training:\n  prefetch: 1000000000\n",
            "error: invalid training setting: prefetch is 1000000000, more than 64",
        ),
        (
            "model:\n  block_out_channels: [8192, 8192]\n",
            "error: the model has 18389131267 parameters, whose fp32 copies need about 411.0 GiB",
        ),
    ] {
        std::fs::write(&config, yaml).unwrap();
        let out = dir.path().join("never");
        let o = train(
            &out,
            &["--steps", "1", "--config", config.to_str().unwrap()],
            &[],
        );
        let (_, stderr) = assert_code(&o, 2);
        assert!(stderr.starts_with(line), "{yaml}: {stderr}");
        assert!(stderr.contains("\nhint: "), "{yaml}: {stderr}");
    }
    // A checkpoint whose state.json names a head dimension of 0.
    let out = dir.path().join("run");
    assert_code(&train(&out, &["--steps", "1", "--batch-size", "2"], &[]), 0);
    let ck = checkpoint::latest(&out).unwrap();
    let state_path = ck.join(checkpoint::STATE_FILE);
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state_path).unwrap()).unwrap();
    state["config"]["model"]["attention_head_dim"] = serde_json::json!(0);
    std::fs::write(&state_path, serde_json::to_string(&state).unwrap()).unwrap();
    let png = dir.path().join("grid.png");
    let o = run_env(
        &[
            "sample",
            "--checkpoint",
            ck.to_str().unwrap(),
            "--device",
            "cpu",
            "--num",
            "1",
            "--steps",
            "2",
            "--out",
            png.to_str().unwrap(),
        ],
        &[],
    );
    let (_, stderr) = assert_code(&o, 2);
    assert!(
        stderr.starts_with(&format!("error: the model in {}", state_path.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("attention_head_dim 0 does not fit"),
        "{stderr}"
    );
    assert!(!png.exists());
}

/// An empty folder and a folder of only unreadable files are exit 2 before
/// training; unreadable files among good ones are skipped and counted.
#[test]
fn train_bad_data_folders() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = dir.path().join("out");
    let (_, stderr) = assert_code(
        &train(
            &out,
            &["--data", empty.to_str().unwrap(), "--steps", "1"],
            &[],
        ),
        2,
    );
    assert!(stderr.contains("holds no PNG or JPEG images"), "{stderr}");
    assert!(
        !out.join("metrics.jsonl").exists(),
        "nothing may be written before the data check"
    );

    let junk = dir.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    std::fs::write(junk.join("a.png"), b"not a png").unwrap();
    let (_, stderr) = assert_code(
        &train(
            &out,
            &["--data", junk.to_str().unwrap(), "--steps", "1"],
            &[],
        ),
        2,
    );
    assert!(
        stderr.contains("no readable images") && stderr.contains("a.png"),
        "{stderr}"
    );

    let missing = dir.path().join("missing");
    let (_, stderr) = assert_code(
        &train(
            &out,
            &["--data", missing.to_str().unwrap(), "--steps", "1"],
            &[],
        ),
        2,
    );
    assert!(stderr.contains("cannot read the data folder"), "{stderr}");

    // Three good images (different sizes and formats), two broken ones: one
    // fails the header probe, one (a truncated PNG) fails only when decoded.
    let mixed = dir.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    write_png(&mixed.join("good1.png"), 40, 48, 10);
    write_png(&mixed.join("good2.png"), 64, 32, 200);
    image::RgbImage::from_fn(50, 50, |x, y| image::Rgb([x as u8 * 4, y as u8 * 4, 90]))
        .save(mixed.join("good3.jpg"))
        .unwrap();
    std::fs::write(mixed.join("broken.jpg"), b"\xff\xd8 garbage").unwrap();
    let full = std::fs::read(mixed.join("good1.png")).unwrap();
    std::fs::write(mixed.join("truncated.png"), &full[..40]).unwrap();
    std::fs::write(mixed.join("notes.txt"), b"ignored").unwrap();
    let out2 = dir.path().join("out2");
    let o = train(
        &out2,
        &[
            "--data",
            mixed.to_str().unwrap(),
            "--steps",
            "3",
            "--batch-size",
            "4",
            "--json",
        ],
        &[],
    );
    let (stdout, stderr) = assert_code(&o, 0);
    let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(s["data"]["source"], "folder");
    let unreadable: Vec<String> = s["data"]["unreadable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            u["path"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(s["data"]["unreadable_files"], 2, "{s}");
    assert!(
        unreadable.contains(&"broken.jpg".to_string()),
        "{unreadable:?}"
    );
    assert!(
        unreadable.contains(&"truncated.png".to_string()),
        "{unreadable:?}"
    );
    assert!(stderr.contains("2 unreadable file(s) skipped"), "{stderr}");
}

/// Bad flags and files end with exit 2 and a cause before any training.
#[test]
fn train_bad_inputs_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    // --preset's values are clap's (tests/it/cli.rs); a config file's
    // `preset:` takes the same names, and a misspelt one says which it meant.
    let misspelt = dir.path().join("misspelt.yaml");
    std::fs::write(&misspelt, "preset: tinyy\n").unwrap();
    let o = run_env(
        &[
            "train-demo",
            "--config",
            misspelt.to_str().unwrap(),
            "--steps",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    let (_, stderr) = assert_code(&o, 2);
    assert!(
        stderr.contains("unknown model preset `tinyy`")
            && stderr.contains("hint: did you mean `tiny`? The presets are: default, tiny, smoke"),
        "{stderr}"
    );
    let o = run_env(
        &[
            "train-demo",
            "--device",
            "tpu",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    let (_, stderr) = assert_code(&o, 2);
    assert!(
        stderr.contains("unknown device `tpu`") && stderr.contains("hint:"),
        "{stderr}"
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--precision", "fp16"], "fp16 needs a CUDA device"),
        (vec!["--batch-size", "0"], "--batch-size 0"),
        (
            vec!["--gpus", "2"],
            "--device and --gpus both choose devices",
        ),
        (vec!["--resume"], "no checkpoint"),
    ];
    for (extra, want) in cases {
        let mut args = vec!["--steps", "1"];
        args.extend(extra.iter().copied());
        let (_, stderr) = assert_code(&train(&out, &args, &[]), 2);
        assert!(
            stderr.contains(want),
            "{extra:?}: want `{want}` in:\n{stderr}"
        );
        assert!(stderr.contains("hint:"), "{extra:?}: no hint in:\n{stderr}");
    }

    // A config file with an unknown key names it.
    let cfg = dir.path().join("bad.yaml");
    std::fs::write(&cfg, "training:\n  stepz: 3\n").unwrap();
    let (_, stderr) = assert_code(&train(&out, &["--config", cfg.to_str().unwrap()], &[]), 2);
    assert!(
        stderr.contains("stepz") && stderr.contains("bad.yaml"),
        "{stderr}"
    );
    // A config file that is fine trains with its settings.
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "preset: tiny\ntraining:\n  steps: 1\n  batch_size: 2\n",
    )
    .unwrap();
    let (stdout, _) = assert_code(
        &train(
            &dir.path().join("good"),
            &["--config", good.to_str().unwrap(), "--json"],
            &[],
        ),
        0,
    );
    let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (s["final_step"].as_u64(), s["batch_size"].as_u64()),
        (Some(1), Some(2))
    );

    // An output directory that cannot be created (a path under a regular file).
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let (_, stderr) = assert_code(&train(&file.join("sub"), &["--steps", "1"], &[]), 2);
    assert!(
        stderr.contains("cannot write to the output directory"),
        "{stderr}"
    );

    // --init-from with the wrong keys lists them.
    let bad_weights = dir.path().join("w.safetensors");
    write_tensors(
        &bad_weights,
        &[
            (
                "conv_in.weight".to_string(),
                Tensor::zeros([32, 3, 3, 3], (Kind::Float, Device::Cpu)),
            ),
            (
                "not_a_layer.weight".to_string(),
                Tensor::zeros([2], (Kind::Float, Device::Cpu)),
            ),
        ],
        None,
    )
    .unwrap();
    let (_, stderr) = assert_code(
        &train(
            &out,
            &["--steps", "1", "--init-from", bad_weights.to_str().unwrap()],
            &[],
        ),
        2,
    );
    assert!(
        stderr.contains("missing key") && stderr.contains("not_a_layer.weight"),
        "{stderr}"
    );
}

/// Settings far beyond the host's memory or CPUs are usage errors naming the
/// largest value that fits, before anything is allocated: they used to abort
/// in the allocator (exit 134) or panic (exit 101).
#[test]
fn settings_beyond_the_host_are_refused_with_the_largest_that_fits() {
    let dir = tempfile::tempdir().unwrap();
    let first_line = |o: &Output, code: i32| {
        let (_, err) = assert_code(o, code);
        assert!(err.contains("\nhint: "), "{err}");
        err.lines().next().unwrap().to_string()
    };
    let config = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let out = dir.path().join("o");
    let line = first_line(
        &train(&out, &["--steps", "1", "--batch-size", "100000"], &[]),
        2,
    );
    assert!(
        line.starts_with("error: batch_size 100000 at sample_size 32 needs about "),
        "{line}"
    );
    assert!(line.contains(" fits (or sample_size "), "{line}");
    // 4096 is the largest sample size a model may have (model::config::MAX_SAMPLE_SIZE).
    let c = config("size.yaml", "model:\n  sample_size: 4096\n");
    let line = first_line(&train(&out, &["--steps", "1", "--config", &c], &[]), 2);
    assert!(line.contains("at sample_size 4096 needs about "), "{line}");
    assert!(line.contains("; at most sample_size "), "{line}");
    let c = config("syn.yaml", "training:\n  synthetic_images: 1000000000000\n");
    let line = first_line(&train(&out, &["--steps", "1", "--config", &c], &[]), 2);
    assert!(
        line.starts_with("error: synthetic_images is 1000000000000: its per-epoch index permutation needs 7450.6 GiB"),
        "{line}"
    );
    let line = first_line(
        &train(&out, &["--steps", "1", "--workers", "100000"], &[]),
        2,
    );
    assert!(
        line.starts_with("error: workers is 100000; this host allows at most "),
        "{line}"
    );
    assert!(!out.join("metrics.jsonl").exists());

    // sample --num 100000 panicked inside libtorch.
    let run = dir.path().join("run");
    assert_code(&train(&run, &["--steps", "1", "--batch-size", "1"], &[]), 0);
    let o = run_env(
        &[
            "sample",
            "--checkpoint",
            run.to_str().unwrap(),
            "--steps",
            "2",
            "--num",
            "100000",
            "--device",
            "cpu",
            "--out",
            dir.path().join("g.png").to_str().unwrap(),
        ],
        &[],
    );
    let line = first_line(&o, 2);
    assert!(
        line.starts_with("error: --num 100000 needs about "),
        "{line}"
    );
    assert!(line.contains("; at most --num "), "{line}");
}

/// Inputs that used to hang or exhaust the machine are one line and exit 2
/// within seconds (reliability and security III, N7 FIFOs, N8 /dev/zero,
/// N9 deep nesting): imgctl opens only regular files, without blocking,
/// reads each whole file within a cap, and measures YAML nesting before
/// libyaml does.
#[test]
fn inputs_that_would_hang_or_exhaust_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.yaml");
    mkfifo(&fifo);
    let deep = dir.path().join("deep.yaml");
    std::fs::write(&deep, format!("training: {}", "[".repeat(100_000))).unwrap();
    let out = dir.path().join("never");
    let limit = std::time::Duration::from_secs(20);
    let train_with = |config: &Path| {
        run_bounded(
            &[
                "train-demo",
                "--preset",
                "tiny",
                "--device",
                "cpu",
                "--steps",
                "1",
                "--out",
                out.to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
            ],
            &[],
            limit,
        )
    };
    for (config, needle) in [
        (Path::new("/dev/zero"), "is a device, not a regular file"),
        (fifo.as_path(), "is a FIFO, not a regular file"),
        (deep.as_path(), "brackets nest deeper than 64 levels"),
    ] {
        let (_, stderr) = assert_code(&train_with(config), 2);
        assert!(stderr.contains(needle), "{config:?}: {stderr}");
    }
    assert!(!out.exists(), "--out was set up for a bad --config");
    // A spec that is a FIFO.
    let (_, stderr) = assert_code(
        &run_bounded(&["render", "--spec", fifo.to_str().unwrap()], &[], limit),
        2,
    );
    assert!(stderr.contains("is a FIFO, not a regular file"), "{stderr}");
    // A docker config.json that is a FIFO, read before connecting.
    let docker_config = dir.path().join("docker");
    std::fs::create_dir(&docker_config).unwrap();
    mkfifo(&docker_config.join("config.json"));
    let o = run_bounded(
        &[
            "build",
            "--spec",
            "tests/fixtures/specs/busybox.yaml",
            "--tag",
            "imgctl-never:fifo",
        ],
        &[("DOCKER_CONFIG", docker_config.to_str().unwrap())],
        limit,
    );
    let (_, stderr) = texts(&o);
    assert_ne!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("config.json") && stderr.contains("is a FIFO"),
        "{stderr}"
    );

    // A checkpoint whose EMA file became a FIFO: sample refuses it.
    let run = dir.path().join("run");
    assert_code(&train(&run, &["--steps", "1", "--batch-size", "2"], &[]), 0);
    let ck = checkpoint::latest(&run).unwrap();
    std::fs::remove_file(ck.join(checkpoint::EMA_FILE)).unwrap();
    mkfifo(&ck.join(checkpoint::EMA_FILE));
    let png = dir.path().join("grid.png");
    let o = run_bounded(
        &[
            "sample",
            "--checkpoint",
            ck.to_str().unwrap(),
            "--device",
            "cpu",
            "--num",
            "1",
            "--steps",
            "2",
            "--out",
            png.to_str().unwrap(),
        ],
        &[],
        limit,
    );
    let (_, stderr) = assert_code(&o, 2);
    assert!(stderr.contains("is a FIFO, not a regular file"), "{stderr}");

    // An image swapped for a FIFO mid-run: the loader skips it with a
    // warning and the run ends (its open used to block a loader forever).
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for i in 0..3u8 {
        write_png(&data.join(format!("{i}.png")), 32, 32, i * 80);
    }
    let data_run = dir.path().join("data-run");
    let mut child = Command::new(imgctl_bin())
        .args([
            "train-demo",
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--steps",
            "30",
            "--batch-size",
            "2",
            "--sample-every",
            "0",
            "--checkpoint-every",
            "0",
            "--out",
        ])
        .arg(&data_run)
        .arg("--data")
        .arg(&data)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while read_jsonl(&data_run.join("metrics.jsonl"))
        .map(|r| r.is_empty())
        .unwrap_or(true)
    {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        assert!(
            std::time::Instant::now() < deadline,
            "no step was logged within 120 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::fs::remove_file(data.join("1.png")).unwrap();
    mkfifo(&data.join("1.png"));
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("training hung on the FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    let (_, stderr) = assert_code(&o, 0);
    assert!(
        stderr.contains("data: 1 unreadable file(s) skipped (first: ")
            && stderr.contains("1.png: is a FIFO, not a regular file)"),
        "{stderr}"
    );
}

/// The memory budget holds to the cgroup's limit, not the host's free memory
/// (reliability and security III, N14): `--batch-size 400` in a 1 GiB cgroup
/// was killed by the OOM killer (137) with no message. A real memory cgroup
/// (v1's `memory` hierarchy, or v2's), made for this test and removed after.
#[test]
fn the_memory_budget_reads_the_cgroup_limit() {
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let base = if v2 {
        Path::new("/sys/fs/cgroup").to_path_buf()
    } else {
        Path::new("/sys/fs/cgroup/memory").to_path_buf()
    };
    if v2 {
        // The memory controller for the children of the root (a no-op when on).
        let _ = std::fs::write(base.join("cgroup.subtree_control"), "+memory");
    }
    let cg = base.join(format!("imgctl-test-{}", std::process::id()));
    std::fs::create_dir(&cg)
        .unwrap_or_else(|e| panic!("mkdir {}: {e} (the tests run as root)", cg.display()));
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _remove = Remove(cg.clone());
    let limit = if v2 {
        "memory.max"
    } else {
        "memory.limit_in_bytes"
    };
    std::fs::write(cg.join(limit), "1073741824").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // The shell joins the cgroup, then becomes imgctl.
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} train-demo --preset tiny --device cpu --steps 1 --batch-size 400 --sample-every 0 --out {}",
        cg.display(),
        imgctl_bin().display(),
        out.display()
    );
    let o = Command::new("sh")
        .args(["-c", &script])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let (_, stderr) = assert_code(&o, 2);
    assert!(
        stderr.contains("error: batch_size 400 at sample_size 32 needs about ")
            && stderr.contains("GiB of memory available"),
        "{stderr}"
    );
    let available: f64 = stderr
        .split("more than the ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        available <= 1.0,
        "the host's memory, not the cgroup's: {stderr}"
    );
}
