//! The subflow's timers and what happens when they fire.

use super::*;

impl Subflow {
    /// The next instant the subflow needs to be called back: a timer, or the
    /// EDT slot of a segment it holds back.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = Instant::min_opt(self.rto_at, self.delack_at);
        t = Instant::min_opt(t, self.tlp_at);
        t = Instant::min_opt(t, self.rack_timer_at);
        t = Instant::min_opt(t, self.persist_at);
        t = Instant::min_opt(t, self.time_wait_at);
        Instant::min_opt(t, self.paced_until)
    }

    /// Fires whatever timers are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.time_wait_at.is_some_and(|t| t <= now) {
            self.time_wait_at = None;
            self.enter_closed(None);
            return;
        }
        if self.delack_at.is_some_and(|t| t <= now) {
            self.delack_at = None;
            if self.ack_pending {
                self.counters.tcp_ext_delayed_acks += 1;
                self.ack_now = true;
            }
        }
        if self.persist_at.is_some_and(|t| t <= now) {
            self.persist_at = None;
            self.send_window_probe(now);
        }
        if self.rack_timer_at.is_some_and(|t| t <= now) {
            self.rack_timer_at = self.rack_detect_loss(now);
            if self.lost_out > 0 && matches!(self.ca_state, CaState::Open | CaState::Disorder) {
                self.enter_recovery(now);
            }
        }
        if self.tlp_at.is_some_and(|t| t <= now) {
            self.tlp_at = None;
            if !self.scoreboard.is_empty() && self.ca_state == CaState::Open && self.state.is_synchronized() {
                self.tlp_probe_due = true;
            }
        }
        if self.rto_at.is_some_and(|t| t <= now) {
            self.rto_at = None;
            self.tlp_at = None;
            self.on_rto(now);
        }
    }

    /// Linux `tcp_schedule_loss_probe`: if nothing is acknowledged within two
    /// smoothed RTTs, send a probe so that a lost tail of the window is
    /// repaired by SACK recovery instead of an RTO and a restart from cwnd 1.
    pub(super) fn schedule_tlp(&mut self, now: Instant) {
        self.tlp_at = None;
        if !self.sack_ok || self.scoreboard.is_empty() || self.ca_state != CaState::Open || self.tlp_high_seq.is_some()
        {
            return;
        }
        let mut pto = self.rtt.smoothed().map_or(self.cfg.rto_initial, |s| s * 2);
        // RFC 8985 7.2 adds the worst-case delayed-ACK time for a single
        // segment in flight; the same holds whenever less than two full
        // segments are outstanding, since the receiver's "ACK every second
        // full segment" rule cannot fire.
        let flight: u32 = self.scoreboard.iter().filter(|s| !s.sacked).map(|s| s.len).sum();
        if flight < 2 * self.mss(0) {
            pto += self.cfg.rto_min;
        }
        let mut at = now + pto.max(Duration::from_millis(2));
        if let Some(rto) = self.rto_at {
            at = at.min(rto);
        }
        self.tlp_at = Some(at);
    }

    pub(super) fn on_rto(&mut self, now: Instant) {
        match self.state {
            State::SynSent | State::SynReceived => {
                // The first "timeout" is the initial send of the SYN/SYN-ACK.
                if self.snd_nxt != self.iss {
                    self.retries += 1;
                    self.syn_retransmitted = true;
                    self.counters.tcp_ext_tcp_timeouts += 1;
                    self.counters.tcp_retrans_segs += 1;
                    self.rtt.backoff();
                    if self.retries > self.cfg.syn_retries {
                        self.enter_closed(Some(Event::TimedOut));
                        return;
                    }
                }
                self.snd_nxt = self.iss; // resend SYN / SYN-ACK
            }
            State::Closed | State::TimeWait => {}
            _ => {
                if self.scoreboard.is_empty() {
                    return;
                }
                self.retries += 1;
                self.counters.tcp_ext_tcp_timeouts += 1;
                if self.retries > self.cfg.max_retries {
                    self.enter_closed(Some(Event::TimedOut));
                    return;
                }
                self.enter_loss(now);
                self.rtt.backoff();
                self.rto_at = Some(now + self.rtt.rto());
            }
        }
    }

    pub(super) fn send_window_probe(&mut self, now: Instant) {
        if !self.state.is_synchronized() || self.snd_wnd > 0 || self.unsent_bytes() == 0 {
            return;
        }
        self.counters.tcp_ext_tcp_win_probe += 1;
        // Linux tcp_xmit_probe_skb: an old sequence number elicits an ACK with the current window.
        self.challenge_ack = true;
        self.persist_backoff = (self.persist_backoff + 1).min(16);
        self.arm_persist(now);
    }

    pub(super) fn arm_persist(&mut self, now: Instant) {
        let base = self.rtt.rto();
        let d = base.saturating_mul(1 << self.persist_backoff.min(10)).min(self.cfg.rto_max);
        self.persist_at = Some(now + d);
    }
}
