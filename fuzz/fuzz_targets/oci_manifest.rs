//! An image manifest as a registry sends it (an artifact's): every descriptor checked, or an error;
//! never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    imgctl::invariants::oci_manifest_bytes(data);
});
