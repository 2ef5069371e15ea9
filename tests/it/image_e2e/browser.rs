//! JupyterLab and TensorBoard in a real browser (#45 item 1): headless
//! Chromium, driven by Selenium through chromium-driver (`tests/browser/lab.py`),
//! opens the workstation `imgctl up` started, runs a notebook's three cells
//! as a person does and reads their output back from the page; then
//! TensorBoard's scalars show the notebook's run. The screenshots land in
//! `target/e2e-browser/` (the README's picture is one of them). It runs once,
//! on the machine's engine: `scripts/engine-tests.sh` sets
//! `IMGCTL_E2E_BROWSER=0` for its second engine.
use super::*;

/// The notebook flow in the browser, against the workstation `up` reported.
pub(super) fn browser_runs_the_notebook(report: &Value, token: &str) {
    if std::env::var("IMGCTL_E2E_BROWSER").as_deref() == Ok("0") {
        eprintln!(
            "e2e: browser test skipped (IMGCTL_E2E_BROWSER=0: it runs on the machine's engine)"
        );
        return;
    }
    let jupyter = report["jupyter"]["port"].as_u64().unwrap();
    let tensorboard = report["tensorboard"]["port"].as_u64().unwrap();
    let out_dir = crate::common::repo_root().join("target/e2e-browser");
    let started = Instant::now();
    let out = Command::new(crate::common::venv_python())
        .arg(crate::common::repo_root().join("tests/browser/lab.py"))
        .arg(format!("http://127.0.0.1:{jupyter}"))
        .arg(token)
        .arg(format!("http://127.0.0.1:{tensorboard}"))
        .arg(&out_dir)
        // Selenium Manager must not look for drivers online: Debian's are given.
        .env("SE_OFFLINE", "true")
        .output()
        .expect("run tests/browser/lab.py (scripts/setup.sh installs selenium and chromium)");
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "the browser test failed:\n{stderr}");
    let seen: Value = serde_json::from_str(&stdout).expect("lab.py's JSON");
    eprintln!(
        "e2e: browser: {:.1} s in all, {}",
        started.elapsed().as_secs_f64(),
        seen["seconds"]
    );
    assert_eq!(seen["without_token"], "login page", "{seen}");
    let errors = seen["console_errors"].as_array().unwrap();
    assert!(errors.is_empty(), "console errors in the Lab: {errors:?}");
    let cells: Vec<String> = (0..3)
        .map(|i| seen["cells"][i].as_str().unwrap_or_default().to_string())
        .collect();
    the_three_cells_read_well(&cells);
    let cell = |i: usize| cells[i].clone();
    assert!(cell(1).contains("torch.version"), "cell 2: {}", cell(1));
    assert!(
        cell(2).contains("from IPython.display import Image, display"),
        "cell 3: {}",
        cell(2)
    );
    assert!(
        seen["tensorboard"].as_str().unwrap().contains("nb-run"),
        "{seen}"
    );
    assert!(out_dir.join("lab.png").exists() && out_dir.join("tensorboard.png").exists());
}

/// The same three cells through the Jupyter kernel protocol (#45 item 1):
/// `tests/notebook/kernel_cells.py` runs them inside the workstation with
/// the image's jupyter_client and ipykernel, as a notebook's kernel runs
/// them (no browser: this runs on every engine the e2e tests run on).
pub(super) fn kernel_runs_the_cells(name: &str) {
    let script = crate::common::repo_root().join("tests/notebook/kernel_cells.py");
    docker_ok(&[
        "cp",
        &script.display().to_string(),
        &format!("{name}:/tmp/kernel_cells.py"),
    ]);
    let started = Instant::now();
    let out = docker(&[
        "exec",
        name,
        "python",
        "/tmp/kernel_cells.py",
        "/workspace/kernel-run",
    ]);
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "the kernel cells failed:\n{stderr}");
    let seen: Value = serde_json::from_str(stdout.trim()).expect("kernel_cells.py's JSON");
    eprintln!(
        "e2e: jupyter_client: three cells in {:.1} s (kernel start included)",
        started.elapsed().as_secs_f64()
    );
    let cell = |i: usize| {
        let c = &seen["cells"][i];
        assert_eq!(c["status"], "ok", "cell {}: {c}", i + 1);
        // `!cmd` runs on ipykernel's pseudo-terminal, whose line ends are
        // \r\n; a \r alone would be a progress bar's redraw. Colours (SGR,
        // `ESC[…m`) JupyterLab renders; any other escape (a line erase) it
        // does not, and is left for the check below.
        let text = c["text"].as_str().unwrap_or_default().replace("\r\n", "\n");
        regex::Regex::new("\x1b\\[[0-9;]*m")
            .unwrap()
            .replace_all(&text, "")
            .into_owned()
    };
    the_three_cells_read_well(&(0..3).map(cell).collect::<Vec<_>>());
}

/// The three cells' output, as a notebook shows it: torch's version, the
/// verify verdict, the 30th step; plain lines (no escape but colours, taken
/// out before, and no `\r` of a progress bar's redraw).
fn the_three_cells_read_well(cells: &[String]) {
    assert!(cells[0].contains("2.7.0"), "cell 1: {}", cells[0]);
    for (i, c) in cells.iter().enumerate().skip(1) {
        assert!(
            !c.contains('\u{1b}') && !c.contains('\r'),
            "cell {}: {c:?}",
            i + 1
        );
    }
    assert!(cells[1].contains("verify passed"), "cell 2: {}", cells[1]);
    assert!(cells[2].contains("step 30/30"), "cell 3: {}", cells[2]);
}
