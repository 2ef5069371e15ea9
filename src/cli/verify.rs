//! `imgctl verify`'s flags: a host, an image (`--image`), a fleet
//! (`--fleet`, with its history) or one node against the fleet's history
//! (`--against-history`).
use std::path::PathBuf;

use clap::Args;

use super::RegistryCa;
use crate::verify::Level;

/// Default nodes in a group of `verify --fleet`'s tree (`--group-size`):
/// a rack's worth.
pub const DEFAULT_GROUP_SIZE: usize = 8;

/// `imgctl verify`.
#[derive(Debug, Args)]
#[command(mut_arg("registry_ca", |a| a.help("With --key: the registry's CA certificate (PEM) for reading the verdict, beside /etc/docker/certs.d/HOST:PORT/*.crt and the system's CAs [default: those only]").requires("key")))]
pub struct VerifyArgs {
    /// Run the checks inside a container of this image instead of here.
    #[arg(long, value_name = "TAG")]
    pub image: Option<String>,
    /// With --image: run it only when its registry manifest carries a verify verdict that passed, signed by this public key (repeatable) [default: no signature checked].
    #[arg(long, value_name = "FILE", requires = "image")]
    pub key: Vec<PathBuf>,
    /// `--registry-ca`.
    #[command(flatten)]
    pub registry_ca: RegistryCa,
    /// With --image: GPUs for the container: all, a count, device ids (0,2; one: device=3) or GPU-/MIG- UUIDs.
    #[arg(
        long,
        default_value = "all",
        value_name = "all|N|IDS",
        requires = "image",
        value_hint = clap::ValueHint::Other
    )]
    pub gpus: String,
    /// Which checks run.
    #[arg(long, value_enum, default_value_t = Level::Quick)]
    pub level: Level,
    /// How many GPUs must be present: a number, or any (at least one) [env: IMGCTL_EXPECT_GPUS, which `imgctl up` sets in a workstation].
    #[arg(long, default_value = "any", value_name = "N|any", env = crate::env_vars::IMGCTL_EXPECT_GPUS, hide_env = true)]
    pub expect_gpus: String,
    /// Run only these checks (ids or id prefixes); repeatable.
    #[arg(long, value_name = "ID", num_args = 1.., value_hint = clap::ValueHint::Other)]
    pub only: Vec<String>,
    /// Skip these checks (ids or id prefixes); repeatable.
    #[arg(long, value_name = "ID", num_args = 1.., value_hint = clap::ValueHint::Other)]
    pub skip: Vec<String>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write a JUnit XML report here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Per-check deadline in seconds (0.1 to 3600).
    #[arg(
        long,
        default_value_t = crate::verify::DEFAULT_CHECK_TIMEOUT_S,
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub check_timeout: f64,
    /// List every check (id, level, scope, what it checks) and exit.
    #[arg(long)]
    pub list_checks: bool,
    /// With --image: extra bind mounts for the container (SRC:DST[:ro]); repeatable.
    #[arg(long = "mount", value_name = "SRC:DST[:ro]", requires = "image")]
    pub mounts: Vec<String>,
    /// Check every node of the launcher's world (one imgctl per node, started by torchrun, srun or a Kubernetes Job); rank 0 prints the fleet's report.
    #[arg(long, conflicts_with_all = ["image", "list_checks"])]
    pub fleet: bool,
    /// With --fleet: bound in seconds on each wait (a node joining, its report, its link probe), 1 to 3600.
    #[arg(
        long,
        default_value_t = 45.0,
        value_name = "SECS",
        requires = "fleet",
        allow_negative_numbers = true
    )]
    pub fleet_timeout: f64,
    /// With --fleet: MiB rank 0 sends each node to time its link (1 to 4096; under 8, the link is checked but not timed).
    #[arg(long, default_value_t = 16, value_name = "MIB", requires = "fleet")]
    pub link_mib: u64,
    /// With --fleet: the least MB/s (10^6 bytes/s) each link from rank 0 must carry; a slower one fails [default: none, each link judged against the fleet's median].
    #[arg(
        long,
        value_name = "MB/S",
        requires = "fleet",
        allow_negative_numbers = true
    )]
    pub link_floor: Option<f64>,
    /// With --fleet: nodes in a group of the tree that times the links (1 to 10000): rank 0 times its group's and the other leaders' links, each leader its own group's, all groups at once; nodes under one switch (SLURM_TOPOLOGY_ADDR) group together; 1 times every link from rank 0.
    #[arg(
        long,
        default_value_t = DEFAULT_GROUP_SIZE,
        value_name = "N",
        requires = "fleet",
        value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(1..=10000), usize::from)
    )]
    pub group_size: usize,
    /// With --fleet: seconds between two heartbeats of a node, sent by a thread of its own beside its checks [default: 1].
    #[arg(
        long,
        value_name = "SECS",
        requires = "fleet",
        allow_negative_numbers = true
    )]
    pub heartbeat: Option<f64>,
    /// With --fleet: seconds without a heartbeat after which a node that joined is named silent (above --heartbeat) [default: 5].
    #[arg(
        long,
        value_name = "SECS",
        requires = "fleet",
        allow_negative_numbers = true
    )]
    pub heartbeat_timeout: Option<f64>,
    /// With --fleet: append every node's verdict to DIR/verdicts.jsonl (safe with runs at once, on a shared filesystem too) and name the nodes that failed 2 of their last 3 runs, or whose figures keep falling [default: no history].
    #[arg(long, value_name = "DIR", requires = "fleet")]
    pub history: Option<PathBuf>,
    /// With --history: write the repeat offenders here, in SLURM's --exclude form (sbatch --exclude="$(cat FILE)") [default: not written].
    #[arg(long, value_name = "FILE", requires = "history")]
    pub exclude_file: Option<PathBuf>,
    /// With --fleet: write the fleet's report in Prometheus' text format here (a gauge per node and check), for a node exporter's textfile collector [default: not written].
    #[arg(long, value_name = "FILE", requires = "fleet")]
    pub metrics: Option<PathBuf>,
    /// Return to fleet: pass only when every figure of this node is within the spread the fleet's history (DIR, of --history) records for its GPU model [default: none, no return-to-fleet check].
    #[arg(long, value_name = "DIR", conflicts_with_all = ["fleet", "image", "list_checks"])]
    pub against_history: Option<PathBuf>,
}
