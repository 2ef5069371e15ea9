//! An image upgrade keeps everything (#53): `up` of a newer image under the
//! same name, through ten `down`/`up` cycles between the two images, keeps
//! the home's files, the package the user installed into `~/.venv`, the SSH
//! host key (strict host key checking passes each time) and the JupyterLab
//! token (#53 F10). A venv another Python made is moved aside by the
//! entrypoint, and `up` names what it held with the command that installs
//! it again.
use super::*;

/// `down`/`up` cycles, alternating the newer image and the first.
const CYCLES: usize = 10;

/// The newer image: the end-to-end image with one more label and variable
/// (a new image id, its layers shared).
fn build_newer(tag: &str) {
    let mut child = Command::new("docker")
        .args(["build", "-q", "-t", tag, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            format!("FROM {E2E_TAG}\nLABEL io.imgctl.test.upgrade=2\nENV IMGCTL_E2E_UPGRADE=2\n")
                .as_bytes(),
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", texts(&out).1);
}

pub(super) fn an_upgrade_keeps_everything(
    guard: &mut EngineGuard,
    pid: u32,
    key: &Path,
    work: &Path,
) {
    let name = format!("imgctl-e2e-upgrade-{pid}");
    guard.container(&name);
    let _ = docker(&["volume", "rm", "-f", &format!("{name}-home")]);
    let newer = format!("imgctl-test/e2e-upgrade:{pid}");
    guard.image(&newer);
    build_newer(&newer);
    let up = |image: &str| -> (Value, String, f64) {
        let started = Instant::now();
        let out = Command::new(imgctl_bin())
            .args(["up", "--name", &name, "--json", "--no-mount", "--ssh-key"])
            .arg(key.with_extension("pub"))
            .arg(image)
            .env("NO_COLOR", "1")
            .env("HOME", work.join("home"))
            .output()
            .unwrap();
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "imgctl up {image}:\n{stderr}");
        let report: Value = serde_json::from_str(&stdout).expect("up --json");
        (report, stderr, started.elapsed().as_secs_f64())
    };
    let down = || {
        let out = Command::new(imgctl_bin())
            .args(["down", "--time", "5", &name])
            .env("HOME", work.join("home"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    };
    let (first, _, _) = up(E2E_TAG);
    let url = first["jupyter"]["open"].as_str().unwrap().to_string();
    let port = |r: &Value| r["ssh"]["port"].as_u64().unwrap() as u16;
    // The user's state: a file in the home, a package in ~/.venv.
    let out = ssh(key, port(&first), &[], "echo kept > ~/notes.txt");
    assert!(out.status.success(), "{}", texts(&out).1);
    let out = ssh(key, port(&first), &[], super::idle::USER_INSTALL);
    assert!(out.status.success(), "{}", texts(&out).1);
    let check =
        "cat ~/notes.txt && cd / && python -c 'import imgctl_user_pkg as p; print(p.VALUE)'";
    let mut ups = Vec::new();
    let mut last = first.clone();
    for cycle in 0..CYCLES {
        down();
        let image = if cycle % 2 == 0 {
            newer.as_str()
        } else {
            E2E_TAG
        };
        let (report, stderr, secs) = up(image);
        ups.push(secs);
        assert_eq!(report["image"], image, "{report}");
        // The same token: a bookmarked URL opens (#53 F10).
        assert_eq!(report["jupyter"]["open"], url.as_str(), "cycle {cycle}");
        assert!(!stderr.contains("~/.venv was made anew"), "{stderr}");
        // The kept host key: strict checking against known_hosts passes.
        super::idle::ssh_known(work, &name, port(&report), key, check);
        let out = ssh(key, port(&report), &[], check);
        assert_eq!(
            texts(&out).0,
            "kept\n42\n",
            "cycle {cycle}: {}",
            texts(&out).1
        );
        last = report;
    }
    ups.sort_by(f64::total_cmp);
    eprintln!(
        "e2e: {CYCLES} down/up cycles between two images kept the home, the venv's package, the host key and the token; up to verified: median {:.1} s, max {:.1} s",
        ups[CYCLES / 2],
        ups[CYCLES - 1]
    );
    // A venv another Python made (as after an upgrade of the image's
    // Python): moved aside by the entrypoint, and what it held named with
    // the command that installs it again.
    let out = ssh(
        key,
        port(&last),
        &[],
        "sed -i 's/^version *=.*/version = 3.9.7/' ~/.venv/pyvenv.cfg && grep '^version' ~/.venv/pyvenv.cfg",
    );
    assert_eq!(texts(&out).0, "version = 3.9.7\n", "{}", texts(&out).1);
    down();
    let (report, stderr, _) = up(E2E_TAG);
    assert!(
        stderr.contains(&format!(
            "{name}'s ~/.venv was made anew for this image's Python 3."
        )) && stderr.contains("the old one (Python 3.9) is ~/.venv.old-")
            && stderr.contains(&format!(
                "install them again with: docker exec -u dev {name} sh -c '~/.venv/bin/pip install imgctl_user_pkg==0.1'"
            )),
        "{stderr}"
    );
    let out = ssh(
        key,
        port(&report),
        &[],
        "cat ~/notes.txt; ls -d ~/.venv.old-* | wc -l; cd / && python -c 'import imgctl_user_pkg' 2>&1 | tail -n 1",
    );
    let said = texts(&out).0;
    assert!(
        said.starts_with("kept\n1\n") && said.contains("No module named 'imgctl_user_pkg'"),
        "{said}"
    );
    let out = Command::new(imgctl_bin())
        .args(["down", "--volumes", "--time", "5", &name])
        .env("HOME", work.join("home"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
}
