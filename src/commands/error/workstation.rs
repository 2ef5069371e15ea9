//! What a workstation that cannot be made or found ([`WorkstationError`])
//! means for the user of `imgctl up` and `imgctl down`: its exit status and
//! the hint naming the flag or command that gets past it.

use super::advice::Advice;
use crate::docker::workstation::WorkstationError;

/// Advice for [`WorkstationError`].
pub(super) fn advise(err: &(dyn std::error::Error + 'static)) -> Option<Advice> {
    err.downcast_ref::<WorkstationError>().map(workstation)
}

fn workstation(e: &WorkstationError) -> Advice {
    match e {
        WorkstationError::NameTaken {
            name,
            workstation: true,
        } => Advice::usage(format!(
            "`imgctl up` prints its addresses again when it already runs; `imgctl down {name}` removes it, or pass --name NEW for a second one"
        )),
        WorkstationError::NameTaken { name, .. } => Advice::usage(format!(
            "pass --name NEW, or remove that container (`docker rm -f {name}`) if you no longer need it"
        )),
        WorkstationError::NotFound { .. } => {
            Advice::usage("`imgctl ps` lists the workstations (`imgctl ps -a` stopped ones too)".to_string())
        }
        WorkstationError::NotAWorkstation { name } => Advice::usage(format!(
            "imgctl removes only the workstations it started (`imgctl ps`); remove others with `docker rm -f {name}`"
        )),
        WorkstationError::NotYours { .. } => Advice::usage(
            "`--all-users` lets `down` and `logs` act on another user's workstation (`imgctl ps --all-users` lists them); `imgctl up --name NEW` starts one of your own".to_string(),
        ),
        // The engine by name, and the limit it refused (#53 F6: Podman was
        // told of dockerd's memlock).
        WorkstationError::UlimitRefused { limit, .. } => {
            let limit = limit.as_deref().unwrap_or("memlock");
            Advice::failure(match crate::docker::engine::connected_product() {
                Some(crate::docker::engine::Product::Podman) => format!(
                    "Podman's runtime may not set {limit} this high here (no CAP_SYS_RESOURCE): give Podman limits it may set, `default_ulimits = [\"nofile=20000:20000\", \"nproc=20000:20000\"]` under [containers] in /etc/containers/containers.conf (docs/engines.md)"
                ),
                _ => format!(
                    "let the engine raise the limit {limit}: dockerd started with `Limit{}=infinity` in its systemd unit",
                    limit.to_ascii_uppercase()
                ),
            })
        }
        WorkstationError::RuntimeCannotRun { .. } => Advice::failure(
            "crun does not run containers on this host's hybrid cgroups (v1 controllers beside a v2 tree): set `runtime = \"runc\"` under [engine] in /etc/containers/containers.conf (docs/engines.md), or boot with cgroup v2 alone".to_string(),
        ),
        WorkstationError::PortTaken { .. } => Advice::usage(
            "free the port, pass another (--jupyter-port / --ssh-port), or leave the flag out to use a free one"
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ExitStatus;

    #[test]
    fn every_workstation_error_has_a_hint_and_bad_input_is_a_usage_error() {
        for e in [
            WorkstationError::NameTaken {
                name: "ws".into(),
                workstation: true,
            },
            WorkstationError::NameTaken {
                name: "ws".into(),
                workstation: false,
            },
            WorkstationError::NotFound { name: "ws".into() },
            WorkstationError::NotAWorkstation { name: "ws".into() },
            WorkstationError::NotYours {
                name: "ws".into(),
                owner: "alice (uid 1001)".into(),
            },
            WorkstationError::UlimitRefused {
                ulimits: vec!["memlock=-1".into()],
                limit: Some("memlock".into()),
                message: "operation not permitted".into(),
            },
            WorkstationError::RuntimeCannotRun {
                message: "crun: cgroups in hybrid mode not supported".into(),
            },
            WorkstationError::PortTaken {
                address: "127.0.0.1".into(),
                port: "8888".into(),
                message: "port is already allocated".into(),
            },
        ] {
            let a = workstation(&e);
            let expected = if matches!(
                e,
                WorkstationError::UlimitRefused { .. } | WorkstationError::RuntimeCannotRun { .. }
            ) {
                ExitStatus::Failure
            } else {
                ExitStatus::Usage
            };
            assert_eq!(a.status, expected, "{e}");
            assert!(a.hint.is_some_and(|h| !h.is_empty()), "{e}");
        }
    }
}
