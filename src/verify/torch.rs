//! libtorch checks (`torch.*`): version against the pins, CUDA availability,
//! device count against NVML, compute capability against the code torch
//! ships, the driver against torch's CUDA runtime, and loaded-library
//! provenance.
//!
//! The check bodies use tch and exist only with the `torch` feature; without
//! it, the same ids are registered and report SKIP ("built without torch"),
//! so ids stay stable. This file must not render output.
use std::path::PathBuf;

use super::check::{CheckResult, FnCheck, Level, Scope};
use super::context::Context;
use super::provenance::{self, LibKind};
use super::versions::version_matches;

/// The torch checks, in run order.
pub fn checks() -> Vec<FnCheck> {
    let node = |id, description, needs_gpu, run| FnCheck {
        id,
        description,
        level: Level::Quick,
        scope: Scope::Node,
        needs_gpu,
        run,
    };
    vec![
        node(
            "torch.version",
            "torch version against the pins",
            false,
            imp::check_version,
        ),
        node(
            "torch.cuda_available",
            "torch can use CUDA",
            true,
            imp::check_cuda_available,
        ),
        node(
            "torch.device_count",
            "torch's device count equals NVML's",
            true,
            imp::check_device_count,
        ),
        FnCheck {
            id: "torch.arch",
            description: "compute capability covered by the code in libtorch_cuda.so",
            level: Level::Quick,
            scope: Scope::PerGpu,
            needs_gpu: true,
            run: imp::check_arch,
        },
        node(
            "torch.driver_compat",
            "driver supports torch's CUDA runtime",
            true,
            imp::check_driver_compat,
        ),
        node(
            "torch.cudart_loaded",
            "loaded libcudart: path, version, pin, shadowed copies",
            false,
            |c, g| imp::check_loaded(c, g, LibKind::Cudart),
        ),
        node(
            "torch.cublas_loaded",
            "loaded libcublas: path, version, pin, shadowed copies",
            false,
            |c, g| imp::check_loaded(c, g, LibKind::Cublas),
        ),
        node(
            "torch.cudnn_loaded",
            "loaded libcudnn: path, version, pin, shadowed copies",
            false,
            |c, g| imp::check_loaded(c, g, LibKind::Cudnn),
        ),
        node(
            "torch.nccl_loaded",
            "loaded libnccl: path, version, pin, shadowed copies",
            false,
            |c, g| imp::check_loaded(c, g, LibKind::Nccl),
        ),
    ]
}

/// The id of the provenance check for a library.
pub fn loaded_id(kind: LibKind) -> &'static str {
    match kind {
        LibKind::Cudart => "torch.cudart_loaded",
        LibKind::Cublas => "torch.cublas_loaded",
        LibKind::Cudnn => "torch.cudnn_loaded",
        LibKind::Nccl => "torch.nccl_loaded",
    }
}

/// The folder of the torch package this process loaded (`…/site-packages/torch`
/// or a standalone libtorch), found through the mapped `libtorch_cpu.so`.
pub fn loaded_torch_dir() -> Option<PathBuf> {
    let files = crate::sys::procmaps::mapped_files().ok()?;
    let cpu = files
        .iter()
        .find(|p| p.file_name().is_some_and(|n| n == "libtorch_cpu.so"))?;
    Some(cpu.parent()?.parent()?.to_path_buf())
}

/// The path of the mapped `libtorch_cuda.so`, if any.
pub fn loaded_torch_cuda() -> Option<PathBuf> {
    crate::sys::procmaps::mapped_files()
        .ok()?
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "libtorch_cuda.so"))
}

/// Oldest Linux driver that runs CUDA `major`.x under minor-version
/// compatibility (CUDA Compatibility guide, "Minor Version Compatibility":
/// 13.x needs >= 580, 12.x needs >= 525.60.13, 11.x needs >= 450.80.02;
/// https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).
pub fn minor_compat_min_driver(major: i32) -> Option<&'static str> {
    match major {
        13 => Some("580"),
        12 => Some("525.60.13"),
        11 => Some("450.80.02"),
        _ => None,
    }
}

/// Compares dotted numeric versions.
pub fn version_ge(a: &str, b: &str) -> bool {
    let parse = |s: &str| -> Vec<u64> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(a) >= parse(b)
}

/// Parses `12.6` into NVML's encoding 12060.
pub fn cuda_code(v: &str) -> Option<i32> {
    let mut it = v.split('.');
    let major: i32 = it.next()?.parse().ok()?;
    let minor: i32 = it.next().unwrap_or("0").parse().ok()?;
    Some(major * 1000 + minor * 10)
}

/// The driver-compatibility verdict, pure: `driver_cuda` is NVML's
/// encoding (12040), `runtime` torch's build CUDA (`12.6`), `driver` the
/// driver version string.
pub fn driver_compat_verdict(driver: &str, driver_cuda: i32, runtime: &str) -> CheckResult {
    const ID: &str = "torch.driver_compat";
    let Some(rt) = cuda_code(runtime) else {
        return CheckResult::error(ID, format!("cannot read torch's CUDA version `{runtime}`"));
    };
    let measured = format!(
        "driver {driver} (CUDA {})",
        super::nvml::checks::fmt_cuda_version(driver_cuda)
    );
    if driver_cuda >= rt {
        return CheckResult::pass(ID, format!("driver supports CUDA {runtime} natively"))
            .measured(measured)
            .threshold(format!("≥ CUDA {runtime}"));
    }
    let same_major = driver_cuda / 1000 == rt / 1000;
    match minor_compat_min_driver(rt / 1000) {
        Some(min) if same_major && version_ge(driver, min) => CheckResult::pass(
            ID,
            format!("CUDA {runtime} runs by minor-version compatibility (no PTX JIT of newer code)"),
        )
        .measured(measured)
        .threshold(format!("≥ CUDA {runtime}, or CUDA {}.x with driver ≥ {min}", rt / 1000)),
        Some(min) => CheckResult::fail(ID, format!("driver too old for torch's CUDA {runtime}"))
            .measured(measured)
            .threshold(format!("≥ CUDA {runtime}, or CUDA {}.x with driver ≥ {min}", rt / 1000))
            .hint("upgrade the NVIDIA driver, or use an image whose torch wheel targets an older CUDA"),
        None => CheckResult::fail(ID, format!("driver too old for torch's CUDA {runtime}"))
            .measured(measured)
            .threshold(format!("≥ CUDA {runtime}"))
            .hint("upgrade the NVIDIA driver"),
    }
}

/// The provenance verdict for one library, pure: the mapped copies, the
/// version each reports, its wheel version, the pin and the shadowed copies.
pub fn loaded_verdict(
    kind: LibKind,
    mapped: &[PathBuf],
    version: Result<String, String>,
    wheel: Option<String>,
    pin: Option<&str>,
    pin_source: &str,
    shadowed: &[provenance::Shadowed],
) -> CheckResult {
    let id = loaded_id(kind);
    let lib = kind.stem();
    if mapped.len() > 1 {
        let list: Vec<String> = mapped.iter().map(|p| p.display().to_string()).collect();
        return CheckResult::fail(id, format!("{} copies of {lib} are mapped: {}", mapped.len(), list.join(", ")))
            .hint("two copies of one CUDA library in one process break in subtle ways: remove one from LD_LIBRARY_PATH / the image");
    }
    let Some(path) = mapped.first() else {
        return CheckResult::fail(
            id,
            format!("{lib} is not mapped in this process after CUDA initialisation"),
        )
        .hint(
            "torch was expected to load it through libtorch_cuda.so: check `ldd libtorch_cuda.so`",
        );
    };
    let version = match version {
        Ok(v) => v,
        Err(e) => {
            return CheckResult::error(
                id,
                format!("{lib} at {}: version query failed: {e}", path.display()),
            );
        }
    };
    let found = match &wheel {
        Some(w) => format!("{version} (wheel {w}) from {}", path.display()),
        None => format!("{version} from {}", path.display()),
    };
    let threshold = pin.map(|p| format!("= {p} ({pin_source})"));
    let mut r = match pin {
        Some(p) if !version_matches(&version, p) || wheel.as_deref().is_some_and(|w| !version_matches(w, p)) => {
            CheckResult::fail(id, format!("{lib} {version} does not match the pin {p}"))
                .hint("the wrong copy is loaded: check LD_LIBRARY_PATH and the image's library folders (ldconfig -p)")
        }
        // A shadowed copy of the very same version is harmless (e.g. the CUDA
        // toolkit's libcudart 13.0.96 under torch's wheel of 13.0.96, as on the
        // H200 device): whichever a process picks, it gets the same library.
        // Only another (or an unknown) version is worth a warning.
        _ if shadowed.iter().any(|s| !same_version(s, &version, wheel.as_deref())) => {
            let list: Vec<String> = shadowed
                .iter()
                .filter(|s| !same_version(s, &version, wheel.as_deref()))
                .map(|s| match &s.version {
                    Some(v) => format!("{} ({v})", s.path.display()),
                    None => format!("{} (version unknown)", s.path.display()),
                })
                .collect();
            CheckResult::warn(id, format!("loaded copy shadows another version: {}", list.join(", ")))
                .hint("another process or LD_LIBRARY_PATH change could pick the other copy; remove it from the image or keep torch's copy first")
        }
        _ if !shadowed.is_empty() => {
            let list: Vec<String> = shadowed.iter().map(|s| s.path.display().to_string()).collect();
            CheckResult::pass(
                id,
                format!("{lib} {} (shadows the same version at {})", if pin.is_some() { "matches the pin" } else { "loaded" }, list.join(", ")),
            )
        }
        Some(_) => CheckResult::pass(id, format!("{lib} matches the pin")),
        None => CheckResult::pass(id, format!("{lib} loaded (no pin to compare)")),
    };
    r = r.measured(found);
    if let Some(t) = threshold {
        r = r.threshold(t);
    }
    r
}

/// Whether a shadowed copy reports the version of the loaded one: its full
/// version equals the wheel's, or the loaded library's own (shorter) version
/// is a prefix of it. An unknown version is never the same.
fn same_version(s: &provenance::Shadowed, loaded: &str, wheel: Option<&str>) -> bool {
    let Some(v) = s.version.as_deref() else {
        return false;
    };
    match wheel {
        Some(w) => version_matches(v, w) && v.split('.').count() >= w.split('.').count().min(3),
        None => version_matches(v, loaded),
    }
}

/// Initialises CUDA through torch (once) and says whether it is usable.
#[cfg(feature = "torch")]
pub fn cuda_available() -> bool {
    imp::cuda_available()
}

#[cfg(not(feature = "torch"))]
mod imp {
    use super::*;

    pub fn check_version(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("torch.version")
    }
    pub fn check_cuda_available(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("torch.cuda_available")
    }
    pub fn check_device_count(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("torch.device_count")
    }
    pub fn check_arch(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("torch.arch")
    }
    pub fn check_driver_compat(_: &Context, _: Option<u32>) -> Vec<CheckResult> {
        CheckResult::without_torch("torch.driver_compat")
    }
    pub fn check_loaded(_: &Context, _: Option<u32>, kind: LibKind) -> Vec<CheckResult> {
        CheckResult::without_torch(loaded_id(kind))
    }
}

#[cfg(feature = "torch")]
mod imp {
    use std::sync::OnceLock;

    use super::super::fatbin::{self, Coverage};
    use super::super::versions::torch_version_info;
    use super::*;

    /// Initialises CUDA through torch (once) and says whether it is usable.
    pub fn cuda_available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(tch::Cuda::is_available)
    }

    fn torch_dir_or_error(id: &str) -> Result<PathBuf, Box<CheckResult>> {
        loaded_torch_dir().ok_or_else(|| {
            Box::new(CheckResult::error(
                id,
                "libtorch_cpu.so is not mapped in this process",
            ))
        })
    }

    pub fn check_version(ctx: &Context, _: Option<u32>) -> Vec<CheckResult> {
        const ID: &str = "torch.version";
        let dir = match torch_dir_or_error(ID) {
            Ok(d) => d,
            Err(r) => return vec![*r],
        };
        let Some((version, cuda)) = torch_version_info(&dir) else {
            return vec![CheckResult::error(
                ID,
                format!("no version.py or build-version in {}", dir.display()),
            )];
        };
        let measured = match &cuda {
            Some(c) => format!("{version} (CUDA {c}) from {}", dir.display()),
            None => format!("{version} (CPU-only) from {}", dir.display()),
        };
        let r = match &ctx.pins.torch {
            Some(pin) if version_matches(&version, pin) => {
                CheckResult::pass(ID, format!("torch {version} matches the pin"))
            }
            Some(pin) => CheckResult::fail(ID, format!("torch {version} does not match the pin {pin}"))
                .hint("the image's torch was replaced (pip install?) or a different libtorch is first on the library path"),
            None => CheckResult::pass(ID, format!("torch {version} (no pin)")),
        };
        let mut r = r.measured(measured);
        if let Some(pin) = &ctx.pins.torch {
            r = r.threshold(format!("= {pin} ({})", ctx.pins.source));
        }
        vec![r]
    }

    fn nvml_count(ctx: &Context) -> Option<u32> {
        match &ctx.nvml {
            super::super::context::NvmlState::Ready(b) => b.device_count().ok(),
            super::super::context::NvmlState::Unavailable(_)
            | super::super::context::NvmlState::Hung(_) => None,
        }
    }

    pub fn check_cuda_available(ctx: &Context, _: Option<u32>) -> Vec<CheckResult> {
        const ID: &str = "torch.cuda_available";
        let available = cuda_available();
        let nvml = nvml_count(ctx);
        let measured = format!(
            "cuda available: {available}; NVML GPUs: {}",
            nvml.map_or("n/a".to_string(), |n| n.to_string())
        );
        let r = if available {
            CheckResult::pass(ID, "torch can use CUDA")
        } else if loaded_torch_cuda().is_none() {
            if ctx.expect.allows_none() {
                CheckResult::skip(
                    ID,
                    format!(
                        "this libtorch is CPU-only; no GPU expected ({} 0)",
                        ctx.words.expect_gpus
                    ),
                )
            } else {
                CheckResult::fail(ID, "this libtorch is CPU-only")
                    .hint("install a CUDA build of torch (cu126 / cu128 wheels)")
            }
        } else if ctx.expect.allows_none() && nvml.unwrap_or(0) == 0 {
            CheckResult::skip(
                ID,
                format!(
                    "CUDA not available: no GPU here, none expected ({} 0)",
                    ctx.words.expect_gpus
                ),
            )
        } else {
            // The runtime's own reason is the answer users need: "driver
            // version is insufficient" (an image newer than the host driver)
            // reads very differently from "no CUDA-capable device".
            let why = crate::sys::procmaps::mapped_files()
                .ok()
                .and_then(|m| {
                    provenance::find_mapped(LibKind::Cudart, &m)
                        .into_iter()
                        .next()
                })
                .and_then(|p| provenance::cuda_init_error(&p));
            let no_driver = matches!(ctx.nvml, super::super::context::NvmlState::Unavailable(_));
            let docker_gpus = ctx.words.docker_run_gpus;
            match why {
                Some(e) if no_driver => CheckResult::fail(ID, format!("torch cannot use CUDA: {e}")).hint(format!(
                    "there is no NVIDIA driver here (see nvml.driver), which CUDA reports as error 35; install it, or start the container with the GPU (`{docker_gpus} all`)",
                )),
                Some(e) => CheckResult::fail(ID, format!("torch cannot use CUDA: {e}")).hint(format!(
                    "error 35 or 803: the host driver is too old for this CUDA runtime (see torch.driver_compat); 100: no GPU visible to this process (`{docker_gpus}`, CUDA_VISIBLE_DEVICES)",
                )),
                None => CheckResult::fail(ID, "torch cannot use CUDA").hint(format!(
                    "no GPU visible to this process: check the driver (nvml.driver), `{docker_gpus}`, and CUDA_VISIBLE_DEVICES",
                )),
            }
        };
        vec![r.measured(measured).threshold("available")]
    }

    pub fn check_device_count(ctx: &Context, _: Option<u32>) -> Vec<CheckResult> {
        const ID: &str = "torch.device_count";
        let Some(nvml) = nvml_count(ctx) else {
            return vec![CheckResult::skip(
                ID,
                "NVML not available; nothing to compare with (see nvml.driver)",
            )];
        };
        let torch = if cuda_available() {
            tch::Cuda::device_count()
        } else {
            0
        };
        let cvd = std::env::var(crate::env_vars::CUDA_VISIBLE_DEVICES).ok();
        let measured = format!("torch {torch}, NVML {nvml}");
        let r = if torch as u32 == nvml {
            if nvml == 0 {
                CheckResult::skip(ID, "no GPU seen by NVML or torch")
            } else {
                CheckResult::pass(ID, format!("torch and NVML both see {nvml} GPU(s)"))
            }
        } else {
            let why = match &cvd {
                Some(v) => format!("CUDA_VISIBLE_DEVICES={v}"),
                None => "CUDA_VISIBLE_DEVICES is unset".to_string(),
            };
            CheckResult::fail(ID, format!("torch sees {torch} GPU(s) but NVML sees {nvml} ({why})")).hint(format!(
                "CUDA_VISIBLE_DEVICES hides GPUs from torch, or the container's device mapping ({} / NVIDIA_VISIBLE_DEVICES) differs from the /dev/nvidia* nodes mounted; unset it or match the two",
                ctx.words.gpus
            ))
        };
        vec![r.measured(measured).threshold("torch = NVML")]
    }

    fn arch_list() -> Result<fatbin::ArchList, String> {
        static LIST: OnceLock<Result<fatbin::ArchList, String>> = OnceLock::new();
        LIST.get_or_init(|| {
            let path = loaded_torch_cuda()
                .ok_or_else(|| "libtorch_cuda.so is not mapped (CPU-only libtorch)".to_string())?;
            fatbin::arch_list(&path).map_err(|e| format!("reading {}: {e}", path.display()))
        })
        .clone()
    }

    pub fn check_arch(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
        const ID: &str = "torch.arch";
        let nvml = match ctx.nvml_backend(ID) {
            Ok(b) => b,
            Err(r) => return vec![*r],
        };
        let (major, minor) = match nvml.compute_capability(gpu.unwrap_or(0)) {
            Ok(cc) => cc,
            Err(e) => {
                return vec![super::super::nvml::checks::from_err(
                    ID,
                    "compute capability",
                    &e,
                )]
            }
        };
        let list = match arch_list() {
            Ok(l) => l,
            Err(e) => return vec![CheckResult::error(ID, e)],
        };
        if list.sass.is_empty() && list.ptx.is_empty() {
            return vec![CheckResult::error(
                ID,
                "no GPU code found in libtorch_cuda.so's .nv_fatbin section",
            )];
        }
        let threshold = format!("in [{}]", list.describe());
        let partial = if list.partial.is_empty() {
            String::new()
        } else {
            let p: Vec<String> = list.partial.iter().map(|a| format!("sm_{a}")).collect();
            format!(" (a few kernels also for {})", p.join(" "))
        };
        let measured = format!("sm_{major}{minor}");
        let r = match list.coverage(major, minor) {
            Coverage::Exact => CheckResult::pass(ID, format!("torch ships sm_{major}{minor} code{partial}")),
            Coverage::SameMajor(a) => CheckResult::pass(ID, format!("runs sm_{a} code (binary compatible within major {major}){partial}")),
            Coverage::Ptx(a) => CheckResult::warn(ID, format!("only PTX for compute_{a}: JIT-compiled at start, slower, and not under minor-version compatibility"))
                .hint("use a torch build whose arch list includes this GPU (newer CUDA wheel)"),
            Coverage::None => CheckResult::fail(ID, format!("torch has no code for sm_{major}{minor}: kernels will fail with 'no kernel image is available'"))
                .hint("use a torch wheel built for this GPU (e.g. cu128 for Blackwell)"),
        };
        vec![r.measured(measured).threshold(threshold)]
    }

    pub fn check_driver_compat(ctx: &Context, _: Option<u32>) -> Vec<CheckResult> {
        const ID: &str = "torch.driver_compat";
        let nvml = match ctx.nvml_backend(ID) {
            Ok(b) => b,
            Err(r) => return vec![*r],
        };
        let Some((_, cuda)) = loaded_torch_dir().and_then(|d| torch_version_info(&d)) else {
            return vec![CheckResult::error(
                ID,
                "cannot find the loaded torch's version file",
            )];
        };
        let Some(runtime) = cuda else {
            return vec![CheckResult::skip(
                ID,
                "CPU-only torch: no CUDA runtime to support",
            )];
        };
        let driver = match nvml.driver_version() {
            Ok(d) => d,
            Err(e) => {
                return vec![super::super::nvml::checks::from_err(
                    ID,
                    "driver version",
                    &e,
                )]
            }
        };
        let dcuda = match nvml.cuda_driver_version() {
            Ok(v) => v,
            Err(e) => {
                return vec![super::super::nvml::checks::from_err(
                    ID,
                    "CUDA driver version",
                    &e,
                )]
            }
        };
        vec![driver_compat_verdict(&driver, dcuda, &runtime)]
    }

    pub fn check_loaded(ctx: &Context, _: Option<u32>, kind: LibKind) -> Vec<CheckResult> {
        let id = loaded_id(kind);
        // CUDA initialisation loads what libtorch_cuda.so needs lazily (cuDNN's
        // sublibraries, NCCL's plugins); query after it.
        let _ = cuda_available();
        if loaded_torch_cuda().is_none() {
            return vec![CheckResult::skip(
                id,
                "CPU-only libtorch: no CUDA libraries to trace",
            )];
        }
        let files = match crate::sys::procmaps::mapped_files() {
            Ok(f) => f,
            Err(e) => {
                return vec![CheckResult::error(
                    id,
                    format!("reading /proc/self/maps: {e}"),
                )]
            }
        };
        let mapped = provenance::find_mapped(kind, &files);
        let (version, wheel, shadowed) = match mapped.first() {
            Some(p) => (
                provenance::query_version(kind, p),
                provenance::wheel_version(kind, p),
                provenance::shadowed_copies(kind, p, &provenance::system_lib_dirs()),
            ),
            None => (Err("not mapped".into()), None, Vec::new()),
        };
        let pin = match kind {
            LibKind::Cudart => ctx.pins.cudart.as_deref(),
            LibKind::Cublas => ctx.pins.cublas.as_deref(),
            LibKind::Cudnn => ctx.pins.cudnn.as_deref(),
            LibKind::Nccl => ctx.pins.nccl.as_deref(),
        };
        vec![loaded_verdict(
            kind,
            &mapped,
            version,
            wheel,
            pin,
            &ctx.pins.source,
            &shadowed,
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_compat_paths() {
        // R580 (CUDA 13.0) runs a CUDA 12.6 torch natively.
        assert_eq!(
            driver_compat_verdict("580.159.03", 13000, "12.6").status,
            super::super::result::Status::Pass
        );
        // R550 (CUDA 12.4) runs 12.6 by minor-version compatibility.
        let r = driver_compat_verdict("550.54.15", 12040, "12.6");
        assert_eq!(r.status, super::super::result::Status::Pass);
        assert!(r.message.contains("minor-version"));
        // R470 (CUDA 11.4) cannot run 12.6.
        assert_eq!(
            driver_compat_verdict("470.82.01", 11040, "12.6").status,
            super::super::result::Status::Fail
        );
        // A 12.x driver older than 525.60.13 cannot use minor-version compatibility.
        assert_eq!(
            driver_compat_verdict("520.61.05", 12000, "12.6").status,
            super::super::result::Status::Fail
        );
        // torch 2.11's cu130 wheel on the H200 machine's R580 driver: native.
        assert_eq!(
            driver_compat_verdict("580.82.07", 13000, "13.0").status,
            super::super::result::Status::Pass
        );
        // A CUDA 13.2 torch on an R580 (CUDA 13.0) driver: minor-version compatibility.
        let r = driver_compat_verdict("580.82.07", 13000, "13.2");
        assert_eq!(r.status, super::super::result::Status::Pass, "{r:?}");
        assert!(r.message.contains("minor-version"));
        // An R575 (CUDA 12.9) driver cannot run CUDA 13.
        assert_eq!(
            driver_compat_verdict("575.57.08", 12090, "13.0").status,
            super::super::result::Status::Fail
        );
    }

    #[test]
    fn provenance_verdicts() {
        use super::super::result::Status;
        let p = vec![PathBuf::from("/w/nvidia/cudnn/lib/libcudnn.so.9")];
        let ok = loaded_verdict(
            LibKind::Cudnn,
            &p,
            Ok("9.5.1".into()),
            Some("9.5.1.17".into()),
            Some("9.5.1.17"),
            "pins",
            &[],
        );
        assert_eq!(ok.status, Status::Pass, "{ok:?}");
        let bad = loaded_verdict(
            LibKind::Cudnn,
            &p,
            Ok("9.1.0".into()),
            None,
            Some("9.5.1.17"),
            "pins",
            &[],
        );
        assert_eq!(bad.status, Status::Fail);
        let shadow = provenance::Shadowed {
            path: PathBuf::from("/usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0"),
            version: Some("9.1.0".into()),
        };
        let warn = loaded_verdict(
            LibKind::Cudnn,
            &p,
            Ok("9.5.1".into()),
            None,
            Some("9.5.1.17"),
            "pins",
            &[shadow],
        );
        assert_eq!(warn.status, Status::Warn);
        assert!(warn.message.contains("9.1.0"));
        // Measured on the H200 device: torch's cudart 13.0 (wheel 13.0.96)
        // over the toolkit's libcudart.so.13.0.96 is the same library.
        let cudart = [PathBuf::from("/venv/nvidia/cu13/lib/libcudart.so.13")];
        let same = provenance::Shadowed {
            path: PathBuf::from(
                "/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13.0.96",
            ),
            version: Some("13.0.96".into()),
        };
        let pass = loaded_verdict(
            LibKind::Cudart,
            &cudart,
            Ok("13.0".into()),
            Some("13.0.96".into()),
            Some("13.0.96"),
            "pins",
            std::slice::from_ref(&same),
        );
        assert_eq!(pass.status, Status::Pass, "{pass:?}");
        assert!(
            pass.message.contains("shadows the same version"),
            "{pass:?}"
        );
        // Beside an older copy it still warns, naming only the other version.
        let older = provenance::Shadowed {
            path: PathBuf::from("/usr/lib/libcudart.so.13.0.48"),
            version: Some("13.0.48".into()),
        };
        let warn = loaded_verdict(
            LibKind::Cudart,
            &cudart,
            Ok("13.0".into()),
            Some("13.0.96".into()),
            Some("13.0.96"),
            "pins",
            &[same, older],
        );
        assert_eq!(warn.status, Status::Warn, "{warn:?}");
        assert!(
            warn.message.contains("13.0.48") && !warn.message.contains("13.0.96"),
            "{warn:?}"
        );
        // An unknown version is not assumed to be the same.
        let unknown = provenance::Shadowed {
            path: PathBuf::from("/usr/lib/libcudart.so.13"),
            version: None,
        };
        let warn = loaded_verdict(
            LibKind::Cudart,
            &cudart,
            Ok("13.0".into()),
            Some("13.0.96".into()),
            None,
            "",
            &[unknown],
        );
        assert_eq!(warn.status, Status::Warn, "{warn:?}");
        let two = vec![p[0].clone(), PathBuf::from("/usr/lib/libcudnn.so.9")];
        assert_eq!(
            loaded_verdict(
                LibKind::Cudnn,
                &two,
                Ok("9.5.1".into()),
                None,
                None,
                "",
                &[]
            )
            .status,
            Status::Fail
        );
        assert_eq!(
            loaded_verdict(LibKind::Cudnn, &[], Err("x".into()), None, None, "", &[]).status,
            Status::Fail
        );
        assert_eq!(
            loaded_verdict(LibKind::Cudnn, &p, Err("boom".into()), None, None, "", &[]).status,
            Status::Error
        );
    }
}
