//! RED, the queue discipline of Linux `sch_red` (Floyd and Jacobson,
//! "Random Early Detection Gateways for Congestion Avoidance", IEEE/ACM ToN
//! 1993), for the link model.
//!
//! RED decides at enqueue, from an exponentially weighted average of the
//! backlog: under `min` it accepts, at or over `max` it drops (Linux's
//! "hard mark" without the `gentle` flag), in between it drops with a
//! probability rising linearly to `max_p`, spaced as `red_action` and
//! `red_mark_probability` in `include/net/red.h` space them: after a drop
//! (or on entering the band) a uniform `r` is drawn, and the `count`-th
//! packet since is dropped once `count * p_b >= r`, so drops come at
//! near-even intervals instead of in clusters. While the queue sat idle the
//! average decays as if `idle / (avpkt at the link's rate)` empty arrivals
//! had been seen (`red_calc_qavg_from_idle_time`).
//!
//! Departures from the kernel, stated where they matter: the average and
//! the probability are kept in floating point instead of the kernel's
//! fixed point (`Wlog`-scaled integers, `max_P` in 1/2^32), and there is no
//! ECN marking: every mark is a drop, as on a RED queue without `ecn`.

use mptun_time::Duration;
use rand::Rng;

/// RED's parameters (`tc qdisc add ... red min B max B probability P burst
/// N avpkt B`), in bytes of backlog; the link's `limit` stays the hard cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedParams {
    /// Average backlog below which nothing is dropped.
    pub min_bytes: u32,
    /// Average backlog at and above which everything is dropped.
    pub max_bytes: u32,
    /// Drop probability as the average reaches `max`, in millionths
    /// (`probability`; Floyd's recommended 0.1 is 100 000).
    pub max_p_ppm: u32,
    /// The average's weight is `2^-wlog` (Linux's `Wlog`; 9 gives Floyd's
    /// recommended w_q of about 0.002).
    pub wlog: u8,
    /// The typical packet, for the average's decay over idle time.
    pub avpkt: u32,
}

impl RedParams {
    /// RED between `min` and `max` packets of 1500 bytes with Floyd's
    /// recommended `max_p` 0.1 and w_q 2^-9. The counts come from files and
    /// command lines: a huge one saturates instead of overflowing.
    pub fn packets(min: u32, max: u32) -> Self {
        RedParams {
            min_bytes: min.saturating_mul(1500),
            max_bytes: max.saturating_mul(1500),
            max_p_ppm: 100_000,
            wlog: 9,
            avpkt: 1500,
        }
    }

    fn weight(&self) -> f64 {
        (-f64::from(self.wlog)).exp2()
    }
}

/// RED's per-queue state (`struct red_vars`).
#[derive(Clone, Debug)]
pub(crate) struct Red {
    params: RedParams,
    /// The average backlog, bytes.
    qavg: f64,
    /// Packets since the last drop inside the band; -1 outside it.
    count: i64,
    /// The uniform draw the next drop waits for (`qR`, scaled to [0, 1)).
    r: f64,
}

impl Red {
    pub fn new(params: RedParams) -> Self {
        Red { params, qavg: 0.0, count: -1, r: 0.0 }
    }

    /// A packet arrives with `backlog` bytes queued; `idle` is how long the
    /// queue had been empty (zero when it was not), `rate_bps` the link's.
    /// `true` when RED drops it.
    pub fn on_enqueue<R: Rng + ?Sized>(
        &mut self,
        backlog: usize,
        idle: Duration,
        rate_bps: Option<u64>,
        rng: &mut R,
    ) -> bool {
        let w = self.params.weight();
        if !idle.is_zero() {
            // As many empty-queue arrivals as avpkt-sized packets the link
            // could have sent while idle.
            let m = match rate_bps {
                Some(r) if r > 0 => idle.as_secs_f64() * r as f64 / (8.0 * f64::from(self.params.avpkt.max(1))),
                _ => f64::INFINITY,
            };
            self.qavg *= (1.0 - w).powf(m);
        } else {
            self.qavg += (backlog as f64 - self.qavg) * w;
        }
        let (min, max) = (f64::from(self.params.min_bytes), f64::from(self.params.max_bytes));
        if self.qavg < min {
            self.count = -1;
            return false;
        }
        if self.qavg >= max {
            self.count = -1;
            return true;
        }
        self.count += 1;
        if self.count == 0 {
            self.r = rng.random::<f64>();
            return false;
        }
        let p_b = f64::from(self.params.max_p_ppm) / 1e6 * (self.qavg - min) / (max - min).max(1.0);
        if self.count as f64 * p_b >= self.r {
            self.count = 0;
            self.r = rng.random::<f64>();
            return true;
        }
        false
    }

    /// The average backlog, bytes.
    #[cfg(test)]
    pub(crate) fn qavg(&self) -> f64 {
        self.qavg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn p() -> RedParams {
        RedParams::packets(10, 30)
    }

    /// The average follows a steady backlog at w_q per arrival: after n
    /// arrivals it holds 1 - (1 - w)^n of the step.
    #[test]
    fn the_average_follows_the_backlog_at_its_weight() {
        let mut red = Red::new(p());
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..512 {
            red.on_enqueue(15_000, Duration::ZERO, Some(10_000_000), &mut rng);
        }
        let want = 15_000.0 * (1.0 - (1.0 - 2f64.powi(-9)).powi(512));
        assert!((red.qavg() - want).abs() < 1e-6, "{} vs {want}", red.qavg());
    }

    /// Below min nothing is dropped, at or above max everything is; in the
    /// band the gaps between drops are uniform in 1..=1/p_b packets (Floyd's
    /// p_a = p_b / (1 - count p_b)), so the rate is about 2 p_b / (1 + p_b).
    #[test]
    fn drops_follow_the_average_and_are_evenly_spaced() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let mut red = Red::new(p());
        assert!((0..5000).all(|_| !red.on_enqueue(9 * 1500, Duration::ZERO, None, &mut rng)));
        let mut red = Red::new(p());
        red.qavg = 31.0 * 1500.0;
        assert!((0..100).all(|_| red.on_enqueue(31 * 1500, Duration::ZERO, None, &mut rng)));
        // Average pinned at the band's middle: p_b = 0.1 * 0.5 = 0.05.
        let mut red = Red::new(p());
        red.qavg = 20.0 * 1500.0;
        let (mut drops, mut gap, mut max_gap) = (0, 0, 0);
        let n = 200_000;
        for _ in 0..n {
            gap += 1;
            if red.on_enqueue(20 * 1500, Duration::ZERO, None, &mut rng) {
                drops += 1;
                max_gap = max_gap.max(gap);
                gap = 0;
            }
        }
        // Gaps uniform in 1..=1/p_b = 20: mean about 10.5, rate about 0.095.
        let rate = drops as f64 / n as f64;
        assert!((0.088..0.102).contains(&rate), "drop rate {rate}");
        assert!(max_gap <= 21, "gap {max_gap}");
    }

    /// An idle queue's average decays by (1 - w)^m, m the avpkt-sized
    /// packets the link could have sent meanwhile.
    #[test]
    fn idle_time_decays_the_average() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut red = Red::new(p());
        red.qavg = 30_000.0;
        // 1500 bytes at 12 Mbit/s = 1 ms: 512 ms idle = 512 packets.
        red.on_enqueue(0, Duration::from_millis(512), Some(12_000_000), &mut rng);
        let want = 30_000.0 * (1.0 - 2f64.powi(-9)).powi(512);
        assert!((red.qavg() - want).abs() < 1e-6, "{} vs {want}", red.qavg());
    }
}
