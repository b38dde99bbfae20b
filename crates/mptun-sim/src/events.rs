//! The packets on their way, in the order they arrive.
//!
//! A link releases its packets in the order they entered it, as long as
//! nothing reorders or jitters them: a first-in first-out line per link then
//! holds them already sorted, and taking the next is a look at each line's
//! front instead of a heap's sift-down over every packet in flight (about
//! 2,000 of them in a 1 Gbit/s run). A packet that would break its line's
//! order (reordering, jitter, a duplicate released early) goes to a heap
//! instead. Either way packets come out strictly by (arrival time, send
//! order), the order a single heap would give, so the runs do not depend on
//! which of the two holds a packet.

use mptun_time::Instant;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// One entry: its arrival time, its send order (unique, increasing), and
/// what travels.
struct Entry<T> {
    at: Instant,
    order: u64,
    item: T,
}

impl<T> Entry<T> {
    fn key(&self) -> (Instant, u64) {
        (self.at, self.order)
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key().cmp(&o.key())
    }
}

/// Items ordered by (arrival time, send order), pushed per line (a link).
pub(crate) struct EventQueue<T> {
    lines: Vec<VecDeque<Entry<T>>>,
    /// What would have broken a line's order.
    heap: BinaryHeap<Reverse<Entry<T>>>,
    order: u64,
}

impl<T> EventQueue<T> {
    /// A queue with `lines` lines.
    pub fn new(lines: usize) -> Self {
        EventQueue { lines: (0..lines).map(|_| VecDeque::new()).collect(), heap: BinaryHeap::new(), order: 0 }
    }

    /// Adds `item`, arriving at `at`, sent on line `line`; later pushes come
    /// out after earlier ones due at the same instant.
    pub fn push(&mut self, line: usize, at: Instant, item: T) {
        self.order += 1;
        let e = Entry { at, order: self.order, item };
        let q = &mut self.lines[line];
        if q.back().is_none_or(|b| b.at <= at) {
            q.push_back(e);
        } else {
            self.heap.push(Reverse(e));
        }
    }

    /// The line whose front is the earliest entry, or `None` for the heap;
    /// with that entry's key.
    fn first(&self) -> Option<(Option<usize>, (Instant, u64))> {
        let mut best = self.heap.peek().map(|Reverse(e)| (None, e.key()));
        for (i, q) in self.lines.iter().enumerate() {
            if let Some(f) = q.front() {
                if best.is_none_or(|(_, k)| f.key() < k) {
                    best = Some((Some(i), f.key()));
                }
            }
        }
        best
    }

    /// When the next item arrives.
    pub fn next_at(&self) -> Option<Instant> {
        self.first().map(|(_, (at, _))| at)
    }

    /// The next item if it arrives by `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<T> {
        let (from, (at, _)) = self.first()?;
        if at > now {
            return None;
        }
        let e = match from {
            Some(i) => self.lines[i].pop_front().expect("first saw it"),
            None => self.heap.pop().expect("first saw it").0,
        };
        Some(e.item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Against a plain heap of (time, order): the same items in the same
    /// order, whatever mix of in-order and out-of-order pushes.
    #[test]
    fn comes_out_as_one_heap_would() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut q = EventQueue::new(3);
        let mut model = BinaryHeap::new();
        let (mut now, mut order, mut got, mut want) = (0u64, 0u64, Vec::new(), Vec::new());
        let mut last = [0u64; 3];
        for step in 0..20_000 {
            if rng.random_bool(0.55) {
                let line = rng.random_range(0..3);
                // Mostly increasing per line, sometimes earlier (reordered),
                // often equal (a burst at one instant).
                let at = match rng.random_range(0..10) {
                    0 => now + rng.random_range(0..50),
                    1..=3 => last[line].max(now),
                    _ => last[line].max(now) + rng.random_range(0..100),
                };
                last[line] = last[line].max(at);
                order += 1;
                q.push(line, Instant::from_nanos(at), step);
                model.push(Reverse((at, order, step)));
            } else {
                now += rng.random_range(0..60);
                while let Some(x) = q.pop_due(Instant::from_nanos(now)) {
                    got.push(x);
                }
                while model.peek().is_some_and(|Reverse((at, _, _))| *at <= now) {
                    want.push(model.pop().expect("peeked").0 .2);
                }
                assert_eq!(q.next_at().map(|t| t.as_nanos()), model.peek().map(|Reverse((at, _, _))| *at));
            }
        }
        assert!(got.len() > 5_000);
        assert_eq!(got, want);
    }
}
