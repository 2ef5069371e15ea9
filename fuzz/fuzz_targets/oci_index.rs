//! A referrers list or referrers tag (an OCI image index) as a registry sends it: the descriptors inspect lists, each checked, or an error;
//! never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    imgctl::invariants::oci_index_bytes(data);
});
