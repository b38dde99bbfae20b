//! The endpoint's timer queue: one deadline per connection slot in a binary
//! heap with lazy invalidation, so that `poll_timeout` is O(1) and
//! `handle_timeout` touches only the connections that are due, not every
//! connection (an endpoint may hold tens of thousands of connections, and a
//! scan of every one on each call would dominate the driver's time).
//!
//! A slot's current deadline lives in `at`; a heap entry is valid only while
//! it matches it. Changing a deadline pushes a new entry and leaves the old
//! one to be discarded when it surfaces; the heap is rebuilt when stale
//! entries outnumber the valid ones, so its size stays within a constant
//! factor of the connection count.

use mptun_time::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Default)]
pub(super) struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
    at: Vec<Option<Instant>>,
    armed: usize,
}

impl TimerQueue {
    /// Sets slot `slot`'s deadline (`None`: no timer).
    pub fn set(&mut self, slot: usize, t: Option<Instant>) {
        if self.at.len() <= slot {
            self.at.resize(slot + 1, None);
        }
        if self.at[slot] == t {
            return;
        }
        self.armed = self.armed + t.is_some() as usize - self.at[slot].is_some() as usize;
        self.at[slot] = t;
        if let Some(t) = t {
            self.heap.push(Reverse((t, slot)));
        }
        if self.heap.len() > 64 + 4 * self.armed {
            self.heap = self.at.iter().enumerate().filter_map(|(i, t)| t.map(|t| Reverse((t, i)))).collect();
        }
        self.clean();
    }

    /// Drops stale entries from the top, so that [`TimerQueue::next`] sees a valid one.
    fn clean(&mut self) {
        while let Some(&Reverse((t, i))) = self.heap.peek() {
            if self.at[i] == Some(t) {
                return;
            }
            self.heap.pop();
        }
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|r| r.0 .0)
    }

    /// Slots whose deadline is at or before `now`, in slot order (the order
    /// a scan of every connection would take them in), their deadlines cleared.
    pub fn due(&mut self, now: Instant) -> Vec<usize> {
        let mut v = Vec::new();
        while let Some(&Reverse((t, i))) = self.heap.peek() {
            if t > now {
                break;
            }
            self.heap.pop();
            if self.at[i] == Some(t) {
                self.at[i] = None;
                self.armed -= 1;
                v.push(i);
            }
        }
        self.clean();
        v.sort_unstable();
        v
    }

    /// Heap entries, stale ones included.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mptun_time::Duration;

    fn t(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn due_slots_come_in_slot_order_and_moved_deadlines_do_not_fire() {
        let mut q = TimerQueue::default();
        q.set(3, Some(t(10)));
        q.set(1, Some(t(20)));
        q.set(2, Some(t(5)));
        q.set(2, Some(t(30))); // moved later: the 5 ms entry is stale
        assert_eq!(q.next(), Some(t(10)));
        assert_eq!(q.due(t(25)), vec![1, 3]);
        assert_eq!(q.next(), Some(t(30)));
        q.set(2, None);
        assert_eq!(q.next(), None);
        assert!(q.due(t(100)).is_empty());
    }

    #[test]
    fn churn_keeps_the_heap_bounded() {
        let mut q = TimerQueue::default();
        for k in 0..100_000u64 {
            q.set((k % 10) as usize, Some(t(1_000_000 - k)));
            q.set((k % 10) as usize, Some(t(2_000_000 + k)));
        }
        assert!(q.entries() <= 64 + 4 * 10, "{}", q.entries());
        assert_eq!(q.due(t(3_000_000)).len(), 10);
    }
}
