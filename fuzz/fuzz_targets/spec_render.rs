//! Spec parsing and rendering: any text is either refused as a usage error or
//! renders a Dockerfile with exactly one FROM, no instruction the template does
//! not use, and no more RUN steps than the template has (an injected
//! instruction shows up as one of these).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    imgctl::invariants::spec_text(text);
});
