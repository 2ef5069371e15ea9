//! What `up` keeps between a workstation's containers (#53 F10), and two
//! `up`s at once each on its own ports.
use super::*;

/// Two ups at once (the default ports free for both plans, or taken by the
/// first): both come up, each on its own ports. This race failed CI once:
/// the loser got "port is already allocated" from the engine.
pub(super) fn two_ups_at_once_get_their_own_ports(
    guard: &mut EngineGuard,
    folder: &std::path::Path,
    key: &std::path::Path,
    image: &str,
) {
    let names: Vec<String> = (0..2)
        .map(|i| format!("imgctl-it-ws-race{i}-{}", std::process::id()))
        .collect();
    let children: Vec<_> = names
        .iter()
        .map(|n| {
            guard.container(n);
            Command::new(crate::common::imgctl_bin())
                .args(["up", "--name", n, "--mount"])
                .arg(folder)
                .args([
                    "--ssh-key",
                    key.to_str().unwrap(),
                    "--no-verify",
                    "--json",
                    image,
                ])
                .env("NO_COLOR", "1")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut ports = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("up --json");
        ports.push((
            report["jupyter"]["port"].clone(),
            report["ssh"]["port"].clone(),
        ));
    }
    assert_ne!(ports[0].0, ports[1].0, "{ports:?}");
    assert_ne!(ports[0].1, ports[1].1, "{ports:?}");
    let out = imgctl(&["down", "--volumes", "--time", "1", &names[0], &names[1]]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
}

/// After `down`, the next `up` of `name` has the token and the ports of the
/// first (`first`, its `--json`), a port it had asked for before comes
/// before the default, and `--new-token` replaces the token (#53 F10).
pub(super) fn token_and_ports_are_kept(
    name: &str,
    image: &str,
    mounted: &std::path::Path,
    key: &std::path::Path,
    first: &serde_json::Value,
) {
    let up_json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec![
            "up",
            "--name",
            name,
            "--mount",
            mounted.to_str().unwrap(),
            "--ssh-key",
            key.to_str().unwrap(),
            "--no-verify",
            "--json",
        ];
        args.extend(extra);
        args.push(image);
        let out = imgctl(&args);
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        serde_json::from_str(&stdout).expect("up --json")
    };
    let down = || {
        let out = imgctl(&["down", "--time", "1", name]);
        assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
    };
    let again = up_json(&[]);
    assert_eq!(again["already_up"], false, "{again}");
    assert_eq!(again["jupyter"]["open"], first["jupyter"]["open"]);
    assert_eq!(again["ssh"]["port"], first["ssh"]["port"]);
    down();
    // A port given once is the one the next plain up asks for first.
    let spare = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = spare.local_addr().unwrap().port().to_string();
    drop(spare);
    let given = up_json(&["--jupyter-port", &port]);
    assert_eq!(given["jupyter"]["port"].to_string(), port, "{given}");
    down();
    let plain = up_json(&[]);
    assert_eq!(plain["jupyter"]["port"].to_string(), port, "{plain}");
    assert_eq!(
        plain["jupyter"]["open"]
            .as_str()
            .unwrap()
            .rsplit('=')
            .next(),
        first["jupyter"]["open"]
            .as_str()
            .unwrap()
            .rsplit('=')
            .next()
    );
    // On a running workstation --new-token changes nothing and says so.
    let out = imgctl(&[
        "up",
        "--name",
        name,
        "--mount",
        mounted.to_str().unwrap(),
        "--new-token",
        image,
    ]);
    let (_, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("--new-token: it has its token, asked a new one"),
        "{stderr}"
    );
    down();
    let out = imgctl(&[
        "up",
        "--name",
        name,
        "--mount",
        mounted.to_str().unwrap(),
        "--no-verify",
        "--new-token",
        image,
    ]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("a new JupyterLab token for"), "{stderr}");
    let old = first["jupyter"]["open"].as_str().unwrap();
    assert!(
        !stdout.contains(old) && !stderr.contains(old),
        "{stdout}{stderr}"
    );
    let out = imgctl(&["down", "--volumes", "--time", "1", name]);
    assert_eq!(out.status.code(), Some(0), "{}", texts(&out).1);
}
