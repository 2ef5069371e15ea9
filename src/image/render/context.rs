//! The template context: what a Dockerfile template can see, field by field
//! (serialized as the template sees it).
//!
//! Plain data; [`super::render`] fills it, [`super::template`] checks and
//! renders it. Its field names are the template's variable names, part of the
//! contract with user templates.
use serde::Serialize;

#[derive(Serialize)]
pub(super) struct UserCtx {
    pub(super) name: String,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) sudo: bool,
}

#[derive(Serialize)]
pub(super) struct TorchCtx {
    pub(super) version: String,
    pub(super) variant: String,
    pub(super) index: String,
    pub(super) requirement: String,
    pub(super) cuda: String,
    pub(super) cuda_runtime: String,
    pub(super) cudnn: String,
    pub(super) nccl: String,
    pub(super) triton: String,
    pub(super) source: String,
}

#[derive(Serialize)]
pub(super) struct FilesCtx {
    pub(super) imgctl: &'static str,
    pub(super) rootfs: &'static str,
    pub(super) ca_cert: &'static str,
    pub(super) uv_requirements: &'static str,
    pub(super) pip_lock: &'static str,
    pub(super) pip_lock_torch: &'static str,
    pub(super) pip_lock_pins: &'static str,
    pub(super) pip_lock_deps: &'static str,
}

/// The fresh lock the image installs with (`lock` is null in the template without one).
#[derive(Serialize)]
pub(super) struct LockCtx {
    /// Where it was read (`images/cu124.lock`).
    pub(super) origin: String,
    /// Its path in the image.
    pub(super) path: &'static str,
    /// Number of packages.
    pub(super) packages: usize,
    /// sha256 of the file.
    pub(super) sha256: String,
    /// Where the image keeps the torch step's requirements (with hashes).
    pub(super) torch_path: &'static str,
    /// Packages of the torch step.
    pub(super) torch_packages: usize,
    /// Packages of the pins step (both of its layers).
    pub(super) pins_packages: usize,
    /// Where the image keeps the requirements (with hashes) of the pins
    /// step's packages that the spec names: the last pip layer.
    pub(super) pins_path: &'static str,
    /// Packages the spec names in the pins step.
    pub(super) named_packages: usize,
    /// Where the image keeps the requirements (with hashes) of the rest of
    /// the pins step, what the named pins need: the pip layer before theirs,
    /// kept apart so that a changed pin whose dependencies stay rebuilds only
    /// the small layer of the named pins.
    pub(super) deps_path: &'static str,
    /// Packages of the pins step that the spec does not name.
    pub(super) deps_packages: usize,
    /// torch's index when the pip layer installs from another one (empty
    /// otherwise): a package of the pins step may have been resolved, and
    /// hashed, from it.
    pub(super) extra_index: String,
}

#[derive(Serialize)]
pub(super) struct Ctx {
    pub(super) profile: String,
    pub(super) description: String,
    pub(super) imgctl_version: &'static str,
    pub(super) spec_origin: String,
    pub(super) spec_sha256: String,
    pub(super) base_image: String,
    pub(super) spec_base_image: String,
    pub(super) base_overridden: bool,
    pub(super) cuda: String,
    pub(super) expect_python: String,
    pub(super) python: String,
    pub(super) torch: TorchCtx,
    pub(super) check_pins: String,
    /// JSON for `IMGCTL_VERIFY_PINS` in the image: the versions `imgctl verify`
    /// holds the loaded torch and CUDA libraries to inside it.
    pub(super) verify_pins: String,
    pub(super) pip: Vec<String>,
    pub(super) pip_index_url: String,
    pub(super) apt: Vec<String>,
    pub(super) user: UserCtx,
    pub(super) ports: Vec<u16>,
    pub(super) labels: Vec<(String, String)>,
    pub(super) ca_cert: bool,
    /// The BuildKit variant (cache mounts).
    pub(super) buildkit: bool,
    /// Names the apt cache mounts per base image (one distro's lists and
    /// packages never meet another's).
    pub(super) cache_key: String,
    /// A build-only proxy CA is mounted into the downloading steps as the
    /// BuildKit secret [`super::CA_CERT_SECRET_ID`].
    pub(super) ca_cert_build_only: bool,
    pub(super) notes: Vec<Vec<String>>,
    pub(super) files: FilesCtx,
    pub(super) lock: Option<LockCtx>,
}
