//! Per-event cost of the controllers, estimator and pacers: the work a
//! subflow adds to every ACK and every send. Prints figures; asserts nothing.
//!
//! `cargo bench -p mptun-cc --bench cc`

use std::hint::black_box;
use std::time::Instant as Wall;

use mptun_cc::{
    new_controller, new_pacer, AckSample, Algorithm, CaState, CcState, Duration, Instant, PacerKind, PacingRateConfig,
    RttEstimator,
};

const N: u32 = 5_000_000;

fn report(name: &str, n: u32, start: Wall) {
    let ns = start.elapsed().as_nanos() as f64 / f64::from(n);
    println!("{name:<34} {ns:>7.1} ns/op  ({:>6.1} M ops/s)", 1e3 / ns);
}

/// A bulk flow's ACK path: pkts_acked + cong_avoid, a loss every 10k ACKs.
fn controller(alg: Algorithm) {
    let mut cc = new_controller(alg);
    let mut st = CcState::new(10);
    let mut now = Instant::from_millis(1);
    cc.init(&mut st, now);
    let mut una = 0u32;
    let start = Wall::now();
    for i in 0..N {
        now += Duration::from_micros(10);
        una = una.wrapping_add(1);
        let nxt = una.wrapping_add(st.cwnd);
        let s = AckSample {
            pkts_acked: 1,
            rtt: Some(Duration::from_micros(20_000 + u64::from(i % 500))),
            snd_una: una,
            snd_nxt: nxt,
            in_flight: st.cwnd,
        };
        cc.pkts_acked(&mut st, &s, now);
        cc.cong_avoid(&mut st, una, 1, now);
        if i % 10_000 == 9_999 {
            st.ssthresh = cc.ssthresh(&st);
            st.cwnd = st.ssthresh;
            cc.set_state(&mut st, CaState::Open, now);
        }
    }
    black_box(&st);
    report(&format!("{} ack (pkts_acked+cong_avoid)", alg), N, start);
}

fn rtt() {
    let mut e = RttEstimator::default();
    let start = Wall::now();
    for i in 0..N {
        e.update(Instant::from_micros(u64::from(i) * 10), Duration::from_micros(20_000 + u64::from(i % 977)));
        black_box(e.rto());
    }
    report("rtt update + rto", N, start);
}

fn pacer(kind: PacerKind) {
    let mut p = new_pacer(kind, 1500);
    let cfg = PacingRateConfig::default();
    let mut now = Instant::ZERO;
    let start = Wall::now();
    for i in 0..N {
        if i % 16 == 0 {
            p.set_rate(cfg.rate(1448, 100 + i % 50, 120, 0, Some(Duration::from_millis(20))));
        }
        now = p.departure(now);
        p.on_send(now, 1500);
    }
    black_box(now);
    report(&format!("{kind} pacer departure+on_send"), N, start);
}

fn main() {
    controller(Algorithm::Reno);
    controller(Algorithm::Cubic);
    rtt();
    for k in [PacerKind::Edt, PacerKind::Quantum, PacerKind::None] {
        pacer(k);
    }
    println!(
        "sizes: Cubic {} B, RttEstimator {} B, EdtPacer {} B, QuantumPacer {} B",
        size_of::<mptun_cc::Cubic>(),
        size_of::<RttEstimator>(),
        size_of::<mptun_cc::EdtPacer>(),
        size_of::<mptun_cc::QuantumPacer>()
    );
}
