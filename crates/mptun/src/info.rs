//! What a stream reports about itself: the `MPTCP_INFO` + per-subflow
//! `TCP_INFO` of the runtime, taken from the core's own snapshot.

use std::net::SocketAddr;

pub use mptun_proto::mptcp::{ConnectionInfo, Mode, SubflowInfo};
use mptun_proto::Counters;

/// A connection-level snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamInfo {
    /// Where the first subflow started: the address `local_addr()` gives.
    pub local: SocketAddr,
    /// The peer of the first subflow, as `peer_addr()` gives it.
    pub remote: SocketAddr,
    /// Whether the handshake has completed (a connecting stream reports
    /// itself before it has): data can flow only when true.
    pub established: bool,
    /// MPTCP or plain TCP (never offered, refused, or fallen back), tokens,
    /// bytes, and every subflow's cwnd, srtt, pacing rate, bytes,
    /// retransmissions.
    pub conn: ConnectionInfo,
    /// The connection's counters, with the kernel's names.
    pub counters: Counters,
}

impl StreamInfo {
    /// Whether the connection runs MPTCP (false: plain TCP or fallback).
    pub fn is_mptcp(&self) -> bool {
        self.conn.mode == Mode::Mptcp
    }
}
