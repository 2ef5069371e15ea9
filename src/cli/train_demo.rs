//! `imgctl train-demo`'s flags, each declared once: one table ([`TrainArgs`],
//! in `--help`'s order) through `train_args!`, which turns it into
//! everything that used to be written per flag.
//!
//! A row is a flag's help (its doc lines), its clap `#[arg(…)]`, a role
//! ([`Role`]: `knob`, `run`, `launcher` or `bench_launcher`) and its field.
//! From the rows come: the clap struct ([`TrainArgs`]), [`TrainArgs::SETTINGS`]
//! naming each flag's role (a supervisor strips its own flags from its
//! workers' command line: `commands::train_demo::launch::worker_args`), the
//! borrowed view of the flags that are not knobs ([`TrainRunFlags`], which
//! `resolve_options` destructures field by field, so a new run flag fails to
//! compile until it is handled), and `TrainArgs::apply_knobs`, which sets
//! every knob the command line gave on the training settings. A knob's field
//! name is its flag (`read_every` is `--read-every`) and its YAML key
//! (`training.read_every`): the `TrainingConfig` field of that name (a
//! compile error when there is none) holds its default, its check, its
//! `--config` key and its `--print-config` line. The tests below fail when a
//! knob does not reach its key, when `--print-config` does not print it or
//! `--config` does not read it back, and when a flag named like a training
//! key is not a knob; launch's, when a supervisor's flag reaches its workers.
//!
//! Adding a knob: a `TrainingConfig` field (its doc, `#[serde(default…)]`
//! for older checkpoints, its value in `TrainingConfig::preset`, its check
//! in `validate`), one `knob` row below, and the code that reads it. A flag
//! outside the configuration is a `run` row plus its consumer in `options`,
//! `launch` or `bench` (`commands/train_demo/`); one the `--gpus` supervisor
//! reads is a `launcher` row (`bench_launcher`: the benchmark's supervisor).
//!
//! Clap types and the table only; the command layer (`docs/architecture.md`).
use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::ValueEnum;

use crate::choices::{GradReduce, GroupNormKernel, Precision, Preset};

/// An on/off flag value; `true`/`false`, `yes`/`no` and `1`/`0` are read too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

// By hand rather than derived: a derived variant's doc line would be
// printed as the value's help ("on: On").
impl ValueEnum for Switch {
    fn value_variants<'a>() -> &'a [Self] {
        &[Switch::On, Switch::Off]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Switch::On => PossibleValue::new("on").aliases(["true", "yes", "1"]),
            Switch::Off => PossibleValue::new("off").aliases(["false", "no", "0"]),
        })
    }
}

impl From<Switch> for bool {
    fn from(s: Switch) -> bool {
        s == Switch::On
    }
}

/// What a train-demo flag is to the run, to `--config`/`--print-config`
/// and to the launchers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A training setting: the flag overrides `training.NAME` of the
    /// resolved configuration (the `TrainingConfig` field of the same name),
    /// which `--config` sets and `--print-config` prints; workers get it as
    /// written.
    Knob,
    /// A flag of this run outside the configuration (the mode, paths, the
    /// device, deadlines); workers get it as written.
    Run,
    /// Read by the supervisor of `--gpus` workers (training or benchmark):
    /// stripped from its workers' command line.
    Launcher,
    /// Read by the benchmark's supervisor (`--scaling`, `--compare`): stripped
    /// from its workers' command line, which reports back as JSON.
    BenchLauncher,
}

impl Role {
    /// Whether a supervisor strips the flag from its workers' command line
    /// (`bench`: the benchmark's supervisor).
    pub fn stripped(self, bench: bool) -> bool {
        match self {
            Role::Launcher => true,
            Role::BenchLauncher => bench,
            Role::Knob | Role::Run => false,
        }
    }
}

/// One row of the table: the flag's clap id (its field name) and its role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// The field name: clap's id, the flag in kebab case, a knob's YAML key.
    pub id: &'static str,
    /// What the flag is to the run and to the launchers.
    pub role: Role,
}

/// A knob flag's value when the command line gave it: a value flag's
/// value, or `true` for an on-only switch (`--channels-last`: absent
/// leaves the configuration's value).
pub trait Given {
    /// The value, before its conversion to the setting's type.
    type Value;
    /// `Some` when the flag was given.
    fn given(&self) -> Option<Self::Value>;
}

impl<T: Clone> Given for Option<T> {
    type Value = T;
    fn given(&self) -> Option<T> {
        self.clone()
    }
}

impl Given for bool {
    type Value = bool;
    fn given(&self) -> Option<bool> {
        self.then_some(true)
    }
}

/// A knob's value that does not convert to its setting's type.
#[derive(Debug, thiserror::Error)]
#[error("{id}: {why}")]
pub struct KnobError {
    /// The knob's id (its field name).
    pub id: &'static str,
    /// Why not.
    pub why: String,
}

impl KnobError {
    /// The error of knob `id`.
    pub fn new(id: &'static str, why: impl std::fmt::Display) -> Self {
        Self {
            id,
            why: why.to_string(),
        }
    }
}

/// Declares train-demo's flags once (see the module docs): rows of doc
/// lines, one `#[arg(…)]`, a role keyword and `field: Type,`.
macro_rules! train_args {
    // Sorting the rows: every row, the knobs, the others.
    (@rows $head:tt [$($all:tt)*] [$($knobs:tt)*] [$($runs:tt)*]
        $(#[doc = $doc:tt])* #[arg($($arg:tt)*)] knob $f:ident : $t:ty, $($rest:tt)*) => {
        train_args!(@rows $head
            [$($all)* {knob [$($doc)*] [$($arg)*] $f: $t}] [$($knobs)* {$f}] [$($runs)*] $($rest)*);
    };
    (@rows $head:tt [$($all:tt)*] [$($knobs:tt)*] [$($runs:tt)*]
        $(#[doc = $doc:tt])* #[arg($($arg:tt)*)] $role:ident $f:ident : $t:ty, $($rest:tt)*) => {
        train_args!(@rows $head
            [$($all)* {$role [$($doc)*] [$($arg)*] $f: $t}] [$($knobs)*]
            [$($runs)* {[$($doc)*] $f: $t}] $($rest)*);
    };
    (@role knob) => { Role::Knob };
    (@role run) => { Role::Run };
    (@role launcher) => { Role::Launcher };
    (@role bench_launcher) => { Role::BenchLauncher };
    (@rows [[$(#[doc = $sdoc:tt])*] $vis:vis struct $name:ident]
        [$({$role:ident [$($doc:tt)*] [$($arg:tt)*] $f:ident : $t:ty})*]
        [$({$kf:ident})*]
        [$({[$($rdoc:tt)*] $rf:ident : $rt:ty})*]) => {
        $(#[doc = $sdoc])*
        #[derive(Debug, Clone, clap::Args)]
        $vis struct $name {
            $($(#[doc = $doc])* #[arg($($arg)*)] pub $f: $t,)*
        }

        /// The flags that are not knobs (this run's and the launchers'),
        /// borrowed: `options::resolve_options` destructures them field by
        /// field, so a new one fails to compile until it is handled.
        #[derive(Debug, Clone, Copy)]
        pub struct TrainRunFlags<'a> {
            $($(#[doc = $rdoc])* pub $rf: &'a $rt,)*
        }

        impl $name {
            /// Every flag, in `--help`'s order, with its role.
            pub const SETTINGS: &'static [Setting] = &[
                $(Setting {
                    id: stringify!($f),
                    role: train_args!(@role $role),
                },)*
            ];

            /// The flags that are not knobs, borrowed.
            pub fn run_flags(&self) -> TrainRunFlags<'_> {
                TrainRunFlags { $($rf: &self.$rf,)* }
            }

            /// Sets each training setting whose knob the command line gave
            /// (`--read-every 4`: `training.read_every = 4`), over the preset's,
            /// the checkpoint's and the config file's values.
            #[cfg(feature = "torch")]
            pub fn apply_knobs(
                &self,
                training: &mut crate::train::config::TrainingConfig,
            ) -> Result<(), KnobError> {
                $(if let Some(v) = Given::given(&self.$kf) {
                    training.$kf = ::std::convert::TryInto::try_into(v).map_err(|e| {
                        KnobError::new(stringify!($kf), e)
                    })?;
                })*
                Ok(())
            }
        }
    };
    ($(#[doc = $sdoc:tt])* $vis:vis struct $name:ident { $($rows:tt)* }) => {
        train_args!(@rows
            [[$(#[doc = $sdoc])*] $vis struct $name] [] [] [] $($rows)*);
    };
}

// One row per flag: its help, its clap attributes, its role (knob: the
// `training:` setting of the same name; run: this run's own; launcher,
// bench_launcher: read by a supervisor, never by its workers), its field.
train_args! {
/// `imgctl train-demo`.
pub struct TrainArgs {
    /// Model preset [default: default, or the config file's / resumed checkpoint's].
    #[arg(long, value_enum)]
    run preset: Option<Preset>,
    /// YAML file with model and training settings (flags override it).
    #[arg(long, value_name = "FILE")]
    run config: Option<PathBuf>,
    /// Number of optimizer steps [default: the preset's: default 1000, tiny 200, smoke 1200; --print-config shows what applies].
    #[arg(long, allow_negative_numbers = true)]
    knob steps: Option<u64>,
    /// Batch size per process [default: the preset's: default 16, tiny 8, smoke 16].
    #[arg(long, allow_negative_numbers = true)]
    knob batch_size: Option<i64>,
    /// Peak learning rate [default: the preset's: default 1e-4, tiny 1e-3, smoke 2e-3].
    #[arg(long, allow_negative_numbers = true)]
    knob lr: Option<f64>,
    /// Random seed [default: 0].
    #[arg(long, allow_negative_numbers = true)]
    knob seed: Option<u64>,
    /// Output directory for checkpoints, samples and metrics [default: imgctl-train].
    #[arg(long, value_name = "DIR")]
    run out: Option<PathBuf>,
    /// A folder of PNG/JPEG images instead of the synthetic dataset [default: the synthetic dataset].
    #[arg(long, value_name = "DIR")]
    run data: Option<PathBuf>,
    /// Numeric precision [default: bf16 on GPUs with bf16 tensor cores (compute capability 8.0+), else fp32].
    #[arg(long, value_enum, ignore_case = true)]
    knob precision: Option<Precision>,
    /// Dtype of the gradient all-reduce in bf16 multi-rank runs [default: fp32].
    #[arg(long, value_enum, ignore_case = true, value_name = "fp32|bf16")]
    knob grad_reduce: Option<GradReduce>,
    /// Run the model in channels-last (NHWC) memory layout (tensor-core convolutions prefer it).
    #[arg(long)]
    knob channels_last: bool,
    /// GroupNorm + SiLU kernels: ATen's, or imgctl's fused NHWC ones (CUDA with --channels-last; compiled by NVRTC and checked against ATen before first use, ATen's after a failed check) [default: aten].
    #[arg(long, value_enum, ignore_case = true, value_name = "aten|fused")]
    knob groupnorm: Option<GroupNormKernel>,
    /// Read the loss and gradient norm back (the step's one host sync, and the NaN check) every N steps; fp16 reads every step [default: 0, auto: every step on the CPU, every 10 on CUDA].
    #[arg(long, value_name = "N")]
    knob read_every: Option<u64>,
    /// Recompute each UNet block's activations in backward instead of keeping them (diffusers' enable_gradient_checkpointing): less memory, more compute, the same results.
    #[arg(long)]
    knob gradient_checkpointing: bool,
    /// Average gradient buckets across ranks while backward runs (on, as DDP) or after it (off) [default: on].
    #[arg(long, value_enum, ignore_case = true, value_name = "on|off")]
    knob overlap_grad_reduce: Option<Switch>,
    /// Gradient bucket cap in MiB for the all-reduce (DDP's bucket_cap_mb) [default: 25].
    #[arg(long, value_name = "MB", allow_negative_numbers = true)]
    knob bucket_cap_mb: Option<f64>,
    /// cpu, cuda, or cuda:N [default: cuda when available, else cpu].
    #[arg(long)]
    run device: Option<String>,
    /// Initialise from a diffusers UNet2DModel safetensors state dict.
    #[arg(long, value_name = "FILE")]
    run init_from: Option<PathBuf>,
    /// Continue from the latest checkpoint in --out; `--resume auto` starts
    /// afresh when there is none yet (jobs restarted on failure) [default: a fresh run].
    #[arg(
        long,
        value_name = "auto",
        num_args = 0..=1,
        default_missing_value = "latest",
        value_parser = ["latest", "auto"]
    )]
    run resume: Option<String>,
    /// Save a checkpoint every N steps [default: the preset's; --print-config shows it].
    #[arg(long, allow_negative_numbers = true)]
    knob checkpoint_every: Option<u64>,
    /// Keep the last K checkpoints [default: the preset's; --print-config shows it].
    #[arg(long, allow_negative_numbers = true)]
    knob keep: Option<usize>,
    /// Write a sample grid every N steps (0: never) [default: the preset's; --print-config shows it].
    #[arg(long, allow_negative_numbers = true)]
    knob sample_every: Option<u64>,
    /// Data loader worker threads [default: the preset's; --print-config shows it].
    #[arg(long, allow_negative_numbers = true)]
    knob workers: Option<usize>,
    /// GPUs to train on: all, a count, or device ids (0,2,5; one: device=3 or 3,); one worker each [default: one process, on --device].
    // allow_hyphen_values: `--gpus -1` reaches imgctl's own GPU-list parser
    // (a clear usage error) instead of clap's "unexpected argument '-1'".
    #[arg(long, value_name = "all|N|IDS", allow_hyphen_values = true, value_hint = clap::ValueHint::Other)]
    launcher gpus: Option<String>,
    /// Measure throughput instead of training for results.
    #[arg(long)]
    run benchmark: bool,
    /// With --benchmark: efficiency at 1, 2, 4 … N GPUs.
    #[arg(long)]
    bench_launcher scaling: bool,
    /// With --benchmark: also run the PyTorch reference and print the ratio.
    #[arg(long)]
    bench_launcher compare: bool,
    /// With --benchmark: count the operators and bytes allocated of imgctl's step against the PyTorch reference's with imgctl's recipe, both under libtorch's profiler (--steps profiled steps each [default: 3]; with --out, their Chrome traces go there).
    #[arg(long)]
    run op_profile: bool,
    /// With --scaling or --compare: write the chart (PNG) here [default:
    /// OUT/scaling.png or OUT/compare.png when --out is given, else none].
    #[arg(long, value_name = "FILE")]
    bench_launcher plot: Option<PathBuf>,
    /// Warm-up steps before timing (benchmark) [default: 10 on a GPU, 2 on the CPU].
    #[arg(long, allow_negative_numbers = true)]
    run warmup: Option<u64>,
    /// Seconds to wait for all ranks at rendezvous [default: 300].
    #[arg(
        long,
        env = crate::env_vars::IMGCTL_RENDEZVOUS_TIMEOUT,
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    run rendezvous_timeout: Option<f64>,
    /// Seconds between two heartbeats of a data-parallel rank, sent by a thread of its own beside the training loop [default: 1].
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    run heartbeat: Option<f64>,
    /// Seconds without a heartbeat after which a data-parallel rank is declared lost and the job stops naming it (above --heartbeat) [default: 5].
    #[arg(long, value_name = "SECS", allow_negative_numbers = true)]
    run heartbeat_timeout: Option<f64>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    bench_launcher json: bool,
    /// Print the resolved configuration (preset, then --config, then flags) as YAML that --config takes back, and exit.
    #[arg(long, conflicts_with_all = ["benchmark", "resume", "json", "gpus"])]
    run print_config: bool,
}
}

#[cfg(all(test, feature = "torch"))]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Role;
    use crate::cli::{Cli, Command, TrainArgs};
    use crate::train::config::{Preset, TrainConfig};

    fn parse(args: &[String]) -> Result<TrainArgs, clap::Error> {
        let cli = Cli::try_parse_from(
            ["imgctl", "train-demo"]
                .into_iter()
                .chain(args.iter().map(String::as_str)),
        )?;
        match cli.command {
            Command::TrainDemo(a) => Ok(a),
            other => panic!("parsed {other:?}"),
        }
    }

    fn train_demo() -> clap::Command {
        Cli::command()
            .find_subcommand("train-demo")
            .unwrap()
            .clone()
    }

    /// `training:` of `c` as `--print-config` prints it (serde_yaml).
    fn training_keys(c: &TrainConfig) -> serde_yaml::Mapping {
        let v = serde_yaml::to_value(c).unwrap();
        v["training"].as_mapping().unwrap().clone()
    }

    /// The first value of flag `arg` (its possible values, else numbers)
    /// that changes the tiny preset's training settings: the command line
    /// and the settings it gives.
    fn changing_line(arg: &clap::Arg) -> (Vec<String>, TrainConfig) {
        let flag = format!("--{}", arg.get_long().unwrap());
        let base = TrainConfig::preset(Preset::Tiny);
        let mut lines = vec![];
        if arg.get_action().takes_values() {
            let mut values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            values.extend(["7", "0.5"].map(String::from));
            lines.extend(values.into_iter().map(|v| vec![flag.clone(), v]));
        } else {
            lines.push(vec![flag.clone()]);
        }
        for line in lines {
            let Ok(args) = parse(&line) else { continue };
            let mut c = base.clone();
            args.apply_knobs(&mut c.training).unwrap();
            if c != base {
                return (line, c);
            }
        }
        panic!("no value of {flag} changes the training settings");
    }

    /// Every knob sets the training setting of its name and nothing else;
    /// `--print-config` prints that key with the flag's value, and `--config`
    /// reads the key back to the same configuration (a knob missing from
    /// either fails here).
    #[test]
    fn every_knob_is_its_yaml_key_in_print_config_and_config() {
        let cmd = train_demo();
        let knobs: Vec<_> = TrainArgs::SETTINGS
            .iter()
            .filter(|s| s.role == Role::Knob)
            .collect();
        assert!(knobs.len() >= 16, "{knobs:?}");
        let base = training_keys(&TrainConfig::preset(Preset::Tiny));
        for knob in knobs {
            let arg = cmd.get_arguments().find(|a| a.get_id() == knob.id).unwrap();
            let (line, config) = changing_line(arg);
            let printed = training_keys(&config);
            let changed: Vec<_> = printed
                .iter()
                .filter(|(k, v)| base.get(*k) != Some(*v))
                .map(|(k, _)| k.as_str().unwrap_or_default().to_string())
                .collect();
            assert_eq!(
                changed,
                [knob.id],
                "{line:?} changed the printed training keys {changed:?}"
            );
            // The key alone, as a config file gives it.
            let value = serde_yaml::to_string(&printed[knob.id]).unwrap();
            let file = format!("training:\n  {}: {}\n", knob.id, value.trim_end());
            let mut from_file = TrainConfig::preset(Preset::Tiny);
            from_file
                .apply_yaml(&file, "knob.yaml", false)
                .unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(from_file, config, "{file}");
            // The whole printed configuration reads back to itself.
            let mut again = TrainConfig::preset(Preset::Default);
            again
                .apply_yaml(
                    &serde_yaml::to_string(&config).unwrap(),
                    "printed.yaml",
                    false,
                )
                .unwrap();
            assert_eq!(again, config, "{line:?}");
        }
    }

    /// The table and clap's arguments are the same flags, and a flag named
    /// like a training setting is a knob (as a run flag it would not reach
    /// its key).
    #[test]
    fn every_flag_has_one_row_and_training_keys_are_knobs() {
        let ids: Vec<&str> = TrainArgs::SETTINGS.iter().map(|s| s.id).collect();
        let args: Vec<String> = train_demo()
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .filter(|id| !matches!(id.as_str(), "help" | "version"))
            .collect();
        assert_eq!(ids, args);
        let keys = training_keys(&TrainConfig::preset(Preset::Default));
        for s in TrainArgs::SETTINGS.iter().filter(|s| s.role != Role::Knob) {
            assert!(
                !keys.contains_key(s.id),
                "--{} is training.{}: make it a knob row",
                s.id.replace('_', "-"),
                s.id
            );
        }
    }

    /// A knob whose help quotes one value as its default (`[default: 25]`,
    /// `[default: on]`) quotes the configuration's: that value on the
    /// command line changes no preset's settings.
    #[test]
    fn the_defaults_the_help_quotes_are_the_configurations() {
        let cmd = train_demo();
        let mut checked = vec![];
        for knob in TrainArgs::SETTINGS.iter().filter(|s| s.role == Role::Knob) {
            let arg = cmd.get_arguments().find(|a| a.get_id() == knob.id).unwrap();
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            let Some(quoted) = help.split("[default: ").nth(1) else {
                continue;
            };
            let value = quoted.split([',', ']']).next().unwrap().trim();
            let line = [format!("--{}", arg.get_long().unwrap()), value.to_string()];
            // Prose ("the preset's", "bf16 on GPUs with …") is no value.
            let Ok(args) = parse(&line) else { continue };
            for preset in [Preset::Default, Preset::Tiny, Preset::Smoke] {
                let base = TrainConfig::preset(preset);
                let mut c = base.clone();
                args.apply_knobs(&mut c.training).unwrap();
                assert_eq!(
                    training_keys(&c),
                    training_keys(&base),
                    "{line:?} on {preset:?}"
                );
            }
            checked.push(knob.id);
        }
        assert!(
            checked.len() >= 6,
            "too few quoted defaults checked: {checked:?}"
        );
    }
}
