//! Rendering: a validated spec plus build options → the Dockerfile text, the
//! files the build context needs besides it (entrypoint, healthcheck, sshd
//! configuration, proxy CA), the image labels, and the notes the build prints.
//!
//! Templates are minijinja in strict mode (an undefined variable is an error).
//! The bundled template and image files live in `images/` and are embedded in
//! the binary; a user spec may name its own template next to it. A fresh pip
//! lock of the spec ([`crate::lock`]) goes into the context and holds both
//! pip steps; without one the Dockerfile is as it always was. This module
//! reads nothing but templates and the spec's lock, and never talks to Docker: `crate::docker`
//! packs the [`RenderedImage`] (plus the imgctl binary at
//! [`IMGCTL_BINARY_PATH`]) into the build context.
use std::collections::BTreeMap;

use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

use crate::cli::ImageArgs;
use crate::spec::{compat, LoadedSpec};
use crate::CliError;

pub mod ca;

/// Context path where `imgctl build` puts the imgctl binary; the template
/// COPYs it in the last layers.
pub const IMGCTL_BINARY_PATH: &str = "imgctl";
/// Context folder whose tree is copied onto `/` of the image (one layer).
pub const ROOTFS_DIR: &str = "image/rootfs/";
/// Context path of the proxy CA (`--ca-cert`).
pub const CA_CERT_PATH: &str = "image/ca.crt";
/// Context path of the spec's pip lock (COPYed to [`crate::lock::IMAGE_LOCK_PATH`]).
pub const PIP_LOCK_PATH: &str = "image/pip.lock";

/// The bundled workstation template.
pub const WORKSTATION_TEMPLATE: &str = include_str!("../../images/workstation.Dockerfile.j2");
/// The image's entrypoint (POSIX sh, run by tini).
pub const ENTRYPOINT_SH: &str = include_str!("../../images/entrypoint.sh");
/// The image's healthcheck.
pub const HEALTHCHECK_SH: &str = include_str!("../../images/healthcheck.sh");
/// The image's sshd configuration.
pub const SSHD_CONFIG: &str = include_str!("../../images/sshd_config");
/// The image's login-shell profile (PATH for ssh sessions).
pub const PROFILE_SH: &str = include_str!("../../images/profile.sh");

/// The default UID/GID of the image's user (the first regular user on Debian
/// and Ubuntu: `UID_MIN`/`GID_MIN` in /etc/login.defs).
pub const DEFAULT_ID: u32 = 1000;
/// Accepted `--uid`/`--gid` range: login.defs' `UID_MIN`..`UID_MAX` (1000..60000).
pub const ID_RANGE: std::ops::RangeInclusive<u32> = 1000..=60000;

/// Every file of `images/` embedded in the binary: (path in the repository, contents).
pub fn embedded_files() -> Vec<(&'static str, &'static str)> {
    let mut v = vec![
        ("images/workstation.Dockerfile.j2", WORKSTATION_TEMPLATE),
        ("images/entrypoint.sh", ENTRYPOINT_SH),
        ("images/healthcheck.sh", HEALTHCHECK_SH),
        ("images/sshd_config", SSHD_CONFIG),
        ("images/profile.sh", PROFILE_SH),
    ];
    for (name, yaml) in crate::spec::bundled() {
        let path: &'static str = match name {
            "cu124" => "images/cu124.yaml",
            "cu126" => "images/cu126.yaml",
            "cu128" => "images/cu128.yaml",
            _ => continue,
        };
        v.push((path, yaml));
    }
    v.extend(crate::spec::bundled_locks());
    v
}

/// The longest line Docker's Dockerfile parser reads (64 KiB, its scanner's buffer).
pub const DOCKERFILE_LINE_MAX: usize = 64 * 1024;

/// Build options that shape the Dockerfile (from `ImageArgs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderOptions {
    /// Replaces the spec's base image (`--base-image`).
    pub base_image: Option<String>,
    /// A proxy CA certificate (PEM) that apt and pip must trust (`--ca-cert`).
    pub ca_cert: Option<Vec<u8>>,
    /// pip index for the other packages (`--pip-index-url`); also for torch
    /// when the spec takes torch from PyPI (a PyPI mirror serves that wheel).
    pub pip_index_url: Option<String>,
    /// UID of the image's user (`--uid`, default 1000).
    pub uid: u32,
    /// GID of the image's user (`--gid`, default 1000).
    pub gid: u32,
    /// Passwordless sudo for the user (`--sudo`).
    pub sudo: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            base_image: None,
            ca_cert: None,
            pip_index_url: None,
            uid: DEFAULT_ID,
            gid: DEFAULT_ID,
            sudo: false,
        }
    }
}

impl RenderOptions {
    /// Reads and validates the options: the `--ca-cert` file must hold PEM
    /// certificates and nothing else ([`ca::read_ca_cert`]),
    /// `--uid`/`--gid` integers in 1000-60000, URLs and image names sane. Bad
    /// input is a usage error (exit 2).
    pub fn from_args(a: &ImageArgs) -> anyhow::Result<RenderOptions> {
        let uid = parse_id("--uid", a.uid.as_deref())?;
        let gid = parse_id("--gid", a.gid.as_deref())?;
        let ca_cert = match &a.ca_cert {
            None => None,
            Some(path) => Some(ca::read_ca_cert(path)?),
        };
        if let Some(url) = &a.pip_index_url {
            check_pip_index_url(url)?;
        }
        if let Some(image) = &a.base_image {
            crate::reference::check("--base-image", image)?;
        }
        Ok(RenderOptions {
            base_image: a.base_image.clone(),
            ca_cert,
            pip_index_url: a
                .pip_index_url
                .as_ref()
                .map(|u| u.trim_end_matches('/').to_string()),
            uid,
            gid,
            sudo: a.sudo,
        })
    }
}

fn parse_id(flag: &str, value: Option<&str>) -> anyhow::Result<u32> {
    let Some(v) = value else {
        return Ok(DEFAULT_ID);
    };
    match v.trim().parse::<u32>() {
        Ok(n) if ID_RANGE.contains(&n) => Ok(n),
        _ => Err(CliError::usage(format!(
            "invalid {flag} '{v}': expected an integer {}-{} (0 is root)",
            ID_RANGE.start(),
            ID_RANGE.end()
        ))
        .with_hint(format!(
            "use your own {} (`id -{}`) so files in mounted folders keep sane owners",
            if flag == "--uid" { "UID" } else { "GID" },
            if flag == "--uid" { "u" } else { "g" }
        ))
        .into()),
    }
}

/// Checks a `--pip-index-url` (of `build`, `render` and `lock`): an http(s)
/// URL without spaces, quotes or shell characters, and without credentials. A
/// `user:password@` would be written into RUN lines (`docker history`),
/// comments, a label and the lock's header; the error shows the URL with the
/// credentials masked. Usage errors (exit 2).
pub fn check_pip_index_url(url: &str) -> Result<(), CliError> {
    if !is_clean_url(url) {
        return Err(CliError::usage(format!(
            "invalid --pip-index-url '{}': expected an http(s) URL without spaces or quotes",
            mask_userinfo(url)
        ))
        .with_hint("e.g. --pip-index-url https://pypi.example.com/simple"));
    }
    if userinfo(url).is_some() {
        return Err(CliError::usage(format!(
            "--pip-index-url '{}' contains credentials (user or password before '@'), which would be stored in the image's history and labels",
            mask_userinfo(url)
        ))
        .with_hint(
            "pass the URL without them: pip reads an index's credentials from ~/.netrc or the keyring (on the host, for `imgctl lock`); for a build use a mirror that needs none from the build network, or a template of your own that mounts a ~/.netrc as a BuildKit build secret",
        ));
    }
    Ok(())
}

/// The userinfo of an `scheme://userinfo@host/…` URL (`None` without an `@`
/// in the authority).
fn userinfo(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority.rsplit_once('@').map(|(user, _)| user)
}

/// `url` with its userinfo replaced by `***`.
fn mask_userinfo(url: &str) -> String {
    match (userinfo(url), url.split_once("://")) {
        (Some(user), Some((scheme, rest))) => {
            format!("{scheme}://***{}", &rest[user.len()..])
        }
        _ => url.to_string(),
    }
}

fn is_clean_url(s: &str) -> bool {
    (s.starts_with("https://") || s.starts_with("http://"))
        && s.len() > "https://".len()
        && s.chars()
            .all(|c| c.is_ascii_graphic() && !"\"'`$\\;&|<>(){}".contains(c))
}

/// A file of the build context besides the Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextFile {
    /// Path inside the context (`image/rootfs/usr/local/bin/imgctl-entrypoint`).
    pub path: String,
    /// Unix mode (0o755 for scripts). The classic builder's COPY keeps it.
    pub mode: u32,
    /// Contents.
    pub contents: Vec<u8>,
}

/// Everything a build needs from rendering.
#[derive(Debug, Clone)]
pub struct RenderedImage {
    /// The Dockerfile text.
    pub dockerfile: String,
    /// Context files besides the Dockerfile and the imgctl binary.
    pub files: Vec<ContextFile>,
    /// Image labels: OCI labels and every pin (also in the Dockerfile's LABEL).
    pub labels: BTreeMap<String, String>,
    /// Lines the build must print (e.g. that cu124 carries the cu126 wheel).
    pub notes: Vec<String>,
    /// The spec's pip lock: used when fresh, else the reason it is not.
    pub lock: crate::lock::LockState,
}

/// Label keys imgctl sets; `imgctl verify` and the build report read them.
pub mod labels {
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
}

#[derive(Serialize)]
struct UserCtx {
    name: String,
    uid: u32,
    gid: u32,
    sudo: bool,
}

#[derive(Serialize)]
struct TorchCtx {
    version: String,
    variant: String,
    index: String,
    requirement: String,
    cuda: String,
    cuda_runtime: String,
    cudnn: String,
    nccl: String,
    triton: String,
    source: String,
}

#[derive(Serialize)]
struct FilesCtx {
    imgctl: &'static str,
    rootfs: &'static str,
    ca_cert: &'static str,
    pip_lock: &'static str,
}

/// The fresh lock the image installs with (`lock` is null in the template without one).
#[derive(Serialize)]
struct LockCtx {
    /// Where it was read (`images/cu124.lock`).
    origin: String,
    /// Its path in the image.
    path: &'static str,
    /// Number of packages.
    packages: usize,
    /// sha256 of the file.
    sha256: String,
}

#[derive(Serialize)]
struct Ctx {
    profile: String,
    description: String,
    imgctl_version: &'static str,
    spec_origin: String,
    spec_sha256: String,
    base_image: String,
    spec_base_image: String,
    base_overridden: bool,
    cuda: String,
    expect_python: String,
    python: String,
    torch: TorchCtx,
    check_pins: String,
    /// JSON for `IMGCTL_VERIFY_PINS` in the image: the versions `imgctl verify`
    /// holds the loaded torch and CUDA libraries to inside it.
    verify_pins: String,
    pip: Vec<String>,
    pip_index_url: String,
    apt: Vec<String>,
    user: UserCtx,
    ports: Vec<u16>,
    labels: Vec<(String, String)>,
    ca_cert: bool,
    notes: Vec<Vec<String>>,
    files: FilesCtx,
    lock: Option<LockCtx>,
}

/// Renders the Dockerfile and the rest of the build context for `spec`.
pub fn render(spec: &LoadedSpec, opts: &RenderOptions) -> anyhow::Result<RenderedImage> {
    let s = &spec.spec;
    let wheel = compat::lookup(&s.torch.version, &s.torch.variant).ok_or_else(|| {
        // validate() guarantees the pair exists; a hand-made ImageSpec may not.
        CliError::usage(format!(
            "no torch {} wheel for {} in the compatibility table",
            s.torch.version, s.torch.variant
        ))
    })?;
    let spec_base = s.base_image.to_string();
    let base_image = opts.base_image.clone().unwrap_or_else(|| spec_base.clone());
    let base_overridden = opts.base_image.is_some() && base_image != spec_base;
    let fit = compat::fit(wheel.cuda, &s.cuda);
    // A PyPI mirror (--pip-index-url) serves PyPI's torch wheel too: use it for
    // torch when the spec takes torch from PyPI. Other wheel indexes are kept.
    let torch_index = match &opts.pip_index_url {
        Some(mirror) if s.torch.index == compat::PYPI_INDEX => mirror.clone(),
        _ => s.torch.index.clone(),
    };
    let driver = compat::min_driver(wheel.cuda);

    // Notes, printed by the build and written into the Dockerfile.
    let mut notes = Vec::new();
    let base_mm = compat::major_minor(&s.cuda);
    let compat_note = match fit {
        compat::Fit::MinorCompat => {
            let exact = format!("cu{}", base_mm.replace('.', ""));
            let why = if compat::lookup(wheel.torch, &exact).is_none() {
                format!("there is no {exact} build of torch {} (it was published for {} only), so ", wheel.torch, compat::variants(wheel.torch).join(", "))
            } else {
                String::new()
            };
            Some(format!(
                "{}: {why}this image carries the {} wheel (CUDA runtime {}, cuDNN {}, NCCL {}) on a CUDA {} base. It runs there by CUDA minor-version compatibility: driver >= {} (>= {} for CUDA {} natively, e.g. PTX JIT).",
                spec.name,
                wheel.variant,
                wheel.cuda_runtime,
                wheel.cudnn,
                wheel.nccl,
                s.cuda,
                driver.map_or("?", |d| d.minor_compat_driver),
                driver.map_or("?", |d| d.native_driver),
                wheel.cuda,
            ))
        }
        compat::Fit::Older => Some(format!(
            "{}: the {} wheel is older than the CUDA {} base; it runs on its own bundled CUDA runtime {} (driver >= {}).",
            spec.name,
            wheel.variant,
            s.cuda,
            wheel.cuda_runtime,
            driver.map_or("?", |d| d.native_driver),
        )),
        compat::Fit::Exact | compat::Fit::Incompatible => None,
    };
    if let Some(n) = &compat_note {
        notes.push(n.clone());
    }
    if base_overridden {
        notes.push(format!(
            "base image overridden with --base-image {base_image} (the spec names {spec_base}): CUDA {} is the spec's claim, not checked, and the base's python3 is recorded in /etc/imgctl/python-version instead of checked against {}.",
            s.cuda, s.python
        ));
    }

    // Labels: the spec's own, then imgctl's (which win).
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
    let (base_name, base_digest) = match base_image.split_once('@') {
        Some((n, d)) => (n.to_string(), Some(d.to_string())),
        None => (base_image.clone(), None),
    };
    set("org.opencontainers.image.base.name", base_name);
    if let Some(d) = base_digest {
        set("org.opencontainers.image.base.digest", d);
    }
    set(labels::VERSION, env!("CARGO_PKG_VERSION").to_string());
    set(labels::PROFILE, spec.name.clone());
    set(labels::SPEC_SHA256, spec.sha256.clone());
    set(labels::BASE, base_image.clone());
    set(labels::BASE_SPEC, spec_base.clone());
    set(labels::CUDA_BASE, s.cuda.clone());
    set(labels::CUDA_RUNTIME, wheel.cuda_runtime.to_string());
    set(labels::TORCH, wheel.torch.to_string());
    set(labels::TORCH_VARIANT, wheel.variant.to_string());
    set(labels::TORCH_INDEX, torch_index.clone());
    set(labels::CUDNN, wheel.cudnn.to_string());
    set(labels::NCCL, wheel.nccl.to_string());
    set(labels::TRITON, wheel.triton.to_string());
    set(labels::PYTHON, s.python.clone());
    set(labels::PYTHON_CHECKED, (!base_overridden).to_string());
    if let Some(d) = driver {
        set(labels::DRIVER_MIN, d.minor_compat_driver.to_string());
        set(labels::DRIVER_NATIVE, d.native_driver.to_string());
    }
    set(
        labels::COMPAT,
        match fit {
            compat::Fit::Exact => "exact",
            compat::Fit::MinorCompat => "minor-version-compatibility",
            compat::Fit::Older => "older-wheel",
            compat::Fit::Incompatible => "incompatible",
        }
        .to_string(),
    );
    if let Some(n) = &compat_note {
        set(labels::COMPAT_NOTE, n.clone());
    }
    for pin in &s.pip {
        set(
            &format!("{}{}", labels::PIP_PREFIX, pin.normalized_name()),
            pin.version.clone(),
        );
    }
    set(labels::USER, s.user.name.clone());
    set(labels::UID, opts.uid.to_string());
    set(labels::GID, opts.gid.to_string());
    set(labels::SUDO, opts.sudo.to_string());
    if let Some(ca) = &opts.ca_cert {
        set(labels::CA_CERT_SHA256, crate::spec::sha256_hex(ca));
    }
    let lock_state = crate::lock::state(spec);
    let lock = match &lock_state {
        crate::lock::LockState::Fresh { path, lock, text } => {
            let ctx = LockCtx {
                origin: path.clone(),
                path: crate::lock::IMAGE_LOCK_PATH,
                packages: lock.packages.len(),
                sha256: crate::spec::sha256_hex(text.as_bytes()),
            };
            set(labels::PIP_LOCK_SHA256, ctx.sha256.clone());
            set(labels::PIP_LOCK_PACKAGES, ctx.packages.to_string());
            Some(ctx)
        }
        _ => None,
    };

    let mut apt = s.apt.clone();
    if opts.sudo && !apt.iter().any(|p| p == "sudo") {
        apt.push("sudo".to_string());
    }
    let runtime_dist = wheel.cudnn_dist.replace("cudnn", "cuda-runtime");
    let check_pins = format!(
        "python -c \"import importlib.metadata as m, torch; got = (torch.__version__.split('+')[0], torch.version.cuda, m.version('{runtime_dist}'), m.version('{}'), m.version('{}')); want = ('{}', '{}', '{}', '{}', '{}'); print('torch, CUDA, runtime, cuDNN, NCCL:', got); assert got == want, 'installed pins differ from the compatibility table: %s != %s' % (got, want)\"",
        wheel.cudnn_dist, wheel.nccl_dist, wheel.torch, wheel.cuda, wheel.cuda_runtime, wheel.cudnn, wheel.nccl
    );
    let verify_pins = serde_json::json!({
        "torch": wheel.torch,
        "cudart": wheel.cuda_runtime,
        "cudnn": wheel.cudnn,
        "nccl": wheel.nccl,
        "source": format!("image spec {} (IMGCTL_VERIFY_PINS)", spec.name),
    })
    .to_string();
    let ctx = Ctx {
        profile: spec.name.clone(),
        description: s.description.clone(),
        imgctl_version: env!("CARGO_PKG_VERSION"),
        spec_origin: spec.origin.clone(),
        spec_sha256: spec.sha256.clone(),
        base_image: base_image.clone(),
        spec_base_image: spec_base,
        base_overridden,
        cuda: s.cuda.clone(),
        expect_python: if base_overridden {
            String::new()
        } else {
            s.python.clone()
        },
        python: s.python.clone(),
        torch: TorchCtx {
            version: wheel.torch.to_string(),
            variant: wheel.variant.to_string(),
            requirement: compat::torch_requirement(wheel, &torch_index),
            index: torch_index,
            cuda: wheel.cuda.to_string(),
            cuda_runtime: wheel.cuda_runtime.to_string(),
            cudnn: wheel.cudnn.to_string(),
            nccl: wheel.nccl.to_string(),
            triton: wheel.triton.to_string(),
            source: wheel.source.to_string(),
        },
        check_pins,
        verify_pins,
        pip: s.pip.iter().map(|p| p.requirement()).collect(),
        pip_index_url: opts.pip_index_url.clone().unwrap_or_default(),
        apt,
        user: UserCtx {
            name: s.user.name.clone(),
            uid: opts.uid,
            gid: opts.gid,
            sudo: opts.sudo,
        },
        ports: s.ports.clone(),
        labels: lab.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        ca_cert: opts.ca_cert.is_some(),
        notes: notes.iter().map(|n| wrap(n, 74)).collect(),
        files: FilesCtx {
            imgctl: IMGCTL_BINARY_PATH,
            rootfs: ROOTFS_DIR,
            ca_cert: CA_CERT_PATH,
            pip_lock: PIP_LOCK_PATH,
        },
        lock,
    };

    refuse_control_characters(&ctx)?;

    let (template_name, template_source, user_template) = match (&s.template, &spec.dir) {
        (Some(t), Some(dir)) => {
            let path = dir.join(t);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                CliError::usage(format!("cannot read template {}: {e}", path.display()))
            })?;
            (path.display().to_string(), text, true)
        }
        _ => (
            "images/workstation.Dockerfile.j2".to_string(),
            WORKSTATION_TEMPLATE.to_string(),
            false,
        ),
    };
    let dockerfile = render_template(&template_name, &template_source, &ctx).map_err(|e| {
        let err = if user_template {
            CliError::usage(e).with_hint("every variable a template uses must exist; the bundled images/workstation.Dockerfile.j2 shows them all")
        } else {
            CliError::failure(e)
        };
        anyhow::Error::from(err)
    })?;
    // Docker's Dockerfile parser reads lines of at most 64 KiB; a longer one
    // would fail the build with a confusing parser error.
    if let Some((i, line)) = dockerfile
        .lines()
        .enumerate()
        .find(|(_, l)| l.len() >= DOCKERFILE_LINE_MAX)
    {
        let start: String = line.chars().take(40).collect();
        return Err(CliError::usage(format!(
            "the rendered Dockerfile's line {} is {} bytes long (it starts {}); Docker reads lines of at most 64 KiB",
            i + 1,
            line.len(),
            crate::error::printable(&start)
        ))
        .with_hint("shorten the spec values (or the template text) that land on that line")
        .into());
    }

    let mut files = vec![
        ContextFile {
            path: format!("{ROOTFS_DIR}usr/local/bin/imgctl-entrypoint"),
            mode: 0o755,
            contents: ENTRYPOINT_SH.as_bytes().to_vec(),
        },
        ContextFile {
            path: format!("{ROOTFS_DIR}usr/local/bin/imgctl-healthcheck"),
            mode: 0o755,
            contents: HEALTHCHECK_SH.as_bytes().to_vec(),
        },
        ContextFile {
            path: format!("{ROOTFS_DIR}etc/imgctl/sshd_config"),
            mode: 0o644,
            contents: SSHD_CONFIG.as_bytes().to_vec(),
        },
        ContextFile {
            path: format!("{ROOTFS_DIR}etc/profile.d/imgctl.sh"),
            mode: 0o644,
            contents: PROFILE_SH.as_bytes().to_vec(),
        },
    ];
    if let Some(ca) = &opts.ca_cert {
        files.push(ContextFile {
            path: CA_CERT_PATH.to_string(),
            mode: 0o644,
            contents: ca.clone(),
        });
    }
    if let crate::lock::LockState::Fresh { text, .. } = &lock_state {
        files.push(ContextFile {
            path: PIP_LOCK_PATH.to_string(),
            mode: 0o644,
            contents: text.as_bytes().to_vec(),
        });
    }
    Ok(RenderedImage {
        dockerfile,
        files,
        labels: lab,
        notes,
        lock: lock_state,
    })
}

/// The one choke point between input and the Dockerfile text: every string
/// the template can reach (the whole context, serialized as the template sees
/// it) must be free of control characters. A newline in a spec's path, its
/// `lock:` value, a label or a name would otherwise start a new Dockerfile
/// instruction (a `RUN` as root); CR, NUL, escape sequences and the rest have
/// no business in a Dockerfile either. Refused as a usage error (exit 2)
/// naming the field and the character.
fn refuse_control_characters<S: Serialize>(ctx: &S) -> Result<(), CliError> {
    let value = serde_json::to_value(ctx)
        .map_err(|e| CliError::failure(format!("cannot serialize the template context: {e}")))?;
    match find_control(&value, &mut Vec::new()) {
        None => Ok(()),
        Some((path, c)) => Err(CliError::usage(format!(
            "{} contains the control character {} and cannot be written into a Dockerfile",
            field_name(&path),
            describe_char(c)
        ))
        .with_hint(
            "every value that reaches the Dockerfile must be one line of text without control characters; remove it (or rename the file)",
        )),
    }
}

/// The first control character in any string of `value`: (the path to it, the character).
fn find_control(value: &serde_json::Value, path: &mut Vec<String>) -> Option<(Vec<String>, char)> {
    use serde_json::Value;
    match value {
        Value::String(s) => s
            .chars()
            .find(|c| c.is_control())
            .map(|c| (path.clone(), c)),
        Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
            path.push(i.to_string());
            let found = find_control(v, path);
            path.pop();
            found
        }),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            path.push(k.clone());
            let found = find_control(v, path);
            path.pop();
            found
        }),
        _ => None,
    }
}

/// What a person calls the context field at `path` (the spec field or flag it came from).
fn field_name(path: &[String]) -> String {
    let parts: Vec<&str> = path.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["spec_origin"] => "the spec's path".to_string(),
        ["profile"] => "the spec's `name`".to_string(),
        ["description"] => "the spec's `description`".to_string(),
        ["base_image"] => "the base image (`base_image` or --base-image)".to_string(),
        ["spec_base_image"] => "the spec's `base_image`".to_string(),
        ["lock", "origin"] => "the spec's `lock` path".to_string(),
        ["labels", i, "0"] => format!("the key of label {i} (`labels`)"),
        ["labels", _, "1"] => "a label value (`labels`, `description` or `name`)".to_string(),
        ["pip", i] => format!("`pip[{i}]`"),
        ["apt", i] => format!("`apt[{i}]`"),
        ["user", "name"] => "the spec's `user.name`".to_string(),
        ["pip_index_url"] => "--pip-index-url".to_string(),
        ["torch", field] => format!("the spec's `torch.{field}`"),
        ["notes", ..] => "a build note (from `name` or the base image)".to_string(),
        _ => format!("the template value `{}`", path.join(".")),
    }
}

/// `U+000A (line feed)` and the like.
fn describe_char(c: char) -> String {
    let name = match c {
        '\n' => " (line feed)",
        '\r' => " (carriage return)",
        '\t' => " (tab)",
        '\0' => " (NUL)",
        '\u{1b}' => " (escape)",
        _ => "",
    };
    format!("U+{:04X}{name}", c as u32)
}

/// Renders `source` with `ctx` in strict mode; the error names the template,
/// the line and what was undefined or wrong.
pub fn render_template<S: Serialize>(name: &str, source: &str, ctx: &S) -> Result<String, String> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(true);
    env.add_filter("dq", docker_quote);
    let describe = |e: minijinja::Error| {
        let line = e.line().map(|l| format!(" line {l}")).unwrap_or_default();
        let detail = e.detail().map(|d| format!(": {d}")).unwrap_or_default();
        let text = e
            .line()
            .and_then(|l| source.lines().nth(l.saturating_sub(1)))
            .map(|t| format!(" in `{}`", t.trim()))
            .unwrap_or_default();
        format!("template {name}{line}: {}{detail}{text}", e.kind())
    };
    env.add_template(name, source).map_err(describe)?;
    let tmpl = env.get_template(name).map_err(describe)?;
    tmpl.render(ctx).map_err(describe)
}

/// A Dockerfile double-quoted string (LABEL values): `"` and `\` escaped, and
/// `$` too, because LABEL substitutes variables.
fn docker_quote(value: String) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Greedy word wrap to `width` columns.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_and_wrapping() {
        assert_eq!(docker_quote("a \"b\" $c \\".into()), r#""a \"b\" \$c \\""#);
        assert_eq!(wrap("aa bb cc", 5), vec!["aa bb", "cc"]);
    }

    #[test]
    fn strict_undefined_is_an_error() {
        #[derive(Serialize)]
        struct C {
            a: u8,
        }
        assert_eq!(render_template("t", "{{ a }}", &C { a: 1 }).unwrap(), "1");
        let err = render_template("t", "x\n{{ nope }}", &C { a: 1 }).unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("undefined"), "{err}");
    }

    #[test]
    fn ids() {
        assert_eq!(parse_id("--uid", None).unwrap(), 1000);
        assert_eq!(parse_id("--uid", Some("1234")).unwrap(), 1234);
        for bad in ["abc", "0", "999", "60001", "-5"] {
            assert!(parse_id("--uid", Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn pip_index_url_credentials() {
        assert_eq!(userinfo("https://u:pw@mirror/simple"), Some("u:pw"));
        assert_eq!(userinfo("https://token@mirror/simple"), Some("token"));
        assert_eq!(userinfo("https://mirror/simple?x=a@b"), None);
        assert_eq!(userinfo("https://mirror:8443/simple"), None);
        assert_eq!(
            mask_userinfo("https://u:pw@mirror/simple"),
            "https://***@mirror/simple"
        );
        assert!(check_pip_index_url("https://mirror:8443/simple").is_ok());
        let err = check_pip_index_url("https://u:pw@mirror/simple").unwrap_err();
        assert!(!err.message.contains("pw"), "{}", err.message);
    }
}
