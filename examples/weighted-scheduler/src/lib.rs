//! An MPTCP scheduler written outside mptun, against its public API only
//! (`mptun::Scheduler`, `mptun::SubflowView`, `mptun::ConnView`,
//! `mptun::Pick`): how a researcher plugs their own into the simulator
//! (`mptun_sim::scenarios::transfer::SchedulerHook`), a client
//! (`StreamOptions::scheduler`) or a server (`MptcpListener::set_scheduler`).
//!
//! `weighted` splits the data between the subflows in proportion to a
//! weight per subflow (by index, in opening order), among those whose
//! congestion window has room now: the subflow that got the fewest bytes
//! per unit of weight goes next, with as much as its window can send at
//! once. It is work-conserving: a subflow without room is passed over, so
//! a slow path takes less than its weight says rather than holding the
//! fast one back. Weight 0 keeps a subflow out of the data entirely (a
//! path reserved for signalling, or a cost-capped one); a subflow beyond
//! the list gets weight 1.

use mptun::sched::MinRttScheduler;
use mptun::{ConnView, Pick, Scheduler, SubflowView};

/// The weighted scheduler.
#[derive(Clone, Debug)]
pub struct WeightedScheduler {
    weights: Vec<u32>,
    /// Bytes handed to each subflow so far.
    sent: Vec<u64>,
}

impl WeightedScheduler {
    /// Weights by subflow index.
    pub fn new(weights: Vec<u32>) -> Self {
        WeightedScheduler { weights, sent: Vec::new() }
    }

    fn weight(&self, id: usize) -> u32 {
        self.weights.get(id).copied().unwrap_or(1)
    }

    fn sent(&self, id: usize) -> u64 {
        self.sent.get(id).copied().unwrap_or(0)
    }
}

impl Scheduler for WeightedScheduler {
    fn name(&self) -> &'static str {
        "weighted"
    }

    fn select(&mut self, subflows: &[SubflowView], _conn: &ConnView) -> Option<Pick> {
        let best = subflows
            .iter()
            .filter(|v| self.weight(v.id) > 0 && MinRttScheduler::room(v) > 0)
            // Fewest bytes per weight: compare sent_a · w_b with sent_b · w_a.
            .min_by(|a, b| {
                let x = u128::from(self.sent(a.id)) * u128::from(self.weight(b.id));
                let y = u128::from(self.sent(b.id)) * u128::from(self.weight(a.id));
                x.cmp(&y).then(a.id.cmp(&b.id))
            })?;
        Some(Pick::one(best.id, MinRttScheduler::room(best)))
    }

    fn on_pushed(&mut self, id: usize, bytes: usize, _subflows: &[SubflowView]) {
        if self.sent.len() <= id {
            self.sent.resize(id + 1, 0);
        }
        self.sent[id] += bytes as u64;
    }

    fn forget(&mut self, id: usize) {
        if let Some(s) = self.sent.get_mut(id) {
            *s = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sf(id: usize, in_flight: u32) -> SubflowView {
        SubflowView { id, cwnd: 10, in_flight, send_space: 1 << 20, mss: 1000, ..SubflowView::default() }
    }

    #[test]
    fn bytes_follow_the_weights_while_both_have_room() {
        let mut s = WeightedScheduler::new(vec![3, 1]);
        let v = [sf(0, 0), sf(1, 0)];
        let mut got = [0u64; 2];
        for _ in 0..400 {
            let p = s.select(&v, &ConnView::default()).unwrap();
            s.on_pushed(p.id, 1000, &v);
            got[p.id] += 1000;
        }
        assert_eq!(got, [300_000, 100_000]);
    }

    #[test]
    fn a_full_window_is_passed_over_and_weight_zero_is_never_used() {
        let mut s = WeightedScheduler::new(vec![1, 1, 0]);
        let v = [sf(0, 10), sf(1, 4), sf(2, 0)];
        assert_eq!(s.select(&v, &ConnView::default()), Some(Pick::one(1, 6000)));
        let v = [sf(0, 10), sf(1, 10), sf(2, 0)];
        assert_eq!(s.select(&v, &ConnView::default()), None);
    }
}
