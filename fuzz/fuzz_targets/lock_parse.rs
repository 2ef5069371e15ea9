//! The pip lock parser: any text is refused or yields only `name==version`
//! packages; it never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    imgctl::invariants::lock_text(text);
});
