//! The subflow's timers and what happens when they fire.
//!
//! Like quinn-proto's `TimerTable`, every deadline lives in one table indexed
//! by [`Timer`], so the next wake-up is one fold over the table and the order
//! in which timers due at the same instant fire is written down once, in
//! [`Timer::FIRE_ORDER`], instead of being implied by a chain of `if`s.

use super::*;

/// Floor of the loss-probe timeout (Linux `TCP_TIMEOUT_MIN`, two jiffies).
const TCP_TIMEOUT_MIN: Duration = Duration::from_millis(2);
/// Zero-window probes counted towards the backoff at most.
const PERSIST_BACKOFF_MAX: u32 = 16;
/// The persist interval doubles at most this many times (then `rto_max` caps it).
const PERSIST_SHIFT_MAX: u32 = 10;

/// Every deadline a subflow keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Retransmission timeout (RFC 6298; also SYN and SYN-ACK retries).
    Rto,
    /// Delayed ACK (Linux `TCP_DELACK_MIN`).
    DelayedAck,
    /// Tail loss probe (RFC 8985 7).
    LossProbe,
    /// RACK reordering window: re-run loss detection then (RFC 8985 6.3).
    RackReorder,
    /// Zero-window probe (RFC 9293 3.8.6.1).
    Persist,
    /// 2MSL wait in TIME_WAIT.
    TimeWait,
    /// EDT slot of a segment the pacer held back at the last poll. Nothing
    /// fires for it: the driver's wake-up makes `poll_transmit` run again.
    Pacing,
}

impl Timer {
    const COUNT: usize = 7;

    /// The order in which `handle_timeout` looks at timers due at the same
    /// instant. TIME_WAIT first (it ends everything); the delayed ACK before
    /// anything that may send; the RTO last, since it cancels the loss probe.
    pub(crate) const FIRE_ORDER: [Timer; 6] =
        [Timer::TimeWait, Timer::DelayedAck, Timer::Persist, Timer::RackReorder, Timer::LossProbe, Timer::Rto];
}

/// One optional deadline per [`Timer`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TimerTable {
    data: [Option<Instant>; Timer::COUNT],
}

impl TimerTable {
    /// Arms (or re-arms) `timer` for `at`.
    pub(crate) fn set(&mut self, timer: Timer, at: Instant) {
        self.data[timer as usize] = Some(at);
    }

    /// Arms `timer` for `at`, or disarms it for `None`.
    pub(crate) fn set_opt(&mut self, timer: Timer, at: Option<Instant>) {
        self.data[timer as usize] = at;
    }

    /// Disarms `timer`.
    pub(crate) fn stop(&mut self, timer: Timer) {
        self.data[timer as usize] = None;
    }

    /// When `timer` fires, if armed.
    pub(crate) fn get(&self, timer: Timer) -> Option<Instant> {
        self.data[timer as usize]
    }

    /// Whether `timer` is armed.
    pub(crate) fn is_set(&self, timer: Timer) -> bool {
        self.data[timer as usize].is_some()
    }

    /// Disarms `timer` and says so if it was due at `now`.
    fn take_expired(&mut self, timer: Timer, now: Instant) -> bool {
        let due = self.data[timer as usize].is_some_and(|t| t <= now);
        if due {
            self.data[timer as usize] = None;
        }
        due
    }

    /// The earliest armed deadline.
    pub(crate) fn next_expiry(&self) -> Option<Instant> {
        self.data.iter().fold(None, |acc, &t| Instant::min_opt(acc, t))
    }
}

impl Subflow {
    /// The next instant the subflow needs to be called back: a timer, or the
    /// EDT slot of a segment it holds back.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_expiry()
    }

    /// Fires whatever timers are due at `now`, in `Timer::FIRE_ORDER`; each
    /// is checked only after the previous one has run, as a handler may re-arm
    /// or cancel a later one.
    pub fn handle_timeout(&mut self, now: Instant) {
        for timer in Timer::FIRE_ORDER {
            if !self.timers.take_expired(timer, now) {
                continue;
            }
            match timer {
                Timer::TimeWait => {
                    self.enter_closed(None);
                    return;
                }
                Timer::DelayedAck => {
                    if self.delack.is_pending() {
                        self.counters.tcp_ext_delayed_acks += 1;
                        self.ack_now = true;
                    }
                }
                Timer::Persist => self.send_window_probe(now),
                Timer::RackReorder => {
                    let next = self.rack_detect_loss(now);
                    self.timers.set_opt(Timer::RackReorder, next);
                    if self.scoreboard.lost_out() > 0 && matches!(self.ca_state, CaState::Open | CaState::Disorder) {
                        self.enter_recovery(now);
                    }
                }
                Timer::LossProbe => {
                    if !self.scoreboard.is_empty() && self.ca_state == CaState::Open && self.state.is_synchronized() {
                        self.tlp.set_due();
                    }
                }
                Timer::Rto => {
                    // The RTO replaces a probe due at the same instant
                    // (RFC 8985 7.3): one segment goes out, not two.
                    self.timers.stop(Timer::LossProbe);
                    self.tlp.cancel_due();
                    self.on_rto(now);
                }
                Timer::Pacing => {}
            }
        }
    }

    /// Linux `tcp_schedule_loss_probe`: if nothing is acknowledged within two
    /// smoothed RTTs, send a probe so that a lost tail of the window is
    /// repaired by SACK recovery instead of an RTO and a restart from cwnd 1.
    pub(super) fn schedule_tlp(&mut self, now: Instant) {
        self.timers.stop(Timer::LossProbe);
        if !self.sack_ok || self.scoreboard.is_empty() || self.ca_state != CaState::Open || self.tlp.in_flight() {
            return;
        }
        let mut pto = self.rtt.smoothed().map_or(self.cfg.rto_initial, |s| s * 2);
        // RFC 8985 7.2 adds the worst-case delayed-ACK time for a single
        // segment in flight; the same holds whenever less than two full
        // segments are outstanding, since the receiver's "ACK every second
        // full segment" rule cannot fire.
        if !self.scoreboard.unsacked_at_least(2 * self.mss(0)) {
            pto += self.cfg.rto_min;
        }
        let mut at = now + pto.max(TCP_TIMEOUT_MIN);
        if let Some(rto) = self.timers.get(Timer::Rto) {
            at = at.min(rto);
        }
        self.timers.set(Timer::LossProbe, at);
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
                        self.counters.tcp_attempt_fails += 1;
                        self.enter_closed(Some(self.timeout_event()));
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
                    self.enter_closed(Some(self.timeout_event()));
                    return;
                }
                self.pmtu_on_rto(now);
                self.enter_loss(now);
                self.rtt.backoff();
                self.timers.set(Timer::Rto, now + self.rtt.rto());
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
        self.persist_backoff = (self.persist_backoff + 1).min(PERSIST_BACKOFF_MAX);
        self.arm_persist(now);
    }

    pub(super) fn arm_persist(&mut self, now: Instant) {
        let base = self.rtt.rto();
        let d = base.saturating_mul(1 << self.persist_backoff.min(PERSIST_SHIFT_MAX)).min(self.cfg.rto_max);
        self.timers.set(Timer::Persist, now + d);
    }
}
