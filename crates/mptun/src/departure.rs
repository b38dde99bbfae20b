//! Packets waiting for their earliest departure time (EDT).
//!
//! The core stamps every packet with the instant it may leave (Linux's
//! `skb->tstamp` under EDT pacing). The driver writes a packet whose time has
//! come straight into its device's batch; anything stamped later, or that
//! could not be written because the device pushed back, waits here. The
//! queue is ordered by departure time, packets with equal times keep their
//! order (a flow's segments must not be reordered by the driver), and
//! nothing leaves before its time.

use mptun_io::paths::DeviceId;
use mptun_time::Instant;
use std::collections::VecDeque;

/// One held packet.
struct Held {
    departure: Instant,
    device: DeviceId,
    packet: Vec<u8>,
    /// TSO segment size of a super-segment.
    gso: Option<usize>,
}

/// Time-ordered packet queue with recycled buffers.
#[derive(Default)]
pub(crate) struct DepartureQueue {
    /// Sorted by `departure`, FIFO among equals. Departures are nearly
    /// monotonic, so inserts land at (or near) the back.
    q: VecDeque<Held>,
    free: Vec<Vec<u8>>,
    bytes: usize,
}

impl DepartureQueue {
    /// Holds a copy of `packet` for `device` until `departure`.
    pub(crate) fn push(&mut self, departure: Instant, device: DeviceId, packet: &[u8], gso: Option<usize>) {
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(packet);
        self.bytes += buf.len();
        // First position whose departure is later: after every equal one.
        let at = self.q.partition_point(|h| h.departure <= departure);
        self.q.insert(at, Held { departure, device, packet: buf, gso });
    }

    /// Puts back a packet just taken with [`DepartureQueue::pop_due`] that
    /// could not be written yet: it leaves first, before anything else due.
    pub(crate) fn push_front(&mut self, departure: Instant, device: DeviceId, packet: Vec<u8>, gso: Option<usize>) {
        self.bytes += packet.len();
        self.q.push_front(Held { departure, device, packet, gso });
    }

    /// The earliest departure held, if any.
    pub(crate) fn next_departure(&self) -> Option<Instant> {
        self.q.front().map(|h| h.departure)
    }

    /// The device of the next packet if it is due at `now`.
    pub(crate) fn peek_due(&self, now: Instant) -> Option<DeviceId> {
        self.q.front().filter(|h| h.departure <= now).map(|h| h.device)
    }

    /// Removes the next packet if it is due at `now`; hand the buffer back
    /// with [`DepartureQueue::recycle`].
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(DeviceId, Vec<u8>, Option<usize>)> {
        if self.q.front()?.departure > now {
            return None;
        }
        let h = self.q.pop_front()?;
        self.bytes -= h.packet.len();
        Some((h.device, h.packet, h.gso))
    }

    /// Returns a buffer for reuse.
    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        if self.free.len() < 256 {
            self.free.push(buf);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(us: u64) -> Instant {
        Instant::from_micros(us)
    }

    #[test]
    fn ordered_by_time_fifo_among_equals_never_early() {
        let mut q = DepartureQueue::default();
        q.push(t(30), 0, b"c", None);
        q.push(t(10), 1, b"a1", None);
        q.push(t(20), 0, b"b", None);
        q.push(t(10), 0, b"a2", None);
        assert_eq!(q.len(), 4);
        assert_eq!(q.bytes(), 6);
        assert_eq!(q.next_departure(), Some(t(10)));
        assert_eq!(q.pop_due(t(9)), None, "nothing leaves early");
        assert_eq!(q.peek_due(t(9)), None);
        assert_eq!(q.peek_due(t(10)), Some(1));
        assert_eq!(q.pop_due(t(10)), Some((1, b"a1".to_vec(), None)));
        assert_eq!(q.pop_due(t(10)), Some((0, b"a2".to_vec(), None)), "equal times keep insertion order");
        assert_eq!(q.pop_due(t(19)), None);
        let (d, buf, _) = q.pop_due(t(25)).unwrap();
        assert_eq!((d, &buf[..]), (0, &b"b"[..]));
        q.recycle(buf);
        assert_eq!(q.pop_due(t(29)), None);
        assert_eq!(q.pop_due(Instant::FAR_FUTURE), Some((0, b"c".to_vec(), None)));
        assert_eq!(q.len(), 0);
        assert_eq!(q.bytes(), 0);
        assert_eq!(q.next_departure(), None);
    }

    #[test]
    fn buffers_are_recycled() {
        let mut q = DepartureQueue::default();
        q.push(t(1), 0, &[7; 1500], None);
        let (_, buf, _) = q.pop_due(t(1)).unwrap();
        let ptr = buf.as_ptr();
        q.recycle(buf);
        q.push(t(2), 0, &[8; 100], None);
        let (_, buf, _) = q.pop_due(t(2)).unwrap();
        assert_eq!(buf.as_ptr(), ptr);
        assert_eq!(buf, vec![8; 100]);
    }
}
