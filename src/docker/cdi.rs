//! How a GPU request reaches the engine: the NVIDIA runtime's device request
//! (driver `nvidia`, as `docker run --gpus` sends) or CDI device names
//! (driver `cdi`, `nvidia.com/gpu=0`), which Docker 25 (API 1.44) and later
//! take when its `cdi` feature is on, and which name whatever a CDI spec in
//! the engine's spec folders (`/etc/cdi`, `/var/run/cdi`) describes.
//!
//! `auto` picks CDI where the engine lists a CDI device of the kind among
//! its discovered devices (`/info`'s `DiscoveredDevices`, Docker 28.3 on),
//! else the runtime: an engine that has CDI on but no spec for the GPUs keeps
//! working as it did. Podman 4.3's compatible API takes neither (it drops
//! `DeviceRequests` and reads a `Devices` entry as a host path), so on Podman
//! GPUs are CDI names sent through libpod's own create ([`super::libpod`]):
//! `auto` is CDI there, and the runtime's request is refused before anything
//! is sent (Podman has no NVIDIA runtime hook behind its API). The kind is
//! `nvidia.com/gpu` unless `IMGCTL_CDI_KIND` names another (another
//! vendor's, a test's).
//!
//! Part: the shared floor (`docs/architecture.md`).
use bollard::models::DeviceRequest;
use serde::Serialize;

use crate::env_vars::IMGCTL_CDI_KIND;
use crate::gpus::{GpuId, GpuSelection};

/// The Engine API device request for `gpus`: driver `nvidia`, capabilities
/// `[["gpu"]]`, with count −1 (all), N, or the device ids, indices and UUIDs
/// alike (as the docker CLI sends for `--gpus`).
pub fn device_request(gpus: &GpuSelection) -> DeviceRequest {
    let (count, device_ids) = match gpus {
        GpuSelection::All => (Some(-1), None),
        GpuSelection::Count(n) => (Some(i64::from(*n)), None),
        GpuSelection::Devices(ids) => (None, Some(ids.iter().map(GpuId::to_string).collect())),
    };
    DeviceRequest {
        driver: Some("nvidia".into()),
        count,
        device_ids,
        capabilities: Some(vec![vec!["gpu".into()]]),
        options: None,
    }
}

/// Why the NVIDIA runtime's request goes nowhere on Podman (measured on
/// Podman 4.3.1: its compatible container create drops `DeviceRequests`
/// without a word, and libpod's create has no device request at all; GPUs
/// reach its containers as CDI device names only).
pub const PODMAN_HAS_NO_RUNTIME_HOOK: &str = "Podman has no NVIDIA runtime hook through its API (its compatible create drops the runtime's device request): GPUs reach its containers by CDI device names only";

/// The engine refused the GPU request, or imgctl knew it would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRequestRejected {
    /// Which refusal it is: what the user can do differs.
    pub refusal: Refusal,
    /// Its words: the engine's, or imgctl's where nothing was sent.
    pub why: String,
}

/// Why GPUs could not be given, by what the user can do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The engine cannot serve the NVIDIA runtime's request (no NVIDIA
    /// Container Toolkit, or its runtime is not configured).
    NoRuntime,
    /// CDI names that no spec on the engine's host knows
    /// (`nvidia-ctk cdi generate` makes one).
    NoCdiSpec,
    /// CDI asked of an engine that cannot take it (its API is older than
    /// 1.44, or CDI is off).
    NoCdi,
    /// The runtime's request asked of Podman, which has no runtime hook
    /// behind its API ([`PODMAN_HAS_NO_RUNTIME_HOOK`]).
    RuntimeOnPodman,
}

impl GpuRequestRejected {
    /// A refusal of kind `refusal` in the words `why`.
    pub fn new(refusal: Refusal, why: impl Into<String>) -> Self {
        Self {
            refusal,
            why: why.into(),
        }
    }
}

impl std::fmt::Display for GpuRequestRejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the engine cannot give the container GPUs: {}", self.why)
    }
}

impl std::error::Error for GpuRequestRejected {}

/// The CDI kind of NVIDIA's GPUs (what `nvidia-ctk cdi generate` writes).
pub const NVIDIA_KIND: &str = "nvidia.com/gpu";

/// The first API version whose device requests take the `cdi` driver
/// (Docker 25.0's API, where CDI came in behind the `cdi` feature).
const CDI_MIN_API: (u32, u32) = (1, 44);

/// How GPUs are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuApi {
    /// CDI where the engine lists CDI devices of the kind, else the runtime.
    #[default]
    Auto,
    /// CDI device names (driver `cdi`).
    Cdi,
    /// The NVIDIA runtime's device request (driver `nvidia`).
    Runtime,
}

impl std::fmt::Display for GpuApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GpuApi::Auto => "auto",
            GpuApi::Cdi => "cdi",
            GpuApi::Runtime => "runtime",
        })
    }
}

/// The CDI kind GPUs are named by: `IMGCTL_CDI_KIND`, else [`NVIDIA_KIND`].
pub fn cdi_kind() -> String {
    std::env::var(IMGCTL_CDI_KIND)
        .ok()
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| NVIDIA_KIND.to_string())
}

/// The CDI names of `gpus` in `kind`: `KIND=all`, `KIND=0`…`KIND=N-1`, or
/// each index or UUID (`nvidia-ctk cdi generate` names both).
pub fn cdi_names(gpus: &GpuSelection, kind: &str) -> Vec<String> {
    match gpus {
        GpuSelection::All => vec![format!("{kind}=all")],
        GpuSelection::Count(n) => (0..*n).map(|i| format!("{kind}={i}")).collect(),
        GpuSelection::Devices(ids) => ids
            .iter()
            .map(|id: &GpuId| format!("{kind}={id}"))
            .collect(),
    }
}

/// The device request of CDI names (driver `cdi`).
pub fn cdi_request(names: Vec<String>) -> DeviceRequest {
    DeviceRequest {
        driver: Some("cdi".into()),
        device_ids: Some(names),
        ..Default::default()
    }
}

/// What the engine said about itself, as far as the choice needs it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CdiFacts {
    /// Podman (whose compatible API takes no GPU request).
    pub podman: bool,
    /// The API version in use.
    pub api: (u32, u32),
    /// The engine's CDI spec folders (empty: CDI is off, or an engine
    /// too old to say).
    pub spec_dirs: Vec<String>,
    /// The CDI devices the engine lists (None: it lists none, before 28.3).
    pub devices: Option<Vec<String>>,
}

/// How GPUs go to the engine: the request, which way was used, and whether
/// it goes through libpod's create (Podman) rather than the compatible one.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRequest {
    /// The device request (driver `nvidia` or `cdi`).
    pub request: DeviceRequest,
    /// Which way: [`GpuApi::Cdi`] or [`GpuApi::Runtime`].
    pub api: GpuApi,
    /// Whether the container must be made by libpod's create
    /// ([`super::libpod`]): Podman, whose compatible create drops it.
    pub libpod: bool,
}

/// Decides how `gpus` are asked for (pure): the request, which way was
/// used, or why the engine cannot take them.
pub fn decide(
    gpus: &GpuSelection,
    api: GpuApi,
    facts: &CdiFacts,
    kind: &str,
) -> Result<GpuRequest, GpuRequestRejected> {
    let names = cdi_names(gpus, kind);
    let compat = |(request, api): (DeviceRequest, GpuApi)| GpuRequest {
        request,
        api,
        libpod: false,
    };
    if facts.podman {
        // CDI names through libpod's create, whether asked for or `auto`;
        // a name no spec knows is refused by Podman at start.
        return match api {
            GpuApi::Runtime => Err(GpuRequestRejected::new(
                Refusal::RuntimeOnPodman,
                PODMAN_HAS_NO_RUNTIME_HOOK,
            )),
            GpuApi::Auto | GpuApi::Cdi => Ok(GpuRequest {
                request: cdi_request(names),
                api: GpuApi::Cdi,
                libpod: true,
            }),
        };
    }
    decide_docker(names, gpus, api, facts, kind).map(compat)
}

/// [`decide`] for a Docker engine, whose compatible create takes both.
fn decide_docker(
    names: Vec<String>,
    gpus: &GpuSelection,
    api: GpuApi,
    facts: &CdiFacts,
    kind: &str,
) -> Result<(DeviceRequest, GpuApi), GpuRequestRejected> {
    let listed = |devices: &[String]| {
        names.iter().all(|n| {
            let all = n.ends_with("=all");
            devices
                .iter()
                .any(|d| d == n || (all && d.starts_with(&format!("{kind}="))))
        })
    };
    match api {
        GpuApi::Runtime => Ok((device_request(gpus), GpuApi::Runtime)),
        GpuApi::Auto => match &facts.devices {
            Some(devices) if facts.api >= CDI_MIN_API && listed(devices) => {
                Ok((cdi_request(names), GpuApi::Cdi))
            }
            _ => Ok((device_request(gpus), GpuApi::Runtime)),
        },
        GpuApi::Cdi => {
            let (major, minor) = facts.api;
            if facts.api < CDI_MIN_API {
                return Err(GpuRequestRejected::new(Refusal::NoCdi, format!(
                    "this engine speaks API {major}.{minor}, and CDI device requests need 1.44 (Docker 25) or later"
                )));
            }
            if facts.spec_dirs.is_empty() {
                return Err(GpuRequestRejected::new(
                    Refusal::NoCdi,
                    "the engine has CDI off (no CDI spec folders); start dockerd with \"features\": {\"cdi\": true} in daemon.json".to_string(),
                ));
            }
            // Sent even where the engine does not list the names: its list
            // may lag a spec written a moment ago; the engine's own refusal
            // ("unresolvable CDI devices") gets the words of `no_spec`.
            Ok((cdi_request(names), GpuApi::Cdi))
        }
    }
}

/// The words for an engine's refusal `message` of CDI names it found no
/// spec for: how to make one.
pub fn no_spec(message: &str, kind: &str) -> String {
    format!(
        "{message} (no CDI spec for {kind} names them; make one with `nvidia-ctk cdi generate` (into /etc/cdi/nvidia.yaml, on a host with the NVIDIA driver))"
    )
}

/// Whether an engine's error says CDI devices were not found
/// (`unresolvable CDI devices nvidia.com/gpu=all`).
pub fn is_unresolvable(message: &str) -> bool {
    message
        .to_ascii_lowercase()
        .contains("unresolvable cdi devices")
}

/// Asks the engine what [`decide`] needs and decides; None when no GPUs
/// are asked for.
pub async fn gpu_request(
    docker: &bollard::Docker,
    gpus: Option<&GpuSelection>,
    api: GpuApi,
) -> Result<Option<GpuRequest>, GpuRequestRejected> {
    let Some(gpus) = gpus else {
        return Ok(None);
    };
    let podman = docker.version().await.ok().is_some_and(|v| {
        v.components
            .iter()
            .flatten()
            .any(|c| c.name.to_ascii_lowercase().contains("podman"))
    });
    let client = docker.client_version();
    let mut facts = CdiFacts {
        podman,
        api: (client.major_version as u32, client.minor_version as u32),
        ..Default::default()
    };
    if !podman && api != GpuApi::Runtime {
        if let Ok(info) = docker.info().await {
            facts.spec_dirs = info.cdi_spec_dirs.unwrap_or_default();
            // CDI's ids are `vendor/class=name`, whatever driver lists them.
            facts.devices = info
                .discovered_devices
                .map(|devices| devices.into_iter().filter_map(|d| d.id).collect());
        }
    }
    decide(gpus, api, &facts, &cdi_kind()).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docker28(devices: Option<&[&str]>) -> CdiFacts {
        CdiFacts {
            podman: false,
            api: (1, 51),
            spec_dirs: vec!["/etc/cdi".into(), "/var/run/cdi".into()],
            devices: devices.map(|d| d.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn gpus_map_to_cdi_names() {
        let names = |s: &str| cdi_names(&GpuSelection::parse(s).unwrap(), NVIDIA_KIND);
        assert_eq!(names("all"), ["nvidia.com/gpu=all"]);
        assert_eq!(names("2"), ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]);
        assert_eq!(
            names("device=1,3"),
            ["nvidia.com/gpu=1", "nvidia.com/gpu=3"]
        );
        let request = cdi_request(names("all"));
        assert_eq!(request.driver.as_deref(), Some("cdi"));
        assert_eq!(request.count, None);
        assert_eq!(request.capabilities, None);
    }

    #[test]
    fn auto_takes_cdi_only_where_the_engine_lists_the_devices() {
        let all = GpuSelection::All;
        let kind = NVIDIA_KIND;
        let way = |facts: &CdiFacts| decide(&all, GpuApi::Auto, facts, kind).unwrap().api;
        assert_eq!(way(&docker28(Some(&["nvidia.com/gpu=0"]))), GpuApi::Cdi);
        assert_eq!(way(&docker28(Some(&["other.com/gpu=0"]))), GpuApi::Runtime);
        assert_eq!(way(&docker28(None)), GpuApi::Runtime);
        let docker20 = CdiFacts {
            api: (1, 41),
            ..docker28(Some(&["nvidia.com/gpu=0"]))
        };
        assert_eq!(way(&docker20), GpuApi::Runtime);
    }

    #[test]
    fn podman_takes_cdi_names_through_libpod_and_refuses_the_runtime() {
        // Podman 4.3's compatible API says 1.41 and lists no CDI devices.
        let podman = CdiFacts {
            podman: true,
            api: (1, 41),
            ..Default::default()
        };
        let two = GpuSelection::parse("device=0,1").unwrap();
        for api in [GpuApi::Auto, GpuApi::Cdi] {
            let asked = decide(&two, api, &podman, NVIDIA_KIND).unwrap();
            assert_eq!(asked.api, GpuApi::Cdi, "{api}");
            assert!(asked.libpod, "{api}");
            assert_eq!(asked.request.driver.as_deref(), Some("cdi"));
            assert_eq!(
                asked.request.device_ids.unwrap(),
                ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
            );
        }
        let err = decide(&two, GpuApi::Runtime, &podman, NVIDIA_KIND).unwrap_err();
        assert_eq!(
            err,
            GpuRequestRejected::new(Refusal::RuntimeOnPodman, PODMAN_HAS_NO_RUNTIME_HOOK)
        );
    }

    #[test]
    fn cdi_asked_for_says_why_it_cannot_be() {
        let why = |facts: &CdiFacts| {
            let err = decide(&GpuSelection::All, GpuApi::Cdi, facts, NVIDIA_KIND).unwrap_err();
            assert_eq!(err.refusal, Refusal::NoCdi);
            err.why
        };
        let old = CdiFacts {
            api: (1, 41),
            ..docker28(None)
        };
        assert!(why(&old).contains("need 1.44 (Docker 25) or later"));
        let off = CdiFacts {
            spec_dirs: vec![],
            ..docker28(None)
        };
        assert!(why(&off).contains("\"features\": {\"cdi\": true}"));
        let words = no_spec("unresolvable CDI devices nvidia.com/gpu=all", NVIDIA_KIND);
        assert!(words.contains("no CDI spec for nvidia.com/gpu"), "{words}");
        assert!(words.contains("nvidia-ctk cdi generate"), "{words}");
        // Listed or not: sent, and the engine decides.
        let asked = decide(
            &GpuSelection::All,
            GpuApi::Cdi,
            &docker28(Some(&[])),
            "imgctl.test/gpu",
        )
        .unwrap();
        assert_eq!(asked.api, GpuApi::Cdi);
        assert!(!asked.libpod);
        assert_eq!(asked.request.device_ids.unwrap(), ["imgctl.test/gpu=all"]);
        assert!(is_unresolvable(
            "failed to inject CDI devices: unresolvable CDI devices nvidia.com/gpu=all"
        ));
    }
}
