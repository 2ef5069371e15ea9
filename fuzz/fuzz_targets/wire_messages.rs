//! The rendezvous and fleet messages a peer sends (a hello, rank 0's answer,
//! a node's report): refused, or decoded within their bounds; never a panic
//! (a forged report once crashed rank 0).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    imgctl::invariants::wire_messages(data);
});
