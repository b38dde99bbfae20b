//! ICMP destination-unreachable and time-exceeded about one of our
//! segments (RFC 1122 4.2.3.9, RFC 5927; Linux `tcp_v4_err`,
//! `tcp_v6_err`, `tcp_req_err`). "Too big" is path-MTU discovery's
//! (`pmtu`).
//!
//! A handshake ends at once with the error, as Linux's `connect` fails
//! with `ENETUNREACH` instead of waiting out its SYN retries; a half-open
//! passive one is dropped only for net/host unreachable and time exceeded
//! (Linux `tcp_req_err`'s `abort`). A synchronized connection takes none
//! of them as fatal: the error is remembered (Linux `sk_err_soft`) and is
//! what the connection reports if its retransmissions time out, forgotten
//! when the peer acknowledges new data. Linux's RFC 6069 RTO revert on
//! net/host unreachable is not done: the backoff runs as without ICMP.

use super::{Event, State, Subflow};
use crate::seq::Seq;
use mptun_wire::icmp::Unreachable;

impl Subflow {
    /// An ICMP error of kind `why` quoting one of our segments with
    /// sequence number `seq`. Believed only if `seq` lies in
    /// `snd_una..=snd_nxt` (exactly our ISN while our SYN-ACK is
    /// unanswered), else counted (`OutOfWindowIcmps`) and ignored. Returns
    /// whether the subflow closed on it.
    pub fn handle_unreachable(&mut self, seq: Seq, why: Unreachable) -> bool {
        let in_window = match self.state {
            State::Closed | State::TimeWait => return false,
            State::SynReceived => seq == self.iss,
            _ => seq.ge(self.snd_una) && seq.le(self.snd_nxt),
        };
        if !in_window {
            self.counters.tcp_ext_out_of_window_icmps += 1;
            return false;
        }
        tracing::debug!(local = %self.local, remote = %self.remote, ?why, state = ?self.state, "ICMP error");
        match self.state {
            State::SynSent => {
                self.counters.tcp_attempt_fails += 1;
                self.counters.mptun_icmp_handshake_aborts += 1;
                self.enter_closed(Some(Event::Unreachable(why)));
                true
            }
            State::SynReceived
                if matches!(why, Unreachable::Network | Unreachable::Host | Unreachable::TimeExceeded) =>
            {
                self.counters.tcp_attempt_fails += 1;
                self.counters.mptun_icmp_handshake_aborts += 1;
                self.enter_closed(Some(Event::Unreachable(why)));
                true
            }
            State::SynReceived => false,
            _ => {
                self.soft_error = Some(why);
                false
            }
        }
    }

    /// The last ICMP error believed since the peer last acknowledged new
    /// data (Linux `sk_err_soft`): why a timeout would end the connection.
    pub fn soft_error(&self) -> Option<Unreachable> {
        self.soft_error
    }

    /// The event a retransmission timeout ends the connection with: the
    /// soft error if one is remembered (Linux `tcp_write_err`), else
    /// `TimedOut`.
    pub(super) fn timeout_event(&self) -> Event {
        self.soft_error.map_or(Event::TimedOut, Event::Unreachable)
    }
}
