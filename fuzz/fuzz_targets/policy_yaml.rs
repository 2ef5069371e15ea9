//! policy_yaml: never a panic (imgctl::invariants::policy_text).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        imgctl::invariants::policy_text(text);
    }
});
