//! Closing (Linux `protocol.c`'s DATA_FIN handling): our DATA_FIN sent
//! after the queued data and retransmitted until DATA_ACKed (its timers are
//! in `timers.rs`), the peer's DATA_FIN delivered in data sequence order,
//! and the subflows closed once both are done. After a fallback the single
//! subflow's FIN carries it.

use super::Connection;
use crate::tcp::{Event, State};
use mptun_time::Duration;

/// How long our DATA_FIN may go unacknowledged before the connection is
/// given up with MP_FASTCLOSE (Linux `mptcp_close_timeout`, by default
/// `TCP_TIMEWAIT_LEN`).
pub(crate) const MPTCP_CLOSE_TIMEOUT: Duration = Duration::from_secs(60);

impl Connection {
    /// Our DATA_FIN waits for a DATA_ACK at the connection level: all data
    /// before it was sent, nothing waits for reinjection, and the
    /// connection did not fall back (then the subflow's FIN carries it).
    pub(super) fn data_fin_pending(&self) -> bool {
        let tx = &self.tx;
        tx.fin.seq.is_some_and(|fin| !tx.fin.acked && tx.nxt == fin && tx.reinject.is_empty()) && !self.mode.infinite()
    }

    /// After a fallback the subflow's FIN carries the DATA_FIN: once all
    /// data is sent, the single subflow closes.
    pub(super) fn fallback_close(&mut self) {
        if !self.mode.infinite() || self.tx.fin.seq != Some(self.tx.nxt) {
            return;
        }
        if let Some(slot) = self.subflows.live_mut().next() {
            if matches!(slot.tcp.state(), State::Established | State::CloseWait) {
                slot.tcp.close();
            }
        }
    }

    /// The peer's DATA_FIN, once every byte before it arrived: the stream
    /// ends for the application, and the subflow `idx` acknowledges it.
    pub(super) fn peer_data_fin_in_order(&mut self, idx: usize) {
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        let rx = &mut self.rx;
        if let Some(fin) = rx.peer_fin {
            if !rx.peer_fin_done && rx.nxt == fin {
                rx.nxt += 1;
                rx.peer_fin_done = true;
                self.events.push_back(Event::PeerFin);
                slot.tcp.request_ack();
            }
        }
    }

    /// Both DATA_FINs done: close the subflows.
    pub(super) fn close_when_done(&mut self) {
        if self.tx.fin.acked && self.rx.peer_fin_done {
            for slot in self.subflows.live_mut() {
                if matches!(slot.tcp.state(), State::Established | State::CloseWait) {
                    slot.tcp.close();
                }
            }
        }
    }
}
