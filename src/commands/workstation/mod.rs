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
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cli::UpArgs;
use crate::commands::error::CliError;
use crate::docker::run::{ContainerGuard, GpuRequestRejected};
use crate::docker::workstation::{
    self as ws, Health, Listed, Publish, Workstation, WorkstationError, JUPYTER_PORT, SSH_PORT,
};
use crate::gpus::GpuSelection;
use crate::output::printer;
use crate::render::labels;
use crate::verify::Report;
use crate::ExitStatus;

mod manage;
mod plan;

pub use manage::{down, logs, ps};
use plan::{plan, token, GpuChoice, UpPlan};

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

/// `imgctl up`.
pub fn up(args: UpArgs) -> anyhow::Result<ExitStatus> {
    let plan = plan(&args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(start(plan, args.json, args.no_verify))
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
    // workstation can do without: GPUs it was not asked for by name,
    // ulimits the engine's runtime may not raise (a dockerd whose own hard
    // memlock limit is low, without CAP_SYS_RESOURCE), and a default port
    // that another container took after the plan found it free.
    let defaulted: Vec<u16> = std::iter::once(&plan.jupyter)
        .chain(plan.ssh.as_ref())
        .filter(|p| !p.given)
        .filter_map(|p| p.host)
        .collect();
    for _ in 0..5 {
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
        } else if let Some(WorkstationError::PortTaken { port, .. }) =
            e.downcast_ref::<WorkstationError>()
        {
            let Some(publish) = station.publish.iter_mut().find(|p| {
                p.host
                    .is_some_and(|h| h.to_string() == *port && defaulted.contains(&h))
            }) else {
                return Err(e);
            };
            note(
                false,
                format!(
                    "port {port} was taken while {} started; it gets a free port (below)",
                    plan.name
                ),
            );
            publish.host = None;
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

#[cfg(test)]
mod tests {
    use super::*;

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
