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

mod hooks;
#[cfg(test)]
mod tests;

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
