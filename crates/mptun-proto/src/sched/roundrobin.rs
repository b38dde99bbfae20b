//! Round-robin, the multipath-tcp.org kernel's `mptcp_rr.c`: each
//! available subflow in turn gets `num_segments` segments (1 by default),
//! and with `cwnd_limited` (on by default) only a subflow with room in its
//! congestion window takes part, so that every window is filled rather
//! than the round waiting for the slowest.
//!
//! A subflow's quota counts the segments of the current round; a subflow
//! part way through its quota goes on, else the first unused subflow in
//! the order the subflows were opened (the kernel walks its list newest
//! first and keeps the last unused one), and when every candidate is full
//! the round starts again.

use super::{ConnView, MinRttScheduler, Pick, Scheduler, SubflowView};
use mptun_cc::CaState;

/// The round-robin scheduler.
#[derive(Clone, Debug)]
pub struct RoundRobinScheduler {
    /// `num_segments`: consecutive segments per subflow and round.
    num_segments: u32,
    /// `cwnd_limited`: skip subflows whose window is full.
    cwnd_limited: bool,
    /// Segments each subflow got this round.
    quota: Vec<u32>,
}

impl Default for RoundRobinScheduler {
    fn default() -> Self {
        Self::new(1, true)
    }
}

impl RoundRobinScheduler {
    /// The kernel's module parameters.
    pub fn new(num_segments: u32, cwnd_limited: bool) -> Self {
        RoundRobinScheduler { num_segments: num_segments.max(1), cwnd_limited, quota: Vec::new() }
    }

    fn quota(&self, id: usize) -> u32 {
        self.quota.get(id).copied().unwrap_or(0)
    }

    /// `mptcp_rr_is_available`, with or without the window test.
    fn is_available(v: &SubflowView, cwnd_test: bool) -> bool {
        v.available && v.ca_state != CaState::Loss && v.send_space > 0 && (!cwnd_test || MinRttScheduler::room(v) > 0)
    }
}

impl Scheduler for RoundRobinScheduler {
    fn name(&self) -> &'static str {
        "roundrobin"
    }

    fn select(&mut self, subflows: &[SubflowView], _conn: &ConnView) -> Option<Pick> {
        let n = self.num_segments;
        let candidates = || subflows.iter().filter(|v| Self::is_available(v, self.cwnd_limited));
        let mut chosen = None;
        for _round in 0..2 {
            let (mut considered, mut full) = (0, 0);
            for v in candidates() {
                considered += 1;
                let q = self.quota(v.id);
                if q > 0 && q < n {
                    chosen = Some((v, n - q));
                    break;
                }
                if q == 0 && chosen.is_none() {
                    chosen = Some((v, n));
                }
                if q >= n {
                    full += 1;
                }
            }
            if chosen.is_some() || considered == 0 || considered != full {
                break;
            }
            // Every candidate used its quota: a new round.
            for v in subflows.iter().filter(|v| Self::is_available(v, self.cwnd_limited)) {
                if let Some(q) = self.quota.get_mut(v.id) {
                    *q = 0;
                }
            }
        }
        let (v, split) = chosen?;
        if !Self::is_available(v, true) {
            return None;
        }
        Some(Pick::one(v.id, split as usize * v.mss.max(1) as usize))
    }

    fn on_pushed(&mut self, id: usize, bytes: usize, subflows: &[SubflowView]) {
        let mss = subflows.iter().find(|v| v.id == id).map_or(1, |v| v.mss.max(1) as usize);
        if self.quota.len() <= id {
            self.quota.resize(id + 1, 0);
        }
        self.quota[id] += bytes.div_ceil(mss).max(1) as u32;
    }

    fn forget(&mut self, id: usize) {
        if let Some(q) = self.quota.get_mut(id) {
            *q = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sf(id: usize, cwnd: u32, in_flight: u32) -> SubflowView {
        SubflowView { id, cwnd, in_flight, send_space: 1 << 20, mss: 1000, ..SubflowView::default() }
    }

    fn run(s: &mut RoundRobinScheduler, v: &[SubflowView], picks: usize) -> Vec<usize> {
        (0..picks)
            .map_while(|_| {
                let p = s.select(v, &ConnView::default())?;
                s.on_pushed(p.id, p.max_burst, v);
                Some(p.id)
            })
            .collect()
    }

    #[test]
    fn one_segment_each_in_turn() {
        let mut s = RoundRobinScheduler::default();
        let v = [sf(0, 10, 0), sf(1, 10, 0), sf(2, 10, 0)];
        assert_eq!(run(&mut s, &v, 7), [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(s.select(&v, &ConnView::default()).unwrap().max_burst, 1000);
    }

    #[test]
    fn num_segments_in_a_row_and_a_partial_quota_goes_on() {
        let mut s = RoundRobinScheduler::new(3, true);
        let v = [sf(0, 10, 0), sf(1, 10, 0)];
        let p = s.select(&v, &ConnView::default()).unwrap();
        assert_eq!(p, Pick::one(0, 3000));
        // Only one segment went: the same subflow gets the other two.
        s.on_pushed(0, 1000, &v);
        assert_eq!(s.select(&v, &ConnView::default()), Some(Pick::one(0, 2000)));
        s.on_pushed(0, 2000, &v);
        assert_eq!(s.select(&v, &ConnView::default()).map(|p| p.id), Some(1));
    }

    #[test]
    fn a_full_window_is_skipped_only_with_cwnd_limited() {
        let v = [sf(0, 10, 10), sf(1, 10, 0)];
        let mut s = RoundRobinScheduler::default();
        assert_eq!(run(&mut s, &v, 3), [1, 1, 1]);
        // Without the window test the full subflow keeps its turn, and
        // the round waits for it.
        let mut s = RoundRobinScheduler::new(1, false);
        assert_eq!(run(&mut s, &v, 3), Vec::<usize>::new());
    }

    #[test]
    fn a_subflow_in_rto_recovery_is_left_out() {
        let mut v = [sf(0, 10, 0), sf(1, 10, 0)];
        v[0].ca_state = CaState::Loss;
        let mut s = RoundRobinScheduler::default();
        assert_eq!(run(&mut s, &v, 2), [1, 1]);
    }
}
