//! BLEST, the blocking-estimation scheduler (Ferlin, Alay, Mehani, Boreli,
//! "BLEST: Blocking estimation-based MPTCP scheduler for heterogeneous
//! networks", IFIP Networking 2016), as the multipath-tcp.org kernel runs
//! it (`mptcp_blest.c`).
//!
//! It starts from minRTT's pick. When that pick is not the fastest
//! subflow (the fast one has no room now), BLEST estimates how many bytes
//! the fast subflow would send while the slow one carries this burst
//! (`fast_bytes`, Reno growth over the slow subflow's linger time, scaled
//! by λ) and waits for the fast subflow when those bytes would not fit in
//! the peer's window beside what the slow subflow holds: sending on the
//! slow path then would block the connection's window (head-of-line
//! blocking at the receiver).
//!
//! λ starts at 1.2 and moves within [1.0, 1.3], at most once per minimum
//! srtt of the slow subflow: up by 0.04 when the slow flow's data needed a
//! retransmission (the receive-buffer optimisation ran) since the last
//! update, down by 0.01 otherwise. Times are in microseconds where the
//! kernel keeps `srtt_us` scaled by 8; the estimates use only ratios of
//! them, so the scale does not matter. The kernel's receive-buffer
//! optimisation runs when no new data can go ([`RcvBufOpt`]).

use super::rbuf_opt::RcvBufOpt;
use super::{ConnView, Pick, Request, Scheduler, SubflowView};
use mptun_time::Instant;
use std::collections::VecDeque;

/// λ's start, bounds and steps, in thousandths (the module parameters
/// `lambda`, `min_lambda`, `max_lambda` are tenths; `dyn_lambda_*` thousandths).
const LAMBDA_INIT: i32 = 1200;
const LAMBDA_MIN: i32 = 1000;
const LAMBDA_MAX: i32 = 1300;
const DYN_LAMBDA_GOOD: i32 = 10;
const DYN_LAMBDA_BAD: i32 = 40;

/// The BLEST scheduler.
#[derive(Clone, Debug)]
pub struct BlestScheduler {
    /// Lowest and highest srtt each subflow has shown, µs (`min_srtt_us`, `max_srtt_us`).
    srtt_range: Vec<Option<(u64, u64)>>,
    /// λ × 1000.
    lambda_1000: i32,
    last_lambda_update: Option<Instant>,
    /// The slow flow's data was retransmitted since the last λ update.
    retrans_flag: bool,
    rbuf: RcvBufOpt,
    requests: VecDeque<Request>,
    /// Picks declined to wait for the fast subflow (mptun's).
    waits: u64,
}

impl Default for BlestScheduler {
    fn default() -> Self {
        Self::new()
    }
}

fn us(v: &SubflowView) -> Option<u64> {
    v.srtt.map(|d| d.as_micros() as u64)
}

impl BlestScheduler {
    /// λ at its start, no srtt history.
    pub fn new() -> Self {
        BlestScheduler {
            srtt_range: Vec::new(),
            lambda_1000: LAMBDA_INIT,
            last_lambda_update: None,
            retrans_flag: false,
            rbuf: RcvBufOpt::default(),
            requests: VecDeque::new(),
            waits: 0,
        }
    }

    /// λ × 1000 now.
    pub fn lambda_1000(&self) -> i32 {
        self.lambda_1000
    }

    fn range(&self, id: usize) -> (u64, u64) {
        self.srtt_range.get(id).copied().flatten().unwrap_or((0, 0))
    }

    fn note_srtt(&mut self, v: &SubflowView) {
        let Some(s) = us(v) else { return };
        if self.srtt_range.len() <= v.id {
            self.srtt_range.resize(v.id + 1, None);
        }
        let r = &mut self.srtt_range[v.id];
        *r = Some(r.map_or((s, s), |(lo, hi)| (lo.min(s), hi.max(s))));
    }

    fn update_lambda(&mut self, slow: &SubflowView, now: Instant) {
        let (min_srtt, _) = self.range(slow.id);
        // The kernel stamps the update time when the connection's first
        // subflow starts: the first change comes a slow min srtt later.
        let Some(last) = self.last_lambda_update else {
            self.last_lambda_update = Some(now);
            return;
        };
        if (now - last).as_micros() < u128::from(min_srtt) {
            return;
        }
        self.lambda_1000 += if self.retrans_flag { DYN_LAMBDA_BAD } else { -DYN_LAMBDA_GOOD };
        self.retrans_flag = false;
        self.lambda_1000 = self.lambda_1000.clamp(LAMBDA_MIN, LAMBDA_MAX);
        self.last_lambda_update = Some(now);
    }

    /// `blestsched_estimate_linger_time`: how long the slow subflow holds
    /// a segment sent now, µs.
    fn linger_us(&self, slow: &SubflowView) -> u64 {
        let (lo, hi) = self.range(slow.id);
        let inflight = u64::from(slow.in_flight) + 1;
        let cwnd = u64::from(slow.cwnd.max(1));
        let estimate = if inflight >= cwnd { hi } else { lo + (hi - lo) * inflight / cwnd };
        us(slow).unwrap_or(0).max(estimate)
    }

    /// `blestsched_estimate_bytes`: bytes the fast subflow sends in `time_us`.
    fn fast_bytes(&self, fast: &SubflowView, time_us: u64) -> u64 {
        let (lo, hi) = self.range(fast.id);
        let avg = (lo + hi) / 2;
        let num_rtts = time_us.checked_div(avg).map_or(1, |n| n + 1);
        let cwnd = u64::from(fast.cwnd);
        let packets = if fast.ssthresh == u32::MAX {
            let n = num_rtts.min(16);
            cwnd * ((1 << n) - 1)
        } else {
            let ca_cwnd = cwnd.max(u64::from(fast.ssthresh) + 1);
            (ca_cwnd + (num_rtts - 1) / 2) * num_rtts
        };
        packets.saturating_mul(u64::from(fast.mss)).saturating_mul(self.lambda_1000 as u64) / 1000
    }
}

/// The fastest subflow that can send at all, room or not (BLEST's and
/// ECF's `minsk`).
pub(super) fn fastest(subflows: &[SubflowView]) -> Option<&SubflowView> {
    subflows.iter().filter(|v| v.available && v.srtt.is_some()).min_by_key(|v| (v.srtt, v.id))
}

impl Scheduler for BlestScheduler {
    fn name(&self) -> &'static str {
        "blest"
    }

    fn select(&mut self, subflows: &[SubflowView], conn: &ConnView) -> Option<Pick> {
        for v in subflows.iter().filter(|v| v.available) {
            self.note_srtt(v);
        }
        let minsk = fastest(subflows).copied();
        let pick = super::minrtt::pick(subflows)?;
        let Some(fast) = minsk.filter(|f| f.id != pick.id) else { return Some(pick) };
        let slow = *subflows.iter().find(|v| v.id == pick.id)?;
        self.update_lambda(&slow, conn.now);
        let fast_bytes = self.fast_bytes(&fast, self.linger_us(&slow));
        // The slow subflow's bytes keep their room in the peer's window
        // until they are acknowledged, one slow srtt from now.
        let slow_bytes = (pick.max_burst + slow.queued) as u64;
        let avail = conn.window().saturating_sub(slow_bytes);
        if fast_bytes > avail {
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
        if self.rbuf.when_blocked(subflows, conn, pick, &mut self.requests) {
            self.retrans_flag = true;
        }
    }

    fn poll_request(&mut self) -> Option<Request> {
        self.requests.pop_front()
    }

    fn forget(&mut self, id: usize) {
        if let Some(r) = self.srtt_range.get_mut(id) {
            *r = None;
        }
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

    /// A 10 ms subflow with its window full and a 100 ms one with room.
    fn paths(fast_cwnd: u32, ssthresh: u32) -> [SubflowView; 2] {
        let base = SubflowView { send_space: 1 << 20, mss: 1000, ..SubflowView::default() };
        let fast = SubflowView {
            id: 0,
            cwnd: fast_cwnd,
            in_flight: fast_cwnd,
            ssthresh,
            srtt: Some(Duration::from_millis(10)),
            ..base
        };
        let slow =
            SubflowView { id: 1, cwnd: 10, in_flight: 2, ssthresh: 20, srtt: Some(Duration::from_millis(100)), ..base };
        [fast, slow]
    }

    fn conn(window: u64) -> ConnView {
        ConnView { una: 0, nxt: 0, write_seq: 1 << 20, wnd_end: window, send_buffer: 1 << 21, ..ConnView::default() }
    }

    #[test]
    fn waits_for_the_fast_subflow_when_its_bytes_would_not_fit_the_window() {
        let mut s = BlestScheduler::new();
        let v = paths(10, 10);
        // Fast: 10 ms, CA with cwnd max(10, 11) = 11: one slow linger
        // (100 ms) is 11 fast RTTs, (11 + 5) · 11 = 176 packets · 1000 B ·
        // 1.2 (λ at its start) = 211,200 bytes.
        assert_eq!(s.select(&v, &conn(200_000)), None);
        assert_eq!(s.lambda_1000(), 1200);
        assert_eq!(s.fast_bytes(&v[0], s.linger_us(&v[1])), 211_200);
        // A window with room for them and the slow burst: the slow path goes.
        let slow_bytes = 8_000 + v[1].queued as u64;
        assert_eq!(s.select(&v, &conn(211_200 + slow_bytes)), Some(Pick::one(1, 8000)));
        assert_eq!(s.select(&v, &conn(211_200 + slow_bytes - 1)), None);
    }

    #[test]
    fn slow_start_is_estimated_as_doubling() {
        let s = BlestScheduler::new();
        let mut v = paths(10, u32::MAX);
        v[0].srtt = Some(Duration::from_millis(40));
        let mut s = s;
        s.note_srtt(&v[0]);
        // 100 ms / 40 ms + 1 = 3 RTTs: 10 · (2³ − 1) = 70 packets · 1.2.
        assert_eq!(s.fast_bytes(&v[0], 100_000), 84_000);
    }

    #[test]
    fn the_fast_pick_is_never_held_back() {
        let mut s = BlestScheduler::new();
        let mut v = paths(10, 10);
        v[0].in_flight = 2;
        assert_eq!(s.select(&v, &conn(1)).map(|p| p.id), Some(0));
    }

    #[test]
    fn lambda_rises_after_a_retransmission_and_stays_in_range() {
        let mut s = BlestScheduler::new();
        let v = paths(10, 10);
        let mut t = 0;
        for _ in 0..20 {
            s.retrans_flag = true;
            s.select(&v, &ConnView { now: Instant::from_millis(t), ..conn(1) });
            t += 200;
        }
        assert_eq!(s.lambda_1000(), LAMBDA_MAX);
        for _ in 0..100 {
            s.select(&v, &ConnView { now: Instant::from_millis(t), ..conn(1) });
            t += 200;
        }
        assert_eq!(s.lambda_1000(), LAMBDA_MIN);
        // Not more often than once per minimum srtt of the slow subflow (100 ms).
        s.retrans_flag = true;
        s.select(&v, &ConnView { now: Instant::from_millis(t + 50 - 200), ..conn(1) });
        assert_eq!(s.lambda_1000(), LAMBDA_MIN);
    }
}
