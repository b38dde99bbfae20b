//! The connection's timers and what happens when they fire.
//!
//! As in the subflow (`tcp/timers.rs`, after quinn-proto's `TimerTable`),
//! every deadline the connection keeps besides its subflows' own lives in
//! one table indexed by [`Timer`], so the next wake-up is one fold over it,
//! and what fires at an instant, in which order, is written down here once.
//!
//! Most connection timers follow state rather than events: the window
//! probe runs while the peer's window is closed, the retransmission timer
//! while data is not DATA_ACKed. So each step of [`Connection::run_timers`]
//! first brings its timer in line with the state it guards (armed, moved or
//! stopped), then fires it if it is due.

use super::close::MPTCP_CLOSE_TIMEOUT;
use super::Connection;
use crate::seq::DataSeq;
use crate::tcp::config::{TCP_RTO_MAX, TCP_RTO_MIN, TCP_TIMEOUT_INIT};
use core::ops::ControlFlow;
use mptun_time::{Duration, Instant};

/// How long a due announcement waits when no subflow can carry it.
const ANNOUNCE_NO_SUBFLOW_RETRY: Duration = Duration::from_millis(200);

/// Every deadline a connection keeps besides its subflows' own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Timer {
    /// Resend the MP_JOIN third ACK of subflow `.0` until the fourth ACK
    /// comes (RFC 8684 3.2: it carries no data, so the subflow's own
    /// retransmission timer does not cover it).
    JoinAck(usize),
    /// The earliest ADD_ADDR (or echo) due: a pure ACK must carry it.
    Announce,
    /// MPTCP-level zero-window probe (Linux's msk-level zero window
    /// handling in `mptcp_sendmsg_frag`).
    WindowProbe,
    /// MPTCP-level retransmission (Linux `mptcp_retransmit_timer`).
    Retransmit,
    /// Our DATA_FIN is given up on: the connection is reset with
    /// MP_FASTCLOSE (Linux `mptcp_close_timeout`).
    CloseTimeout,
    /// Our DATA_FIN goes (again) on a pure ACK.
    DataFin,
    /// The earliest re-open of a failed subflow is due ([`crate::pm::Paths::next_reopen`]).
    Reopen,
}

impl Timer {
    /// The order in which [`Connection::run_timers`] looks at the timers
    /// that follow connection state, after each input, timeout and
    /// application call: announcements first (they only ask for an ACK),
    /// then what may put data on a subflow, the DATA_FIN last, since it
    /// must follow everything else. [`Timer::JoinAck`] fires beside its
    /// subflow's own timers, in [`Connection::handle_timeout`].
    pub(super) const PROGRESS_ORDER: [Timer; 6] =
        [Timer::Announce, Timer::Reopen, Timer::WindowProbe, Timer::Retransmit, Timer::CloseTimeout, Timer::DataFin];

    /// Index among the connection-wide timers (not [`Timer::JoinAck`]).
    fn conn_index(self) -> Option<usize> {
        match self {
            Timer::JoinAck(_) => None,
            Timer::Announce => Some(0),
            Timer::WindowProbe => Some(1),
            Timer::Retransmit => Some(2),
            Timer::CloseTimeout => Some(3),
            Timer::DataFin => Some(4),
            Timer::Reopen => Some(5),
        }
    }
}

/// One optional deadline per [`Timer`], and the backoff state of the two
/// timers that back off exponentially.
#[derive(Clone, Debug, Default)]
pub(super) struct TimerTable {
    conn: [Option<Instant>; 6],
    /// Indexed by subflow slot.
    join_ack: Vec<Option<Instant>>,
    /// `una` when the retransmission timer was armed: a DATA_ACK that moves
    /// it restarts the timer without backoff.
    rtx_una: Option<DataSeq>,
    rtx_backoff: u32,
    wnd_probe_backoff: u32,
}

impl TimerTable {
    fn entry(&mut self, t: Timer) -> &mut Option<Instant> {
        match t.conn_index() {
            Some(i) => &mut self.conn[i],
            None => {
                let Timer::JoinAck(slot) = t else { unreachable!("only JoinAck has no connection index") };
                if self.join_ack.len() <= slot {
                    self.join_ack.resize(slot + 1, None);
                }
                &mut self.join_ack[slot]
            }
        }
    }

    /// Arms (or re-arms) `t` for `at`.
    pub fn set(&mut self, t: Timer, at: Instant) {
        *self.entry(t) = Some(at);
    }

    /// Arms `t` for `at`, or disarms it for `None`.
    pub fn set_opt(&mut self, t: Timer, at: Option<Instant>) {
        *self.entry(t) = at;
    }

    /// Disarms `t`.
    pub fn stop(&mut self, t: Timer) {
        *self.entry(t) = None;
    }

    /// When `t` fires, if armed.
    pub fn get(&self, t: Timer) -> Option<Instant> {
        match t.conn_index() {
            Some(i) => self.conn[i],
            None => match t {
                Timer::JoinAck(slot) => self.join_ack.get(slot).copied().flatten(),
                _ => None,
            },
        }
    }

    /// Whether `t` is armed.
    pub fn is_set(&self, t: Timer) -> bool {
        self.get(t).is_some()
    }

    /// Disarms `t` and says so if it was due at `now`.
    pub fn take_expired(&mut self, t: Timer, now: Instant) -> bool {
        let e = self.entry(t);
        let due = e.is_some_and(|at| at <= now);
        if due {
            *e = None;
        }
        due
    }

    /// The earliest armed deadline.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.conn.iter().chain(&self.join_ack).fold(None, |acc, &t| Instant::min_opt(acc, t))
    }
}

impl Connection {
    /// The earliest timer of the connection (its own and its subflows'):
    /// when the driver must call in again even without input.
    pub fn poll_timeout(&self) -> Option<Instant> {
        debug_assert_eq!(
            self.timers.get(Timer::Announce),
            self.paths.next_announce(),
            "the announcement timer follows the queue"
        );
        self.subflows.live().fold(self.timers.next_expiry(), |t, s| Instant::min_opt(t, s.tcp.poll_timeout()))
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
        for i in 0..self.subflows.slot_count() {
            let Some(slot) = self.subflows.get(i) else { continue };
            if slot.tcp.poll_timeout().is_some_and(|t| t <= now) {
                self.couple(i);
                if let Some(slot) = self.subflows.get_mut(i) {
                    slot.tcp.handle_timeout(now);
                }
            }
            if self.timers.take_expired(Timer::JoinAck(i), now) {
                let _ = self.fire(Timer::JoinAck(i), now);
            }
            self.on_subflow_events(i);
        }
        self.progress(now);
    }

    /// The timers that follow connection state, in [`Timer::PROGRESS_ORDER`]:
    /// each brought in line with its state, then fired if due.
    pub(super) fn run_timers(&mut self, now: Instant) {
        for t in Timer::PROGRESS_ORDER {
            if self.track(t, now) && self.timers.take_expired(t, now) && self.fire(t, now).is_break() {
                return;
            }
        }
    }

    /// Arms, moves or stops `t` as the state it guards says; `false` when
    /// it cannot fire now whatever its deadline.
    fn track(&mut self, t: Timer, now: Instant) -> bool {
        match t {
            Timer::JoinAck(_) => true,
            Timer::Announce => {
                self.sync_announce_timer();
                true
            }
            Timer::Reopen => {
                self.timers.set_opt(t, self.paths.next_reopen());
                true
            }
            Timer::WindowProbe => {
                if !self.tx.window_closed() || self.mode.infinite() || self.tx.reinjection_pending() {
                    self.timers.stop(t);
                    self.timers.wnd_probe_backoff = 0;
                    return false;
                }
                if self.tx.last_acked_byte().is_none() {
                    return false;
                }
                if !self.timers.is_set(t) {
                    self.timers.set(t, now + self.live_rto());
                    return false;
                }
                true
            }
            Timer::Retransmit => {
                let una = self.tx.una();
                if self.mode.infinite() || una.ge(self.tx.nxt()) {
                    self.timers.stop(t);
                    self.timers.rtx_backoff = 0;
                    return false;
                }
                let moved = self.timers.rtx_una != Some(una);
                if !self.timers.is_set(t) || moved {
                    if moved {
                        self.timers.rtx_backoff = 0;
                    }
                    self.timers.rtx_una = Some(una);
                    let at = now + self.live_rto() * (1 << self.timers.rtx_backoff.min(6));
                    self.timers.set(t, at);
                    return false;
                }
                true
            }
            Timer::CloseTimeout => {
                let first = self.tx.fin().first_sent();
                let armed = self.data_fin_pending().then(|| first.map(|t| t + MPTCP_CLOSE_TIMEOUT)).flatten();
                self.timers.set_opt(t, armed);
                true
            }
            Timer::DataFin => {
                if !self.data_fin_pending() {
                    self.timers.stop(t);
                    return false;
                }
                // Held while our own joins finish their handshakes (at
                // most `FIN_HOLD_MAX`), then due at once the first time.
                if self.tx.fin().first_sent().is_none() {
                    if let Some(until) = self.data_fin_hold(now) {
                        self.tx.fin_mut().hold();
                        self.timers.set(t, until);
                        return false;
                    }
                    if self.tx.fin_mut().release_hold() {
                        self.timers.set(t, now);
                    }
                }
                if !self.timers.is_set(t) {
                    self.timers.set(t, now);
                }
                true
            }
        }
    }

    /// What `t` does when it fires. `Break` when the connection was given
    /// up and nothing else may run.
    fn fire(&mut self, t: Timer, now: Instant) -> ControlFlow<()> {
        match t {
            Timer::JoinAck(i) => {
                let Some(slot) = self.subflows.get_mut(i) else { return ControlFlow::Continue(()) };
                self.timers.set(t, now + slot.tcp.info().rto.max(TCP_RTO_MIN));
                slot.tcp.request_ack();
            }
            Timer::Reopen => {
                self.reopen_due(now);
                self.timers.set_opt(t, self.paths.next_reopen());
            }
            Timer::Announce => {
                if let Some(slot) = self.announce_subflow() {
                    slot.tcp.request_ack();
                } else {
                    // No subflow can carry them now: look again later instead of
                    // leaving a due deadline that a driver would poll forever.
                    self.paths.announcements_mut().postpone_due(now, ANNOUNCE_NO_SUBFLOW_RETRY);
                }
                self.sync_announce_timer();
            }
            Timer::WindowProbe => {
                // Whatever happens now, the timer moves on (a timer left due
                // would be polled forever).
                self.timers.wnd_probe_backoff += 1;
                let backoff = self.live_rto() * (1 << self.timers.wnd_probe_backoff.min(9));
                self.timers.set(t, now + backoff.min(TCP_RTO_MAX));
                self.window_probe();
            }
            Timer::Retransmit => {
                self.timers.rtx_backoff += 1;
                let at = now + (self.live_rto() * (1 << self.timers.rtx_backoff.min(6))).min(TCP_RTO_MAX);
                self.timers.set(t, at);
                self.retransmit_head();
            }
            Timer::CloseTimeout => {
                // Retries are bounded: the peer is gone.
                self.timers.stop(Timer::DataFin);
                self.counters.mptun_data_fin_timeout += 1;
                self.abort();
                return ControlFlow::Break(());
            }
            Timer::DataFin => {
                let (first, backoff) = self.tx.fin_mut().on_timer(now);
                let rto = self.subflows.live().map(|s| s.tcp.info().rto).min().unwrap_or(TCP_TIMEOUT_INIT);
                let rto = rto * (1 << backoff.min(6));
                self.timers.set(t, (now + rto).min(first + MPTCP_CLOSE_TIMEOUT));
                if let Some(slot) = self.best_ack_subflow() {
                    slot.tcp.request_ack();
                }
            }
        }
        ControlFlow::Continue(())
    }

    /// The announcement timer follows the queue: it is due when the
    /// earliest announcement is.
    pub(super) fn sync_announce_timer(&mut self) {
        self.timers.set_opt(Timer::Announce, self.paths.next_announce());
    }

    /// The retransmission timeout the connection-level timers count in: the
    /// largest RTO of the subflows that can carry data. A stale subflow's
    /// RTO, backed off exponentially on a dead path, would otherwise push
    /// the MPTCP-level retransmission (the one thing that can recover data
    /// stuck on that path) out by minutes.
    pub(super) fn live_rto(&self) -> Duration {
        let rto =
            |usable: bool| self.subflows.live().filter(|s| !usable || !s.mp.stale()).map(|s| s.tcp.info().rto).max();
        rto(true).or_else(|| rto(false)).unwrap_or(TCP_RTO_MIN).max(TCP_RTO_MIN)
    }
}
