//! What one endpoint lets its peers and its application hold: every limit
//! that keeps memory and CPU bounded whatever a peer sends, each with Linux's
//! default where Linux has one and a counter that shows it was hit
//! (`docs/mptcp.md`, "Limits").

use super::IP_LOCAL_PORT_RANGE;
use crate::mptcp::JoinLimits;
use core::ops::RangeInclusive;

/// Endpoint-wide limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Local ports given to connections and subflows that ask for port 0
    /// (`net.ipv4.ip_local_port_range`); once all are used towards one
    /// destination, connecting fails with `AddrNotAvailable`.
    pub local_port_range: RangeInclusive<u16>,
    /// Connections the endpoint holds, in any state. At the limit a
    /// connect fails (`TooManyConnections`) and a SYN is dropped
    /// (`MptunConnLimit`, `TcpExtListenDrops`). No Linux default: the
    /// kernel's bound is memory (`tcp_mem`) and `fs.file-max`.
    pub max_connections: usize,
    /// Passive connections whose handshake is not done
    /// (`net.ipv4.tcp_max_syn_backlog`, Linux: max(128, ehash entries /
    /// 128), 128 on a small host). A SYN beyond it is dropped
    /// (`TcpExtTCPReqQFullDrop`, `TcpExtListenDrops`).
    pub max_syn_backlog: usize,
    /// Answer SYNs with SYN cookies once the half-open queue is full
    /// (`net.ipv4.tcp_syncookies`, Linux default 1: only then), instead of
    /// dropping them (`TcpExtSyncookiesSent`, `TcpExtSyncookiesRecv`,
    /// `TcpExtSyncookiesFailed`).
    pub syncookies: bool,
    /// Established passive connections waiting for `accept`
    /// (`net.core.somaxconn`, Linux default 4096). Beyond it the connection
    /// is reset (`TcpExtListenOverflows`, `TcpExtListenDrops`).
    pub max_accept_backlog: usize,
    /// MP_JOIN subflows of one connection whose handshake is not done
    /// (SYN-RECEIVED), at most, below what the `subflows` limit lets the
    /// connection take anyway. `None` (the default): no bound of its own,
    /// as Linux, which answers every join SYN the limit has room for at
    /// once; a kernel client with four `subflow` endpoints sends its join
    /// SYNs together and retries a refused one only a second later. Beyond
    /// it the join is refused with a RST (`MptunMPJoinHalfOpenLimit`). A
    /// flood of joins is held by [`Limits::max_join_syn_per_sec`] and the
    /// `subflows` limit, each half-open join costing one subflow slot until
    /// its SYN-ACK retries give up.
    pub max_half_open_joins: Option<u8>,
    /// MP_JOIN SYNs one connection (token) takes per second; more are
    /// refused with a RST (`MptunMPJoinRateLimited`). No Linux limit: it
    /// bounds the CPU a peer that knows a token can spend (each join costs
    /// an HMAC and a subflow).
    pub max_join_syn_per_sec: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            local_port_range: IP_LOCAL_PORT_RANGE,
            max_connections: 65_536,
            max_syn_backlog: 128,
            syncookies: true,
            max_accept_backlog: 4096,
            max_half_open_joins: None,
            max_join_syn_per_sec: 32,
        }
    }
}

impl Limits {
    /// The per-connection part, what `Connection::accept_join` checks.
    pub(crate) fn join_limits(&self) -> JoinLimits {
        JoinLimits { max_half_open: self.max_half_open_joins, max_syn_per_sec: self.max_join_syn_per_sec }
    }
}
