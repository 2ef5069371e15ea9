//! A docker config.json: the settings imgctl reads from it, or an error;
//! never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    imgctl::invariants::docker_config_text(text);
});
