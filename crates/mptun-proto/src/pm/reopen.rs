//! Failed subflows opened again (Linux has no equivalent in the kernel PM;
//! `mptcpd` and the userspace PM re-create subflows the same way): a
//! subflow of the path manager's that was reset or timed out is opened
//! again after a backoff of [`REOPEN_BACKOFF`], doubled for each failure in
//! a row, at most [`REOPEN_BACKOFF_MAX`]. This queue decides when; the
//! connection checks that what the subflow joined still stands and asks
//! for the join.

use super::JoinRequest;
use mptun_time::{Duration, Instant};

/// The first wait before a failed subflow is opened again; doubled for
/// each failure in a row (a re-opened subflow that never came up), up to
/// [`REOPEN_BACKOFF_MAX`].
pub(crate) const REOPEN_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two re-opens of one subflow.
pub(crate) const REOPEN_BACKOFF_MAX: Duration = Duration::from_secs(64);

/// The wait before re-open number `attempt` (0: the subflow had been up).
pub(crate) fn reopen_backoff(attempt: u32) -> Duration {
    (REOPEN_BACKOFF * (1u32 << attempt.min(6))).min(REOPEN_BACKOFF_MAX)
}

/// A subflow of the path manager's that failed (reset or timed out), to be
/// opened again while its endpoint exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reopen {
    pub at: Instant,
    pub req: JoinRequest,
    /// Failures in a row before this one opens (0: the subflow had been up).
    pub attempt: u32,
}

/// The re-opens waiting for their time, and those handed over as joins
/// until their subflow is placed (it takes over the attempt count).
#[derive(Clone, Debug, Default)]
pub(crate) struct Reopens {
    /// At most one per failed subflow, so bounded by the `subflows` limit.
    waiting: Vec<Reopen>,
    handed: Vec<(JoinRequest, u32)>,
}

impl Reopens {
    /// When the earliest re-open is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.waiting.iter().map(|r| r.at).min()
    }

    /// A subflow opened as `req` (re-open number `attempt`) failed at
    /// `now`: it is opened again after the backoff. One that had been up
    /// (`was_up`) starts the count again.
    pub fn on_failed(&mut self, now: Instant, req: JoinRequest, attempt: u32, was_up: bool) {
        let attempt = if was_up { 0 } else { attempt.saturating_add(1) };
        self.waiting.push(Reopen { at: now + reopen_backoff(attempt), req, attempt });
    }

    /// The re-opens due at `now`, taken out of the queue. What an earlier
    /// batch handed over has been placed (or refused) by now.
    pub fn take_due(&mut self, now: Instant) -> Vec<Reopen> {
        self.handed.clear();
        let (due, later) = self.waiting.drain(..).partition(|r| r.at <= now);
        self.waiting = later;
        due
    }

    /// A due re-open found no room under the `subflows` limit: it is tried
    /// again a backoff after `now`.
    pub fn retry_later(&mut self, now: Instant, r: Reopen) {
        self.waiting.push(Reopen { at: now + reopen_backoff(r.attempt), ..r });
    }

    /// A due re-open became a join.
    pub fn hand_over(&mut self, r: &Reopen) {
        self.handed.push((r.req, r.attempt));
    }

    /// The re-open number of a join placed for `req`, 0 for a join that is
    /// no re-open.
    pub fn take_attempt(&mut self, req: &JoinRequest) -> u32 {
        match self.handed.iter().position(|(r, _)| r == req) {
            Some(i) => self.handed.swap_remove(i).1,
            None => 0,
        }
    }

    /// Our joins are closed: nothing is opened again.
    pub fn clear(&mut self) {
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(last: u8) -> JoinRequest {
        JoinRequest {
            local: [10, 0, 0, last].into(),
            local_id: last,
            remote: [10, 0, 1, 1].into(),
            remote_port: 80,
            backup: false,
        }
    }

    #[test]
    fn the_backoff_doubles_per_failure_in_a_row_up_to_64_s() {
        let waits: Vec<u64> = (0..9).map(|a| reopen_backoff(a).as_millis() as u64).collect();
        assert_eq!(waits, [1000, 2000, 4000, 8000, 16000, 32000, 64000, 64000, 64000]);
    }

    #[test]
    fn a_subflow_that_had_been_up_starts_the_count_again() {
        let t0 = Instant::from_millis(5000);
        let mut q = Reopens::default();
        q.on_failed(t0, req(2), 4, true);
        q.on_failed(t0, req(3), 4, false);
        assert_eq!(q.next_due(), Some(t0 + REOPEN_BACKOFF));
        let due = q.take_due(t0 + REOPEN_BACKOFF);
        assert_eq!(due.iter().map(|r| (r.req.local_id, r.attempt)).collect::<Vec<_>>(), [(2, 0)]);
        assert_eq!(q.next_due(), Some(t0 + reopen_backoff(5)));
    }

    #[test]
    fn a_handed_over_reopen_gives_its_attempt_to_its_join_once() {
        let t0 = Instant::from_millis(0);
        let mut q = Reopens::default();
        q.on_failed(t0, req(2), 1, false);
        let due = q.take_due(t0 + reopen_backoff(2));
        q.hand_over(&due[0]);
        assert_eq!(q.take_attempt(&req(2)), 2);
        assert_eq!(q.take_attempt(&req(2)), 0, "taken once");
    }

    #[test]
    fn a_reopen_without_room_waits_another_backoff_and_clear_drops_all() {
        let t0 = Instant::from_millis(0);
        let mut q = Reopens::default();
        q.on_failed(t0, req(2), 0, false);
        let at = t0 + reopen_backoff(1);
        let r = q.take_due(at).pop().expect("due");
        q.retry_later(at, r);
        assert_eq!(q.next_due(), Some(at + reopen_backoff(1)));
        q.clear();
        assert_eq!(q.next_due(), None);
    }
}
