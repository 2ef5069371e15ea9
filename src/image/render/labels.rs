//! Label keys imgctl sets, and the labels a rendered image gets under them;
//! `imgctl verify` and the build report read them.
//!
//! [`super::render`] resolves the values (the wheel, the base image, torch's
//! index); this module puts them under their keys.
use std::collections::BTreeMap;

use super::context::LockCtx;
use super::options::RenderOptions;
use crate::image::specs::{compat, LoadedSpec};

/// imgctl version that rendered the image.
pub const VERSION: &str = "io.imgctl.version";
/// Profile name (`cu124`).
pub const PROFILE: &str = "io.imgctl.profile";
/// sha256 of the spec text.
pub const SPEC_SHA256: &str = "io.imgctl.spec.sha256";
/// The base image the Dockerfile builds FROM.
pub const BASE: &str = "io.imgctl.base";
/// The base image the spec names (differs from BASE under --base-image).
pub const BASE_SPEC: &str = "io.imgctl.base.spec";
/// CUDA toolkit version of the spec's base (`12.4.1`).
pub const CUDA_BASE: &str = "io.imgctl.cuda.base";
/// CUDA runtime wheel version torch brings (`12.6.77`).
pub const CUDA_RUNTIME: &str = "io.imgctl.cuda.runtime";
/// torch version.
pub const TORCH: &str = "io.imgctl.torch";
/// torch wheel CUDA variant (`cu126`).
pub const TORCH_VARIANT: &str = "io.imgctl.torch.variant";
/// Index the torch wheel came from.
pub const TORCH_INDEX: &str = "io.imgctl.torch.index";
/// cuDNN wheel version bundled with torch.
pub const CUDNN: &str = "io.imgctl.cudnn";
/// NCCL wheel version bundled with torch.
pub const NCCL: &str = "io.imgctl.nccl";
/// triton version torch pins.
pub const TRITON: &str = "io.imgctl.triton";
/// Python minor of the spec.
pub const PYTHON: &str = "io.imgctl.python";
/// Whether the build checked the base's python3 against PYTHON.
pub const PYTHON_CHECKED: &str = "io.imgctl.python.checked";
/// Lowest driver that runs the wheel's CUDA (minor-version compatibility).
pub const DRIVER_MIN: &str = "io.imgctl.driver.min";
/// Lowest driver that runs the wheel's CUDA natively (incl. PTX JIT).
pub const DRIVER_NATIVE: &str = "io.imgctl.driver.native";
/// The GPU code the torch wheel carries, as `torch.cuda.get_arch_list()`
/// prints it (`sm_50 sm_60 … sm_90`), from [`crate::gpus::archs::WHEEL_ARCHS`]:
/// what the fit gate reads (`verify-image --fleet`, `up`).
pub const CUDA_ARCHS: &str = "io.imgctl.cuda.archs";
/// Where that list was read.
pub const CUDA_ARCHS_SOURCE: &str = "io.imgctl.cuda.archs.source";
/// How the wheel's CUDA fits the base: exact, minor-version-compatibility, older-wheel.
pub const COMPAT: &str = "io.imgctl.compat";
/// The compatibility note, when the wheel does not match the base exactly.
pub const COMPAT_NOTE: &str = "io.imgctl.compat.note";
/// Prefix of one label per pinned pip package (`io.imgctl.pip.diffusers`).
pub const PIP_PREFIX: &str = "io.imgctl.pip.";
/// The image's user name.
pub const USER: &str = "io.imgctl.user";
/// Its UID.
pub const UID: &str = "io.imgctl.uid";
/// Its GID.
pub const GID: &str = "io.imgctl.gid";
/// Whether it has passwordless sudo.
pub const SUDO: &str = "io.imgctl.sudo";
/// sha256 of the proxy CA baked in with --ca-cert.
pub const CA_CERT_SHA256: &str = "io.imgctl.ca_cert.sha256";
/// sha256 of the pip lock file the image was installed with.
pub const PIP_LOCK_SHA256: &str = "io.imgctl.pip_lock.sha256";
/// Number of packages in that lock.
pub const PIP_LOCK_PACKAGES: &str = "io.imgctl.pip_lock.packages";

/// What rendering resolved from the spec and the options: the labels record
/// it, the notes and the template context use it.
pub(super) struct Resolved {
    /// The wheel of the spec's `torch` in the compatibility table.
    pub(super) wheel: &'static compat::TorchWheel,
    /// How the wheel's CUDA fits the spec's base.
    pub(super) fit: compat::Fit,
    /// The lowest drivers for the wheel's CUDA, when the table knows them.
    pub(super) driver: Option<&'static compat::CudaToolkit>,
    /// The base image the spec names.
    pub(super) spec_base: String,
    /// The base image the Dockerfile builds FROM (the options may replace the spec's).
    pub(super) base_image: String,
    /// Whether the options replaced the spec's base with another one.
    pub(super) base_overridden: bool,
    /// The index torch is installed from.
    pub(super) torch_index: String,
}

/// The image's labels: the spec's own, then imgctl's (which win), with the
/// compatibility note and the fresh pip lock's when there are.
pub(super) fn image_labels(
    spec: &LoadedSpec,
    opts: &RenderOptions,
    r: &Resolved,
    compat_note: Option<&str>,
    lock: Option<&LockCtx>,
) -> BTreeMap<String, String> {
    let s = &spec.spec;
    let (wheel, driver) = (r.wheel, r.driver);
    let mut lab: BTreeMap<String, String> = s.labels.clone();
    let mut set = |k: &str, v: String| {
        lab.insert(k.to_string(), v);
    };
    if !s.labels.contains_key("org.opencontainers.image.title") {
        set(
            "org.opencontainers.image.title",
            format!("imgctl-{}", spec.name),
        );
    }
    if !s
        .labels
        .contains_key("org.opencontainers.image.description")
        && !s.description.is_empty()
    {
        set(
            "org.opencontainers.image.description",
            s.description.clone(),
        );
    }
    set("org.opencontainers.image.vendor", "imgctl".to_string());
    set(
        "org.opencontainers.image.version",
        format!("{}-torch{}-{}", spec.name, wheel.torch, wheel.variant),
    );
    let (base_name, base_digest) = match r.base_image.split_once('@') {
        Some((n, d)) => (n.to_string(), Some(d.to_string())),
        None => (r.base_image.clone(), None),
    };
    set("org.opencontainers.image.base.name", base_name);
    if let Some(d) = base_digest {
        set("org.opencontainers.image.base.digest", d);
    }
    set(VERSION, env!("CARGO_PKG_VERSION").to_string());
    set(PROFILE, spec.name.clone());
    set(SPEC_SHA256, spec.sha256.clone());
    set(BASE, r.base_image.clone());
    set(BASE_SPEC, r.spec_base.clone());
    set(CUDA_BASE, s.cuda.clone());
    set(CUDA_RUNTIME, wheel.cuda_runtime.to_string());
    set(TORCH, wheel.torch.to_string());
    set(TORCH_VARIANT, wheel.variant.to_string());
    set(TORCH_INDEX, r.torch_index.clone());
    set(CUDNN, wheel.cudnn.to_string());
    set(NCCL, wheel.nccl.to_string());
    set(TRITON, wheel.triton.to_string());
    set(PYTHON, s.python.clone());
    set(PYTHON_CHECKED, (!r.base_overridden).to_string());
    if let Some(w) = crate::gpus::archs::wheel_archs(wheel.torch, wheel.variant) {
        set(CUDA_ARCHS, w.list().describe());
        set(CUDA_ARCHS_SOURCE, w.source.to_string());
    }
    if let Some(d) = driver {
        set(DRIVER_MIN, d.minor_compat_driver.to_string());
        set(DRIVER_NATIVE, d.native_driver.to_string());
    }
    set(
        COMPAT,
        match r.fit {
            compat::Fit::Exact => "exact",
            compat::Fit::MinorCompat => "minor-version-compatibility",
            compat::Fit::Older => "older-wheel",
            compat::Fit::Incompatible => "incompatible",
        }
        .to_string(),
    );
    if let Some(n) = compat_note {
        set(COMPAT_NOTE, n.to_string());
    }
    for pin in &s.pip {
        set(
            &format!("{}{}", PIP_PREFIX, pin.normalized_name()),
            pin.version.clone(),
        );
    }
    set(USER, s.user.name.clone());
    set(UID, opts.uid.to_string());
    set(GID, opts.gid.to_string());
    set(SUDO, opts.sudo.to_string());
    if let Some(ca) = &opts.ca_cert {
        set(CA_CERT_SHA256, crate::image::specs::sha256_hex(ca));
    }
    if let Some(l) = lock {
        set(PIP_LOCK_SHA256, l.sha256.clone());
        set(PIP_LOCK_PACKAGES, l.packages.to_string());
    }
    lab
}
