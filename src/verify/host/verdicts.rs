//! The host's verdicts on what the container of `verify --image` reported:
//! the GPU UUIDs it saw against those requested (`host.gpu_uuids`), whether
//! its report can be trusted, and the host driver against the image's CUDA
//! (`host.driver_image_cuda`).
use std::collections::{BTreeSet, HashMap};

use super::{label, HostGpus};
use crate::gpus::{GpuId, GpuSelection};
use crate::verify::report::{Report, SCHEMA_VERSION};
use crate::verify::result::{CheckResult, Status};
use crate::verify::wording::Wording;

/// The UUIDs the container's `nvml.identity` results report.
pub fn container_uuids(report: &Report) -> Vec<String> {
    report
        .results
        .iter()
        .filter(|r| r.id == "nvml.identity")
        .filter_map(|r| r.facts.get("uuid").cloned())
        .collect()
}

/// `host.gpu_uuids`: the GPUs the container saw against those requested on
/// the host (`words` names the flag that requested them).
pub fn uuid_verdict(
    host: &HostGpus,
    requested: Option<&GpuSelection>,
    container: Option<&[String]>,
    words: &Wording,
) -> CheckResult {
    const ID: &str = "host.gpu_uuids";
    if let Some(r) = host_nvml_missing(ID, host) {
        return r;
    }
    let Some(req) = requested else {
        return CheckResult::skip(ID, "no GPU was requested for the container");
    };
    let Some(container) = container else {
        return CheckResult::skip(ID, "the container gave no report; see host.container");
    };
    let host_set: BTreeSet<&String> = host.uuids.iter().collect();
    let seen: BTreeSet<&String> = container.iter().collect();
    let measured = format!("container {} GPU(s), host {}", seen.len(), host_set.len());
    let foreign: Vec<&&String> = seen.difference(&host_set).collect();
    if !foreign.is_empty() {
        return CheckResult::fail(
            ID,
            format!("the container sees GPU(s) the host does not: {foreign:?}"),
        )
        .measured(measured)
        .hint("the container reports a different machine's GPUs: check DOCKER_HOST");
    }
    let expected: Result<BTreeSet<String>, String> = match req {
        GpuSelection::All => Ok(host.uuids.iter().cloned().collect()),
        GpuSelection::Count(n) => {
            if seen.len() as u32 == *n {
                Ok(seen.iter().map(|s| (*s).clone()).collect())
            } else {
                Err(format!(
                    "{n} GPU(s) requested, the container sees {}",
                    seen.len()
                ))
            }
        }
        GpuSelection::Devices(ids) => ids
            .iter()
            .map(|id| match id {
                GpuId::Index(i) => host
                    .uuids
                    .get(*i as usize)
                    .cloned()
                    .ok_or_else(|| format!("host has no GPU {i}")),
                GpuId::Uuid(u) => Ok(u.clone()),
            })
            .collect(),
    };
    let threshold = format!("the GPUs of {} {}", words.gpus, req);
    match expected {
        Err(e) => CheckResult::fail(ID, e)
            .measured(measured)
            .threshold(threshold)
            .hint("the engine mapped other GPUs than requested: check the nvidia container runtime and NVIDIA_VISIBLE_DEVICES in the image"),
        Ok(exp) => {
            let seen_owned: BTreeSet<String> = seen.iter().map(|s| (*s).clone()).collect();
            if exp == seen_owned {
                CheckResult::pass(ID, "the container sees exactly the requested GPUs")
                    .measured(measured)
                    .threshold(threshold)
            } else {
                let missing: Vec<&String> = exp.difference(&seen_owned).collect();
                let extra: Vec<&String> = seen_owned.difference(&exp).collect();
                CheckResult::fail(ID, format!("missing in the container: {missing:?}; not requested: {extra:?}"))
                    .measured(measured)
                    .threshold(threshold)
                    .hint("the engine mapped other GPUs than requested: check the nvidia container runtime and NVIDIA_VISIBLE_DEVICES in the image")
            }
        }
    }
}

/// The verdict of a host check when the host's NVML gave nothing: SKIP when
/// it is missing (no driver on this host), ERROR when it hung (a driver is
/// there but wedged: the answer is unknown, not absent).
fn host_nvml_missing(id: &str, host: &HostGpus) -> Option<CheckResult> {
    let why = host.unavailable.as_ref()?;
    Some(if host.hung {
        CheckResult::error(id, format!("the host's NVML hung: {why}"))
            .hint("check `nvidia-smi` and the kernel log (dmesg) for Xid errors on the host")
    } else {
        CheckResult::skip(id, format!("host has no NVML ({why})"))
    })
}

/// What is wrong with the report the container's imgctl gave, if anything:
/// another schema, no results, or a verdict that disagrees with its own
/// results or with the process's exit code (0 passed, 1 failed).
pub fn container_report_problem(exit_code: i64, report: &Report) -> Option<String> {
    if report.schema_version != SCHEMA_VERSION {
        return Some(format!(
            "the image's imgctl {} writes report schema {}, this imgctl reads schema {}",
            report.imgctl_version, report.schema_version, SCHEMA_VERSION
        ));
    }
    if report.results.is_empty() {
        return Some("the image's imgctl reported no results".to_string());
    }
    let mut recounted = report.clone();
    recounted.recount();
    if recounted.summary != report.summary || recounted.passed != report.passed {
        return Some(format!(
            "the image's report contradicts itself: its summary says {:?} (passed: {}), its results {:?} (passed: {})",
            report.summary, report.passed, recounted.summary, recounted.passed
        ));
    }
    let expected = if report.passed { 0 } else { 1 };
    if exit_code != expected {
        return Some(format!(
            "the image's imgctl exited with {exit_code} but its report says {}",
            if report.passed {
                "passed (exit 0)"
            } else {
                "failed (exit 1)"
            }
        ));
    }
    None
}

/// `host.driver_image_cuda`: the host driver against the image's CUDA runtime
/// (label `io.imgctl.cuda.runtime`) and minimum driver (`io.imgctl.driver.min`).
pub fn driver_verdict(host: &HostGpus, labels: &HashMap<String, String>) -> CheckResult {
    const ID: &str = "host.driver_image_cuda";
    if let Some(r) = host_nvml_missing(ID, host) {
        return r;
    }
    let (Some(driver), Some(dcuda)) = (&host.driver, host.cuda_driver) else {
        return CheckResult::error(ID, "host NVML gave no driver version");
    };
    let Some(runtime) = labels.get(label::CUDA_RUNTIME) else {
        return CheckResult::skip(
            ID,
            format!(
                "the image has no {} label (not built by imgctl)",
                label::CUDA_RUNTIME
            ),
        );
    };
    let major_minor: String = runtime.split('.').take(2).collect::<Vec<_>>().join(".");
    let mut r = crate::verify::torch::driver_compat_verdict(driver, dcuda, &major_minor);
    r.id = ID.to_string();
    if let Some(min) = labels.get(label::DRIVER_MIN) {
        if r.status == Status::Pass && !crate::verify::torch::version_ge(driver, min) {
            r = CheckResult::fail(
                ID,
                format!("host driver {driver} is older than the image's minimum {min}"),
            )
            .measured(format!("driver {driver}"))
            .threshold(format!("≥ {min} ({})", label::DRIVER_MIN))
            .hint("upgrade the host's NVIDIA driver");
        }
    }
    if let Some(base) = labels.get(label::CUDA_BASE) {
        r.message = format!(
            "{} (image: CUDA base {base}, torch runtime {runtime})",
            r.message
        );
    }
    r
}
