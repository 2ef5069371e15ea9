//! `imgctl idle-watch` (hidden; run inside a workstation by the image's
//! entrypoint for `up --idle-stop`): looks every poll through
//! [`crate::workstation::idle`]'s probes, says when the workstation turns
//! idle or in use again, and exits 0 once it has been idle for `--after`,
//! which makes the entrypoint stop the services and the container.
use std::time::{Duration, SystemTime};

use crate::cli::IdleWatchArgs;
use crate::commands::error::CliError;
use crate::error::ExitStatus;
use crate::nvml::{NvmlBackend, RealNvml};
use crate::output::printer;
use crate::workstation::idle::{look, IdleClock, Look, Probes};

/// How often to look when `--poll` is not given: a tenth of the limit,
/// between 2 s and 30 s (so a stop comes within the limit plus one poll).
pub fn default_poll(after: Duration) -> Duration {
    (after / 10).clamp(Duration::from_secs(2), Duration::from_secs(30))
}

/// `HH:MM:SS UTC` of a moment.
fn clock_time(t: SystemTime) -> String {
    let stamp = humantime::format_rfc3339_seconds(t).to_string();
    format!("{} UTC", &stamp[11..19])
}

/// A duration to the second, in humantime's words (`1m 30s`).
fn rounded(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// `imgctl idle-watch`.
pub fn idle_watch(args: IdleWatchArgs) -> anyhow::Result<ExitStatus> {
    if args.check {
        return Ok(ExitStatus::Success);
    }
    let jupyter = match (
        args.jupyter_port,
        std::env::var(crate::workstation::contract::JUPYTER_TOKEN),
    ) {
        (Some(port), Ok(token)) if !token.is_empty() => Some((port, token)),
        (Some(_), _) => return Err(CliError::usage(
            "--jupyter-port is given but JUPYTER_TOKEN is not set, so JupyterLab cannot be asked",
        )
        .with_hint("run it with the token JupyterLab was started with in JUPYTER_TOKEN")
        .into()),
        (None, _) => None,
    };
    let nvml: Option<Box<dyn NvmlBackend>> = match RealNvml::load() {
        Ok(n) => Some(Box::new(n)),
        Err(_) => None,
    };
    let poll = args.poll.unwrap_or_else(|| default_poll(args.after));
    let mut watched = Vec::new();
    if jupyter.is_some() {
        watched.push("no notebook kernel busy and no JupyterLab activity".to_string());
    }
    if let Some(p) = args.ssh_port {
        watched.push(format!("no SSH session (port {p})"));
    }
    watched.push(match &nvml {
        Some(_) => format!("every GPU below {} %", args.gpu_below),
        None => "no GPU library (NVML), so no GPU to watch".to_string(),
    });
    printer().info(format!(
        "idle-stop: stops this workstation after {} idle: {}; looking every {}",
        rounded(args.after),
        watched.join(", "),
        rounded(poll)
    ));
    let probes = Probes {
        jupyter,
        ssh_port: args.ssh_port,
        nvml: nvml.as_deref(),
    };
    let mut clock = IdleClock::new(args.after, args.gpu_below, SystemTime::now());
    let mut was_idle: Option<bool> = None;
    loop {
        let seen = look(&probes);
        let now = SystemTime::now();
        match clock.observe(now, &seen) {
            Look::InUse(why) => {
                if was_idle != Some(false) {
                    let why: Vec<String> = why.iter().map(ToString::to_string).collect();
                    printer().info(format!("idle-stop: in use: {}", why.join("; ")));
                }
                was_idle = Some(false);
            }
            Look::Idle { since, left } => {
                if was_idle != Some(true) {
                    printer().info(format!(
                        "idle-stop: idle since {}; stops at {} unless it is used",
                        clock_time(since),
                        clock_time(now + left)
                    ));
                }
                was_idle = Some(true);
            }
            Look::Stop { since, idle_for } => {
                printer().info(format!(
                    "idle-stop: stopping the workstation: idle for {} (since {}; the limit is {}); `imgctl up` starts it again",
                    rounded(idle_for),
                    clock_time(since),
                    rounded(clock.after())
                ));
                return Ok(ExitStatus::Success);
            }
        }
        std::thread::sleep(poll);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_is_a_tenth_of_the_limit_within_2_and_30_seconds() {
        assert_eq!(
            default_poll(Duration::from_secs(12)),
            Duration::from_secs(2)
        );
        assert_eq!(
            default_poll(Duration::from_secs(120)),
            Duration::from_secs(12)
        );
        assert_eq!(
            default_poll(Duration::from_secs(3600)),
            Duration::from_secs(30)
        );
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_416_262);
        assert_eq!(clock_time(t), "20:31:02 UTC");
        assert_eq!(rounded(Duration::from_millis(90_700)), "1m 30s");
    }
}
