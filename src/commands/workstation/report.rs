//! What `imgctl up` and `ps --json` report of a workstation: its addresses
//! ([`UpReport`]: the JupyterLab URL with its token, the `ssh` line with
//! its `-i` and `HostKeyAlias`, TensorBoard's URL), printed as JSON or as
//! the labelled lines a person reads ([`print_up`]).
use std::time::Duration;

use serde::Serialize;

use super::SCHEMA_VERSION;
use crate::docker::workstation::{self as ws, Listed};
use crate::output::printer;
use crate::workstation::VerifySummary;

/// What `up --json` prints.
#[derive(Debug, Serialize)]
pub(super) struct UpReport {
    pub(super) schema_version: u32,
    pub(super) name: String,
    pub(super) id: String,
    pub(super) image: String,
    pub(super) gpus: String,
    /// How the GPUs were asked for: `cdi` or `runtime` (null without GPUs).
    pub(super) gpu_api: Option<String>,
    pub(super) workspace: Option<String>,
    /// The user namespace it runs in (`keep-id:uid=1000,gid=1000` on
    /// rootless Podman: you are the image's user); null: the engine's default.
    pub(super) userns: Option<String>,
    /// The named volume at the user's home (kept by `down`).
    pub(super) home_volume: Option<String>,
    /// Whether it was already running (nothing was started).
    pub(super) already_up: bool,
    pub(super) jupyter: Option<Service>,
    pub(super) ssh: Option<Service>,
    /// The `~/.ssh/config` block for it (`Host NAME.imgctl`), with SSH.
    pub(super) ssh_config: Option<String>,
    /// `up --tensorboard`: TensorBoard's address.
    pub(super) tensorboard: Option<Service>,
    pub(super) verify: Option<VerifySummary>,
    /// Where the time to come up went (`up` that started it; None in `ps`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) seconds: Option<Phases>,
}

/// `up`'s time, phase by phase, in seconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct Phases {
    /// The engine's create and start (None: started again, not made).
    pub(super) container: Option<f64>,
    /// From started to the image's healthcheck passing.
    pub(super) healthcheck: f64,
    /// The quick verify inside (None: `--no-verify`).
    pub(super) verify: Option<f64>,
    /// All of them.
    pub(super) total: f64,
}

impl Phases {
    /// The phases from their durations.
    pub(super) fn of(
        container: Option<Duration>,
        healthy: Duration,
        verify: Option<Duration>,
    ) -> Self {
        let s = |d: Duration| (d.as_secs_f64() * 10.0).round() / 10.0;
        let total = container.unwrap_or_default() + healthy + verify.unwrap_or_default();
        Phases {
            container: container.map(s),
            healthcheck: s(healthy),
            verify: verify.map(s),
            total: s(total),
        }
    }

    /// `11.0 s (container 1.2 s, healthcheck 8.3 s, verify 1.5 s)`.
    fn words(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = self.container {
            parts.push(format!("container {c:.1} s"));
        }
        parts.push(format!("healthcheck {:.1} s", self.healthcheck));
        if let Some(v) = self.verify {
            parts.push(format!("verify {v:.1} s"));
        }
        format!("{:.1} s ({})", self.total, parts.join(", "))
    }
}

/// One published service.
#[derive(Debug, Serialize)]
pub(super) struct Service {
    pub(super) address: String,
    pub(super) port: u16,
    /// The URL (JupyterLab, with its token) or the command (SSH).
    pub(super) open: String,
}

/// The address to reach a port published on `address` from this machine:
/// 127.0.0.1 for every interface.
fn reachable_host(address: &str) -> &str {
    match address {
        "" | "0.0.0.0" | "::" => "127.0.0.1",
        a => a,
    }
}

/// The JupyterLab URL a browser on this machine opens.
fn jupyter_url(address: &str, port: u16, token: Option<&str>) -> String {
    let host = reachable_host(address);
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

/// The TensorBoard URL a browser on this machine opens.
fn tensorboard_url(address: &str, port: u16) -> String {
    let lab = jupyter_url(address, port, None);
    lab.strip_suffix("lab").unwrap_or(&lab).to_string()
}

/// The `ssh` command line for a published sshd: `-i` the key given to
/// `up`, `HostKeyAlias` the alias its kept host key is known by.
fn ssh_line(
    address: &str,
    port: u16,
    user: &str,
    identity: Option<&str>,
    alias: Option<&str>,
) -> String {
    let host = reachable_host(address);
    let mut line = format!("ssh -p {port}");
    if let Some(i) = identity {
        line.push_str(&format!(" -i {}", shell_word(i)));
    }
    if let Some(alias) = alias {
        line.push_str(&format!(" -o HostKeyAlias={alias}"));
    }
    format!("{line} {user}@{host}")
}

/// The `~/.ssh/config` block of a published sshd (#53: VS Code Remote-SSH
/// and port forwards): `Host NAME.imgctl`, the alias the kept host key is
/// pinned under in `known_hosts`, so the first connection is checked.
fn ssh_config(
    name: &str,
    address: &str,
    port: u16,
    user: &str,
    identity: Option<&str>,
    alias: Option<&str>,
) -> String {
    let host = reachable_host(address);
    // ssh_config quotes a value with spaces in double quotes.
    let value = |v: &str| {
        if v.contains(' ') {
            format!("\"{v}\"")
        } else {
            v.to_string()
        }
    };
    let mut out = format!(
        "Host {}\n  HostName {host}\n  Port {port}\n  User {user}\n",
        alias.map_or_else(|| format!("{name}.imgctl"), str::to_string)
    );
    if let Some(i) = identity {
        out.push_str(&format!(
            "  IdentityFile {}\n  IdentitiesOnly yes\n",
            value(i)
        ));
    }
    if let Some(a) = alias {
        out.push_str(&format!("  HostKeyAlias {a}\n"));
    }
    out
}

/// `word` as one shell word: as it is when safe, else in single quotes.
fn shell_word(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+=:@%,".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

pub(super) fn report_of(w: &Listed, already_up: bool, verify: Option<VerifySummary>) -> UpReport {
    let user = w.user.clone().unwrap_or_else(|| "dev".into());
    UpReport {
        schema_version: SCHEMA_VERSION,
        name: w.name.clone(),
        id: w.id.clone(),
        image: w.image.clone(),
        gpus: w.gpus.clone(),
        gpu_api: w.gpu_api.clone(),
        workspace: w.workspace.clone(),
        userns: w.userns.clone(),
        home_volume: w.home_volume.clone(),
        already_up,
        jupyter: w.jupyter.as_ref().map(|(a, p)| Service {
            address: a.clone(),
            port: *p,
            open: jupyter_url(a, *p, w.token.as_deref()),
        }),
        ssh: w.ssh.as_ref().map(|(a, p)| Service {
            address: a.clone(),
            port: *p,
            open: ssh_line(
                a,
                *p,
                &user,
                w.ssh_identity.as_deref(),
                w.ssh_alias.as_deref(),
            ),
        }),
        ssh_config: w.ssh.as_ref().map(|(a, p)| {
            ssh_config(
                &w.name,
                a,
                *p,
                &user,
                w.ssh_identity.as_deref(),
                w.ssh_alias.as_deref(),
            )
        }),
        tensorboard: w.tensorboard.as_ref().map(|(a, p)| Service {
            address: a.clone(),
            port: *p,
            open: tensorboard_url(a, *p),
        }),
        verify,
        seconds: None,
    }
}

/// Prints `report`: JSON on stdout, or the lines a person reads (each
/// value on its own labelled line, so the URL stays whole for copying).
pub(super) fn print_up(report: &UpReport, json: bool, ssh_config: bool) -> anyhow::Result<()> {
    if json {
        return printer().json(report);
    }
    if ssh_config {
        return match &report.ssh_config {
            Some(block) => {
                printer().data(block.trim_end());
                Ok(())
            }
            None => Err(crate::commands::error::CliError::usage(format!(
                "{} serves no SSH, so it has no ssh config",
                report.name
            ))
            .with_hint("`imgctl down NAME`, then `imgctl up --ssh-key FILE.pub` (every ~/.ssh/*.pub by default)")
            .into()),
        };
    }
    let state = match &report.seconds {
        Some(t) => format!("is up in {}", t.words()),
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
    if let Some(v) = &report.home_volume {
        lines.push(format!(
            "  home        volume {v} (kept by down; down --volumes removes it)"
        ));
    }
    if let Some(j) = &report.jupyter {
        lines.push(format!("  JupyterLab  {}", j.open));
    }
    match &report.ssh {
        Some(s) => lines.push(format!("  SSH         {}", s.open)),
        None => lines.push("  SSH         off (no public key; pass --ssh-key FILE)".into()),
    }
    if let Some(t) = &report.tensorboard {
        lines.push(format!(
            "  TensorBoard {} (--logdir {})",
            t.open,
            ws::WORKSPACE
        ));
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
    fn the_ssh_config_block_names_the_alias_port_user_and_key() {
        assert_eq!(
            ssh_config(
                "p",
                "0.0.0.0",
                2222,
                "dev",
                Some("/home/me/.ssh/work key"),
                Some("p.imgctl")
            ),
            "Host p.imgctl\n  HostName 127.0.0.1\n  Port 2222\n  User dev\n  IdentityFile \"/home/me/.ssh/work key\"\n  IdentitiesOnly yes\n  HostKeyAlias p.imgctl\n"
        );
        assert_eq!(
            ssh_config("p", "127.0.0.1", 22, "dev", None, None),
            "Host p.imgctl\n  HostName 127.0.0.1\n  Port 22\n  User dev\n"
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
            ssh_line("127.0.0.1", 2222, "dev", None, None),
            "ssh -p 2222 dev@127.0.0.1"
        );
        assert_eq!(
            ssh_line(
                "0.0.0.0",
                2222,
                "dev",
                Some("/home/me/.ssh/work key"),
                Some("p.imgctl")
            ),
            "ssh -p 2222 -i '/home/me/.ssh/work key' -o HostKeyAlias=p.imgctl dev@127.0.0.1"
        );
        let p = Phases::of(
            Some(Duration::from_millis(1_240)),
            Duration::from_millis(8_260),
            Some(Duration::from_millis(1_510)),
        );
        assert_eq!(
            p.words(),
            "11.0 s (container 1.2 s, healthcheck 8.3 s, verify 1.5 s)"
        );
        let again = Phases::of(None, Duration::from_millis(3_000), None);
        assert_eq!(again.words(), "3.0 s (healthcheck 3.0 s)");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(tensorboard_url("0.0.0.0", 6006), "http://127.0.0.1:6006/");
        assert_eq!(tensorboard_url("::1", 6007), "http://[::1]:6007/");
    }
}
