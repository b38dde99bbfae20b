//! OLIA, the Opportunistic Linked Increases Algorithm
//! (draft-khalili-mptcp-congestion-control-05; Khalili, Gast, Popovic, Le
//! Boudec, CoNEXT 2012), as multipath-tcp.org's `mptcp_olia.c` computes it.
//!
//! A subflow `r` in congestion avoidance grows, per packet acked, by
//!
//! ```text
//!   w_r / rtt_r^2
//!  ----------------------  +  alpha_r / w_r
//!  (sum_p w_p / rtt_p)^2
//! ```
//!
//! packets. The first term is LIA's fair share; `alpha_r` moves window from
//! the paths with the largest windows (`M`) to the presumably best paths
//! (`B`: the largest `l_p / rtt_p^2`, with `l_p` the bytes between losses)
//! that do not have the largest window yet: `1 / (|P| · |B \ M|)` on those,
//! `-1 / (|P| · |M|)` on the paths of `M` when `B \ M` is not empty, else 0.
//! That is what makes OLIA Pareto-optimal where LIA is not.
//!
//! `mptcp_olia.c` counts per ACK; this counts per packet acked (byte
//! counting, as RFC 6356 does for LIA), so that delayed and coalesced ACKs
//! do not slow it down.

use super::{Coupled, CoupledRule, SubflowCc};

/// `l_p / rtt_p^2` of `a` against `b`, exactly (RTTs in microseconds):
/// `Greater` when `a`'s path is the better one.
fn better(a: &SubflowCc, b: &SubflowCc) -> core::cmp::Ordering {
    let us = |s: &SubflowCc| s.srtt.map_or(0, |r| r.as_micros());
    let (ra, rb) = (us(a), us(b));
    (u128::from(a.loss_interval) * rb * rb).cmp(&(u128::from(b.loss_interval) * ra * ra))
}

/// OLIA's `alpha_r` for subflow `me` (0 when it cannot send).
pub fn olia_alpha(subflows: &[SubflowCc], me: usize) -> f64 {
    let senders: Vec<&SubflowCc> = subflows.iter().filter(|s| s.can_send()).collect();
    let me = &subflows[me];
    if !me.can_send() {
        return 0.0;
    }
    let Some(max_w) = senders.iter().map(|s| s.window()).max() else { return 0.0 };
    let Some(best) = senders.iter().copied().max_by(|a, b| better(a, b)) else { return 0.0 };
    let in_b = |s: &SubflowCc| better(s, best).is_eq();
    let m = senders.iter().filter(|s| s.window() == max_w).count();
    let b_not_m = senders.iter().filter(|s| s.window() != max_w && in_b(s)).count();
    let n = senders.len() as f64;
    if b_not_m == 0 {
        0.0
    } else if me.window() < max_w && in_b(me) {
        1.0 / (n * b_not_m as f64)
    } else if me.window() == max_w {
        -1.0 / (n * m as f64)
    } else {
        0.0
    }
}

/// The increase of subflow `me`, in packets (negative: a decrease), for
/// `acked` packets acked in congestion avoidance.
pub fn olia_increase(subflows: &[SubflowCc], me: usize, acked: u32) -> f64 {
    let s = &subflows[me];
    let senders = || subflows.iter().filter(|s| s.can_send());
    let sum: f64 = senders().map(|p| f64::from(p.window()) / p.rtt_s()).sum();
    if sum <= 0.0 || !s.can_send() {
        return 0.0;
    }
    let w = f64::from(s.window());
    let fair = w / (s.rtt_s() * s.rtt_s()) / (sum * sum);
    f64::from(acked) * (fair + olia_alpha(subflows, me) / w)
}

/// OLIA.
pub type Olia = Coupled<OliaRule>;

/// What makes [`Olia`] what it is.
#[derive(Clone, Copy, Debug, Default)]
pub struct OliaRule;

impl CoupledRule for OliaRule {
    const NAME: &'static str = "olia";

    fn increase(subflows: &[SubflowCc], me: usize, acked: u32) -> f64 {
        olia_increase(subflows, me, acked)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{close, sf};
    use super::super::Coupling;
    use super::*;
    use crate::{CcState, CongestionControl, Instant};

    /// Two paths of equal RTT: path 0 has the larger window, path 1 the
    /// longer loss interval (the better path).
    fn pair() -> [SubflowCc; 2] {
        let (mut a, mut b) = (sf(20, 100), sf(10, 100));
        a.loss_interval = 50_000;
        b.loss_interval = 100_000;
        [a, b]
    }

    #[test]
    fn alpha_moves_window_from_the_largest_to_the_best_path() {
        let v = pair();
        // M = {0}, B = {1}, B \ M = {1}, |P| = 2.
        assert!(close(olia_alpha(&v, 0), -0.5));
        assert!(close(olia_alpha(&v, 1), 0.5));
        // The best path has the largest window too: B \ M is empty, alpha 0.
        let mut v2 = v;
        v2[1].cwnd = 30;
        assert_eq!((olia_alpha(&v2, 0), olia_alpha(&v2, 1)), (0.0, 0.0));
        // Three paths, two of them best (equal l/rtt²) and not the largest:
        // each of B \ M gets 1/(3·2), the largest -1/(3·1).
        let mut c = sf(5, 100);
        c.loss_interval = 100_000;
        let v3 = [v[0], v[1], c];
        assert!(close(olia_alpha(&v3, 1), 1.0 / 6.0));
        assert!(close(olia_alpha(&v3, 2), 1.0 / 6.0));
        assert!(close(olia_alpha(&v3, 0), -1.0 / 3.0));
        // The loss interval is compared over rtt²: twice the interval over
        // twice the RTT is a worse path.
        let (mut slow, mut fast) = (sf(10, 200), sf(20, 100));
        slow.loss_interval = 100_000;
        fast.loss_interval = 50_000;
        assert_eq!(olia_alpha(&[fast, slow], 0), 0.0, "the best path has the largest window");
    }

    #[test]
    fn increase_per_packet_is_the_fair_share_plus_alpha_over_w() {
        let v = pair();
        // Fair share of path 1: (10/0.01) / (20/0.1 + 10/0.1)² = 1000/90000.
        assert!(close(olia_increase(&v, 1, 1), 1000.0 / 90000.0 + 0.5 / 10.0));
        // Path 0 shrinks: 2000/90000 - 0.5/20 < 0.
        let d = olia_increase(&v, 0, 1);
        assert!(close(d, 2000.0 / 90000.0 - 0.5 / 20.0) && d < 0.0, "{d}");
        assert!(close(olia_increase(&v, 1, 4), 4.0 * (1000.0 / 90000.0 + 0.05)));
    }

    #[test]
    fn the_best_path_grows_after_seventeen_acks_and_the_largest_shrinks() {
        let v = pair();
        let mut o = Olia::new();
        o.set_coupling(&Coupling { subflows: &v, me: Some(1) });
        let mut st = CcState { cwnd: 10, cwnd_cnt: 0, ssthresh: 5, cwnd_clamp: 1000 };
        for i in 1..=17 {
            o.cong_avoid(&mut st, 0, 1, Instant::ZERO);
            // 0.0611 a packet: 16 acks make 0.978, 17 make 1.039.
            assert_eq!(st.cwnd, if i < 17 { 10 } else { 11 }, "after {i}");
        }
        let mut big = Olia::new();
        big.set_coupling(&Coupling { subflows: &v, me: Some(0) });
        let mut st = CcState { cwnd: 20, cwnd_cnt: 0, ssthresh: 5, cwnd_clamp: 1000 };
        // -0.00278 a packet: about 360 acks take one packet off.
        for _ in 0..361 {
            big.cong_avoid(&mut st, 0, 1, Instant::ZERO);
        }
        assert_eq!(st.cwnd, 19);
    }
}
