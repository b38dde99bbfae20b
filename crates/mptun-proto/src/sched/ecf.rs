//! ECF, Earliest Completion First (Lim, Nahum, Towsley, Gibbens, "ECF: An
//! MPTCP path scheduler to manage heterogeneous paths", CoNEXT 2017), as
//! the multipath-tcp.org kernel runs it (`mptcp_ecf.c`).
//!
//! It starts from minRTT's pick. When that pick is a slower subflow (the
//! fastest has no room now), ECF compares finishing the data still to send
//! (`x`, at least a window) on the fast subflow after waiting for it,
//! `srtt_f · (x_f/cwnd_f + 1)`, with sending on the slow one now,
//! `srtt_s + δ`: when waiting wins by a margin (β = ¼, hysteresis once it
//! chose to wait) and the slow subflow is not fast enough to be worth it
//! on its own (`srtt_s · x_s/cwnd_s ≥ 2·srtt_f + δ`), it waits.
//! δ = max(σ_f, σ_s); the kernel takes σ as `rttvar_us >> 1`: twice RFC
//! 6298's RTTVAR, but at least 100 ms, as its `rttvar_us` never falls
//! below `tcp_rto_min`; so does this. The data still to send is
//! what no subflow holds yet (the kernel's meta `sk_wmem_queued` less the
//! subflows' queues), here the connection's unsent bytes and its
//! reinjection queue.
//!
//! ECF's `next_segment` is minRTT's, with its receive-buffer optimisation
//! ([`RcvBufOpt`]) when no new data can go.

use super::blest::fastest;
use super::rbuf_opt::RcvBufOpt;
use super::{ConnView, Pick, Request, Scheduler, SubflowView};
use std::collections::VecDeque;

/// `mptcp_ecf_r_beta`: β = 1/4.
const R_BETA: u128 = 4;

/// Linux's `TCP_RTO_MIN` (200 ms), µs: the floor of its `rttvar_us`.
const RTO_MIN_US: u128 = 200_000;

/// The ECF scheduler.
#[derive(Clone, Debug, Default)]
pub struct EcfScheduler {
    /// The "waiting" hysteresis: 1 once ECF chose to wait.
    switching_margin: u128,
    rbuf: RcvBufOpt,
    requests: VecDeque<Request>,
    /// Picks declined to wait for the fast subflow (mptun's).
    waits: u64,
}

impl EcfScheduler {
    /// A scheduler that has not waited yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether to wait for `fast` rather than send on `slow` now.
    fn wait(&mut self, fast: &SubflowView, slow: &SubflowView, conn: &ConnView) -> bool {
        let mss = u128::from(slow.mss.max(1));
        let us = |v: &SubflowView| v.srtt.map_or(0, |d| d.as_micros());
        // The kernel's `rttvar_us` is four times RTTVAR but never below
        // `tcp_rto_min` (its per-RTT maximum restarts there), so σ =
        // `rttvar_us >> 1` is at least 100 ms.
        let sigma = |v: &SubflowView| (2 * v.rttvar.map_or(0, |d| d.as_micros())).max(RTO_MIN_US / 2);
        let (srtt_f, srtt_s) = (us(fast), us(slow));
        let delta = sigma(fast).max(sigma(slow));
        let (cwnd_f, cwnd_s) = (u128::from(fast.cwnd), u128::from(slow.cwnd));
        let sndbuf = u128::from(conn.unsent() + conn.reinject_queued);
        let x_f = sndbuf.max(cwnd_f * mss);
        let lhs = srtt_f * (x_f + cwnd_f * mss);
        let rhs = cwnd_f * mss * (srtt_s + delta);
        if R_BETA * lhs < R_BETA * rhs + self.switching_margin * rhs {
            let x_s = sndbuf.max(cwnd_s * mss);
            let lhs_s = srtt_s * x_s;
            let rhs_s = cwnd_s * mss * (2 * srtt_f + delta);
            if lhs_s >= rhs_s {
                self.switching_margin = 1;
                return true;
            }
        } else {
            self.switching_margin = 0;
        }
        false
    }
}

impl Scheduler for EcfScheduler {
    fn name(&self) -> &'static str {
        "ecf"
    }

    fn select(&mut self, subflows: &[SubflowView], conn: &ConnView) -> Option<Pick> {
        let pick = super::minrtt::pick(subflows)?;
        let Some(fast) = fastest(subflows).filter(|f| f.id != pick.id) else { return Some(pick) };
        let slow = subflows.iter().find(|v| v.id == pick.id)?;
        if self.wait(fast, slow, conn) {
            self.waits += 1;
            return None;
        }
        Some(pick)
    }

    fn on_pushed(&mut self, _id: usize, _bytes: usize, _subflows: &[SubflowView]) {}

    fn acts_when_blocked(&self) -> bool {
        true
    }

    fn on_blocked(&mut self, subflows: &[SubflowView], conn: &ConnView) {
        let pick = self.select(subflows, conn);
        self.rbuf.when_blocked(subflows, conn, pick, &mut self.requests);
    }

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn forget(&mut self, id: usize) {
        self.rbuf.forget(id);
    }

    fn add_counters(&self, c: &mut crate::counters::Counters) {
        c.mptun_sched_waits += self.waits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mptun_time::Duration;

    fn sf(id: usize, srtt_ms: u64, cwnd: u32, in_flight: u32) -> SubflowView {
        SubflowView {
            id,
            cwnd,
            in_flight,
            srtt: Some(Duration::from_millis(srtt_ms)),
            rttvar: Some(Duration::from_millis(1)),
            send_space: 1 << 20,
            mss: 1000,
            ..SubflowView::default()
        }
    }

    fn unsent(bytes: u64) -> ConnView {
        ConnView { write_seq: bytes, wnd_end: 1 << 30, send_buffer: 1 << 30, ..ConnView::default() }
    }

    #[test]
    fn little_data_left_waits_for_the_fast_subflow() {
        // Fast 10 ms, cwnd 10 and full; slow 100 ms with room; δ = 100 ms
        // (the floor: RTTVAR is 1 ms). 20 kB left: the fast subflow
        // finishes in 10 · (20 + 10)/10 = 30 ms < 100 + 100; the slow would
        // need 100 · 20/10 = 200 ms ≥ 2·10 + 100.
        let mut s = EcfScheduler::new();
        let v = [sf(0, 10, 10, 10), sf(1, 100, 10, 0)];
        assert_eq!(s.select(&v, &unsent(20_000)), None);
        assert_eq!(s.switching_margin, 1);
    }

    #[test]
    fn much_data_left_uses_the_slow_subflow_too() {
        // 2 MB left: the fast subflow alone needs 10 · (2000 + 10)/10 ms ≫ 104 ms.
        let mut s = EcfScheduler::new();
        let v = [sf(0, 10, 10, 10), sf(1, 100, 10, 0)];
        assert_eq!(s.select(&v, &unsent(2_000_000)), Some(Pick::one(1, 10_000)));
        assert_eq!(s.switching_margin, 0);
    }

    #[test]
    fn the_margin_makes_waiting_sticky() {
        // lhs = 10 ms · (x + 10 kB), rhs = 10 kB · (100 + 100) ms: without
        // margin wait iff 4·lhs < 4·rhs, with it iff 4·lhs < 5·rhs. x = 210
        // kB: lhs = 2200, rhs = 2000 (ms·kB): 8800 ≥ 8000 sends, < 10000 waits.
        let v = [sf(0, 10, 10, 10), sf(1, 100, 10, 0)];
        let mut s = EcfScheduler::new();
        assert!(s.select(&v, &unsent(210_000)).is_some());
        s.switching_margin = 1;
        assert_eq!(s.select(&v, &unsent(210_000)), None);
    }

    #[test]
    fn a_slow_subflow_fast_enough_on_its_own_is_used() {
        // Slow 15 ms with a 100-segment window: waiting would win (10 · (20
        // + 10) < 10 · (15 + 100) ms·kB), but the slow subflow is fast enough
        // on its own: 15 ms · 100 kB < 100 kB · (2 · 10 + 100) ms.
        let mut s = EcfScheduler::new();
        let v = [sf(0, 10, 10, 10), sf(1, 15, 100, 0)];
        assert!(s.select(&v, &unsent(20_000)).is_some());
    }
}
