//! EDT with a pacing horizon: paced segments are built ahead of time,
//! stamped with the pacer's departure times, never further out than the
//! horizon, and the subflow comes back when the next one is within reach.

use super::seg::*;

/// ESTABLISHED over a 10 ms path with EDT pacing and `horizon`, past the
/// 10 unpaced segments of the start.
fn paced(horizon: Duration) -> Sf {
    let cfg = TcpConfig { pacer: mptun_cc::PacerKind::Edt, pacing_horizon: horizon, tso: false, ..cfg() };
    let mut t = Sf::client(cfg, PLAIN);
    t.write(&bytes(200 * 1460));
    assert_eq!(t.recv_all().len(), 10, "the initial window, unpaced");
    // An ACK for all ten opens the window (slow start: 20 segments).
    t.send(Seg { seq: IRS + 1, ack: ISS + 1 + 10 * 1460, window: 65535, ..SEG });
    t
}

/// Departure times of everything sent now.
fn departures(t: &mut Sf) -> Vec<Instant> {
    let mut buf = vec![0u8; 1600];
    std::iter::from_fn(|| t.sf.poll_transmit(t.now, &mut (), &mut buf).map(|x| x.departure)).collect()
}

#[test]
fn with_a_horizon_segments_leave_stamped_ahead_up_to_it() {
    let horizon = Duration::from_millis(2);
    let mut t = paced(horizon);
    let now = t.now;
    let d = departures(&mut t);
    assert!(d.len() > 1, "{d:?}");
    assert!(d.windows(2).all(|w| w[0] < w[1]), "spaced by the pacing rate: {d:?}");
    assert!(d.iter().all(|&x| x >= now && x <= now + horizon), "{d:?}");
    assert!(*d.last().unwrap() > now, "built ahead of time");
    // The gap is the segment's time at the pacing rate.
    let gap = d[1] - d[0];
    let rate = t.sf.pacing_rate();
    let want = Duration::from_nanos(1500 * 1_000_000_000 / rate);
    assert!(gap.as_nanos().abs_diff(want.as_nanos()) * 10 < want.as_nanos(), "{gap:?} vs {want:?}");
    // Nothing more until the next slot is within the horizon.
    let next = t.sf.poll_timeout().unwrap();
    assert!(next > now && next <= *d.last().unwrap() + gap - horizon + Duration::from_micros(1), "{next:?}");
}

#[test]
fn without_a_horizon_a_segment_is_built_only_when_its_time_comes() {
    let mut t = paced(Duration::ZERO);
    let now = t.now;
    assert!(departures(&mut t).iter().all(|&d| d == now));
    for _ in 0..5 {
        let next = t.sf.poll_timeout().unwrap();
        assert!(next > t.now);
        t.now = next;
        t.sf.handle_timeout(next);
        assert_eq!(departures(&mut t), vec![next], "one segment, when its time comes");
    }
}
