//! `imgctl verify`: turns [`VerifyArgs`] into [`verify::Options`], runs the
//! checks here or inside a container of `--image`, and prints the report
//! (table on stderr, `--json` on stdout, `--junit FILE`).
use std::time::Duration;

use crate::cli::VerifyArgs;
use crate::commands::error::CliError;
use crate::docker::run::ContainerPhase;
use crate::error::ExitStatus;
use crate::output::{self, printer};
use crate::verify::host::ImagePhase;
use crate::verify::{self, ExpectGpus, Level, Options, Report, Wording};

/// Accepted `--check-timeout` seconds: long enough for any check to start
/// (1e-300 made every check time out), at most an hour.
const CHECK_TIMEOUT_RANGE: std::ops::RangeInclusive<f64> = 0.1..=3600.0;

/// The hint under "no NVIDIA driver".
const NO_DRIVER_HINT: &str = "install the NVIDIA driver (or run the container with the GPU: `--gpus all` and the NVIDIA Container Toolkit); on a CPU-only host pass --expect-gpus 0";

/// The command-line words verify's check results quote (hints, thresholds,
/// the note under a shortened table, one check description): verify's
/// texts name no flag or command themselves.
pub const WORDS: Wording = Wording {
    expect_gpus: "--expect-gpus",
    check_timeout: "--check-timeout",
    gpus: "--gpus",
    mount: "--mount",
    image: "--image",
    verify: "imgctl verify",
    build: "imgctl build",
    full_view: "-v or --json",
    docker_run_gpus: "docker run --gpus",
    docker_run_entrypoint: "docker run --rm --entrypoint",
    toolkit_configure: "nvidia-ctk runtime configure --runtime=docker",
};

/// Parses and checks the arguments; every problem is a usage error (exit 2).
pub fn options(args: &VerifyArgs) -> anyhow::Result<Options> {
    // A bad value is a `VerifyError`; `commands/error/verify.rs` words it.
    let expect = ExpectGpus::parse(&args.expect_gpus)?;
    let level = args.level;
    for (flag, patterns) in [("--only", &args.only), ("--skip", &args.skip)] {
        if patterns.iter().any(|p| p.trim().is_empty()) {
            return Err(CliError::usage(format!(
                "{flag} '' names no check (an empty id would select every one)"
            ))
            .with_hint(format!(
                "{flag} takes check ids or id prefixes such as `nvml` or `torch.cuda`; `imgctl verify --list-checks` lists them"
            ))
            .into());
        }
    }
    let mut unknown = verify::unknown_patterns(&args.only);
    unknown.extend(verify::unknown_patterns(&args.skip));
    if !unknown.is_empty() {
        return Err(
            CliError::usage(format!(
                "unknown check id(s): {}",
                unknown
                    .iter()
                    .map(|u| crate::error::printable(u))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
                .with_hint(format!(
                    "valid ids (or their prefixes such as `nvml`; `imgctl verify --list-checks` describes them): {}",
                    verify::all_ids().join(", ")
                ))
                .into(),
        );
    }
    if !(args.check_timeout.is_finite() && CHECK_TIMEOUT_RANGE.contains(&args.check_timeout)) {
        return Err(CliError::usage(format!(
            "--check-timeout {:?} is not a number of seconds from {:?} to {:?}",
            args.check_timeout,
            CHECK_TIMEOUT_RANGE.start(),
            CHECK_TIMEOUT_RANGE.end()
        ))
        .with_hint("a check needs time to run: e.g. --check-timeout 30 (the default)")
        .into());
    }
    let opts = Options {
        level,
        expect,
        only: args.only.clone(),
        skip: args.skip.clone(),
        timeout: Duration::from_secs_f64(args.check_timeout),
        words: WORDS,
    };
    check_selection(&opts, args.image.is_some())?;
    Ok(opts)
}

/// A selection that leaves nothing to run would "pass" on nothing: a usage
/// error, as are host-side checks without `--image`.
fn check_selection(opts: &Options, with_image: bool) -> anyhow::Result<()> {
    let here = verify::registry()
        .iter()
        .any(|c| verify::selected(c.id(), c.level(), opts));
    let host = verify::host::IDS
        .iter()
        .any(|id| verify::selected(id, Level::Quick, opts));
    if here || (host && with_image) {
        return Ok(());
    }
    Err(if host && !opts.only.is_empty() {
        CliError::usage(format!(
            "--only {} selects host-side checks, which run only with --image",
            opts.only.join(" ")
        ))
        .with_hint("add --image TAG to check an image from the host, or select other checks (`nvml`, `torch`, `func`)")
    } else {
        CliError::usage("--only / --skip leave no check to run")
            .with_hint("`imgctl verify --list-checks` lists the checks, their ids and levels")
    }
    .into())
}

/// The hint under every `--mount` error.
const MOUNT_HINT: &str = "--mount takes an existing host path and an absolute path in the container: --mount /data/models:/models:ro";

/// Checks one `--mount SRC:DST[:ro|:rw]` before the engine sees it, and
/// returns it as a bind for the engine. The source must be an absolute path
/// that exists: Docker would create a missing one as an empty root-owned
/// directory, and would take a bare name as a named volume and keep it after
/// the container is gone. Named volumes are refused (verify leaves nothing
/// behind); a value without `:` is a usage error naming the form, not the
/// engine's HTTP 500.
pub fn check_mount(mount: &str) -> Result<String, CliError> {
    use crate::error::printable;
    let shown = printable(mount);
    let usage = |m: String| CliError::usage(m).with_hint(MOUNT_HINT);
    let parts: Vec<&str> = mount.split(':').collect();
    let (src, dst, mode) = match parts.as_slice() {
        [src, dst] => (*src, *dst, None),
        [src, dst, mode] => (*src, *dst, Some(*mode)),
        _ => {
            return Err(usage(format!(
                "--mount {shown} is not of the form SRC:DST or SRC:DST:ro"
            )))
        }
    };
    if let Some(mode) = mode {
        if mode != "ro" && mode != "rw" {
            return Err(usage(format!(
                "--mount {shown}: unknown mode {}; ro (read-only) or rw",
                printable(mode)
            )));
        }
    }
    if mount.chars().any(char::is_control) {
        return Err(usage(format!(
            "--mount {shown} contains a control character"
        )));
    }
    if !src.starts_with('/') {
        let what = if src.is_empty() {
            "the host path is empty".to_string()
        } else if !src.contains('/') && !src.starts_with('.') && !src.starts_with('~') {
            format!("'{src}' is not a host path; Docker would take it as a named volume and keep it after the run, so verify does not mount volumes")
        } else {
            format!("the host path '{src}' is not absolute")
        };
        return Err(usage(format!("--mount {shown}: {what}")));
    }
    if std::fs::symlink_metadata(src).is_err() {
        return Err(usage(format!(
            "--mount {shown}: the host path {src} does not exist (Docker would create it as an empty directory owned by root)"
        )));
    }
    if !dst.starts_with('/') {
        return Err(usage(format!(
            "--mount {shown}: the container path '{dst}' is not absolute"
        )));
    }
    Ok(mount.to_string())
}

/// Runs `imgctl verify`.
pub fn run(args: VerifyArgs) -> anyhow::Result<ExitStatus> {
    if args.list_checks {
        let p = printer();
        let rows = verify::report::check_list(&WORDS);
        if args.json {
            p.json(&rows)?;
        } else {
            let fit = output::table_fit(output::Stream::Stdout, true);
            p.data(verify::report::check_list_table(&rows, p.color, fit).trim_end());
        }
        return Ok(ExitStatus::Success);
    }
    let opts = options(&args)?;
    if let Some(path) = &args.junit {
        super::output_files::check_output_file("--junit", path)?;
    }
    if let Some(image) = &args.image {
        crate::image_ref::check(crate::image_ref::Role::Image, image)?;
        let gpus = crate::gpus::GpuSelection::parse(&args.gpus)?;
        super::verify_image::check_before_start(
            image,
            &args.key,
            args.registry_ca.registry_ca.as_deref(),
        )?;
        super::fit::check_host_image(image, true)?;
        let mounts = args
            .mounts
            .iter()
            .map(|m| check_mount(m))
            .collect::<Result<Vec<_>, _>>()?;
        let run = verify::host::ImageRun {
            image: image.clone(),
            gpus,
            cmd: container_argv(&opts),
            opts: opts.clone(),
            mounts,
            labels: Default::default(),
        };
        let nvml = verify::load_real_nvml(opts.timeout);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let spinner = if args.json {
            indicatif::ProgressBar::hidden()
        } else {
            printer().spinner(format!("verify {image}"))
        };
        let phase = |p: ImagePhase| {
            if let Some(text) = phase_text(&p, image) {
                spinner.set_message(text)
            }
        };
        let report = rt.block_on(verify::host::verify_image_with(run, nvml, &phase));
        spinner.finish_and_clear();
        return emit(&report?, &args);
    }
    // A front end without imgctl-torch would report every torch check as
    // SKIP and pass, having checked nothing of the sort (#45 F8): refuse.
    if cfg!(not(feature = "torch")) {
        return Err(super::torch_missing("verify"));
    }
    // CUDA numbers devices fastest-first unless told otherwise; NVML uses PCI
    // order. Make them agree before anything initialises CUDA.
    if std::env::var_os(crate::env_vars::CUDA_DEVICE_ORDER).is_none() {
        std::env::set_var(crate::env_vars::CUDA_DEVICE_ORDER, "PCI_BUS_ID");
    }
    let nvml = verify::load_real_nvml(opts.timeout);
    let pins = verify::Pins::resolve(verify::torch::loaded_torch_dir().as_deref())
        .map_err(|m| CliError::usage(m).with_hint("IMGCTL_VERIFY_PINS holds a JSON object like {\"torch\":\"2.7.0\",\"cudnn\":\"9.5.1.17\"}"))?;
    printer().verbose(format!("pins from {}", pins.source));
    let bar = progress_bar(&args);
    let step = |s: verify::Step<'_>| {
        bar.set_length(s.total as u64);
        bar.set_position(s.index as u64);
        bar.set_message(s.label.to_string());
    };
    if args.fleet {
        return fleet(&args, || {
            // A check that failed runs once more before it counts (#54).
            let first = verify::run_local_with(
                nvml.clone(),
                &opts,
                pins.clone(),
                verify::in_container(),
                &step,
            );
            let failed = verify::retry::failed_ids(&first);
            let report = if failed.is_empty() {
                first
            } else {
                let only = verify::Options {
                    only: failed,
                    skip: Vec::new(),
                    ..opts.clone()
                };
                let again =
                    verify::run_local_with(nvml, &only, pins, verify::in_container(), &step);
                verify::retry::merge(first, &again)
            };
            bar.finish_and_clear();
            report
        });
    }
    let mut report = verify::run_local_with(nvml, &opts, pins, verify::in_container(), &step);
    bar.finish_and_clear();
    if let Some(dir) = &args.against_history {
        super::fleet_history::against(dir, &mut report)?;
    }
    emit(&report, &args)
}

/// Accepted `--fleet-timeout` seconds.
#[cfg(feature = "torch")]
const FLEET_TIMEOUT_RANGE: std::ops::RangeInclusive<f64> = 1.0..=3600.0;

/// `verify --fleet`: this node's part of the fleet run; rank 0 prints the
/// fleet's report, the others one line each.
#[cfg(feature = "torch")]
fn fleet(args: &VerifyArgs, local: impl FnOnce() -> Report) -> anyhow::Result<ExitStatus> {
    use verify::fleet::{self, FleetOptions, FleetOutcome};
    if !(args.fleet_timeout.is_finite() && FLEET_TIMEOUT_RANGE.contains(&args.fleet_timeout)) {
        return Err(CliError::usage(format!(
            "--fleet-timeout {:?} is not a number of seconds from 1 to 3600",
            args.fleet_timeout
        ))
        .with_hint("e.g. --fleet-timeout 45 (the default): a lost node is named within it")
        .into());
    }
    if !(1..=4096).contains(&args.link_mib) {
        return Err(CliError::usage(format!(
            "--link-mib {} is not from 1 to 4096",
            args.link_mib
        ))
        .with_hint("e.g. --link-mib 16 (the default)")
        .into());
    }
    if let Some(path) = &args.exclude_file {
        super::output_files::check_output_file("--exclude-file", path)?;
    }
    if let Some(path) = &args.metrics {
        super::output_files::check_output_file("--metrics", path)?;
    }
    if let Some(dir) = &args.history {
        super::fleet_history::check_dir("--history", dir)?;
    }
    if let Some(floor) = args
        .link_floor
        .filter(|f| !(f.is_finite() && *f > 0.0 && *f <= 1e7))
    {
        return Err(CliError::usage(format!(
            "--link-floor {floor} is not a bandwidth in MB/s from above 0 to 10000000"
        ))
        .with_hint("e.g. --link-floor 1000 for a link that must carry 1 GB/s")
        .into());
    }
    // `--heartbeat`/`--heartbeat-timeout` as train-demo takes them.
    let heartbeat = super::train_demo::heartbeat_settings(args.heartbeat, args.heartbeat_timeout)?;
    let info = crate::world::LaunchInfo::from_env(|k| std::env::var(k).ok())?;
    let p = printer();
    if info.source == crate::world::launch::LaunchSource::Single {
        // A fleet of one "passes" having compared nothing (#45 F19): say so.
        p.warn("verify --fleet found no launcher (no RANK from torchrun or a PyTorchJob, no SLURM_PROCID from srun): this is a fleet of one node; run it under `torchrun --nnodes N --nproc-per-node 1` or `srun --ntasks-per-node 1`, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
    }
    let options = FleetOptions {
        timeout: Duration::from_secs_f64(args.fleet_timeout),
        link_bytes: args.link_mib << 20,
        link_floor_mbs: args.link_floor,
        heartbeat,
        group_size: args.group_size,
    };
    match fleet::run(&info, options, local)? {
        FleetOutcome::Root(mut report) => {
            let recorded = match &args.history {
                Some(dir) => {
                    super::fleet_history::record(dir, args.exclude_file.as_deref(), &mut report)
                }
                None => Ok(()),
            };
            let recorded = recorded.and_then(|()| match &args.metrics {
                Some(path) => super::fleet_history::metrics(path, &report),
                None => Ok(()),
            });
            for (host, ranks) in shared_hosts(&report) {
                p.warn(format!(
                    "ranks {} run on the same host {host}: a fleet verify checks each node once, so start one rank a node (--nproc-per-node 1, --ntasks-per-node 1)",
                    ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", ")
                ));
            }
            if args.json {
                p.json(&report)?;
            }
            if let Some(path) = &args.junit {
                write_junit(path, &fleet::render::junit(&report))?;
            }
            if !p.quiet {
                let fit = output::table_fit(output::Stream::Stderr, p.verbose > 0);
                p.stderr_text(fleet::render::table(&report, fit));
            }
            recorded?;
            Ok(if report.passed {
                ExitStatus::Success
            } else {
                ExitStatus::Failure
            })
        }
        FleetOutcome::Leaf { address, passed } => {
            p.info(format!(
                "fleet verify: rank {} reported to rank 0 at {address}; the fleet {}",
                info.rank,
                if passed {
                    "passed"
                } else {
                    "FAILED (rank 0 has the report)"
                }
            ));
            Ok(if passed {
                ExitStatus::Success
            } else {
                ExitStatus::Failure
            })
        }
    }
}

/// The hosts that more than one rank runs on, with those ranks: the same
/// host name and nothing that tells them apart (the same address rank 0 saw
/// them connect from; for rank 0 itself, a peer on loopback). Network
/// namespaces share a host name but not an address.
#[cfg(feature = "torch")]
fn shared_hosts(report: &verify::fleet::FleetReport) -> Vec<(String, Vec<usize>)> {
    let loopback = |a: &str| {
        a.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
    };
    let same_place = |a: &verify::fleet::NodeEntry, b: &verify::fleet::NodeEntry| match (
        a.address.as_deref(),
        b.address.as_deref(),
    ) {
        (Some("self"), Some(x)) | (Some(x), Some("self")) => loopback(x),
        (Some(x), Some(y)) => x == y,
        _ => false,
    };
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, a) in report.nodes.iter().enumerate() {
        let Some(host) = a.host.as_deref() else {
            continue;
        };
        if groups.iter().any(|(_, ranks)| ranks.contains(&a.rank)) {
            continue;
        }
        let mut ranks = vec![a.rank];
        for b in &report.nodes[i + 1..] {
            if b.host.as_deref() == Some(host) && same_place(a, b) {
                ranks.push(b.rank);
            }
        }
        if ranks.len() > 1 {
            groups.push((host.to_string(), ranks));
        }
    }
    groups
}

#[cfg(not(feature = "torch"))]
fn fleet(_: &VerifyArgs, _: impl FnOnce() -> Report) -> anyhow::Result<ExitStatus> {
    Err(
        CliError::usage("--fleet needs an imgctl built with the torch feature")
            .with_hint("build imgctl with its default features")
            .into(),
    )
}

fn write_junit(path: &std::path::Path, xml: &str) -> anyhow::Result<()> {
    crate::sys::fs::write_file_atomic(path, xml.as_bytes()).map_err(|e| {
        CliError::failure(format!(
            "cannot write the JUnit report to {}: {e}",
            path.display()
        ))
        .with_hint("check that the folder exists and is writable")
        .into()
    })
}

/// Says a note of `verify --image`'s run (see [`super::say_container_note`];
/// the container's stderr with `-v`). Returns whether `phase` was one.
pub(crate) fn say_image_note(phase: &ImagePhase) -> bool {
    match phase {
        ImagePhase::Container(c) => super::say_container_note(c),
        ImagePhase::Engine(info) => {
            printer().verbose(super::engine_line::engine_line(info, None));
            true
        }
        ImagePhase::ContainerStderr { stderr, cut } => {
            let kept = if *cut > 0 {
                format!(
                    " (its last {} KiB; {cut} bytes before them left out)",
                    crate::docker::tail::OUTPUT_TAIL / 1024,
                )
            } else {
                String::new()
            };
            printer().verbose(format!("container stderr{kept}:\n{stderr}"));
            true
        }
        _ => false,
    }
}

/// The spinner's message for each phase of `verify --image` (None for a
/// note, said by [`say_image_note`]).
fn phase_text(phase: &ImagePhase, image: &str) -> Option<String> {
    if say_image_note(phase) {
        return None;
    }
    Some(match phase {
        ImagePhase::Connect => "connecting to the Docker engine".to_string(),
        ImagePhase::Labels => format!("reading the labels of {image}"),
        ImagePhase::HostGpus => "asking the host's NVML for its GPUs".to_string(),
        ImagePhase::Container(ContainerPhase::Create) => {
            format!("creating a container of {image}")
        }
        ImagePhase::Container(ContainerPhase::Start) => "starting the container".to_string(),
        ImagePhase::Container(ContainerPhase::Run) => {
            "running imgctl verify in the container".to_string()
        }
        ImagePhase::Container(ContainerPhase::Collect) => {
            "collecting the container's output".to_string()
        }
        ImagePhase::Container(ContainerPhase::Remove) => "removing the container".to_string(),
        ImagePhase::Compare => {
            "comparing the host's GPUs and driver with the container's".to_string()
        }
        ImagePhase::Container(
            ContainerPhase::StaleRemoved(_) | ContainerPhase::StaleUnchecked(_),
        )
        | ImagePhase::Engine(_)
        | ImagePhase::ContainerStderr { .. } => return None,
    })
}

/// The bar of a local run on a terminal: `⠋ [3/17] nvml.ecc (2s)`. Hidden
/// when stderr is not a terminal, with `-q`, and with `--json`.
fn progress_bar(args: &VerifyArgs) -> indicatif::ProgressBar {
    if args.json {
        return indicatif::ProgressBar::hidden();
    }
    let bar = printer().progress(0, "{spinner} verify [{pos}/{len}] {wide_msg} {elapsed}");
    if !bar.is_hidden() {
        bar.enable_steady_tick(Duration::from_millis(120));
    }
    bar
}

/// Prints the report and maps it to an exit status: 0 when nothing failed,
/// 1 when any check is FAIL or ERROR (an ERROR leaves the verdict unknown).
pub fn emit(report: &Report, args: &VerifyArgs) -> anyhow::Result<ExitStatus> {
    let p = printer();
    if args.json {
        let mut doc = serde_json::to_value(report)?;
        doc["ran_by"] = crate::commands::torch_part::ran_by();
        p.json(&doc)?;
    }
    if let Some(path) = &args.junit {
        write_junit(path, &verify::report::junit(report))?;
    }
    // No driver while GPUs are expected: one clear line, not a table of SKIPs.
    if let Some(line) = verify::host::no_driver_line(report) {
        return Err(CliError::failure(line).with_hint(NO_DRIVER_HINT).into());
    }
    if !p.quiet {
        let fit = output::table_fit(output::Stream::Stderr, p.verbose > 0);
        p.stderr_text(verify::report::table(report, p.color, fit, &WORDS));
    }
    Ok(if report.passed {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}

/// The command line the image's imgctl runs (after its `imgctl`
/// entrypoint): `verify --json` with this run's level, expectation and
/// deadline, and the checks [`verify::host::container_checks`] leaves it.
pub(crate) fn container_argv(opts: &Options) -> Vec<String> {
    let level = match opts.level {
        Level::Quick => "quick",
        Level::Full => "full",
    };
    let mut argv: Vec<String> = vec![
        "verify".into(),
        "--json".into(),
        "--level".into(),
        level.into(),
        "--expect-gpus".into(),
        opts.expect.as_arg(),
        "--check-timeout".into(),
        opts.timeout.as_secs_f64().to_string(),
    ];
    let checks = verify::host::container_checks(opts);
    if !checks.only.is_empty() {
        argv.push("--only".into());
        argv.extend(checks.only);
    }
    if !checks.skip.is_empty() {
        argv.push("--skip".into());
        argv.extend(checks.skip);
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::Fit;
    use crate::verify::CheckResult;

    /// The image's imgctl is told the level, expectation, deadline and the
    /// checks it runs (no host ids), in its own flags' spelling.
    #[test]
    fn the_container_runs_verify_json_with_this_runs_settings() {
        let opts = Options {
            level: Level::Full,
            expect: ExpectGpus::Exactly(0),
            only: vec!["nvml".into(), "host.gpu_uuids".into()],
            skip: vec!["nvml.ecc".into()],
            timeout: Duration::from_secs(5),
            words: WORDS,
        };
        assert_eq!(
            container_argv(&opts),
            vec![
                "verify",
                "--json",
                "--level",
                "full",
                "--expect-gpus",
                "0",
                "--check-timeout",
                "5",
                "--only",
                "nvml",
                "--skip",
                "nvml.ecc"
            ]
        );
        // Every level is passed under the name `--level` takes.
        use clap::ValueEnum;
        for level in Level::value_variants() {
            let name = level.to_possible_value().unwrap().get_name().to_string();
            let argv = container_argv(&Options {
                level: *level,
                only: vec![],
                skip: vec![],
                ..opts.clone()
            });
            let at = argv.iter().position(|a| a == "--level").unwrap();
            assert_eq!(argv[at + 1], name);
            assert_eq!(argv.len(), 8, "no selection, no --only/--skip: {argv:?}");
        }
    }

    #[test]
    fn a_shortened_table_names_the_flags_that_show_it_whole() {
        let report = Report::new(
            "host",
            None,
            Level::Quick,
            ExpectGpus::Any,
            vec![
                CheckResult::pass("nvml.driver", "driver 580.159.03").measured(
                    "9.5.1 from /root/.cache/imgctl/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9",
                ),
                CheckResult::fail("nvml.ecc", "2 uncorrectable errors")
                    .gpu(1)
                    .threshold("0 errors"),
            ],
        );
        for width in [80u16, 100, 120] {
            let t = verify::report::table(&report, false, Fit::Cut(width), &WORDS);
            assert!(
                t.contains(
                    "(shortened to fit the terminal; -v or --json show every column in full)"
                ),
                "{width}:\n{t}"
            );
        }
    }
}
