//! BALIA, the Balanced Linked Adaptation algorithm
//! (draft-walid-mptcp-congestion-control-04; Peng, Walid, Hwang, Low,
//! "Multipath TCP: analysis, design and implementation", IEEE/ACM ToN
//! 2016), as multipath-tcp.org's `mptcp_balia.c` computes it.
//!
//! With `x_p = w_p / rtt_p` each path's rate and `alpha_r = max_p x_p / x_r`,
//! a subflow `r` in congestion avoidance grows, per packet acked, by
//!
//! ```text
//!        x_r / rtt_r        1 + alpha_r     4 + alpha_r
//!   ------------------- · ------------- · -------------
//!     (sum_p x_p)^2            2               5
//! ```
//!
//! packets, and on a loss falls by `w_r / 2 · min(alpha_r, 1.5)`: a path
//! slower than the best grows a little faster and, on loss, gives up more,
//! which balances responsiveness against friendliness between LIA and OLIA.
//!
//! `mptcp_balia.c` takes `alpha_r` as an integer quotient (1 until the best
//! path is twice as fast); this keeps it real, as the draft writes it. Like
//! the kernel it halves the window first and cuts the decrease to whole
//! packets, and it counts per packet acked rather than per ACK.

use super::{Coupled, CoupledRule, SubflowCc};

/// Each sending path's rate `x_p = w_p / rtt_p` (packets per second):
/// (the path `me`'s, the largest, the sum). `None` when `me` cannot send.
fn rates(subflows: &[SubflowCc], me: usize) -> Option<(f64, f64, f64)> {
    let rate = |s: &SubflowCc| f64::from(s.cwnd) / s.rtt_s();
    let s = subflows.get(me).filter(|s| s.can_send())?;
    let senders = || subflows.iter().filter(|s| s.can_send());
    let max = senders().map(rate).fold(0.0, f64::max);
    let sum: f64 = senders().map(rate).sum();
    Some((rate(s), max, sum))
}

/// The increase of subflow `me`, in packets, for `acked` packets acked in
/// congestion avoidance.
pub fn balia_increase(subflows: &[SubflowCc], me: usize, acked: u32) -> f64 {
    let Some((x, max, sum)) = rates(subflows, me) else { return 0.0 };
    let alpha = max / x;
    let rtt = subflows[me].rtt_s();
    f64::from(acked) * (x / rtt) / (sum * sum) * (1.0 + alpha) / 2.0 * (4.0 + alpha) / 5.0
}

/// Packets subflow `me` gives up on a loss: `w / 2 · min(alpha, 1.5)`, the
/// half window taken first and the product cut to whole packets, as
/// `mptcp_balia.c` does.
pub fn balia_decrease(subflows: &[SubflowCc], me: usize) -> u32 {
    let Some((x, max, _)) = rates(subflows, me) else { return subflows.get(me).map_or(0, |s| s.cwnd / 2) };
    let half = f64::from(subflows[me].cwnd >> 1);
    (half * (max / x).min(1.5)) as u32
}

/// BALIA.
pub type Balia = Coupled<BaliaRule>;

/// What makes [`Balia`] what it is.
#[derive(Clone, Copy, Debug, Default)]
pub struct BaliaRule;

impl CoupledRule for BaliaRule {
    const NAME: &'static str = "balia";

    fn increase(subflows: &[SubflowCc], me: usize, acked: u32) -> f64 {
        balia_increase(subflows, me, acked)
    }
    fn decrease(subflows: &[SubflowCc], me: usize) -> Option<u32> {
        Some(balia_decrease(subflows, me))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{close, sf};
    use super::super::Coupling;
    use super::*;
    use crate::{CcState, CongestionControl, Instant};

    #[test]
    fn increase_favours_the_slower_path() {
        // x = 200 and 100 packets/s; sum 300.
        let v = [sf(20, 100), sf(10, 100)];
        // Path 1: alpha 2, (100/0.1)/300² · 3/2 · 6/5 = 0.02.
        assert!(close(balia_increase(&v, 1, 1), 0.02));
        // Path 0: alpha 1, (200/0.1)/300² · 1 · 1 = 0.0222.
        assert!(close(balia_increase(&v, 0, 1), 2000.0 / 90000.0));
        assert!(close(balia_increase(&v, 1, 5), 0.1));
        // A real alpha: 1.5 for a path two thirds as fast.
        let v = [sf(15, 100), sf(10, 100)];
        let alpha: f64 = 1.5;
        let want = (100.0 / 0.1) / (250.0 * 250.0) * (1.0 + alpha) / 2.0 * (4.0 + alpha) / 5.0;
        assert!(close(balia_increase(&v, 1, 1), want));
    }

    #[test]
    fn decrease_is_half_the_window_times_min_alpha_one_and_a_half() {
        let v = [sf(20, 100), sf(10, 100)];
        assert_eq!(balia_decrease(&v, 0), 10, "the best path halves");
        // alpha 2, capped at 1.5: 5 · 1.5 = 7.5, cut to 7.
        assert_eq!(balia_decrease(&v, 1), 7);
        let v = [sf(15, 100), sf(10, 100)];
        // alpha 1.5 exactly (the kernel's integer alpha would be 1): 7.
        assert_eq!(balia_decrease(&v, 1), 7);
        let v = [sf(12, 100), sf(10, 100)];
        // alpha 1.2: 5 · 1.2 = 6 (the kernel: 5).
        assert_eq!(balia_decrease(&v, 1), 6);
        let mut b = Balia::new();
        b.set_coupling(&Coupling { subflows: &v, me: Some(1) });
        let st = CcState { cwnd: 10, cwnd_cnt: 0, ssthresh: 5, cwnd_clamp: 1000 };
        assert_eq!(b.ssthresh(&st), 4);
        b.set_coupling(&Coupling { subflows: &v[1..], me: Some(0) });
        assert_eq!(b.ssthresh(&st), 5, "alone: Reno's halving");
    }

    #[test]
    fn the_slower_path_grows_after_fifty_acks() {
        let v = [sf(20, 100), sf(10, 100)];
        let mut b = Balia::new();
        b.set_coupling(&Coupling { subflows: &v, me: Some(1) });
        let mut st = CcState { cwnd: 10, cwnd_cnt: 0, ssthresh: 5, cwnd_clamp: 1000 };
        for _ in 0..49 {
            b.cong_avoid(&mut st, 0, 1, Instant::ZERO);
        }
        assert_eq!(st.cwnd, 10, "49 · 0.02 = 0.98");
        b.cong_avoid(&mut st, 0, 2, Instant::ZERO);
        assert_eq!(st.cwnd, 11, "51 · 0.02 = 1.02");
    }
}
