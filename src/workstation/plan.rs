//! What one `imgctl up` asks of the engine, checked and with its defaults
//! filled in (the command layer makes it from the flags: `commands/
//! workstation/plan.rs`): the workstation wing starts, compares and
//! labels workstations from it.
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::gpus::GpuSelection;

/// The GPUs `up` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuChoice {
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
pub struct PortPlan {
    /// The host port (None: one the engine picks).
    pub host: Option<u16>,
    /// Whether the port was given by flag (then it is never changed).
    pub given: bool,
    /// A note for the user about this port (a default that was taken).
    pub note: Option<String>,
}

/// Everything `up` needs, checked before the engine is touched.
#[derive(Debug)]
pub struct UpPlan {
    /// The workstation (container) name.
    pub name: String,
    /// The image it starts from.
    pub image: String,
    /// Whether the image was named (an omitted one is no different setting
    /// from a workstation's own, #53 F9).
    pub image_given: bool,
    /// The GPUs asked for.
    pub gpus: GpuChoice,
    /// The host folder mounted at /workspace (None: `--no-mount`).
    pub workspace: Option<PathBuf>,
    /// The SSH public keys let in (none: SSH is off).
    pub keys: Vec<String>,
    /// The host address the ports are published on.
    pub listen: IpAddr,
    /// JupyterLab's host port.
    pub jupyter: PortPlan,
    /// sshd's host port (None: SSH is off).
    pub ssh: Option<PortPlan>,
    /// `--tensorboard`: TensorBoard's host port.
    pub tensorboard: Option<PortPlan>,
    /// The size of /dev/shm in bytes.
    pub shm_bytes: i64,
    /// Whether `--shm-size` was given.
    pub shm_given: bool,
    /// How long to wait for the healthcheck.
    pub wait: Duration,
    /// `--json`: the report on stdout, no spinner.
    pub json: bool,
    /// `--no-verify`.
    pub no_verify: bool,
    /// `--print-ssh-config`: the `~/.ssh/config` block alone on stdout.
    pub print_ssh_config: bool,
    /// Replace the kept JupyterLab token with a new one (`--new-token`).
    pub new_token: bool,
    /// The private key beside the first `--ssh-key FILE.pub` (the `ssh`
    /// line's `-i`).
    pub identity: Option<PathBuf>,
    /// `--idle-stop`: stop after this long idle.
    pub idle_stop: Option<Duration>,
    /// `--restart`, unless `no`.
    pub restart: Option<String>,
    /// `--userns MODE` (`keep-id` on rootless Podman).
    pub userns: Option<String>,
    /// `--gpu-api`.
    pub gpu_api: crate::docker::cdi::GpuApi,
}
