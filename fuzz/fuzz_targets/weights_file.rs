//! A weights file (safetensors) read as `sample`, `--resume` and
//! `--init-from` read it: tensors, or an error; never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    imgctl::invariants::weights_bytes(data);
});
