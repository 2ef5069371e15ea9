//! `imgctl up --idle-stop` on the end-to-end image (#45 item 3), with a
//! short limit: an SSH session keeps the workstation up, a notebook kernel
//! running a cell keeps it up, and idle it stops (never removed) within the
//! limit plus a poll; `ps -a` says why, and `up` starts it again with the
//! folder's files.
use super::*;

/// The limit: short, so the test is; the poll is then 2 s.
const LIMIT: u64 = 12;
/// The poll at that limit (`imgctl idle-watch`'s default: a tenth, at least 2 s).
const POLL: u64 = 2;

/// Runs `import time; time.sleep(seconds)` in a new notebook kernel through
/// JupyterLab's REST and websocket API, from inside the workstation (its
/// own `websocket-client`, which jupyter_server needs); returns when the
/// cell's `execute_reply` came.
const BUSY_CELL: &str = r#"
import json, sys, urllib.request, uuid
import websocket
port, token, seconds = sys.argv[1:]
auth = {"Authorization": "token " + token}
req = urllib.request.Request(f"http://127.0.0.1:{port}/api/kernels", data=b"{}", method="POST",
                             headers=dict(auth, **{"Content-Type": "application/json"}))
kernel = json.load(urllib.request.urlopen(req))["id"]
ws = websocket.create_connection(f"ws://127.0.0.1:{port}/api/kernels/{kernel}/channels",
                                 header=[f"{k}: {v}" for k, v in auth.items()], timeout=120)
msg_id = uuid.uuid4().hex
ws.send(json.dumps({
    "header": {"msg_id": msg_id, "username": "imgctl-test", "session": uuid.uuid4().hex,
               "msg_type": "execute_request", "version": "5.3"},
    "parent_header": {}, "metadata": {}, "channel": "shell",
    "content": {"code": f"import time; time.sleep({seconds})", "silent": False,
                "store_history": False, "user_expressions": {}, "allow_stdin": False}}))
while True:
    m = json.loads(ws.recv())
    if m.get("parent_header", {}).get("msg_id") == msg_id and m.get("msg_type") == "status" \
            and m["content"]["execution_state"] == "busy":
        print("busy", flush=True)
    if m.get("parent_header", {}).get("msg_id") == msg_id and m.get("msg_type") == "execute_reply":
        print("done", m["content"]["status"], flush=True)
        break
"#;

/// `ssh` as the line `up` prints (`-o HostKeyAlias=NAME.imgctl`), with
/// strict host key checking against the known_hosts `up` wrote under the
/// test's HOME (`work/home`): it fails if the host key is not the one kept.
pub(super) fn ssh_known(work: &Path, name: &str, port: u16, key: &Path, command: &str) {
    let known = work.join("home/.ssh/known_hosts");
    let out = ssh(
        key,
        port,
        &[
            "-o",
            &format!("HostKeyAlias={name}.imgctl"),
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            &format!("UserKnownHostsFile={}", known.display()),
        ],
        command,
    );
    assert!(
        out.status.success(),
        "ssh with the kept host key of {name} failed: {}\nknown_hosts: {:?}",
        texts(&out).1,
        std::fs::read_to_string(&known)
    );
}

/// A package installed as the user (no root, no index): a one-module
/// setuptools project built with the image's setuptools; then where it
/// landed, torch beside it, the interpreter's prefix, and whether the
/// image's venv stayed as it was.
pub(super) const USER_INSTALL: &str = "set -e; mkdir -p /tmp/pkg && cd /tmp/pkg \
    && printf 'VALUE = 42\\n' > imgctl_user_pkg.py \
    && printf 'from setuptools import setup\\nsetup(name=\"imgctl-user-pkg\", version=\"0.1\", py_modules=[\"imgctl_user_pkg\"])\\n' > setup.py \
    && pip install -q --no-index --no-build-isolation . \
    && cd / && python -c 'import imgctl_user_pkg as p, torch, sys; print(p.VALUE, p.__file__, torch.__version__, sys.prefix)' \
    && ! ls /opt/venv/lib/python3*/site-packages/imgctl_user_pkg.py 2>/dev/null && echo image-untouched";

/// The user installs a package without root (#45 F6): into ~/.venv, over
/// the image's packages, the image's venv untouched.
fn user_installs_a_package(key: &Path, ssh_port: u16) {
    let out = ssh(key, ssh_port, &[], USER_INSTALL);
    let (said, err) = texts(&out);
    assert!(out.status.success(), "pip install as the user: {err}{said}");
    assert!(
        said.contains("42 /home/dev/.venv/lib/python3")
            && said.contains(" 2.7.0")
            && said.contains(" /home/dev/.venv\n")
            && said.ends_with("image-untouched\n"),
        "{said}"
    );
}

/// Imports the user's package in a kernel of the image's `python3`
/// kernelspec, started with jupyter_client as JupyterLab starts one.
const KERNEL_IMPORT: &str = "python -c \"
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name='python3', startup_timeout=120)
hook = lambda m: print(m['content']['text'], end='') if m['msg_type'] == 'stream' else None
kc.execute_interactive('import imgctl_user_pkg as p, sys; print(p.VALUE, sys.prefix)', timeout=120, output_hook=hook)
kc.stop_channels(); km.shutdown_kernel(now=True)
\"";

fn running(name: &str) -> bool {
    inspect(name, "{{.State.Running}}") == "true"
}

/// Waits until the container stops; how long that took from `from`.
fn stopped_within(name: &str, from: Instant, limit: Duration) -> Duration {
    while running(name) {
        assert!(
            from.elapsed() < limit,
            "{name} still ran {:?} after it went idle (limit {LIMIT} s + a poll)",
            from.elapsed()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    from.elapsed()
}

pub(super) fn idle_stop(guard: &mut EngineGuard, pid: u32, key: &Path, work: &Path) {
    let name = format!("imgctl-e2e-idle-{pid}");
    guard.container(&name);
    let _ = docker(&["volume", "rm", "-f", &format!("{name}-home")]);
    let folder = work.join("idle");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join("kept.txt"), "kept\n").unwrap();
    let chown = Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(&folder)
        .status()
        .unwrap();
    assert!(chown.success());
    let up = |extra: &[&str]| {
        let out = Command::new(imgctl_bin())
            .args(["up", "--name", &name, "--json", "--no-verify", "--mount"])
            .arg(&folder)
            .arg("--ssh-key")
            .arg(key.with_extension("pub"))
            .args(extra)
            .arg(E2E_TAG)
            .env("NO_COLOR", "1")
            .env("HOME", work.join("home"))
            .output()
            .unwrap();
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "imgctl up failed:\n{stderr}");
        serde_json::from_str::<Value>(&stdout).expect("up --json")
    };
    let report = up(&["--idle-stop", &format!("{LIMIT}s")]);
    let ssh_port = report["ssh"]["port"].as_u64().unwrap() as u16;
    let url = report["jupyter"]["open"].as_str().unwrap().to_string();
    let token = url.rsplit("token=").next().unwrap().to_string();

    // 1. An SSH session keeps it up well past the limit plus a poll.
    let hold = LIMIT + POLL + 6;
    let t0 = Instant::now();
    let out = ssh(key, ssh_port, &[], &format!("sleep {hold}; echo held"));
    assert!(out.status.success(), "{}", texts(&out).1);
    assert!(
        running(&name),
        "stopped while an SSH session was open for {:?}",
        t0.elapsed()
    );

    // 2. A kernel running a cell keeps it up as long (its messages stop
    // once the cell runs, so Jupyter's last activity alone would not).
    let busy = hold + 2;
    let mut cell = Command::new("docker")
        .args(["exec", &name, "python", "-c", BUSY_CELL, "8888", &token])
        .arg(busy.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t1 = Instant::now();
    let status = cell.wait().unwrap();
    let mut said = String::new();
    cell.stdout
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    let mut err = String::new();
    cell.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success() && said.contains("done ok"), "{said}{err}");
    assert!(t1.elapsed() >= Duration::from_secs(busy), "{said}");
    assert!(
        running(&name),
        "stopped while a kernel was busy for {:?}",
        t1.elapsed()
    );

    // 3. Idle (the kernel stays, idle): stopped within the limit plus a
    // poll plus the services' stop, not before the limit.
    let idle_from = Instant::now();
    let took = stopped_within(&name, idle_from, Duration::from_secs(LIMIT + POLL + 15));
    eprintln!(
        "e2e: idle-stop {LIMIT} s: stopped {:.1} s after the cell ended",
        took.as_secs_f64()
    );
    assert!(
        took >= Duration::from_secs(LIMIT - 2),
        "stopped after {took:?}, before the limit"
    );
    assert_eq!(inspect(&name, "{{.State.ExitCode}}"), "0");
    // Stopped, not removed; `ps -a` says why.
    let ps = imgctl(&["ps", "-a", "--json"]);
    let listed: Value = serde_json::from_str(&texts(&ps).0).unwrap();
    let me = listed["workstations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == name.as_str())
        .unwrap_or_else(|| panic!("ps -a lost {name}: {listed}"));
    assert_eq!(me["state"], "exited", "{me}");
    assert_eq!(
        me["stopped_why"],
        format!("idle-stop: idle for {LIMIT}s"),
        "{me}"
    );
    let table = texts(&imgctl(&["ps", "-a"])).0;
    assert!(table.contains(&format!("idle for {LIMIT}s")), "{table}");

    // 4. `up` starts it again, the folder's files there.
    let report = up(&[]);
    assert_eq!(report["name"], name.as_str(), "{report}");
    let ssh_port = report["ssh"]["port"].as_u64().unwrap() as u16;
    let out = ssh(
        key,
        ssh_port,
        &[],
        "cat /workspace/kept.txt; echo mine > ~/home-marker",
    );
    assert_eq!(texts(&out).0, "kept\n", "{}", texts(&out).1);
    user_installs_a_package(key, ssh_port);
    let out = imgctl(&["down", "--time", "5", &name]);
    let (_, said) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("the home volume {name}-home are kept")),
        "{said}"
    );
    // The idle watch is a service, not work that `down` waits for.
    assert!(!said.contains("still running"), "{said}");

    // 5. A new container of that name serves the same host key (#45 F4):
    // the known_hosts line of the first `up` still holds.
    // Its home is the volume the last one left (#45 item 4).
    let report = up(&[]);
    assert_eq!(report["home_volume"], format!("{name}-home"), "{report}");
    let ssh_port = report["ssh"]["port"].as_u64().unwrap() as u16;
    ssh_known(work, &name, ssh_port, key, "cat ~/home-marker");
    // What the user installed is still there: the venv lives in the home.
    let out = ssh(
        key,
        ssh_port,
        &[],
        "python -c 'import imgctl_user_pkg as p; print(p.VALUE)'",
    );
    assert_eq!(texts(&out).0, "42\n", "{}", texts(&out).1);
    // A notebook's kernel (the image's `python3` kernelspec) sees it too.
    let out = ssh(key, ssh_port, &[], KERNEL_IMPORT);
    let (said, err) = texts(&out);
    assert!(said.contains("42 /home/dev/.venv"), "{said}{err}");
    let out = ssh(
        key,
        ssh_port,
        &[],
        "cat ~/home-marker; test -f ~/.bashrc && echo dotfiles",
    );
    assert_eq!(texts(&out).0, "mine\ndotfiles\n", "{}", texts(&out).1);
    // `down --volumes` removes the home too.
    let out = imgctl(&["down", "--force", "--volumes", &name]);
    let (_, said) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("its home volume {name}-home")),
        "{said}"
    );
    assert!(!docker(&["volume", "inspect", &format!("{name}-home")])
        .status
        .success());
}
