//! Label keys imgctl sets; `imgctl verify` and the build report read them.
//!
//! Names only: [`super::render`] decides the values.
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
