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
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cli::UpArgs;
use crate::commands::error::CliError;
use crate::docker::run::{ContainerGuard, Refusal};
use crate::docker::volume;
use crate::docker::workstation::{self as ws, Listed, WorkstationError};
use crate::error::ExitStatus;
use crate::gpus::GpuSelection;
use crate::image::render::labels;
use crate::output::printer;
use crate::verify::{Level, Options};
use crate::workstation::owner::Owner;
use crate::workstation::{
    self as life, CameUp, Created, Existing, NotUp, Note, QuickVerify, VerifySummary,
};

mod idle;
mod manage;
mod plan;
mod report;

pub use idle::idle_watch;
pub use manage::{down, logs, ps};
use plan::{plan, token, GpuChoice, UpPlan};
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
        &plan.image,
        &args.key,
        args.registry_ca.registry_ca.as_deref(),
    )?;
    crate::commands::fit::check_host_image(&plan.image, !matches!(plan.gpus, GpuChoice::None))?;
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
    let engine_id: EngineId = (engine.info.product, engine.info.address.clone());
    let docker = engine.docker;
    match life::existing(&docker, &plan.name, &Owner::me()).await? {
        Existing::Free => {}
        Existing::NotYours(owner) => {
            return Err(WorkstationError::NotYours {
                name: plan.name.clone(),
                owner: owner.describe(),
            }
            .into())
        }
        Existing::Stopped(w) => return start_again(&docker, &plan, *w).await,
        Existing::Running(w) => {
            let shm = ws::shm_bytes(&docker, &w.id).await;
            let differ = differences(&plan, &w, shm);
            print_up(&report_of(&w, true, None), plan.json, plan.print_ssh_config)?;
            if !differ.is_empty() {
                // Named, one by one, and how to apply them (#45 F5).
                printer().warn(format!(
                    "{} runs with other settings than these, and nothing was changed: {}; to apply them, `imgctl down {}` (the folder is kept) and run this `imgctl up` again",
                    plan.name,
                    differ.join("; "),
                    plan.name
                ));
            }
            return Ok(ExitStatus::Success);
        }
        Existing::Taken { workstation } => {
            return Err(WorkstationError::NameTaken {
                name: plan.name.clone(),
                workstation,
            }
            .into())
        }
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
    let userns = life::userns::user_namespace(plan.userns.as_deref(), rootless_podman, image_ids);
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
    let token = kept_token(&plan)?;
    let interrupt = crate::docker::Termination::install()?;
    let spinner = if plan.json {
        indicatif::ProgressBar::hidden()
    } else {
        printer().spinner(format!("starting {}", plan.name))
    };
    let note = |note: Note| spinner.suspend(|| say_note(&plan, &engine_id, note));
    // The image's user owns what `up` places (its host key).
    let owner = (
        id_label(labels::UID).unwrap_or(1000),
        id_label(labels::GID).unwrap_or(1000),
    );
    // The home volume is made labelled with its workstation and owner (so
    // `down --volumes NAME` finds it after the container is gone, #53 F8);
    // a new one goes again when the container does (a taken port, refused
    // GPUs, Ctrl-C before healthy). One in use by a kept container is not
    // removed.
    let home = life::home_volume(&plan.name);
    let home_is_new = !volume::exists(&docker, &home).await;
    let created = match home_is_new {
        true => {
            volume::create_home(
                &docker,
                &home,
                &plan.name,
                &life::owner::labels(&Owner::me()),
            )
            .await
        }
        false => Ok(()),
    };
    let creating = Instant::now();
    let created = match created {
        Ok(()) => create(&docker, &plan, (&user, owner), &token, (&note, podman)).await,
        Err(e) => Err(e),
    };
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
        let _ = volume::remove(&docker, &home).await;
    }
    made
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
    let user = listed.user.as_deref().unwrap_or("dev");
    if let Some(left) = life::venv::check(docker, id, user).await {
        printer().warn(left_behind_line(&plan.name, user, &left));
    }
    // The ports it has now are the ones the next `up` asks for first.
    let port = |s: &Option<(String, u16)>| s.as_ref().map(|(_, p)| *p);
    let ports = life::kept::Ports {
        jupyter: port(&listed.jupyter),
        ssh: port(&listed.ssh),
        tensorboard: port(&listed.tensorboard),
    };
    if let Err(why) = life::kept::save_ports(&plan.name, &ports) {
        printer().verbose(format!("the ports are not kept: {why}"));
    }
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
    print_up(&report, plan.json, plan.print_ssh_config)?;
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

/// What the user had installed into a venv the image's entrypoint moved
/// aside (another Python made it: an image upgrade), and the one command
/// that installs it into the new `~/.venv`.
fn left_behind_line(name: &str, user: &str, left: &life::venv::LeftBehind) -> String {
    let cli = crate::docker::engine::connected_product()
        .unwrap_or(crate::docker::engine::Product::Docker)
        .cli();
    let n = left.packages.len();
    let what = if n == 1 {
        "1 package".to_string()
    } else {
        format!("{n} packages")
    };
    format!(
        "{name}'s ~/.venv was made anew for this image's Python {}: the old one (Python {}) is ~/{} and holds {what} the new one lacks; install them again with: {cli} exec -u {user} {name} sh -c '~/.venv/bin/pip install {}'",
        left.image,
        left.made_by,
        left.old,
        left.packages.join(" ")
    )
}

/// The JupyterLab token of `plan`'s workstation: the one kept for its name
/// (#53 F10), a new one with `--new-token` (said), or, where none can be
/// kept, one for this container alone (said).
fn kept_token(plan: &UpPlan) -> anyhow::Result<String> {
    match life::kept::token(&plan.name, plan.new_token, token) {
        Ok((t, life::kept::TokenFrom::Rotated)) => {
            printer().info(format!(
                "a new JupyterLab token for {} (--new-token): URLs with the old one no longer open",
                plan.name
            ));
            Ok(t)
        }
        Ok((t, _)) => Ok(t),
        Err(why) => {
            printer().info(format!(
                "the JupyterLab token is this container's alone (the next `up` makes another): {why}"
            ));
            token()
        }
    }
}

/// Each difference of a running or stopped workstation from `plan`, in
/// words (`--gpus: it has all, asked 0`); `--new-token` is one, since the
/// token is the container's.
fn differences(plan: &UpPlan, w: &Listed, shm: Option<i64>) -> Vec<String> {
    use life::differences::Setting;
    let token = plan
        .new_token
        .then(|| "--new-token: it has its token, asked a new one".to_string());
    life::differences::of(plan, w, shm)
        .into_iter()
        .map(|d| {
            let what = match d.setting {
                Setting::Image => "image",
                Setting::Folder => "folder at /workspace",
                Setting::Gpus => "--gpus",
                Setting::ShmSize => "--shm-size",
                Setting::JupyterPort => "--jupyter-port",
                Setting::Ssh => "SSH",
                Setting::TensorBoard => "TensorBoard",
            };
            match (d.setting.is_service(), d.has) {
                (true, Some(has)) => format!("{what}: it has port {has}, asked {}", d.asked),
                (true, None) => format!("{what}: it has none, asked one"),
                (false, has) => format!(
                    "{what}: it has {}, asked {}",
                    has.unwrap_or_default(),
                    d.asked
                ),
            }
        })
        .chain(token)
        .collect()
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
    if !life::probe::answers_within(
        &tb.address,
        tb.port,
        "/data/environment",
        Duration::from_secs(10),
    )
    .await
    {
        printer().warn(format!(
            "TensorBoard does not answer on {}: the image's entrypoint may predate `up --tensorboard`; rebuild the image with this imgctl (`imgctl build`)",
            tb.open
        ));
    }
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
    // One host key per name, kept on this machine (#45 F4).
    let key = match plan
        .ssh
        .as_ref()
        .map(|_| life::host_key::prepare(&plan.name))
    {
        Some(Ok(key)) => {
            if key.remembered_now && !plan.json {
                printer().info(format!(
                    "{}'s SSH host key is in {} as {} (kept for every `imgctl up` of this name)",
                    plan.name,
                    key.known_hosts.display(),
                    key.alias
                ));
            }
            Some(key)
        }
        Some(Err(why)) => {
            printer().info(format!(
                "SSH: the workstation makes its own host key, new at each `imgctl up` ({why})"
            ));
            None
        }
        None => None,
    };
    let station = life::spec::workstation(plan, (user, owner), token, key, &Owner::me());
    let defaulted = life::spec::defaulted_ports(plan);
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
/// Which engine answered: its product and address (notes said once per
/// engine are keyed by them).
type EngineId = (crate::docker::engine::Product, String);

fn say_note(plan: &UpPlan, engine: &EngineId, note: Note) {
    let (product, address) = engine;
    // Said at the first `up` on this engine, not at every one (#53 F11):
    // with -v always.
    let once = |what: &str, text: String| {
        if life::said::first_time(&format!("{product} {address} {what}")) || printer().verbose > 0 {
            printer().warn(text);
        }
    };
    match note {
        Note::NoGpus {
            refusal: Refusal::NoCdiSpec,
            ..
        } => printer().info(format!(
            "the engine has no CDI spec for GPUs ({}; `nvidia-ctk cdi generate` makes one): the workstation starts without GPUs",
            crate::docker::cdi::cdi_kind()
        )),
        Note::NoGpus { .. } => printer().info("the Docker engine cannot give containers GPUs here (no NVIDIA Container Toolkit): the workstation starts without GPUs"),
        Note::UlimitsKept { dropped, asked } => {
            let lift = match product {
                crate::docker::engine::Product::Podman => "Podman's runtime lacks CAP_SYS_RESOURCE here; `default_ulimits` in containers.conf sets what it may (docs/engines.md)".to_string(),
                crate::docker::engine::Product::Docker => format!(
                    "`Limit{}=infinity` in dockerd's systemd unit lifts it",
                    dropped
                        .first()
                        .and_then(|d| d.split('=').next())
                        .unwrap_or("memlock")
                        .to_ascii_uppercase()
                ),
            };
            once(
                &dropped.join(" "),
                format!(
                    "{product} may not raise the ulimit {} here (asked for {}): the workstation keeps {product}'s, so NCCL may pin less host memory; {lift}; said once for this engine",
                    dropped.join(" "),
                    asked.join(" ")
                ),
            );
        }
        Note::EngineLimitLowered { limit, value } => once(
            &format!("{limit} lowered"),
            format!(
                "{product}'s runtime may not set its own default ulimit {limit} here (no CAP_SYS_RESOURCE): the workstation asks for {limit}={value}; `default_ulimits` in containers.conf sets it for every container (docs/engines.md); said once for this engine"
            ),
        ),
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
    use super::*;

    #[test]
    fn packages_left_in_an_old_venv_are_one_line_with_the_command() {
        let left = life::venv::LeftBehind {
            old: ".venv.old-1733500000".into(),
            made_by: "3.9".into(),
            image: "3.11".into(),
            packages: vec!["six==1.16.0".into()],
        };
        let line = left_behind_line("imgctl-x", "dev", &left);
        assert_eq!(
            line,
            "imgctl-x's ~/.venv was made anew for this image's Python 3.11: the old one (Python 3.9) is ~/.venv.old-1733500000 and holds 1 package the new one lacks; install them again with: docker exec -u dev imgctl-x sh -c '~/.venv/bin/pip install six==1.16.0'"
        );
    }
}
