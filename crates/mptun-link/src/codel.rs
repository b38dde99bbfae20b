//! CoDel, the queue discipline of Linux `sch_codel` (RFC 8289; Nichols and
//! Jacobson, "Controlling Queue Delay", ACM Queue 2012), for the link model.
//!
//! CoDel decides at dequeue, from the time a packet spent in the queue (its
//! sojourn). The link model decides everything at enqueue, but its queue is
//! FIFO and its serializer deterministic: when a packet is offered, the
//! instant it leaves the queue (the serializer frees up) and so its sojourn
//! are already known, and every packet ahead of it has had its own dequeue
//! decided. So [`Codel::on_dequeue`] runs the kernel's state machine
//! (`codel_dequeue` in `include/net/codel_impl.h`) packet by packet at those
//! dequeue instants, in their order, which is the order the kernel sees.
//! A packet CoDel drops takes no serialization time, so the next one leaves
//! at the same instant and meets the control law there, as in the kernel's
//! drop loop.
//!
//! Two departures from the kernel, both stated where they matter: the
//! control law divides by `sqrt(count)` in floating point instead of the
//! kernel's Newton step on a 16-bit reciprocal (a difference under 0.01 %),
//! and the "queue almost empty" test (`backlog <= mtu`, on what stays behind
//! the packet) uses the bytes the packet found ahead of it, the only backlog
//! known at enqueue. With a sojourn over the 5 ms target the two differ only
//! on links slower than about 2.4 Mbit/s.

use mptun_time::{Duration, Instant};

/// CoDel's parameters (`tc qdisc add ... codel target 5ms interval 100ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodelParams {
    /// Acceptable standing queue delay (Linux default 5 ms).
    pub target: Duration,
    /// Window over which the delay must stay above `target` before CoDel
    /// drops, about a worst-case RTT (Linux default 100 ms).
    pub interval: Duration,
}

impl Default for CodelParams {
    fn default() -> Self {
        CodelParams { target: Duration::from_millis(5), interval: Duration::from_millis(100) }
    }
}

/// CoDel's per-queue state (`struct codel_vars`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Codel {
    params: CodelParams,
    /// Drops since entering the dropping state; sets the control law's rate.
    count: u32,
    /// `count` when the dropping state was last entered.
    lastcount: u32,
    dropping: bool,
    /// When the sojourn first went above target, plus `interval`.
    first_above_time: Option<Instant>,
    /// When the next drop is due in the dropping state.
    drop_next: Instant,
    /// The largest packet seen (`maxpacket`).
    maxpacket: usize,
}

impl Codel {
    pub fn new(params: CodelParams) -> Self {
        Codel { params, ..Codel::default() }
    }

    /// `codel_control_law`: the next drop, `interval / sqrt(count)` after `t`.
    fn control_law(&self, t: Instant) -> Instant {
        let ns = self.params.interval.as_nanos() as f64 / f64::from(self.count.max(1)).sqrt();
        t + Duration::from_nanos(ns as u64)
    }

    /// `codel_should_drop`: the sojourn has stayed above target for a whole
    /// interval (and the queue is not nearly empty).
    fn should_drop(&mut self, now: Instant, sojourn: Duration, backlog: usize, len: usize) -> bool {
        self.maxpacket = self.maxpacket.max(len);
        if sojourn < self.params.target || backlog <= self.maxpacket {
            self.first_above_time = None;
            return false;
        }
        match self.first_above_time {
            None => {
                self.first_above_time = Some(now + self.params.interval);
                false
            }
            Some(t) => now >= t,
        }
    }

    /// The packet of `len` bytes leaves the queue at `now` after `sojourn`
    /// there, with `backlog` bytes queued ahead of it when it arrived:
    /// `true` when CoDel drops it.
    pub fn on_dequeue(&mut self, now: Instant, sojourn: Duration, backlog: usize, len: usize) -> bool {
        let drop = self.should_drop(now, sojourn, backlog, len);
        if self.dropping {
            if !drop {
                self.dropping = false;
                return false;
            }
            if now >= self.drop_next {
                self.count += 1;
                self.drop_next = self.control_law(self.drop_next);
                return true;
            }
            return false;
        }
        if !drop {
            return false;
        }
        self.dropping = true;
        // Re-entering soon after leaving: resume near the old drop rate.
        let delta = self.count.saturating_sub(self.lastcount);
        let recent = now.saturating_duration_since(self.drop_next) < self.params.interval * 16;
        self.count = if delta > 1 && recent { delta } else { 1 };
        self.lastcount = self.count;
        self.drop_next = self.control_law(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A standing queue of 10 ms: the first drop comes one interval after
    /// the delay went above target, then at `interval / sqrt(count)`.
    #[test]
    fn a_standing_queue_is_dropped_at_the_control_laws_rate() {
        let mut c = Codel::new(CodelParams::default());
        let mut drops = Vec::new();
        for i in 0..400u64 {
            let now = Instant::from_millis(i);
            if c.on_dequeue(now, 10 * MS, 100_000, 1500) {
                drops.push(i);
            }
        }
        // Above target from t=0, so the first drop at 100 ms; the second
        // 100/sqrt(1) ms later, the third 100/sqrt(2) = 70.7 ms after that,
        // the fourth 100/sqrt(3) = 57.7 ms after that (on a 1 ms grid).
        assert_eq!(&drops[..4], &[100, 200, 271, 329]);
    }

    /// Below target, or a nearly empty queue, never drops and ends the
    /// dropping state.
    #[test]
    fn a_short_delay_or_an_empty_queue_never_drops() {
        let mut c = Codel::new(CodelParams::default());
        for i in 0..1000u64 {
            assert!(!c.on_dequeue(Instant::from_millis(i), 4 * MS, 100_000, 1500));
            assert!(!c.on_dequeue(Instant::from_millis(i), 50 * MS, 1500, 1500));
        }
        for i in 0..150u64 {
            c.on_dequeue(Instant::from_millis(1000 + i), 10 * MS, 100_000, 1500);
        }
        assert!(c.dropping);
        assert!(!c.on_dequeue(Instant::from_millis(1200), 1 * MS, 100_000, 1500));
        assert!(!c.dropping);
    }

    /// Re-entering the dropping state shortly after leaving it resumes at
    /// the drop rate reached (count = drops of the last episode), not at 1.
    #[test]
    fn re_entry_resumes_the_drop_rate() {
        let mut c = Codel::new(CodelParams::default());
        let mut t = 0;
        while c.count < 6 {
            c.on_dequeue(Instant::from_millis(t), 10 * MS, 100_000, 1500);
            t += 1;
        }
        c.on_dequeue(Instant::from_millis(t), MS, 100_000, 1500);
        assert!(!c.dropping);
        // Above target again: one interval, then a drop with count 6 - 1.
        let mut first = None;
        for i in 0..200 {
            let now = Instant::from_millis(t + 1 + i);
            if c.on_dequeue(now, 10 * MS, 100_000, 1500) {
                first = Some(now);
                break;
            }
        }
        assert!(first.is_some());
        assert_eq!(c.count, 5, "delta = count - lastcount = 6 - 1");
    }
}
