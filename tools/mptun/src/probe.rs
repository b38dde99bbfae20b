//! What either stack says about a connection and its subflows, in one
//! shape: mptun's streams ([`crate::conn`]) and the kernel's sockets
//! ([`crate::kernel`]) are both turned into a [`Probe`], so both are
//! measured and reported with identical accounting.

use std::net::SocketAddr;

/// One subflow as either stack reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SubflowProbe {
    pub(crate) id: usize,
    pub(crate) local: Option<SocketAddr>,
    pub(crate) remote: Option<SocketAddr>,
    pub(crate) bytes_acked: u64,
    pub(crate) bytes_received: u64,
    pub(crate) bytes_retrans: u64,
    /// Retransmitted segments (kernel: `tcpi_total_retrans`; mptun: bytes / MSS).
    pub(crate) retrans_segs: u64,
    /// Congestion window, packets.
    pub(crate) cwnd: u64,
    pub(crate) mss: u64,
    /// The peer's receive window, bytes (`tcpi_snd_wnd`).
    pub(crate) snd_wnd: u64,
    /// Path MTU (`tcpi_pmtu`).
    pub(crate) pmtu: u64,
    pub(crate) srtt_us: u64,
    pub(crate) rttvar_us: u64,
    /// Pacing rate, payload bytes per second (`tcpi_pacing_rate`; `u64::MAX`: unpaced).
    pub(crate) pacing_rate: u64,
    /// BBR's model when the subflow runs BBR: (bandwidth estimate in bytes
    /// per second, min RTT in µs), what `ss -ti` prints as `bbr:(bw:…,mrtt:…)`
    /// (the kernel's from `TCP_CC_INFO`, plain TCP sockets only).
    pub(crate) bbr: Option<(u64, u32)>,
    /// Slow-subflow halvings (mptun's penalise schedulers).
    pub(crate) penalized: u64,
    /// TCP state, Linux's names (`ESTABLISHED`, `SYN_SENT`, ...).
    pub(crate) state: &'static str,
    /// Whether it ever completed its handshake (synchronized now, or has
    /// moved data): only those count as subflows in use.
    pub(crate) established: bool,
    /// Closed by the path manager mid-connection (mptun): its close holds
    /// nothing up (the kernel lets such a subflow go on its own).
    pub(crate) withdrawn: bool,
}

/// A snapshot of a connection.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Probe {
    /// `mptcp` or `tcp` (never offered, or fell back).
    pub(crate) mode: &'static str,
    pub(crate) subflows: Vec<SubflowProbe>,
    /// Retransmitted segments over the connection's life: the sum of the subflows'.
    pub(crate) retrans_segs: u64,
}

impl Probe {
    /// Subflows in use: those that completed their handshake.
    pub(crate) fn established(&self) -> usize {
        self.subflows.iter().filter(|s| s.established).count()
    }
}
