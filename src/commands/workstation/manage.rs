//! `imgctl ps`, `down` and `logs`: the workstations `up` started, found by
//! their label; nothing else is listed, stopped or read.
use std::time::Duration;

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};

use super::plan::this_folders_name;
use super::report::{report_of, UpReport};
use super::{SCHEMA_VERSION, WAIT_RANGE};
use crate::cli::{DownArgs, LogsArgs, PsArgs};
use crate::commands::error::CliError;
use crate::docker::volume;
use crate::docker::workstation::{self as ws, Listed, WorkstationError};
use crate::error::ExitStatus;
use crate::output::{self, printer};
use crate::workstation as life;
use crate::workstation::owner::{listed_in, swept_by_all, Owner, Scope, Whose};

/// `imgctl ps`.
pub fn ps(args: PsArgs) -> anyhow::Result<ExitStatus> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let listed = runtime.block_on(async {
        let docker = crate::docker::connect().await?.docker;
        let mut listed = ws::list(&docker, args.all).await?;
        ws::read_stop_reasons(&docker, &mut listed).await;
        anyhow::Ok(listed)
    })?;
    let (me, scope) = (Owner::me(), scope(args.all_users));
    let hidden = listed
        .iter()
        .filter(|w| !listed_in(&Whose::of(w, &me), scope))
        .count();
    let listed: Vec<(Listed, Whose)> = listed
        .into_iter()
        .map(|mut w| {
            let whose = Whose::of(&w, &me);
            if matches!(whose, Whose::Other(_)) {
                // Another user's JupyterLab token is theirs (#50 H2).
                w.token = None;
            }
            (w, whose)
        })
        .filter(|(_, whose)| listed_in(whose, scope))
        .collect();
    if args.json {
        printer().json(&serde_json::json!({
            "schema_version": SCHEMA_VERSION,
            "workstations": listed.iter().map(|(w, whose)| {
                let r: UpReport = report_of(w, false, None);
                serde_json::json!({
                    "name": r.name, "id": r.id, "image": r.image, "state": w.state,
                    "status": w.status, "gpus": r.gpus, "workspace": r.workspace,
                    "home_volume": r.home_volume,
                    "jupyter": r.jupyter, "ssh": r.ssh, "tensorboard": r.tensorboard,
                    "created": w.created, "stopped_why": w.stopped_why,
                    "owner": w.owner_uid.map(|uid| serde_json::json!({"uid": uid, "name": w.owner})),
                    "yours": *whose == Whose::Mine,
                })
            }).collect::<Vec<_>>(),
        }))?;
        return Ok(ExitStatus::Success);
    }
    if printer().quiet {
        for (w, _) in &listed {
            printer().data(&w.name);
        }
        return Ok(ExitStatus::Success);
    }
    if hidden > 0 && !printer().quiet {
        printer().info(format!(
            "{} of other users on this engine {} not shown (`imgctl ps --all-users`)",
            plural(hidden, "workstation"),
            if hidden == 1 { "is" } else { "are" }
        ));
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
pub(super) fn short_status(status: &str) -> String {
    let mut s = status.to_string();
    for (long, short) in [
        // Before " second": "Less than a second" is a phrase of its own.
        ("Less than a second", "0 s"),
        (" (healthy)", ", healthy"),
        (" (health: starting)", ", starting"),
        (" (unhealthy)", ", UNHEALTHY"),
        ("Up ", "up "),
        ("Exited ", "exited "),
        (" seconds", " s"),
        (" second", " s"),
        (" minutes", " min"),
        (" hours", " h"),
        ("About a minute", "1 min"),
        ("About an hour", "1 h"),
    ] {
        s = s.replace(long, short);
    }
    s
}

/// `--all-users` as a [`Scope`].
fn scope(all_users: bool) -> Scope {
    if all_users {
        Scope::AllUsers
    } else {
        Scope::Mine
    }
}

/// The table of `imgctl ps`, fitted to stdout's width; a TENSORBOARD column
/// only when some workstation serves it, an OWNER column only when some
/// workstation is not the caller's.
fn ps_table(listed: &[(Listed, Whose)]) -> String {
    let with_tb = listed.iter().any(|(w, _)| w.tensorboard.is_some());
    let with_owner = listed.iter().any(|(_, whose)| *whose != Whose::Mine);
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec!["NAME"];
    if with_owner {
        header.push("OWNER");
    }
    header.extend(["STATUS", "JUPYTER", "SSH"]);
    if with_tb {
        header.push("TENSORBOARD");
    }
    header.extend(["GPUS", "IMAGE", "WORKSPACE"]);
    table.set_header(header);
    let addr = |a: &Option<(String, u16)>| {
        a.as_ref()
            .map_or("-".to_string(), |(h, p)| format!("{h}:{p}"))
    };
    for (w, whose) in listed {
        let mut row = vec![w.name.clone()];
        if with_owner {
            row.push(whose.cell());
        }
        row.extend([
            match &w.stopped_why {
                // `up --idle-stop` said why: the reason users look for.
                Some(why) if why.starts_with("idle-stop: ") => format!(
                    "{}, {}",
                    short_status(&w.status),
                    why.trim_start_matches("idle-stop: ")
                ),
                _ => short_status(&w.status),
            },
            addr(&w.jupyter),
            addr(&w.ssh),
        ]);
        if with_tb {
            row.push(addr(&w.tensorboard));
        }
        row.extend([
            w.gpus.clone(),
            w.image.clone(),
            w.workspace.clone().unwrap_or_else(|| "-".into()),
        ]);
        table.add_row(row);
    }
    let fit = output::table_fit(output::Stream::Stdout, printer().verbose > 0);
    if let output::Fit::Cut(width) = fit {
        // The least useful first: the folder, the image, the GPUs.
        let shift = usize::from(with_tb) + usize::from(with_owner);
        crate::commands::narrow::drop_and_say(
            &mut table,
            width,
            &[6 + shift, 5 + shift, 4 + shift],
        );
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
        let (me, scope) = (Owner::me(), scope(args.all_users));
        let listed = ws::list(&docker, true).await?;
        let whose = |name: &str| {
            listed
                .iter()
                .find(|w| w.name == name)
                .map_or(Whose::Unknown, |w| Whose::of(w, &me))
        };
        let names: Vec<String> = if args.all {
            let (swept, left): (Vec<&Listed>, Vec<&Listed>) = listed
                .iter()
                .partition(|w| swept_by_all(&Whose::of(w, &me), scope));
            let unknown = left.iter().filter(|w| w.owner_uid.is_none()).count();
            if unknown > 0 {
                printer().info(format!(
                    "--all leaves {} of unknown owner (started by an older imgctl; `imgctl ps` lists them): remove one by naming it, `imgctl down NAME`",
                    plural(unknown, "workstation")
                ));
            }
            if left.len() > unknown {
                printer().info(format!(
                    "--all leaves {} of other users (`imgctl ps --all-users` lists them)",
                    plural(left.len() - unknown, "workstation")
                ));
            }
            swept.into_iter().map(|w| w.name.clone()).collect()
        } else if args.names.is_empty() {
            vec![folder_workstation(&docker, "down").await?]
        } else {
            args.names.clone()
        };
        // Every name is checked before anything is removed. With --volumes,
        // a name whose container is gone may still have its home (#53 F8).
        let mut homes_only: Vec<(String, volume::Home)> = Vec::new();
        for name in &names {
            match ws::find(&docker, name).await? {
                Some((_, true)) => {}
                Some((_, false)) => {
                    return Err(WorkstationError::NotAWorkstation { name: name.clone() }.into())
                }
                None => {
                    let home = match args.volumes {
                        true => volume::find(&docker, &life::home_volume(name)).await,
                        false => None,
                    };
                    let Some(home) = home else {
                        return Err(WorkstationError::NotFound { name: name.clone() }.into());
                    };
                    home_may_go(name, &home, &me, &args)?;
                    homes_only.push((name.clone(), home));
                }
            }
        }
        let names: Vec<String> = names
            .into_iter()
            .filter(|n| !homes_only.iter().any(|(h, _)| h == n))
            .collect();
        let others: Vec<(String, Owner)> = names
            .iter()
            .filter_map(|n| match whose(n) {
                Whose::Other(o) => Some((n.clone(), o)),
                _ => None,
            })
            .collect();
        if let Some((name, owner)) = others.first().filter(|_| !args.all_users) {
            return Err(WorkstationError::NotYours {
                name: name.clone(),
                owner: owner.describe(),
            }
            .into());
        }
        if !others.is_empty() && !args.force {
            confirm_others(&others, args.volumes)?;
        }
        if names.is_empty() && homes_only.is_empty() {
            printer().info("no workstations to remove");
        }
        for (name, home) in &homes_only {
            volume::remove(&docker, &home.name).await?;
            printer().info(format!(
                "removed the home volume {} of {name} (its container was already gone)",
                home.name
            ));
        }
        for name in &names {
            let listed_as = listed.iter().find(|w| &w.name == name);
            let home = listed_as.and_then(|w| w.home_volume.clone());
            // #53 F25: a --no-mount workstation keeps no folder.
            let folder = match listed_as.and_then(|w| w.workspace.as_deref()) {
                Some(f) => format!("the folder {f} mounted at /workspace"),
                None => String::new(),
            };
            let grace = if args.force {
                Duration::ZERO
            } else {
                stop_work(&docker, name, grace).await
            };
            let spinner = printer().spinner(format!("stopping {name}"));
            let removed = ws::remove(&docker, name, grace).await;
            spinner.finish_and_clear();
            removed?;
            let line = match (home, folder.is_empty()) {
                (Some(home), _) if args.volumes => {
                    volume::remove(&docker, &home).await?;
                    match folder.is_empty() {
                        true => format!("removed {name} and its home volume {home}"),
                        false => format!("removed {name} and its home volume {home} ({folder} is kept)"),
                    }
                }
                (Some(home), true) => format!(
                    "removed {name} (its home volume {home} is kept; `imgctl down --volumes {name}` removes it too)"
                ),
                (Some(home), false) => format!(
                    "removed {name} ({folder} and the home volume {home} are kept; `imgctl down --volumes {name}` removes the home too)"
                ),
                (None, true) => format!("removed {name}"),
                (None, false) => format!("removed {name} ({folder} is kept)"),
            };
            printer().info(line);
        }
        Ok(ExitStatus::Success)
    })
}

/// Whether `down --volumes NAME` may remove the home volume `home` of a
/// workstation whose container is gone: one `up` labelled as NAME's home
/// and the caller's (another user's with `--all-users`); an unlabelled one
/// (an older imgctl's, or not imgctl's at all) only with `--force`.
fn home_may_go(name: &str, home: &volume::Home, me: &Owner, args: &DownArgs) -> anyhow::Result<()> {
    if home.of.as_deref() != Some(name) && !args.force {
        return Err(CliError::usage(format!(
            "no workstation named {name}; the volume {} has no label saying it is {name}'s home (an older imgctl made it, or something else did)",
            home.name
        ))
        .with_hint(format!("`imgctl down --volumes --force {name}` removes the volume all the same"))
        .into());
    }
    match home.owner_uid {
        Some(uid) if uid != me.uid && !args.all_users => Err(WorkstationError::NotYours {
            name: name.to_string(),
            owner: Owner {
                uid,
                name: home.owner.clone().unwrap_or_else(|| format!("uid {uid}")),
            }
            .describe(),
        }
        .into()),
        _ => Ok(()),
    }
}

/// `imgctl logs`.
pub fn logs(args: LogsArgs) -> anyhow::Result<ExitStatus> {
    use futures_util::StreamExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let docker = crate::docker::connect().await?.docker;
        let name = match &args.name {
            Some(n) => n.clone(),
            None => folder_workstation(&docker, "logs").await?,
        };
        let id = match ws::find(&docker, &name).await? {
            Some((id, true)) => id,
            Some((_, false)) => return Err(WorkstationError::NotAWorkstation { name }.into()),
            None => return Err(WorkstationError::NotFound { name }.into()),
        };
        if !args.all_users {
            let me = Owner::me();
            let listed = ws::list(&docker, true).await?;
            if let Some(Whose::Other(owner)) = listed
                .iter()
                .find(|w| w.id == id)
                .map(|w| Whose::of(w, &me))
            {
                return Err(WorkstationError::NotYours {
                    name,
                    owner: owner.describe(),
                }
                .into());
            }
        }
        let mut stream = docker.logs(
            &id,
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

/// Before the services stop (#45 F1): what still works inside (a training
/// run, a script; not the services, shells or kernels) is named, gets
/// SIGTERM (train-demo saves a checkpoint on it) and up to `grace` to end.
/// Returns the grace left for the services.
async fn stop_work(docker: &bollard::Docker, name: &str, grace: Duration) -> Duration {
    let Ok(Some((id, true))) = ws::find(docker, name).await else {
        return grace;
    };
    let work = crate::docker::work::working(docker, &id).await;
    if work.is_empty() {
        return grace;
    }
    let listed: Vec<String> = work
        .iter()
        .map(|w| format!("{} (pid {})", shorten(&w.command, 60), w.pid))
        .collect();
    printer().info(format!(
        "{name}: still running: {}; sending SIGTERM and waiting up to {} s (--force does not wait)",
        listed.join(", "),
        grace.as_secs()
    ));
    let pids: Vec<u32> = work.iter().map(|w| w.pid).collect();
    if crate::docker::work::terminate(docker, &id, &pids)
        .await
        .is_err()
    {
        return grace;
    }
    let started = std::time::Instant::now();
    let spinner = printer().spinner(format!("waiting for the work in {name} to end"));
    let left = loop {
        let now = crate::docker::work::working(docker, &id).await;
        let left: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| now.iter().any(|w| w.pid == *p))
            .collect();
        if left.is_empty() || started.elapsed() >= grace {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    spinner.finish_and_clear();
    if left.is_empty() {
        printer().info(format!(
            "{name}: the work ended in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
    } else {
        printer().warn(format!(
            "{name}: pid {} did not end within {} s of SIGTERM and is killed with the workstation (down --time SECS waits longer)",
            left.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
            grace.as_secs()
        ));
    }
    grace
        .saturating_sub(started.elapsed())
        .max(Duration::from_secs(1))
}

/// Asks on the terminal before `down` removes other users' workstations
/// (#50 H2); without a terminal to ask on, refuses: `--force` is the
/// answer then. Err: the refusal, nothing removed.
fn confirm_others(others: &[(String, Owner)], volumes: bool) -> anyhow::Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    let list = others
        .iter()
        .map(|(n, o)| format!("{n} ({})", o.describe()))
        .collect::<Vec<_>>()
        .join(", ");
    let what = format!(
        "{} of other users{}: {list}",
        plural(others.len(), "workstation"),
        if volumes {
            " and their home volumes"
        } else {
            ""
        }
    );
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(CliError::usage(format!(
            "imgctl does not remove {what} without asking, and there is no terminal to ask on; nothing was removed"
        ))
        .with_hint("add --force to remove them without asking")
        .into());
    }
    printer().stderr_text(format!("imgctl down: remove {what}? [y/N] "));
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "Yes") {
        Ok(())
    } else {
        Err(CliError::failure("nothing was removed (not confirmed)")
            .with_hint("answer y to remove them, or leave out the other users' names")
            .into())
    }
}

/// `1 workstation`, `2 workstations`.
fn plural(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// `text` cut to `n` characters with an ellipsis.
fn shorten(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(n - 1).collect::<String>())
    }
}

/// `down` or `logs` without a name (#45 F15): the workstation `imgctl up`
/// starts for the current folder, which must exist.
async fn folder_workstation(docker: &bollard::Docker, command: &str) -> anyhow::Result<String> {
    let name = this_folders_name()?;
    match ws::find(docker, &name).await? {
        Some((_, true)) => Ok(name),
        Some((_, false)) => Err(WorkstationError::NotAWorkstation { name }.into()),
        None => Err(CliError::usage(format!(
            "no workstation named {name}, the name `imgctl up` gives this folder"
        ))
        .with_hint(format!(
            "name the workstation: `imgctl {command} NAME` (`imgctl ps -a` lists them)"
        ))
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_column_says_the_engine_s_words_shorter() {
        assert_eq!(short_status("Up 33 seconds (healthy)"), "up 33 s, healthy");
        assert_eq!(short_status("Up 1 second"), "up 1 s");
        assert_eq!(short_status("Up Less than a second"), "up 0 s");
        assert_eq!(
            short_status("Up About a minute (health: starting)"),
            "up 1 min, starting"
        );
        assert_eq!(
            short_status("Exited (0) 3 minutes ago"),
            "exited (0) 3 min ago"
        );
    }
}
