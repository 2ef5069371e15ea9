//! The NVML checks (`nvml.*`), in run order ([`checks`]), and the rule that
//! turns a failed NVML call into a result ([`from_err`]).
//!
//! The checks see NVML only through [`NvmlBackend`] (from the [`Context`]),
//! so every verdict path can be driven from a test. A call that NVML answers
//! with NotSupported (common on VMs, gVisor and consumer GPUs) becomes SKIP
//! with the reason, never PASS. Every threshold is printed next to the
//! measured value. This file must not import nvml-wrapper nor render output.
use crate::nvml::backend::{throttle_names, GpuProcess, NvmlErr};
use crate::verify::check::{CheckResult, FnCheck, Level, Scope};
use crate::verify::context::{Context, NvmlState};

/// Reasons that are benign (the issue: "anything beyond idle or the software
/// power cap is a WARN").
pub const BENIGN_THROTTLE: u64 = 0x1 | 0x4;

/// The NVML checks, in run order.
pub fn checks() -> Vec<FnCheck> {
    let node = |id, description, run| FnCheck {
        id,
        description,
        level: Level::Quick,
        scope: Scope::Node,
        needs_gpu: true,
        run,
    };
    let per_gpu = |id, description, run| FnCheck {
        id,
        description,
        level: Level::Quick,
        scope: Scope::PerGpu,
        needs_gpu: true,
        run,
    };
    vec![
        node(
            "nvml.driver",
            "NVML loads; driver and CUDA driver versions",
            check_driver,
        ),
        node(
            "nvml.device_count",
            "GPU count against {expect_gpus}; every GPU reachable",
            check_device_count,
        ),
        per_gpu(
            "nvml.identity",
            "name, UUID, PCI bus id, memory, compute capability",
            check_identity,
        ),
        per_gpu(
            "nvml.modes",
            "persistence, compute and MIG modes",
            check_modes,
        ),
        per_gpu("nvml.ecc", "ECC mode and uncorrectable errors", check_ecc),
        per_gpu(
            "nvml.retired_pages",
            "pages pending retirement (pre-Ampere)",
            check_retired_pages,
        ),
        per_gpu(
            "nvml.remapped_rows",
            "row remapping pending or failed (Ampere+)",
            check_remapped_rows,
        ),
        per_gpu(
            "nvml.temperature",
            "temperature against the slowdown threshold",
            check_temperature,
        ),
        per_gpu(
            "nvml.power",
            "power draw against the enforced limit",
            check_power,
        ),
        per_gpu(
            "nvml.throttle",
            "active clock-event (throttle) reasons",
            check_throttle,
        ),
        per_gpu(
            "nvml.pcie",
            "PCIe generation and width, current against max",
            check_pcie,
        ),
        per_gpu("nvml.nvlink", "NVLink link states", check_nvlink),
        node(
            "nvml.topology",
            "P2P and topology matrix between GPUs",
            check_topology,
        ),
        per_gpu(
            "nvml.processes",
            "processes holding the GPU",
            check_processes,
        ),
    ]
}

/// Turns a failed NVML call into a result: NotSupported => SKIP (with the
/// reason), GpuLost => FAIL, anything else => ERROR.
pub fn from_err(id: &str, what: &str, e: &NvmlErr) -> CheckResult {
    match e {
        NvmlErr::NotSupported(why) => {
            CheckResult::skip(id, format!("{what}: not supported here ({why})"))
        }
        NvmlErr::GpuLost => CheckResult::fail(
            id,
            format!("{what}: the GPU has fallen off the bus or is inaccessible"),
        )
        .hint("check `nvidia-smi` and dmesg for Xid 79; the node needs a GPU reset or a reboot"),
        NvmlErr::NoPermission => {
            CheckResult::error(id, format!("{what}: NVML refused (no permission)")).hint(
                "run as a user that may open /dev/nvidia*, or in a container started with the GPU",
            )
        }
        NvmlErr::Other(m) => CheckResult::error(id, format!("{what}: {m}")),
    }
}

macro_rules! nvml_or_return {
    ($ctx:expr, $id:expr) => {
        match $ctx.nvml_backend($id) {
            Ok(b) => b,
            Err(r) => return vec![*r],
        }
    };
}

macro_rules! tri {
    ($e:expr, $id:expr, $what:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return vec![from_err($id, $what, &e)],
        }
    };
}

/// Formats NVML's CUDA version encoding (12040 → "12.4").
pub fn fmt_cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

fn check_driver(ctx: &Context, _gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.driver";
    let nvml = match &ctx.nvml {
        NvmlState::Ready(b) => b.clone(),
        NvmlState::Hung(e) => {
            return vec![CheckResult::error(ID, e.to_string()).hint(format!(
                "the driver did not answer nvmlInit in time: check `nvidia-smi` and dmesg for Xid errors; raise {} if the system is merely slow",
                ctx.words.check_timeout
            ))];
        }
        NvmlState::Unavailable(e) => {
            return vec![if ctx.expect.allows_none() {
                CheckResult::skip(
                    ID,
                    format!("{e}; none expected ({} 0)", ctx.words.expect_gpus),
                )
            } else {
                CheckResult::fail(ID, e.to_string()).hint(format!(
                    "install the NVIDIA driver, or start the container with the GPU (`{} all`, NVIDIA Container Toolkit); on a CPU-only host pass {} 0",
                    ctx.words.docker_run_gpus, ctx.words.expect_gpus
                ))
            }];
        }
    };
    let driver = tri!(nvml.driver_version(), ID, "driver version");
    let cuda = tri!(nvml.cuda_driver_version(), ID, "CUDA driver version");
    vec![CheckResult::pass(
        ID,
        format!(
            "driver {driver}, supports CUDA up to {}",
            fmt_cuda_version(cuda)
        ),
    )
    .measured(format!("driver {driver} / CUDA {}", fmt_cuda_version(cuda)))]
}

fn check_device_count(ctx: &Context, _gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.device_count";
    let nvml = nvml_or_return!(ctx, ID);
    let count = tri!(nvml.device_count(), ID, "device count");
    let threshold = ctx.expect.describe();
    // A GPU NVML counts but cannot reach is missing for training purposes.
    let mut lost = Vec::new();
    for i in 0..count {
        if let Err(e) = nvml.uuid(i) {
            lost.push(format!("GPU {i}: {e}"));
        }
    }
    let reachable = count - lost.len() as u32;
    let mut r = if !lost.is_empty() {
        CheckResult::fail(ID, format!("{} of {count} GPUs unreachable: {}", lost.len(), lost.join("; ")))
            .hint("check `nvidia-smi` and dmesg for Xid errors; a GPU that fell off the bus needs a reset or reboot")
    } else if !ctx.expect.accepts(count) {
        CheckResult::fail(ID, format!("found {count} GPU(s), expected {threshold}")).hint(
            format!("a GPU may be missing (check `nvidia-smi -L`, dmesg), or the container was given fewer GPUs ({} / CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES)", ctx.words.gpus),
        )
    } else if count == 0 {
        CheckResult::skip(
            ID,
            format!("no GPU found; none expected ({} 0)", ctx.words.expect_gpus),
        )
    } else {
        CheckResult::pass(ID, format!("{count} GPU(s)"))
    };
    r = r
        .measured(format!("{reachable} GPU(s)"))
        .threshold(threshold)
        .value(reachable as f64, "GPUs");
    vec![r]
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn check_identity(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.identity";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let name = tri!(nvml.name(g), ID, "name");
    let uuid = tri!(nvml.uuid(g), ID, "UUID");
    let bus = tri!(nvml.pci_bus_id(g), ID, "PCI bus id");
    let mem = tri!(nvml.memory_total(g), ID, "memory");
    let (maj, min) = tri!(nvml.compute_capability(g), ID, "compute capability");
    vec![CheckResult::pass(ID, format!("{name} {uuid} at {bus}"))
        .measured(format!("{}, sm_{maj}{min}", gib(mem)))
        .fact("name", name)
        .fact("uuid", uuid)
        .fact("pci_bus_id", bus)]
}

fn check_modes(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.modes";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let compute = tri!(nvml.compute_mode(g), ID, "compute mode");
    let persistence = match nvml.persistence_mode(g) {
        Ok(true) => "on".to_string(),
        Ok(false) => "off".to_string(),
        Err(e) => format!("unknown ({e})"),
    };
    let mig = match nvml.mig_mode(g) {
        Ok((cur, pending)) => Some((cur, pending)),
        Err(NvmlErr::NotSupported(_)) => None, // pre-Ampere or consumer GPU: no MIG
        Err(e) => return vec![from_err(ID, "MIG mode", &e)],
    };
    let mig_text = match mig {
        None => "n/a".to_string(),
        Some((cur, pend)) if cur != pend => format!("{} (pending {})", onoff(cur), onoff(pend)),
        Some((cur, _)) => onoff(cur).to_string(),
    };
    let measured = format!("compute {compute}, persistence {persistence}, MIG {mig_text}");
    let r = if compute == "Prohibited" {
        CheckResult::fail(
            ID,
            "compute mode is Prohibited: no CUDA context can be created",
        )
        .hint("`nvidia-smi -i N -c DEFAULT` (as root)")
    } else if matches!(mig, Some((true, _))) {
        CheckResult::warn(ID, "MIG is enabled: CUDA sees MIG instances, not the whole GPU")
            .hint("disable MIG for whole-GPU training (`nvidia-smi -i N -mig 0`), or address instances by their MIG UUIDs")
    } else {
        CheckResult::pass(ID, "modes allow whole-GPU CUDA work")
    };
    vec![r
        .measured(measured)
        .threshold("compute not Prohibited, MIG off")]
}

fn onoff(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn check_ecc(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.ecc";
    let nvml = nvml_or_return!(ctx, ID);
    let ecc = tri!(nvml.ecc(gpu.unwrap_or(0)), ID, "ECC");
    let measured = format!(
        "ECC {}, {} uncorrectable (volatile), {} (aggregate)",
        onoff(ecc.enabled),
        ecc.uncorrected_volatile,
        ecc.uncorrected_aggregate
    );
    let r = if ecc.uncorrected_volatile > 0 {
        CheckResult::fail(ID, format!("{} uncorrectable ECC error(s) since the driver loaded", ecc.uncorrected_volatile))
            .hint("drain the node and reset the GPU (`nvidia-smi -r`); if errors return, the GPU needs replacing")
    } else if !ecc.enabled {
        CheckResult::warn(ID, "ECC is disabled: memory errors go undetected")
            .hint("enable ECC (`nvidia-smi -e 1`, then reboot)")
    } else if ecc.uncorrected_aggregate > 0 {
        CheckResult::warn(
            ID,
            format!(
                "{} uncorrectable ECC error(s) in the GPU's lifetime, none since the driver loaded",
                ecc.uncorrected_aggregate
            ),
        )
        .hint("watch this GPU: check remapped rows / retired pages")
    } else {
        CheckResult::pass(ID, "ECC on, no uncorrectable errors")
    };
    vec![r
        .measured(measured)
        .threshold("ECC on, 0 uncorrectable")
        .value(ecc.uncorrected_volatile as f64, "errors")]
}

fn check_retired_pages(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.retired_pages";
    let nvml = nvml_or_return!(ctx, ID);
    let p = tri!(nvml.retired_pages(gpu.unwrap_or(0)), ID, "retired pages");
    let measured = format!(
        "{} single-bit, {} double-bit retired, pending {}",
        p.single_bit,
        p.double_bit,
        if p.pending { "yes" } else { "no" }
    );
    let r = if p.pending {
        CheckResult::fail(
            ID,
            "pages are pending retirement: the GPU must be reset before it is reliable",
        )
        .hint("drain the node and reset the GPU (`nvidia-smi -r`) or reboot")
    } else {
        CheckResult::pass(ID, "no page retirement pending")
    };
    vec![r.measured(measured).threshold("none pending")]
}

fn check_remapped_rows(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.remapped_rows";
    let nvml = nvml_or_return!(ctx, ID);
    let rows = tri!(nvml.remapped_rows(gpu.unwrap_or(0)), ID, "remapped rows");
    let measured = format!(
        "{} correctable, {} uncorrectable remapped; pending {}, failed {}",
        rows.corrected,
        rows.uncorrected,
        if rows.pending { "yes" } else { "no" },
        if rows.failed { "yes" } else { "no" }
    );
    let r = if rows.failed {
        CheckResult::fail(ID, "a row remap failed: the GPU has no spare rows left")
            .hint("the GPU needs an RMA (NVIDIA's row-remapping guide)")
    } else if rows.pending {
        CheckResult::fail(ID, "a row remap is pending: reset the GPU before using it")
            .hint("drain the node and reset the GPU (`nvidia-smi -r`) or reboot")
    } else {
        CheckResult::pass(ID, "no remap pending or failed")
    };
    vec![r.measured(measured).threshold("none pending, none failed")]
}

fn check_temperature(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.temperature";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let t = tri!(nvml.temperature(g), ID, "temperature");
    let slow = match nvml.temperature_slowdown(g) {
        Ok(s) => s,
        // Some boards do not report the threshold: the temperature itself is
        // still worth showing, with no verdict on it.
        Err(NvmlErr::NotSupported(why)) => {
            return vec![CheckResult::skip(
                ID,
                format!("{t} °C; the slowdown threshold is not reported here ({why})"),
            )
            .measured(format!("{t} °C"))
            .value(t as f64, "°C")]
        }
        Err(e) => return vec![from_err(ID, "slowdown threshold", &e)],
    };
    // 10 °C of headroom: an idle GPU this close to slowdown will throttle under load.
    const MARGIN_C: u32 = 10;
    let r = if t >= slow {
        CheckResult::fail(ID, "at or above the hardware slowdown temperature")
            .hint("check cooling (fans, airflow, inlet temperature)")
    } else if t + MARGIN_C >= slow {
        CheckResult::warn(
            ID,
            format!("within {MARGIN_C} °C of the slowdown temperature"),
        )
        .hint("check cooling before a long run")
    } else {
        CheckResult::pass(ID, "well below slowdown")
    };
    vec![r
        .measured(format!("{t} °C"))
        .threshold(format!(
            "< {} °C (slowdown {slow} °C − {MARGIN_C})",
            slow.saturating_sub(MARGIN_C)
        ))
        .value(t as f64, "°C")]
}

fn check_power(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.power";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let draw = tri!(nvml.power_usage_mw(g), ID, "power draw");
    let limit = tri!(nvml.power_limit_mw(g), ID, "power limit");
    let default = nvml.power_limit_default_mw(g).ok();
    let w = |mw: u32| format!("{:.0} W", mw as f64 / 1000.0);
    let r = if draw >= limit {
        CheckResult::warn(ID, "drawing at the enforced power limit")
            .hint("clocks will be capped; check nvml.throttle")
    } else if let Some(d) = default.filter(|d| limit < *d) {
        CheckResult::warn(
            ID,
            format!("power limit lowered below the default {}", w(d)),
        )
        .hint("restore it with `nvidia-smi -i N -pl <default>` unless capped on purpose")
    } else {
        CheckResult::pass(ID, "below the enforced limit")
    };
    vec![r
        .measured(w(draw))
        .threshold(format!("< {} limit", w(limit)))
        .value(draw as f64 / 1000.0, "W")]
}

fn check_throttle(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.throttle";
    let nvml = nvml_or_return!(ctx, ID);
    let mask = tri!(
        nvml.throttle_reasons(gpu.unwrap_or(0)),
        ID,
        "clock-event reasons"
    );
    let names = throttle_names(mask);
    let measured = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    let bad = throttle_names(mask & !BENIGN_THROTTLE);
    let r = if bad.is_empty() {
        CheckResult::pass(ID, "no throttling beyond idle / software power cap")
    } else {
        CheckResult::warn(ID, format!("clocks held back: {}", bad.join(", "))).hint(
            "thermal or power-brake slowdown points at cooling or the power supply; applications clocks at `nvidia-smi -rac`",
        )
    };
    vec![r
        .measured(measured)
        .threshold("only gpu_idle / sw_power_cap")]
}

fn check_pcie(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.pcie";
    let nvml = nvml_or_return!(ctx, ID);
    let g = gpu.unwrap_or(0);
    let link = tri!(nvml.pcie_link(g), ID, "PCIe link");
    // An idle GPU lowers its link generation to save power (ASPM); a reduced
    // width is never a power-saving state.
    let idle = matches!(nvml.throttle_reasons(g), Ok(m) if m & 0x1 != 0);
    let measured = format!("Gen{} x{}", link.gen, link.width);
    let threshold = format!("Gen{} x{}", link.max_gen, link.max_width);
    let r = if link.width < link.max_width {
        CheckResult::warn(
            ID,
            format!("link trained at x{} of x{}", link.width, link.max_width),
        )
        .hint("reseat the GPU or riser; check the slot and BIOS PCIe settings")
    } else if link.gen < link.max_gen && !idle {
        CheckResult::warn(
            ID,
            format!("link at Gen{} of Gen{} while busy", link.gen, link.max_gen),
        )
        .hint("check BIOS PCIe speed settings and the riser")
    } else if link.gen < link.max_gen {
        CheckResult::pass(
            ID,
            format!("full width; Gen{} while idle (power saving)", link.gen),
        )
    } else {
        CheckResult::pass(ID, "link at full generation and width")
    };
    vec![r.measured(measured).threshold(threshold)]
}

fn check_nvlink(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.nvlink";
    let nvml = nvml_or_return!(ctx, ID);
    let states = tri!(nvml.nvlink_states(gpu.unwrap_or(0)), ID, "NVLink state");
    if states.is_empty() {
        return vec![CheckResult::skip(ID, "this GPU reports no NVLink links")];
    }
    let active = states.iter().filter(|a| **a).count();
    let down: Vec<String> = states
        .iter()
        .enumerate()
        .filter(|(_, a)| !**a)
        .map(|(i, _)| i.to_string())
        .collect();
    // With no peer GPU visible, inactive links have nothing to connect to;
    // with peers, every link down is an SXM fabric fault (or a PCIe card
    // without NVLink bridges): say so rather than skip it.
    let peers = nvml.device_count().map_or(0, |n| n.saturating_sub(1));
    let r = if active == 0 && peers == 0 {
        CheckResult::skip(
            ID,
            format!(
                "{} NVLink link(s), none active, and no peer GPU visible to link to",
                states.len()
            ),
        )
    } else if active == 0 {
        CheckResult::warn(
            ID,
            format!(
                "all {} NVLink links are down although {peers} peer GPU(s) are visible",
                states.len()
            ),
        )
        .hint("on SXM/HGX boards this is a fabric fault (check `nvidia-smi nvlink -s`, the fabric manager and dmesg); on PCIe cards without NVLink bridges it is expected")
    } else if !down.is_empty() {
        CheckResult::warn(ID, format!("link(s) {} down while {active} are up", down.join(",")))
            .hint("a down NVLink halves or worse P2P bandwidth; check `nvidia-smi nvlink -s` and the fabric manager")
    } else {
        CheckResult::pass(ID, "all links up")
    };
    vec![r
        .measured(format!("{active}/{} links active", states.len()))
        .threshold(format!("{}/{} active", states.len(), states.len()))]
}

fn check_topology(ctx: &Context, _gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.topology";
    let nvml = nvml_or_return!(ctx, ID);
    let n = tri!(nvml.device_count(), ID, "device count");
    if n < 2 {
        return vec![CheckResult::skip(
            ID,
            format!("{n} GPU(s): no pairs to check"),
        )];
    }
    let mut cells = Vec::new();
    let mut no_p2p = Vec::new();
    let mut ok_pairs = 0;
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            let topo = nvml.topology(a, b).unwrap_or_else(|e| format!("? ({e})"));
            match tri!(nvml.p2p_read(a, b), ID, "P2P status") {
                Ok(()) => {
                    ok_pairs += 1;
                    cells.push(format!("{a}->{b}:{topo}/p2p"));
                }
                Err(why) => {
                    no_p2p.push(format!("{a}->{b} ({why})"));
                    cells.push(format!("{a}->{b}:{topo}/no-p2p"));
                }
            }
        }
    }
    let r = if no_p2p.is_empty() {
        CheckResult::pass(
            ID,
            format!("P2P available between all {} ordered pairs", ok_pairs),
        )
    } else if ok_pairs > 0 {
        CheckResult::warn(ID, format!("P2P unavailable for some pairs: {}", no_p2p.join(", ")))
            .hint("mixed P2P usually means a GPU behind another PCIe root or a disabled NVLink; NCCL will route those pairs through host memory")
    } else {
        CheckResult::warn(ID, "no GPU pair supports P2P: NCCL will go through host memory")
            .hint("expected on PCIe cards behind different root complexes or VMs without P2P; slow for data-parallel training")
    };
    vec![r
        .measured(cells.join(" "))
        .threshold("P2P between all pairs")]
}

fn check_processes(ctx: &Context, gpu: Option<u32>) -> Vec<CheckResult> {
    const ID: &str = "nvml.processes";
    let nvml = nvml_or_return!(ctx, ID);
    let me = std::process::id();
    let procs = tri!(nvml.processes(gpu.unwrap_or(0)), ID, "processes");
    let others: Vec<&GpuProcess> = procs.iter().filter(|p| p.pid != me).collect();
    if others.is_empty() && ctx.in_container {
        // The driver lists only the processes of the caller's PID namespace:
        // other containers' jobs on this GPU are invisible from here.
        return vec![CheckResult::skip(
            ID,
            "no other process visible, but inside a container NVML lists only this container's processes",
        )
        .measured("0 processes visible")
        .hint(format!("run `{verify}` on the host (or `{verify} {image}` from it) to see every process", verify = ctx.words.verify, image = ctx.words.image))];
    }
    if others.is_empty() {
        return vec![CheckResult::pass(ID, "no other process holds this GPU")
            .measured("0 processes")
            .threshold("0 other processes")
            .value(0.0, "processes")];
    }
    let list: Vec<String> = others
        .iter()
        .map(|p| match p.used_bytes {
            Some(b) => format!("pid {} ({})", p.pid, gib(b)),
            None => format!("pid {}", p.pid),
        })
        .collect();
    vec![CheckResult::warn(ID, format!("held by {}", list.join(", ")))
        .measured(format!("{} processes", others.len()))
        .threshold("0 other processes")
        .value(others.len() as f64, "processes")
        .hint("another job shares this GPU: timings and memory will be off; `nvidia-smi` shows who")]
}
