//! Closing (Linux `protocol.c`'s DATA_FIN handling): our DATA_FIN sent
//! after the queued data and retransmitted until DATA_ACKed, the peer's
//! DATA_FIN delivered in data sequence order, and the subflows closed once
//! both are done. After a fallback the single subflow's FIN carries it.

use super::Connection;
use crate::tcp::config::TCP_TIMEOUT_INIT;
use crate::tcp::{Event, State};
use mptun_time::{Duration, Instant};

/// How long our DATA_FIN may go unacknowledged before the connection is
/// given up with MP_FASTCLOSE (Linux `mptcp_close_timeout`, by default
/// `TCP_TIMEWAIT_LEN`).
pub(crate) const MPTCP_CLOSE_TIMEOUT: Duration = Duration::from_secs(60);

impl Connection {
    /// Our DATA_FIN: once all data is sent (and nothing waits for
    /// reinjection), put it on a pure ACK, again after a backed-off RTO
    /// until it is DATA_ACKed.
    pub(super) fn data_fin_progress(&mut self, now: Instant) {
        let sh = &mut self.shared;
        let Some(fin) = sh.data_fin_seq else { return };
        if sh.infinite {
            // After a fallback the subflow's FIN carries the DATA_FIN: no
            // connection-level retries (a timer left due would spin).
            self.data_fin_rto = None;
            if sh.snd_nxt == fin {
                if let Some((sf, _)) = self.subflows.iter_mut().flatten().next() {
                    if matches!(sf.state(), State::Established | State::CloseWait) {
                        sf.close();
                    }
                }
            }
            return;
        }
        if sh.data_fin_acked || sh.snd_nxt != fin || !self.reinject.is_empty() {
            self.data_fin_rto = None;
            return;
        }
        if self.data_fin_first.is_some_and(|t| now.saturating_duration_since(t) >= MPTCP_CLOSE_TIMEOUT) {
            // Retries are bounded: the peer is gone.
            self.data_fin_rto = None;
            self.shared.counters.mptun_data_fin_timeout += 1;
            self.abort();
            return;
        }
        let due = self.data_fin_rto.is_none_or(|t| t <= now);
        if due {
            self.data_fin_first.get_or_insert(now);
            sh.data_fin_due = true;
            let rto = self.subflows.iter().flatten().map(|(s, _)| s.info().rto).min().unwrap_or(TCP_TIMEOUT_INIT);
            let rto = rto * (1 << self.data_fin_backoff.min(6));
            let deadline = self.data_fin_first.map_or(now + rto, |t| t + MPTCP_CLOSE_TIMEOUT);
            self.data_fin_rto = Some((now + rto).min(deadline));
            self.data_fin_backoff += 1;
            if let Some((sf, _)) = self.best_ack_subflow() {
                sf.request_ack();
            }
        }
    }

    /// The peer's DATA_FIN, once every byte before it arrived: the stream
    /// ends for the application, and the subflow `idx` acknowledges it.
    pub(super) fn peer_data_fin_in_order(&mut self, idx: usize) {
        let Some((sf, _)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let sh = &mut self.shared;
        if let Some(fin) = sh.peer_data_fin {
            if !sh.peer_data_fin_done && sh.rcv_nxt == fin {
                sh.rcv_nxt += 1;
                sh.peer_data_fin_done = true;
                self.events.push_back(Event::PeerFin);
                sf.request_ack();
            }
        }
    }

    /// Both DATA_FINs done: close the subflows.
    pub(super) fn close_when_done(&mut self) {
        if self.shared.data_fin_acked && self.shared.peer_data_fin_done {
            for (sf, _) in self.subflows.iter_mut().flatten() {
                if matches!(sf.state(), State::Established | State::CloseWait) {
                    sf.close();
                }
            }
        }
    }
}
