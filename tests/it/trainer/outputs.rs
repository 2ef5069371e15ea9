//! What a run writes and says: samples, TensorBoard, --print-config, the start line,
//! the event sink; weights and schedules shared with diffusers.
use super::*;

/// `imgctl sample` on a run directory writes a PNG grid that decodes.
#[test]
fn sample_png_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    assert_code(&train(&out, &["--steps", "2", "--batch-size", "2"], &[]), 0);
    let png = dir.path().join("grid.png");
    let o = run_env(
        &[
            "sample",
            "--checkpoint",
            out.to_str().unwrap(),
            "--steps",
            "3",
            "--num",
            "4",
            "--device",
            "cpu",
            "--out",
            png.to_str().unwrap(),
        ],
        &[],
    );
    let (stdout, stderr) = assert_code(&o, 0);
    assert_eq!(stdout, "", "without --json, nothing on stdout");
    // Piped, each step is a plain line (3 steps: each passes a tenth), in
    // order and with the time so far (#53 F19).
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("denoising step "))
        .collect();
    assert_eq!(said.len(), 3, "{stderr}");
    assert!(said[2].starts_with("denoising step 3/3 ("), "{stderr}");
    assert!(said[2].ends_with(" s)"), "{stderr}");
    let img = image::open(&png).expect("decodes").to_rgb8();
    // 2×2 tiles of 32 px enlarged ×4 to 128, with 2 px padding (torchvision make_grid).
    assert_eq!(img.dimensions(), (2 + 2 * 130, 2 + 2 * 130));
    // DDPM too, from an explicit step directory with the raw weights.
    let png2 = dir.path().join("ddpm.png");
    let ck = checkpoint::latest(&out).unwrap();
    let o = run_env(
        &[
            "sample",
            "--checkpoint",
            ck.to_str().unwrap(),
            "--sampler",
            "ddpm",
            "--steps",
            "2",
            "--num",
            "1",
            "--no-ema",
            "--device",
            "cpu",
            "--out",
            png2.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    // With --json, stdout is one JSON object naming what was written.
    let (stdout, stderr) = assert_code(&o, 0);
    let v: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    assert_eq!(v["schema_version"], 1, "{v}");
    let written = std::path::PathBuf::from(v["png"].as_str().unwrap());
    assert_eq!(written, png2, "{v}");
    let img = image::open(&written).expect("decodes").to_rgb8();
    let (w, h) = (v["width"].as_u64().unwrap(), v["height"].as_u64().unwrap());
    assert_eq!((u64::from(img.width()), u64::from(img.height())), (w, h));
    // One 32 px tile enlarged ×4, with 2 px padding on each side.
    assert_eq!((w, h), (2 + 130, 2 + 130), "{v}");
    assert_eq!(v["count"], 1, "{v}");
    assert_eq!(v["grid"]["columns"], 1, "{v}");
    assert_eq!(v["grid"]["rows"], 1, "{v}");
    assert_eq!(v["tile"], serde_json::json!([32, 32]), "{v}");
    assert_eq!(v["sampler"], "ddpm", "{v}");
    assert_eq!(v["steps"], 2, "{v}");
    assert_eq!(v["seed"], 0, "{v}");
    assert_eq!(v["weights"], "raw", "{v}");
    assert_eq!(v["device"], "cpu", "{v}");
    assert_eq!(
        std::path::PathBuf::from(v["checkpoint"].as_str().unwrap()),
        ck,
        "{v}"
    );
    assert_eq!(v["checkpoint_step"], 2, "{v}");
    assert!(v["seconds"].as_f64().unwrap() > 0.0, "{v}");
    // The output is checked before sampling: a name that is not .png, a
    // folder that does not exist.
    for (bad, want) in [
        (dir.path().join("grid.jpg"), "does not end in .png"),
        (dir.path().join("no/such/grid.png"), "is not a directory"),
        (dir.path().to_path_buf(), "it is a directory"),
    ] {
        let o = run_env(
            &[
                "sample",
                "--checkpoint",
                out.to_str().unwrap(),
                "--device",
                "cpu",
                "--out",
                bad.to_str().unwrap(),
            ],
            &[],
        );
        let (_, stderr) = assert_code(&o, 2);
        assert!(
            stderr.contains(&format!("cannot write {}", bad.display()))
                && stderr.contains(want)
                && !stderr.contains("sampling"),
            "{stderr}"
        );
    }
    assert!(!dir.path().join("grid.jpg").exists());
    // Bad inputs: no checkpoint, unknown sampler.
    let o = run_env(
        &["sample", "--checkpoint", dir.path().to_str().unwrap()],
        &[],
    );
    let (_, stderr) = assert_code(&o, 2);
    assert!(stderr.contains("no checkpoint"), "{stderr}");
    let o = run_env(
        &[
            "sample",
            "--checkpoint",
            out.to_str().unwrap(),
            "--sampler",
            "euler",
        ],
        &[],
    );
    assert_code(&o, 2);
}

/// Sample grids during training land in samples/ and in TensorBoard; the
/// TensorBoard reader sees the same scalars as metrics.jsonl.
#[test]
fn train_tensorboard_reader_reads_scalars_and_images() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = run_env(
        &[
            "train-demo",
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--steps",
            "3",
            "--batch-size",
            "2",
            "--sample-every",
            "3",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    let (_, stderr) = assert_code(&o, 0);
    assert!(image::open(out.join("samples/step-000003.png")).is_ok());
    // The curves are a picture too, named in the summary.
    let curves = image::open(out.join("loss.png"))
        .expect("loss.png")
        .to_rgb8();
    assert_eq!(curves.width(), 960);
    assert_eq!(curves.height(), 34 + 3 * 250, "no GPU panel on the CPU");
    assert!(
        stderr.contains(&format!("curves: {}", out.join("loss.png").display())),
        "{stderr}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["loss_plot"], out.join("loss.png").to_str().unwrap());
    // One rule for file modes: 0666 less the umask, whether a file was
    // written in place or through a temporary file and a rename.
    let umask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:").map(|v| v.trim().to_string()))
        })
        .and_then(|v| u32::from_str_radix(&v, 8).ok())
        .unwrap_or(0o022);
    let mut files = vec![out.clone()];
    while let Some(p) = files.pop() {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(&p).unwrap();
        if meta.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o666 & !umask,
                "{}",
                p.display()
            );
        }
    }
    // Grids, summary.json and unet/ are renamed into place: no temporaries left.
    for d in [out.clone(), out.join("samples"), out.join("unet")] {
        for e in std::fs::read_dir(&d).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                !name.contains(".tmp-") && !name.contains(".old-"),
                "{}: {name}",
                d.display()
            );
        }
    }
    let script = r#"
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "images": 0})
acc.Reload()
tags = acc.Tags()
out = {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]}
out["images"] = [[e.step, e.width, e.height, len(e.encoded_image_string)] for e in acc.Images("samples")]
print(json.dumps(out))
"#;
    let o = Command::new(crate::common::venv_python())
        .arg("-c")
        .arg(script)
        .arg(out.join("tb"))
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&o);
    assert!(o.status.success(), "tensorboard reader failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let recs = losses(&out);
    let tb_loss: Vec<(u64, f32)> = v["train/loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e[0].as_u64().unwrap(), e[1].as_f64().unwrap() as f32))
        .collect();
    let jsonl: Vec<(u64, f32)> = recs.iter().map(|r| (r.step, r.loss as f32)).collect();
    assert_eq!(tb_loss, jsonl);
    for tag in [
        "train/lr",
        "train/grad_norm",
        "train/loss_scale",
        "train/img_per_s",
    ] {
        assert_eq!(v[tag].as_array().map(|a| a.len()), Some(3), "{tag}: {v}");
    }
    let images = v["images"].as_array().unwrap();
    assert_eq!(images.len(), 1, "{v}");
    assert_eq!(images[0][0], 3);
    // 8 images: 4 per row, 2 rows, 32-pixel samples enlarged to 128.
    assert_eq!(images[0][1], 2 + 4 * 130);
    assert_eq!(images[0][2], 2 + 2 * 130);
}

/// `--print-config` prints the configuration a run would train with (the
/// preset, then --config, then flags) as YAML that `--config` reads back to
/// the same configuration; it trains and writes nothing, and it is a usage
/// error beside a mode that does not train from a config (#29 item 3.9).
#[test]
fn print_config_shows_the_resolved_configuration_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let out_s = out.to_str().unwrap();
    let first = run_env(
        &[
            "train-demo",
            "--preset",
            "smoke",
            "--steps",
            "7",
            "--lr",
            "0.003",
            "--out",
            out_s,
            "--print-config",
        ],
        &[],
    );
    let (yaml, stderr) = assert_code(&first, 0);
    assert!(
        yaml.starts_with("# imgctl train-demo: the resolved configuration (preset smoke"),
        "{yaml}"
    );
    let config: TrainConfig = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(config.preset, Preset::Smoke);
    assert_eq!(config.training.steps, 7);
    assert_eq!(config.training.lr, 0.003);
    assert_eq!(
        config.training.batch_size,
        TrainConfig::preset(Preset::Smoke).training.batch_size
    );
    assert!(!out.exists(), "--print-config wrote {out_s}: {stderr}");
    let file = dir.path().join("resolved.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let again = run_env(
        &[
            "train-demo",
            "--config",
            file.to_str().unwrap(),
            "--out",
            out_s,
            "--print-config",
        ],
        &[],
    );
    let (yaml2, _) = assert_code(&again, 0);
    assert_eq!(yaml2, yaml);
    let bad = run_env(&["train-demo", "--print-config", "--benchmark"], &[]);
    let (_, stderr) = assert_code(&bad, 2);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

/// The start line says how many intra-op threads a CPU run uses and why:
/// `OMP_NUM_THREADS` when set, else the cores the load average leaves free
/// (#29 item 3.2; the choice itself is `train::threads::choose`'s unit test).
#[test]
fn the_start_line_names_the_cpu_threads() {
    let dir = tempfile::tempdir().unwrap();
    let o = train(
        &dir.path().join("a"),
        &["--steps", "1"],
        &[("OMP_NUM_THREADS", "1")],
    );
    let (_, err) = assert_code(&o, 0);
    assert!(
        err.contains(" on cpu (1 thread: OMP_NUM_THREADS=1) in fp32,"),
        "{err}"
    );
    let mut cmd = Command::new(imgctl_bin());
    cmd.args([
        "train-demo",
        "--preset",
        "tiny",
        "--device",
        "cpu",
        "--steps",
        "1",
    ])
    .args(["--sample-every", "0", "--out"])
    .arg(dir.path().join("b"))
    .env("NO_COLOR", "1")
    .env_remove("OMP_NUM_THREADS");
    let o = cmd.output().unwrap();
    let (_, err) = assert_code(&o, 0);
    let line = err
        .lines()
        .find(|l| l.starts_with("training "))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains(" cores, idle; OMP_NUM_THREADS sets it)")
            || line.contains(" cores free at load "),
        "{line}"
    );
    // --benchmark chooses and says its threads the same way (#45 F7); from
    // a folder of its own, so its default --out takes no lock that another
    // test's run in the repository's folder holds.
    let o = Command::new(imgctl_bin())
        .args([
            "train-demo",
            "--benchmark",
            "--preset",
            "tiny",
            "--device",
            "cpu",
        ])
        .args(["--warmup", "1", "--steps", "1"])
        .current_dir(dir.path())
        .env("NO_COLOR", "1")
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    let (_, err) = assert_code(&o, 0);
    assert!(
        err.contains("benchmark on cpu with 1 thread: OMP_NUM_THREADS=1"),
        "{err}"
    );
}

/// The library trains without printing (#28 item 2): `examples/library_use`
/// (built by `cargo test` with the other examples) renders a Dockerfile and
/// trains the tiny preset for four steps, imgctl's events going to the
/// program; stdout has what the program chose to print, stderr nothing.
#[test]
fn the_library_trains_without_printing_through_its_event_sink() {
    let exe = imgctl_bin()
        .parent()
        .expect("target dir")
        .join("examples")
        .join("library_use");
    assert!(
        exe.exists(),
        "{} not built (cargo test builds the examples)",
        exe.display()
    );
    let out = Command::new(&exe)
        .arg("12.4")
        .env("OMP_NUM_THREADS", "1")
        .output()
        .expect("run the example");
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stderr, "", "imgctl printed on its own");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("trained tiny ("))
        .unwrap_or_else(|| panic!("no training line:\n{stdout}"));
    // Four steps, each loss a finite number the event carried.
    let losses: Vec<f64> = line
        .split(": loss ")
        .nth(1)
        .expect("losses")
        .split(" → ")
        .map(|l| l.parse().expect("a loss"))
        .collect();
    assert_eq!(losses.len(), 4, "{line}");
    assert!(losses.iter().all(|l| l.is_finite() && *l > 0.0), "{line}");
    assert!(line.contains("for 4 steps"), "{line}");
}

/// --init-from with a checkpoint's model file starts from those weights.
#[test]
fn train_init_from_diffusers_weights() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    assert_code(
        &train(&first, &["--steps", "2", "--batch-size", "2"], &[]),
        0,
    );
    let weights = checkpoint::latest(&first)
        .unwrap()
        .join(checkpoint::MODEL_FILE);
    let second = dir.path().join("second");
    assert_code(
        &train(
            &second,
            &[
                "--steps",
                "1",
                "--batch-size",
                "2",
                "--init-from",
                weights.to_str().unwrap(),
            ],
            &[],
        ),
        0,
    );
    let fresh = dir.path().join("fresh");
    assert_code(
        &train(&fresh, &["--steps", "1", "--batch-size", "2"], &[]),
        0,
    );
    // Same data and noise at step 1; only the starting weights differ.
    assert_ne!(
        losses(&second)[0].loss.to_bits(),
        losses(&fresh)[0].loss.to_bits()
    );
}

/// The LR schedule and the EMA decay equal diffusers' own functions
/// (`get_cosine_schedule_with_warmup`, `EMAModel.get_decay` with
/// train_unconditional.py's EMA settings).
#[test]
fn train_schedules_match_diffusers() {
    use imgctl::train::ema::EmaConfig;
    use imgctl::train::optim::lr_at;
    let script = r#"
import json, torch
from diffusers.optimization import get_cosine_schedule_with_warmup
from diffusers.training_utils import EMAModel
p = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.AdamW([p], lr=1.0)
sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=5, num_training_steps=20)
lrs = []
for _ in range(22):
    lrs.append(opt.param_groups[0]["lr"])
    opt.step(); sched.step()
ema = EMAModel([p], decay=0.9999, use_ema_warmup=True, inv_gamma=1.0, power=0.75)
decays = [ema.get_decay(k) for k in range(1, 40)]
print(json.dumps({"lrs": lrs, "decays": decays}))
"#;
    let o = Command::new(crate::common::venv_python())
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    let (stdout, stderr) = texts(&o);
    assert!(o.status.success(), "python failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for (step, want) in v["lrs"].as_array().unwrap().iter().enumerate() {
        let got = lr_at(1.0, step as u64, 5, 20);
        let want = want.as_f64().unwrap();
        assert!(
            (got - want).abs() < 1e-12,
            "lr at step {step}: {got} vs diffusers {want}"
        );
    }
    let ema = EmaConfig::default();
    for (i, want) in v["decays"].as_array().unwrap().iter().enumerate() {
        let k = i as u64 + 1;
        let want = want.as_f64().unwrap();
        assert!(
            (ema.decay(k) - want).abs() < 1e-12,
            "EMA decay at update {k}: {} vs {want}",
            ema.decay(k)
        );
    }
}
