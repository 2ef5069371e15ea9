//! Rendering: a validated spec plus build options → the Dockerfile text, the
//! files the build context needs besides it (entrypoint, healthcheck, sshd
//! configuration, proxy CA), the image labels, and the notes the build prints.
//!
//! Templates are minijinja in strict mode (an undefined variable is an error).
//! The bundled template and image files live in `images/` and are embedded in
//! the binary; a user spec may name its own template next to it. A fresh pip
//! lock of the spec ([`crate::image::lock`]) goes into the context, with each of its
//! steps as a requirements file (with hashes) that the torch and the pip
//! layer install strictly; without one the Dockerfile is as it always was. This module
//! reads nothing but templates and the spec's lock, and never talks to Docker: `crate::docker`
//! packs the [`RenderedImage`] (plus the imgctl binary at
//! [`IMGCTL_BINARY_PATH`]) into the build context.
//!
//! This file builds the context from the spec and the options and assembles
//! the result; [`labels`] puts the image's labels under their keys,
//! [`template`] renders and escapes, [`context`] is the data the template
//! sees, [`options`] the options. Its errors ([`RenderError`]) name
//! no command-line flag: `commands/` builds the options from the flags and
//! words the errors for the user.
//!
//! Part: the build wing (`docs/architecture.md`).
use std::collections::{BTreeMap, BTreeSet};

use crate::image::specs::{compat, LoadedSpec};

pub mod ca;
mod context;
mod error;
pub mod labels;
mod options;
mod template;

use context::{Ctx, FilesCtx, LockCtx, TorchCtx, UserCtx};
pub use error::{describe_char, field_name, RenderError};
use labels::Resolved;
pub use options::{check_pip_index_url, RenderOptions, DEFAULT_ID, ID_RANGE};
pub use template::{docker_quote, render_template};
use template::{refuse_control_characters, wrap};

/// Context path where `imgctl build` puts the imgctl binary; the template
/// COPYs it in the last layers.
pub const IMGCTL_BINARY_PATH: &str = "imgctl";
/// Context folder whose tree is copied onto `/` of the image (one layer).
pub const ROOTFS_DIR: &str = "image/rootfs/";
/// Context path of the proxy CA (`--ca-cert`).
pub const CA_CERT_PATH: &str = "image/ca.crt";
/// The BuildKit secret id of the build-only proxy CA (`--ca-cert-secret`):
/// the bundled template mounts it into the downloading RUN steps
/// (`RUN --mount=type=secret,id=proxy-ca`); `imgctl build` serves it from its
/// build session, so it is never in the build context or the image.
pub const CA_CERT_SECRET_ID: &str = "proxy-ca";
/// Context path of the spec's pip lock (COPYed to [`crate::image::lock::IMAGE_LOCK_PATH`]).
pub const PIP_LOCK_PATH: &str = "image/pip.lock";
/// Context path of the lock's torch step (COPYed to [`crate::image::lock::IMAGE_LOCK_TORCH_PATH`]).
pub const PIP_LOCK_TORCH_PATH: &str = "image/pip-lock-torch.txt";
/// Context path of the named pins of the lock's pins step (COPYed to
/// [`crate::image::lock::IMAGE_LOCK_PINS_PATH`]).
pub const PIP_LOCK_PINS_PATH: &str = "image/pip-lock-pins.txt";
/// Context path of the rest of the lock's pins step, what the named pins need
/// (COPYed to [`crate::image::lock::IMAGE_LOCK_DEPS_PATH`]).
pub const PIP_LOCK_DEPS_PATH: &str = "image/pip-lock-deps.txt";

/// The bundled workstation template.
pub const WORKSTATION_TEMPLATE: &str = include_str!("../../../images/workstation.Dockerfile.j2");
/// The image's entrypoint (POSIX sh, run by tini).
pub const ENTRYPOINT_SH: &str = include_str!("../../../images/entrypoint.sh");
/// The image's healthcheck.
pub const HEALTHCHECK_SH: &str = include_str!("../../../images/healthcheck.sh");
/// The image's sshd configuration.
pub const SSHD_CONFIG: &str = include_str!("../../../images/sshd_config");
/// The image's login-shell profile (PATH for ssh sessions).
pub const PROFILE_SH: &str = include_str!("../../../images/profile.sh");
/// JupyterLab's page configuration, read from `/etc/jupyter/labconfig/`
/// whichever venv runs it: the "get notified about Jupyter news?" pop-up
/// over the first notebook is off (#53 F24).
pub const JUPYTER_PAGE_CONFIG: &str = include_str!("../../../images/jupyter_page_config.json");
/// The hash-pinned uv that the BuildKit variant's locked pip steps install
/// into /tmp for the step (`images/uv-requirements.txt`).
pub const UV_REQUIREMENTS: &str = include_str!("../../../images/uv-requirements.txt");
/// Context path of [`UV_REQUIREMENTS`]: bound into the steps, never copied.
pub const UV_REQUIREMENTS_PATH: &str = "build-only/uv-requirements.txt";

/// The normalised names of the spec's pip pins (`Jinja2[i18n]==3.1.6` →
/// `jinja2`): the lock's entries under these names make the image's last pip
/// layer, the rest of the pins step the layer before it.
fn named_pins(s: &crate::image::specs::ImageSpec) -> std::collections::BTreeSet<String> {
    s.pip.iter().map(|p| p.normalized_name()).collect()
}

/// Every file of `images/` embedded in the binary: (path in the repository, contents).
pub fn embedded_files() -> Vec<(&'static str, &'static str)> {
    let mut v = vec![
        ("images/workstation.Dockerfile.j2", WORKSTATION_TEMPLATE),
        ("images/entrypoint.sh", ENTRYPOINT_SH),
        ("images/healthcheck.sh", HEALTHCHECK_SH),
        ("images/sshd_config", SSHD_CONFIG),
        ("images/profile.sh", PROFILE_SH),
        ("images/jupyter_page_config.json", JUPYTER_PAGE_CONFIG),
        ("images/uv-requirements.txt", UV_REQUIREMENTS),
    ];
    for (name, yaml) in crate::image::specs::bundled() {
        let path: &'static str = match name {
            "cu124" => "images/cu124.yaml",
            "cu126" => "images/cu126.yaml",
            "cu128" => "images/cu128.yaml",
            _ => continue,
        };
        v.push((path, yaml));
    }
    v.extend(crate::image::specs::bundled_locks());
    v
}

/// The longest line Docker's Dockerfile parser reads (64 KiB, its scanner's buffer).
pub const DOCKERFILE_LINE_MAX: usize = 64 * 1024;

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
    pub lock: crate::image::lock::LockState,
}

/// Renders the Dockerfile and the rest of the build context for `spec`.
pub fn render(spec: &LoadedSpec, opts: &RenderOptions) -> anyhow::Result<RenderedImage> {
    let r = resolve(spec, opts)?;
    let compat_note = compat_note(spec, &r);
    let notes = notes(spec, opts, &r, compat_note.as_deref());
    let lock_state = crate::image::lock::state(spec);
    let named = named_pins(&spec.spec);
    let lock = lock_ctx(&lock_state, &named, opts, &r.torch_index);
    let lab = labels::image_labels(spec, opts, &r, compat_note.as_deref(), lock.as_ref());
    let ctx = template_context(spec, opts, &r, &notes, &lab, lock);
    refuse_control_characters(&ctx)?;
    let dockerfile = render_dockerfile(spec, &ctx)?;
    let files = context_files(opts, &lock_state, &named);
    Ok(RenderedImage {
        dockerfile,
        files,
        labels: lab,
        notes,
        lock: lock_state,
    })
}

/// What the spec and the options resolve to: the torch wheel (`Err` when the
/// compatibility table has none) and its fit, the base image, torch's index.
fn resolve(spec: &LoadedSpec, opts: &RenderOptions) -> Result<Resolved, RenderError> {
    let s = &spec.spec;
    let wheel = compat::lookup(&s.torch.version, &s.torch.variant).ok_or_else(|| {
        // validate() guarantees the pair exists; a hand-made ImageSpec may not.
        RenderError::NoWheel {
            version: s.torch.version.clone(),
            variant: s.torch.variant.clone(),
        }
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
    Ok(Resolved {
        wheel,
        fit,
        driver,
        spec_base,
        base_image,
        base_overridden,
        torch_index,
    })
}

/// The note on how the wheel's CUDA fits the base, when it does not match it
/// exactly (a label records it too).
fn compat_note(spec: &LoadedSpec, r: &Resolved) -> Option<String> {
    let s = &spec.spec;
    let (wheel, driver) = (r.wheel, r.driver);
    let base_mm = compat::major_minor(&s.cuda);
    match r.fit {
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
    }
}

/// The notes, printed by the build and written into the Dockerfile: the
/// compatibility note, then that the options replaced the base image.
fn notes(
    spec: &LoadedSpec,
    opts: &RenderOptions,
    r: &Resolved,
    compat_note: Option<&str>,
) -> Vec<String> {
    let s = &spec.spec;
    let mut notes = Vec::new();
    if let Some(n) = compat_note {
        notes.push(n.to_string());
    }
    if r.base_overridden {
        let source = match opts.base_image_source.as_str() {
            "" => String::new(),
            source => format!("{source} "),
        };
        notes.push(format!(
            "base image overridden with {source}{} (the spec names {}): CUDA {} is the spec's claim, not checked, and the base's python3 is recorded in /etc/imgctl/python-version instead of checked against {}.",
            r.base_image, r.spec_base, s.cuda, s.python
        ));
    }
    notes
}

/// The template's view of the spec's pip lock when it is fresh: its steps,
/// their sizes and where the image keeps them (`None` without a fresh lock).
fn lock_ctx(
    lock_state: &crate::image::lock::LockState,
    named: &BTreeSet<String>,
    opts: &RenderOptions,
    torch_index: &str,
) -> Option<LockCtx> {
    // Where the pip layer installs from (the template's default: PyPI).
    let pins_index = opts
        .pip_index_url
        .clone()
        .unwrap_or_else(|| compat::PYPI_INDEX.to_string());
    match lock_state {
        crate::image::lock::LockState::Fresh { path, lock, text } => Some(LockCtx {
            origin: path.clone(),
            path: crate::image::lock::IMAGE_LOCK_PATH,
            packages: lock.packages.len(),
            sha256: crate::image::specs::sha256_hex(text.as_bytes()),
            torch_path: crate::image::lock::IMAGE_LOCK_TORCH_PATH,
            torch_packages: lock.step(crate::image::lock::Step::Torch).count(),
            pins_packages: lock.step(crate::image::lock::Step::Pins).count(),
            pins_path: crate::image::lock::IMAGE_LOCK_PINS_PATH,
            named_packages: lock
                .step(crate::image::lock::Step::Pins)
                .filter(|(name, _)| named.contains(name.as_str()))
                .count(),
            deps_path: crate::image::lock::IMAGE_LOCK_DEPS_PATH,
            deps_packages: lock
                .step(crate::image::lock::Step::Pins)
                .filter(|(name, _)| !named.contains(name.as_str()))
                .count(),
            extra_index: if torch_index == pins_index {
                String::new()
            } else {
                torch_index.to_string()
            },
        }),
        _ => None,
    }
}

/// The template context: what the template sees of the spec, the options,
/// the resolved wheel and base, the notes, the labels and the lock.
fn template_context(
    spec: &LoadedSpec,
    opts: &RenderOptions,
    r: &Resolved,
    notes: &[String],
    labels: &BTreeMap<String, String>,
    lock: Option<LockCtx>,
) -> Ctx {
    let s = &spec.spec;
    let wheel = r.wheel;
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
    Ctx {
        profile: spec.name.clone(),
        description: s.description.clone(),
        imgctl_version: env!("CARGO_PKG_VERSION"),
        spec_origin: spec.origin.clone(),
        spec_sha256: spec.sha256.clone(),
        base_image: r.base_image.clone(),
        spec_base_image: r.spec_base.clone(),
        base_overridden: r.base_overridden,
        cuda: s.cuda.clone(),
        expect_python: if r.base_overridden {
            String::new()
        } else {
            s.python.clone()
        },
        python: s.python.clone(),
        torch: TorchCtx {
            version: wheel.torch.to_string(),
            variant: wheel.variant.to_string(),
            requirement: compat::torch_requirement(wheel, &r.torch_index),
            index: r.torch_index.clone(),
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
        labels: labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        ca_cert: opts.ca_cert.is_some(),
        buildkit: opts.buildkit,
        cache_key: crate::image::specs::sha256_hex(r.base_image.as_bytes())[..12].to_string(),
        ca_cert_build_only: opts.ca_cert_build_only.is_some(),
        notes: notes.iter().map(|n| wrap(n, 74)).collect(),
        files: FilesCtx {
            imgctl: IMGCTL_BINARY_PATH,
            rootfs: ROOTFS_DIR,
            ca_cert: CA_CERT_PATH,
            uv_requirements: UV_REQUIREMENTS_PATH,
            pip_lock: PIP_LOCK_PATH,
            pip_lock_torch: PIP_LOCK_TORCH_PATH,
            pip_lock_pins: PIP_LOCK_PINS_PATH,
            pip_lock_deps: PIP_LOCK_DEPS_PATH,
        },
        lock,
    }
}

/// The template `spec` renders with, for the build's provenance: where it
/// is (a path, or `imgctl:images/workstation.Dockerfile.j2` when bundled)
/// and its bytes; `None` when a user template cannot be read (the render
/// says why).
pub fn template_source(spec: &LoadedSpec) -> Option<(String, Vec<u8>)> {
    match (&spec.spec.template, &spec.dir) {
        (Some(t), Some(dir)) => {
            let path = dir.join(t);
            let text =
                crate::sys::fs::read_regular_text(&path, crate::image::specs::MAX_SPEC_BYTES)
                    .ok()?;
            Some((path.display().to_string(), text.into_bytes()))
        }
        _ => Some((
            "imgctl:images/workstation.Dockerfile.j2".to_string(),
            WORKSTATION_TEMPLATE.as_bytes().to_vec(),
        )),
    }
}

/// The Dockerfile: the spec's own template (next to the spec) or the bundled
/// one, rendered with `ctx`; `Err` also when a line is too long for Docker.
fn render_dockerfile(spec: &LoadedSpec, ctx: &Ctx) -> Result<String, RenderError> {
    let (template_name, template_source, user_template) = match (&spec.spec.template, &spec.dir) {
        (Some(t), Some(dir)) => {
            let path = dir.join(t);
            let text =
                crate::sys::fs::read_regular_text(&path, crate::image::specs::MAX_SPEC_BYTES)
                    .map_err(|error| RenderError::TemplateUnreadable {
                        path: path.display().to_string(),
                        error,
                    })?;
            (path.display().to_string(), text, true)
        }
        _ => (
            "images/workstation.Dockerfile.j2".to_string(),
            WORKSTATION_TEMPLATE.to_string(),
            false,
        ),
    };
    let dockerfile = render_template(&template_name, &template_source, ctx).map_err(|e| {
        if user_template {
            RenderError::UserTemplate(e)
        } else {
            RenderError::BundledTemplate(e)
        }
    })?;
    // Docker's Dockerfile parser reads lines of at most 64 KiB; a longer one
    // would fail the build with a confusing parser error.
    if let Some((i, line)) = dockerfile
        .lines()
        .enumerate()
        .find(|(_, l)| l.len() >= DOCKERFILE_LINE_MAX)
    {
        let start: String = line.chars().take(40).collect();
        return Err(RenderError::LineTooLong {
            line: i + 1,
            len: line.len(),
            start: crate::error::printable(&start).into_owned(),
        });
    }
    Ok(dockerfile)
}

/// The build context's files besides the Dockerfile and the imgctl binary:
/// the image's scripts and configuration, the proxy CA, uv's requirements
/// (BuildKit with a fresh lock) and the lock's files.
fn context_files(
    opts: &RenderOptions,
    lock_state: &crate::image::lock::LockState,
    named: &BTreeSet<String>,
) -> Vec<ContextFile> {
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
        ContextFile {
            path: format!("{ROOTFS_DIR}etc/jupyter/labconfig/page_config.json"),
            mode: 0o644,
            contents: JUPYTER_PAGE_CONFIG.as_bytes().to_vec(),
        },
    ];
    if let Some(ca) = &opts.ca_cert {
        files.push(ContextFile {
            path: CA_CERT_PATH.to_string(),
            mode: 0o644,
            contents: ca.clone(),
        });
    }
    if opts.buildkit && matches!(lock_state, crate::image::lock::LockState::Fresh { .. }) {
        files.push(ContextFile {
            path: UV_REQUIREMENTS_PATH.to_string(),
            mode: 0o644,
            contents: UV_REQUIREMENTS.as_bytes().to_vec(),
        });
    }
    if let crate::image::lock::LockState::Fresh { text, lock, path } = lock_state {
        files.push(ContextFile {
            path: PIP_LOCK_PATH.to_string(),
            mode: 0o644,
            contents: text.as_bytes().to_vec(),
        });
        use crate::image::lock::Step;
        for (context_path, contents) in [
            (PIP_LOCK_TORCH_PATH, lock.step_text(Step::Torch, path)),
            (
                PIP_LOCK_DEPS_PATH,
                lock.part_text(Step::Pins, "dependencies", path, |n| !named.contains(n)),
            ),
            (
                PIP_LOCK_PINS_PATH,
                lock.part_text(Step::Pins, "named pins", path, |n| named.contains(n)),
            ),
        ] {
            files.push(ContextFile {
                path: context_path.to_string(),
                mode: 0o644,
                contents: contents.into_bytes(),
            });
        }
    }
    files
}
