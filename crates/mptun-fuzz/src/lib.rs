//! The stateful fuzz harness of mptun, in one place for both of its users:
//! the cargo-fuzz target `fuzz/fuzz_targets/endpoint.rs` (nightly, run by
//! hand for millions of inputs) and this crate's `tests/corpus.rs` (stable,
//! in CI: the checked-in corpus and a few thousand seeded inputs).
//!
//! One input is one world: a client and a server `Endpoint` (MPTCP with a
//! second address on each side so that joins happen, or plain TCP) with an
//! application on each end that writes a known byte pattern, reads what
//! arrives and closes. Each step, the input chooses to deliver, drop,
//! duplicate, reorder or corrupt a packet in flight, inject a packet (raw
//! bytes, a structured segment on a live 4-tuple with any MPTCP option, or
//! a frame of a real Linux MPTCP exchange rewritten onto a live subflow),
//! move virtual time on, or make an application stop reading, close or
//! abort. After every step:
//! - nothing panicked (the core's own assertions included);
//! - each connection's receive queues hold at most twice the configured
//!   buffer plus a fixed slack per queue, and an endpoint has no more
//!   connections than the SYNs it was sent allow;
//! - what an application read is a prefix of what its peer wrote: never a
//!   wrong byte, never a byte past the end. Forged packets lie about
//!   everything but the stream content (see `forge`), unless the input
//!   picks *liar* mode, where this check is off.
//!
//! Input format (`input.rs` reads it; bytes past the end read as zero):
//! three setup bytes (mode bits, transfer sizes, endpoint seed), then steps,
//! each an opcode byte and its operands. Nothing reads a clock or OS
//! entropy: an input replays identically.

#![forbid(unsafe_code)]

mod api;
mod forge;
mod input;
mod kernel;
mod observe;
mod world;

pub use forge::{C1, C2, PORT, S1, S2};
pub use world::{Stats, QUEUE_SLACK, RCV_BUF, SND_BUF};

/// Runs one input; panics when an invariant breaks.
pub fn run(data: &[u8]) -> Stats {
    world::World::run(data)
}
