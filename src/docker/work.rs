//! The work inside a workstation (#45 F1): the processes `imgctl down`
//! names and sends SIGTERM before the services stop, found from /proc by a
//! listing run inside (no procps needed).
use std::time::Duration;

/// A process inside a workstation that does work: not tini, the
/// entrypoint, a service (sshd, JupyterLab, TensorBoard, `up --idle-stop`'s
/// watch), the healthcheck, an
/// idle shell, an SSH session's own process or a Jupyter kernel (a kernel's
/// `!imgctl train-demo` is its child, and is work).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Working {
    /// Its pid inside the container.
    pub pid: u32,
    /// Its command line.
    pub command: String,
}

/// The listing [`working`] runs inside (`sh -c`): `PID<TAB>COMMAND` a line,
/// from /proc (no procps needed). The marker keeps the listing's own
/// processes (its subshells share its command line) out.
const WORK_LIST: &str = r#": imgctl-down-list
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ "$pid" = 1 ] && continue
  args=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue
  case "$args" in
    '' | *imgctl-down-list* | *imgctl-entrypoint* | *imgctl-healthcheck* | *'python3 -I - '*) continue ;;
    */sshd\ * | 'sshd:'* | *jupyter-lab* | *'jupyter lab'* | *tensorboard* | *ipykernel_launcher*) continue ;;
    *'imgctl idle-watch '*) continue ;;
    'sleep 1 ' | 'bash ' | '-bash ' | '/bin/bash ' | '/usr/bin/bash ' | 'bash -l ' | '/bin/bash -l ') continue ;;
    'sh ' | '-sh ' | '/bin/sh ' | '/bin/sh -l ' | 'zsh ' | '-zsh ' | '/bin/zsh ') continue ;;
  esac
  printf '%s\t%s\n' "$pid" "$args"
done"#;

/// The processes doing work inside the running workstation `id` (see
/// [`Working`]); none when it is not running.
pub async fn working(docker: &bollard::Docker, id: &str) -> Vec<Working> {
    let cmd = vec!["sh".into(), "-c".into(), WORK_LIST.into()];
    let Ok(out) =
        super::workstation::exec(docker, id, cmd, Vec::new(), Duration::from_secs(30)).await
    else {
        return Vec::new();
    };
    parse_working(&out.stdout)
}

/// [`WORK_LIST`]'s lines.
fn parse_working(text: &str) -> Vec<Working> {
    text.lines()
        .filter_map(|l| {
            let (pid, command) = l.split_once('\t')?;
            Some(Working {
                pid: pid.trim().parse().ok()?,
                command: command.trim().to_string(),
            })
        })
        .collect()
}

/// Sends SIGTERM to `pids` inside the workstation `id` (as its user, who
/// owns them); a pid already gone is no error.
pub async fn terminate(docker: &bollard::Docker, id: &str, pids: &[u32]) -> anyhow::Result<()> {
    let mut cmd: Vec<String> = vec!["kill".into(), "-TERM".into()];
    cmd.extend(pids.iter().map(u32::to_string));
    super::workstation::exec(docker, id, cmd, Vec::new(), Duration::from_secs(30)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_listing_reads_pids_and_command_lines() {
        assert_eq!(
            parse_working(
                "123\t/opt/venv/bin/imgctl train-demo --steps 9 \nnoise\n7\tpython train.py\n"
            ),
            vec![
                Working {
                    pid: 123,
                    command: "/opt/venv/bin/imgctl train-demo --steps 9".into()
                },
                Working {
                    pid: 7,
                    command: "python train.py".into()
                },
            ]
        );
    }
}
