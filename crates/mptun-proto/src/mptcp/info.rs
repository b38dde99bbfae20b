//! What a connection tells about itself: the `MPTCP_INFO`-like snapshot
//! reports and the runtime read, the counters of the connection and its
//! subflows, and a one-line dump of the internal state for debugging.

use super::{Connection, JoinState, Mode};
use crate::counters::Counters;
use crate::seq::DataSeq;
use std::net::SocketAddr;

/// A snapshot like Linux's `MPTCP_INFO` plus per-subflow `TCP_INFO`.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionInfo {
    /// MPTCP, plain TCP, or not decided yet.
    pub mode: Mode,
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
    /// Backup subflow: carries data only when no other can.
    pub backup: bool,
    /// Stale after an RTO streak: avoided, its data reinjected elsewhere.
    pub stale: bool,
    /// Usable for data (the initial subflow, or a join that completed).
    pub joined: bool,
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
        self.rcv_buf.mem_charged() + self.subflows.iter().flatten().map(|(sf, _)| sf.recv_mem()).sum::<usize>()
    }

    /// Counters of the connection and all its subflows.
    pub fn counters(&self) -> Counters {
        let mut c = self.shared.counters;
        for (sf, _) in self.subflows.iter().flatten() {
            c.add(&sf.counters());
        }
        c
    }

    /// A snapshot of the connection and its subflows, for reports and the
    /// runtime's `MPTCP_INFO`-like query.
    pub fn info(&self) -> ConnectionInfo {
        ConnectionInfo {
            mode: self.shared.mode,
            fully_established: self.shared.fully_established,
            local_token: self.local_token(),
            remote_token: self.remote_token(),
            bytes_acked: self.shared.snd_una - self.shared.tx_base,
            bytes_received: self.rcv_buf.next(),
            subflows: self
                .subflows
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
                .map(|(i, (sf, ext))| SubflowInfo {
                    id: i,
                    local: sf.local(),
                    remote: sf.remote(),
                    backup: ext.backup,
                    stale: ext.stale,
                    joined: matches!(ext.join, JoinState::Joined | JoinState::Initial),
                    tcp: sf.info(),
                    avg_pacing_rate: self.sched.avg_pacing_rate(i),
                    penalized: ext.penalized,
                })
                .collect(),
        }
    }

    /// Internal state for debugging a stuck connection.
    pub fn debug_state(&self) -> String {
        let maps: Vec<_> = self
            .subflows
            .iter()
            .flatten()
            .map(|(sf, e)| {
                format!(
                    "join={:?} stale={} tx_maps={} rx_map={:?} rx_ahead={:?} queued={} recv_ready={} recv_off={}",
                    e.join,
                    e.stale,
                    e.tx_maps.len(),
                    e.rx_map,
                    e.rx_ahead.iter().take(4).collect::<Vec<_>>(),
                    sf.send_queued(),
                    sf.recv_ready(),
                    sf.recv_offset()
                )
            })
            .collect();
        format!(
            "snd_una={} snd_nxt={} write_seq={} wnd_end={} rcv_nxt={} rx_base={:?} ofo={} ready={} recv_limit={} send_limit={} reinject={:?} fin={:?}/{} peer_fin={:?} {:?}",
            self.shared.snd_una - self.shared.tx_base,
            self.shared.snd_nxt - self.shared.tx_base,
            self.shared.write_seq - self.shared.tx_base,
            self.shared.wnd_end.saturating_sub(self.shared.tx_base),
            self.shared.rcv_nxt - self.shared.rx_base.unwrap_or(DataSeq(0)),
            self.shared.rx_base.is_some(),
            self.rcv_buf.ofo_len(),
            self.rcv_buf.ready_len(),
            self.shared.recv_limit,
            self.send_limit,
            self.reinject,
            self.shared.data_fin_seq.map(|f| f - self.shared.tx_base),
            self.shared.data_fin_acked,
            self.shared.peer_data_fin,
            maps
        )
    }
}
