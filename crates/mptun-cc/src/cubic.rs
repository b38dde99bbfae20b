//! CUBIC (RFC 9438) exactly as Linux `net/ipv4/tcp_cubic.c` computes it, in
//! the kernel's fixed-point units, so that a subflow's cwnd trajectory can be
//! compared packet for packet with a kernel flow on the same path.
//!
//! Units and clocks, as in the kernel:
//! * the cubic curve runs on `tcp_jiffies32` with `HZ = 1000` (we derive it as
//!   `now.as_millis() as u32`; Linux starts jiffies at an arbitrary offset, we
//!   start at the driver's epoch, which only matters for the sentinel below);
//! * `t` and `bic_K` are in `2^-BICTCP_HZ` = 1/1024 s;
//! * `C = bic_scale * 10 / 1024` = 0.4004 with the default `bic_scale = 41`;
//! * `beta = 717 / 1024` ≈ 0.7;
//! * delay samples and HyStart use the `u32` microsecond clock (`tcp_mstamp`).
//!
//! Deliberate differences, all invisible in normal operation:
//! * `epoch_start` is an `Option` rather than "0 means unset": Linux's
//!   sentinel collides with a real jiffies value of 0, which our epoch-based
//!   clock would hit in every run's first millisecond.
//! * `cubic_root` is an exact integer floor cube root instead of the kernel's
//!   table lookup plus one Newton-Raphson step (average error 0.195%): the
//!   kernel's K can be off by a few 1/1024 s, ours is the exact value it
//!   approximates.
//! * Products the kernel lets wrap past cwnd ≈ 10^6 packets or an epoch of
//!   hundreds of seconds saturate here instead.

use crate::hystart::{Hystart, HystartInput, HystartParams, HystartRoundStart, HYSTART_ACK_TRAIN, HYSTART_DELAY};
use crate::reno::{tcp_cong_avoid_ai, tcp_slow_start};
use crate::{
    AckSample, CaEvent, CaState, CcCounters, CcState, CongestionControl, Instant, SlowStartExit, SlowStartExitReason,
};

/// `BICTCP_BETA_SCALE`: beta is a fraction of 1024.
pub const BICTCP_BETA_SCALE: u32 = 1024;
/// `BICTCP_HZ`: `t` and `K` are in units of 2^-10 s.
pub const BICTCP_HZ: u32 = 10;
/// Linux jiffies rate assumed for the cubic curve (`CONFIG_HZ=1000`).
pub const HZ: u32 = 1000;

/// CUBIC tunables: the `tcp_cubic` module parameters. `Default` gives the
/// kernel's defaults, so a subflow with default config behaves like a stock
/// Linux 6.x sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CubicConfig {
    /// `hystart`: leave slow start before the first loss.
    pub hystart: bool,
    /// `hystart_detect`: bit 0 ACK train, bit 1 delay increase.
    pub hystart_detect: u32,
    /// Which round bookkeeping HyStart uses (the 2025 fix or the old one).
    pub round_start: HystartRoundStart,
    /// `hystart_low_window`: no HyStart exit below this cwnd.
    pub hystart_low_window: u32,
    /// `hystart_ack_delta_us`: max spacing of ACKs that belong to one train.
    pub hystart_ack_delta_us: u32,
    /// `fast_convergence`: release bandwidth faster when losses come below
    /// the previous W_max (another flow is taking its share).
    pub fast_convergence: bool,
    /// `tcp_friendliness`: never grow slower than an AIMD flow would.
    pub tcp_friendliness: bool,
    /// `beta`, in 1/1024 (multiplicative decrease factor); clamped to 1..=1023.
    pub beta: u32,
    /// `bic_scale`: C = bic_scale * 10 / 1024; clamped to at least 1.
    pub bic_scale: u32,
    /// `initial_ssthresh`, used only when HyStart is off; 0 = infinite.
    pub initial_ssthresh: u32,
    /// `sk_gso_max_size` in bytes: sizes HyStart's TSO/GRO cushion
    /// (`hystart_ack_delay`). Linux TCP always has software GSO, so 64 KiB.
    pub gso_max_size: u32,
}

impl Default for CubicConfig {
    fn default() -> Self {
        CubicConfig {
            hystart: true,
            hystart_detect: HYSTART_ACK_TRAIN | HYSTART_DELAY,
            round_start: HystartRoundStart::Fixed,
            hystart_low_window: 16,
            hystart_ack_delta_us: 2000,
            fast_convergence: true,
            tcp_friendliness: true,
            beta: 717,
            bic_scale: 41,
            initial_ssthresh: 0,
            gso_max_size: 65_536,
        }
    }
}

/// Floor of the cube root of `a`, exactly (the kernel's `cubic_root`
/// approximates this to ~0.2%).
pub fn cubic_root(a: u64) -> u32 {
    if a == 0 {
        return 0;
    }
    // f64 gets within one of the answer; fix up with exact integer cubes.
    let mut x = (a as f64).cbrt() as u64;
    let cube = |v: u64| (v as u128) * (v as u128) * (v as u128);
    while x > 0 && cube(x) > a as u128 {
        x -= 1;
    }
    while cube(x + 1) <= a as u128 {
        x += 1;
    }
    x as u32
}

/// Linux `usecs_to_jiffies` for HZ = 1000: rounds up.
fn usecs_to_jiffies(us: u32) -> u32 {
    us.div_ceil(1000)
}

fn jiffies(now: Instant) -> u32 {
    now.as_millis() as u32
}

fn clock_us(now: Instant) -> u32 {
    now.as_micros() as u32
}

/// The CUBIC controller (Linux `struct bictcp` plus the module's derived
/// constants).
#[derive(Clone, Debug)]
pub struct Cubic {
    cfg: CubicConfig,
    /// `beta_scale = 8*(1024+beta)/3/(1024-beta)`: 8 × acks per Reno-estimate packet per cwnd.
    beta_scale: u32,
    /// `cube_rtt_scale = bic_scale * 10`: 1024 × C.
    cube_rtt_scale: u32,
    /// `cube_factor = 2^40 / (bic_scale * 10)`: turns W_max − cwnd into K³ in 1/1024 s.
    cube_factor: u64,

    cnt: u32,
    last_max_cwnd: u32,
    last_cwnd: u32,
    last_time: u32,
    bic_origin_point: u32,
    bic_k: u32,
    delay_min: u32,
    epoch_start: Option<u32>,
    ack_cnt: u32,
    tcp_cwnd: u32,
    found: bool,
    hystart: Hystart,

    /// `tp->lsndtime` in jiffies, if the subflow reports sends.
    lsndtime: Option<u32>,
    /// Jiffies of the last ACK, standing in for `lsndtime` if it does not.
    last_ack_jiffies: Option<u32>,
    /// Latest `snd_nxt` the subflow told us about (for the HyStart reset on RTO).
    last_snd_nxt: Option<u32>,
    pacing_rate: u64,
    paced: bool,
    counters: CcCounters,
    exit: Option<SlowStartExit>,
}

impl Cubic {
    /// A CUBIC controller with the given tunables (out-of-range `beta` and
    /// `bic_scale` are clamped: the kernel would divide by zero on them).
    pub fn new(cfg: CubicConfig) -> Self {
        let mut cfg = cfg;
        cfg.beta = cfg.beta.clamp(1, BICTCP_BETA_SCALE - 1);
        cfg.bic_scale = cfg.bic_scale.max(1);
        let beta_scale = 8 * (BICTCP_BETA_SCALE + cfg.beta) / 3 / (BICTCP_BETA_SCALE - cfg.beta);
        let cube_rtt_scale = cfg.bic_scale.saturating_mul(10);
        let cube_factor = (1u64 << (10 + 3 * BICTCP_HZ)) / u64::from(cube_rtt_scale);
        Cubic {
            cfg,
            beta_scale,
            cube_rtt_scale,
            cube_factor,
            cnt: 0,
            last_max_cwnd: 0,
            last_cwnd: 0,
            last_time: 0,
            bic_origin_point: 0,
            bic_k: 0,
            delay_min: 0,
            epoch_start: None,
            ack_cnt: 0,
            tcp_cwnd: 0,
            found: false,
            hystart: Hystart::new(),
            lsndtime: None,
            last_ack_jiffies: None,
            last_snd_nxt: None,
            pacing_rate: 0,
            paced: false,
            counters: CcCounters::default(),
            exit: None,
        }
    }

    /// The tunables in force (after clamping).
    pub fn config(&self) -> &CubicConfig {
        &self.cfg
    }

    /// `last_max_cwnd`: W_max, the window at the last loss (after fast convergence).
    pub fn last_max_cwnd(&self) -> u32 {
        self.last_max_cwnd
    }

    /// `bic_K` in 1/1024 s: time from the epoch start to reach the origin point.
    pub fn bic_k(&self) -> u32 {
        self.bic_k
    }

    /// `bic_origin_point`: the plateau the current epoch's curve is centred on.
    pub fn origin_point(&self) -> u32 {
        self.bic_origin_point
    }

    /// `delay_min` in microseconds (0 until the first sample).
    pub fn delay_min_us(&self) -> u32 {
        self.delay_min
    }

    /// `epoch_start` in jiffies (ms), `None` outside a congestion-avoidance epoch.
    pub fn epoch_start(&self) -> Option<u32> {
        self.epoch_start
    }

    /// `cnt`: packets to ACK per packet of cwnd growth.
    pub fn cnt(&self) -> u32 {
        self.cnt
    }

    /// `tcp_cwnd`: the Reno-equivalent window estimate of the current epoch.
    pub fn tcp_cwnd(&self) -> u32 {
        self.tcp_cwnd
    }

    /// `found`: HyStart has ended slow start since the last reset.
    pub fn hystart_found(&self) -> bool {
        self.found
    }

    /// `bictcp_reset`: everything before `unused` in `struct bictcp`, and `found`.
    fn reset(&mut self) {
        self.cnt = 0;
        self.last_max_cwnd = 0;
        self.last_cwnd = 0;
        self.last_time = 0;
        self.bic_origin_point = 0;
        self.bic_k = 0;
        self.delay_min = 0;
        self.epoch_start = None;
        self.ack_cnt = 0;
        self.tcp_cwnd = 0;
        self.found = false;
    }

    /// `bictcp_update`: recompute `cnt` from the cubic curve and the Reno estimate.
    fn update(&mut self, cwnd: u32, acked: u32, now: Instant) {
        let now_j = jiffies(now);
        self.ack_cnt = self.ack_cnt.saturating_add(acked);

        if self.last_cwnd == cwnd && (now_j.wrapping_sub(self.last_time) as i32) <= (HZ / 32) as i32 {
            return;
        }

        // The curve updates cnt at most once per jiffy; every cwnd reduction
        // clears epoch_start, which forces a recalculation.
        if !(self.epoch_start.is_some() && now_j == self.last_time) {
            self.last_cwnd = cwnd;
            self.last_time = now_j;

            let epoch_start = match self.epoch_start {
                Some(e) => e,
                None => {
                    self.epoch_start = Some(now_j);
                    self.ack_cnt = acked;
                    self.tcp_cwnd = cwnd;
                    if self.last_max_cwnd <= cwnd {
                        self.bic_k = 0;
                        self.bic_origin_point = cwnd;
                    } else {
                        self.bic_k = cubic_root(self.cube_factor.saturating_mul(u64::from(self.last_max_cwnd - cwnd)));
                        self.bic_origin_point = self.last_max_cwnd;
                    }
                    now_j
                }
            };

            // t = time since epoch + min RTT: the target is where the curve
            // will be one RTT from now, in 1/1024 s.
            let elapsed = (now_j.wrapping_sub(epoch_start) as i32).max(0) as u64;
            let mut t = elapsed + u64::from(usecs_to_jiffies(self.delay_min));
            t <<= BICTCP_HZ;
            t /= u64::from(HZ);

            let k = u64::from(self.bic_k);
            let offs = t.abs_diff(k) as u128;
            let delta = (u128::from(self.cube_rtt_scale) * offs * offs * offs) >> (10 + 3 * BICTCP_HZ);
            let delta = u32::try_from(delta).unwrap_or(u32::MAX);
            let bic_target = if t < k {
                self.bic_origin_point.saturating_sub(delta)
            } else {
                self.bic_origin_point.saturating_add(delta)
            };

            self.cnt = if bic_target > cwnd { cwnd / (bic_target - cwnd) } else { cwnd.saturating_mul(100) };

            // Before any loss the curve knows nothing about the path; do not
            // let it be slower than 5% growth per RTT.
            if self.last_max_cwnd == 0 && self.cnt > 20 {
                self.cnt = 20;
            }
        }

        // tcp_friendliness: an AIMD flow with CUBIC's beta would have grown
        // tcp_cwnd by one packet every (cwnd * beta_scale) >> 3 packets acked.
        if self.cfg.tcp_friendliness {
            let delta = ((u64::from(cwnd) * u64::from(self.beta_scale)) >> 3).clamp(1, u64::from(u32::MAX)) as u32;
            if self.ack_cnt > delta {
                let k = (self.ack_cnt - 1) / delta;
                self.ack_cnt -= k * delta;
                self.tcp_cwnd = self.tcp_cwnd.saturating_add(k);
            }
            if self.tcp_cwnd > cwnd {
                let max_cnt = cwnd / (self.tcp_cwnd - cwnd);
                if self.cnt > max_cnt {
                    self.cnt = max_cnt;
                }
            }
        }

        // At most one packet of growth per two acked: 1.5x per RTT.
        self.cnt = self.cnt.max(2);
    }

    /// `hystart_ack_delay`: a cushion for TSO/GRO aggregation, 4 GSO packets
    /// at the pacing rate, capped at 1 ms; none without a pacing rate.
    fn hystart_ack_delay_us(&self) -> u32 {
        if self.pacing_rate == 0 {
            return 0;
        }
        let cushion = u64::from(self.cfg.gso_max_size) * 4 * 1_000_000 / self.pacing_rate;
        cushion.min(1000) as u32
    }

    fn hystart_update(&mut self, state: &mut CcState, sample: &AckSample, delay: u32, now: Instant) {
        let params = HystartParams {
            detect: self.cfg.hystart_detect,
            low_window: self.cfg.hystart_low_window,
            ack_delta_us: self.cfg.hystart_ack_delta_us,
            round_start: self.cfg.round_start,
        };
        let input = HystartInput {
            now_us: clock_us(now),
            delay_us: delay,
            delay_min_us: self.delay_min,
            cwnd: state.cwnd,
            snd_una: sample.snd_una,
            snd_nxt: sample.snd_nxt,
            ack_delay_us: self.hystart_ack_delay_us(),
            paced: self.paced,
        };
        let d = self.hystart.update(&params, &input);
        if d.train {
            self.found = true;
            self.counters.tcp_ext_tcp_hystart_train_detect += 1;
            self.counters.tcp_ext_tcp_hystart_train_cwnd += u64::from(state.cwnd);
            state.ssthresh = state.cwnd;
            self.exit = Some(SlowStartExit { reason: SlowStartExitReason::AckTrain, cwnd: state.cwnd });
        }
        if d.delay {
            self.found = true;
            self.counters.tcp_ext_tcp_hystart_delay_detect += 1;
            self.counters.tcp_ext_tcp_hystart_delay_cwnd += u64::from(state.cwnd);
            state.ssthresh = state.cwnd;
            self.exit = Some(SlowStartExit { reason: SlowStartExitReason::Delay, cwnd: state.cwnd });
        }
    }
}

impl Default for Cubic {
    fn default() -> Self {
        Cubic::new(CubicConfig::default())
    }
}

impl CongestionControl for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    /// `cubictcp_init`.
    fn init(&mut self, state: &mut CcState, now: Instant) {
        self.reset();
        if self.cfg.hystart {
            self.hystart.reset(clock_us(now), None);
        }
        if !self.cfg.hystart && self.cfg.initial_ssthresh != 0 {
            state.ssthresh = self.cfg.initial_ssthresh;
        }
    }

    /// `cubictcp_acked`: track the minimum delay and feed HyStart.
    fn pkts_acked(&mut self, state: &mut CcState, sample: &AckSample, now: Instant) {
        let now_j = jiffies(now);
        self.last_ack_jiffies = Some(now_j);
        self.last_snd_nxt = Some(sample.snd_nxt);

        // Duplicates and retransmits carry no timing.
        let Some(rtt) = sample.rtt else { return };

        // Discard delay samples right after fast recovery: they still carry
        // the queue the loss episode built.
        if let Some(epoch) = self.epoch_start {
            if (now_j.wrapping_sub(epoch) as i32) < HZ as i32 {
                return;
            }
        }

        let delay = u32::try_from(rtt.as_micros()).unwrap_or(u32::MAX).max(1);
        if self.delay_min == 0 || self.delay_min > delay {
            self.delay_min = delay;
        }

        if !self.found && state.in_slow_start() && self.cfg.hystart {
            let gated = self.cfg.round_start == HystartRoundStart::Legacy && state.cwnd < self.cfg.hystart_low_window;
            if !gated {
                self.hystart_update(state, sample, delay, now);
            }
        }
    }

    /// `cubictcp_cong_avoid`.
    fn cong_avoid(&mut self, state: &mut CcState, _ack: u32, acked: u32, now: Instant) {
        self.last_ack_jiffies = Some(jiffies(now));
        let mut acked = acked;
        if state.in_slow_start() {
            acked = tcp_slow_start(state, acked);
            if acked == 0 {
                return;
            }
        }
        self.update(state.cwnd, acked, now);
        let cnt = self.cnt;
        tcp_cong_avoid_ai(state, cnt, acked);
    }

    /// `cubictcp_recalc_ssthresh`: end the epoch, remember W_max (lowered by
    /// fast convergence when we lost below the previous one).
    fn ssthresh(&mut self, state: &CcState) -> u32 {
        self.epoch_start = None;
        let cwnd = u64::from(state.cwnd);
        let beta = u64::from(self.cfg.beta);
        let scale = u64::from(BICTCP_BETA_SCALE);
        self.last_max_cwnd = if state.cwnd < self.last_max_cwnd && self.cfg.fast_convergence {
            (cwnd * (scale + beta) / (2 * scale)) as u32
        } else {
            state.cwnd
        };
        ((cwnd * beta / scale) as u32).max(2)
    }

    /// `cubictcp_state`: an RTO forgets everything learned about the path.
    fn set_state(&mut self, _state: &mut CcState, new: CaState, now: Instant) {
        if new == CaState::Loss {
            self.reset();
            self.hystart.reset(clock_us(now), self.last_snd_nxt);
        }
    }

    /// `cubictcp_cwnd_event`: after an application-limited idle period, shift
    /// the epoch so the curve resumes where it paused instead of jumping.
    fn cwnd_event(&mut self, _state: &mut CcState, event: CaEvent, now: Instant) {
        if event != CaEvent::TxStart {
            return;
        }
        let now_j = jiffies(now);
        let Some(lsndtime) = self.lsndtime.or(self.last_ack_jiffies) else { return };
        let delta = now_j.wrapping_sub(lsndtime) as i32;
        if let Some(epoch) = self.epoch_start {
            if delta > 0 {
                let mut shifted = epoch.wrapping_add(delta as u32);
                if crate::hystart::after(shifted, now_j) {
                    shifted = now_j;
                }
                self.epoch_start = Some(shifted);
            }
        }
    }

    fn data_sent(&mut self, now: Instant) {
        self.lsndtime = Some(jiffies(now));
    }

    fn set_pacing(&mut self, rate_bytes_per_sec: u64, paced: bool) {
        self.pacing_rate = rate_bytes_per_sec;
        self.paced = paced;
    }

    fn counters(&self) -> CcCounters {
        self.counters
    }

    fn slow_start_exit(&self) -> Option<SlowStartExit> {
        self.exit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_constants_match_the_kernel() {
        let c = Cubic::default();
        assert_eq!(c.beta_scale, 15);
        assert_eq!(c.cube_rtt_scale, 410);
        assert_eq!(c.cube_factor, (1u64 << 40) / 410);
    }

    #[test]
    fn cubic_root_is_exact_floor() {
        for a in [0u64, 1, 7, 8, 26, 27, 63, 64, 1000, 999, 1001, u64::MAX] {
            let r = u128::from(cubic_root(a));
            assert!(r * r * r <= u128::from(a), "{a}");
            assert!((r + 1) * (r + 1) * (r + 1) > u128::from(a), "{a}");
        }
        assert_eq!(cubic_root(u64::MAX), 2_642_245);
        // K for W_max - cwnd = 30 with default C: cbrt(30 / 0.4004) s = 4.2168 s.
        let k = cubic_root(Cubic::default().cube_factor * 30);
        assert_eq!(k, 4316); // 4316 / 1024 = 4.2148 s
    }

    #[test]
    fn ssthresh_and_fast_convergence_arithmetic() {
        let mut c = Cubic::default();
        let s = CcState { cwnd: 100, cwnd_cnt: 0, ssthresh: 50, cwnd_clamp: u32::MAX };
        assert_eq!(c.ssthresh(&s), 70);
        assert_eq!(c.last_max_cwnd, 100);
        let s = CcState { cwnd: 90, ..s };
        assert_eq!(c.ssthresh(&s), 63);
        assert_eq!(c.last_max_cwnd, 90 * 1741 / 2048);
        assert_eq!(c.ssthresh(&CcState { cwnd: 2, ..s }), 2);
    }

    #[test]
    fn out_of_range_tunables_are_clamped() {
        let c = Cubic::new(CubicConfig { beta: 5000, bic_scale: 0, ..CubicConfig::default() });
        assert_eq!(c.config().beta, 1023);
        assert_eq!(c.config().bic_scale, 1);
    }
}
