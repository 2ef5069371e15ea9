//! referrer_bundle: never a panic (imgctl::invariants::referrer_bytes).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    imgctl::invariants::referrer_bytes(data);
});
