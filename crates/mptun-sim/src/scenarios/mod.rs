//! Ready-made experiments. Each builds a [`Sim`](crate::Sim), runs it and
//! returns a serialisable report; the `mptun sim` command prints them.

pub mod aggregate;
pub mod bbr;
pub mod bottleneck;
pub mod cc_compare;
pub mod edt_rr;
pub mod failover;
pub mod fallback;
pub mod handover;
pub mod hystart;
pub mod network;
pub mod penalise;
pub mod scale;
pub mod sched_compare;
pub mod shared_bottleneck;
pub mod tcp_single;
pub mod transfer;

use std::net::IpAddr;

/// A host's 32-byte endpoint seed from a run's seed and a per-host salt.
pub(crate) fn seed32(seed: u64, salt: u8) -> [u8; 32] {
    let mut s = [salt; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    s
}

/// An address written as a literal in an experiment's definition.
pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal")
}
