//! Redundant, the multipath-tcp.org kernel's `mptcp_redundant.c`: every
//! segment goes on every active (non-backup) subflow, and the DATA_ACK
//! decides: the first copy to arrive counts, the others are duplicates the
//! receiver drops. It trades capacity for latency: a loss or a slow path
//! delays nothing as long as one copy gets through.
//!
//! As in the kernel's later version (which keeps, per subflow, the next
//! segment it has not sent), a subflow that could not take a copy when it
//! was made catches up with what it missed and the peer has not DATA_ACKed
//! yet before it takes new data: a [`Request::Reinject`] from its data end
//! to the connection's `nxt`. New data goes on the fastest subflow with
//! window room that is caught up, with a copy on every other such subflow;
//! a slower path thus mostly sends copies of what the faster one sent, as
//! long as it is not DATA_ACKed. When only backup subflows are left, they
//! carry the data without copies, as there.

use super::{ConnView, MinRttScheduler, Pick, Request, Scheduler, SubflowView};
use std::collections::VecDeque;

/// The redundant scheduler.
#[derive(Clone, Debug, Default)]
pub struct RedundantScheduler {
    requests: VecDeque<Request>,
}

impl RedundantScheduler {
    /// A stateless scheduler: what each subflow carries is in its view.
    pub fn new() -> Self {
        Self::default()
    }

    /// The active subflows with window room.
    fn active(subflows: &[SubflowView]) -> impl Iterator<Item = &SubflowView> {
        subflows.iter().filter(|v| v.available && !v.backup && MinRttScheduler::room(v) > 0)
    }

    /// Catch-up requests for subflows behind the connection's `nxt`;
    /// returns whether `v` is behind.
    fn catch_up(&mut self, v: &SubflowView, conn: &ConnView) -> bool {
        let from = v.data_end.unwrap_or(conn.una).max(conn.una);
        if from >= conn.nxt {
            return false;
        }
        let to = conn.nxt.min(from + MinRttScheduler::room(v) as u64);
        self.requests.push_back(Request::Reinject { on: v.id, from, to });
        true
    }
}

impl Scheduler for RedundantScheduler {
    fn name(&self) -> &'static str {
        "redundant"
    }

    fn select(&mut self, subflows: &[SubflowView], conn: &ConnView) -> Option<Pick> {
        if !subflows.iter().any(|v| v.available && !v.backup) {
            // Backups only: minRTT among them, no copies.
            return super::minrtt::pick(subflows);
        }
        // Subflows behind first send what they missed; the others share
        // the new data, the fastest carrying it, the rest a copy each.
        let mut level: Vec<&SubflowView> = Vec::new();
        for v in Self::active(subflows) {
            if !self.catch_up(v, conn) {
                level.push(v);
            }
        }
        let first = *level.iter().min_by_key(|v| (v.srtt.map_or(u128::MAX, |r| r.as_nanos()), v.id))?;
        let mut pick = Pick::one(first.id, MinRttScheduler::room(first));
        for v in level.iter().filter(|v| v.id != first.id) {
            pick = pick.with_copy(v.id, MinRttScheduler::room(v));
        }
        Some(pick)
    }

    fn on_pushed(&mut self, _id: usize, _bytes: usize, _subflows: &[SubflowView]) {}

    fn acts_when_blocked(&self) -> bool {
        true
    }

    fn on_blocked(&mut self, subflows: &[SubflowView], conn: &ConnView) {
        let behind: Vec<&SubflowView> = Self::active(subflows).collect();
        for v in behind {
            self.catch_up(v, conn);
        }
    }

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mptun_time::Duration;

    fn sf(id: usize, srtt_ms: u64, data_end: Option<u64>) -> SubflowView {
        SubflowView {
            id,
            cwnd: 10,
            srtt: Some(Duration::from_millis(srtt_ms)),
            send_space: 1 << 20,
            mss: 1000,
            data_end,
            ..SubflowView::default()
        }
    }

    fn conn(una: u64, nxt: u64) -> ConnView {
        ConnView { una, nxt, write_seq: nxt + 100_000, wnd_end: 1 << 30, send_buffer: 1 << 30, ..ConnView::default() }
    }

    #[test]
    fn new_data_goes_on_the_fastest_with_a_copy_on_every_other_active_subflow() {
        let mut s = RedundantScheduler::new();
        let mut b = sf(2, 5, Some(5000));
        b.backup = true;
        let v = [sf(0, 50, Some(5000)), sf(1, 10, Some(5000)), b];
        let p = s.select(&v, &conn(0, 5000)).unwrap();
        assert_eq!(p, Pick::one(1, 10_000).with_copy(0, 10_000));
        assert_eq!(s.poll_request(), None);
    }

    #[test]
    fn a_subflow_behind_catches_up_from_what_is_not_data_acked() {
        let mut s = RedundantScheduler::new();
        let v = [sf(0, 10, Some(9000)), sf(1, 50, Some(3000)), sf(2, 50, None)];
        let p = s.select(&v, &conn(4000, 9000)).unwrap();
        assert_eq!(p, Pick::one(0, 10_000));
        assert_eq!(s.poll_request(), Some(Request::Reinject { on: 1, from: 4000, to: 9000 }));
        assert_eq!(s.poll_request(), Some(Request::Reinject { on: 2, from: 4000, to: 9000 }));
        // With nothing new to send, the same catch-up happens when blocked;
        // no more than the subflow's window room at once.
        let mut small = sf(1, 50, Some(3000));
        small.in_flight = 8;
        s.on_blocked(&[v[0], small], &conn(0, 9000));
        assert_eq!(s.poll_request(), Some(Request::Reinject { on: 1, from: 3000, to: 5000 }));
        assert_eq!(s.poll_request(), None);
    }

    #[test]
    fn backups_carry_data_without_copies_when_no_active_subflow_is_up() {
        let mut s = RedundantScheduler::new();
        let mut a = sf(0, 10, None);
        a.available = false;
        let (mut b1, mut b2) = (sf(1, 20, None), sf(2, 30, None));
        b1.backup = true;
        b2.backup = true;
        assert_eq!(s.select(&[a, b1, b2], &conn(0, 0)), Some(Pick::one(1, 10_000)));
        assert_eq!(s.poll_request(), None);
    }
}
