//! Watching the run's GPUs while it trains: a thread ([`GpuWatch`]) reads
//! every few seconds, through the NVML seam ([`NvmlBackend`]), the
//! utilisation, memory, power, temperature, SM clock and throttle reasons of
//! the GPUs the ranks train on ([`GpuSample`]), keeps the latest reading for
//! the step logger and sums each GPU's readings for the summary
//! ([`GpuUsage`]).
//!
//! Rank 0 watches: every rank finds where its GPU sits on the PCI bus (the
//! CUDA runtime), the locations are gathered once at the start
//! ([`start_for_run`]), and rank 0 reads the GPUs of every rank when they
//! all run on its node (NVML sees only its own node's GPUs); on a multi-node
//! job it reads its own GPU only, and says so. CPU runs read nothing.
//!
//! NVML is loaded on the watch's own thread, so a missing or wedged driver
//! never holds up training; what the watch has to say once (what it reads,
//! or that there is no NVML here) waits in [`GpuWatch::notes`] for the loop
//! to pass on as events. Nothing here prints, judges a value or writes files.
use std::collections::BTreeMap;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::events::GpuLoad;
use crate::nvml::{throttle_names, NvmlBackend, RealNvml};

/// Where a GPU sits on the PCI bus: `(domain, bus, device)`.
pub type PciLocation = (u32, u32, u32);

/// One reading of one GPU; a field NVML did not answer is absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// NVML's index of the GPU (nvidia-smi's numbering, PCI order).
    pub index: u32,
    /// The rank that trains on it.
    pub rank: usize,
    /// Percent of NVML's last sample period in which a kernel ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_pct: Option<u32>,
    /// Memory in use on the GPU (every process and the driver's reserve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    /// The GPU's memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_bytes: Option<u64>,
    /// Power draw in watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    /// GPU temperature in °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<u32>,
    /// SM clock in MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
    /// Active clock-event (throttle) reasons, by NVML's names (`gpu_idle`,
    /// `sw_power_cap`, `hw_thermal_slowdown`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reasons: Option<Vec<String>>,
}

/// One GPU over the run, for the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuUsage {
    /// NVML's index of the GPU.
    pub index: u32,
    /// The rank that trained on it.
    pub rank: usize,
    /// Its product name (`NVIDIA H200`).
    pub name: Option<String>,
    /// Readings taken.
    pub samples: u64,
    /// Mean of the utilisation readings, percent.
    pub mean_utilization_pct: Option<f64>,
    /// The most memory any reading found in use.
    pub peak_memory_used_bytes: Option<u64>,
    /// The GPU's memory.
    pub memory_total_bytes: Option<u64>,
    /// The highest power reading, watts.
    pub peak_power_w: Option<f64>,
    /// The highest temperature reading, °C.
    pub max_temperature_c: Option<u32>,
    /// Readings in which each throttle reason was active.
    pub throttle_reasons: BTreeMap<String, u64>,
}

/// A GPU to read: the rank that trains on it and where it sits on the bus
/// (`None`: the rank's CUDA runtime could not say).
pub type Target = (usize, Option<PciLocation>);

/// What the loop and the thread share.
#[derive(Default)]
struct Shared {
    /// Readings taken so far (a new one has a higher count).
    taken: u64,
    /// The latest reading of every watched GPU.
    latest: Vec<GpuSample>,
    /// Lines to say once, not yet taken by [`GpuWatch::notes`].
    notes: Vec<String>,
    /// Each watched GPU's readings summed.
    usage: Vec<GpuUsage>,
    /// Utilisation readings per watched GPU (the mean's count).
    util_counts: Vec<u64>,
}

/// The watch of a run's GPUs: a thread reading them every `every`, until
/// [`GpuWatch::stop`] or drop.
pub struct GpuWatch {
    shared: Arc<Mutex<Shared>>,
    stop: Option<mpsc::Sender<()>>,
    /// The reading count [`GpuWatch::take_new`] last handed out.
    seen: u64,
}

/// Loads NVML for the watch: the backend, or why not in a few words.
pub type NvmlLoader = Box<dyn FnOnce() -> Result<Arc<dyn NvmlBackend>, String> + Send>;

/// The real NVML ([`RealNvml::load`]).
pub fn real_nvml() -> NvmlLoader {
    Box::new(|| {
        RealNvml::load()
            .map(|n| Arc::new(n) as Arc<dyn NvmlBackend>)
            .map_err(|e| e.to_string())
    })
}

impl GpuWatch {
    /// Starts the thread: it loads NVML with `load`, finds each target's GPU
    /// among NVML's by PCI location, then reads them at once and every
    /// `every`. `scope` ends the line that names what is read ("; ranks on
    /// other nodes are not watched").
    pub fn start(load: NvmlLoader, targets: Vec<Target>, every: Duration, scope: &str) -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let (stop, stopped) = mpsc::channel::<()>();
        let scope = scope.to_string();
        let thread_shared = shared.clone();
        // Detached: a wedged NVML call must not hold up the end of the run.
        let spawned = std::thread::Builder::new()
            .name("gpu-watch".into())
            .spawn(move || watch(load, targets, every, &scope, &thread_shared, &stopped));
        if let Err(e) = spawned {
            lock(&shared)
                .notes
                .push(format!("GPU watch: could not start its thread ({e})"));
        }
        Self {
            shared,
            stop: Some(stop),
            seen: 0,
        }
    }

    /// The lines the watch has to say once (taken: the next call has only newer ones).
    pub fn notes(&self) -> Vec<String> {
        std::mem::take(&mut lock(&self.shared).notes)
    }

    /// The latest reading when it is newer than the one handed out last.
    pub fn take_new(&mut self) -> Option<Vec<GpuSample>> {
        let s = lock(&self.shared);
        if s.taken == self.seen || s.latest.is_empty() {
            return None;
        }
        self.seen = s.taken;
        Some(s.latest.clone())
    }

    /// Stops reading (the thread ends after the reading in progress).
    pub fn stop(&mut self) {
        self.stop = None;
    }

    /// Every watched GPU's readings so far.
    pub fn usage(&self) -> Vec<GpuUsage> {
        lock(&self.shared).usage.clone()
    }
}

impl Drop for GpuWatch {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The lock, also after a panic on the other side (the data stays usable).
fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The thread's body: load, find the GPUs, say what is read, then read
/// until `stopped` has a message or its sender is gone.
fn watch(
    load: NvmlLoader,
    targets: Vec<Target>,
    every: Duration,
    scope: &str,
    shared: &Mutex<Shared>,
    stopped: &mpsc::Receiver<()>,
) {
    let nvml = match load() {
        Ok(n) => n,
        Err(why) => {
            lock(shared).notes.push(format!(
                "GPU watch: no NVML here ({why}); GPU utilisation and memory are not recorded"
            ));
            return;
        }
    };
    let (gpus, unmatched) = resolve(nvml.as_ref(), &targets);
    {
        let mut s = lock(shared);
        s.notes.extend(unmatched);
        if gpus.is_empty() {
            return;
        }
        s.notes
            .push(watching_line(nvml.as_ref(), &gpus, every, scope));
        s.usage = gpus
            .iter()
            .map(|&(index, rank)| GpuUsage {
                index,
                rank,
                name: nvml.name(index).ok(),
                samples: 0,
                mean_utilization_pct: None,
                peak_memory_used_bytes: None,
                memory_total_bytes: None,
                peak_power_w: None,
                max_temperature_c: None,
                throttle_reasons: BTreeMap::new(),
            })
            .collect();
        s.util_counts = vec![0; gpus.len()];
    }
    loop {
        let reading: Vec<GpuSample> = gpus
            .iter()
            .map(|&(index, rank)| read(nvml.as_ref(), index, rank))
            .collect();
        record(&mut lock(shared), reading);
        match stopped.recv_timeout(every) {
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            _ => return,
        }
    }
}

/// Each target's NVML index, with its rank, and a line for each target
/// that is not among NVML's GPUs.
fn resolve(nvml: &dyn NvmlBackend, targets: &[Target]) -> (Vec<(u32, usize)>, Vec<String>) {
    let count = nvml.device_count().unwrap_or(0);
    let locations: Vec<(u32, Option<PciLocation>)> = (0..count)
        .map(|i| {
            (
                i,
                nvml.pci_bus_id(i).ok().and_then(|b| parse_pci_bus_id(&b)),
            )
        })
        .collect();
    let mut found = Vec::new();
    let mut lines = Vec::new();
    for &(rank, at) in targets {
        let index = at.and_then(|at| {
            locations
                .iter()
                .find(|(_, l)| *l == Some(at))
                .map(|(i, _)| *i)
        });
        match (index, at) {
            (Some(i), _) => found.push((i, rank)),
            (None, Some((d, b, dev))) => lines.push(format!(
                "GPU watch: rank {rank}'s GPU ({d:04x}:{b:02x}:{dev:02x}) is not among the {count} GPU(s) NVML sees here; it is not watched"
            )),
            (None, None) => lines.push(format!(
                "GPU watch: the CUDA runtime of rank {rank} did not say where its GPU is; it is not watched"
            )),
        }
    }
    (found, lines)
}

/// `GPU watch: GPU 0 (NVIDIA H200) every 5 s` / `GPUs 0, 1 (NVIDIA H200) of
/// ranks 0, 1 every 5 s`, then `scope`.
fn watching_line(
    nvml: &dyn NvmlBackend,
    gpus: &[(u32, usize)],
    every: Duration,
    scope: &str,
) -> String {
    let mut names: Vec<String> = gpus
        .iter()
        .filter_map(|&(i, _)| nvml.name(i).ok())
        .collect();
    names.dedup();
    let list = |v: Vec<String>| v.join(", ");
    let indices = list(gpus.iter().map(|(i, _)| i.to_string()).collect());
    let names = if names.is_empty() {
        String::new()
    } else {
        format!(" ({})", list(names))
    };
    let what = if gpus.len() == 1 {
        format!("GPU {indices}{names}")
    } else {
        let ranks = list(gpus.iter().map(|(_, r)| r.to_string()).collect());
        format!("GPUs {indices}{names} of ranks {ranks}")
    };
    format!(
        "GPU watch: reading {what} every {} s into metrics.jsonl and TensorBoard{scope}",
        every.as_secs_f64()
    )
}

/// One reading of GPU `index`; a call that fails leaves its field empty.
fn read(nvml: &dyn NvmlBackend, index: u32, rank: usize) -> GpuSample {
    GpuSample {
        index,
        rank,
        utilization_pct: nvml.utilization_pct(index).ok(),
        memory_used_bytes: nvml.memory_used(index).ok(),
        memory_total_bytes: nvml.memory_total(index).ok(),
        power_w: nvml.power_usage_mw(index).ok().map(|mw| mw as f64 / 1000.0),
        temperature_c: nvml.temperature(index).ok(),
        sm_clock_mhz: nvml.sm_clock_mhz(index).ok(),
        throttle_reasons: nvml.throttle_reasons(index).ok().map(throttle_names),
    }
}

/// Keeps `reading` as the latest and adds it to each GPU's sums.
fn record(s: &mut Shared, reading: Vec<GpuSample>) {
    for (i, r) in reading.iter().enumerate() {
        let (Some(u), Some(n)) = (s.usage.get_mut(i), s.util_counts.get_mut(i)) else {
            continue;
        };
        u.samples += 1;
        if let Some(pct) = r.utilization_pct {
            let sum = u.mean_utilization_pct.unwrap_or(0.0) * *n as f64 + pct as f64;
            *n += 1;
            u.mean_utilization_pct = Some(sum / *n as f64);
        }
        u.peak_memory_used_bytes = u.peak_memory_used_bytes.max(r.memory_used_bytes);
        u.memory_total_bytes = r.memory_total_bytes.or(u.memory_total_bytes);
        u.peak_power_w = match (u.peak_power_w, r.power_w) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        u.max_temperature_c = u.max_temperature_c.max(r.temperature_c);
        for reason in r.throttle_reasons.iter().flatten() {
            *u.throttle_reasons.entry(reason.clone()).or_default() += 1;
        }
    }
    s.taken += 1;
    s.latest = reading;
}

/// `00000000:18:00.0` (NVML) or `0000:18:00.0` as `(domain, bus, device)`.
pub fn parse_pci_bus_id(id: &str) -> Option<PciLocation> {
    let mut parts = id.trim().split(':');
    let (domain, bus, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let device = rest.split('.').next()?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some((hex(domain)?, hex(bus)?, hex(device)?))
}

/// What the progress line shows of a reading: the mean utilisation of the
/// GPUs and the memory of the fullest one (`None` for no reading).
pub fn load_of(reading: &[GpuSample]) -> Option<GpuLoad> {
    if reading.is_empty() {
        return None;
    }
    let utils: Vec<f64> = reading
        .iter()
        .filter_map(|s| s.utilization_pct.map(f64::from))
        .collect();
    let fullest = reading
        .iter()
        .filter(|s| s.memory_used_bytes.is_some())
        .max_by_key(|s| s.memory_used_bytes);
    Some(GpuLoad {
        gpus: reading.len(),
        utilization_pct: (!utils.is_empty())
            .then(|| utils.iter().sum::<f64>() / utils.len() as f64),
        memory_used_bytes: fullest.and_then(|s| s.memory_used_bytes),
        memory_total_bytes: fullest.and_then(|s| s.memory_total_bytes),
    })
}

/// Every rank's PCI location gathered on every rank through `mean` (an
/// all-reduce mean that every rank calls once, with the same length): rank
/// `r` fills slots `2r` and `2r + 1`, the others leave them 0, so the mean
/// times the world is the gathered value. Values stay below 2^17, exact in
/// the f32 the collectives carry.
pub fn gather_locations(
    own: Option<PciLocation>,
    rank: usize,
    world: usize,
    mean: &mut dyn FnMut(&mut [f64]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Target>> {
    let mut slots = vec![0.0; 2 * world];
    if let Some((domain, bus, device)) = own {
        // Domains are 16 bits (PCI), buses 8, devices 5.
        slots[2 * rank] = (domain & 0xffff) as f64 + 1.0;
        slots[2 * rank + 1] = ((bus & 0xff) * 32 + (device & 0x1f)) as f64;
    }
    mean(&mut slots)?;
    Ok((0..world)
        .map(|r| {
            let d = (slots[2 * r] * world as f64).round() as u32;
            let bd = (slots[2 * r + 1] * world as f64).round() as u32;
            (r, (d > 0).then(|| (d - 1, bd / 32, bd % 32)))
        })
        .collect())
}

/// The watch of a training run, on rank 0 of a CUDA run whose
/// `training.gpu_sample_every_s` is positive (`None` otherwise). Every rank
/// of such a run must call it: with more than one rank the GPUs' PCI
/// locations are gathered through `mean` ([`gather_locations`]).
pub fn start_for_run(
    device: tch::Device,
    every_s: f64,
    rank: usize,
    world: usize,
    mean: &mut dyn FnMut(&mut [f64]) -> anyhow::Result<()>,
) -> anyhow::Result<Option<GpuWatch>> {
    let tch::Device::Cuda(ordinal) = device else {
        return Ok(None);
    };
    if every_s <= 0.0 || !every_s.is_finite() {
        return Ok(None);
    }
    let own = crate::sys::cudart::CudaRuntime::locate()
        .ok()
        .and_then(|rt| rt.pci_location(ordinal));
    let all = if world > 1 {
        gather_locations(own, rank, world, mean)?
    } else {
        vec![(0, own)]
    };
    if rank != 0 {
        return Ok(None);
    }
    let launch = crate::world::launch::LaunchInfo::from_process_env().ok();
    let one_node = world == 1 || launch.is_some_and(|l| l.local_world_size == l.world_size);
    let (targets, scope) = if one_node {
        (all, "")
    } else {
        (
            vec![(0, own)],
            "; the other ranks' GPUs are on other nodes, not watched",
        )
    };
    Ok(Some(GpuWatch::start(
        real_nvml(),
        targets,
        Duration::from_secs_f64(every_s),
        scope,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::{fake, FakeNvml, NvmlErr};

    fn fake_loader(f: FakeNvml) -> NvmlLoader {
        Box::new(move || Ok(fake(f)))
    }

    /// Waits (up to 10 s) for a reading newer than the last one taken.
    fn next(w: &mut GpuWatch) -> Vec<GpuSample> {
        for _ in 0..1000 {
            if let Some(r) = w.take_new() {
                return r;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("no reading within 10 s");
    }

    fn busy_h200s() -> FakeNvml {
        let mut f = FakeNvml::healthy(2);
        for (i, g) in f.gpus.iter_mut().enumerate() {
            g.utilization = Ok(90 + i as u32 * 8);
            g.memory_used = Ok((60 + i as u64) << 30);
            g.power_mw = 612_345;
            g.temperature = 71;
            g.sm_clock_mhz = Ok(1980);
            g.throttle = Ok(0x4);
        }
        f
    }

    #[test]
    fn reads_each_ranks_gpu_by_pci_location_and_sums_them() {
        // Rank 0 trains on NVML's GPU 1, rank 1 on GPU 0 (CUDA_VISIBLE_DEVICES=1,0).
        let targets = vec![(0, Some((0, 0x19, 0))), (1, Some((0, 0x18, 0)))];
        let mut w = GpuWatch::start(
            fake_loader(busy_h200s()),
            targets,
            Duration::from_millis(20),
            "",
        );
        let first = next(&mut w);
        assert_eq!(first.len(), 2);
        assert_eq!((first[0].index, first[0].rank), (1, 0));
        assert_eq!((first[1].index, first[1].rank), (0, 1));
        let s = &first[0];
        assert_eq!(s.utilization_pct, Some(98));
        assert_eq!(s.memory_used_bytes, Some(61 << 30));
        assert_eq!(s.memory_total_bytes, Some(150_754_820_096));
        assert_eq!(s.power_w, Some(612.345));
        assert_eq!(s.temperature_c, Some(71));
        assert_eq!(s.sm_clock_mhz, Some(1980));
        assert_eq!(s.throttle_reasons, Some(vec!["sw_power_cap".to_string()]));
        // A later reading is new again; none is handed out twice.
        let _ = next(&mut w);
        w.stop();
        std::thread::sleep(Duration::from_millis(50));
        let _ = w.take_new();
        assert_eq!(w.take_new(), None);
        let notes = w.notes();
        assert_eq!(
            notes,
            ["GPU watch: reading GPUs 1, 0 (NVIDIA H200) of ranks 0, 1 every 0.02 s into metrics.jsonl and TensorBoard"]
        );
        assert!(w.notes().is_empty(), "said once");
        let usage = w.usage();
        assert_eq!(usage.len(), 2);
        let u = &usage[0];
        assert!(u.samples >= 2, "{u:?}");
        assert_eq!(u.mean_utilization_pct, Some(98.0));
        assert_eq!(u.peak_memory_used_bytes, Some(61 << 30));
        assert_eq!(u.name.as_deref(), Some("NVIDIA H200"));
        assert_eq!(u.max_temperature_c, Some(71));
        assert_eq!(u.throttle_reasons.get("sw_power_cap"), Some(&u.samples));
    }

    #[test]
    fn without_nvml_it_says_so_once_and_reads_nothing() {
        let load: NvmlLoader =
            Box::new(|| Err("no NVIDIA driver: libnvidia-ml.so.1 not found".to_string()));
        let mut w = GpuWatch::start(
            load,
            vec![(0, Some((0, 0x18, 0)))],
            Duration::from_millis(5),
            "",
        );
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(
            w.notes(),
            ["GPU watch: no NVML here (no NVIDIA driver: libnvidia-ml.so.1 not found); GPU utilisation and memory are not recorded"]
        );
        assert!(w.notes().is_empty());
        assert_eq!(w.take_new(), None);
        assert!(w.usage().is_empty());
    }

    #[test]
    fn a_gpu_nvml_does_not_see_is_named_and_unanswered_calls_leave_gaps() {
        let mut f = FakeNvml::healthy(1);
        f.gpus[0].utilization = Err(NvmlErr::NotSupported("NVML_ERROR_NOT_SUPPORTED".into()));
        f.gpus[0].sm_clock_mhz = Err(NvmlErr::NoPermission);
        let targets = vec![(0, Some((0, 0x18, 0))), (1, Some((0, 0x3b, 0))), (2, None)];
        let mut w = GpuWatch::start(fake_loader(f), targets, Duration::from_secs(60), "; scope");
        let r = next(&mut w);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].utilization_pct, None);
        assert_eq!(r[0].sm_clock_mhz, None);
        assert_eq!(r[0].temperature_c, Some(34));
        let notes = w.notes();
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(
            notes[0].contains("rank 1's GPU (0000:3b:00) is not among the 1 GPU(s)"),
            "{notes:?}"
        );
        assert!(notes[1].contains("rank 2 did not say"), "{notes:?}");
        assert!(notes[2].starts_with("GPU watch: reading GPU 0 (NVIDIA H200) every 60 s"));
        assert!(notes[2].ends_with("TensorBoard; scope"), "{notes:?}");
        assert_eq!(load_of(&r).unwrap().utilization_pct, None);
        assert_eq!(w.usage()[0].mean_utilization_pct, None);
    }

    #[test]
    fn a_wedged_nvml_call_holds_up_nothing() {
        let mut f = FakeNvml::healthy(1);
        f.hang_on = Some("utilization_pct");
        let mut w = GpuWatch::start(
            fake_loader(f),
            vec![(0, Some((0, 0x18, 0)))],
            Duration::from_millis(5),
            "",
        );
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(w.take_new(), None);
        assert_eq!(w.usage()[0].samples, 0);
        drop(w);
    }

    #[test]
    fn pci_bus_ids_parse_in_both_spellings() {
        assert_eq!(parse_pci_bus_id("00000000:18:00.0"), Some((0, 0x18, 0)));
        assert_eq!(parse_pci_bus_id("0001:DB:1f.0"), Some((1, 0xdb, 0x1f)));
        assert_eq!(parse_pci_bus_id("18:00.0"), None);
        assert_eq!(parse_pci_bus_id("x:18:00.0"), None);
    }

    #[test]
    fn locations_gather_through_a_mean() {
        // Three ranks, a mean as the collectives compute it (in f32).
        let world = 3;
        let owns = [Some((0, 0x18, 0)), None, Some((0xffff, 0xdb, 0x1f))];
        let mut contributions = Vec::new();
        for (rank, own) in owns.iter().enumerate() {
            let mut capture = |v: &mut [f64]| {
                contributions.push(v.to_vec());
                Ok(())
            };
            gather_locations(*own, rank, world, &mut capture).unwrap();
        }
        let mean: Vec<f64> = (0..2 * world)
            .map(|i| (contributions.iter().map(|c| c[i]).sum::<f64>() as f32 / world as f32) as f64)
            .collect();
        let mut reduce = |v: &mut [f64]| {
            v.copy_from_slice(&mean);
            Ok(())
        };
        let all = gather_locations(owns[1], 1, world, &mut reduce).unwrap();
        assert_eq!(all, vec![(0, owns[0]), (1, None), (2, owns[2])]);
    }

    #[test]
    fn the_progress_view_is_the_mean_utilisation_and_the_fullest_gpu() {
        let s = |index, util, used| GpuSample {
            index,
            rank: index as usize,
            utilization_pct: Some(util),
            memory_used_bytes: Some(used),
            memory_total_bytes: Some(100),
            power_w: None,
            temperature_c: None,
            sm_clock_mhz: None,
            throttle_reasons: None,
        };
        let load = load_of(&[s(0, 90, 40), s(1, 100, 60)]).unwrap();
        assert_eq!(load.gpus, 2);
        assert_eq!(load.utilization_pct, Some(95.0));
        assert_eq!(load.memory_used_bytes, Some(60));
        assert_eq!(load.memory_total_bytes, Some(100));
        assert_eq!(load_of(&[]), None);
    }

    /// From the seam to the files: readings of the fake NVML attached to the
    /// steps that saw a new one, in metrics.jsonl (read back, old lines
    /// without readings too), TensorBoard and loss.png's fourth panel.
    #[test]
    fn readings_reach_the_metrics_tensorboard_and_the_curves() {
        use crate::train::metrics::{read_jsonl, MetricsWriter, StepRecord};
        let dir = tempfile::tempdir().unwrap();
        let mut w = GpuWatch::start(
            fake_loader(busy_h200s()),
            vec![(0, Some((0, 0x18, 0)))],
            Duration::from_millis(5),
            "",
        );
        let mut m = MetricsWriter::open(dir.path(), None).unwrap();
        let mut with_readings = 0;
        for step in 1..=6u64 {
            // Every other step waits for a reading, as a slow step would.
            let gpus = if step % 2 == 0 {
                next(&mut w)
            } else {
                Vec::new()
            };
            with_readings += usize::from(!gpus.is_empty());
            m.record(&StepRecord {
                step,
                loss: 1.0 / step as f64,
                lr: 1e-4,
                grad_norm: 0.5,
                loss_scale: 1.0,
                img_per_s: 10.0,
                skipped: false,
                gpus,
            })
            .unwrap();
        }
        m.flush().unwrap();
        let text = std::fs::read_to_string(m.jsonl_path()).unwrap();
        assert!(
            text.lines().next().is_some_and(|l| !l.contains("gpus")),
            "{text}"
        );
        assert!(
            text.contains(r#""gpus":[{"index":0,"rank":0,"utilization_pct":90,"#),
            "{text}"
        );
        let back = read_jsonl(m.jsonl_path()).unwrap();
        assert_eq!(
            back.iter().filter(|r| !r.gpus.is_empty()).count(),
            with_readings
        );
        assert_eq!(with_readings, 3);
        // A line written before readings existed still reads.
        let old: StepRecord = serde_json::from_str(
            r#"{"step":1,"loss":0.5,"lr":0.0001,"grad_norm":0.5,"loss_scale":1.0,"img_per_s":9.0,"skipped":false}"#,
        )
        .unwrap();
        assert!(old.gpus.is_empty());
        let events = std::fs::read(m.tb_path()).unwrap();
        for tag in [
            "gpu0/utilization_pct",
            "gpu0/memory_used_gib",
            "gpu0/power_w",
            "gpu0/temperature_c",
            "gpu0/sm_clock_mhz",
        ] {
            assert!(
                events.windows(tag.len()).any(|win| win == tag.as_bytes()),
                "{tag} not in the event file"
            );
        }
        let png = crate::train::curves::redraw(dir.path()).unwrap();
        assert_eq!(image::open(png).unwrap().height(), 34 + 4 * 250);
    }
}
