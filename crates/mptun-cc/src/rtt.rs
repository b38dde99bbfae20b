//! Round-trip time estimation and the retransmission timeout (RFC 6298),
//! with Linux's choices where the kernel departs from the RFC.
//!
//! * Smoothing is RFC 6298 §2.2/2.3 exactly (α = 1/8, β = 1/4, the new
//!   `rttvar` computed from the old `srtt`), in integer nanoseconds. Linux
//!   (`tcp_rtt_estimator`) additionally damps `rttvar` growth when the RTT
//!   falls and holds the per-flight maximum deviation; we do not.
//! * The minimum RTO is applied Linux's way by default ([`RtoFloor::Linux`]):
//!   the floor bounds the variance term, `RTO = srtt + max(G, 4·rttvar,
//!   rto_min)`, so a flow with a 150 ms RTT gets at least 350 ms, not 200 ms.
//!   [`RtoFloor::Rfc6298`] clamps the sum instead (`max(srtt + max(G,
//!   4·rttvar), rto_min)`). Linux's `TCP_RTO_MIN` (200 ms) is the default
//!   floor rather than the RFC's 1 s; `TCP_RTO_MAX` 120 s caps it.
//! * The initial RTO is 1 s (RFC 6298 §2.1, Linux `TCP_TIMEOUT_INIT`).
//! * The minimum RTT is windowed over 300 s like Linux's `tcp_min_rtt_wlen`
//!   (a [`WindowedMin`]), so it tracks route changes.
//!
//! Karn's rule (no samples from retransmitted segments) is the caller's job:
//! only feed samples that unambiguously time one transmission.

use crate::minmax::WindowedMin;
use crate::{Duration, Instant};

/// How the minimum RTO combines with the estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RtoFloor {
    /// `srtt + max(G, 4·rttvar, min_rto)` (Linux `tcp_set_rto`).
    #[default]
    Linux,
    /// `max(srtt + max(G, 4·rttvar), min_rto)` (RFC 6298 §2.4).
    Rfc6298,
}

/// Timer constants; `Default` is Linux's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RttConfig {
    /// RTO before the first sample (`TCP_TIMEOUT_INIT`, 1 s).
    pub initial_rto: Duration,
    /// `TCP_RTO_MIN` (200 ms; the RFC says 1 s).
    pub min_rto: Duration,
    /// `TCP_RTO_MAX` (120 s); also caps exponential backoff.
    pub max_rto: Duration,
    /// Clock granularity G (Linux's timer is a 1 ms jiffy).
    pub granularity: Duration,
    /// Window of the min-RTT filter (`tcp_min_rtt_wlen`, 300 s).
    pub min_rtt_window: Duration,
    /// How `min_rto` applies.
    pub floor: RtoFloor,
}

impl Default for RttConfig {
    fn default() -> Self {
        RttConfig {
            initial_rto: Duration::from_secs(1),
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(120),
            granularity: Duration::from_millis(1),
            min_rtt_window: Duration::from_secs(300),
            floor: RtoFloor::Linux,
        }
    }
}

/// Backoff exponents beyond this cannot matter: 2^32 × anything ≥ 1 ns
/// exceeds any sane `max_rto`.
const MAX_BACKOFF: u32 = 32;

/// Per-subflow RTT state and RTO.
#[derive(Clone, Copy, Debug)]
pub struct RttEstimator {
    cfg: RttConfig,
    latest: Option<Duration>,
    srtt: Option<Duration>,
    rttvar: Duration,
    min: WindowedMin,
    backoff: u32,
}

impl Default for RttEstimator {
    fn default() -> Self {
        RttEstimator::new(RttConfig::default())
    }
}

impl RttEstimator {
    /// An estimator with no samples yet (RTO = `initial_rto`).
    pub fn new(cfg: RttConfig) -> Self {
        RttEstimator {
            cfg,
            latest: None,
            srtt: None,
            rttvar: Duration::ZERO,
            min: WindowedMin::new(cfg.min_rtt_window),
            backoff: 0,
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &RttConfig {
        &self.cfg
    }

    /// Feed one RTT measurement taken at `now` (RFC 6298 §2.2 / §2.3).
    pub fn update(&mut self, now: Instant, rtt: Duration) {
        self.latest = Some(rtt);
        self.min.update(now, rtt);
        let r = rtt.as_nanos();
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let s = srtt.as_nanos();
                let var = (3 * self.rttvar.as_nanos() + s.abs_diff(r)) / 4;
                let s = (7 * s + r) / 8;
                self.rttvar = Duration::from_nanos(u64::try_from(var).unwrap_or(u64::MAX));
                self.srtt = Some(Duration::from_nanos(u64::try_from(s).unwrap_or(u64::MAX)));
            }
        }
    }

    /// The most recent sample.
    pub fn latest(&self) -> Option<Duration> {
        self.latest
    }

    /// SRTT, `None` before the first sample (pacing must not guess one).
    pub fn smoothed(&self) -> Option<Duration> {
        self.srtt
    }

    /// RTTVAR (zero before the first sample).
    pub fn var(&self) -> Duration {
        self.rttvar
    }

    /// Windowed minimum RTT.
    pub fn min(&self) -> Option<Duration> {
        self.min.get()
    }

    /// The RTO before backoff.
    pub fn base_rto(&self) -> Duration {
        let Some(srtt) = self.srtt else { return self.cfg.initial_rto.min(self.cfg.max_rto) };
        let var = self.cfg.granularity.max(self.rttvar.saturating_mul(4));
        let rto = match self.cfg.floor {
            RtoFloor::Linux => srtt.saturating_add(var.max(self.cfg.min_rto)),
            RtoFloor::Rfc6298 => srtt.saturating_add(var).max(self.cfg.min_rto),
        };
        rto.min(self.cfg.max_rto)
    }

    /// The current retransmission timeout: the base RTO doubled once per
    /// unanswered timeout, capped at `max_rto`.
    pub fn rto(&self) -> Duration {
        let factor = 1u64 << self.backoff;
        let base = self.base_rto().as_nanos();
        let rto = base.saturating_mul(u128::from(factor));
        Duration::from_nanos(u64::try_from(rto).unwrap_or(u64::MAX)).min(self.cfg.max_rto)
    }

    /// A retransmission timer expired: double the RTO (RFC 6298 §5.5).
    pub fn backoff(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    /// New data was acknowledged: back to the computed RTO (Linux clears
    /// `icsk_backoff` on a forward ACK).
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// Number of backoffs since the last reset (`icsk_backoff`).
    pub fn backoff_count(&self) -> u32 {
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn initial_rto_is_one_second() {
        let e = RttEstimator::default();
        assert_eq!(e.rto(), Duration::from_secs(1));
        assert_eq!(e.smoothed(), None);
        assert_eq!(e.latest(), None);
        assert_eq!(e.min(), None);
    }

    #[test]
    fn rfc6298_first_sample_and_update() {
        let mut e = RttEstimator::default();
        e.update(Instant::from_millis(100), ms(100));
        // (2.2) SRTT = R, RTTVAR = R/2, RTO = SRTT + max(G, 4 RTTVAR) = 300 ms.
        assert_eq!(e.smoothed(), Some(ms(100)));
        assert_eq!(e.var(), ms(50));
        assert_eq!(e.rto(), ms(300));

        e.update(Instant::from_millis(200), ms(120));
        // (2.3) RTTVAR = 3/4·50 + 1/4·|100 − 120| = 42.5; SRTT = 7/8·100 + 1/8·120 = 102.5.
        assert_eq!(e.var(), Duration::from_micros(42_500));
        assert_eq!(e.smoothed(), Some(Duration::from_micros(102_500)));
        // 4·RTTVAR = 170 ms: the RFC's sum is 272.5 ms; Linux floors the
        // variance term at rto_min instead, giving 302.5 ms.
        assert_eq!(e.rto(), Duration::from_micros(102_500 + 200_000));
        let mut rfc = RttEstimator::new(RttConfig { floor: RtoFloor::Rfc6298, ..RttConfig::default() });
        rfc.update(Instant::from_millis(100), ms(100));
        rfc.update(Instant::from_millis(200), ms(120));
        assert_eq!(rfc.rto(), Duration::from_micros(102_500 + 170_000));
        assert_eq!(e.latest(), Some(ms(120)));
        assert_eq!(e.min(), Some(ms(100)));

        e.update(Instant::from_millis(300), ms(80));
        // RTTVAR = 3/4·42.5 + 1/4·22.5 = 37.5; SRTT = 7/8·102.5 + 1/8·80 = 99.6875.
        assert_eq!(e.var(), Duration::from_micros(37_500));
        assert_eq!(e.smoothed(), Some(Duration::from_nanos(99_687_500)));
        assert_eq!(e.min(), Some(ms(80)));
    }

    #[test]
    fn min_rto_floor_linux_vs_rfc() {
        let mut linux = RttEstimator::default();
        let mut rfc = RttEstimator::new(RttConfig { floor: RtoFloor::Rfc6298, ..RttConfig::default() });
        // Stable 10 ms RTT: rttvar decays to a fraction of a millisecond.
        for k in 0..50 {
            linux.update(Instant::from_millis(10 * k), ms(10));
            rfc.update(Instant::from_millis(10 * k), ms(10));
        }
        assert!(linux.var() < ms(1));
        assert_eq!(linux.rto(), ms(210));
        assert_eq!(rfc.rto(), ms(200));
    }

    #[test]
    fn granularity_bounds_the_variance_term() {
        let mut e = RttEstimator::new(RttConfig {
            min_rto: Duration::ZERO,
            granularity: ms(5),
            floor: RtoFloor::Rfc6298,
            ..RttConfig::default()
        });
        for k in 0..60 {
            e.update(Instant::from_millis(k), ms(1));
        }
        assert_eq!(e.rto(), ms(6));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut e = RttEstimator::default();
        e.update(Instant::ZERO, ms(100)); // RTO 300 ms
        e.backoff();
        assert_eq!(e.rto(), ms(600));
        e.backoff();
        assert_eq!(e.rto(), ms(1200));
        for _ in 0..100 {
            e.backoff();
        }
        assert_eq!(e.rto(), Duration::from_secs(120));
        assert_eq!(e.backoff_count(), MAX_BACKOFF);
        e.reset_backoff();
        assert_eq!(e.rto(), ms(300));
    }

    #[test]
    fn huge_samples_do_not_overflow() {
        let mut e = RttEstimator::default();
        e.update(Instant::ZERO, Duration::from_secs(u64::MAX / 2_000_000_000));
        e.update(Instant::ZERO, Duration::ZERO);
        assert_eq!(e.rto(), Duration::from_secs(120));
    }
}
