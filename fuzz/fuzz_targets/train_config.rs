//! The training config: any YAML over any preset is refused as a usage error
//! or validates; it never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    imgctl::invariants::train_config_text(text);
});
