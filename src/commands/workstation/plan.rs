//! `imgctl up`'s inputs, checked before the engine is touched: the GPUs,
//! the folder, the name, the ports, the SSH keys, `/dev/shm`'s size, and the
//! generated token. Every problem is a usage error (exit 2) with a hint.
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{DEFAULT_JUPYTER_PORT, DEFAULT_SSH_PORT, DEFAULT_TENSORBOARD_PORT, WAIT_RANGE};
use crate::cli::UpArgs;
use crate::commands::error::CliError;
use crate::gpus::GpuSelection;
pub(super) use crate::workstation::plan::{GpuChoice, PortPlan, UpPlan};

/// Checks every flag of `args` (usage errors, exit 2) and fills in defaults.
pub(super) fn plan(args: &UpArgs) -> anyhow::Result<UpPlan> {
    let gpus = match args.gpus.as_deref().map(str::trim) {
        None => GpuChoice::Auto,
        Some(g) if g.eq_ignore_ascii_case("none") => GpuChoice::None,
        Some(g) => GpuChoice::Given(GpuSelection::parse(g)?),
    };
    let workspace = if args.no_mount {
        None
    } else {
        Some(workspace(args.mount.as_deref())?)
    };
    let name = match &args.name {
        Some(n) => checked_name(n)?,
        None => default_name(workspace.as_deref()),
    };
    let listen: IpAddr = args.listen.trim().parse().map_err(|_| {
        CliError::usage(format!("--listen {:?} is not an IP address", args.listen)).with_hint(
            "use 127.0.0.1 (this machine only, the default) or 0.0.0.0 (every interface)",
        )
    })?;
    if !WAIT_RANGE.contains(&args.wait) {
        return Err(CliError::usage(format!(
            "--wait {} is not a number of seconds from 1 to 3600",
            args.wait
        ))
        .with_hint("JupyterLab starts in seconds, on a loaded host in minutes: e.g. --wait 300 (the default)")
        .into());
    }
    let keys = ssh_keys(&args.ssh_key)?;
    // The ports this workstation had last, asked for first (#53 F10).
    let kept = crate::workstation::kept::ports(&name);
    let ssh = if keys.is_empty() {
        None
    } else {
        Some(port_plan(
            listen,
            args.ssh_port,
            kept.ssh,
            DEFAULT_SSH_PORT,
            "--ssh-port",
            "SSH",
        )?)
    };
    let tensorboard = if args.tensorboard {
        Some(port_plan(
            listen,
            args.tensorboard_port,
            kept.tensorboard,
            DEFAULT_TENSORBOARD_PORT,
            "--tensorboard-port",
            "TensorBoard",
        )?)
    } else {
        None
    };
    Ok(UpPlan {
        name,
        image: up_image(args),
        image_given: args.image.is_some(),
        gpus,
        workspace,
        keys,
        listen,
        jupyter: port_plan(
            listen,
            args.jupyter_port,
            kept.jupyter,
            DEFAULT_JUPYTER_PORT,
            "--jupyter-port",
            "JupyterLab",
        )?,
        ssh,
        tensorboard,
        shm_bytes: shm_size(args.shm_size.as_deref().unwrap_or(DEFAULT_SHM_SIZE))?,
        shm_given: args.shm_size.is_some(),
        wait: Duration::from_secs(args.wait.unsigned_abs()),
        json: args.json,
        no_verify: args.no_verify,
        print_ssh_config: args.print_ssh_config,
        new_token: args.new_token,
        identity: crate::workstation::host_key::identity(&args.ssh_key),
        idle_stop: args.idle_stop,
        restart: restart(&args.restart, args.idle_stop.is_some())?,
        gpu_api: args.gpu_api,
        userns: match args.userns.as_deref().map(str::trim) {
            None => None,
            Some("") => {
                return Err(CliError::usage("--userns is empty")
                    .with_hint("pass --userns keep-id (rootless Podman: your uid is the image's user), or leave it out")
                    .into())
            }
            Some(mode) => Some(userns_mode(mode)?),
        },
    })
}

/// /dev/shm's size when `--shm-size` is not given.
const DEFAULT_SHM_SIZE: &str = "16g";

/// The image `up` starts: IMAGE, else [`crate::commands::through_image::DEFAULT_IMAGE`].
pub(super) fn up_image(args: &UpArgs) -> String {
    args.image.as_deref().map_or_else(
        || crate::commands::through_image::DEFAULT_IMAGE.to_string(),
        |i| i.trim().to_string(),
    )
}

/// A `--userns` mode as the engines spell them (`host`, `keep-id`,
/// `keep-id:uid=1000,gid=1000`, `auto`, `nomap`, `ns:/proc/1/ns/user`): a
/// word of letters, digits and `:=,./_-`; anything else (`garbage;x`) is
/// refused here rather than sent to the engine (#50 low).
fn userns_mode(mode: &str) -> anyhow::Result<String> {
    let ok = mode
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ":=,./_-".contains(c));
    if ok {
        return Ok(mode.to_string());
    }
    Err(CliError::usage(format!(
        "--userns {} is not a user-namespace mode",
        crate::error::printable(mode)
    ))
    .with_hint("pass host, keep-id or keep-id:uid=U,gid=G (rootless Podman), or leave it out for the engine's default")
    .into())
}

/// `--restart`: None for `no`; `always` and `unless-stopped` refused with
/// `--idle-stop` (the engine would start it again after each idle stop).
fn restart(policy: &str, idle_stop: bool) -> anyhow::Result<Option<String>> {
    if idle_stop && matches!(policy, "always" | "unless-stopped") {
        return Err(CliError::usage(format!(
            "--restart {policy} would start the workstation again each time --idle-stop stops it"
        ))
        .with_hint("use --restart on-failure with --idle-stop (it restarts after a crash, not after an idle stop), or drop one of them")
        .into());
    }
    Ok((policy != "no").then(|| policy.to_string()))
}

/// The folder to mount: `--mount DIR` or the current folder, absolute.
fn workspace(mount: Option<&Path>) -> anyhow::Result<PathBuf> {
    let given = match mount {
        Some(m) => m.to_path_buf(),
        None => std::env::current_dir().map_err(|e| {
            CliError::usage(format!("cannot read the current folder: {e}"))
                .with_hint("cd into the project folder, or pass --mount DIR")
        })?,
    };
    let dir = given.canonicalize().map_err(|e| {
        CliError::usage(format!("--mount {}: {e}", given.display())).with_hint(
            "pass a folder that exists (it is mounted read-write at /workspace), or --no-mount",
        )
    })?;
    if !dir.is_dir() {
        return Err(
            CliError::usage(format!("--mount {} is not a folder", given.display()))
                .with_hint("pass the project folder; it is mounted read-write at /workspace")
                .into(),
        );
    }
    Ok(dir)
}

/// Whether `name` is a valid container name (as the engine's rule:
/// `[a-zA-Z0-9][a-zA-Z0-9_.-]*`).
fn checked_name(name: &str) -> anyhow::Result<String> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(name.to_string())
    } else {
        Err(CliError::usage(format!(
            "--name {} is not a container name",
            crate::error::printable(name)
        ))
        .with_hint("a name starts with a letter or digit and holds only letters, digits, _ . and -")
        .into())
    }
}

/// The name `imgctl up` gives a workstation of the current folder (no
/// `--name`, no `--mount`): what `down` and `logs` take without a name.
pub(super) fn this_folders_name() -> anyhow::Result<String> {
    Ok(default_name(Some(&workspace(None)?)))
}

/// `imgctl-FOLDER` after the mounted folder (as Compose names a project
/// after its folder), `imgctl-workstation` without one.
fn default_name(workspace: Option<&Path>) -> String {
    let folder = workspace
        .and_then(|w| w.file_name())
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut clean: String = folder
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    clean = clean
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string();
    if clean.is_empty() {
        clean = "workstation".into();
    }
    format!("imgctl-{clean}")
}

/// The host port for a service: the one given (it must be free), else the
/// one it had last (`kept`) when free, else the default when free, else one
/// the engine picks.
fn port_plan(
    listen: IpAddr,
    given: Option<u16>,
    kept: Option<u16>,
    default: u16,
    flag: &str,
    service: &str,
) -> anyhow::Result<PortPlan> {
    let free = |port: u16| std::net::TcpListener::bind((listen, port)).is_ok();
    match given {
        Some(port) if free(port) => Ok(PortPlan {
            host: Some(port),
            given: true,
            note: None,
        }),
        Some(port) => Err(CliError::usage(format!(
            "{flag} {port}: port {port} on {listen} is taken"
        ))
        .with_hint(format!(
            "free it, pass another {flag}, or leave {flag} out to use {default} or a free one"
        ))
        .into()),
        None if kept.is_some_and(free) => Ok(PortPlan {
            host: kept,
            given: false,
            note: None,
        }),
        None if free(default) => Ok(PortPlan {
            host: Some(default),
            given: false,
            note: None,
        }),
        None => Ok(PortPlan {
            host: None,
            given: false,
            note: Some(format!(
                "port {default} is taken; {service} gets a free port (below), or choose one with {flag}"
            )),
        }),
    }
}

/// The public keys for SSH: the lines of each `--ssh-key` file, else of
/// every `~/.ssh/*.pub`. A given file that holds no public key is an error.
fn ssh_keys(given: &[PathBuf]) -> anyhow::Result<Vec<String>> {
    let key_lines = |text: &str| -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| l.starts_with("ssh-") || l.starts_with("ecdsa-") || l.starts_with("sk-"))
            .map(str::to_string)
            .collect()
    };
    let mut keys = Vec::new();
    for file in given {
        let text = std::fs::read_to_string(file).map_err(|e| {
            CliError::usage(format!("--ssh-key {}: {e}", file.display()))
                .with_hint("pass a public key file, e.g. --ssh-key ~/.ssh/id_ed25519.pub")
        })?;
        if text.contains("PRIVATE KEY") {
            return Err(CliError::usage(format!(
                "--ssh-key {} is a private key",
                file.display()
            ))
            .with_hint("pass the public half (the .pub file beside it); a private key never leaves your machine")
            .into());
        }
        let found = key_lines(&text);
        if found.is_empty() {
            return Err(CliError::usage(format!(
                "--ssh-key {} holds no public key",
                file.display()
            ))
            .with_hint("a public key is one line such as `ssh-ed25519 AAAA… you@host` (`ssh-keygen -t ed25519` makes one)")
            .into());
        }
        keys.extend(found);
    }
    if !given.is_empty() {
        return Ok(keys);
    }
    let Some(home) = std::env::var_os(crate::env_vars::HOME) else {
        return Ok(keys);
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(Path::new(&home).join(".ssh"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "pub"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    for f in files {
        keys.extend(key_lines(&std::fs::read_to_string(f).unwrap_or_default()));
    }
    Ok(keys)
}

/// `--shm-size`: bytes, or with a unit k, m, g (powers of 1024, as docker's).
fn shm_size(text: &str) -> anyhow::Result<i64> {
    let t = text.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (digits, unit) = match t.char_indices().last() {
        Some((i, 'k')) => (&t[..i], 1i64 << 10),
        Some((i, 'm')) => (&t[..i], 1 << 20),
        Some((i, 'g')) => (&t[..i], 1 << 30),
        _ => (t, 1),
    };
    match digits.parse::<i64>().ok().and_then(|n| n.checked_mul(unit)) {
        Some(bytes) if bytes >= 1 << 20 => Ok(bytes),
        _ => Err(
            CliError::usage(format!("--shm-size {text:?} is not a size of 1m or more"))
                .with_hint(
                    "a size is bytes or a number with k, m or g: e.g. --shm-size 16g (the default)",
                )
                .into(),
        ),
    }
}

/// A random JupyterLab token: 16 bytes (128 bits) from the kernel, in hex:
/// 32 characters, so that the URL with it fits an 80-column line.
pub(super) fn token() -> anyhow::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_namespace_mode_is_a_word_of_the_engines() {
        for good in [
            "host",
            "keep-id",
            "keep-id:uid=1000,gid=1000",
            "ns:/proc/1/ns/user",
            "auto",
        ] {
            assert_eq!(userns_mode(good).unwrap(), good);
        }
        for bad in ["garbage;x", "keep id", "$(id)", "a\nb"] {
            let e = userns_mode(bad).unwrap_err();
            assert!(
                e.to_string().contains("is not a user-namespace mode"),
                "{e}"
            );
        }
    }

    #[test]
    fn default_names_follow_the_folder_and_stay_valid_container_names() {
        assert_eq!(
            default_name(Some(Path::new("/home/me/my project"))),
            "imgctl-my-project"
        );
        assert_eq!(
            default_name(Some(Path::new("/home/me/.hidden"))),
            "imgctl-hidden"
        );
        assert_eq!(default_name(Some(Path::new("/"))), "imgctl-workstation");
        assert_eq!(default_name(None), "imgctl-workstation");
        for n in ["imgctl-my-project", "imgctl-hidden", "a", "a.b_c-1"] {
            assert!(checked_name(n).is_ok(), "{n}");
        }
        for n in ["", "-a", "a b", "a/b", "é"] {
            assert!(checked_name(n).is_err(), "{n:?}");
        }
    }

    #[test]
    fn shm_sizes_read_as_docker_reads_them() {
        assert_eq!(shm_size("16g").unwrap(), 16 << 30);
        assert_eq!(shm_size("512m").unwrap(), 512 << 20);
        assert_eq!(shm_size("2GB").unwrap(), 2 << 30);
        assert_eq!(shm_size("1048576").unwrap(), 1 << 20);
        for bad in ["", "g", "-1g", "64k", "1.5g", "lots"] {
            assert!(shm_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_taken_port_is_refused_when_given_and_replaced_when_defaulted() {
        let held = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = held.local_addr().unwrap().port();
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let err =
            port_plan(lo, Some(port), None, 8888, "--jupyter-port", "JupyterLab").unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("port {port} on 127.0.0.1 is taken")),
            "{err}"
        );
        let plan = port_plan(lo, None, None, port, "--jupyter-port", "JupyterLab").unwrap();
        assert_eq!(plan.host, None);
        assert!(plan
            .note
            .unwrap()
            .contains(&format!("port {port} is taken")));
        // The port it had last comes first when free (#53 F10), and gives
        // way to the default when taken.
        let free = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let was = free.local_addr().unwrap().port();
        drop(free);
        let plan = port_plan(lo, None, Some(was), port, "--jupyter-port", "JupyterLab").unwrap();
        assert_eq!((plan.host, plan.given, plan.note), (Some(was), false, None));
        let plan = port_plan(lo, None, Some(port), was, "--jupyter-port", "JupyterLab").unwrap();
        assert_eq!(plan.host, Some(was));
    }

    #[test]
    fn a_restart_policy_that_would_undo_idle_stop_is_refused() {
        assert_eq!(restart("no", true).unwrap(), None);
        assert_eq!(restart("always", false).unwrap().as_deref(), Some("always"));
        assert_eq!(
            restart("on-failure", true).unwrap().as_deref(),
            Some("on-failure")
        );
        let err = restart("unless-stopped", true).unwrap_err();
        let err = err.downcast_ref::<CliError>().unwrap();
        assert_eq!(err.status, crate::error::ExitStatus::Usage);
        assert!(
            err.to_string().contains("each time --idle-stop stops it"),
            "{err}"
        );
    }

    #[test]
    fn ssh_keys_refuse_a_private_key_and_a_file_without_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let public = dir.path().join("id.pub");
        std::fs::write(&public, "ssh-ed25519 AAAAC3Nz me@host\n\n").unwrap();
        assert_eq!(
            ssh_keys(std::slice::from_ref(&public)).unwrap(),
            ["ssh-ed25519 AAAAC3Nz me@host"]
        );
        let private = dir.path().join("id");
        std::fs::write(&private, "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n").unwrap();
        assert!(ssh_keys(&[private])
            .unwrap_err()
            .to_string()
            .contains("is a private key"));
        let empty = dir.path().join("empty.pub");
        std::fs::write(&empty, "not a key\n").unwrap();
        assert!(ssh_keys(&[empty])
            .unwrap_err()
            .to_string()
            .contains("holds no public key"));
    }
}
