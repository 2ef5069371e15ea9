//! `imgctl up`, `ps`, `down` and `logs`: the workstation of an imgctl image,
//! started the way its users start it by hand, without the classic mistakes
//! (Docker's 64 MB /dev/shm, no memlock ulimit for NCCL, ports open on every
//! interface, a folder its user cannot write, a Jupyter without a token).
//!
//! `up` checks every input before it touches the engine, starts the
//! container, waits for the image's healthcheck and runs the image's own
//! `imgctl verify --level quick` against the GPUs it was given (the
//! lifecycle is the core's, [`crate::workstation`], over
//! [`crate::docker::workstation`]), and prints the JupyterLab URL and the
//! `ssh` line: this layer keeps the words and the exit status. Until the
//! workstation is up, every failure and Ctrl-C removes it.
//!
//! Part: the command layer (`docs/architecture.md`).
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cli::UpArgs;
use crate::commands::error::CliError;
use crate::docker::run::{ContainerGuard, Refusal};
use crate::docker::workstation::{
    self as ws, Listed, Publish, Workstation, WorkstationError, JUPYTER_PORT, SSH_PORT,
    TENSORBOARD_PORT,
};
use crate::error::ExitStatus;
use crate::gpus::GpuSelection;
use crate::output::printer;
use crate::render::labels;
use crate::verify::{Level, Options};
use crate::workstation::owner::{Owner, Whose};
use crate::workstation::{self as life, CameUp, Created, NotUp, Note, QuickVerify, VerifySummary};

mod host_key;
mod idle;
mod manage;
mod plan;
mod report;

pub use idle::idle_watch;
pub use manage::{down, logs, ps};
use plan::{plan, token, GpuChoice, PortPlan, UpPlan};
use report::{print_up, report_of, Phases, Service};

/// The host ports people expect: JupyterLab's own, and the 2222 of every
/// "SSH into a container" guide (22 is the host's sshd).
const DEFAULT_JUPYTER_PORT: u16 = 8888;
const DEFAULT_SSH_PORT: u16 = 2222;
/// TensorBoard's own default.
const DEFAULT_TENSORBOARD_PORT: u16 = 6006;
/// `--wait` and `down --time` accept this many seconds.
const WAIT_RANGE: std::ops::RangeInclusive<i64> = 1..=3600;
/// How long the quick verify inside may take.
const VERIFY_DEADLINE: Duration = Duration::from_secs(300);
/// Lines of the container's log shown when it does not come up.
const LOG_LINES: usize = 15;
/// Version of the `--json` outputs of `up` and `ps`.
pub const SCHEMA_VERSION: u32 = 1;

/// `imgctl up`.
pub fn up(args: UpArgs) -> anyhow::Result<ExitStatus> {
    let plan = plan(&args)?;
    crate::commands::verify_image::check_before_start(
        &args.image,
        &args.key,
        args.registry_ca.as_deref(),
    )?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(start(plan))
}

/// Starts the workstation of `plan` and prints how to reach it.
async fn start(mut plan: UpPlan) -> anyhow::Result<ExitStatus> {
    let mut engine = crate::docker::connect().await?;
    let podman = engine.info.product == crate::docker::engine::Product::Podman;
    if podman {
        engine.ask_rootless().await;
    }
    let docker = engine.docker;
    if let Some((_, is_ws)) = ws::find(&docker, &plan.name).await? {
        let found = ws::list(&docker, true)
            .await?
            .into_iter()
            .find(|w| w.name == plan.name);
        if let Some(Whose::Other(owner)) = found.as_ref().map(|w| Whose::of(w, &Owner::me())) {
            return Err(WorkstationError::NotYours {
                name: plan.name.clone(),
                owner: owner.describe(),
            }
            .into());
        }
        return match found {
            Some(w) if is_ws && w.state != "running" => start_again(&docker, &plan, w).await,
            Some(w) if is_ws => {
                let shm = ws::shm_bytes(&docker, &w.id).await;
                let differ = differences(&plan, &w, shm);
                print_up(&report_of(&w, true, None), plan.json)?;
                if !differ.is_empty() {
                    // Named, one by one, and how to apply them (#45 F5).
                    printer().warn(format!(
                        "{} runs with other settings than these, and nothing was changed: {}; to apply them, `imgctl down {}` (the folder is kept) and run this `imgctl up` again",
                        plan.name,
                        differ.join("; "),
                        plan.name
                    ));
                }
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
    let id_label = |k: &str| image_labels.get(k).and_then(|v| v.parse::<u64>().ok());
    let image_ids = id_label(labels::UID).zip(id_label(labels::GID));
    let rootless_podman = (podman && engine.info.rootless).then_some(engine.info.version.as_str());
    let userns = user_namespace(plan.userns.as_deref(), rootless_podman, image_ids);
    if plan.userns.is_none() {
        if let (Some(mode), Some((uid, _))) = (&userns, image_ids) {
            printer().info(format!(
                "rootless Podman: you are the image's user {user} (uid {uid}) inside, so what it writes in /workspace is yours (--userns {mode}; --userns host for the engine's default)"
            ));
        }
    }
    let keeps_you = userns.as_deref().is_some_and(|m| m.starts_with("keep-id"));
    plan.userns = userns;
    if let Some(dir) = plan.workspace.as_ref().filter(|_| !keeps_you) {
        warn_if_unwritable(dir, &user, image_labels.get(labels::UID));
    }
    for note in [
        &plan.jupyter.note,
        &plan.ssh.as_ref().and_then(|s| s.note.clone()),
        &plan.tensorboard.as_ref().and_then(|s| s.note.clone()),
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
    let interrupt = crate::docker::Termination::install()?;
    let spinner = if plan.json {
        indicatif::ProgressBar::hidden()
    } else {
        printer().spinner(format!("starting {}", plan.name))
    };
    let note = |note: Note| spinner.suspend(|| say_note(&plan, note));
    // The image's user owns what `up` places (its host key).
    let owner = (
        id_label(labels::UID).unwrap_or(1000),
        id_label(labels::GID).unwrap_or(1000),
    );
    // The engine makes the home volume with the container; a new one goes
    // again when the container does (a taken port, refused GPUs, Ctrl-C
    // before healthy). One in use by a kept container is not removed.
    let home = home_volume(&plan.name);
    let home_is_new = !ws::volume_exists(&docker, &home).await;
    let creating = Instant::now();
    let created = create(&docker, &plan, (&user, owner), &token, (&note, podman)).await;
    let made = match created {
        Err(e) => {
            spinner.finish_and_clear();
            Err(e)
        }
        Ok((id, gpus)) => {
            let created_in = creating.elapsed();
            let guard = ContainerGuard::new(id.clone());
            spinner.set_message(format!(
                "waiting for {} to answer (the image's healthcheck)",
                services(&plan)
            ));
            let how = Arrival {
                created_in: Some(created_in),
                guard: Some(guard),
            };
            come_up(&docker, &plan, &id, gpus, spinner, interrupt, how).await
        }
    };
    if made.is_err() && home_is_new {
        let _ = ws::remove_volume(&docker, &home).await;
    }
    made
}

/// The user namespace `up` asks for. `given`: `--userns`;
/// `rootless_podman`: the version of the rootless Podman that answered
/// (None: another engine); `image_ids`: the image's user's uid and gid
/// (its labels). On rootless Podman 4.3 and later, `keep-id` (given, or
/// by default there) becomes `keep-id:uid=U,gid=G`: your uid is the image's
/// user's, so what it writes in /workspace is yours and the image's files
/// under its home stay its own. Plain `keep-id` would run the container as
/// your own uid, which the image's home and services do not know; without
/// keep-id the image's user is one of your subordinate uids, and cannot
/// write your folder. Anything else is the engine's to read, as given.
fn user_namespace(
    given: Option<&str>,
    rootless_podman: Option<&str>,
    image_ids: Option<(u64, u64)>,
) -> Option<String> {
    let options = rootless_podman.is_some_and(|v| {
        let mut parts = v.split(|c: char| !c.is_ascii_digit());
        let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        (major, minor) >= (4, 3)
    });
    let keep_id = match image_ids {
        Some((uid, gid)) if options => format!("keep-id:uid={uid},gid={gid}"),
        _ => "keep-id".to_string(),
    };
    match given {
        Some("keep-id") => Some(keep_id),
        Some(mode) => Some(mode.to_string()),
        None if options && image_ids.is_some() => Some(keep_id),
        None => None,
    }
}

/// The named volume at the user's home of workstation `name`.
fn home_volume(name: &str) -> String {
    format!("{name}-home")
}

/// How a workstation reached [`come_up`]: made now (how long the engine
/// took to create and start it, and the guard that removes it on a
/// failure) or started again (neither).
struct Arrival {
    created_in: Option<Duration>,
    guard: Option<ContainerGuard>,
}

/// From a started container to the printed addresses: waits for the
/// image's healthcheck (`spinner` says so), runs the image's quick verify
/// against `gpus`, prints how to reach it. A new container (`guard`) is
/// removed on any failure or Ctrl-C until it is healthy; one started again
/// is kept (it holds the user's state).
async fn come_up(
    docker: &bollard::Docker,
    plan: &UpPlan,
    id: &str,
    gpus: Option<GpuSelection>,
    spinner: indicatif::ProgressBar,
    mut interrupt: crate::docker::Termination,
    Arrival { created_in, guard }: Arrival,
) -> anyhow::Result<ExitStatus> {
    let started = Instant::now();
    let came_up = tokio::select! {
        r = life::wait_healthy(docker, id, plan.wait, started, LOG_LINES) => r,
        sig = interrupt.recv() => Err(crate::docker::DockerError::Interrupted { signal: sig }.into()),
    };
    spinner.finish_and_clear();
    // Any failure until here removes a new container (the guard, on drop).
    if let CameUp::No { why, log } = came_up? {
        let fate = if guard.is_some() {
            "it was removed"
        } else {
            "it was started again and is kept (`imgctl down` removes it)"
        };
        return Err(not_up(plan, &why, &log, fate));
    }
    if let Some(g) = guard {
        g.keep();
    }
    interrupt.exit_on_next();
    let healthy_in = started.elapsed();
    let verifying = Instant::now();
    let verify = if plan.no_verify {
        None
    } else {
        let spinner = if plan.json {
            indicatif::ProgressBar::hidden()
        } else {
            printer().spinner(format!("imgctl verify --level quick inside {}", plan.name))
        };
        let v = quick_verify(docker, id, gpus.as_ref()).await;
        spinner.finish_and_clear();
        Some(v?)
    };
    let listed = ws::list(docker, false)
        .await?
        .into_iter()
        .find(|w| w.id == id)
        .ok_or_else(|| {
            CliError::failure(format!("{} stopped right after it came up", plan.name))
                .with_hint(format!("see why with `imgctl logs {}`", plan.name))
        })?;
    let verify_in = verify.as_ref().map(|_| verifying.elapsed());
    let mut report = report_of(&listed, false, verify);
    report.seconds = Some(Phases::of(created_in, healthy_in, verify_in));
    if let Some(tb) = &report.tensorboard {
        warn_if_silent(tb).await;
    }
    if let (Some(alias), Some(_)) = (&listed.ssh_alias, &listed.ssh) {
        // The entrypoint says the host key it serves; one that predates
        // kept host keys serves its own, which the alias would refuse.
        let log = ws::log_tail(docker, id, 200).await;
        if let Some(line) = log.lines().find(|l| l.contains("sshd: listening on port")) {
            if !line.contains("host key /etc/imgctl/") {
                printer().warn(format!(
                    "{}'s sshd serves a host key of its own, not the one kept for {alias}: the image's entrypoint predates kept host keys, so `ssh -o HostKeyAlias={alias}` will refuse it; rebuild the image with this imgctl (`imgctl build`)",
                    plan.name
                ));
            }
        }
    }
    print_up(&report, plan.json)?;
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

/// `up` of a stopped workstation (#45 F16: after `docker stop`, a reboot or
/// an idle stop): started again as it was made, with its token, keys,
/// folder and home; then the healthcheck and the quick verify as for a new
/// one. A failure leaves it in place (it holds the user's state).
async fn start_again(
    docker: &bollard::Docker,
    plan: &UpPlan,
    w: Listed,
) -> anyhow::Result<ExitStatus> {
    let shm = ws::shm_bytes(docker, &w.id).await;
    let differ = differences(plan, &w, shm);
    if !differ.is_empty() {
        printer().warn(format!(
            "{} was made with other settings than these, and starts with its own: {}; for these, `imgctl down {}` (the folder is kept) and run this `imgctl up` again",
            plan.name,
            differ.join("; "),
            plan.name
        ));
    }
    printer().info(format!(
        "{} is stopped ({}): starting it again with its token, keys and folder",
        plan.name,
        manage::short_status(&w.status)
    ));
    let interrupt = crate::docker::Termination::install()?;
    let spinner = if plan.json {
        indicatif::ProgressBar::hidden()
    } else {
        printer().spinner(format!("starting {} again", plan.name))
    };
    ws::start_again(docker, &w.id)
        .await
        .inspect_err(|_| spinner.finish_and_clear())?;
    let gpus = match w.gpus.as_str() {
        "" | "none" => None,
        g => crate::gpus::GpuSelection::parse(g).ok(),
    };
    let how = Arrival {
        created_in: None,
        guard: None,
    };
    come_up(docker, plan, &w.id, gpus, spinner, interrupt, how).await
}

/// What a running workstation `w` (with /dev/shm of `shm` bytes) has other
/// than `plan` asks: each as `what: it has X, asked Y`. A setting left to
/// its default (no `--gpus`, a port not given) matches what it has.
fn differences(plan: &UpPlan, w: &Listed, shm: Option<i64>) -> Vec<String> {
    let mut out = Vec::new();
    let mut differ = |what: &str, has: String, asked: String| {
        if has != asked {
            out.push(format!("{what}: it has {has}, asked {asked}"));
        }
    };
    differ("image", w.image.clone(), plan.image.clone());
    let folder = |f: Option<String>| f.unwrap_or_else(|| "none mounted".into());
    differ(
        "folder at /workspace",
        folder(w.workspace.clone()),
        folder(plan.workspace.as_ref().map(|p| p.display().to_string())),
    );
    match &plan.gpus {
        GpuChoice::Auto => {}
        GpuChoice::None => differ("--gpus", w.gpus.clone(), "none".into()),
        GpuChoice::Given(g) => differ("--gpus", w.gpus.clone(), g.to_string()),
    }
    if let Some(has) = shm {
        differ("--shm-size", size_words(has), size_words(plan.shm_bytes));
    }
    // The host port of a container port: the one published now, or for a
    // stopped workstation (which publishes none) the one it was made with
    // (Some(None): one the engine picks at each start); None: no such port.
    let has = |live: &Option<(String, u16)>, container: u16| -> Option<Option<u16>> {
        match live {
            Some((_, p)) => Some(Some(*p)),
            None => w
                .bound
                .iter()
                .find(|(c, _)| *c == container)
                .map(|(_, h)| *h),
        }
    };
    let words = |p: Option<Option<u16>>| match p {
        None => "off".to_string(),
        Some(None) => "any".to_string(),
        Some(Some(p)) => p.to_string(),
    };
    if plan.jupyter.given {
        differ(
            "--jupyter-port",
            words(has(&w.jupyter, ws::JUPYTER_PORT)),
            plan.jupyter.host.map_or("off".into(), |p| p.to_string()),
        );
    }
    let service =
        |asked: &Option<PortPlan>, has: Option<Option<u16>>, what: &str| match (asked, has) {
            (Some(a), Some(p)) if a.given && a.host != p => Some(format!(
                "{what}: it has port {}, asked {}",
                words(Some(p)),
                a.host.map_or("any".into(), |h| h.to_string())
            )),
            (Some(_), None) => Some(format!("{what}: it has none, asked one")),
            // Not asking (no key, no --tensorboard) is no asking for none.
            _ => None,
        };
    out.extend(service(&plan.ssh, has(&w.ssh, ws::SSH_PORT), "SSH"));
    out.extend(service(
        &plan.tensorboard,
        has(&w.tensorboard, ws::TENSORBOARD_PORT),
        "TensorBoard",
    ));
    out
}

/// A size as `--shm-size` takes it: `16g`, `512m`, or bytes.
fn size_words(bytes: i64) -> String {
    match bytes {
        b if b > 0 && b % (1 << 30) == 0 => format!("{}g", b >> 30),
        b if b > 0 && b % (1 << 20) == 0 => format!("{}m", b >> 20),
        b => b.to_string(),
    }
}

/// "JupyterLab and SSH", "JupyterLab, SSH and TensorBoard", …
fn services(plan: &UpPlan) -> &'static str {
    match (plan.ssh.is_some(), plan.tensorboard.is_some()) {
        (true, false) => "JupyterLab and SSH",
        (true, true) => "JupyterLab, SSH and TensorBoard",
        (false, true) => "JupyterLab and TensorBoard",
        (false, false) => "JupyterLab",
    }
}

/// An image whose entrypoint predates `IMGCTL_TENSORBOARD` comes up healthy
/// without it: one GET of the published port, retried for a few seconds,
/// tells, and a warning says so rather than printing a dead URL silently.
async fn warn_if_silent(tb: &Service) {
    let host = match tb.address.as_str() {
        "" | "0.0.0.0" | "::" => "127.0.0.1".to_string(),
        a => a.to_string(),
    };
    let port = tb.port;
    let answered = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if http_ok(&host, port, "/data/environment") {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    })
    .await
    .unwrap_or(false);
    if !answered {
        printer().warn(format!(
            "TensorBoard does not answer on {}: the image's entrypoint may predate `up --tensorboard`; rebuild the image with this imgctl (`imgctl build`)",
            tb.open
        ));
    }
}

/// Whether `GET path` on host:port answers 200 within a second or two.
fn http_ok(host: &str, port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(addr) = format!("{host}:{port}").parse::<std::net::SocketAddr>() else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/") && &head[9..12] == b"200"
}

/// Creates and starts the container ([`life::create`]); with no `--gpus`,
/// an engine that cannot give GPUs gets a container without them (said
/// once). Returns its id and the GPUs it got. `podman`: the engine is
/// Podman (the words of a GPU refusal differ).
async fn create(
    docker: &bollard::Docker,
    plan: &UpPlan,
    (user, owner): (&str, (u64, u64)),
    token: &str,
    (note, podman): (&(dyn Fn(Note) + Sync), bool),
) -> anyhow::Result<(String, Option<GpuSelection>)> {
    let mut env = vec![format!("JUPYTER_TOKEN={token}")];
    let mut publish = vec![Publish {
        container: JUPYTER_PORT,
        address: plan.listen.to_string(),
        host: plan.jupyter.host,
    }];
    let me = Owner::me();
    let mut labels = HashMap::from([
        (ws::LABEL_USER.to_string(), user.to_string()),
        (ws::LABEL_OWNER_UID.to_string(), me.uid.to_string()),
        (ws::LABEL_OWNER.to_string(), me.name),
    ]);
    let mut files = Vec::new();
    match &plan.ssh {
        Some(ssh) => {
            // One host key per name, kept on this machine (#45 F4).
            match host_key::prepare(&plan.name) {
                Ok(key) => {
                    if key.remembered_now && !plan.json {
                        printer().info(format!(
                            "{}'s SSH host key is in {} as {} (kept for every `imgctl up` of this name)",
                            plan.name,
                            key.known_hosts.display(),
                            key.alias
                        ));
                    }
                    labels.insert(ws::LABEL_SSH_ALIAS.into(), key.alias);
                    files.push(ws::PlacedFile {
                        path: host_key::IN_CONTAINER.into(),
                        bytes: key.private,
                        mode: 0o600,
                        owner,
                    });
                }
                Err(why) => printer().info(format!(
                    "SSH: the workstation makes its own host key, new at each `imgctl up` ({why})"
                )),
            }
            if let Some(i) = &plan.identity {
                labels.insert(ws::LABEL_SSH_IDENTITY.into(), i.display().to_string());
            }
            env.push(format!("SSH_AUTHORIZED_KEYS={}", plan.keys.join("\n")));
            publish.push(Publish {
                container: SSH_PORT,
                address: plan.listen.to_string(),
                host: ssh.host,
            });
        }
        None => env.push("IMGCTL_MODE=jupyter".into()),
    }
    if let Some(after) = plan.idle_stop {
        env.push(format!("IMGCTL_IDLE_STOP={}s", after.as_secs()));
    }
    if let Some(tb) = &plan.tensorboard {
        env.push("IMGCTL_TENSORBOARD=1".into());
        publish.push(Publish {
            container: TENSORBOARD_PORT,
            address: plan.listen.to_string(),
            host: tb.host,
        });
    }
    let station = Workstation {
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
        labels,
        files,
        // The user's home outlives the container (#45 item 4): `down`
        // keeps it, `down --volumes` removes it.
        home_volume: Some((home_volume(&plan.name), format!("/home/{user}"))),
        restart: plan.restart.clone(),
        userns: plan.userns.clone(),
        gpu_api: plan.gpu_api,
    };
    let defaulted: Vec<u16> = std::iter::once(&plan.jupyter)
        .chain(plan.ssh.as_ref())
        .chain(plan.tensorboard.as_ref())
        .filter(|p| !p.given)
        .filter_map(|p| p.host)
        .collect();
    let auto = plan.gpus == GpuChoice::Auto;
    match life::create(docker, station, auto, &defaulted, note).await? {
        Created::Started { id, gpus } => Ok((id, gpus)),
        Created::GpusRefused { gpus, refusal, why } => {
            Err(gpus_refused(gpus.as_ref(), refusal, &why, podman))
        }
        Created::GaveUp => {
            Err(CliError::failure(format!("the engine refused to start {}", plan.name)).into())
        }
    }
}

/// Says what [`life::create`] did on its way.
fn say_note(plan: &UpPlan, note: Note) {
    match note {
        Note::NoGpus {
            refusal: Refusal::NoCdiSpec,
            ..
        } => printer().info(format!(
            "the engine has no CDI spec for GPUs ({}; `nvidia-ctk cdi generate` makes one): the workstation starts without GPUs",
            crate::docker::cdi::cdi_kind()
        )),
        Note::NoGpus { .. } => printer().info("the Docker engine cannot give containers GPUs here (no NVIDIA Container Toolkit): the workstation starts without GPUs"),
        Note::UlimitsKept { dropped, asked } => printer().warn(format!(
            "the engine may not raise the ulimit {} (its own limit is lower; asked for {}): the workstation keeps the engine's, so NCCL may pin less host memory; start dockerd with LimitMEMLOCK=infinity to lift it",
            dropped.join(" "),
            asked.join(" ")
        )),
        Note::PortTaken { port } => printer().info(format!(
            "port {port} was taken while {} started; it gets a free port (below)",
            plan.name
        )),
    }
}

/// The error for `--gpus` given by name (or `--gpu-api runtime` on Podman)
/// on an engine that cannot give GPUs; `podman`: the engine is Podman.
fn gpus_refused(
    gpus: Option<&GpuSelection>,
    refusal: Refusal,
    why: &str,
    podman: bool,
) -> anyhow::Error {
    let hint = match refusal {
        Refusal::RuntimeOnPodman => "pass --gpu-api cdi (or leave --gpu-api out: auto is CDI on Podman), with a CDI spec for the GPUs (`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)",
        _ if podman => "make a CDI spec as the line says (Podman reads /etc/cdi and /var/run/cdi), or leave out --gpus to start without GPUs",
        Refusal::NoCdiSpec | Refusal::NoCdi => "make CDI work as the line says, or pass --gpu-api runtime (the NVIDIA runtime's request), or leave out --gpus to start without GPUs",
        Refusal::NoRuntime => "install the NVIDIA Container Toolkit and restart the engine (`nvidia-ctk runtime configure --runtime=docker`), or leave out --gpus to start without GPUs",
    };
    CliError::usage(format!(
        "--gpus {}: the {} cannot give the container GPUs ({why})",
        gpus.map_or("none".into(), |g| g.to_string()),
        if podman { "engine" } else { "Docker engine" }
    ))
    .with_hint(hint)
    .into()
}

/// The error of a workstation that did not come up, after the last lines
/// of its log.
fn not_up(plan: &UpPlan, why: &NotUp, log: &str, fate: &str) -> anyhow::Error {
    let why = match why {
        NotUp::Silent { wait } => format!("did not answer within {} s", wait.as_secs()),
        NotUp::Unhealthy(last) => format!("failed its healthcheck ({last})"),
        NotUp::Exited(code) => format!("exited with code {code}"),
        NotUp::Removed => {
            return CliError::failure(format!(
                "workstation {} was removed from outside while imgctl waited for it to come up",
                plan.name
            ))
            .with_hint("start it again with `imgctl up`; `docker events` shows who removed it")
            .into()
        }
    };
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
    CliError::failure(format!("workstation {} {why}; {fate}", plan.name))
        .with_hint("its log is above; `imgctl up --wait SECS` waits longer on a loaded host")
        .into()
}

/// Runs the image's own `imgctl verify --level quick` inside, expecting the
/// GPUs the container got; its command line is the one `verify --image` and
/// `build --verify` give the image's imgctl ([`super::verify::container_argv`]).
async fn quick_verify(
    docker: &bollard::Docker,
    id: &str,
    gpus: Option<&GpuSelection>,
) -> anyhow::Result<VerifySummary> {
    let opts = Options {
        level: Level::Quick,
        expect: life::expect_for(gpus),
        only: Vec::new(),
        skip: Vec::new(),
        timeout: Duration::from_secs_f64(crate::verify::DEFAULT_CHECK_TIMEOUT_S),
        words: super::verify::WORDS,
    };
    let mut argv = vec!["imgctl".to_string()];
    argv.extend(super::verify::container_argv(&opts));
    match life::quick_verify(docker, id, argv, VERIFY_DEADLINE).await? {
        QuickVerify::Ran(summary) => Ok(summary),
        QuickVerify::NoReport {
            exit_code,
            error,
            last_line,
        } => Err(CliError::failure(format!(
            "imgctl verify inside the workstation printed no report (exit {exit_code}; {error}): {last_line}"
        ))
        .with_hint("run it by hand: `docker exec NAME imgctl verify`")
        .into()),
    }
}

/// Warns when the image's user cannot write the mounted folder (a root-owned
/// folder, an image built for another uid): saving a notebook would fail.
fn warn_if_unwritable(dir: &Path, user: &str, uid: Option<&String>) {
    use std::os::unix::fs::MetadataExt;
    // A folder on a read-only mount (#45 F18): nothing saved in /workspace
    // would stick, whoever owns it.
    if crate::sys::fs::read_only_fs(dir) {
        printer().warn(format!(
            "{} is on a read-only file system: saving in /workspace will fail; mount a writable folder (--mount DIR), or --no-mount for the container's own /workspace",
            dir.display()
        ));
        return;
    }
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

#[cfg(test)]
mod tests {
    use super::user_namespace;

    #[test]
    fn rootless_podman_makes_you_the_images_user() {
        let ids = Some((1000, 1000));
        let mapped = Some("keep-id:uid=1000,gid=1000".to_string());
        // By default, and for a plain keep-id, on rootless Podman 4.3+.
        assert_eq!(user_namespace(None, Some("4.3.1"), ids), mapped);
        assert_eq!(
            user_namespace(Some("keep-id"), Some("5.2.0-dev"), ids),
            mapped
        );
        // Podman before 4.3 has no keep-id options: as given, no default.
        assert_eq!(
            user_namespace(Some("keep-id"), Some("4.2.0"), ids).as_deref(),
            Some("keep-id")
        );
        assert_eq!(user_namespace(None, Some("4.2.0"), ids), None);
        // Another engine, or an image without its user's ids: as given.
        assert_eq!(user_namespace(None, None, ids), None);
        assert_eq!(
            user_namespace(Some("keep-id"), None, ids).as_deref(),
            Some("keep-id")
        );
        assert_eq!(
            user_namespace(Some("keep-id"), Some("4.3.1"), None).as_deref(),
            Some("keep-id")
        );
        // Any other mode passes through, options included.
        for mode in ["host", "keep-id:uid=7", "auto"] {
            assert_eq!(
                user_namespace(Some(mode), Some("4.3.1"), ids).as_deref(),
                Some(mode)
            );
        }
    }
}
