//! One direction of an emulated link, as a pure function of time.
//!
//! The model decides, when a packet is offered at `now`, whether it is dropped
//! (and why) and at which instant each copy leaves the far end. It holds no
//! payload and reads no clock, so the deterministic simulator and the real-time
//! `linkem` forwarder share it and a lab result and a simulated one differ only
//! by what the real world adds.
//!
//! Semantics follow netem where netem has an opinion: `rate` serializes packets
//! back to back at byte accuracy; `delay`/`jitter` are added after
//! serialization; `reorder p` sends a fraction of packets without the delay
//! (they overtake the delayed ones); `limit` is a droptail queue. The limit can
//! count either only the packets waiting at the bottleneck (a router buffer,
//! [`LimitScope::Bottleneck`]) or everything the emulator holds, delayed ones
//! included, as netem's `limit` does ([`LimitScope::Held`]).

#![forbid(unsafe_code)]

mod codel;
mod hist;
mod red;

pub use codel::CodelParams;
pub use hist::Histogram;
pub use red::RedParams;

use codel::Codel;
use mptun_time::{Duration, Instant};
use rand::Rng;
use red::Red;
use std::collections::VecDeque;

/// How jitter is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum JitterMode {
    /// A packet never leaves before the one offered before it (netem with `rate`).
    #[default]
    OrderPreserving,
    /// Each packet's delay is drawn independently; packets may overtake.
    Reordering,
}

/// What the queue limit counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LimitScope {
    /// Packets waiting for or in serialization: a router's buffer.
    #[default]
    Bottleneck,
    /// Every packet the emulator holds, in serialization or in the delay line (netem `limit`).
    Held,
}

/// Random loss process.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum LossModel {
    #[default]
    None,
    /// Independent loss with probability `p`.
    Bernoulli(f64),
    /// Gilbert-Elliott, netem's `loss gemodel p r 1-h 1-k`: `p` good→bad,
    /// `r` bad→good, `loss_bad` = 1-h, `loss_good` = 1-k.
    GilbertElliott { p: f64, r: f64, loss_bad: f64, loss_good: f64 },
}

/// How the queue in front of the serializer decides what to drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Qdisc {
    /// Drop only what does not fit the limit (`pfifo`/`bfifo`).
    #[default]
    DropTail,
    /// CoDel (Linux `sch_codel`), within the same limit.
    Codel(CodelParams),
    /// RED (Linux `sch_red` without ECN or `gentle`), within the same limit.
    Red(RedParams),
}

/// Parameters of one link direction. `Default` is an ideal wire: infinitely fast, no delay.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct LinkConfig {
    /// Bits per second; `None` means no serialization delay.
    pub rate_bps: Option<u64>,
    pub delay: Duration,
    /// Uniform jitter in `[-jitter, +jitter]` around `delay`.
    pub jitter: Duration,
    pub jitter_mode: JitterMode,
    /// Probability that a packet skips the delay line (netem `reorder`).
    pub reorder: f64,
    pub limit_packets: Option<usize>,
    pub limit_bytes: Option<usize>,
    pub limit_scope: LimitScope,
    pub loss: LossModel,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// Probability that one random bit of a packet is flipped.
    pub corrupt: f64,
    /// A link that is down drops every packet.
    pub down: bool,
    /// The queue discipline at the serializer.
    pub qdisc: Qdisc,
}

impl LinkConfig {
    /// Bandwidth-delay product in bytes for a given round-trip time.
    pub fn bdp_bytes(&self, rtt: Duration) -> u64 {
        self.rate_bps.map_or(0, |r| (r as u128 * rtt.as_nanos() / 8 / 1_000_000_000) as u64)
    }
}

/// Why a packet did not make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropCause {
    /// The loss model chose it.
    Loss,
    /// The droptail queue was full.
    QueueFull,
    /// The link was down.
    LinkDown,
    /// The queue discipline dropped it (CoDel at dequeue, RED at enqueue).
    Aqm,
}

/// The fate of one offered packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Dropped before it left.
    Dropped(DropCause),
    /// Delivered at `release`; `duplicate` is a second delivery instant;
    /// `corrupt_bit` is the index of a bit to flip.
    Deliver { release: Instant, duplicate: Option<Instant>, corrupt_bit: Option<u32> },
}

/// Counters of one link direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub offered_packets: u64,
    pub offered_bytes: u64,
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
    pub dropped_down: u64,
    /// Dropped by the queue discipline (CoDel's `drop_count`; RED's
    /// `prob_drop` + `forced_drop`).
    pub dropped_aqm: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub reordered: u64,
    /// Largest queue occupancy seen (packets), in the configured scope.
    pub max_queue_packets: u64,
}

/// One direction of a link.
#[derive(Clone, Debug)]
pub struct Link {
    config: LinkConfig,
    /// When the serializer is free again.
    busy_until: Instant,
    /// Release time of the last packet, for order-preserving jitter.
    last_release: Instant,
    /// (instant the packet stops counting against the limit, bytes), in that order
    /// for [`LimitScope::Bottleneck`]; unordered only under reordering in `Held` scope.
    occupancy: VecDeque<(Instant, usize)>,
    occupancy_bytes: usize,
    ge_bad: bool,
    stats: LinkStats,
    /// CoDel's state, while the qdisc is CoDel.
    codel: Option<Codel>,
    /// RED's state, while the qdisc is RED.
    red: Option<Red>,
    /// Time each delivered packet waited for the serializer, ns.
    queue_delay: Histogram,
}

impl Link {
    pub fn new(config: LinkConfig) -> Self {
        Link {
            config,
            busy_until: Instant::ZERO,
            last_release: Instant::ZERO,
            occupancy: VecDeque::new(),
            occupancy_bytes: 0,
            ge_bad: false,
            stats: LinkStats::default(),
            codel: Self::codel_for(&config),
            red: Self::red_for(&config),
            queue_delay: Histogram::new(),
        }
    }

    fn codel_for(config: &LinkConfig) -> Option<Codel> {
        match config.qdisc {
            Qdisc::Codel(p) => Some(Codel::new(p)),
            _ => None,
        }
    }

    fn red_for(config: &LinkConfig) -> Option<Red> {
        match config.qdisc {
            Qdisc::Red(p) => Some(Red::new(p)),
            _ => None,
        }
    }

    /// The queueing delays delivered packets met (time from the offer to
    /// the start of their serialization, ns): the standing queue a flow builds.
    pub fn queue_delay(&self) -> &Histogram {
        &self.queue_delay
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Change parameters at run time (a path going down, a rate change).
    /// Packets already accepted keep their release times, as with `tc qdisc change`.
    pub fn set_config(&mut self, config: LinkConfig) {
        if config.qdisc != self.config.qdisc {
            self.codel = Self::codel_for(&config);
            self.red = Self::red_for(&config);
        }
        self.config = config;
    }

    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Packets currently counted against the limit.
    pub fn queue_packets(&mut self, now: Instant) -> usize {
        self.expire(now);
        self.occupancy.len()
    }

    fn expire(&mut self, now: Instant) {
        // Entries are pushed in non-decreasing order except for reordered
        // releases in `Held` scope; retain() handles those, the fast path pops.
        while let Some(&(t, len)) = self.occupancy.front() {
            if t > now {
                break;
            }
            self.occupancy.pop_front();
            self.occupancy_bytes -= len;
        }
        if self.config.limit_scope == LimitScope::Held && self.config.jitter_mode == JitterMode::Reordering
            || self.config.reorder > 0.0
        {
            let mut freed = 0;
            self.occupancy.retain(|&(t, len)| {
                let keep = t > now;
                if !keep {
                    freed += len;
                }
                keep
            });
            self.occupancy_bytes -= freed;
        }
    }

    fn lose<R: Rng + ?Sized>(&mut self, rng: &mut R) -> bool {
        match self.config.loss {
            LossModel::None => false,
            LossModel::Bernoulli(p) => p > 0.0 && rng.random::<f64>() < p,
            LossModel::GilbertElliott { p, r, loss_bad, loss_good } => {
                // netem gemodel: transition first, then lose according to the new state.
                if self.ge_bad {
                    if rng.random::<f64>() < r {
                        self.ge_bad = false;
                    }
                } else if rng.random::<f64>() < p {
                    self.ge_bad = true;
                }
                let pl = if self.ge_bad { loss_bad } else { loss_good };
                pl > 0.0 && rng.random::<f64>() < pl
            }
        }
    }

    /// Offer a packet of `len` bytes (as counted on the wire) at `now`.
    pub fn offer<R: Rng + ?Sized>(&mut self, now: Instant, len: usize, rng: &mut R) -> Verdict {
        self.stats.offered_packets += 1;
        self.stats.offered_bytes += len as u64;
        if self.config.down {
            self.stats.dropped_down += 1;
            return Verdict::Dropped(DropCause::LinkDown);
        }
        self.expire(now);
        if let Some(red) = &mut self.red {
            // As sch_red: the average moves and RED decides before the
            // limit is checked. The queue has been idle since the serializer
            // went free; the backlog is counted in the limit's scope.
            let idle = now.saturating_duration_since(self.busy_until);
            if red.on_enqueue(self.occupancy_bytes, idle, self.config.rate_bps, rng) {
                self.stats.dropped_aqm += 1;
                return Verdict::Dropped(DropCause::Aqm);
            }
        }
        let full = self.config.limit_packets.is_some_and(|l| self.occupancy.len() >= l)
            || self.config.limit_bytes.is_some_and(|l| self.occupancy_bytes + len > l);
        if full {
            self.stats.dropped_queue += 1;
            return Verdict::Dropped(DropCause::QueueFull);
        }
        // Loss is decided at enqueue like netem; a lost packet takes no queue room.
        if self.lose(rng) {
            self.stats.dropped_loss += 1;
            return Verdict::Dropped(DropCause::Loss);
        }
        let start = self.busy_until.max(now);
        if let Some(codel) = &mut self.codel {
            // Dequeued at `start`: dropped there, it held its place in the
            // queue until then but takes no serialization time.
            if codel.on_dequeue(start, start - now, self.occupancy_bytes, len) {
                self.occupancy.push_back((start, len));
                self.occupancy_bytes += len;
                self.stats.dropped_aqm += 1;
                return Verdict::Dropped(DropCause::Aqm);
            }
        }
        self.queue_delay.record((start - now).as_nanos() as u64);
        let tx_end = match self.config.rate_bps {
            Some(rate) if rate > 0 => {
                let ns = (len as u128 * 8 * 1_000_000_000).div_ceil(rate as u128);
                start + Duration::from_nanos(ns as u64)
            }
            _ => start,
        };
        self.busy_until = tx_end;

        let skip_delay = self.config.reorder > 0.0 && rng.random::<f64>() < self.config.reorder;
        let mut release = if skip_delay {
            self.stats.reordered += 1;
            tx_end
        } else {
            let mut d = self.config.delay;
            let j = self.config.jitter.as_nanos() as i128;
            if j > 0 {
                let off = rng.random_range(-j..=j);
                d = Duration::from_nanos((d.as_nanos() as i128 + off).max(0) as u64);
            }
            tx_end + d
        };
        if !skip_delay && self.config.jitter_mode == JitterMode::OrderPreserving {
            release = release.max(self.last_release);
        }
        if !skip_delay {
            self.last_release = self.last_release.max(release);
        }
        let counted_until = match self.config.limit_scope {
            LimitScope::Bottleneck => tx_end,
            LimitScope::Held => release,
        };
        self.occupancy.push_back((counted_until, len));
        self.occupancy_bytes += len;
        self.stats.max_queue_packets = self.stats.max_queue_packets.max(self.occupancy.len() as u64);

        let duplicate = (self.config.duplicate > 0.0 && rng.random::<f64>() < self.config.duplicate).then(|| {
            self.stats.duplicated += 1;
            release
        });
        let corrupt_bit =
            (self.config.corrupt > 0.0 && len > 0 && rng.random::<f64>() < self.config.corrupt).then(|| {
                self.stats.corrupted += 1;
                rng.random_range(0..(len as u32 * 8))
            });
        self.stats.delivered_packets += 1 + duplicate.is_some() as u64;
        self.stats.delivered_bytes += len as u64 * (1 + duplicate.is_some() as u64);
        Verdict::Deliver { release, duplicate, corrupt_bit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(7)
    }

    fn release(v: Verdict) -> Instant {
        match v {
            Verdict::Deliver { release, .. } => release,
            Verdict::Dropped(c) => panic!("dropped: {c:?}"),
        }
    }

    #[test]
    fn serialization_is_byte_accurate_and_back_to_back() {
        let mut l = Link::new(LinkConfig {
            rate_bps: Some(10_000_000),
            delay: Duration::from_millis(20),
            ..Default::default()
        });
        let mut r = rng();
        // 1500 bytes at 10 Mbit/s = 1.2 ms.
        let a = release(l.offer(Instant::ZERO, 1500, &mut r));
        let b = release(l.offer(Instant::ZERO, 1500, &mut r));
        assert_eq!(a, Instant::from_micros(21_200));
        assert_eq!(b, Instant::from_micros(22_400));
        // After idle, serialization starts at the offer time.
        let c = release(l.offer(Instant::from_millis(100), 125, &mut r));
        assert_eq!(c, Instant::from_micros(120_100));
    }

    #[test]
    fn droptail_bottleneck_counts_only_waiting_packets() {
        let mut l = Link::new(LinkConfig {
            rate_bps: Some(8_000_000), // 1 byte per microsecond
            delay: Duration::from_millis(50),
            limit_packets: Some(2),
            ..Default::default()
        });
        let mut r = rng();
        assert!(matches!(l.offer(Instant::ZERO, 1000, &mut r), Verdict::Deliver { .. }));
        assert!(matches!(l.offer(Instant::ZERO, 1000, &mut r), Verdict::Deliver { .. }));
        assert_eq!(l.offer(Instant::ZERO, 1000, &mut r), Verdict::Dropped(DropCause::QueueFull));
        // First packet serialized at 1 ms: room for one more although it is still in the delay line.
        assert!(matches!(l.offer(Instant::from_millis(1), 1000, &mut r), Verdict::Deliver { .. }));
        assert_eq!(l.stats().dropped_queue, 1);
    }

    #[test]
    fn held_scope_counts_the_delay_line_like_netem() {
        let mut l = Link::new(LinkConfig {
            rate_bps: Some(8_000_000),
            delay: Duration::from_millis(50),
            limit_packets: Some(2),
            limit_scope: LimitScope::Held,
            ..Default::default()
        });
        let mut r = rng();
        l.offer(Instant::ZERO, 1000, &mut r);
        l.offer(Instant::ZERO, 1000, &mut r);
        assert_eq!(l.offer(Instant::from_millis(1), 1000, &mut r), Verdict::Dropped(DropCause::QueueFull));
        assert!(matches!(l.offer(Instant::from_millis(51), 1000, &mut r), Verdict::Deliver { .. }));
    }

    #[test]
    fn bernoulli_loss_rate_is_close_to_configured() {
        let mut l = Link::new(LinkConfig { loss: LossModel::Bernoulli(0.01), ..Default::default() });
        let mut r = rng();
        let n = 100_000;
        let lost =
            (0..n).filter(|i| matches!(l.offer(Instant::from_micros(*i), 100, &mut r), Verdict::Dropped(_))).count();
        let p = lost as f64 / n as f64;
        assert!((0.009..0.011).contains(&p), "measured loss {p}");
    }

    #[test]
    fn order_preserving_jitter_never_reorders_and_reordering_does() {
        for (mode, expect_reorder) in [(JitterMode::OrderPreserving, false), (JitterMode::Reordering, true)] {
            let mut l = Link::new(LinkConfig {
                rate_bps: Some(100_000_000),
                delay: Duration::from_millis(10),
                jitter: Duration::from_millis(2),
                jitter_mode: mode,
                ..Default::default()
            });
            let mut r = rng();
            let mut last = Instant::ZERO;
            let mut reordered = false;
            for i in 0..1000 {
                let t = release(l.offer(Instant::from_micros(i * 100), 1000, &mut r));
                reordered |= t < last;
                last = last.max(t);
            }
            assert_eq!(reordered, expect_reorder, "{mode:?}");
        }
    }

    #[test]
    fn reorder_probability_skips_the_delay() {
        let mut l = Link::new(LinkConfig { delay: Duration::from_millis(20), reorder: 0.5, ..Default::default() });
        let mut r = rng();
        let fast = (0..1000)
            .filter(|&i| release(l.offer(Instant::from_millis(i), 100, &mut r)) == Instant::from_millis(i))
            .count();
        assert!((400..600).contains(&fast), "{fast}");
        assert_eq!(l.stats().reordered, fast as u64);
    }

    /// Under CoDel a queue kept 20 ms deep is dropped from, once the
    /// delay stayed above target for an interval; a dropped packet takes no
    /// serialization time (the next one leaves when it would have), and
    /// the delays of the delivered ones are recorded.
    #[test]
    fn codel_drops_from_a_standing_queue_and_frees_the_serializer() {
        let mut l = Link::new(LinkConfig {
            rate_bps: Some(8_000_000), // 1 ms per 1000 bytes
            limit_packets: Some(1000),
            qdisc: Qdisc::Codel(CodelParams::default()),
            ..Default::default()
        });
        let mut r = rng();
        let mut first_drop = None;
        // Two packets offered per millisecond, one leaves: the queue grows.
        for i in 0..400u64 {
            for _ in 0..2 {
                let before = l.busy_until;
                if l.offer(Instant::from_millis(i), 1000, &mut r) == Verdict::Dropped(DropCause::Aqm) {
                    first_drop.get_or_insert(i);
                    assert_eq!(l.busy_until, before, "a dropped packet is not serialized");
                }
            }
        }
        // A packet offered at t ms leaves at about 2t: the sojourn passes
        // the 5 ms target at a dequeue near 10 ms, and the first drop is an
        // interval later in dequeue time, 110 ms, a packet offered at 54 ms.
        assert_eq!(first_drop, Some(54));
        assert!(l.stats().dropped_aqm > 1 && l.stats().dropped_queue == 0, "{:?}", l.stats());
        assert_eq!(l.queue_delay().count(), l.stats().delivered_packets);
        let tail = Link::new(LinkConfig { qdisc: Qdisc::DropTail, ..*l.config() });
        assert_eq!(tail.stats().dropped_aqm, 0);
    }

    /// Two packets offered per packet time, an unresponsive overload that
    /// needs a 50 % drop rate: RED's probabilistic band gives at most about
    /// 2 max_p, so the average settles at `max`, where RED drops all that
    /// comes (its "hard mark"), and the queue stays there, far under the
    /// 1000-packet limit that droptail fills.
    #[test]
    fn red_holds_the_queue_between_its_thresholds() {
        let cfg = |qdisc| LinkConfig {
            rate_bps: Some(12_000_000), // 1 ms per 1500 bytes
            limit_packets: Some(1000),
            qdisc,
            ..Default::default()
        };
        let mut red = Link::new(cfg(Qdisc::Red(RedParams::packets(20, 60))));
        let mut tail = Link::new(cfg(Qdisc::DropTail));
        let mut r = rng();
        let mut late = Vec::new();
        for i in 0..20_000u64 {
            for l in [&mut red, &mut tail] {
                for k in 0..2 {
                    let _ = l.offer(Instant::from_micros(i * 1000 + k * 500), 1500, &mut r);
                }
            }
            if i > 10_000 {
                late.push(red.queue_packets(Instant::from_micros(i * 1000 + 999)));
            }
        }
        let mean = late.iter().sum::<usize>() as f64 / late.len() as f64;
        assert!((55.0..65.0).contains(&mean), "RED's mean queue {mean}");
        assert_eq!(red.stats().dropped_queue, 0);
        assert!(red.stats().dropped_aqm > 9_000, "{:?}", red.stats());
        assert_eq!(tail.stats().dropped_aqm, 0);
        assert_eq!(tail.stats().max_queue_packets, 1000);
    }

    #[test]
    fn down_link_drops_everything() {
        let mut l = Link::new(LinkConfig { down: true, ..Default::default() });
        assert_eq!(l.offer(Instant::ZERO, 1, &mut rng()), Verdict::Dropped(DropCause::LinkDown));
    }

    #[test]
    fn gilbert_elliott_loss_is_bursty() {
        let mut l = Link::new(LinkConfig {
            loss: LossModel::GilbertElliott { p: 0.01, r: 0.3, loss_bad: 1.0, loss_good: 0.0 },
            ..Default::default()
        });
        let mut r = rng();
        let outcomes: Vec<bool> = (0..100_000)
            .map(|i| matches!(l.offer(Instant::from_micros(i), 100, &mut r), Verdict::Dropped(_)))
            .collect();
        let losses = outcomes.iter().filter(|&&d| d).count();
        let bursts = outcomes.windows(2).filter(|w| w[1] && !w[0]).count();
        // Mean burst length 1/r ≈ 3.3 packets: far above Bernoulli's ~1.
        assert!(losses as f64 / bursts as f64 > 2.5, "{losses} losses in {bursts} bursts");
    }
}
