//! What a connection tells about itself: the `MPTCP_INFO`-like snapshot
//! reports and the runtime read, the counters of the connection and its
//! subflows, and a one-line dump of the internal state for debugging.

use super::fallback::Mode;
use super::Connection;
use crate::counters::Counters;
use crate::seq::DataSeq;
use std::net::SocketAddr;

/// A snapshot like Linux's `MPTCP_INFO` plus per-subflow `TCP_INFO`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionInfo {
    /// MPTCP, plain TCP, or not decided yet.
    pub mode: Mode,
    /// The connection's state ([`Connection::state`]).
    pub state: crate::tcp::State,
    /// Both keys are known to both sides: joins can be accepted and
    /// addresses announced.
    pub fully_established: bool,
    /// Our token (what the peer's MP_JOINs name), in MPTCP mode.
    pub local_token: Option<u32>,
    /// The peer's token, once its key is known.
    pub remote_token: Option<u32>,
    /// Data bytes the peer DATA_ACKed (`mptcpi_bytes_acked`): what reached
    /// its connection, whatever subflow carried it.
    pub bytes_acked: u64,
    /// Data bytes received in order (`mptcpi_bytes_received`).
    pub bytes_received: u64,
    /// Every live subflow.
    pub subflows: Vec<SubflowInfo>,
    /// The scheduler the connection runs (its `name()`), which for an
    /// accepted connection the listener or the stack chose.
    pub scheduler: &'static str,
    /// Time the connection had data to send that the peer's window did
    /// not admit (Linux's per-socket `tcpi_rwnd_limited`, at the data
    /// level): the receive-buffer stall a scheduler comparison reports.
    pub rwnd_limited: mptun_time::Duration,
}

/// One subflow in [`ConnectionInfo`].
#[derive(Clone, Debug, PartialEq)]
pub struct SubflowInfo {
    /// Index in the connection (stable for the subflow's life, what
    /// [`Connection::set_backup`] takes; like a file descriptor, a later
    /// subflow may get it once this one is gone).
    pub id: usize,
    /// Local address and port.
    pub local: SocketAddr,
    /// Peer address and port.
    pub remote: SocketAddr,
    /// Our address id for it, as the peer knows it (0: the initial
    /// subflow's address), what RM_ADDR names (`ss -M`'s `loc-id`).
    pub local_id: u8,
    /// The peer's address id for it (`rem-id`).
    pub remote_id: u8,
    /// Backup subflow: carries data only when no other can.
    pub backup: bool,
    /// Stale after an RTO streak: avoided, its data reinjected elsewhere.
    pub stale: bool,
    /// Usable for data (the initial subflow, or a join that completed).
    pub joined: bool,
    /// Closed by the path manager before the connection's end (address
    /// withdrawn, subflow destroyed): its close may never complete (its
    /// path may be gone), and nothing waits for it.
    pub withdrawn: bool,
    /// The subflow's own `TCP_INFO`.
    pub tcp: crate::tcp::TcpInfo,
    /// Scheduler's `avg_pacing_rate`, bytes/s.
    pub avg_pacing_rate: Option<u64>,
    /// Slow-subflow cwnd halvings applied to it.
    pub penalized: u64,
}

impl Connection {
    /// Memory the receive side holds, the connection's queue and every
    /// subflow's, charged per chunk like Linux's `truesize`. Bounded by
    /// twice the receive buffer plus a fixed slack for the connection and for
    /// each subflow (see `buf::mem_budget`).
    pub fn recv_mem(&self) -> usize {
        self.rx.buf().mem_charged() + self.subflows.live().map(|s| s.tcp.recv_mem()).sum::<usize>()
    }

    /// Counters of the connection and all its subflows.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        for s in self.subflows.live() {
            c.add(&s.tcp.counters());
        }
        self.sched.add_counters(&mut c);
        c
    }

    /// A snapshot of the connection and its subflows, for reports and the
    /// runtime's `MPTCP_INFO`-like query.
    pub fn info(&self) -> ConnectionInfo {
        ConnectionInfo {
            mode: self.mode(),
            state: self.state(),
            fully_established: self.hs.fully_established(),
            local_token: self.local_token(),
            remote_token: self.remote_token(),
            bytes_acked: self.tx.una() - self.tx.base(),
            bytes_received: self.rx.buf().next(),
            subflows: self
                .subflows
                .iter()
                .map(|(i, s)| SubflowInfo {
                    id: i,
                    local: s.tcp.local(),
                    remote: s.tcp.remote(),
                    local_id: s.mp.local_id(),
                    remote_id: s.mp.remote_id(),
                    backup: s.mp.backup(),
                    stale: s.mp.stale(),
                    joined: s.mp.join().usable(),
                    withdrawn: s.mp.withdrawn(),
                    tcp: s.tcp.info(),
                    avg_pacing_rate: self.sched.avg_pacing_rate(i),
                    penalized: s.mp.penalized(),
                })
                .collect(),
            scheduler: self.sched.name(),
            rwnd_limited: self.rwnd_limited(),
        }
    }

    /// Internal state for debugging a stuck connection.
    pub fn debug_state(&self) -> String {
        let maps: Vec<_> = self
            .subflows
            .live()
            .map(|s| {
                format!(
                    "join={:?} stale={} tx_maps={} rx_map={:?} rx_ahead={:?} queued={} recv_ready={} recv_off={}",
                    s.mp.join(),
                    s.mp.stale(),
                    s.mp.tx.maps().len(),
                    s.mp.rx.map(),
                    s.mp.rx.ahead().iter().take(4).collect::<Vec<_>>(),
                    s.tcp.send_queued(),
                    s.tcp.recv_ready(),
                    s.tcp.recv_offset()
                )
            })
            .collect();
        format!(
            "{} rcv_nxt={} rx_base={:?} ofo={} ready={} recv_limit={} {} peer_fin={:?} {:?}",
            self.tx.debug_summary(),
            self.rx.nxt() - self.rx.base().unwrap_or(DataSeq(0)),
            self.rx.base().is_some(),
            self.rx.buf().ofo_len(),
            self.rx.buf().ready_len(),
            self.rx.limit(),
            self.tx.debug_queues(),
            self.rx.peer_fin(),
            maps
        )
    }
}
