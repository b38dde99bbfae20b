//! Packets waiting for their earliest departure time (EDT): the driver's
//! `fq`.
//!
//! The core stamps every packet with the instant it may leave (Linux's
//! `skb->tstamp` under EDT pacing) and, with a pacing horizon, builds paced
//! segments ahead of time. As Linux's `sch_fq` does, the queue keeps one
//! FIFO per flow (a flow's segments are never reordered, and a packet due
//! now waits behind its flow's earlier ones), orders the flows by the
//! departure time of their heads, and releases everything due within a
//! slack (`timer_slack`, 10 µs) at once, so the driver sets one timer per
//! batch rather than one per packet. Packets stamped beyond the horizon
//! (fq's `horizon`, 10 s: a clock gone wrong) are dropped, as are packets
//! past the queue's limits (fq's `limit` and `flow_limit`); both counted.

use mptun_io::paths::DeviceId;
use mptun_io::HEADROOM;
use mptun_proto::tcp::Tail;
use mptun_time::{Duration, Instant};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::SocketAddr;

/// fq's `timer_slack`: packets due this soon leave with the current batch.
pub(crate) const TIMER_SLACK: Duration = Duration::from_micros(10);
/// fq's `horizon`: a departure further out than this is refused.
pub(crate) const HORIZON: Duration = Duration::from_secs(10);
/// fq's `limit`: packets held in all.
const LIMIT: usize = 10_000;
/// fq's `flow_limit`: packets held per flow (super-segments count one).
const FLOW_LIMIT: usize = 1_000;

/// Buffers shorter than this are small: a packet that fits one is held in a
/// copy, not in the 64 KiB buffer it was built in.
pub(crate) const SMALL: usize = HEADROOM + 16 * 1024;

/// A flow: (source, destination), as the core addressed the packet.
pub(crate) type FlowKey = (SocketAddr, SocketAddr);

/// One held packet.
struct Held {
    departure: Instant,
    device: DeviceId,
    /// The packet after [`HEADROOM`] bytes, as the driver built it (it goes
    /// into a device batch by a buffer swap, not a copy).
    buf: Vec<u8>,
    len: usize,
    /// Its payload, still in the send buffer, when the device it goes to
    /// gathers (`DeviceCaps::gather`): `buf` then holds only the headers, and
    /// a held super-segment costs neither a copy nor 64 KiB here.
    tail: Tail,
    /// TSO segment size of a super-segment.
    gso: Option<usize>,
    /// Its TCP checksum is left for the device (settled when it was held).
    partial: bool,
}

/// Why a packet was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Stamped further out than the horizon (fq `horizon_drop`).
    Horizon,
    /// The queue or the flow is at its limit (fq `flows_plimit`).
    Limit,
}

/// Per-flow FIFOs in departure order, with recycled buffers.
#[derive(Default)]
pub(crate) struct DepartureQueue {
    flows: HashMap<FlowKey, VecDeque<Held>>,
    /// (head departure, insertion order, flow) of every non-empty flow.
    heads: BinaryHeap<Reverse<(Instant, u64, FlowKey)>>,
    order: u64,
    /// Spare buffers for super-segments (at least [`SMALL`] bytes).
    free: Vec<Vec<u8>>,
    /// Spare buffers for small packets, so that holding an ACK or a short
    /// request allocates neither per packet nor 64 KiB.
    free_small: Vec<Vec<u8>>,
    len: usize,
    bytes: usize,
}

impl DepartureQueue {
    /// Holds the packet `buf[HEADROOM..HEADROOM + len]` (followed by
    /// `tail`) of `flow` for `device` until `departure` (after the flow's
    /// earlier packets). A refused packet's buffer comes back with the
    /// reason.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push(
        &mut self,
        now: Instant,
        flow: FlowKey,
        departure: Instant,
        device: DeviceId,
        buf: Vec<u8>,
        len: usize,
        tail: Tail,
        (gso, partial): (Option<usize>, bool),
    ) -> Result<(), (Refused, Vec<u8>)> {
        debug_assert!(HEADROOM + len <= buf.len());
        if departure > now + HORIZON {
            return Err((Refused::Horizon, buf));
        }
        let q = self.flows.entry(flow).or_default();
        if self.len >= LIMIT || q.len() >= FLOW_LIMIT {
            return Err((Refused::Limit, buf));
        }
        self.bytes += len + tail.len();
        self.len += 1;
        // A flow's packets leave in order: one stamped earlier than its
        // predecessor (a retransmission) waits for it.
        let departure = q.back().map_or(departure, |b| b.departure.max(departure));
        let was_empty = q.is_empty();
        q.push_back(Held { departure, device, buf, len, tail, gso, partial });
        if was_empty {
            self.order += 1;
            self.heads.push(Reverse((departure, self.order, flow)));
        }
        Ok(())
    }

    /// The earliest departure held, if any.
    pub(crate) fn next_departure(&self) -> Option<Instant> {
        self.heads.peek().map(|r| r.0 .0)
    }

    /// Whether `flow` has packets waiting.
    pub(crate) fn holds(&self, flow: &FlowKey) -> bool {
        self.flows.get(flow).is_some_and(|q| !q.is_empty())
    }

    /// The next packet due by `now` plus the slack, earliest flow head
    /// first: (device, packet, TSO segment size, checksum left for the
    /// device), left in place. A packet with a tail shows its headers only.
    pub(crate) fn peek_due(&self, now: Instant) -> Option<(DeviceId, &[u8], Option<usize>, bool)> {
        let Reverse((t, _, flow)) = self.heads.peek()?;
        if *t > now + TIMER_SLACK {
            return None;
        }
        let h = self.flows.get(flow)?.front()?;
        Some((h.device, &h.buf[HEADROOM..HEADROOM + h.len], h.gso, h.partial))
    }

    /// Removes the packet [`DepartureQueue::peek_due`] shows and returns its
    /// buffer and length (the packet after [`HEADROOM`] bytes) and its
    /// tail; hand spare buffers back with [`DepartureQueue::recycle`].
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Vec<u8>, usize, Tail)> {
        let Reverse((t, _, flow)) = *self.heads.peek()?;
        if t > now + TIMER_SLACK {
            return None;
        }
        self.heads.pop();
        // Every non-empty flow has exactly one entry, for its head.
        let q = self.flows.get_mut(&flow).expect("a flow with an entry has packets");
        let h = q.pop_front().expect("a flow with an entry has packets");
        if let Some(next) = q.front() {
            self.order += 1;
            self.heads.push(Reverse((next.departure, self.order, flow)));
        } else {
            self.flows.remove(&flow);
        }
        self.len -= 1;
        self.bytes -= h.len + h.tail.len();
        Some((h.buf, h.len, h.tail))
    }

    /// Returns a buffer for reuse.
    pub(crate) fn recycle(&mut self, buf: Vec<u8>) {
        let list = if buf.len() < SMALL { &mut self.free_small } else { &mut self.free };
        if list.len() < 256 {
            list.push(buf);
        }
    }

    /// A buffer of at least `size` bytes: a recycled one of the same class
    /// (small or large) when there is one (most are; a held packet's buffer
    /// returns as a device slot's spare), else a new one.
    pub(crate) fn take_buffer(&mut self, size: usize) -> Vec<u8> {
        let list = if size < SMALL { &mut self.free_small } else { &mut self.free };
        let mut b = list.pop().unwrap_or_default();
        if b.len() < size {
            b.resize(size, 0);
        }
        b
    }

    pub(crate) fn len(&self) -> usize {
        self.len
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

    fn flow(n: u16) -> FlowKey {
        (SocketAddr::from(([10, 0, 0, 1], n)), SocketAddr::from(([10, 0, 0, 2], 80)))
    }

    /// The next due packet's device (the flow's port in these tests) and bytes.
    fn pop(q: &mut DepartureQueue, now: Instant) -> Option<(usize, Vec<u8>)> {
        let dev = q.peek_due(now)?.0;
        let (p, len, _) = q.pop_due(now)?;
        let out = p[HEADROOM..HEADROOM + len].to_vec();
        q.recycle(p);
        Some((dev, out))
    }

    /// `packet` in a buffer as the driver builds it.
    fn held(packet: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; HEADROOM];
        b.extend_from_slice(packet);
        b
    }

    /// Holds `packet` (in a buffer of its own), as the driver does.
    fn push(
        q: &mut DepartureQueue,
        now: Instant,
        f: FlowKey,
        at: Instant,
        dev: DeviceId,
        packet: &[u8],
        gso: Option<usize>,
    ) -> Result<(), Refused> {
        q.push(now, f, at, dev, held(packet), packet.len(), Tail::default(), (gso, false)).map_err(|(r, _)| r)
    }

    #[test]
    fn flows_in_time_order_fifo_within_a_flow_never_early() {
        let mut q = DepartureQueue::default();
        let now = t(0);
        push(&mut q, now, flow(1), t(30), 1, b"c", None).unwrap();
        push(&mut q, now, flow(2), t(100), 2, b"x1", None).unwrap();
        push(&mut q, now, flow(1), t(50), 1, b"d", None).unwrap();
        // Stamped earlier than its predecessor: waits behind it.
        push(&mut q, now, flow(1), t(10), 1, b"e", None).unwrap();
        push(&mut q, now, flow(2), t(120), 2, b"x2", None).unwrap();
        assert_eq!((q.len(), q.bytes()), (5, 7));
        assert_eq!(q.next_departure(), Some(t(30)));
        assert!(q.holds(&flow(1)) && !q.holds(&flow(3)));
        assert!(pop(&mut q, t(19)).is_none(), "nothing leaves before its time less the slack");
        assert_eq!(pop(&mut q, t(20)), Some((1, b"c".to_vec())), "within the 10 us slack");
        assert!(pop(&mut q, t(20)).is_none());
        // One wake-up at 50 us releases both 50 us packets of flow 1 in order.
        assert_eq!(pop(&mut q, t(50)), Some((1, b"d".to_vec())));
        assert_eq!(pop(&mut q, t(50)), Some((1, b"e".to_vec())));
        assert!(!q.holds(&flow(1)));
        assert_eq!(pop(&mut q, t(115)), Some((2, b"x1".to_vec())));
        assert_eq!(pop(&mut q, t(115)), Some((2, b"x2".to_vec())), "120 is within the slack of 115");
        assert_eq!((q.len(), q.bytes(), q.next_departure()), (0, 0, None));
    }

    #[test]
    fn peek_shows_what_pop_takes() {
        let mut q = DepartureQueue::default();
        push(&mut q, t(0), flow(1), t(50), 3, b"a", Some(1448)).unwrap();
        push(&mut q, t(0), flow(1), t(60), 3, b"b", None).unwrap();
        assert_eq!(q.peek_due(t(0)), None);
        assert_eq!(q.peek_due(t(50)), Some((3, &b"a"[..], Some(1448), false)));
        let (p, len, _) = q.pop_due(t(50)).unwrap();
        assert_eq!(&p[HEADROOM..HEADROOM + len], b"a");
        assert_eq!(q.peek_due(t(50)), Some((3, &b"b"[..], None, false)), "60 is within the slack of 50");
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_tail_waits_with_its_headers_and_counts() {
        let mut q = DepartureQueue::default();
        let tail = Tail::gather([bytes::Bytes::from_static(b"payload"), bytes::Bytes::from_static(b"!")]).unwrap();
        q.push(t(0), flow(1), t(50), 3, held(b"hdr"), 3, tail.clone(), (Some(1448), true)).unwrap();
        assert_eq!(q.bytes(), 3 + 8, "the tail's bytes are held too");
        assert_eq!(q.peek_due(t(50)), Some((3, &b"hdr"[..], Some(1448), true)));
        let (p, len, got) = q.pop_due(t(50)).unwrap();
        assert_eq!((&p[HEADROOM..HEADROOM + len], got), (&b"hdr"[..], tail));
        assert_eq!((q.len(), q.bytes()), (0, 0));
    }

    #[test]
    fn horizon_and_limits_refuse() {
        let mut q = DepartureQueue::default();
        assert_eq!(
            push(&mut q, t(0), flow(1), t(0) + HORIZON + Duration::from_micros(1), 0, b"x", None),
            Err(Refused::Horizon)
        );
        for _ in 0..FLOW_LIMIT {
            push(&mut q, t(0), flow(1), t(1), 0, b"x", None).unwrap();
        }
        assert_eq!(push(&mut q, t(0), flow(1), t(1), 0, b"x", None), Err(Refused::Limit));
        push(&mut q, t(0), flow(2), t(1), 0, b"y", None).unwrap();
        assert_eq!(q.len(), FLOW_LIMIT + 1);
    }

    #[test]
    fn buffers_are_recycled() {
        let mut q = DepartureQueue::default();
        push(&mut q, t(0), flow(1), t(1), 0, &[7; 1500], None).unwrap();
        let (p, _, _) = q.pop_due(t(1)).unwrap();
        let ptr = p.as_ptr();
        q.recycle(p);
        let b = q.take_buffer(64);
        assert_eq!(b.as_ptr(), ptr, "a recycled buffer");
        assert!(b.len() >= HEADROOM + 1500);
        assert!(q.take_buffer(64).len() >= 64, "a new one when none is left");
        // Large and small buffers are kept apart: a small packet never takes
        // a 64 KiB buffer, a super-segment never a small one.
        q.recycle(vec![0; SMALL + 1]);
        q.recycle(vec![0; 200]);
        assert_eq!(q.take_buffer(100).len(), 200);
        assert_eq!(q.take_buffer(SMALL).len(), SMALL + 1);
    }
}
