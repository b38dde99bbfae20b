//! Pacers driven with the polling contract a subflow uses: ask for the
//! departure, move the clock there, send, report the send.

use mptun_cc::{
    new_pacer, Duration, EdtPacer, Instant, Pacer, PacerKind, PacingRateConfig, QuantumConfig, QuantumPacer,
};

/// Send `n` segments of `len` bytes as early as the pacer allows, starting
/// at `start`; returns each departure time.
fn drain(p: &mut dyn Pacer, start: Instant, n: usize, len: usize) -> Vec<Instant> {
    let mut now = start;
    (0..n)
        .map(|_| {
            now = p.departure(now);
            p.on_send(now, len);
            now
        })
        .collect()
}

fn gaps(times: &[Instant]) -> Vec<Duration> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn edt_first_ten_segments_unpaced_then_len_over_rate() {
    let mut p = EdtPacer::new();
    p.set_rate(1_500_000); // 1500 bytes per ms
    let t0 = Instant::from_millis(5);
    let d = drain(&mut p, t0, 30, 1500);
    assert!(d[..10].iter().all(|&t| t == t0), "first 10 leave together: {:?}", &d[..10]);
    for (i, &t) in d.iter().enumerate().skip(10) {
        assert_eq!(t, t0 + MS * (i as u32 - 9), "segment {i}");
    }
    assert_eq!(p.data_segs_out(), 30);
    assert_eq!(p.rate_bytes_per_sec(), 1_500_000);
    // Sizes matter: a 500-byte segment costs a third of the gap.
    let next = p.next_departure();
    p.on_send(next, 500);
    assert_eq!(p.next_departure() - next, Duration::from_nanos(333_333));
}

#[test]
fn edt_does_not_bank_credit_while_idle() {
    let mut p = EdtPacer::new().with_unpaced_segments(0);
    p.set_rate(1_500_000);
    let d = drain(&mut p, Instant::ZERO, 20, 1500);
    let resume = *d.last().unwrap() + Duration::from_secs(1);
    let d = drain(&mut p, resume, 5, 1500);
    assert_eq!(d[0], resume, "the first segment after idle leaves at once");
    // Only the OS-jitter allowance (at most half a gap) is given back.
    assert_eq!(d[1] - d[0], MS / 2);
    assert_eq!(gaps(&d[1..]), vec![MS; 3]);
}

#[test]
fn edt_late_send_gets_up_to_half_a_gap_back() {
    let mut p = EdtPacer::new().with_unpaced_segments(0);
    p.set_rate(1_500_000);
    p.on_send(Instant::ZERO, 1500);
    assert_eq!(p.departure(Instant::ZERO), Instant::ZERO + MS);
    // Timer fired 200 us late: the next gap shrinks by 200 us.
    let late = Instant::ZERO + MS + Duration::from_micros(200);
    p.on_send(late, 1500);
    assert_eq!(p.next_departure(), late + Duration::from_micros(800));
}

#[test]
fn edt_unpaced_rates() {
    for rate in [0, u64::MAX] {
        let mut p = EdtPacer::new();
        p.set_rate(rate);
        let d = drain(&mut p, Instant::ZERO, 50, 1500);
        assert!(d.iter().all(|&t| t == Instant::ZERO), "rate {rate}");
    }
}

#[test]
fn pacing_rate_follows_linux_formula() {
    let cfg = PacingRateConfig::default();
    let srtt = Some(Duration::from_millis(100));
    // Slow start (cwnd < ssthresh / 2): 200% of 1460 × 10 / 0.1 s.
    assert_eq!(cfg.rate(1460, 10, u32::MAX, 0, srtt), 292_000);
    assert_eq!(cfg.rate(1460, 9, 20, 0, srtt), 2 * 1460 * 9 * 10);
    // Approaching ssthresh or in congestion avoidance: 120%.
    assert_eq!(cfg.rate(1460, 10, 20, 0, srtt), 175_200);
    assert_eq!(cfg.rate(1460, 10, 10, 0, srtt), 175_200);
    // More in flight than cwnd (after a reduction): the flight counts.
    assert_eq!(cfg.rate(1460, 10, 10, 20, srtt), 350_400);
    // srtt in 1/8 us as the kernel keeps it: 10 ms + 1/8 us rounds down.
    assert_eq!(
        cfg.rate(1000, 10, 10, 0, Some(Duration::from_nanos(10_000_125))),
        1_000 * 10 * 120 * 10_000 * 8 / 80_001
    );
    // No RTT yet: nothing to pace by.
    assert_eq!(cfg.rate(1460, 10, 10, 0, None), u64::MAX);
    // SO_MAX_PACING_RATE caps it.
    let capped = PacingRateConfig { max_pacing_rate: 100_000, ..cfg };
    assert_eq!(capped.rate(1460, 10, u32::MAX, 0, srtt), 100_000);
    assert_eq!(capped.rate(1460, 10, u32::MAX, 0, None), 100_000);
    // Ratios are sysctls.
    let custom = PacingRateConfig { ss_ratio: 100, ca_ratio: 100, ..cfg };
    assert_eq!(custom.rate(1460, 10, u32::MAX, 0, srtt), 146_000);
}

#[test]
fn quantum_pacer_sends_quantum_bursts_then_waits_quantum_over_rate() {
    let cfg = QuantumConfig::for_mtu(1500);
    assert_eq!((cfg.quantum, cfg.initial_quantum), (3000, 15_000));
    let mut p = QuantumPacer::new(cfg);
    p.set_rate(3_000_000); // 3000 bytes (one quantum) per ms
    let t0 = Instant::from_millis(1);
    let d = drain(&mut p, t0, 30, 1500);
    // initial_quantum: 10 packets back to back.
    assert!(d[..10].iter().all(|&t| t == t0));
    // Then pairs (one quantum) every quantum / rate = 1 ms.
    for (i, &t) in d.iter().enumerate().skip(10) {
        let pair = (i as u32 - 10) / 2 + 1;
        assert_eq!(t, t0 + MS * pair, "packet {i}");
    }
    // Long-run average is the configured rate: 20 packets × 1500 B over 10 ms.
    assert_eq!(d[29] - d[10], MS * 9);
}

#[test]
fn quantum_pacer_below_low_rate_paces_every_packet() {
    let mut p = QuantumPacer::new(QuantumConfig::for_mtu(1500));
    p.set_rate(50_000); // 400 kbit/s < 550 kbit/s
    let d = drain(&mut p, Instant::ZERO, 5, 1500);
    assert_eq!(gaps(&d), vec![Duration::from_millis(30); 4]);
    assert_eq!(p.credit(), 0);
}

#[test]
fn quantum_pacer_clamps_throttle_to_one_second() {
    let mut p = QuantumPacer::new(QuantumConfig::for_mtu(1500));
    p.set_rate(100); // 15 s per packet
    let d = drain(&mut p, Instant::ZERO, 3, 1500);
    assert_eq!(gaps(&d), vec![Duration::from_secs(1); 2]);
}

#[test]
fn quantum_pacer_refills_one_quantum_after_idle() {
    let mut p = QuantumPacer::new(QuantumConfig::for_mtu(1500));
    p.set_rate(3_000_000);
    let d = drain(&mut p, Instant::ZERO, 13, 1500);
    // Idle 100 ms (> flow_refill_delay 40 ms).
    let resume = *d.last().unwrap() + Duration::from_millis(100);
    let d = drain(&mut p, resume, 6, 1500);
    // A quantum's burst, not the initial quantum's: 2 packets, then 1 ms.
    assert_eq!(d[0], resume);
    assert_eq!(d[1], resume);
    assert!(d[2] > resume);
}

#[test]
fn factory_and_names() {
    for (name, kind) in [("edt", PacerKind::Edt), ("quantum", PacerKind::Quantum), ("none", PacerKind::None)] {
        assert_eq!(name.parse::<PacerKind>().unwrap(), kind);
        let mut p = new_pacer(kind, 1500);
        p.set_rate(1_500_000);
        assert_eq!(p.rate(), 1_500_000);
        let d = drain(p.as_mut(), Instant::ZERO, 40, 1500);
        let span = *d.last().unwrap() - d[0];
        match kind {
            PacerKind::None => assert_eq!(span, Duration::ZERO),
            _ => assert!(span >= Duration::from_millis(25) && span <= Duration::from_millis(31), "{kind}: {span:?}"),
        }
    }
}
