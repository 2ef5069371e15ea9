//! Command-line types (clap derive) and nothing else. `train-demo`'s flags
//! are one table ([`train_demo`]), which also yields each flag's role and
//! the setting of its knobs on the training configuration.
//!
//! Commands turn these into typed options in `commands/`. A flag with a closed
//! set of values takes the core's own enum, which derives `clap::ValueEnum`
//! beside serde ([`crate::choices`], [`Level`]): clap reads and checks it (a
//! bad value is clap's usage error naming the value and listing the possible
//! ones, exit 2), and the same names work in config files and reports. Core
//! modules never see this file's types. Numeric flags take negative numbers
//! (and `--uid`/`--gid` values starting with `-`), so that `--batch-size -1`
//! reaches the range check that names the problem instead of clap's
//! "unexpected argument '-1'".
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::choices::Sampler;
use crate::docker::build::BuilderChoice;
use crate::image::render::ID_RANGE;
use crate::output::ColorChoice;
use crate::verify::Level;

pub mod train_demo;
pub mod verify;
pub use train_demo::{Switch, TrainArgs, TrainRunFlags};
pub use verify::VerifyArgs;

/// `--uid`/`--gid` (`what`: `UID` or `GID`, `id_flag`: `-u` or `-g`): an
/// integer in [`ID_RANGE`] (login.defs' UID_MIN..UID_MAX).
fn user_or_group_id(s: &str, what: &str, id_flag: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if ID_RANGE.contains(&n) => Ok(n),
        _ => Err(format!(
            "expected an integer {}-{} (0 is root); use your own {what} (`id {id_flag}`) so files in mounted folders keep sane owners",
            ID_RANGE.start(),
            ID_RANGE.end()
        )),
    }
}

/// `--uid`'s value parser.
fn user_id(s: &str) -> Result<u32, String> {
    user_or_group_id(s, "UID", "-u")
}

/// `--gid`'s value parser.
fn group_id(s: &str) -> Result<u32, String> {
    user_or_group_id(s, "GID", "-g")
}

/// Build, verify and exercise pinned PyTorch / CUDA GPU images.
#[derive(Debug, Parser)]
#[command(name = "imgctl", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Flags every command takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes (listed under their own heading in `--help`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
pub struct GlobalArgs {
    /// More output (full build logs, per-step details).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors and requested data.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Colour: auto, always or never (NO_COLOR is honoured).
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto, hide_possible_values = true)]
    pub color: ColorChoice,
    /// Docker context of the engine for build, verify --image, sbom, up, ps, down and logs (as `docker --context`; beats DOCKER_HOST, DOCKER_CONTEXT and `docker context use`).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    pub context: Option<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Render and build an image through the Docker Engine API.
    Build(BuildArgs),
    /// Print the Dockerfile for a spec.
    Render(RenderArgs),
    /// Check GPUs, driver and libraries (here, or inside an image with --image).
    Verify(VerifyArgs),
    /// Train the bundled UNet DDPM (smoke run or --benchmark).
    TrainDemo(TrainArgs),
    /// Generate images from a train-demo checkpoint.
    Sample(SampleArgs),
    /// List the bundled image specs.
    Specs(SpecsArgs),
    /// Resolve a spec's full Python package set into its hashed pip lock file.
    Lock(LockArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    Completions(CompletionsArgs),
    /// Print the man page (roff), of imgctl or of one subcommand.
    Man(ManArgs),
    /// Start a workstation: JupyterLab, SSH, the GPUs, this folder at /workspace.
    Up(UpArgs),
    /// List the workstations `imgctl up` started.
    Ps(PsArgs),
    /// Stop and remove workstations (their folders stay).
    Down(DownArgs),
    /// Print a workstation's log (JupyterLab's and sshd's output).
    Logs(LogsArgs),
    /// Inside a workstation: exit once it has been idle (the entrypoint runs it for `up --idle-stop`).
    #[command(hide = true)]
    IdleWatch(IdleWatchArgs),
    /// Print an image's CycloneDX SBOM (its dpkg, Python and CUDA packages).
    Sbom(SbomArgs),
    /// List the SBOM and statements attached to a pushed image in its registry.
    Inspect(InspectArgs),
    /// Check the signed statements of a pushed image against a policy (a deploy gate).
    VerifyImage(VerifyImageArgs),
    /// Make a key pair for signing attestations (build --sign-key).
    #[command(subcommand)]
    Key(KeyCommand),
}

/// `imgctl verify-image`.
#[derive(Debug, Args)]
pub struct VerifyImageArgs {
    /// The pushed image (REGISTRY/NAME:TAG or REGISTRY/NAME@sha256:…).
    #[arg(value_name = "REF")]
    pub image: String,
    /// A public key whose signatures are trusted (SPKI PEM, the .pub of `imgctl key generate`); repeatable, at least one.
    #[arg(long, value_name = "FILE", required = true)]
    pub key: Vec<PathBuf>,
    /// Require a signed verify verdict that passed.
    #[arg(long)]
    pub require_verify: bool,
    /// Require the signed verdict to have seen at least N GPUs; 0 accepts a verdict of a host without GPUs, which --require-verify refuses otherwise [default: no GPU count asked].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32), allow_negative_numbers = true)]
    pub min_gpus: Option<u32>,
    /// Require every GPU of the signed verdict to be this model (a word of its name: H200) [default: any model].
    #[arg(long, value_name = "MODEL")]
    pub gpu_model: Option<String>,
    /// Require the signed verdict's level [default: any level].
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub level: Option<Level>,
    /// Require the signed provenance's spec input to have this digest (sha256:HEX) [default: any spec].
    #[arg(long, value_name = "DIGEST")]
    pub spec_digest: Option<String>,
    /// Require the signed provenance's builder id (urn:imgctl:builder:imgctl@VERSION) [default: any builder].
    #[arg(long, value_name = "ID")]
    pub builder_id: Option<String>,
    /// Refuse statements older than this (7d, 12h, 30m), measured from their own time [default: no age limit].
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub max_age: Option<std::time::Duration>,
    /// A YAML policy (version: 1; the flags' rules and checks_passed, require_predicates); the flags add to it [default: the flags' rules only; with none, one signed statement].
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// A fleet file (version: 1; gpus: model, driver, nodes): admit the image only if its torch has code for every GPU model, every driver runs its CUDA and its NCCL meets each generation's floor; with --max-age, also a signed verdict from each model (docs/fit.md) [default: no fit check].
    #[arg(long, value_name = "FILE")]
    pub fleet: Option<PathBuf>,
    /// The fleet as `verify --fleet --history DIR` recorded it (each node's latest run: its GPU models and driver), instead of --fleet FILE [default: no fit check].
    #[arg(long, value_name = "DIR", conflicts_with = "fleet")]
    pub history: Option<PathBuf>,
    /// Print the statements, refusals and rules as JSON.
    #[arg(long)]
    pub json: bool,
    /// `--registry-timeout`.
    #[command(flatten)]
    pub registry_timeout: RegistryTimeout,
    /// `--registry-ca`.
    #[command(flatten)]
    pub registry_ca: RegistryCa,
}

/// A duration flag's value (`7d`, `12h`, `90s`): humantime's words.
fn duration_arg(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e}; expected a duration such as 7d, 12h or 30m"))
}

/// `imgctl key`.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Make a key pair in DIR: imgctl.key (PKCS#8 PEM, mode 0600; encrypted when IMGCTL_KEY_PASSPHRASE is set) and imgctl.pub (SPKI PEM).
    Generate(KeyGenerateArgs),
}

/// `imgctl key generate`.
#[derive(Debug, Args)]
pub struct KeyGenerateArgs {
    /// The folder to write the pair into (made when missing; existing key files are never overwritten).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The key type: ecdsa-p256 (cosign's default) or ed25519.
    #[arg(long = "type", value_name = "TYPE", default_value = "ecdsa-p256", value_parser = ["ecdsa-p256", "ed25519"])]
    pub key_type: String,
}

/// How long imgctl's own registry client (referrers, verdicts, attestations)
/// may take: one declaration for every command that has it, its help worded
/// per command (`mut_arg`).
#[derive(Debug, Args, Clone, Copy)]
pub struct RegistryTimeout {
    /// The most seconds the whole command may spend on the registry, 1 to 86400.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = crate::image::oci::http::DEFAULT_DEADLINE.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=86_400),
        allow_negative_numbers = true
    )]
    pub registry_timeout: u64,
}

/// The CA imgctl's own registry client trusts beside the system's and
/// certs.d's: one declaration for every command that has it, its help and
/// what it needs worded per command (`mut_arg`).
#[derive(Debug, Args, Clone)]
pub struct RegistryCa {
    /// The registry's CA certificate (PEM), trusted beside /etc/docker/certs.d/HOST:PORT/*.crt and the system's CAs; a loopback registry is then spoken to over HTTPS [default: those only].
    #[arg(long, value_name = "FILE")]
    pub registry_ca: Option<PathBuf>,
}

/// `imgctl inspect`.
#[derive(Debug, Args)]
#[command(mut_arg("registry_timeout", |a| a.help("The most seconds the whole command may spend on the registry (every request, redirect, page and --save fetch together), 1 to 86400")))]
pub struct InspectArgs {
    /// The pushed image (REGISTRY/NAME:TAG or REGISTRY/NAME@sha256:…).
    #[arg(value_name = "REF")]
    pub image: String,
    /// Print the subject and its referrers as JSON.
    #[arg(long)]
    pub json: bool,
    /// Fetch each attached artifact into this folder (sbom.cdx.json, provenance.intoto.json, verify.intoto.json), its digest checked [default: none fetched].
    #[arg(long, value_name = "DIR")]
    pub save: Option<PathBuf>,
    /// `--registry-timeout`.
    #[command(flatten)]
    pub registry_timeout: RegistryTimeout,
    /// List (and with --save fetch) every referrer, not only the first 1000.
    #[arg(long)]
    pub all: bool,
    /// `--registry-ca`.
    #[command(flatten)]
    pub registry_ca: RegistryCa,
}

/// `imgctl sbom`.
#[derive(Debug, Args)]
pub struct SbomArgs {
    /// The image (read from the engine; a container of it lists its packages).
    #[arg(value_name = "IMAGE")]
    pub image: String,
    /// Write the SBOM here (atomically) instead of stdout [default: stdout].
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// A TCP port flag's value: 1 to 65535.
/// A duration of at least 5 s: `90s`, `30m`, `1h 30m` (humantime's words).
fn duration(s: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e}; expected a duration such as 90s, 30m or 1h"))?;
    if d < std::time::Duration::from_secs(5) {
        return Err("expected a duration of at least 5s, such as 90s, 30m or 1h".into());
    }
    Ok(d)
}

fn tcp_port(s: &str) -> Result<u16, String> {
    match s.trim().parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("expected a TCP port from 1 to 65535".to_string()),
    }
}

/// `imgctl up`.
#[derive(Debug, Args)]
#[command(mut_arg("registry_ca", |a| a.help("With --key: the registry's CA certificate (PEM) for reading the verdict, beside /etc/docker/certs.d/HOST:PORT/*.crt and the system's CAs [default: those only]").requires("key")))]
pub struct UpArgs {
    /// The image (built by `imgctl build`) [default: imgctl/cu124:latest; for a workstation that exists, the image it was made with].
    #[arg(value_name = "IMAGE")]
    pub image: Option<String>,
    /// The container's name [default: imgctl-FOLDER, after the mounted folder].
    #[arg(long, value_name = "NAME", value_hint = clap::ValueHint::Other)]
    pub name: Option<String>,
    /// GPUs: all, a count, device ids (0,2; one: device=3), or none [default: all when the engine can give GPUs, else none].
    #[arg(long, value_name = "all|N|IDS|none", allow_hyphen_values = true, value_hint = clap::ValueHint::Other)]
    pub gpus: Option<String>,
    /// The host folder mounted read-write at /workspace [default: the current folder].
    #[arg(long, value_name = "DIR", conflicts_with = "no_mount")]
    pub mount: Option<PathBuf>,
    /// Mount no host folder (/workspace is the container's own).
    #[arg(long)]
    pub no_mount: bool,
    /// A public key file for SSH; repeatable [default: every ~/.ssh/*.pub].
    #[arg(long, value_name = "FILE")]
    pub ssh_key: Vec<PathBuf>,
    /// JupyterLab's host port [default: 8888, or a free one when 8888 is taken].
    #[arg(long, value_name = "PORT", value_parser = tcp_port, allow_negative_numbers = true)]
    pub jupyter_port: Option<u16>,
    /// SSH's host port [default: 2222, or a free one when 2222 is taken].
    #[arg(long, value_name = "PORT", value_parser = tcp_port, allow_negative_numbers = true)]
    pub ssh_port: Option<u16>,
    /// Also serve TensorBoard over /workspace (every run's tb/ folder); it has no login, so keep --listen 127.0.0.1.
    #[arg(long)]
    pub tensorboard: bool,
    /// TensorBoard's host port [default: 6006, or a free one when 6006 is taken].
    #[arg(long, value_name = "PORT", value_parser = tcp_port, allow_negative_numbers = true, requires = "tensorboard")]
    pub tensorboard_port: Option<u16>,
    /// The host address the ports listen on (0.0.0.0: every interface).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub listen: String,
    /// Start the image only when its registry manifest carries a verify verdict that passed, signed by this public key (repeatable) [default: no signature checked].
    #[arg(long, value_name = "FILE")]
    pub key: Vec<PathBuf>,
    /// `--registry-ca`.
    #[command(flatten)]
    pub registry_ca: RegistryCa,
    /// /dev/shm's size (Docker's default of 64m breaks DataLoader workers): bytes, or with k, m, g [default: 16g].
    #[arg(long, value_name = "SIZE")]
    pub shm_size: Option<String>,
    /// Do not run `imgctl verify --level quick` inside once it is up.
    #[arg(long)]
    pub no_verify: bool,
    /// Print only the `~/.ssh/config` block of the workstation (Host NAME.imgctl: for `ssh NAME.imgctl`, VS Code Remote-SSH and `ssh -L` forwards), once it is up.
    #[arg(long, conflicts_with = "json")]
    pub print_ssh_config: bool,
    /// Make a new JupyterLab token (the workstation keeps its token across `down` and `up`, so a bookmarked URL keeps opening; this one replaces it).
    #[arg(long)]
    pub new_token: bool,
    /// How GPUs are asked for: CDI device names (`nvidia.com/gpu=0`; Docker 25+ with CDI on),
    /// the NVIDIA runtime's device request, or auto (CDI where the engine lists CDI GPUs).
    #[arg(long, value_name = "API", value_enum, default_value_t = crate::docker::cdi::GpuApi::Auto)]
    pub gpu_api: crate::docker::cdi::GpuApi,
    /// The container's user namespace: `keep-id` on rootless Podman maps your
    /// uid to the image's user, so /workspace's files stay yours; `host` for the
    /// engine's own [default: keep-id on rootless Podman 4.3+, else the engine's].
    #[arg(long, value_name = "MODE", value_hint = clap::ValueHint::Other)]
    pub userns: Option<String>,
    /// Seconds to wait for JupyterLab and SSH to answer (the image's healthcheck).
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 300,
        allow_negative_numbers = true
    )]
    pub wait: i64,
    /// Stop (never remove) the workstation once it has been idle this long: no notebook kernel busy and no JupyterLab activity, no SSH session, every GPU below 5 %; `imgctl up` starts it again (1h suits most days) [default: never].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub idle_stop: Option<std::time::Duration>,
    /// The engine's restart policy, as docker run's: unless-stopped brings it back after a reboot or a crash (not with --idle-stop, which it would undo; on-failure goes with it).
    #[arg(long, value_name = "POLICY", default_value = "no", value_parser = ["no", "on-failure", "unless-stopped", "always"])]
    pub restart: String,
    /// Print the workstation's addresses as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `imgctl idle-watch` (inside a workstation; the image's entrypoint runs it
/// for `up --idle-stop`, with JupyterLab's token in JUPYTER_TOKEN).
#[derive(Debug, Args)]
pub struct IdleWatchArgs {
    /// Exit 0 once the workstation has been idle this long.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub after: std::time::Duration,
    /// How often to look [default: a tenth of --after, 2s to 30s].
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub poll: Option<std::time::Duration>,
    /// JupyterLab's port on 127.0.0.1 [default: no JupyterLab to watch].
    #[arg(long, value_name = "PORT", value_parser = tcp_port)]
    pub jupyter_port: Option<u16>,
    /// sshd's port [default: no sshd to watch].
    #[arg(long, value_name = "PORT", value_parser = tcp_port)]
    pub ssh_port: Option<u16>,
    /// A GPU at or above this utilisation (percent) counts as in use.
    #[arg(long, value_name = "PERCENT", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub gpu_below: u32,
    /// Check the settings and exit.
    #[arg(long)]
    pub check: bool,
}

/// `imgctl ps` (with the global -q: the names only, one a line, as `docker ps -q`).
#[derive(Debug, Args)]
pub struct PsArgs {
    /// Stopped workstations too.
    #[arg(short, long)]
    pub all: bool,
    /// Other users' workstations on this engine too (their tokens are not shown).
    #[arg(long)]
    pub all_users: bool,
    /// Print as JSON (with each JupyterLab URL and its token).
    #[arg(long)]
    pub json: bool,
}

/// `imgctl down`.
#[derive(Debug, Args)]
pub struct DownArgs {
    /// The workstations to remove (`imgctl ps` lists them) [default: the one `imgctl up` starts for the current folder].
    #[arg(value_name = "NAME", value_hint = clap::ValueHint::Other)]
    pub names: Vec<String>,
    /// Every workstation of yours, running or stopped.
    #[arg(long, conflicts_with = "names")]
    pub all: bool,
    /// Act on other users' workstations too (with --all: everyone's); asks first on a terminal, else needs --force.
    #[arg(long)]
    pub all_users: bool,
    /// Seconds the work inside (a training run, a script) and then the services get to stop after SIGTERM before they are killed.
    #[arg(
        short,
        long,
        value_name = "SECS",
        default_value_t = 10,
        allow_negative_numbers = true
    )]
    pub time: i64,
    /// Do not wait: kill everything inside at once (`docker rm -f`), and do not ask before removing other users' workstations.
    #[arg(short, long)]
    pub force: bool,
    /// Remove the home volume too (NAME-home: the user's home, kept by default for the next `up`).
    #[arg(long)]
    pub volumes: bool,
}

/// `imgctl logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The workstation [default: the one `imgctl up` starts for the current folder].
    #[arg(value_name = "NAME", value_hint = clap::ValueHint::Other)]
    pub name: Option<String>,
    /// Keep printing new lines until Ctrl-C.
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines [default: all].
    #[arg(long, value_name = "N")]
    pub tail: Option<u32>,
    /// Read another user's workstation (its logs hold its JupyterLab token).
    #[arg(long)]
    pub all_users: bool,
}

/// `imgctl completions SHELL`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `imgctl man [COMMAND]`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print (e.g. `train-demo`); imgctl's own page when absent.
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
    /// Write every page (imgctl.1, imgctl-build.1, …) into this folder instead of printing one [default: print to stdout].
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub out_dir: Option<PathBuf>,
}

/// The help of `--cuda`: the CUDA versions of the bundled profiles, read
/// from the specs in `images/` ([`crate::image::specs::bundled_cudas`]), and the default.
pub fn cuda_help() -> String {
    format!(
        "CUDA version of a bundled profile ({}) [default: {}]",
        crate::image::specs::bundled_cudas().join(", "),
        crate::image::specs::DEFAULT_CUDA
    )
}

/// Which spec to use, and the build-time options that shape the Dockerfile.
#[derive(Debug, Args, Clone)]
pub struct ImageArgs {
    /// CUDA version of a bundled profile ([`cuda_help`] lists them).
    #[arg(long, conflicts_with = "spec", help = cuda_help(), value_hint = clap::ValueHint::Other)]
    pub cuda: Option<String>,
    /// A spec file of your own instead of a bundled profile.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,
    /// Replace the spec's base image (mirrors, offline engines) [default: the spec's].
    #[arg(long, value_name = "IMAGE")]
    pub base_image: Option<String>,
    /// A proxy CA certificate that apt and pip inside the build must trust;
    /// installed in the image, so it is trusted at run time too.
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Like --ca-cert, but for the build only: a BuildKit build secret
    /// (`proxy-ca`) mounted into the downloading steps, never in a layer or
    /// the build context (BuildKit only).
    #[arg(long, value_name = "FILE", conflicts_with = "ca_cert")]
    pub ca_cert_secret: Option<PathBuf>,
    /// The builder: buildkit (cache mounts), classic (the legacy builder), or
    /// auto (buildkit on engines at API 1.42+, honouring DOCKER_BUILDKIT; render: classic).
    #[arg(long, value_enum, default_value_t = BuilderChoice::Auto)]
    pub builder: BuilderChoice,
    /// pip index URL to use inside the build (a PyPI mirror also serves torch when the spec takes it from PyPI) [default: the spec's indexes].
    #[arg(long, value_name = "URL")]
    pub pip_index_url: Option<String>,
    /// UID of the non-root user (match the host user for mounted files: `id -u`) [default: 1000].
    #[arg(long, allow_hyphen_values = true, value_parser = user_id)]
    pub uid: Option<u32>,
    /// GID of the non-root user [default: 1000].
    #[arg(long, allow_hyphen_values = true, value_parser = group_id)]
    pub gid: Option<u32>,
    /// Give the non-root user passwordless sudo.
    #[arg(long)]
    pub sudo: bool,
}

/// `imgctl build`.
#[derive(Debug, Args)]
#[command(
    mut_arg("registry_timeout", |a| a.help("With --push: the most seconds attaching the attestations may spend on the registry (every request together), 1 to 86400")),
    mut_arg("registry_ca", |a| a.help("With --push: the registry's CA certificate (PEM) for attaching the attestations, trusted beside /etc/docker/certs.d/HOST:PORT/*.crt and the system's CAs (the engine pushes the image itself with its own trust, /etc/docker/certs.d) [default: those only]").requires("push"))
)]
pub struct BuildArgs {
    /// Spec selection and Dockerfile options.
    #[command(flatten)]
    pub image: ImageArgs,
    /// Name and optionally a tag (name:tag); repeatable [default: imgctl/PROFILE:latest, e.g. imgctl/cu124:latest].
    #[arg(short, long = "tag", value_name = "NAME[:TAG]")]
    pub tags: Vec<String>,
    /// Do not use the build cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Always attempt to pull a newer version of the base image.
    #[arg(long)]
    pub pull: bool,
    /// Build-time variables (K=V); repeatable.
    #[arg(long = "build-arg", value_name = "K=V")]
    pub build_args: Vec<String>,
    /// Extra image labels (K=V); repeatable.
    #[arg(long = "label", value_name = "K=V")]
    pub labels: Vec<String>,
    /// Print the Dockerfile and the context listing; build nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Push the tags after a successful build (credentials from the docker config).
    #[arg(long)]
    pub push: bool,
    /// `--registry-timeout`.
    #[command(flatten)]
    pub registry_timeout: RegistryTimeout,
    /// `--registry-ca`.
    #[command(flatten)]
    pub registry_ca: RegistryCa,
    /// Print the build report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON build report to this file [default: none written].
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Write the image's attestations into this folder: the CycloneDX SBOM (sbom.cdx.json), the SLSA provenance (provenance.intoto.json) and, with --verify, the verdict (verify.intoto.json) [default: none written; --push attaches them all the same].
    #[arg(long, value_name = "DIR")]
    pub attest: Option<PathBuf>,
    /// Sign what --attest and --push write with this private key (PKCS#8 PEM, from `imgctl key generate`; IMGCTL_KEY_PASSPHRASE decrypts an encrypted one): each statement as a DSSE envelope in a Sigstore bundle [default: nothing signed].
    #[arg(
        long,
        value_name = "FILE",
        env = crate::env_vars::IMGCTL_SIGN_KEY,
        hide_env_values = true
    )]
    pub sign_key: Option<PathBuf>,
    /// Run `imgctl verify` inside the new image (with the host's GPUs) before tagging and pushing it; a failed verify leaves the image untagged and unpushed, exit 1.
    #[arg(long)]
    pub verify: bool,
    /// The level of --verify's checks.
    #[arg(long, value_enum, default_value_t = Level::Quick, requires = "verify", value_name = "LEVEL")]
    pub verify_level: Level,
    /// How many GPUs --verify must find in the image (N or any).
    #[arg(long, default_value = "any", value_name = "N|any", requires = "verify")]
    pub expect_gpus: String,
    /// The imgctl binary to put in the image [default: this executable].
    #[arg(long, value_name = "FILE", hide = true)]
    pub imgctl_binary: Option<PathBuf>,
}

/// `imgctl render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Spec selection and Dockerfile options.
    #[command(flatten)]
    pub image: ImageArgs,
    /// Write the Dockerfile here instead of stdout [default: stdout].
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// `imgctl lock`.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// CUDA version of a bundled profile ([`cuda_help`] lists them).
    #[arg(long, conflicts_with_all = ["spec", "all"], help = cuda_help(), value_hint = clap::ValueHint::Other)]
    pub cuda: Option<String>,
    /// A spec file of your own; its lock goes next to it (FILE.lock, or the spec's `lock: PATH`).
    #[arg(long, value_name = "FILE", conflicts_with = "all")]
    pub spec: Option<PathBuf>,
    /// Every bundled profile.
    #[arg(long)]
    pub all: bool,
    /// Write nothing; exit 1 when a lock is missing or stale, naming what changed.
    #[arg(long)]
    pub check: bool,
    /// Resolve again even when the lock is up to date (newest transitive versions).
    #[arg(long, conflicts_with = "check")]
    pub upgrade: bool,
    /// A mirror of PyPI to resolve from (also for torch when the spec takes it from PyPI) [default: the spec's indexes].
    #[arg(long, value_name = "URL")]
    pub pip_index_url: Option<String>,
    /// Print the outcome as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `imgctl specs`.
#[derive(Debug, Args)]
pub struct SpecsArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `imgctl sample`.
#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Checkpoint directory (a step-N folder, or a train-demo --out folder for the latest).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: PathBuf,
    /// Denoising steps.
    #[arg(long, default_value_t = 50, allow_negative_numbers = true)]
    pub steps: usize,
    /// How to walk from noise to an image.
    #[arg(long, value_enum, ignore_case = true, default_value_t = Sampler::Ddim)]
    pub sampler: Sampler,
    /// Number of images in the grid.
    #[arg(long, default_value_t = 16, allow_negative_numbers = true)]
    pub num: i64,
    /// Random seed.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub seed: u64,
    /// Use the raw weights instead of the EMA weights.
    #[arg(long)]
    pub no_ema: bool,
    /// cpu, cuda, or cuda:N [default: cuda when available, else cpu].
    #[arg(long)]
    pub device: Option<String>,
    /// Output PNG.
    #[arg(long, default_value = "samples.png", value_name = "FILE")]
    pub out: PathBuf,
    /// Print what was written (PNG path, grid, size, sampler, seed, …) as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[cfg(all(test, feature = "torch"))]
mod tests {
    use clap::CommandFactory;

    use crate::train::config::{Preset, TrainConfig};

    /// The defaults `train-demo --help` quotes are the presets' own.
    #[test]
    fn train_demo_help_quotes_the_presets_defaults() {
        let cmd = super::Cli::command();
        let train = cmd.find_subcommand("train-demo").expect("train-demo");
        let help = |id: &str| {
            train
                .get_arguments()
                .find(|a| a.get_id() == id)
                .and_then(|a| a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default()
        };
        let t = |p| TrainConfig::preset(p).training;
        let (d, tiny, smoke) = (t(Preset::Default), t(Preset::Tiny), t(Preset::Smoke));
        assert!(
            help("steps").contains(&format!(
                "default {}, tiny {}, smoke {}",
                d.steps, tiny.steps, smoke.steps
            )),
            "{}",
            help("steps")
        );
        assert!(help("batch_size").contains(&format!(
            "default {}, tiny {}, smoke {}",
            d.batch_size, tiny.batch_size, smoke.batch_size
        )));
        assert!(
            help("lr").contains(&format!(
                "default {:e}, tiny {:e}, smoke {:e}",
                d.lr, tiny.lr, smoke.lr
            )),
            "{}",
            help("lr")
        );
        assert!(help("seed").contains(&format!("[default: {}]", d.seed)));
    }
}
