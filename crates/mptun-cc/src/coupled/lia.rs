//! LIA, the Linked Increases Algorithm of RFC 6356 (multipath-tcp.org's
//! `coupled`): a subflow in congestion avoidance grows, per packet acked,
//! by `min(alpha · MSS_i / cwnd_total, 1 / cwnd_i)` packets, where `alpha`
//! sizes the whole connection's increase to what one TCP flow on its best
//! path would get. Decrease is each subflow's own halving.

use super::{Coupled, CoupledRule, SubflowCc};

/// RFC 6356 section 3, equation (2), with windows in bytes:
///
/// ```text
///                      max_i (cwnd_i / rtt_i^2)
/// alpha = cwnd_total · ------------------------
///                      (sum_i cwnd_i / rtt_i)^2
/// ```
///
/// over the subflows that can send. `None` when none can.
pub fn lia_alpha(subflows: &[SubflowCc]) -> Option<f64> {
    let senders = || subflows.iter().filter(|s| s.can_send());
    let bytes = |s: &SubflowCc| f64::from(s.cwnd) * f64::from(s.mss);
    let total: f64 = senders().map(bytes).sum();
    let max = senders()
        .map(|s| bytes(s) / (s.rtt_s() * s.rtt_s()))
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))?;
    let sum: f64 = senders().map(|s| bytes(s) / s.rtt_s()).sum();
    (sum > 0.0).then(|| total * max / (sum * sum))
}

/// The increase of subflow `me`, in packets, for `acked` packets acked in
/// congestion avoidance (RFC 6356 section 3, byte counting):
/// `min(alpha · bytes_acked · MSS_i / cwnd_total, bytes_acked · MSS_i / cwnd_i)`
/// bytes, divided by MSS_i.
pub fn lia_increase(subflows: &[SubflowCc], me: usize, acked: u32) -> f64 {
    let s = &subflows[me];
    let Some(alpha) = lia_alpha(subflows) else { return 0.0 };
    let total: f64 = subflows.iter().filter(|s| s.can_send()).map(|s| f64::from(s.cwnd) * f64::from(s.mss)).sum();
    let acked_bytes = f64::from(acked) * f64::from(s.mss);
    let coupled = alpha * acked_bytes * f64::from(s.mss) / total;
    let alone = acked_bytes * f64::from(s.mss) / (f64::from(s.cwnd) * f64::from(s.mss));
    coupled.min(alone) / f64::from(s.mss)
}

/// RFC 6356's LIA.
pub type Lia = Coupled<LiaRule>;

/// What makes [`Lia`] what it is.
#[derive(Clone, Copy, Debug, Default)]
pub struct LiaRule;

impl CoupledRule for LiaRule {
    const NAME: &'static str = "lia";

    fn increase(subflows: &[SubflowCc], me: usize, acked: u32) -> f64 {
        lia_increase(subflows, me, acked)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::{close, sf};
    use super::super::Coupling;
    use super::*;
    use crate::{CcState, CongestionControl, Instant};

    #[test]
    fn alpha_is_rfc_6356_equation_2() {
        // Equal paths: alpha = 20000 · (10000/0.1²) / (2 · 10000/0.1)² = 0.5.
        assert!(close(lia_alpha(&[sf(10, 100), sf(10, 100)]).unwrap(), 0.5));
        // 10 ms and 100 ms, 10 packets each: 20000 · 1e8 / (1e6 + 1e5)² = 1.652892…
        assert!(close(lia_alpha(&[sf(10, 10), sf(10, 100)]).unwrap(), 2e12 / 1.21e12));
        // Three paths (20, 50 ms), (10, 100 ms), (5, 200 ms):
        // 35000 · 8e6 / (4e5 + 1e5 + 2.5e4)² = 2.8e11 / 2.75625e11.
        assert!(close(lia_alpha(&[sf(20, 50), sf(10, 100), sf(5, 200)]).unwrap(), 2.8e11 / 2.75625e11));
        // A subflow without an RTT (or not usable) does not count.
        let mut gone = sf(1000, 1);
        gone.srtt = None;
        assert!(close(lia_alpha(&[sf(10, 100), sf(10, 100), gone]).unwrap(), 0.5));
        assert_eq!(lia_alpha(&[gone]), None);
    }

    #[test]
    fn increase_is_the_smaller_of_the_coupled_and_the_single_path_one() {
        let v = [sf(10, 10), sf(10, 100)];
        // alpha · MSS / cwnd_total = 1.6529 · 1000 / 20000 = 0.0826 < 1/10.
        assert!(close(lia_increase(&v, 0, 1), 2e12 / 1.21e12 / 20.0));
        assert!(close(lia_increase(&v, 1, 3), 3.0 * 2e12 / 1.21e12 / 20.0));
        // A short path with a small window beside a long one with a large
        // window: alpha = 102000 · 2e9 / (2e6 + 1e6)² = 22.67, so the
        // coupled term is 22.67 · 1000 / 102000 = 0.222 a packet, above the
        // long path's single-path 1/100: that one is capped.
        let v = [sf(2, 1), sf(100, 100)];
        assert!(close(lia_alpha(&v).unwrap(), 102_000.0 * 2e9 / 9e12));
        assert!(close(lia_increase(&v, 1, 1), 0.01));
        assert!(close(lia_increase(&v, 0, 1), 102_000.0 * 2e9 / 9e12 * 1000.0 / 102_000.0));
    }

    #[test]
    fn coupled_growth_takes_thirteen_acks_where_reno_takes_ten() {
        let (mut lia, mut reno) = (Lia::new(), crate::Reno);
        let v = [sf(10, 10), sf(10, 100)];
        lia.set_coupling(&Coupling { subflows: &v, me: Some(0) });
        let start = CcState { cwnd: 10, cwnd_cnt: 0, ssthresh: 5, cwnd_clamp: 1000 };
        let (mut a, mut b) = (start, start);
        let now = Instant::ZERO;
        for i in 1..=13 {
            lia.cong_avoid(&mut a, 0, 1, now);
            reno.cong_avoid(&mut b, 0, 1, now);
            // 0.0826 per packet: 12 acks make 0.99, 13 make 1.07.
            assert_eq!(a.cwnd, if i < 13 { 10 } else { 11 }, "LIA after {i}");
            assert_eq!(b.cwnd, if i < 10 { 10 } else { 11 }, "Reno after {i}");
        }
    }

    #[test]
    fn alone_or_in_slow_start_it_is_reno() {
        let mut lia = Lia::new();
        lia.set_coupling(&Coupling { subflows: &[sf(10, 10)], me: Some(0) });
        let mut st = CcState { cwnd: 10, cwnd_cnt: 0, ssthresh: 5, cwnd_clamp: 1000 };
        for _ in 0..10 {
            lia.cong_avoid(&mut st, 0, 1, Instant::ZERO);
        }
        assert_eq!(st.cwnd, 11, "one subflow: one packet per window");
        let v = [sf(10, 10), sf(10, 100)];
        lia.set_coupling(&Coupling { subflows: &v, me: Some(0) });
        let mut ss = CcState { cwnd: 10, cwnd_cnt: 0, ssthresh: 100, cwnd_clamp: 1000 };
        lia.cong_avoid(&mut ss, 0, 4, Instant::ZERO);
        assert_eq!(ss.cwnd, 14, "slow start is the subflow's own");
        assert_eq!(lia.ssthresh(&ss), 7);
    }
}
