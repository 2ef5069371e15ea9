//! The host side of `imgctl verify --image TAG`: start a container of the
//! image with GPU device requests, run the image's own `imgctl verify --json`
//! inside, read its report back, and add host-side checks (`host.*`): the
//! container ran and reported; GPU UUIDs on the host against those in the
//! container; the host driver against the image's CUDA requirement.
//!
//! It talks to the engine only through `crate::docker` and never prints.
use std::collections::HashMap;
use std::time::Duration;

use super::context::{matches, selected, NvmlState, Options};
use super::error::VerifyError;
use super::pins::Pins;
use super::registry::registry;
pub use super::registry::{HOST_DESCRIPTIONS as DESCRIPTIONS, HOST_IDS as IDS};
use super::report::Report;
use super::result::{CheckResult, Level, Status};
use crate::docker::run::{ContainerPhase, GpuRequestRejected, Refusal, RunRequest};
use crate::gpus::GpuSelection;

mod no_report;
mod verdicts;
#[cfg(test)]
use no_report::cannot_exec;
use no_report::no_report;
pub use verdicts::{container_report_problem, container_uuids, driver_verdict, uuid_verdict};

/// Image labels `imgctl build` writes (mirrors `render::labels`).
pub mod label {
    /// torch version.
    pub const TORCH: &str = "io.imgctl.torch";
    /// CUDA runtime wheel version torch brings (`12.6.77`).
    pub const CUDA_RUNTIME: &str = "io.imgctl.cuda.runtime";
    /// CUDA toolkit version of the base image (`12.4.1`).
    pub const CUDA_BASE: &str = "io.imgctl.cuda.base";
    /// cuDNN wheel version.
    pub const CUDNN: &str = "io.imgctl.cudnn";
    /// NCCL wheel version.
    pub const NCCL: &str = "io.imgctl.nccl";
    /// Lowest driver that runs the wheel's CUDA (minor-version compatibility).
    pub const DRIVER_MIN: &str = "io.imgctl.driver.min";
}

/// Pins from the image's labels; None when the image carries none (not built by imgctl).
pub fn pins_from_labels(image: &str, labels: &HashMap<String, String>) -> Option<Pins> {
    let get = |k: &str| labels.get(k).filter(|v| !v.is_empty()).cloned();
    let pins = Pins {
        torch: get(label::TORCH),
        cudart: get(label::CUDA_RUNTIME),
        cublas: None,
        cudnn: get(label::CUDNN),
        nccl: get(label::NCCL),
        source: format!("labels of {image}"),
    };
    (pins.torch.is_some() || pins.cudart.is_some() || pins.cudnn.is_some() || pins.nccl.is_some())
        .then_some(pins)
}

/// What `verify --image` runs.
#[derive(Debug, Clone)]
pub struct ImageRun {
    /// The image.
    pub image: String,
    /// GPUs to give the container.
    pub gpus: GpuSelection,
    /// Checks, level, expectation and deadline (the host's verdicts use them;
    /// the container gets them through `cmd`).
    pub opts: Options,
    /// The command line run inside the container after its `imgctl`
    /// entrypoint: the command layer spells it (`verify --json …`) from
    /// `opts` and [`container_checks`].
    pub cmd: Vec<String>,
    /// Extra bind mounts (`SRC:DST[:ro]`).
    pub mounts: Vec<String>,
    /// Extra container labels.
    pub labels: HashMap<String, String>,
}

/// The host's GPUs as NVML reports them.
#[derive(Debug, Clone, Default)]
pub struct HostGpus {
    /// UUIDs in NVML index order.
    pub uuids: Vec<String>,
    /// Driver version.
    pub driver: Option<String>,
    /// CUDA driver version (NVML encoding).
    pub cuda_driver: Option<i32>,
    /// Why NVML gave nothing, if it did not.
    pub unavailable: Option<String>,
    /// NVML is there but did not answer in time (a wedged driver, not a
    /// missing one): the verdicts are unknown, and the GPUs are still requested.
    pub hung: bool,
}

/// Reads the host's GPUs through NVML, under `timeout` per call.
pub fn host_gpus(nvml: &NvmlState, timeout: Duration) -> HostGpus {
    let b = match nvml {
        NvmlState::Ready(b) => b.clone(),
        NvmlState::Unavailable(e) => {
            return HostGpus {
                unavailable: Some(e.clone()),
                ..Default::default()
            }
        }
        NvmlState::Hung(e) => {
            return HostGpus {
                unavailable: Some(e.clone()),
                hung: true,
                ..Default::default()
            }
        }
    };
    let r = super::check::run_with_deadline(timeout, move || {
        let n = b.device_count().unwrap_or(0);
        HostGpus {
            uuids: (0..n).filter_map(|i| b.uuid(i).ok()).collect(),
            driver: b.driver_version().ok(),
            cuda_driver: b.cuda_driver_version().ok(),
            unavailable: None,
            hung: false,
        }
    });
    r.unwrap_or_else(|e| HostGpus {
        unavailable: Some(format!("host NVML {e}")),
        hung: true,
        ..Default::default()
    })
}

/// The checks the container's imgctl is asked for: ids or prefixes to run
/// only, and to skip (each empty when not asked).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerChecks {
    /// Run only these (`--only`).
    pub only: Vec<String>,
    /// Skip these (`--skip`).
    pub skip: Vec<String>,
}

/// What the container runs of `opts`' selection: the same checks without
/// the host's own (`host.*`), plus the `nvml.identity` results
/// `host.gpu_uuids` compares, and never nothing (it would refuse that): the
/// driver at least.
pub fn container_checks(opts: &Options) -> ContainerChecks {
    let not_host = |p: &&String| !p.starts_with("host");
    // host.gpu_uuids compares the UUIDs of the container's nvml.identity
    // results: the container reports them even when not asked to (they are
    // dropped from the output again, see `verify_image`).
    let identity = "nvml.identity";
    let need_identity =
        selected("host.gpu_uuids", Level::Quick, opts) && !selected(identity, Level::Quick, opts);
    let mut only: Vec<String> = opts.only.iter().filter(not_host).cloned().collect();
    if only.is_empty() && !opts.only.is_empty() {
        // Only host checks asked for: the container still reports its driver.
        only.push("nvml.driver".to_string());
    }
    if need_identity && !only.is_empty() {
        only.push(identity.to_string());
    }
    let mut skip: Vec<String> = Vec::new();
    for p in opts.skip.iter().filter(not_host) {
        if need_identity && matches(identity, p) {
            // `--skip nvml`: skip every id it names but nvml.identity.
            skip.extend(
                registry()
                    .iter()
                    .map(|c| c.id())
                    .filter(|id| *id != identity && matches(id, p))
                    .map(str::to_string),
            );
        } else {
            skip.push(p.clone());
        }
    }
    // A selection of host checks only (`--skip nvml --skip torch`) leaves
    // the container nothing, which it refuses (exit 2): it still reports its
    // driver (and the identities host.gpu_uuids compares).
    let inside = Options {
        only: only.clone(),
        skip: skip.clone(),
        ..opts.clone()
    };
    if !registry()
        .iter()
        .any(|c| selected(c.id(), c.level(), &inside))
    {
        only = vec!["nvml.driver".to_string()];
        if need_identity {
            only.push(identity.to_string());
        }
        skip.clear();
    }
    ContainerChecks { only, skip }
}

/// What [`verify_image_with`] is doing, told to its watcher as each phase
/// starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImagePhase {
    /// Connecting to the Docker engine.
    Connect,
    /// Connected: what answered, and how it was reached (a note).
    Engine(crate::docker::EngineInfo),
    /// Reading the image's labels.
    Labels,
    /// Asking the host's NVML for its GPUs.
    HostGpus,
    /// A step of the container that runs the image's verify: create, start,
    /// run, collect, remove.
    Container(ContainerPhase),
    /// Comparing the host's GPUs and driver with the container's.
    Compare,
    /// The container's stderr, for those who asked to see more (`-v`): its
    /// last [`crate::docker::tail::OUTPUT_TAIL`] bytes, and how many bytes
    /// before them were left out.
    ContainerStderr {
        /// The stderr kept.
        stderr: String,
        /// Bytes left out before it (0: none).
        cut: u64,
    },
}

/// Runs the image's own verify inside a container of the image and returns
/// the merged report (host checks around the container's results).
pub async fn verify_image(run: ImageRun, host_nvml: NvmlState) -> anyhow::Result<Report> {
    verify_image_with(run, host_nvml, &|_| {}).await
}

/// [`verify_image`], telling `phase` what it does as each phase starts (a
/// command shows it as a spinner's message; verify prints nothing itself).
pub async fn verify_image_with(
    run: ImageRun,
    host_nvml: NvmlState,
    phase: &(dyn Fn(ImagePhase) + Sync),
) -> anyhow::Result<Report> {
    phase(ImagePhase::Connect);
    let mut engine = crate::docker::connect().await?;
    engine.ask_rootless().await;
    phase(ImagePhase::Engine(engine.info.clone()));
    let docker = engine.docker;
    phase(ImagePhase::Labels);
    let labels = crate::docker::run::image_labels(&docker, &run.image).await?;
    phase(ImagePhase::HostGpus);
    let host = host_gpus(&host_nvml, run.opts.timeout);
    let (req, gpus, why_none) = container_request(&run, &labels, &host)?;
    let started = std::time::Instant::now();
    // One call creates, starts, waits for, collects and removes the container.
    let outcome = crate::docker::run::run_to_completion_with(&docker, req, &|p| {
        phase(ImagePhase::Container(p))
    })
    .await;
    phase(ImagePhase::Compare);
    let gpu_api = gpu_api_used(&outcome);
    let (results, container_report) = container_verdict(
        outcome,
        &run,
        gpus.as_ref(),
        why_none.as_deref(),
        started,
        phase,
    )?;
    let mut report = host_verdicts(
        &run,
        &host,
        &labels,
        gpus.as_ref(),
        why_none.as_deref(),
        container_report,
        results,
    );
    report.gpu_api = Some(gpu_api);
    Ok(report)
}

/// What the container of `run` is asked for: imgctl with the image's pins
/// (from `labels`), the GPUs when some are expected and the host has a
/// driver, and a deadline for every check of every GPU. Also the GPUs asked
/// for and, with none, why.
fn container_request(
    run: &ImageRun,
    labels: &HashMap<String, String>,
    host: &HostGpus,
) -> anyhow::Result<(RunRequest, Option<GpuSelection>, Option<String>)> {
    let words = run.opts.words;
    let mut env = vec!["NO_COLOR=1".to_string()];
    if let Some(p) = pins_from_labels(&run.image, labels) {
        env.push(format!(
            "{}={}",
            crate::env_vars::IMGCTL_VERIFY_PINS,
            serde_json::to_string(&p)?
        ));
    }
    // No GPU request when none is expected or the host has no driver: an engine
    // without the nvidia runtime rejects any GPU request.
    let (gpus, why_none) = if run.opts.expect.allows_none() {
        (
            None,
            Some(format!("none expected ({} 0)", words.expect_gpus)),
        )
    } else if let (Some(why), false) = (&host.unavailable, host.hung) {
        (None, Some(format!("the host has no GPU driver ({why})")))
    } else {
        (Some(run.gpus.clone()), None)
    };
    let timeout = container_deadline(run, host);
    let req = RunRequest {
        image: run.image.clone(),
        entrypoint: Some(vec!["imgctl".into()]),
        cmd: run.cmd.clone(),
        env,
        gpus: gpus.clone(),
        // CDI where the engine lists CDI GPUs, else the NVIDIA runtime.
        gpu_api: crate::docker::cdi::GpuApi::Auto,
        binds: run.mounts.clone(),
        labels: run.labels.clone(),
        timeout,
    };
    Ok((req, gpus, why_none))
}

/// The host's `host.container` result from the container's `outcome`
/// (started at `started`): its report when one came back and can be
/// trusted, else why not; a refused GPU request is a FAIL, a missing imgctl
/// an error.
fn container_verdict(
    outcome: anyhow::Result<crate::docker::run::RunOutput>,
    run: &ImageRun,
    gpus: Option<&GpuSelection>,
    why_none: Option<&str>,
    started: std::time::Instant,
    phase: &(dyn Fn(ImagePhase) + Sync),
) -> anyhow::Result<(Vec<CheckResult>, Option<Report>)> {
    let words = run.opts.words;
    let this_binary = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "/path/to/imgctl".into());
    let mut results = Vec::new();
    let gpus_text = gpus.map_or("none".to_string(), |g| g.to_string());
    let mut container_report: Option<Report> = None;
    match outcome {
        Err(e) => {
            if let Some(rej) = e
                .chain()
                .find_map(|c| c.downcast_ref::<GpuRequestRejected>())
            {
                results.push(
                    CheckResult::fail("host.container", rej.to_string())
                        .threshold(format!("{} {gpus_text}", words.gpus))
                        .hint(gpu_refusal_hint(rej, &words)),
                );
            } else if e.to_string().contains("executable file not found") {
                return Err(VerifyError::NoImgctlInImage {
                    image: run.image.clone(),
                    error: e.to_string(),
                }
                .into());
            } else {
                return Err(e);
            }
        }
        Ok(out) => {
            phase(ImagePhase::ContainerStderr {
                stderr: out.stderr.clone(),
                cut: out.stderr_cut,
            });
            let parsed = serde_json::from_str::<Report>(out.stdout.trim())
                .map(|rep| (container_report_problem(out.exit_code, &rep), rep));
            match parsed {
                Ok((Some(problem), rep)) => {
                    results.push(
                        CheckResult::error("host.container", problem)
                            .measured(format!("exit code {}, {} results", out.exit_code, rep.results.len()))
                            .hint(format!("the image's imgctl is not one this imgctl can trust: rebuild the image with this imgctl (`{}`), or mount this binary with {} {this_binary}:/usr/local/bin/imgctl:ro", words.build, words.mount)),
                    );
                }
                Ok((None, rep)) => {
                    let mut r = CheckResult::pass(
                        "host.container",
                        format!(
                            "{} ran in a container of {} (GPUs: {gpus_text})",
                            words.verify, run.image
                        ),
                    )
                    .measured(format!(
                        "exit code {}, {} results",
                        out.exit_code,
                        rep.results.len()
                    ));
                    if let Some(why) = why_none {
                        r.message = format!("{}; no GPU requested: {why}", r.message);
                    }
                    r.duration_ms = started.elapsed().as_millis() as u64;
                    results.push(r);
                    container_report = Some(rep);
                }
                Err(parse) => {
                    results.push(no_report(&out, &parse, &run.image, &words, &this_binary))
                }
            }
        }
    }
    Ok((results, container_report))
}

/// What to do about the engine's GPU refusal `rej`: make a CDI spec where
/// none named the GPUs (Podman, or Docker with CDI), else install the
/// toolkit; or run without GPUs.
fn gpu_refusal_hint(rej: &GpuRequestRejected, words: &super::wording::Wording) -> String {
    if rej.refusal == Refusal::NoCdiSpec {
        return format!(
            "make a CDI spec for the GPUs as the line says, or pass {} 0 to run without GPUs",
            words.expect_gpus
        );
    }
    format!("install the NVIDIA Container Toolkit and restart the engine (`{}`), or pass {} 0 to run without GPUs", words.toolkit_configure, words.expect_gpus)
}

/// How long the container may run: every check of every GPU its full
/// deadline, plus a minute to start.
fn container_deadline(run: &ImageRun, host: &HostGpus) -> Duration {
    let n_checks = registry().len() as f64;
    let gpu_factor = host.uuids.len().max(1) as f64;
    Duration::from_secs_f64(60.0 + run.opts.timeout.as_secs_f64() * n_checks * gpu_factor)
}

/// How the GPUs reached the container: `cdi`, `runtime`, or `none` (none
/// were asked for, or the run failed before they reached it).
fn gpu_api_used(outcome: &anyhow::Result<crate::docker::run::RunOutput>) -> String {
    outcome
        .as_ref()
        .ok()
        .and_then(|out| out.gpu_api)
        .map_or_else(|| "none".to_string(), |api| api.to_string())
}

/// The report of `verify --image`: the container's results as the host can
/// confirm them ([`overridden_by_host`]), then the host's own verdicts on the
/// GPUs the container saw and the driver against the image's CUDA.
fn host_verdicts(
    run: &ImageRun,
    host: &HostGpus,
    labels: &HashMap<String, String>,
    gpus: Option<&GpuSelection>,
    why_none: Option<&str>,
    container_report: Option<Report>,
    mut results: Vec<CheckResult>,
) -> Report {
    let words = run.opts.words;
    let seen = container_report.as_ref().map(container_uuids);
    let (level, expect) = (run.opts.level, run.opts.expect);
    let want = |id: &str| selected(id, Level::Quick, &run.opts);
    if let Some(rep) = container_report {
        // nvml.identity may have been asked for only for host.gpu_uuids.
        let keep_identity = want("nvml.identity");
        results.extend(
            overridden_by_host(rep.results, why_none)
                .into_iter()
                .filter(|r| keep_identity || r.id != "nvml.identity"),
        );
    }
    if want("host.gpu_uuids") {
        results.push(uuid_verdict(host, gpus, seen.as_deref(), &words));
    }
    if want("host.driver_image_cuda") {
        results.push(driver_verdict(host, labels));
    }
    let mut report = Report::new("container", Some(run.image.clone()), level, expect, results);
    report.recount();
    report
}

/// The container's results as the host can confirm them: when the host
/// passed no GPU into the container (`no_gpus` says why), a GPU check that
/// PASSes there can only come from a forged or inconsistent report (an
/// image's imgctl is the image's to change), so it becomes a FAIL saying
/// so. The host's own view (its NVML, the GPUs it passed in) always wins.
pub fn overridden_by_host(results: Vec<CheckResult>, no_gpus: Option<&str>) -> Vec<CheckResult> {
    let Some(why) = no_gpus else {
        return results;
    };
    results
        .into_iter()
        .map(|mut r| {
            // The checks whose PASS needs a GPU: NVML's, torch's view of
            // the devices, and every functional measurement.
            let gpu_check = r.id.starts_with("nvml.")
                || r.id.starts_with("func.")
                || matches!(
                    r.id.as_str(),
                    "torch.cuda_available" | "torch.device_count" | "torch.arch" | "torch.driver_compat"
                );
            if gpu_check && r.status == Status::Pass {
                r.status = Status::Fail;
                r.message = format!(
                    "the container's report says '{}', but the host passed no GPU into it ({why}): a claim the host cannot confirm",
                    r.message
                );
            }
            r
        })
        .collect()
}

/// The container's "no NVIDIA driver: …" line, when its `nvml.driver` failed
/// for that reason (the command prints it as the one-line error).
pub fn no_driver_line(report: &Report) -> Option<String> {
    report
        .results
        .iter()
        .find(|r| {
            r.id == "nvml.driver"
                && r.status == Status::Fail
                && r.message.starts_with("no NVIDIA driver")
        })
        .map(|r| {
            r.message
                .split(" (reported although")
                .next()
                .unwrap_or_default()
                .to_string()
        })
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
