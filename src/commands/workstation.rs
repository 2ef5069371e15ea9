//! `imgctl up`, `ps`, `down` and `logs`: the workstation of an imgctl image,
//! started the way its users start it by hand, without the classic mistakes
//! (Docker's 64 MB /dev/shm, no memlock ulimit for NCCL, ports open on every
//! interface, a folder its user cannot write, a Jupyter without a token).
//!
//! `up` checks every input before it touches the engine, starts the
//! container ([`crate::docker::workstation`]), waits for the image's
//! healthcheck, runs the image's own `imgctl verify --level quick` against
//! the GPUs it was given, and prints the JupyterLab URL and the `ssh` line.
//! Until the workstation is up, every failure and Ctrl-C removes it.
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;

use crate::cli::{DownArgs, LogsArgs, PsArgs, UpArgs};
use crate::commands::error::CliError;
use crate::docker::run::{ContainerGuard, GpuRequestRejected};
use crate::docker::workstation::{
    self as ws, Health, Listed, Publish, Workstation, WorkstationError, JUPYTER_PORT, SSH_PORT,
};
use crate::gpus::GpuSelection;
use crate::output::{self, printer};
use crate::render::labels;
use crate::verify::Report;
use crate::ExitStatus;

/// The host ports people expect: JupyterLab's own, and the 2222 of every
/// "SSH into a container" guide (22 is the host's sshd).
const DEFAULT_JUPYTER_PORT: u16 = 8888;
const DEFAULT_SSH_PORT: u16 = 2222;
/// `--wait` and `down --time` accept this many seconds.
const WAIT_RANGE: std::ops::RangeInclusive<i64> = 1..=3600;
/// How long the quick verify inside may take.
const VERIFY_DEADLINE: Duration = Duration::from_secs(300);
/// Lines of the container's log shown when it does not come up.
const LOG_LINES: usize = 15;
/// Version of the `--json` outputs of `up` and `ps`.
pub const SCHEMA_VERSION: u32 = 1;

/// The GPUs `up` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GpuChoice {
    /// No `--gpus`: all when the engine can give GPUs, else none.
    Auto,
    /// `--gpus none`.
    None,
    /// An explicit selection: the engine must serve it.
    Given(GpuSelection),
}

/// A host port: the one asked for, or the default when free, else one the
/// engine picks (said in a note).
#[derive(Debug, Clone, PartialEq, Eq)]
struct PortPlan {
    host: Option<u16>,
    note: Option<String>,
}

/// Everything `up` needs, checked before the engine is touched.
#[derive(Debug)]
struct UpPlan {
    name: String,
    image: String,
    gpus: GpuChoice,
    workspace: Option<PathBuf>,
    keys: Vec<String>,
    listen: IpAddr,
    jupyter: PortPlan,
    ssh: Option<PortPlan>,
    shm_bytes: i64,
    wait: Duration,
}

/// `imgctl up`.
pub fn up(args: UpArgs) -> anyhow::Result<ExitStatus> {
    let plan = plan(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(start(plan, args.json, args.no_verify))
}

/// Checks every flag of `args` (usage errors, exit 2) and fills in defaults.
fn plan(args: &UpArgs) -> anyhow::Result<UpPlan> {
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
    let ssh = if keys.is_empty() {
        None
    } else {
        Some(port_plan(
            listen,
            args.ssh_port,
            DEFAULT_SSH_PORT,
            "--ssh-port",
            "SSH",
        )?)
    };
    Ok(UpPlan {
        name,
        image: args.image.trim().to_string(),
        gpus,
        workspace,
        keys,
        listen,
        jupyter: port_plan(
            listen,
            args.jupyter_port,
            DEFAULT_JUPYTER_PORT,
            "--jupyter-port",
            "JupyterLab",
        )?,
        ssh,
        shm_bytes: shm_size(&args.shm_size)?,
        wait: Duration::from_secs(args.wait.unsigned_abs()),
    })
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
/// default when free, else one the engine picks.
fn port_plan(
    listen: IpAddr,
    given: Option<u16>,
    default: u16,
    flag: &str,
    service: &str,
) -> anyhow::Result<PortPlan> {
    let free = |port: u16| std::net::TcpListener::bind((listen, port)).is_ok();
    match given {
        Some(port) if free(port) => Ok(PortPlan {
            host: Some(port),
            note: None,
        }),
        Some(port) => Err(CliError::usage(format!(
            "{flag} {port}: port {port} on {listen} is taken"
        ))
        .with_hint(format!(
            "free it, pass another {flag}, or leave {flag} out to use {default} or a free one"
        ))
        .into()),
        None if free(default) => Ok(PortPlan {
            host: Some(default),
            note: None,
        }),
        None => Ok(PortPlan {
            host: None,
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
fn token() -> anyhow::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What `up --json` prints.
#[derive(Debug, Serialize)]
struct UpReport {
    schema_version: u32,
    name: String,
    id: String,
    image: String,
    gpus: String,
    workspace: Option<String>,
    /// Whether it was already running (nothing was started).
    already_up: bool,
    jupyter: Option<Service>,
    ssh: Option<Service>,
    verify: Option<VerifySummary>,
}

/// One published service.
#[derive(Debug, Serialize)]
struct Service {
    address: String,
    port: u16,
    /// The URL (JupyterLab, with its token) or the command (SSH).
    open: String,
}

/// The quick verify inside, in short.
#[derive(Debug, Serialize)]
struct VerifySummary {
    passed: bool,
    summary: crate::verify::Summary,
    /// The checks that failed or errored: `id: message`.
    failed: Vec<String>,
}

/// Starts the workstation of `plan` and prints how to reach it.
async fn start(plan: UpPlan, json: bool, no_verify: bool) -> anyhow::Result<ExitStatus> {
    let docker = crate::docker::connect().await?.docker;
    if let Some((_, is_ws)) = ws::find(&docker, &plan.name).await? {
        let running = ws::list(&docker, false)
            .await?
            .into_iter()
            .find(|w| w.name == plan.name);
        return match running {
            Some(w) if is_ws => {
                print_up(&report_of(&w, true, None), None, json)?;
                Ok(ExitStatus::Success)
            }
            _ => Err(WorkstationError::NameTaken {
                name: plan.name.clone(),
                workstation: is_ws,
            }
            .into()),
        };
    }
    let image_labels = crate::docker::run::image_labels(&docker, &plan.image).await?;
    let Some(user) = image_labels.get(labels::USER).cloned() else {
        return Err(CliError::usage(format!(
            "{} was not built by imgctl (it has no {} label), so nothing in it starts JupyterLab or SSH",
            plan.image,
            labels::USER
        ))
        .with_hint("build one with `imgctl build` (its default tag is imgctl/cu124:latest), or start this image with `docker run`")
        .into());
    };
    if let Some(dir) = &plan.workspace {
        warn_if_unwritable(dir, &user, image_labels.get(labels::UID));
    }
    for note in [
        &plan.jupyter.note,
        &plan.ssh.as_ref().and_then(|s| s.note.clone()),
    ]
    .into_iter()
    .flatten()
    {
        printer().info(note);
    }
    if plan.ssh.is_none() {
        printer().info("no public key in ~/.ssh: SSH is off (pass --ssh-key FILE to turn it on)");
    }
    let token = token()?;
    let mut interrupt = crate::docker::Termination::install()?;
    let spinner = if json {
        indicatif::ProgressBar::hidden()
    } else {
        printer().spinner(format!("starting {}", plan.name))
    };
    let note = |warning: bool, text: String| {
        spinner.suspend(|| {
            if warning {
                printer().warn(text)
            } else {
                printer().info(text)
            }
        })
    };
    let (id, gpus) = create(&docker, &plan, &user, &token, &note)
        .await
        .inspect_err(|_| spinner.finish_and_clear())?;
    let guard = ContainerGuard::new(id.clone());
    spinner.set_message(format!(
        "waiting for {} to answer (the image's healthcheck)",
        services(&plan)
    ));
    let started = Instant::now();
    let came_up = tokio::select! {
        r = wait_healthy(&docker, &id, &plan, started) => r,
        sig = interrupt.recv() => Err(crate::docker::DockerError::Interrupted { signal: sig }.into()),
    };
    spinner.finish_and_clear();
    // Any failure until here removes the container (the guard, on drop).
    came_up?;
    guard.keep();
    interrupt.exit_on_next();
    let up_in = started.elapsed();
    let verify = if no_verify {
        None
    } else {
        let spinner = if json {
            indicatif::ProgressBar::hidden()
        } else {
            printer().spinner(format!("imgctl verify --level quick inside {}", plan.name))
        };
        let v = quick_verify(&docker, &id, gpus.as_ref()).await;
        spinner.finish_and_clear();
        Some(v?)
    };
    let listed = ws::list(&docker, false)
        .await?
        .into_iter()
        .find(|w| w.id == id)
        .ok_or_else(|| {
            CliError::failure(format!("{} stopped right after it came up", plan.name))
                .with_hint(format!("see why with `imgctl logs {}`", plan.name))
        })?;
    let report = report_of(&listed, false, verify);
    print_up(&report, Some(up_in), json)?;
    match &report.verify {
        Some(v) if !v.passed => Err(CliError::failure(format!(
            "imgctl verify --level quick failed inside {}: {}; the workstation runs",
            plan.name,
            v.failed.join("; ")
        ))
        .with_hint(format!(
            "see every check with `docker exec {} imgctl verify`; `imgctl down {}` removes the workstation",
            plan.name, plan.name
        ))
        .into()),
        _ => Ok(ExitStatus::Success),
    }
}

/// "JupyterLab and SSH" or "JupyterLab".
fn services(plan: &UpPlan) -> &'static str {
    if plan.ssh.is_some() {
        "JupyterLab and SSH"
    } else {
        "JupyterLab"
    }
}

/// Creates and starts the container; with no `--gpus`, an engine that
/// cannot give GPUs gets a container without them (said once). Returns its
/// id and the GPUs it got.
async fn create(
    docker: &bollard::Docker,
    plan: &UpPlan,
    user: &str,
    token: &str,
    note: &(dyn Fn(bool, String) + Sync),
) -> anyhow::Result<(String, Option<GpuSelection>)> {
    let mut env = vec![format!("JUPYTER_TOKEN={token}")];
    let mut publish = vec![Publish {
        container: JUPYTER_PORT,
        address: plan.listen.to_string(),
        host: plan.jupyter.host,
    }];
    match &plan.ssh {
        Some(ssh) => {
            env.push(format!("SSH_AUTHORIZED_KEYS={}", plan.keys.join("\n")));
            publish.push(Publish {
                container: SSH_PORT,
                address: plan.listen.to_string(),
                host: ssh.host,
            });
        }
        None => env.push("IMGCTL_MODE=jupyter".into()),
    }
    let mut station = Workstation {
        name: plan.name.clone(),
        image: plan.image.clone(),
        gpus: match &plan.gpus {
            GpuChoice::Auto => Some(GpuSelection::All),
            GpuChoice::None => None,
            GpuChoice::Given(g) => Some(g.clone()),
        },
        workspace: plan.workspace.as_ref().map(|w| w.display().to_string()),
        publish,
        shm_bytes: plan.shm_bytes,
        env,
        ulimits: ws::ULIMITS
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect(),
        labels: HashMap::from([(ws::LABEL_USER.to_string(), user.to_string())]),
    };
    // At most one retry for each thing an engine may refuse that the
    // workstation can do without: GPUs it was not asked for by name, and
    // ulimits the engine's runtime may not raise (a dockerd whose own hard
    // memlock limit is low, without CAP_SYS_RESOURCE).
    for _ in 0..3 {
        let e = match ws::create_and_start(docker, &station).await {
            Ok(id) => return Ok((id, station.gpus)),
            Err(e) => e,
        };
        if let Some(rejected) = e
            .chain()
            .find_map(|c| c.downcast_ref::<GpuRequestRejected>())
        {
            if plan.gpus != GpuChoice::Auto || station.gpus.is_none() {
                return Err(gpus_refused(station.gpus.as_ref(), &rejected.0));
            }
            note(false, "the Docker engine cannot give containers GPUs here (no NVIDIA Container Toolkit): the workstation starts without GPUs".into());
            station.gpus = None;
        } else if let Some(WorkstationError::UlimitRefused { ulimits, .. }) =
            e.downcast_ref::<WorkstationError>()
        {
            if station.ulimits.is_empty() {
                return Err(e);
            }
            // memlock is the one a sandboxed engine refuses; then any.
            let dropped: Vec<String> = if station.ulimits.iter().any(|(n, _)| n == "memlock") {
                station.ulimits.retain(|(n, _)| n != "memlock");
                vec!["memlock=-1".into()]
            } else {
                std::mem::take(&mut station.ulimits)
                    .iter()
                    .map(|(n, v)| format!("{n}={v}"))
                    .collect()
            };
            note(true, format!(
                "the engine may not raise the ulimit {} (its own limit is lower; asked for {}): the workstation keeps the engine's, so NCCL may pin less host memory; start dockerd with LimitMEMLOCK=infinity to lift it",
                dropped.join(" "),
                ulimits.join(" ")
            ));
        } else {
            return Err(e);
        }
    }
    Err(CliError::failure(format!("the engine refused to start {}", plan.name)).into())
}

/// The error for `--gpus` given by name on an engine that cannot give GPUs.
fn gpus_refused(gpus: Option<&GpuSelection>, why: &str) -> anyhow::Error {
    CliError::usage(format!(
        "--gpus {}: the Docker engine cannot give the container GPUs ({why})",
        gpus.map_or("none".into(), |g| g.to_string())
    ))
    .with_hint("install the NVIDIA Container Toolkit and restart the engine (`nvidia-ctk runtime configure --runtime=docker`), or leave out --gpus to start without GPUs")
    .into()
}

/// Waits until the container's healthcheck passes; fails (with the last
/// lines of its log) when it exits, turns unhealthy or takes over `plan.wait`.
async fn wait_healthy(
    docker: &bollard::Docker,
    id: &str,
    plan: &UpPlan,
    started: Instant,
) -> anyhow::Result<()> {
    loop {
        let why = match ws::health(docker, id).await? {
            Health::Healthy => return Ok(()),
            Health::Starting if started.elapsed() < plan.wait => {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            Health::Starting => format!("did not answer within {} s", plan.wait.as_secs()),
            Health::Unhealthy(last) => format!("failed its healthcheck ({last})"),
            Health::Exited(code) => format!("exited with code {code}"),
        };
        let log = ws::log_tail(docker, id, LOG_LINES).await;
        if !log.trim().is_empty() {
            printer().stderr_text(format!(
                "the last lines of {}'s log:\n{}\n",
                plan.name,
                log.trim_end()
                    .lines()
                    .map(|l| format!("  {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
        return Err(
            CliError::failure(format!("workstation {} {why}; it was removed", plan.name))
                .with_hint(
                    "its log is above; `imgctl up --wait SECS` waits longer on a loaded host",
                )
                .into(),
        );
    }
}

/// Runs the image's own `imgctl verify --level quick` inside, expecting the
/// GPUs the container got.
async fn quick_verify(
    docker: &bollard::Docker,
    id: &str,
    gpus: Option<&GpuSelection>,
) -> anyhow::Result<VerifySummary> {
    let expect = match gpus {
        None => "0".to_string(),
        Some(GpuSelection::All) => "any".to_string(),
        Some(GpuSelection::Count(n)) => n.to_string(),
        Some(GpuSelection::Devices(ids)) => ids.len().to_string(),
    };
    let cmd = [
        "imgctl",
        "verify",
        "--level",
        "quick",
        "--json",
        "--expect-gpus",
        &expect,
    ]
    .map(String::from)
    .to_vec();
    let out = ws::exec(docker, id, cmd, vec!["NO_COLOR=1".into()], VERIFY_DEADLINE).await?;
    let json = out.stdout.find('{').map_or("", |i| &out.stdout[i..]);
    let report: Report = serde_json::from_str(json).map_err(|e| {
        CliError::failure(format!(
            "imgctl verify inside the workstation printed no report (exit {}; {e}): {}",
            out.exit_code,
            out.stderr.trim().lines().last().unwrap_or_default()
        ))
        .with_hint("run it by hand: `docker exec NAME imgctl verify`")
    })?;
    Ok(VerifySummary {
        passed: report.passed,
        summary: report.summary.clone(),
        failed: report
            .results
            .iter()
            .filter(|r| r.status.fails_run())
            .map(|r| format!("{}: {}", r.id, r.message))
            .collect(),
    })
}

/// Warns when the image's user cannot write the mounted folder (a root-owned
/// folder, an image built for another uid): saving a notebook would fail.
fn warn_if_unwritable(dir: &Path, user: &str, uid: Option<&String>) {
    use std::os::unix::fs::MetadataExt;
    let (Some(uid), Ok(meta)) = (uid.and_then(|u| u.parse::<u32>().ok()), dir.metadata()) else {
        return;
    };
    let mode = meta.mode();
    let writable = (meta.uid() == uid && mode & 0o200 != 0) || mode & 0o002 != 0;
    if !writable {
        printer().warn(format!(
            "the image's user {user} (uid {uid}) cannot write {} (owner uid {}, mode {:o}): saving in /workspace will fail; build the image with --uid $(id -u), or give uid {uid} the folder",
            dir.display(),
            meta.uid(),
            mode & 0o777
        ));
    }
}

/// The JupyterLab URL a browser on this machine opens.
fn jupyter_url(address: &str, port: u16, token: Option<&str>) -> String {
    let host = match address {
        "" | "0.0.0.0" | "::" => "127.0.0.1",
        a => a,
    };
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    match token {
        Some(t) => format!("http://{host}:{port}/lab?token={t}"),
        None => format!("http://{host}:{port}/lab"),
    }
}

/// The `ssh` command line for a published sshd.
fn ssh_line(address: &str, port: u16, user: &str) -> String {
    let host = match address {
        "" | "0.0.0.0" | "::" => "127.0.0.1",
        a => a,
    };
    format!("ssh -p {port} {user}@{host}")
}

fn report_of(w: &Listed, already_up: bool, verify: Option<VerifySummary>) -> UpReport {
    let user = w.user.clone().unwrap_or_else(|| "dev".into());
    UpReport {
        schema_version: SCHEMA_VERSION,
        name: w.name.clone(),
        id: w.id.clone(),
        image: w.image.clone(),
        gpus: w.gpus.clone(),
        workspace: w.workspace.clone(),
        already_up,
        jupyter: w.jupyter.as_ref().map(|(a, p)| Service {
            address: a.clone(),
            port: *p,
            open: jupyter_url(a, *p, w.token.as_deref()),
        }),
        ssh: w.ssh.as_ref().map(|(a, p)| Service {
            address: a.clone(),
            port: *p,
            open: ssh_line(a, *p, &user),
        }),
        verify,
    }
}

/// Prints `report`: JSON on stdout, or the lines a person reads (each
/// value on its own labelled line, so the URL stays whole for copying).
fn print_up(report: &UpReport, up_in: Option<Duration>, json: bool) -> anyhow::Result<()> {
    if json {
        return printer().json(report);
    }
    let state = match up_in {
        Some(t) => format!("is up in {:.1} s", t.as_secs_f64()),
        None if report.already_up => "is already up (nothing was changed)".to_string(),
        None => "is up".to_string(),
    };
    let mut lines = vec![
        format!("{} {state}", report.name),
        format!("  image       {} (GPUs: {})", report.image, report.gpus),
        format!(
            "  workspace   {}",
            report
                .workspace
                .as_ref()
                .map_or("none mounted".to_string(), |w| format!(
                    "{w} at {}",
                    ws::WORKSPACE
                ))
        ),
    ];
    if let Some(j) = &report.jupyter {
        lines.push(format!("  JupyterLab  {}", j.open));
    }
    match &report.ssh {
        Some(s) => lines.push(format!("  SSH         {}", s.open)),
        None => lines.push("  SSH         off (no public key; pass --ssh-key FILE)".into()),
    }
    if let Some(v) = &report.verify {
        let s = &v.summary;
        let counts: Vec<String> = [
            (s.pass, "pass"),
            (s.warn, "warn"),
            (s.fail + s.error, "fail"),
            (s.skip, "skip"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        lines.push(format!(
            "  verify      {} (quick: {})",
            if v.passed { "passed" } else { "FAILED" },
            counts.join(", ")
        ));
    }
    lines.push(format!("  stop        imgctl down {}", report.name));
    printer().data(lines.join("\n"));
    Ok(())
}

/// `imgctl ps`.
pub fn ps(args: PsArgs) -> anyhow::Result<ExitStatus> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listed = runtime.block_on(async {
        let docker = crate::docker::connect().await?.docker;
        ws::list(&docker, args.all).await
    })?;
    if args.json {
        let rows: Vec<UpReport> = listed
            .iter()
            .map(|w| report_of(w, true, None))
            .map(|mut r| {
                r.already_up = false;
                r
            })
            .collect();
        printer().json(&serde_json::json!({
            "schema_version": SCHEMA_VERSION,
            "workstations": listed.iter().zip(rows).map(|(w, r)| serde_json::json!({
                "name": r.name, "id": r.id, "image": r.image, "state": w.state,
                "status": w.status, "gpus": r.gpus, "workspace": r.workspace,
                "jupyter": r.jupyter, "ssh": r.ssh, "created": w.created,
            })).collect::<Vec<_>>(),
        }))?;
        return Ok(ExitStatus::Success);
    }
    if printer().quiet {
        for w in &listed {
            printer().data(&w.name);
        }
        return Ok(ExitStatus::Success);
    }
    if listed.is_empty() {
        printer().info(if args.all {
            "no workstations (`imgctl up` starts one)"
        } else {
            "no workstation runs (`imgctl up` starts one; `imgctl ps -a` shows stopped ones)"
        });
        return Ok(ExitStatus::Success);
    }
    printer().data(ps_table(&listed).trim_end());
    Ok(ExitStatus::Success)
}

/// The engine's status text, shorter for the table: `Up 33 seconds
/// (healthy)` → `up 33 s, healthy` (`--json` keeps the engine's words).
fn short_status(status: &str) -> String {
    let mut s = status.to_string();
    for (long, short) in [
        (" (healthy)", ", healthy"),
        (" (health: starting)", ", starting"),
        (" (unhealthy)", ", UNHEALTHY"),
        ("Up ", "up "),
        ("Exited ", "exited "),
        (" seconds", " s"),
        (" minutes", " min"),
        (" hours", " h"),
        ("About a minute", "1 min"),
        ("About an hour", "1 h"),
        ("Less than a second", "0 s"),
    ] {
        s = s.replace(long, short);
    }
    s
}

/// The table of `imgctl ps`, fitted to stdout's width.
fn ps_table(listed: &[Listed]) -> String {
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    table.set_header([
        "NAME",
        "STATUS",
        "JUPYTER",
        "SSH",
        "GPUS",
        "IMAGE",
        "WORKSPACE",
    ]);
    let addr = |a: &Option<(String, u16)>| {
        a.as_ref()
            .map_or("-".to_string(), |(h, p)| format!("{h}:{p}"))
    };
    for w in listed {
        table.add_row([
            w.name.clone(),
            short_status(&w.status),
            addr(&w.jupyter),
            addr(&w.ssh),
            w.gpus.clone(),
            w.image.clone(),
            w.workspace.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    let fit = output::table_fit(output::Stream::Stdout, printer().verbose > 0);
    if let output::Fit::Cut(width) = fit {
        // The least useful first: the folder, the image, the GPUs.
        output::drop_columns(&mut table, width, &[6, 5, 4]);
    }
    output::fit_table(&mut table, fit);
    table.to_string()
}

/// `imgctl down`.
pub fn down(args: DownArgs) -> anyhow::Result<ExitStatus> {
    if !WAIT_RANGE.contains(&args.time) && args.time != 0 {
        return Err(CliError::usage(format!("--time {} is not a number of seconds from 0 to 3600", args.time))
            .with_hint("the services get this long to stop before they are killed: e.g. --time 10 (the default)")
            .into());
    }
    let grace = Duration::from_secs(args.time.unsigned_abs());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let docker = crate::docker::connect().await?.docker;
        let names: Vec<String> = if args.all {
            ws::list(&docker, true)
                .await?
                .into_iter()
                .map(|w| w.name)
                .collect()
        } else {
            args.names.clone()
        };
        // Every name is checked before anything is removed.
        for name in &names {
            match ws::find(&docker, name).await? {
                Some((_, true)) => {}
                Some((_, false)) => {
                    return Err(WorkstationError::NotAWorkstation { name: name.clone() }.into())
                }
                None => return Err(WorkstationError::NotFound { name: name.clone() }.into()),
            }
        }
        if names.is_empty() {
            printer().info("no workstations to remove");
        }
        for name in &names {
            let spinner = printer().spinner(format!("stopping {name}"));
            let removed = ws::remove(&docker, name, grace).await;
            spinner.finish_and_clear();
            removed?;
            printer().info(format!(
                "removed {name} (the folder mounted at /workspace is kept)"
            ));
        }
        Ok(ExitStatus::Success)
    })
}

/// `imgctl logs`.
pub fn logs(args: LogsArgs) -> anyhow::Result<ExitStatus> {
    use futures_util::StreamExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let docker = crate::docker::connect().await?.docker;
        match ws::find(&docker, &args.name).await? {
            Some((_, true)) => {}
            Some((_, false)) => {
                return Err(WorkstationError::NotAWorkstation {
                    name: args.name.clone(),
                }
                .into())
            }
            None => {
                return Err(WorkstationError::NotFound {
                    name: args.name.clone(),
                }
                .into())
            }
        }
        let mut stream = docker.logs(
            &args.name,
            Some(bollard::query_parameters::LogsOptions {
                stdout: true,
                stderr: true,
                follow: args.follow,
                tail: args.tail.map_or("all".to_string(), |n| n.to_string()),
                ..Default::default()
            }),
        );
        while let Some(chunk) = stream.next().await {
            match chunk? {
                bollard::container::LogOutput::StdErr { message } => {
                    printer().stderr_text(String::from_utf8_lossy(&message))
                }
                other => printer().data_bytes(&other.into_bytes()),
            }
        }
        Ok(ExitStatus::Success)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let err = port_plan(lo, Some(port), 8888, "--jupyter-port", "JupyterLab").unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("port {port} on 127.0.0.1 is taken")),
            "{err}"
        );
        let plan = port_plan(lo, None, port, "--jupyter-port", "JupyterLab").unwrap();
        assert_eq!(plan.host, None);
        assert!(plan
            .note
            .unwrap()
            .contains(&format!("port {port} is taken")));
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

    #[test]
    fn the_status_column_says_the_engine_s_words_shorter() {
        assert_eq!(short_status("Up 33 seconds (healthy)"), "up 33 s, healthy");
        assert_eq!(
            short_status("Up About a minute (health: starting)"),
            "up 1 min, starting"
        );
        assert_eq!(
            short_status("Exited (0) 3 minutes ago"),
            "exited (0) 3 min ago"
        );
    }

    #[test]
    fn urls_and_ssh_lines_name_an_address_this_machine_reaches() {
        assert_eq!(
            jupyter_url("0.0.0.0", 8888, Some("t")),
            "http://127.0.0.1:8888/lab?token=t"
        );
        assert_eq!(jupyter_url("::1", 8888, None), "http://[::1]:8888/lab");
        assert_eq!(
            ssh_line("127.0.0.1", 2222, "dev"),
            "ssh -p 2222 dev@127.0.0.1"
        );
    }
}
