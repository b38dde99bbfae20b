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
use mptun_io::{TxPacket, HEADROOM};
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

/// A packet to hold until its departure time.
pub(crate) struct Departure {
    /// The flow it belongs to: it leaves after the flow's earlier packets.
    pub(crate) flow: FlowKey,
    /// Its earliest departure time.
    pub(crate) at: Instant,
    /// The device it goes to.
    pub(crate) device: DeviceId,
    /// The packet, already in the form that device takes
    /// (`TxPacket::fit_to`): its payload still in the send buffer when the
    /// device gathers (`DeviceCaps::gather`), so that a held super-segment
    /// then costs neither a copy nor 64 KiB here, and its checksum settled.
    pub(crate) packet: TxPacket,
}

/// One held packet.
struct Held {
    departure: Instant,
    device: DeviceId,
    packet: TxPacket,
    /// Its bytes as counted in [`DepartureQueue::bytes`] when it was queued
    /// (a push into a device batch empties the packet before it is popped).
    bytes: usize,
}

/// The packet due next, left at the head of its flow until it is popped.
pub(crate) struct Due<'a> {
    /// The device it goes to.
    pub(crate) device: DeviceId,
    /// The packet, to push into the device's batch in place: one that did
    /// not fit stays first in line, unchanged.
    pub(crate) packet: &'a mut TxPacket,
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
    /// Holds `d.packet` until `d.at`, after its flow's earlier packets.
    /// A refused packet is dropped (its buffer kept for reuse).
    pub(crate) fn push(&mut self, now: Instant, d: Departure) -> Result<(), Refused> {
        let Departure { flow, at, device, packet } = d;
        if at > now + HORIZON {
            self.recycle(packet.into_buffer());
            return Err(Refused::Horizon);
        }
        // The queue's limit before the flow's entry: a refused packet of a
        // new flow must not leave an empty one behind.
        if self.len >= LIMIT {
            self.recycle(packet.into_buffer());
            return Err(Refused::Limit);
        }
        let q = self.flows.entry(flow).or_default();
        if q.len() >= FLOW_LIMIT {
            self.recycle(packet.into_buffer());
            return Err(Refused::Limit);
        }
        let bytes = packet.packet_len();
        self.bytes += bytes;
        self.len += 1;
        // A flow's packets leave in order: one stamped earlier than its
        // predecessor (a retransmission) waits for it.
        let departure = q.back().map_or(at, |b| b.departure.max(at));
        let was_empty = q.is_empty();
        q.push_back(Held { departure, device, packet, bytes });
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
    /// first, left in place.
    pub(crate) fn peek_due(&mut self, now: Instant) -> Option<Due<'_>> {
        let Reverse((t, _, flow)) = self.heads.peek()?;
        if *t > now + TIMER_SLACK {
            return None;
        }
        let h = self.flows.get_mut(flow)?.front_mut()?;
        Some(Due { device: h.device, packet: &mut h.packet })
    }

    /// Removes the packet [`DepartureQueue::peek_due`] shows and returns it
    /// (what a push left of it: hand its buffer back with
    /// [`DepartureQueue::recycle`]).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<TxPacket> {
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
        self.bytes -= h.bytes;
        Some(h.packet)
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
    use mptun_io::TxChecksum;

    fn t(us: u64) -> Instant {
        Instant::from_micros(us)
    }

    fn flow(n: u16) -> FlowKey {
        (SocketAddr::from(([10, 0, 0, 1], n)), SocketAddr::from(([10, 0, 0, 2], 80)))
    }

    /// The next due packet's device (the flow's port in these tests) and bytes.
    fn pop(q: &mut DepartureQueue, now: Instant) -> Option<(usize, Vec<u8>)> {
        let dev = q.peek_due(now)?.device;
        let p = q.pop_due(now)?;
        let out = p.head().to_vec();
        q.recycle(p.into_buffer());
        Some((dev, out))
    }

    /// Holds `packet` (in a buffer of its own), as the driver does.
    fn push(
        q: &mut DepartureQueue,
        now: Instant,
        flow: FlowKey,
        at: Instant,
        device: DeviceId,
        packet: &[u8],
        gso: Option<usize>,
    ) -> Result<(), Refused> {
        let packet = TxPacket::copy_of(packet).with_segment_size(gso);
        q.push(now, Departure { flow, at, device, packet })
    }

    /// What `peek_due` shows: device, headers, segment size, checksum.
    fn peek(q: &mut DepartureQueue, now: Instant) -> Option<(DeviceId, Vec<u8>, Option<usize>, TxChecksum)> {
        let d = q.peek_due(now)?;
        Some((d.device, d.packet.head().to_vec(), d.packet.segment_size(), d.packet.checksum()))
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
        assert!(q.peek_due(t(0)).is_none());
        assert_eq!(peek(&mut q, t(50)), Some((3, b"a".to_vec(), Some(1448), TxChecksum::Complete)));
        let p = q.pop_due(t(50)).unwrap();
        assert_eq!(p.head(), b"a");
        assert_eq!(
            peek(&mut q, t(50)),
            Some((3, b"b".to_vec(), None, TxChecksum::Complete)),
            "60 is within 50's slack"
        );
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_tail_waits_with_its_headers_and_counts() {
        let mut q = DepartureQueue::default();
        let tail = [bytes::Bytes::from_static(b"payload"), bytes::Bytes::from_static(b"!")];
        let packet = TxPacket::copy_of(b"hdr")
            .with_tail(&tail)
            .unwrap()
            .with_segment_size(Some(1448))
            .with_checksum(TxChecksum::Partial);
        q.push(t(0), Departure { flow: flow(1), at: t(50), device: 3, packet }).unwrap();
        assert_eq!(q.bytes(), 3 + 8, "the tail's bytes are held too");
        assert_eq!(peek(&mut q, t(50)), Some((3, b"hdr".to_vec(), Some(1448), TxChecksum::Partial)));
        let p = q.pop_due(t(50)).unwrap();
        assert_eq!((p.head(), p.tail()), (&b"hdr"[..], &tail[..]));
        assert_eq!((q.len(), q.bytes()), (0, 0));
    }

    /// A due packet goes into a device batch where it lies: one that does
    /// not fit stays first in line as it was, one that went in is popped
    /// empty, and the queue counts its bytes until then.
    #[test]
    fn a_due_packet_is_pushed_in_place() {
        let mut q = DepartureQueue::default();
        push(&mut q, t(0), flow(1), t(1), 0, &[7; 100], None).unwrap();
        push(&mut q, t(0), flow(1), t(1), 0, &[8; 50], None).unwrap();
        let mut batch = mptun_io::TxBatch::new(1, 1500);
        batch.push(q.peek_due(t(1)).unwrap().packet).unwrap();
        assert_eq!((q.len(), q.bytes()), (2, 150), "counted until popped");
        assert!(q.pop_due(t(1)).unwrap().is_empty(), "what the push left");
        let due = q.peek_due(t(1)).unwrap();
        assert_eq!(batch.push(due.packet), Err(mptun_io::PushError::Full));
        assert_eq!(pop(&mut q, t(1)), Some((0, vec![8; 50])), "still there, unchanged");
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

    /// A packet of a new flow refused because the queue is full leaves
    /// nothing behind: flow after flow offered while the queue is at its
    /// limit must not grow it.
    #[test]
    fn hostile_refused_new_flows_leave_no_entry_behind() {
        let mut q = DepartureQueue::default();
        for i in 0..LIMIT {
            push(&mut q, t(0), flow((i / FLOW_LIMIT) as u16), t(1), 0, b"x", None).unwrap();
        }
        let flows = q.flows.len();
        for n in 0..1000 {
            assert_eq!(push(&mut q, t(0), flow(100 + n), t(1), 0, b"y", None), Err(Refused::Limit));
        }
        assert_eq!(q.flows.len(), flows, "no entry for a refused flow");
        assert!(!q.holds(&flow(100)));
    }

    #[test]
    fn buffers_are_recycled() {
        let mut q = DepartureQueue::default();
        push(&mut q, t(0), flow(1), t(1), 0, &[7; 1500], None).unwrap();
        let p = q.pop_due(t(1)).unwrap().into_buffer();
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
