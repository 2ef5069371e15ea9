//! A docker context's meta.json as the current context: an engine endpoint
//! imgctl can connect to, or an error; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    imgctl::invariants::docker_context_text(text);
});
