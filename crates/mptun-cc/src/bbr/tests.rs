use super::*;

const MSS: u32 = 1000;

/// A BBR flow driven one packet-timed round at a time, with the rate
/// sample of each round made to measure what the test says.
struct Flow {
    bbr: Bbr,
    st: CcState,
    rate: DeliveryRate,
    now: Instant,
    in_flight: u32,
}

impl Flow {
    /// Established at t = 0 with a 100 ms handshake RTT, then one round
    /// at `bw0` packets/s so the filters hold something.
    fn new(seed: u64) -> Flow {
        let mut f = Flow {
            bbr: Bbr::new(),
            st: CcState::new(10),
            rate: DeliveryRate::default(),
            now: Instant::from_millis(100),
            in_flight: 10,
        };
        f.bbr.init(&mut f.st, Instant::ZERO);
        f.bbr.seed(seed);
        let ctx = f.ctx();
        f.bbr.established(&mut f.st, &ctx, f.now);
        f
    }

    fn ctx(&self) -> AckContext {
        AckContext {
            mss: MSS,
            in_flight: self.in_flight,
            srtt: Some(Duration::from_millis(100)),
            min_rtt: Some(Duration::from_millis(100)),
            ca_state: CaState::Open,
            next_departure: self.now,
            max_pacing_rate: u64::MAX,
            delivery: self.rate,
        }
    }

    /// One round lasting `len`: `k` packets delivered at `bw` packets/s
    /// as the sample says, an RTT sample of `rtt_ms`, `in_flight` after.
    fn round_with(&mut self, bw: u64, len: Duration, rtt_ms: u64, app_limited: bool, losses: u32) -> RateSample {
        let prior = self.rate.delivered();
        self.ack_with(prior, bw, len, rtt_ms, app_limited, losses)
    }

    /// An ACK whose sampled packet was sent when `prior_delivered`
    /// packets had been delivered (a round starts only if that is at
    /// least the count when the round began).
    fn ack_with(
        &mut self,
        prior_delivered: u64,
        bw: u64,
        len: Duration,
        rtt_ms: u64,
        app_limited: bool,
        losses: u32,
    ) -> RateSample {
        let k = 100u32;
        let prior_mstamp = self.rate.delivered_mstamp().unwrap_or(self.now);
        self.now += len;
        // Count k deliveries in the delivery state (what BBR reads of
        // tcp_sock), at this round's end.
        for _ in 0..k {
            let mut tx = self.rate.on_sent(1, self.now);
            let mut scratch = RateSample::new(0);
            self.rate.on_delivered(&mut tx, 0, false, false, &mut scratch);
        }
        let mut scratch = RateSample::new(0);
        self.rate.generate(self.now, k, 0, false, None, &mut scratch);
        let rs = RateSample {
            prior_mstamp: Some(prior_mstamp),
            prior_delivered,
            delivered: i64::from(k),
            interval_us: (u64::from(k) * 1_000_000 / bw) as i64,
            rtt_us: (rtt_ms * 1000) as i64,
            losses,
            acked_sacked: k,
            prior_in_flight: self.in_flight,
            is_app_limited: app_limited,
            ..RateSample::new(self.in_flight)
        };
        let ctx = self.ctx();
        assert!(self.bbr.cong_control(&mut self.st, &ctx, &mut self.rate, &rs, self.now));
        rs
    }

    fn round(&mut self, bw: u64) -> RateSample {
        self.round_with(bw, Duration::from_millis(100), 100, false, 0)
    }
}

fn pps(bw: u64) -> u64 {
    ((u128::from(bw) * 1_000_000) >> BW_SCALE) as u64
}

#[test]
fn gains_and_windows_are_the_kernels() {
    assert_eq!((BBR_HIGH_GAIN, BBR_DRAIN_GAIN, BBR_CWND_GAIN), (739, 88, 512));
    assert_eq!(BBR_PACING_GAIN, [320, 192, 256, 256, 256, 256, 256, 256]);
    assert_eq!((BBR_BW_RTTS, BBR_MIN_RTT_WIN.as_secs(), BBR_PROBE_RTT_MODE.as_millis()), (10, 10, 200));
    let b = Bbr::new();
    assert_eq!((b.mode(), b.gains()), (BbrMode::Startup, (739, 739)));
}

/// STARTUP ends after three round starts in a row whose bandwidth is
/// under 1.25 times the last plateau; a round of 25 % growth restarts
/// the count; app-limited rounds do not count. Then DRAIN, with
/// ssthresh at one BDP's inflight.
#[test]
fn startup_exits_after_three_rounds_without_25_percent_growth() {
    let mut f = Flow::new(1);
    f.in_flight = 10_000; // a full queue: DRAIN has something to drain
    for bw in [1000, 2000, 4000, 8000] {
        f.round(bw);
        assert_eq!(f.bbr.mode(), BbrMode::Startup);
    }
    // 24 % more twice: not growth.
    f.round(9920);
    f.round(9920);
    assert_eq!(f.bbr.mode(), BbrMode::Startup, "two rounds without growth");
    // Exactly 25 % over the plateau (8000): growth, the count restarts.
    f.round(10_000);
    f.round(10_000);
    f.round(10_000);
    assert_eq!(f.bbr.mode(), BbrMode::Startup, "the count restarted at 10,000");
    // App-limited rounds say nothing about the pipe.
    for _ in 0..5 {
        f.round_with(10_000, Duration::from_millis(100), 100, true, 0);
    }
    assert!(!f.bbr.full_bw_reached());
    assert_eq!(pps(f.bbr.max_bw()), 9999);
    // The third plateau round since the 10,000 one: 12,500 needed.
    f.round(12_000);
    assert!(f.bbr.full_bw_reached());
    assert_eq!(f.bbr.mode(), BbrMode::Drain);
    assert_eq!(f.bbr.gains(), (88, 739));
    // ssthresh = inflight(max_bw, 1.0): 12,000 pkt/s × 100 ms plus three
    // TSO bursts at STARTUP's pacing rate (27 segments at 1000 bytes), even.
    assert_eq!(f.st.ssthresh, 1200 + 3 * 27 + 1);
    // Once in flight falls to the BDP: PROBE_BW.
    f.in_flight = 100;
    f.round(12_000);
    assert_eq!(f.bbr.mode(), BbrMode::ProbeBw);
}

fn into_probe_bw(seed: u64) -> Flow {
    let mut f = Flow::new(seed);
    f.in_flight = 100;
    for bw in [1000, 2000, 4000, 8000, 8000, 8000, 8000] {
        f.round(bw);
    }
    assert_eq!(f.bbr.mode(), BbrMode::ProbeBw);
    f
}

/// PROBE_BW starts at a random phase other than the 0.75 one, then
/// cycles 1.25, 0.75, 1 ×6, a phase per min RTT of delivery time at
/// gain 1.0; the 1.25 phase lasts until the flight reaches 1.25 BDP (or
/// a loss), the 0.75 phase until it falls to one BDP.
#[test]
fn probe_bw_cycles_the_eight_gains() {
    let mut starts = std::collections::BTreeSet::new();
    for seed in 0..200 {
        starts.insert(into_probe_bw(seed).bbr.cycle_idx());
    }
    assert_eq!(starts.into_iter().collect::<Vec<_>>(), vec![0, 2, 3, 4, 5, 6, 7]);

    let mut f = into_probe_bw(3);
    let bdp = 800; // 8000 pkt/s × 100 ms
    let mut seen = Vec::new();
    // Rounds a bit longer than the min RTT: one phase each at gain 1.
    for _ in 0..16 {
        let gain = f.bbr.gains().0;
        seen.push(gain);
        f.in_flight = if gain > BBR_UNIT { 2 * bdp } else { bdp / 2 };
        f.round_with(8000, Duration::from_millis(101), 100, false, 0);
    }
    // The gains seen are the cycle, in order, from wherever it started.
    let start = BBR_PACING_GAIN.iter().position(|&g| g == seen[0]).unwrap();
    let i0 = (0..CYCLE_LEN).find(|&i| BBR_PACING_GAIN[(start + i) % CYCLE_LEN] == 320).unwrap();
    let cycle: Vec<u32> = seen.iter().skip_while(|&&g| g != 320).take(8).copied().collect();
    assert_eq!(cycle, BBR_PACING_GAIN.to_vec(), "from phase {start}, 1.25 at +{i0}: {seen:?}");

    // The 1.25 phase does not end while the flight is under 1.25 BDP...
    while f.bbr.cycle_idx() != 0 {
        f.round_with(8000, Duration::from_millis(101), 100, false, 0);
    }
    f.in_flight = bdp;
    for _ in 0..3 {
        f.round_with(8000, Duration::from_millis(101), 100, false, 0);
        assert_eq!(f.bbr.cycle_idx(), 0, "1.25 holds until inflight reaches 1.25 BDP");
    }
    // ...unless packets are lost.
    f.round_with(8000, Duration::from_millis(101), 100, false, 1);
    assert_eq!(f.bbr.cycle_idx(), 1);
    // The 0.75 phase ends at once when the flight is down to the BDP's
    // inflight, even before a min RTT passed...
    f.in_flight = bdp;
    f.round_with(8000, Duration::from_millis(10), 100, false, 0);
    assert_eq!(f.bbr.cycle_idx(), 2);
    // ...and a 1.0 phase lasts one min RTT of delivery time.
    f.round_with(8000, Duration::from_millis(50), 100, false, 0);
    assert_eq!(f.bbr.cycle_idx(), 2);
    f.round_with(8000, Duration::from_millis(51), 100, false, 0);
    assert_eq!(f.bbr.cycle_idx(), 3);
}

/// PROBE_RTT when the min RTT was not refreshed for 10 s: cwnd 4, the
/// flow marked app-limited; out after 200 ms at 4 packets and a round,
/// with the saved cwnd back and the 10 s filter restarted.
#[test]
fn probe_rtt_after_10_s_for_200_ms_and_a_round() {
    let mut f = into_probe_bw(5);
    assert_eq!(f.bbr.min_rtt_us(), 100_000);
    // RTT samples above the minimum for almost 10 s since it was taken.
    let start = f.bbr.min_rtt_stamp;
    while f.now + Duration::from_millis(100) <= start + BBR_MIN_RTT_WIN {
        f.round_with(8000, Duration::from_millis(100), 120, false, 0);
        assert_ne!(f.bbr.mode(), BbrMode::ProbeRtt);
    }
    let cwnd_before = f.st.cwnd;
    f.round_with(8000, Duration::from_millis(100), 120, false, 0);
    assert_eq!(f.bbr.mode(), BbrMode::ProbeRtt);
    assert_eq!(f.st.cwnd, BBR_CWND_MIN_TARGET);
    assert_eq!(f.bbr.gains(), (BBR_UNIT, BBR_UNIT));
    assert!(f.rate.is_app_limited(), "PROBE_RTT's samples are app-limited");
    assert_eq!(f.bbr.min_rtt_us(), 120_000, "an expired minimum takes the next sample");
    assert_eq!(f.bbr.bbr_counters().probe_rtt, 1);
    // The flight falls to 4: the 200 ms start.
    f.in_flight = 4;
    f.round_with(8000, Duration::from_millis(10), 120, false, 0);
    let t4 = f.now;
    // 200 ms pass, but no round since the flight fell to 4: stay.
    let mut g = f.bbr.clone();
    let (st, now, rate) = (f.st, f.now, f.rate);
    f.ack_with(0, 8000, Duration::from_millis(201), 120, false, 0);
    assert_eq!(f.bbr.mode(), BbrMode::ProbeRtt, "200 ms without a round is not enough");
    std::mem::swap(&mut f.bbr, &mut g);
    (f.st, f.now, f.rate) = (st, now, rate);
    // A round ends but 200 ms have not passed.
    f.round_with(8000, Duration::from_millis(100), 120, false, 0);
    assert_eq!(f.bbr.mode(), BbrMode::ProbeRtt);
    // 200 ms passed, and a round since: out, cwnd back.
    f.round_with(8000, t4 + Duration::from_millis(201) - f.now, 120, false, 0);
    assert_eq!(f.bbr.mode(), BbrMode::ProbeBw);
    assert!(f.st.cwnd >= cwnd_before.min(f.bbr.inflight(f.bbr.bw(), BBR_CWND_GAIN)), "{}", f.st.cwnd);
    assert_eq!(f.bbr.min_rtt_stamp, f.now);
}

/// An RTT sample equal to the minimum does not put PROBE_RTT off (Linux
/// since 5.10 refreshes the filter only on a strictly lower one): a path
/// with a steady RTT still drains every 10 s.
#[test]
fn an_equal_rtt_does_not_postpone_probe_rtt() {
    let mut f = into_probe_bw(11);
    let start = f.bbr.min_rtt_stamp;
    while f.now + Duration::from_millis(100) <= start + BBR_MIN_RTT_WIN {
        f.round_with(8000, Duration::from_millis(100), 100, false, 0);
    }
    assert_eq!(f.bbr.min_rtt_stamp, start, "equal samples leave the stamp alone");
    f.round_with(8000, Duration::from_millis(100), 100, false, 0);
    assert_eq!(f.bbr.mode(), BbrMode::ProbeRtt);
    // A strictly lower sample does refresh it.
    let mut g = into_probe_bw(11);
    g.round_with(8000, Duration::from_millis(100), 99, false, 0);
    assert_eq!(g.bbr.min_rtt_stamp, g.now);
    assert_eq!(g.bbr.min_rtt_us(), 99_000);
}

/// An app-limited sample lower than the filter's maximum is kept out of
/// it; a higher one goes in.
#[test]
fn an_app_limited_sample_enters_the_bw_filter_only_when_higher() {
    let mut f = into_probe_bw(7);
    let max = f.bbr.max_bw();
    f.round_with(2000, Duration::from_millis(100), 100, true, 0);
    assert_eq!(f.bbr.max_bw(), max);
    f.round_with(9000, Duration::from_millis(100), 100, true, 0);
    assert!(f.bbr.max_bw() > max);
    assert_eq!(pps(f.bbr.max_bw()), 9000);
}

/// The pacing rate is gain × bw × mss less the 1 % margin, in bytes/s.
#[test]
fn pacing_rate_is_gain_times_bandwidth_less_one_percent() {
    let f = into_probe_bw(9);
    let bw_bytes = pps(f.bbr.bw()) * u64::from(MSS);
    let gain = f.bbr.gains().0;
    let want = bw_bytes * u64::from(gain) / 256 * 99 / 100;
    let got = f.bbr.pacing_rate().unwrap();
    assert!(got.abs_diff(want) <= want / 500, "{got} vs {want}");
    let info = f.bbr.bbr_info().unwrap();
    assert_eq!(info.mode, BbrMode::ProbeBw);
    assert!(info.bw.abs_diff(8_000_000) < 8_000, "{}", info.bw);
}
