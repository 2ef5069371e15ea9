//! A checkpoint's state.json: read as `sample` and `--resume` read it, it is
//! refused or its model validates; it never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    imgctl::invariants::state_json_text(text);
});
