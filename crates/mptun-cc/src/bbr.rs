//! BBR v1, as Linux `net/ipv4/tcp_bbr.c` runs it.
//!
//! BBR does not read loss as congestion. It models the path with two
//! numbers: the bottleneck bandwidth (the windowed maximum of delivery-rate
//! samples over 10 packet-timed rounds, [`crate::rate`]) and the round-trip
//! propagation time (the windowed minimum RTT over 10 s). It paces at
//! `pacing_gain × bw` and keeps at most `cwnd_gain × bw × min_rtt` in flight.
//! The gains come from a state machine: STARTUP doubles the rate every
//! round (gain 2/ln 2) until three rounds bring less than 25 % more
//! bandwidth; DRAIN empties the queue STARTUP built; PROBE_BW cycles
//! through eight phases (1.25 to probe, 0.75 to drain, six at 1.0);
//! PROBE_RTT drops to 4 packets for 200 ms and a round when the minimum RTT
//! was not refreshed for 10 s, so that flows sharing a queue see its empty
//! state. A token-bucket policer is recognised by two intervals of equal,
//! lossy throughput ("long-term" bandwidth) and then paced at.
//!
//! Names, constants and units are the kernel's: bandwidth in packets per µs
//! scaled by 2^24 (`BW_SCALE`), gains in 1/256 (`BBR_UNIT`), so a figure
//! here and in `ss -ti` of a kernel flow on the same path can be compared.
//! BBR sets the window and the pacing rate itself from each ACK's rate
//! sample ([`CongestionControl::cong_control`], Linux `cong_control`), so the
//! subflow's PRR and its own pacing-rate formula stand aside, as in Linux.
//! Pacing goes through the subflow's EDT pacer (BBR needs pacing: Linux sets
//! `SK_PACING_NEEDED`, so the subflow paces it whatever pacer was chosen).

use crate::minmax::RoundMax;
use crate::rate::{DeliveryRate, RateSample};
use crate::{AckContext, CaEvent, CaState, CcState, CongestionControl, Duration, Instant};

/// Bandwidth unit: packets per µs scaled by 2^24 (`BW_SCALE`).
pub const BW_SCALE: u32 = 24;
/// `BW_UNIT`.
pub const BW_UNIT: u64 = 1 << BW_SCALE;
/// Gains and fractions are in 1/256 (`BBR_SCALE`).
pub const BBR_SCALE: u32 = 8;
/// `BBR_UNIT`: a gain of 1.0.
pub const BBR_UNIT: u32 = 1 << BBR_SCALE;
/// Phases of the PROBE_BW gain cycle (`CYCLE_LEN`).
pub const CYCLE_LEN: usize = 8;
/// Window of the bandwidth filter, in rounds (`bbr_bw_rtts`).
pub const BBR_BW_RTTS: u32 = CYCLE_LEN as u32 + 2;
/// Window of the min-RTT filter (`bbr_min_rtt_win_sec`).
pub const BBR_MIN_RTT_WIN: Duration = Duration::from_secs(10);
/// Least time at the minimum window in PROBE_RTT (`bbr_probe_rtt_mode_ms`).
pub const BBR_PROBE_RTT_MODE: Duration = Duration::from_millis(200);
/// Below this rate (bit/s) one segment per TSO burst (`bbr_min_tso_rate`).
pub const BBR_MIN_TSO_RATE: u64 = 1_200_000;
/// Pace this many percent under the estimate (`bbr_pacing_margin_percent`).
pub const BBR_PACING_MARGIN_PERCENT: u64 = 1;
/// STARTUP's gain, 2/ln 2 (`bbr_high_gain`).
pub const BBR_HIGH_GAIN: u32 = BBR_UNIT * 2885 / 1000 + 1;
/// DRAIN's pacing gain, its inverse (`bbr_drain_gain`).
pub const BBR_DRAIN_GAIN: u32 = BBR_UNIT * 1000 / 2885;
/// PROBE_BW's cwnd gain (`bbr_cwnd_gain`).
pub const BBR_CWND_GAIN: u32 = BBR_UNIT * 2;
/// The PROBE_BW pacing-gain cycle (`bbr_pacing_gain`).
pub const BBR_PACING_GAIN: [u32; CYCLE_LEN] =
    [BBR_UNIT * 5 / 4, BBR_UNIT * 3 / 4, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT, BBR_UNIT];
/// The cycle starts at a random one of this many phases (`bbr_cycle_rand`).
pub const BBR_CYCLE_RAND: u32 = 7;
/// The least window BBR keeps (`bbr_cwnd_min_target`).
pub const BBR_CWND_MIN_TARGET: u32 = 4;
/// Growth that says more bandwidth may be there, 1.25 (`bbr_full_bw_thresh`).
pub const BBR_FULL_BW_THRESH: u32 = BBR_UNIT * 5 / 4;
/// Rounds without such growth that end STARTUP (`bbr_full_bw_cnt`).
pub const BBR_FULL_BW_CNT: u32 = 3;
/// Least rounds of a long-term sampling interval (`bbr_lt_intvl_min_rtts`).
pub const BBR_LT_INTVL_MIN_RTTS: u32 = 4;
/// Loss ratio (in 1/256) above which an interval is lossy, 20 % (`bbr_lt_loss_thresh`).
pub const BBR_LT_LOSS_THRESH: u32 = 50;
/// Two intervals within 1/8 of each other are consistent (`bbr_lt_bw_ratio`).
pub const BBR_LT_BW_RATIO: u32 = BBR_UNIT / 8;
/// ... or within 4 kbit/s, in bytes/s (`bbr_lt_bw_diff`).
pub const BBR_LT_BW_DIFF: u64 = 4000 / 8;
/// Rounds the policed rate is used before probing again (`bbr_lt_bw_max_rtts`).
pub const BBR_LT_BW_MAX_RTTS: u32 = 48;
/// Gain on the ACK-aggregation allowance (`bbr_extra_acked_gain`).
pub const BBR_EXTRA_ACKED_GAIN: u32 = BBR_UNIT;
/// Window of the ACK-aggregation filter, rounds (`bbr_extra_acked_win_rtts`).
pub const BBR_EXTRA_ACKED_WIN_RTTS: u32 = 5;
/// An aggregation epoch restarts past this many packets (`bbr_ack_epoch_acked_reset_thresh`).
pub const BBR_ACK_EPOCH_ACKED_RESET_THRESH: u32 = 1 << 20;
/// The aggregation allowance is at most this much time at `bw` (`bbr_extra_acked_max_us`).
pub const BBR_EXTRA_ACKED_MAX_US: u64 = 100_000;
/// Linux `TCP_INIT_CWND`.
const TCP_INIT_CWND: u32 = 10;
/// Linux `sk_pacing_shift` for TCP: a TSO burst is ~1 ms of the rate.
const SK_PACING_SHIFT: u32 = 10;
/// Linux `GSO_MAX_SIZE - 1 - MAX_TCP_HEADER` (x86-64's 320-byte header room).
const TSO_GOAL_MAX_BYTES: u64 = 65536 - 1 - 320;

/// BBR's state machine (`enum bbr_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BbrMode {
    /// Ramp up rapidly to fill the pipe.
    Startup,
    /// Drain the queue STARTUP made.
    Drain,
    /// Pace around the estimated bandwidth, cycling the gain.
    ProbeBw,
    /// Cut the flight to 4 packets to measure the propagation delay.
    ProbeRtt,
}

impl BbrMode {
    /// The kernel's name without its `BBR_` prefix.
    pub fn name(self) -> &'static str {
        match self {
            BbrMode::Startup => "STARTUP",
            BbrMode::Drain => "DRAIN",
            BbrMode::ProbeBw => "PROBE_BW",
            BbrMode::ProbeRtt => "PROBE_RTT",
        }
    }
}

/// What `ss -ti` shows of a BBR flow (`struct tcp_bbr_info`), plus the mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BbrInfo {
    /// Estimated bottleneck bandwidth, bytes per second (`bbr_bw`).
    pub bw: u64,
    /// Windowed minimum RTT, µs (`bbr_min_rtt`); `u32::MAX` before a sample.
    pub min_rtt_us: u32,
    /// Pacing gain in 1/256.
    pub pacing_gain: u32,
    /// cwnd gain in 1/256.
    pub cwnd_gain: u32,
    /// The state machine's mode.
    pub mode: BbrMode,
}

/// Counters of BBR's transitions, for a lab to see what a run went through.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BbrCounters {
    /// STARTUP ended by the full-bandwidth rule.
    pub full_bw_reached: u64,
    /// Times PROBE_RTT was entered.
    pub probe_rtt: u64,
    /// Times the policer (long-term bandwidth) estimate was taken.
    pub lt_use_bw: u64,
}

/// BBR v1 for one subflow (Linux `struct bbr`).
#[derive(Clone, Debug)]
pub struct Bbr {
    mode: BbrMode,
    min_rtt_us: u32,
    min_rtt_stamp: Instant,
    probe_rtt_done_stamp: Option<Instant>,
    bw: RoundMax,
    rtt_cnt: u32,
    next_rtt_delivered: u64,
    cycle_mstamp: Option<Instant>,
    prev_ca_state: CaState,
    packet_conservation: bool,
    round_start: bool,
    idle_restart: bool,
    probe_rtt_round_done: bool,
    lt_is_sampling: bool,
    lt_rtt_cnt: u32,
    lt_use_bw: bool,
    lt_bw: u64,
    lt_last_delivered: u64,
    lt_last_stamp_ms: u64,
    lt_last_lost: u64,
    pacing_gain: u32,
    cwnd_gain: u32,
    full_bw_reached: bool,
    full_bw_cnt: u32,
    cycle_idx: usize,
    has_seen_rtt: bool,
    prior_cwnd: u32,
    full_bw: u64,
    ack_epoch_mstamp: Option<Instant>,
    extra_acked: [u32; 2],
    ack_epoch_acked: u32,
    extra_acked_win_rtts: u32,
    extra_acked_win_idx: usize,
    /// `sk_pacing_rate`, bytes per second.
    pacing_rate: u64,
    /// `mss_cache` and `sk_max_pacing_rate` as last seen.
    mss: u32,
    max_pacing_rate: u64,
    /// The subflow's delivery state as last seen (what BBR reads of
    /// `tcp_sock` outside an ACK: on an RTO, at a transmission start).
    delivery: DeliveryRate,
    /// Mark the subflow app-limited at the end of this ACK (PROBE_RTT).
    mark_app_limited: Option<u32>,
    rng: u64,
    counters: BbrCounters,
}

impl Default for Bbr {
    fn default() -> Self {
        Bbr::new()
    }
}

fn ca_rank(s: CaState) -> u8 {
    match s {
        CaState::Open => 0,
        CaState::Disorder => 1,
        CaState::Recovery => 3,
        CaState::Loss => 4,
    }
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Bbr {
    /// A BBR controller; its random gain-cycle start comes from [`CongestionControl::seed`].
    pub fn new() -> Self {
        let mut b = Bbr {
            mode: BbrMode::Startup,
            min_rtt_us: u32::MAX,
            min_rtt_stamp: Instant::ZERO,
            probe_rtt_done_stamp: None,
            bw: RoundMax::default(),
            rtt_cnt: 0,
            next_rtt_delivered: 0,
            cycle_mstamp: None,
            prev_ca_state: CaState::Open,
            packet_conservation: false,
            round_start: false,
            idle_restart: false,
            probe_rtt_round_done: false,
            lt_is_sampling: false,
            lt_rtt_cnt: 0,
            lt_use_bw: false,
            lt_bw: 0,
            lt_last_delivered: 0,
            lt_last_stamp_ms: 0,
            lt_last_lost: 0,
            pacing_gain: BBR_HIGH_GAIN,
            cwnd_gain: BBR_HIGH_GAIN,
            full_bw_reached: false,
            full_bw_cnt: 0,
            cycle_idx: 0,
            has_seen_rtt: false,
            prior_cwnd: 0,
            full_bw: 0,
            ack_epoch_mstamp: None,
            extra_acked: [0; 2],
            ack_epoch_acked: 0,
            extra_acked_win_rtts: 0,
            extra_acked_win_idx: 0,
            pacing_rate: u64::MAX,
            mss: 0,
            max_pacing_rate: u64::MAX,
            delivery: DeliveryRate::default(),
            mark_app_limited: None,
            rng: 0x9e37_79b9_7f4a_7c15,
            counters: BbrCounters::default(),
        };
        b.update_gains();
        b
    }

    /// The mode the state machine is in.
    pub fn mode(&self) -> BbrMode {
        self.mode
    }

    /// The PROBE_BW phase (index into [`BBR_PACING_GAIN`]).
    pub fn cycle_idx(&self) -> usize {
        self.cycle_idx
    }

    /// Current pacing and cwnd gains, in 1/256.
    pub fn gains(&self) -> (u32, u32) {
        (self.pacing_gain, self.cwnd_gain)
    }

    /// Whether STARTUP found the pipe full.
    pub fn full_bw_reached(&self) -> bool {
        self.full_bw_reached
    }

    /// The bandwidth estimate in packets/µs << 24 (`bbr_bw`).
    pub fn bw(&self) -> u64 {
        if self.lt_use_bw {
            self.lt_bw
        } else {
            self.bw.get()
        }
    }

    /// The windowed maximum bandwidth (`bbr_max_bw`), packets/µs << 24.
    pub fn max_bw(&self) -> u64 {
        self.bw.get()
    }

    /// The minimum RTT in µs, `u32::MAX` before a sample.
    pub fn min_rtt_us(&self) -> u32 {
        self.min_rtt_us
    }

    /// Whether the policer estimate is in use.
    pub fn lt_use_bw(&self) -> bool {
        self.lt_use_bw
    }

    /// Transition counters.
    pub fn bbr_counters(&self) -> BbrCounters {
        self.counters
    }

    /// A uniform draw in `0..n` (Linux `get_random_u32_below`), from a
    /// xorshift seeded by the subflow: reproducible in the simulator.
    fn random_below(&mut self, n: u32) -> u32 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (((x >> 32) * u64::from(n)) >> 32) as u32
    }

    fn rate_bytes_per_sec(&self, rate: u64, gain: u32) -> u64 {
        let r = (u128::from(rate) * u128::from(self.mss) * u128::from(gain)) >> BBR_SCALE;
        let r = (r * u128::from(1_000_000 / 100 * (100 - BBR_PACING_MARGIN_PERCENT))) >> BW_SCALE;
        u64::try_from(r).unwrap_or(u64::MAX)
    }

    fn bw_to_pacing_rate(&self, bw: u64, gain: u32) -> u64 {
        self.rate_bytes_per_sec(bw, gain).min(self.max_pacing_rate)
    }

    fn init_pacing_rate_from_rtt(&mut self, cwnd: u32, srtt: Option<Duration>) {
        let rtt_us = match srtt {
            Some(s) => {
                self.has_seen_rtt = true;
                us(s).max(1)
            }
            None => 1000,
        };
        let bw = u64::from(cwnd) * BW_UNIT / rtt_us;
        self.pacing_rate = self.bw_to_pacing_rate(bw, BBR_HIGH_GAIN);
    }

    fn set_pacing_rate(&mut self, bw: u64, gain: u32, cwnd: u32, srtt: Option<Duration>) {
        let rate = self.bw_to_pacing_rate(bw, gain);
        if !self.has_seen_rtt && srtt.is_some() {
            self.init_pacing_rate_from_rtt(cwnd, srtt);
        }
        if self.full_bw_reached || rate > self.pacing_rate || self.pacing_rate == u64::MAX {
            self.pacing_rate = rate;
        }
    }

    fn min_tso_segs_now(&self) -> u32 {
        if self.pacing_rate < BBR_MIN_TSO_RATE >> 3 {
            1
        } else {
            2
        }
    }

    /// `bbr_tso_segs_goal`: segments per burst at the pacing rate.
    fn tso_segs_goal(&self) -> u32 {
        let bytes = (self.pacing_rate >> SK_PACING_SHIFT).min(TSO_GOAL_MAX_BYTES);
        let segs = (bytes / u64::from(self.mss.max(1))).max(u64::from(self.min_tso_segs_now()));
        segs.min(0x7f) as u32
    }

    fn save_cwnd(&mut self, cwnd: u32) {
        if ca_rank(self.prev_ca_state) < ca_rank(CaState::Recovery) && self.mode != BbrMode::ProbeRtt {
            self.prior_cwnd = cwnd;
        } else {
            self.prior_cwnd = self.prior_cwnd.max(cwnd);
        }
    }

    /// `bbr_bdp`: `ceil(bw × min_rtt × gain)` in packets.
    fn bdp(&self, bw: u64, gain: u32) -> u32 {
        if self.min_rtt_us == u32::MAX {
            return TCP_INIT_CWND;
        }
        let w = u128::from(bw) * u128::from(self.min_rtt_us);
        let bdp = ((w * u128::from(gain)) >> BBR_SCALE).div_ceil(u128::from(BW_UNIT));
        u32::try_from(bdp).unwrap_or(u32::MAX)
    }

    fn quantization_budget(&self, cwnd: u32) -> u32 {
        let mut cwnd = cwnd.saturating_add(3 * self.tso_segs_goal());
        cwnd = cwnd.saturating_add(1) & !1;
        if self.mode == BbrMode::ProbeBw && self.cycle_idx == 0 {
            cwnd = cwnd.saturating_add(2);
        }
        cwnd
    }

    fn inflight(&self, bw: u64, gain: u32) -> u32 {
        self.quantization_budget(self.bdp(bw, gain))
    }

    /// `bbr_packets_in_net_at_edt`: of `inflight_now`, what is still in the
    /// network when the next paced segment leaves.
    fn packets_in_net_at_edt(&self, inflight_now: u32, ctx: &AckContext, now: Instant) -> u32 {
        let edt = ctx.next_departure.max(now);
        let interval_us = us(edt - now);
        let interval_delivered = (u128::from(self.bw()) * u128::from(interval_us)) >> BW_SCALE;
        let mut at_edt = inflight_now;
        if self.pacing_gain > BBR_UNIT {
            at_edt = at_edt.saturating_add(self.tso_segs_goal());
        }
        if interval_delivered >= u128::from(at_edt) {
            0
        } else {
            at_edt - interval_delivered as u32
        }
    }

    fn extra_acked_max(&self) -> u32 {
        self.extra_acked[0].max(self.extra_acked[1])
    }

    fn ack_aggregation_cwnd(&self) -> u32 {
        if BBR_EXTRA_ACKED_GAIN == 0 || !self.full_bw_reached {
            return 0;
        }
        let max_aggr = u128::from(self.bw()) * u128::from(BBR_EXTRA_ACKED_MAX_US) / u128::from(BW_UNIT);
        let aggr = (u64::from(BBR_EXTRA_ACKED_GAIN) * u64::from(self.extra_acked_max())) >> BBR_SCALE;
        u128::from(aggr).min(max_aggr) as u32
    }

    /// `bbr_set_cwnd_to_recover_or_restore`: packet conservation in the
    /// first round of recovery, the saved window back after it.
    fn recover_or_restore(&mut self, state: &CcState, rs: &RateSample, acked: u32, ctx: &AckContext) -> (bool, u32) {
        let prev = self.prev_ca_state;
        let now_state = ctx.ca_state;
        let mut cwnd = state.cwnd;
        if rs.losses > 0 {
            cwnd = (i64::from(cwnd) - i64::from(rs.losses)).max(1) as u32;
        }
        if now_state == CaState::Recovery && prev != CaState::Recovery {
            self.packet_conservation = true;
            self.next_rtt_delivered = self.delivery.delivered();
            cwnd = ctx.in_flight.saturating_add(acked);
        } else if ca_rank(prev) >= ca_rank(CaState::Recovery) && ca_rank(now_state) < ca_rank(CaState::Recovery) {
            cwnd = cwnd.max(self.prior_cwnd);
            self.packet_conservation = false;
        }
        self.prev_ca_state = now_state;
        if self.packet_conservation {
            return (true, cwnd.max(ctx.in_flight.saturating_add(acked)));
        }
        (false, cwnd)
    }

    /// `bbr_set_cwnd`.
    fn set_cwnd(&mut self, state: &mut CcState, rs: &RateSample, acked: u32, bw: u64, gain: u32, ctx: &AckContext) {
        let mut cwnd = state.cwnd;
        if acked > 0 {
            let (conserving, c) = self.recover_or_restore(state, rs, acked, ctx);
            cwnd = c;
            if !conserving {
                let mut target = self.bdp(bw, gain);
                target = target.saturating_add(self.ack_aggregation_cwnd());
                target = self.quantization_budget(target);
                if self.full_bw_reached {
                    cwnd = cwnd.saturating_add(acked).min(target);
                } else if cwnd < target || self.delivery.delivered() < u64::from(TCP_INIT_CWND) {
                    cwnd = cwnd.saturating_add(acked);
                }
                cwnd = cwnd.max(BBR_CWND_MIN_TARGET);
            }
        }
        state.cwnd = cwnd.min(state.cwnd_clamp);
        if self.mode == BbrMode::ProbeRtt {
            state.cwnd = state.cwnd.min(BBR_CWND_MIN_TARGET);
        }
    }

    fn is_next_cycle_phase(&self, rs: &RateSample, ctx: &AckContext, now: Instant) -> bool {
        let delivered_mstamp = self.delivery.delivered_mstamp().unwrap_or(now);
        let since = self.cycle_mstamp.map_or(u64::MAX, |c| us(delivered_mstamp - c));
        let is_full_length = since > u64::from(self.min_rtt_us);
        if self.pacing_gain == BBR_UNIT {
            return is_full_length;
        }
        let inflight = self.packets_in_net_at_edt(rs.prior_in_flight, ctx, now);
        let bw = self.max_bw();
        if self.pacing_gain > BBR_UNIT {
            return is_full_length && (rs.losses > 0 || inflight >= self.inflight(bw, self.pacing_gain));
        }
        is_full_length || inflight <= self.inflight(bw, BBR_UNIT)
    }

    fn advance_cycle_phase(&mut self) {
        self.cycle_idx = (self.cycle_idx + 1) & (CYCLE_LEN - 1);
        self.cycle_mstamp = self.delivery.delivered_mstamp();
    }

    fn reset_probe_bw_mode(&mut self) {
        self.mode = BbrMode::ProbeBw;
        self.cycle_idx = CYCLE_LEN - 1 - self.random_below(BBR_CYCLE_RAND) as usize;
        self.advance_cycle_phase();
    }

    fn reset_mode(&mut self) {
        if !self.full_bw_reached {
            self.mode = BbrMode::Startup;
        } else {
            self.reset_probe_bw_mode();
        }
    }

    fn reset_lt_bw_sampling_interval(&mut self) {
        self.lt_last_stamp_ms = self.delivery.delivered_mstamp().map_or(0, |t| t.as_millis());
        self.lt_last_delivered = self.delivery.delivered();
        self.lt_last_lost = self.delivery.lost();
        self.lt_rtt_cnt = 0;
    }

    fn reset_lt_bw_sampling(&mut self) {
        self.lt_bw = 0;
        self.lt_use_bw = false;
        self.lt_is_sampling = false;
        self.reset_lt_bw_sampling_interval();
    }

    fn lt_bw_interval_done(&mut self, bw: u64) {
        if self.lt_bw != 0 {
            let diff = bw.abs_diff(self.lt_bw);
            if diff * u64::from(BBR_UNIT) <= u64::from(BBR_LT_BW_RATIO) * self.lt_bw
                || self.rate_bytes_per_sec(diff, BBR_UNIT) <= BBR_LT_BW_DIFF
            {
                // Two intervals of consistent, lossy throughput: policed.
                self.lt_bw = (bw + self.lt_bw) >> 1;
                self.lt_use_bw = true;
                self.pacing_gain = BBR_UNIT;
                self.lt_rtt_cnt = 0;
                self.counters.lt_use_bw += 1;
                return;
            }
        }
        self.lt_bw = bw;
        self.reset_lt_bw_sampling_interval();
    }

    /// `bbr_lt_bw_sampling`: token-bucket policer detection.
    fn lt_bw_sampling(&mut self, rs: &RateSample) {
        if self.lt_use_bw {
            if self.mode == BbrMode::ProbeBw && self.round_start {
                self.lt_rtt_cnt += 1;
                if self.lt_rtt_cnt >= BBR_LT_BW_MAX_RTTS {
                    self.reset_lt_bw_sampling();
                    self.reset_probe_bw_mode();
                }
            }
            return;
        }
        if !self.lt_is_sampling {
            if rs.losses == 0 {
                return;
            }
            self.reset_lt_bw_sampling_interval();
            self.lt_is_sampling = true;
        }
        if rs.is_app_limited {
            self.reset_lt_bw_sampling();
            return;
        }
        if self.round_start {
            self.lt_rtt_cnt += 1;
        }
        if self.lt_rtt_cnt < BBR_LT_INTVL_MIN_RTTS {
            return;
        }
        if self.lt_rtt_cnt > 4 * BBR_LT_INTVL_MIN_RTTS {
            self.reset_lt_bw_sampling();
            return;
        }
        if rs.losses == 0 {
            return;
        }
        let lost = self.delivery.lost().saturating_sub(self.lt_last_lost);
        let delivered = self.delivery.delivered().saturating_sub(self.lt_last_delivered);
        if delivered == 0 || (lost << BBR_SCALE) < u64::from(BBR_LT_LOSS_THRESH) * delivered {
            return;
        }
        let now_ms = self.delivery.delivered_mstamp().map_or(0, |t| t.as_millis());
        let t = now_ms as i64 - self.lt_last_stamp_ms as i64;
        if t < 1 {
            return;
        }
        if t as u64 >= u64::from(u32::MAX) / 1000 {
            self.reset_lt_bw_sampling();
            return;
        }
        let bw = u64::try_from(u128::from(delivered) * u128::from(BW_UNIT) / (t as u128 * 1000)).unwrap_or(u64::MAX);
        self.lt_bw_interval_done(bw);
    }

    /// `bbr_update_bw`: rounds, and the bandwidth filter.
    fn update_bw(&mut self, rs: &RateSample) {
        self.round_start = false;
        if rs.delivered < 0 || rs.interval_us <= 0 {
            return;
        }
        if rs.prior_delivered >= self.next_rtt_delivered {
            self.next_rtt_delivered = self.delivery.delivered();
            self.rtt_cnt = self.rtt_cnt.wrapping_add(1);
            self.round_start = true;
            self.packet_conservation = false;
        }
        self.lt_bw_sampling(rs);
        let bw = u64::try_from(u128::from(rs.delivered as u64) * u128::from(BW_UNIT) / rs.interval_us as u128)
            .unwrap_or(u64::MAX);
        if !rs.is_app_limited || bw >= self.max_bw() {
            self.bw.update(BBR_BW_RTTS, self.rtt_cnt, bw);
        }
    }

    /// `bbr_update_ack_aggregation`.
    fn update_ack_aggregation(&mut self, rs: &RateSample, cwnd: u32) {
        if BBR_EXTRA_ACKED_GAIN == 0 || rs.acked_sacked == 0 || rs.delivered < 0 || rs.interval_us <= 0 {
            return;
        }
        if self.round_start {
            self.extra_acked_win_rtts = (self.extra_acked_win_rtts + 1).min(0x1f);
            if self.extra_acked_win_rtts >= BBR_EXTRA_ACKED_WIN_RTTS {
                self.extra_acked_win_rtts = 0;
                self.extra_acked_win_idx ^= 1;
                self.extra_acked[self.extra_acked_win_idx] = 0;
            }
        }
        let delivered_mstamp = self.delivery.delivered_mstamp();
        let epoch_us = match (delivered_mstamp, self.ack_epoch_mstamp) {
            (Some(d), Some(e)) => us(d - e),
            _ => 0,
        };
        let mut expected = (u128::from(self.bw()) * u128::from(epoch_us) / u128::from(BW_UNIT)) as u64;
        if u64::from(self.ack_epoch_acked) <= expected
            || self.ack_epoch_acked.saturating_add(rs.acked_sacked) >= BBR_ACK_EPOCH_ACKED_RESET_THRESH
        {
            self.ack_epoch_acked = 0;
            self.ack_epoch_mstamp = delivered_mstamp;
            expected = 0;
        }
        self.ack_epoch_acked = self.ack_epoch_acked.saturating_add(rs.acked_sacked).min(0xFFFFF);
        let extra = (u64::from(self.ack_epoch_acked) - expected.min(u64::from(self.ack_epoch_acked))) as u32;
        let extra = extra.min(cwnd);
        let slot = &mut self.extra_acked[self.extra_acked_win_idx];
        if extra > *slot {
            *slot = extra;
        }
    }

    /// `bbr_check_full_bw_reached`: three rounds without 25 % more bandwidth.
    fn check_full_bw_reached(&mut self, rs: &RateSample) {
        if self.full_bw_reached || !self.round_start || rs.is_app_limited {
            return;
        }
        let thresh = (self.full_bw * u64::from(BBR_FULL_BW_THRESH)) >> BBR_SCALE;
        if self.max_bw() >= thresh {
            self.full_bw = self.max_bw();
            self.full_bw_cnt = 0;
            return;
        }
        self.full_bw_cnt += 1;
        self.full_bw_reached = self.full_bw_cnt >= BBR_FULL_BW_CNT;
        if self.full_bw_reached {
            self.counters.full_bw_reached += 1;
        }
    }

    /// `bbr_check_drain`.
    fn check_drain(&mut self, state: &mut CcState, ctx: &AckContext, now: Instant) {
        if self.mode == BbrMode::Startup && self.full_bw_reached {
            self.mode = BbrMode::Drain;
            state.ssthresh = self.inflight(self.max_bw(), BBR_UNIT);
        }
        if self.mode == BbrMode::Drain
            && self.packets_in_net_at_edt(ctx.in_flight, ctx, now) <= self.inflight(self.max_bw(), BBR_UNIT)
        {
            self.reset_probe_bw_mode();
        }
    }

    fn check_probe_rtt_done(&mut self, state: &mut CcState, now: Instant) {
        if self.probe_rtt_done_stamp.is_none_or(|d| now <= d) {
            return;
        }
        self.min_rtt_stamp = now;
        state.cwnd = state.cwnd.max(self.prior_cwnd);
        self.reset_mode();
    }

    /// `bbr_update_min_rtt`, and PROBE_RTT's entry and exit.
    fn update_min_rtt(&mut self, state: &mut CcState, rs: &RateSample, ctx: &AckContext, now: Instant) {
        let filter_expired = now > self.min_rtt_stamp + BBR_MIN_RTT_WIN;
        // Strictly lower (Linux since 5.10): an equal sample does not put
        // PROBE_RTT off, or a path with a steady RTT would never drain.
        if rs.rtt_us >= 0 && (rs.rtt_us < i64::from(self.min_rtt_us) || (filter_expired && !rs.is_ack_delayed)) {
            self.min_rtt_us = u32::try_from(rs.rtt_us).unwrap_or(u32::MAX);
            self.min_rtt_stamp = now;
        }
        if filter_expired && !self.idle_restart && self.mode != BbrMode::ProbeRtt {
            self.mode = BbrMode::ProbeRtt;
            self.save_cwnd(state.cwnd);
            self.probe_rtt_done_stamp = None;
            self.counters.probe_rtt += 1;
        }
        if self.mode == BbrMode::ProbeRtt {
            // Samples at 4 packets say nothing of the path's bandwidth.
            self.mark_app_limited = Some(ctx.in_flight);
            if self.probe_rtt_done_stamp.is_none() && ctx.in_flight <= BBR_CWND_MIN_TARGET {
                self.probe_rtt_done_stamp = Some(now + BBR_PROBE_RTT_MODE);
                self.probe_rtt_round_done = false;
                self.next_rtt_delivered = self.delivery.delivered();
            } else if self.probe_rtt_done_stamp.is_some() {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done {
                    self.check_probe_rtt_done(state, now);
                }
            }
        }
        if rs.delivered > 0 {
            self.idle_restart = false;
        }
    }

    fn update_gains(&mut self) {
        let (p, c) = match self.mode {
            BbrMode::Startup => (BBR_HIGH_GAIN, BBR_HIGH_GAIN),
            BbrMode::Drain => (BBR_DRAIN_GAIN, BBR_HIGH_GAIN),
            BbrMode::ProbeBw => {
                (if self.lt_use_bw { BBR_UNIT } else { BBR_PACING_GAIN[self.cycle_idx] }, BBR_CWND_GAIN)
            }
            BbrMode::ProbeRtt => (BBR_UNIT, BBR_UNIT),
        };
        self.pacing_gain = p;
        self.cwnd_gain = c;
    }

    fn note_context(&mut self, ctx: &AckContext) {
        // A zero MSS would make a zero pacing rate: a sender stalled for good.
        self.mss = ctx.mss.max(1);
        self.max_pacing_rate = ctx.max_pacing_rate;
    }

    /// `bbr_init` as Linux calls it when the connection is established:
    /// the handshake's RTT is the first minimum and sets the first rate.
    fn reinit(&mut self, state: &mut CcState, ctx: &AckContext, now: Instant) {
        let rng = self.rng;
        let counters = self.counters;
        *self = Bbr::new();
        self.rng = rng;
        self.counters = counters;
        self.note_context(ctx);
        self.delivery = ctx.delivery;
        state.ssthresh = u32::MAX;
        self.min_rtt_us = ctx.min_rtt.map_or(u32::MAX, |m| u32::try_from(us(m)).unwrap_or(u32::MAX));
        self.min_rtt_stamp = now;
        self.init_pacing_rate_from_rtt(state.cwnd, ctx.srtt);
        self.reset_lt_bw_sampling();
        self.ack_epoch_mstamp = Some(now);
    }
}

impl CongestionControl for Bbr {
    fn name(&self) -> &'static str {
        "bbr"
    }

    fn init(&mut self, state: &mut CcState, now: Instant) {
        state.ssthresh = u32::MAX;
        self.min_rtt_stamp = now;
        self.ack_epoch_mstamp = Some(now);
    }

    fn established(&mut self, state: &mut CcState, ctx: &AckContext, now: Instant) {
        self.reinit(state, ctx, now);
    }

    fn seed(&mut self, seed: u64) {
        // splitmix64 spreads close seeds apart; xorshift must not start at zero.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        self.rng = (z ^ (z >> 31)) | 1;
    }

    fn pkts_acked(&mut self, _state: &mut CcState, _sample: &crate::AckSample, _now: Instant) {}

    fn cong_avoid(&mut self, _state: &mut CcState, _ack: u32, _acked: u32, _now: Instant) {}

    fn ssthresh(&mut self, state: &CcState) -> u32 {
        self.save_cwnd(state.cwnd);
        state.ssthresh
    }

    fn set_state(&mut self, _state: &mut CcState, new: CaState, _now: Instant) {
        if new == CaState::Loss {
            let rs = RateSample { losses: 1, ..RateSample::new(0) };
            self.prev_ca_state = CaState::Loss;
            self.full_bw = 0;
            self.round_start = true;
            self.lt_bw_sampling(&rs);
        }
    }

    fn cwnd_event(&mut self, state: &mut CcState, event: CaEvent, now: Instant) {
        if event == CaEvent::TxStart && self.delivery.is_app_limited() {
            self.idle_restart = true;
            self.ack_epoch_mstamp = Some(now);
            self.ack_epoch_acked = 0;
            // Restarting from idle and app-limited: pace at the estimate,
            // no faster, to spare the queue.
            if self.mode == BbrMode::ProbeBw {
                let bw = self.bw();
                self.set_pacing_rate(bw, BBR_UNIT, state.cwnd, None);
            } else if self.mode == BbrMode::ProbeRtt {
                self.check_probe_rtt_done(state, now);
            }
        }
    }

    fn reduce_window(&mut self, state: &mut CcState, _cut: crate::WindowCut) {
        // BBR keeps no loss-based window to halve; it restores its model's
        // window at the next ACK. A cut asked from above lasts until then.
        state.cwnd = (state.cwnd / 2).max(BBR_CWND_MIN_TARGET);
    }

    fn observe_delivery(&mut self, delivery: &DeliveryRate) {
        self.delivery = *delivery;
    }

    fn cong_control(
        &mut self,
        state: &mut CcState,
        ctx: &AckContext,
        rate: &mut DeliveryRate,
        rs: &RateSample,
        now: Instant,
    ) -> bool {
        self.note_context(ctx);
        self.delivery = *rate;
        self.mark_app_limited = None;
        // bbr_update_model
        self.update_bw(rs);
        self.update_ack_aggregation(rs, state.cwnd);
        if self.mode == BbrMode::ProbeBw && self.is_next_cycle_phase(rs, ctx, now) {
            self.advance_cycle_phase();
        }
        self.check_full_bw_reached(rs);
        self.check_drain(state, ctx, now);
        self.update_min_rtt(state, rs, ctx, now);
        self.update_gains();
        // bbr_main
        let bw = self.bw();
        self.set_pacing_rate(bw, self.pacing_gain, state.cwnd, ctx.srtt);
        self.set_cwnd(state, rs, rs.acked_sacked, bw, self.cwnd_gain, ctx);
        if let Some(in_flight) = self.mark_app_limited.take() {
            rate.set_app_limited(in_flight);
            self.delivery = *rate;
        }
        true
    }

    fn pacing_rate(&self) -> Option<u64> {
        Some(self.pacing_rate.max(1))
    }

    fn has_cong_control(&self) -> bool {
        true
    }

    fn min_tso_segs(&self) -> Option<u32> {
        Some(self.min_tso_segs_now())
    }

    fn sndbuf_expand(&self) -> u32 {
        // BBR may slow-start even during recovery.
        3
    }

    fn bbr_info(&self) -> Option<BbrInfo> {
        let bw = (u128::from(self.bw()) * u128::from(self.mss) * 1_000_000) >> BW_SCALE;
        Some(BbrInfo {
            bw: u64::try_from(bw).unwrap_or(u64::MAX),
            min_rtt_us: self.min_rtt_us,
            pacing_gain: self.pacing_gain,
            cwnd_gain: self.cwnd_gain,
            mode: self.mode,
        })
    }
}

#[cfg(test)]
mod tests {
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
}
