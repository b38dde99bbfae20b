//! The stateful target: a client and a server `Endpoint` under a hostile
//! wire, driven by the input. The harness (and its invariants) is the
//! `mptun-fuzz` crate, which `cargo test -p mptun-fuzz` runs on stable over
//! the checked-in corpus; see docs/fuzzing.md.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mptun_fuzz::run(data);
});
