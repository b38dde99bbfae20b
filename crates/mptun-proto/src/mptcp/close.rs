//! Closing (Linux `protocol.c`'s DATA_FIN handling): our DATA_FIN sent
//! after the queued data and retransmitted until DATA_ACKed (its timers are
//! in `timers.rs`), the peer's DATA_FIN delivered in data sequence order,
//! and the subflows closed once both are done. (After a fallback the
//! single subflow's FIN carries it: `fallback.rs`.)

use super::slot::JoinState;
use super::Connection;
use crate::tcp::{Event, State};
use mptun_time::{Duration, Instant};

/// How long our DATA_FIN may go unacknowledged before the connection is
/// given up with MP_FASTCLOSE (Linux `mptcp_close_timeout`, by default
/// `TCP_TIMEWAIT_LEN`).
pub(crate) const MPTCP_CLOSE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long our first DATA_FIN may wait for joins of ours still in their
/// handshake (a join SYN lost once is sent again after 1 s).
pub(crate) const FIN_HOLD_MAX: Duration = Duration::from_secs(2);

impl Connection {
    /// Our DATA_FIN waits for a DATA_ACK at the connection level: all data
    /// before it was sent, nothing waits for reinjection, and the
    /// connection did not fall back (then the subflow's FIN carries it).
    pub(super) fn data_fin_pending(&self) -> bool {
        let tx = &self.tx;
        let fin = tx.fin();
        fin.seq().is_some_and(|seq| !fin.acked() && tx.nxt() == seq && !tx.reinjection_pending())
            && !self.mode.infinite()
    }

    /// Until when our first DATA_FIN waits, `None` when it need not. A
    /// Linux peer takes no join once it has our DATA_FIN (its msk left
    /// ESTABLISHED), so a client that writes a request and shuts its side
    /// down (a download's usual start) would keep one path for the whole
    /// answer if its DATA_FIN went out before its joins: it waits while the
    /// path manager still has joins to open once fully established, or
    /// joins of ours are in their handshake (to the fourth ACK: a third ACK
    /// on a slow path may arrive after a DATA_FIN on a fast one), for at
    /// most [`FIN_HOLD_MAX`] from the first look. Joins that could not
    /// start any more (see [`Connection::own_joins_closed`]) hold nothing.
    pub(super) fn data_fin_hold(&mut self, now: Instant) -> Option<Instant> {
        if self.own_joins_closed() {
            return None;
        }
        let until = self.tx.fin_mut().hold_until(now + FIN_HOLD_MAX);
        let in_handshake = self
            .subflows
            .live()
            .any(|s| matches!(s.mp.join(), JoinState::ClientSynSent { .. } | JoinState::ClientAwaitAck { .. }));
        let pm = &self.cfg.mptcp.pm;
        let to_open = !self.hs.fully_established()
            && !self.hs.server()
            && pm.max_subflows > 0
            && (pm.endpoints.iter().any(|e| e.flags.subflow) || pm.subflows_per_pair > 1);
        let joining = in_handshake || self.paths.joins_pending() > 0 || to_open;
        (joining && now < until).then_some(until)
    }

    /// The peer's DATA_FIN, once every byte before it arrived: the stream
    /// ends for the application, and the subflow `idx` acknowledges it.
    pub(super) fn peer_data_fin_in_order(&mut self, idx: usize) {
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        if self.rx.take_peer_fin_in_order() {
            self.events.push_back(Event::PeerFin);
            slot.tcp.request_ack();
        }
    }

    /// Both DATA_FINs done: close the subflows.
    pub(super) fn close_when_done(&mut self) {
        if self.tx.fin().acked() && self.rx.peer_fin_done() {
            for slot in self.subflows.live_mut() {
                if matches!(slot.tcp.state(), State::Established | State::CloseWait) {
                    slot.tcp.close();
                }
            }
        }
    }
}
