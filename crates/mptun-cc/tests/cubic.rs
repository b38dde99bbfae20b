//! CUBIC driven alone: the window after a loss must trace RFC 9438's
//! W(t) = C·(t−K)³ + W_max, with the kernel's constants, and the
//! Reno-friendly region, fast convergence and RTO reset must behave as in
//! Linux `tcp_cubic.c`.

mod common;

use common::{Path, TestSender};
use mptun_cc::{CaEvent, CongestionControl, Cubic, CubicConfig, Duration, Instant};

/// The kernel's C = bic_scale·10/1024 (≈ 0.4) and β = 717/1024 (≈ 0.7).
const C: f64 = 410.0 / 1024.0;
const BETA: f64 = 717.0 / 1024.0;

fn no_hystart() -> CubicConfig {
    CubicConfig { hystart: false, ..CubicConfig::default() }
}

/// Closed-form CUBIC window `t` seconds into an epoch that started at `cwnd0`
/// below `w_max`.
fn w_cubic(t: f64, w_max: f64, cwnd0: f64) -> f64 {
    let k = ((w_max - cwnd0) / C).cbrt();
    C * (t - k).powi(3) + w_max
}

/// A sender in congestion avoidance that has seen RTT samples, then loses at
/// whatever cwnd it reached. Returns (W_max, epoch start = first ACK after the loss).
fn after_loss(cfg: CubicConfig, path: Path, cwnd: u32) -> (TestSender<Cubic>, u32, Instant) {
    let mut s = TestSender::new(Cubic::new(cfg), cwnd, path);
    s.state.ssthresh = cwnd;
    s.run_for(path.base_rtt * 2);
    let w_max = s.state.cwnd;
    s.loss();
    assert_eq!(s.cc.last_max_cwnd(), w_max);
    let loss_at = s.now;
    s.run_until(Instant::FAR_FUTURE, |s| s.log.last().is_some_and(|&(t, _)| t > loss_at));
    let epoch = s.log.last().unwrap().0;
    assert_eq!(s.cc.epoch_start(), Some(epoch.as_millis() as u32));
    (s, w_max, epoch)
}

#[test]
fn window_follows_the_cubic_curve_after_a_loss() {
    // 100 ms RTT, ACKs spread over half of it (no standing queue).
    let path = Path { base_rtt: Duration::from_millis(100), serialization: Duration::from_micros(50) };
    let (mut s, w_max, epoch) = after_loss(no_hystart(), path, 1000);
    let cwnd0 = s.state.ssthresh;
    assert_eq!(cwnd0, (u64::from(w_max) * 717 / 1024) as u32);
    assert!((f64::from(cwnd0) - BETA * f64::from(w_max)).abs() < 1.0);
    let k = ((f64::from(w_max) - f64::from(cwnd0)) / C).cbrt();
    // The kernel's K in 1/1024 s, with its exact integer cube root.
    assert!((f64::from(s.cc.bic_k()) / 1024.0 - k).abs() < 2.0 / 1024.0, "K {} vs {k}", s.cc.bic_k());
    assert_eq!(s.cc.origin_point(), w_max);

    s.run_until(epoch + Duration::from_secs(14), |_| false);
    let rtt = 0.1;
    let mut checked = 0;
    let mut t = 0.5;
    while t <= 14.0 {
        let cwnd = f64::from(s.cwnd_at(epoch + Duration::from_secs_f64(t)));
        // The kernel aims one delay_min ahead: after each RTT cwnd has
        // reached the curve's value for the end of the next one.
        let lo =
            w_cubic(t, f64::from(w_max), f64::from(cwnd0)).min(w_cubic(t + rtt, f64::from(w_max), f64::from(cwnd0)));
        let hi = w_cubic(t + 2.0 * rtt, f64::from(w_max), f64::from(cwnd0));
        let tol = 2.0 + 0.005 * hi;
        assert!(cwnd >= lo - tol && cwnd <= hi + tol, "t = {t}: cwnd {cwnd} outside [{lo:.1}, {hi:.1}] ± {tol:.1}");
        checked += 1;
        t += 0.25;
    }
    assert!(checked > 50);
    // Concave then convex: slow near W_max, fast again well past K.
    let at = |t: f64| s.cwnd_at(epoch + Duration::from_secs_f64(t));
    assert!(at(k + 0.5) - at(k - 0.5) < 3);
    assert!(at(14.0) > at(k + 0.5) + 30);
    assert!(at(2.0) - at(0.5) > 100);
}

#[test]
fn reno_friendly_region_with_small_window() {
    // W_max 20 at 100 ms: CUBIC's plateau is ~2.5 s long, an AIMD flow with
    // CUBIC's beta gains 3(1−β)/(1+β) ≈ 0.53 packets per RTT and overtakes it.
    let path = Path { base_rtt: Duration::from_millis(100), serialization: Duration::from_micros(200) };
    let (mut s, w_max, epoch) = after_loss(no_hystart(), path, 20);
    let cwnd0 = f64::from(s.state.ssthresh);
    let (mut plain, _, plain_epoch) = after_loss(CubicConfig { tcp_friendliness: false, ..no_hystart() }, path, 20);
    s.run_until(epoch + Duration::from_secs(5), |_| false);
    plain.run_until(plain_epoch + Duration::from_secs(5), |_| false);

    for t in [3.0, 4.0, 5.0] {
        let d = Duration::from_secs_f64(t);
        let aimd = cwnd0 + (8.0 / 15.0) * t / 0.1;
        let cubic = w_cubic(t, f64::from(w_max), cwnd0);
        let got = f64::from(s.cwnd_at(epoch + d));
        assert!(aimd > cubic + 4.0, "t = {t}: the test needs the AIMD estimate ahead");
        assert!((got - aimd).abs() <= 2.0, "t = {t}: cwnd {got}, AIMD estimate {aimd:.1}");
        // tcp_cwnd is the estimate the kernel chases.
        let plain_cwnd = f64::from(plain.cwnd_at(plain_epoch + d));
        assert!(
            (plain_cwnd - cubic).abs() <= 2.0,
            "t = {t}: without friendliness cwnd {plain_cwnd} should follow W_cubic {cubic:.1}"
        );
    }
    assert!(s.cc.tcp_cwnd() >= s.state.cwnd);
}

#[test]
fn fast_convergence_lowers_w_max_on_a_loss_below_the_last_one() {
    let path = Path { base_rtt: Duration::from_millis(50), serialization: Duration::from_micros(100) };
    for fast_convergence in [true, false] {
        // Without the AIMD floor, so the plateau shows W_max alone.
        let cfg = CubicConfig { fast_convergence, tcp_friendliness: false, ..no_hystart() };
        let (mut s, w_max, _) = after_loss(cfg, path, 100);
        s.run_for(Duration::from_millis(500));
        let w2 = s.state.cwnd;
        assert!(w2 < w_max, "second loss must come below W_max ({w2} vs {w_max})");
        s.loss();
        let expect = if fast_convergence { (u64::from(w2) * (1024 + 717) / 2048) as u32 } else { w2 };
        assert_eq!(s.cc.last_max_cwnd(), expect);
        assert_eq!(s.state.cwnd, (u64::from(w2) * 717 / 1024) as u32);
        // The new epoch's plateau sits at the lowered W_max.
        s.run_for(Duration::from_millis(60));
        assert_eq!(s.cc.origin_point(), expect);
        let k = f64::from(s.cc.bic_k()) / 1024.0;
        let epoch = Instant::from_millis(u64::from(s.cc.epoch_start().unwrap()));
        s.run_until(epoch + Duration::from_secs_f64(k), |_| false);
        let plateau = s.state.cwnd;
        assert!(plateau.abs_diff(expect) <= 2, "cwnd at K {plateau}, W_max {expect}");
    }
}

#[test]
fn rto_resets_the_controller() {
    let path = Path { base_rtt: Duration::from_millis(50), serialization: Duration::from_micros(100) };
    let (mut s, _, _) = after_loss(no_hystart(), path, 100);
    s.run_for(Duration::from_secs(2));
    assert!(s.cc.last_max_cwnd() > 0 && s.cc.epoch_start().is_some() && s.cc.delay_min_us() > 0);
    let cwnd = s.state.cwnd;
    s.rto();
    assert_eq!(s.state.ssthresh, (u64::from(cwnd) * 717 / 1024) as u32);
    assert_eq!(s.cc.last_max_cwnd(), 0, "bictcp_reset forgets W_max");
    assert_eq!(s.cc.epoch_start(), None);
    assert_eq!(s.cc.delay_min_us(), 0);
    assert_eq!(s.cc.bic_k(), 0);
    assert_eq!(s.cc.tcp_cwnd(), 0);
    assert_eq!(s.cc.cnt(), 0);
    // Slow start back to ssthresh, then an epoch with no memory of W_max:
    // centred on the cwnd it starts at, growth at the 5%-per-RTT cap.
    let ssthresh = s.state.ssthresh;
    s.run_until(Instant::FAR_FUTURE, |s| s.cc.epoch_start().is_some());
    assert_eq!(s.state.cwnd, ssthresh);
    assert_eq!(s.cc.bic_k(), 0);
    assert_eq!(s.cc.origin_point(), ssthresh);
    assert_eq!(s.cc.cnt(), 20);
    assert!(s.cc.delay_min_us() >= 50_000);
}

#[test]
fn delay_samples_right_after_recovery_are_ignored() {
    let path = Path { base_rtt: Duration::from_millis(50), serialization: Duration::from_micros(100) };
    let (mut s, _, epoch) = after_loss(no_hystart(), path, 100);
    let before = s.cc.delay_min_us();
    let sample = mptun_cc::AckSample {
        pkts_acked: 1,
        rtt: Some(Duration::from_millis(5)),
        snd_una: s.snd_una,
        snd_nxt: s.snd_nxt,
        in_flight: 10,
    };
    s.cc.pkts_acked(&mut s.state, &sample, epoch + Duration::from_millis(999));
    assert_eq!(s.cc.delay_min_us(), before);
    s.cc.pkts_acked(&mut s.state, &sample, epoch + Duration::from_millis(1000));
    assert_eq!(s.cc.delay_min_us(), 5000);
}

#[test]
fn idle_period_shifts_the_epoch() {
    let path = Path { base_rtt: Duration::from_millis(50), serialization: Duration::from_micros(100) };
    let (mut s, _, _) = after_loss(no_hystart(), path, 100);
    s.run_for(Duration::from_millis(500));
    let epoch = s.cc.epoch_start().unwrap();
    let last_send = s.now;
    s.cc.data_sent(last_send);
    // Application idle for 3 s, then the first send finds nothing in flight.
    let resume = last_send + Duration::from_secs(3);
    s.cc.cwnd_event(&mut s.state, CaEvent::TxStart, resume);
    assert_eq!(s.cc.epoch_start(), Some(epoch + 3000));
    // The shift never moves the epoch past now.
    let mut c = Cubic::new(no_hystart());
    let mut st = mptun_cc::CcState::new(10);
    c.init(&mut st, Instant::ZERO);
    st.ssthresh = 10;
    c.cong_avoid(&mut st, 1, 1, Instant::from_millis(1000)); // epoch at 1000 ms
    c.data_sent(Instant::from_millis(1000));
    c.cwnd_event(&mut st, CaEvent::TxStart, Instant::from_millis(1000));
    assert_eq!(c.epoch_start(), Some(1000), "no idle, no shift");
    c.data_sent(Instant::from_millis(500)); // a send time earlier than the epoch
    c.cwnd_event(&mut st, CaEvent::TxStart, Instant::from_millis(1200));
    assert_eq!(c.epoch_start(), Some(1200));
}
