//! Whatever a subflow feeds the controllers, estimator and pacers — samples
//! built from hostile packets, clocks that jump or run backwards, absurd
//! windows — they must not panic, hang or leave nonsense behind.

use mptun_cc::{
    new_controller_with, new_pacer, AckSample, Algorithm, CaEvent, CaState, CcState, CubicConfig, Duration,
    HystartRoundStart, Instant, PacerKind, PacingRateConfig, RttEstimator, WindowCut,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Acked { pkts: u32, rtt_us: Option<u64>, una: u32, nxt: u32 },
    CongAvoid { acked: u32 },
    Ssthresh,
    State(u8),
    Event(u8),
    Sent,
    Pacing(u64, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<u32>(), proptest::option::of(0u64..u64::MAX / 1000), any::<u32>(), any::<u32>())
            .prop_map(|(pkts, rtt_us, una, nxt)| Op::Acked { pkts, rtt_us, una, nxt }),
        (0u32..5000).prop_map(|acked| Op::CongAvoid { acked }),
        any::<u32>().prop_map(|acked| Op::CongAvoid { acked }),
        Just(Op::Ssthresh),
        (0u8..5).prop_map(Op::State),
        (0u8..4).prop_map(Op::Event),
        Just(Op::Sent),
        (any::<u64>(), any::<bool>()).prop_map(|(r, p)| Op::Pacing(r, p)),
    ]
}

fn state(i: u8) -> CaState {
    [CaState::Open, CaState::Disorder, CaState::Recovery, CaState::Loss][usize::from(i % 4)]
}

fn event(i: u8) -> CaEvent {
    [CaEvent::TxStart, CaEvent::CompleteCwr, CaEvent::Loss][usize::from(i % 3)]
}

proptest! {
    #[test]
    fn controllers_survive_any_call_sequence(
        cubic in any::<bool>(),
        legacy in any::<bool>(),
        cwnd in any::<u32>(),
        ssthresh in any::<u32>(),
        clamp in any::<u32>(),
        ops in proptest::collection::vec((op(), any::<i64>()), 1..200),
    ) {
        let alg = if cubic { Algorithm::Cubic } else { Algorithm::Reno };
        let round_start = if legacy { HystartRoundStart::Legacy } else { HystartRoundStart::Fixed };
        let mut cc = new_controller_with(alg, CubicConfig { round_start, ..CubicConfig::default() });
        let mut st = CcState { cwnd, cwnd_cnt: 0, ssthresh, cwnd_clamp: clamp };
        let mut now = Instant::from_millis(1);
        cc.init(&mut st, now);
        for (op, dt) in ops {
            // Mostly forward, sometimes backwards, sometimes huge jumps.
            now = if dt >= 0 { now + Duration::from_nanos(dt as u64 % 10_000_000_000_000) } else { now - Duration::from_nanos(dt.unsigned_abs() % 1_000_000_000) };
            match op {
                Op::Acked { pkts, rtt_us, una, nxt } => {
                    let s = AckSample { pkts_acked: pkts, rtt: rtt_us.map(Duration::from_micros), snd_una: una, snd_nxt: nxt, in_flight: pkts };
                    cc.pkts_acked(&mut st, &s, now);
                }
                Op::CongAvoid { acked } => {
                    let before = st.cwnd;
                    cc.cong_avoid(&mut st, 0, acked, now);
                    prop_assert!(st.cwnd >= before.min(st.cwnd_clamp));
                }
                Op::Ssthresh => {
                    let s = cc.ssthresh(&st);
                    prop_assert!(s >= 2);
                    st.ssthresh = s;
                    st.cwnd = s;
                }
                Op::State(i) => cc.set_state(&mut st, state(i), now),
                Op::Event(i) => cc.cwnd_event(&mut st, event(i), now),
                Op::Sent => cc.data_sent(now),
                Op::Pacing(r, p) => cc.set_pacing(r, p),
            }
        }
        let _ = cc.counters();
        cc.reduce_window(&mut st, if cwnd % 2 == 0 { WindowCut::HalveWithSsthresh } else { WindowCut::Halve });
        prop_assert!(st.cwnd >= 1);
    }

    #[test]
    fn rtt_and_pacers_survive_anything(
        samples in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..100),
        backoffs in 0u32..100,
        lens in proptest::collection::vec((any::<usize>(), any::<u64>(), any::<u64>()), 1..100),
        mss in any::<u32>(), cwnd in any::<u32>(), ssthresh in any::<u32>(), out in any::<u32>(), srtt in any::<u64>(),
    ) {
        let mut e = RttEstimator::default();
        for (t, r) in samples {
            e.update(Instant::from_nanos(t), Duration::from_nanos(r));
            let rto = e.rto();
            prop_assert!(rto >= Duration::from_millis(200) && rto <= Duration::from_secs(120));
        }
        for _ in 0..backoffs {
            e.backoff();
            prop_assert!(e.rto() <= Duration::from_secs(120));
        }
        let _ = PacingRateConfig::default().rate(mss, cwnd, ssthresh, out, Some(Duration::from_nanos(srtt)));
        for kind in [PacerKind::Edt, PacerKind::Quantum, PacerKind::None] {
            let mut p = new_pacer(kind, 1500);
            for &(len, rate, t) in &lens {
                p.set_rate(rate);
                let now = Instant::from_nanos(t);
                prop_assert!(p.departure(now) >= now);
                p.on_send(now, len);
            }
        }
    }
}
