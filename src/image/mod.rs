//! The build wing: an image from a spec to a signed verdict. Specs
//! (`images/*.yaml`, [`specs`]) are rendered to Dockerfiles ([`render`]);
//! their Python packages are pinned in lock files ([`lock`]); a built image's
//! contents are listed as CycloneDX ([`sbom`]), its provenance and verify
//! verdict are statements ([`attest`]) signed with DSSE and Sigstore bundles
//! ([`sign`]), and pushed to and read from registries as referrers ([`oci`]).
//!
//! Part: the build wing (`docs/architecture.md`).
pub mod attest;
pub mod fit;
pub mod lock;
pub mod oci;
pub mod render;
pub mod sbom;
pub mod sign;
pub mod specs;
