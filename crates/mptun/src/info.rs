//! What a stream reports about itself: the `MPTCP_INFO` + per-subflow
//! `TCP_INFO` of the runtime, taken from the core's own snapshot.

use std::net::SocketAddr;

pub use mptun_proto::mptcp::{ConnectionInfo, Mode, SubflowInfo};
use mptun_proto::Counters;

/// A connection-level snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamInfo {
    pub local: SocketAddr,
    pub remote: SocketAddr,
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
