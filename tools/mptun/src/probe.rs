//! What either stack says about a connection and its subflows, in one
//! shape: mptun's streams ([`crate::conn`]) and the kernel's sockets
//! ([`crate::kernel`]) are both turned into a [`Probe`], so both are
//! measured and reported with identical accounting.

use std::net::SocketAddr;

/// One subflow as either stack reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SubflowProbe {
    pub id: usize,
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_retrans: u64,
    /// Retransmitted segments (kernel: `tcpi_total_retrans`; mptun: bytes / MSS).
    pub retrans_segs: u64,
    /// Congestion window, packets.
    pub cwnd: u64,
    pub mss: u64,
    /// The peer's receive window, bytes (`tcpi_snd_wnd`).
    pub snd_wnd: u64,
    /// Path MTU (`tcpi_pmtu`).
    pub pmtu: u64,
    pub srtt_us: u64,
    pub rttvar_us: u64,
    /// Slow-subflow halvings (mptun's penalise schedulers).
    pub penalized: u64,
    /// TCP state, Linux's names (`ESTABLISHED`, `SYN_SENT`, ...).
    pub state: &'static str,
    /// Whether it ever completed its handshake (synchronized now, or has
    /// moved data): only those count as subflows in use.
    pub established: bool,
}

/// A snapshot of a connection.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Probe {
    /// `mptcp` or `tcp` (never offered, or fell back).
    pub mode: &'static str,
    pub subflows: Vec<SubflowProbe>,
    /// Retransmitted segments over the connection's life: the sum of the subflows'.
    pub retrans_segs: u64,
}

impl Probe {
    /// Subflows in use: those that completed their handshake.
    pub fn established(&self) -> usize {
        self.subflows.iter().filter(|s| s.established).count()
    }
}
