//! **The workstation's lifecycle** (the core of `imgctl up`): create it with
//! its retries ([`create`]), wait until the image's healthcheck passes
//! ([`wait_healthy`]) and run the image's own quick verify inside
//! ([`quick_verify`]), each returning a typed result.
//!
//! The container's configuration, health, exec and listing are
//! [`crate::docker::workstation`]'s. This module decides nothing about
//! flags, defaults or wording, and never prints: what it notices on the way
//! comes out as a [`Note`], what went wrong as a variant of its results;
//! `commands/workstation/` gives them their words and exit status.
//!
//! `owner.rs` says whose a workstation is (`ps`, `down` and `logs` act on
//! the caller's own). `idle.rs` is `up --idle-stop`'s clock and probes, run inside the
//! workstation by the image's entrypoint.
//!
//! Part: the workstation wing (`docs/architecture.md`).
pub mod contract;
pub mod differences;
pub mod host_key;
pub mod idle;
pub mod kept;
pub mod owner;
pub mod plan;
pub mod probe;
pub mod said;
pub mod spec;
pub mod userns;
pub mod venv;

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::docker::run::{GpuRequestRejected, Refusal};
use crate::docker::workstation::{self as ws, Health, Workstation, WorkstationError};
use crate::gpus::GpuSelection;
use crate::verify::{ExpectGpus, Report};

/// The named volume at the user's home of workstation `name`: it outlives
/// the container (`down` keeps it, `down --volumes` removes it).
pub fn home_volume(name: &str) -> String {
    format!("{name}-home")
}

/// What holds a name already, seen by a new `up` of it.
#[derive(Debug)]
pub enum Existing {
    /// Nothing: the name is free.
    Free,
    /// The caller's workstation (or one of unknown owner), stopped: `up`
    /// starts it again as it was made.
    Stopped(Box<crate::docker::workstation::Listed>),
    /// The caller's workstation (or one of unknown owner), running: `up`
    /// prints its addresses again.
    Running(Box<crate::docker::workstation::Listed>),
    /// Another user's workstation (#50 H2): never touched.
    NotYours(owner::Owner),
    /// A container that is no workstation (or one gone between two
    /// looks): the name is taken.
    Taken {
        /// Whether it is one of imgctl's workstations.
        workstation: bool,
    },
}

/// Which of [`Existing`] holds `name` on the engine, seen from `me`.
pub async fn existing(
    docker: &bollard::Docker,
    name: &str,
    me: &owner::Owner,
) -> anyhow::Result<Existing> {
    let Some((_, is_ws)) = ws::find(docker, name).await? else {
        return Ok(Existing::Free);
    };
    let found = ws::list(docker, true)
        .await?
        .into_iter()
        .find(|w| w.name == name);
    Ok(match found {
        Some(w) if is_ws => match owner::Whose::of(&w, me) {
            owner::Whose::Other(o) => Existing::NotYours(o),
            _ if w.state != "running" => Existing::Stopped(Box::new(w)),
            _ => Existing::Running(Box::new(w)),
        },
        _ => Existing::Taken { workstation: is_ws },
    })
}

/// Something [`create`] did on its way that the user should hear of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// The engine cannot give containers GPUs: the workstation starts
    /// without; `why` is the engine's reason (or imgctl's, on Podman).
    NoGpus {
        /// Which refusal it was.
        refusal: Refusal,
        /// Why, in the engine's words.
        why: String,
    },
    /// The engine may not raise these ulimits (`name=value`): the workstation
    /// keeps the engine's; `asked` is what the engine refused.
    UlimitsKept {
        /// The ulimits left out.
        dropped: Vec<String>,
        /// The ulimits the engine refused, as it named them.
        asked: Vec<String>,
    },
    /// One of the engine's own default ulimits (rootful Podman's nofile or
    /// nproc) that its runtime may not set, asked for explicitly instead.
    EngineLimitLowered {
        /// Its name (`nofile`).
        limit: String,
        /// The value asked for.
        value: u64,
    },
    /// A default host port was taken after the plan found it free: the
    /// engine picks one.
    PortTaken {
        /// The port, as the engine named it.
        port: String,
    },
}

/// How [`create`] ended, short of an engine error it does not retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// Created and started: its id and the GPUs it got.
    Started {
        /// The container's id.
        id: String,
        /// The GPUs it got (None: none).
        gpus: Option<GpuSelection>,
    },
    /// GPUs asked for by name (or none left to drop) that the engine cannot give.
    GpusRefused {
        /// The GPUs asked for.
        gpus: Option<GpuSelection>,
        /// Which refusal it was.
        refusal: Refusal,
        /// The engine's reason.
        why: String,
    },
    /// The engine refused every retry.
    GaveUp,
}

/// Creates and starts `station`. At most one retry for each thing an engine
/// may refuse that the workstation can do without: GPUs it was not asked for
/// by name (`gpus_auto`), ulimits the engine's runtime may not raise (a
/// dockerd whose own hard memlock limit is low, without CAP_SYS_RESOURCE),
/// and a default port (`defaulted`) that another container took after the
/// plan found it free. Each retry is told to `note`.
pub async fn create(
    docker: &bollard::Docker,
    mut station: Workstation,
    gpus_auto: bool,
    defaulted: &[u16],
    note: &(dyn Fn(Note) + Sync),
) -> anyhow::Result<Created> {
    // The engine's own default limits its runtime refused, and the value
    // asked for each instead (#53 F6).
    let mut engine_limits: Vec<(String, u64)> = Vec::new();
    for _ in 0..12 {
        // verify inside expects the GPUs of this attempt, as up's own quick
        // verify does (#45 F12): a GPU-less retry must say 0.
        let expected = format!(
            "{}={}",
            crate::env_vars::IMGCTL_EXPECT_GPUS,
            expect_for(station.gpus.as_ref()).as_arg()
        );
        station
            .env
            .retain(|e| !e.starts_with(crate::env_vars::IMGCTL_EXPECT_GPUS));
        station.env.push(expected);
        let e = match ws::create_and_start(docker, &station).await {
            Ok(id) => {
                return Ok(Created::Started {
                    id,
                    gpus: station.gpus,
                })
            }
            Err(e) => e,
        };
        if let Some(rejected) = e
            .chain()
            .find_map(|c| c.downcast_ref::<GpuRequestRejected>())
        {
            // The runtime's request on Podman is the caller's choice to
            // change, GPUs asked for by name or not.
            let runtime_on_podman = rejected.refusal == Refusal::RuntimeOnPodman;
            if !gpus_auto || station.gpus.is_none() || runtime_on_podman {
                return Ok(Created::GpusRefused {
                    gpus: station.gpus,
                    refusal: rejected.refusal,
                    why: rejected.why.clone(),
                });
            }
            note(Note::NoGpus {
                refusal: rejected.refusal,
                why: rejected.why.clone(),
            });
            station.gpus = None;
        } else if let Some(WorkstationError::UlimitRefused { ulimits, limit, .. }) =
            e.downcast_ref::<WorkstationError>()
        {
            match ulimit_retry(&mut station.ulimits, limit.as_deref(), &mut engine_limits) {
                Some(UlimitRetry::Dropped(dropped)) => note(Note::UlimitsKept {
                    dropped,
                    asked: ulimits.clone(),
                }),
                Some(UlimitRetry::Lowered { limit, value }) => {
                    note(Note::EngineLimitLowered { limit, value });
                }
                None => return Err(e),
            }
        } else if let Some(WorkstationError::PortTaken { port, .. }) =
            e.downcast_ref::<WorkstationError>()
        {
            let Some(publish) = station.publish.iter_mut().find(|p| {
                p.host
                    .is_some_and(|h| h.to_string() == *port && defaulted.contains(&h))
            }) else {
                return Err(e);
            };
            note(Note::PortTaken { port: port.clone() });
            publish.host = None;
        } else {
            return Err(e);
        }
    }
    Ok(Created::GaveUp)
}

/// What a retry after a refused ulimit changes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum UlimitRetry {
    /// Ulimits imgctl asked for, left out (`name=value`).
    Dropped(Vec<String>),
    /// One of the engine's own defaults, asked for explicitly at `value`.
    Lowered {
        /// Its name (`nofile`).
        limit: String,
        /// The value asked for now.
        value: u64,
    },
}

/// The lowest value an engine default is lowered to before `up` gives up.
const LOWEST_ENGINE_LIMIT: u64 = 1024;

/// The retry for a refused ulimit (`limit`: the one the runtime named).
/// One that `asked` holds is left out; memlock, then all, when none was
/// named. One of the engine's own defaults (rootful Podman's nofile and
/// nproc, which a runtime without CAP_SYS_RESOURCE may not set) is asked
/// for explicitly at this process's hard limit, then halved, down to
/// [`LOWEST_ENGINE_LIMIT`]. None: nothing left to try.
fn ulimit_retry(
    asked: &mut Vec<(String, i64)>,
    limit: Option<&str>,
    engine_limits: &mut Vec<(String, u64)>,
) -> Option<UlimitRetry> {
    let dropped = |asked: &mut Vec<(String, i64)>, name: &str| {
        let gone: Vec<String> = asked
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        asked.retain(|(n, _)| n != name);
        UlimitRetry::Dropped(gone)
    };
    match limit {
        Some(name) if engine_limits.iter().any(|(n, _)| n == name) => {
            let (_, value) = engine_limits.iter_mut().find(|(n, _)| n == name)?;
            let lower = *value / 2;
            if lower < LOWEST_ENGINE_LIMIT {
                return None;
            }
            *value = lower;
            let v = i64::try_from(lower).ok()?;
            asked.retain(|(n, _)| n != name);
            asked.push((name.to_string(), v));
            Some(UlimitRetry::Lowered {
                limit: name.to_string(),
                value: lower,
            })
        }
        Some(name) if asked.iter().any(|(n, _)| n == name) => Some(dropped(asked, name)),
        Some(name) => {
            // Unlimited here (or unknown): start at half of Podman's 1048576.
            let own = crate::sys::process::hard_limit(name).unwrap_or(1 << 19);
            let v = i64::try_from(own).ok()?;
            engine_limits.push((name.to_string(), own));
            asked.push((name.to_string(), v));
            Some(UlimitRetry::Lowered {
                limit: name.to_string(),
                value: own,
            })
        }
        None if asked.iter().any(|(n, _)| n == "memlock") => Some(dropped(asked, "memlock")),
        None if asked.is_empty() => None,
        None => Some(UlimitRetry::Dropped(
            std::mem::take(asked)
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect(),
        )),
    }
}

/// Why a workstation did not come up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotUp {
    /// Its healthcheck did not pass within the wait.
    Silent {
        /// The wait.
        wait: Duration,
    },
    /// Its healthcheck failed; its last output.
    Unhealthy(String),
    /// Its main process ended with this code.
    Exited(i64),
    /// It was removed from outside while imgctl waited.
    Removed,
}

/// How [`wait_healthy`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CameUp {
    /// The healthcheck passes.
    Yes,
    /// It did not come up: why, and the last lines of its log.
    No {
        /// Why.
        why: NotUp,
        /// The last `log_lines` lines of its log (may be empty).
        log: String,
    },
}

/// Waits until the container's healthcheck passes; ends with the last
/// `log_lines` lines of its log when it exits, turns unhealthy or takes
/// over `wait` since `started`.
pub async fn wait_healthy(
    docker: &bollard::Docker,
    id: &str,
    wait: Duration,
    started: Instant,
    log_lines: usize,
) -> anyhow::Result<CameUp> {
    loop {
        let why = match ws::health(docker, id).await? {
            Health::Healthy => return Ok(CameUp::Yes),
            Health::Starting if started.elapsed() < wait => {
                tokio::time::sleep(Duration::from_millis(250)).await;
                continue;
            }
            Health::Unchecked { test, interval } if started.elapsed() < wait => {
                // Past its interval and never run: the engine runs no
                // healthchecks (Podman without systemd). Run it as it would.
                if started.elapsed() > interval + UNRUN_MARGIN && run_check(docker, id, &test).await
                {
                    return Ok(CameUp::Yes);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Health::Starting | Health::Unchecked { .. } => NotUp::Silent { wait },
            Health::Unhealthy(last) => NotUp::Unhealthy(last),
            Health::Exited(code) => NotUp::Exited(code),
            Health::Removed => {
                return Ok(CameUp::No {
                    why: NotUp::Removed,
                    log: String::new(),
                })
            }
        };
        let log = ws::log_tail(docker, id, log_lines).await;
        return Ok(CameUp::No { why, log });
    }
}

/// How long past its interval a healthcheck the engine never ran is
/// taken as one it does not run.
const UNRUN_MARGIN: Duration = Duration::from_secs(2);

/// At most this long for one run of the image's healthcheck (the
/// template's own `--timeout`).
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs the healthcheck `test` (Docker's form: `["CMD", …]` or
/// `["CMD-SHELL", "…"]`) inside `id` as the engine would; whether it passed.
async fn run_check(docker: &bollard::Docker, id: &str, test: &[String]) -> bool {
    let cmd: Vec<String> = match test.split_first() {
        Some((kind, rest)) if kind == "CMD" => rest.to_vec(),
        Some((kind, rest)) if kind == "CMD-SHELL" => {
            vec!["/bin/sh".into(), "-c".into(), rest.join(" ")]
        }
        _ => return false,
    };
    if cmd.is_empty() {
        return false;
    }
    ws::exec(docker, id, cmd, Vec::new(), CHECK_TIMEOUT)
        .await
        .is_ok_and(|out| out.exit_code == 0)
}

/// The quick verify inside, in short.
#[derive(Debug, Clone, Serialize)]
pub struct VerifySummary {
    /// Whether it passed.
    pub passed: bool,
    /// Its counts.
    pub summary: crate::verify::Summary,
    /// The checks that failed or errored: `id: message`.
    pub failed: Vec<String>,
}

/// How [`quick_verify`] ended.
#[derive(Debug, Clone)]
pub enum QuickVerify {
    /// The image's verify printed its report.
    Ran(VerifySummary),
    /// It printed no report.
    NoReport {
        /// Its exit code.
        exit_code: i64,
        /// Why its stdout is no report.
        error: String,
        /// The last line of its stderr.
        last_line: String,
    },
}

/// The GPU expectation of the quick verify inside a container that got `gpus`.
pub fn expect_for(gpus: Option<&GpuSelection>) -> ExpectGpus {
    match gpus {
        None => ExpectGpus::Exactly(0),
        Some(GpuSelection::All) => ExpectGpus::Any,
        Some(GpuSelection::Count(n)) => ExpectGpus::Exactly(*n),
        Some(GpuSelection::Devices(ids)) => ExpectGpus::Exactly(ids.len() as u32),
    }
}

/// Runs `argv` (the image's own `verify` with `--json`, built by the command
/// layer) inside the container `id`, at most `deadline`, and reads its report.
pub async fn quick_verify(
    docker: &bollard::Docker,
    id: &str,
    argv: Vec<String>,
    deadline: Duration,
) -> anyhow::Result<QuickVerify> {
    let out = ws::exec(docker, id, argv, vec!["NO_COLOR=1".into()], deadline).await?;
    let json = out.stdout.find('{').map_or("", |i| &out.stdout[i..]);
    let report: Report = match serde_json::from_str(json) {
        Ok(r) => r,
        Err(e) => {
            return Ok(QuickVerify::NoReport {
                exit_code: out.exit_code,
                error: e.to_string(),
                last_line: out
                    .stderr
                    .trim()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .to_string(),
            })
        }
    };
    Ok(QuickVerify::Ran(VerifySummary {
        passed: report.passed,
        summary: report.summary.clone(),
        failed: report
            .results
            .iter()
            .filter(|r| r.status.fails_run())
            .map(|r| format!("{}: {}", r.id, r.message))
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_verify_expects_the_gpus_the_container_got() {
        assert_eq!(expect_for(None), ExpectGpus::Exactly(0));
        assert_eq!(expect_for(Some(&GpuSelection::All)), ExpectGpus::Any);
        assert_eq!(
            expect_for(Some(&GpuSelection::Count(2))),
            ExpectGpus::Exactly(2)
        );
    }

    #[test]
    fn a_refused_ulimit_is_left_out_or_an_engine_default_lowered() {
        let mut asked = vec![("memlock".to_string(), -1), ("stack".to_string(), 1 << 26)];
        let mut engine = Vec::new();
        // One imgctl asked for, named: left out.
        assert_eq!(
            ulimit_retry(&mut asked, Some("stack"), &mut engine),
            Some(UlimitRetry::Dropped(vec!["stack=67108864".into()]))
        );
        // The engine's own (Podman's nofile): asked for at this process's
        // hard limit, then halved down to the floor, then given up.
        let own = crate::sys::process::hard_limit("nofile").unwrap();
        assert_eq!(
            ulimit_retry(&mut asked, Some("nofile"), &mut engine),
            Some(UlimitRetry::Lowered {
                limit: "nofile".into(),
                value: own
            })
        );
        assert!(asked.contains(&("nofile".to_string(), own as i64)));
        let mut tries = 0;
        while let Some(r) = ulimit_retry(&mut asked, Some("nofile"), &mut engine) {
            tries += 1;
            assert!(
                matches!(r, UlimitRetry::Lowered { value, .. } if value >= LOWEST_ENGINE_LIMIT)
            );
            assert!(tries < 32);
        }
        assert_eq!(
            asked.iter().filter(|(n, _)| n == "nofile").count(),
            1,
            "{asked:?}"
        );
        // None named: memlock first, then the rest, then nothing.
        assert_eq!(
            ulimit_retry(&mut asked, None, &mut engine),
            Some(UlimitRetry::Dropped(vec!["memlock=-1".into()]))
        );
        assert!(matches!(
            ulimit_retry(&mut asked, None, &mut engine),
            Some(UlimitRetry::Dropped(d)) if d.len() == 1 && d[0].starts_with("nofile=")
        ));
        assert_eq!(ulimit_retry(&mut asked, None, &mut engine), None);
    }
}
