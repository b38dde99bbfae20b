//! The receive side's reassembly: in-order bytes waiting for the application,
//! and an out-of-order queue of disjoint ranges (Linux `out_of_order_queue`,
//! in `ofo.rs`: O(log n) per segment, never copies data already queued).
//!
//! Offsets are 64-bit stream offsets, not sequence numbers, so the queue never
//! has to reason about wrap-around.

use super::ofo::{unpin, OfoQueue, Src, CHUNK_OVERHEAD, COALESCE_MAX, COPY_BELOW};
use bytes::{Bytes, BytesMut};
use std::collections::VecDeque;

/// Memory a receive queue may hold beyond twice its window
/// ([`mem_budget`]): room for one more 64 KiB chunk (a GRO-sized segment,
/// or the spare capacity of a coalescing buffer) and its overhead. It is
/// part of the budget, not beyond it: [`RecvBuf::make_room`] charges a
/// segment all it can add, so the queue never ends over the budget.
pub(crate) const MEM_SLACK: usize = 64 * 1024 + CHUNK_OVERHEAD;

/// The memory budget of a receive queue whose window is `window` bytes, in
/// [`RecvBuf::mem_charged`] terms: twice the window, as Linux's `sk_rcvbuf`
/// is about twice the window it advertises (`tcp_adv_win_scale`), plus
/// [`MEM_SLACK`]. A peer that keeps to the window never reaches it with
/// data in order (short segments are coalesced) or with out-of-order
/// segments of 256 bytes or more; past it the out-of-order tail is pruned.
pub(crate) fn mem_budget(window: usize) -> usize {
    window.saturating_mul(2).saturating_add(MEM_SLACK)
}

/// What [`RecvBuf::make_room`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Room {
    /// The budget was exceeded (Linux `tcp_prune_queue` ran: `PruneCalled`).
    pub prune_called: bool,
    /// Out-of-order chunks dropped from the tail (`OFOPruned` when not 0).
    pub pruned_chunks: usize,
    /// The segment fits now; when `false` it must be dropped.
    pub fits: bool,
    /// What the budget has left once the segment is charged: the most
    /// spare capacity its insert may reserve for coalescing
    /// ([`RecvBuf::insert_within`]); 0 when it does not fit.
    pub spare: usize,
}

/// What inserting a segment did, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insert {
    /// Bytes that became readable in order.
    pub in_order: usize,
    /// The segment went to the out-of-order queue (also when it was a
    /// duplicate of bytes queued there).
    pub queued_ofo: bool,
    /// It started at or past the end of every range already in the
    /// out-of-order queue (abutting the last one counts).
    pub tail: bool,
    /// It overlapped or abutted a range in the out-of-order queue (always
    /// with `duplicate` there).
    pub merged: bool,
    /// Every byte of it was already received.
    pub duplicate: bool,
}

/// A piece of in-order data. The pieces of one out-of-order range that
/// became readable form one chunk for [`RecvBuf::read_chunk`] (`last` marks
/// its end), as if the range were one buffer: the MPTCP layer inserts what
/// a subflow hands it chunk by chunk, and its counters count chunks.
#[derive(Debug)]
struct Piece {
    data: Bytes,
    /// Ends its chunk.
    last: bool,
    /// Spare capacity of its allocation (charged until it is dropped).
    spare: usize,
}

/// Received bytes by stream offset: readable in-order data plus the
/// out-of-order ranges SACK reports.
#[derive(Debug, Default)]
pub(crate) struct RecvBuf {
    ready: VecDeque<Piece>,
    /// In-order bytes too short to be pieces of their own ([`COPY_BELOW`]),
    /// appended to one buffer as Linux's `tcp_try_coalesce` appends to the
    /// tail skb: a peer's tiny segments cost their bytes, not a chunk of
    /// [`CHUNK_OVERHEAD`] each. It follows `ready` and is sealed into it
    /// before anything is queued behind it or read.
    tail: BytesMut,
    /// Bytes appended since a read or a long piece ended the run: the room
    /// the next tail buffer gets (as much again, doubling up to
    /// [`COALESCE_MAX`], as the out-of-order queue's runs do).
    tail_run: usize,
    /// In-order bytes, `ready`'s and `tail`'s.
    ready_len: usize,
    ready_spare: usize,
    /// Offset of the next in-order byte (`rcv_nxt` as an offset).
    next: u64,
    ofo: OfoQueue,
    /// Start of the out-of-order range touched last (the first SACK block, RFC 2018).
    pub last_ofo: Option<u64>,
}

impl RecvBuf {
    /// Offset of the next in-order byte to arrive (`rcv_nxt` as an offset).
    pub fn next(&self) -> u64 {
        self.next
    }
    /// In-order bytes waiting for the application.
    pub fn ready_len(&self) -> usize {
        self.ready_len
    }
    /// Bytes held out of order (they count against the receive window).
    pub fn ofo_len(&self) -> usize {
        self.ofo.len()
    }
    /// No hole: nothing to SACK.
    pub fn ofo_is_empty(&self) -> bool {
        self.ofo.is_empty()
    }

    /// Memory the queues hold, as Linux charges `truesize` to `sk_rmem_alloc`:
    /// the bytes, the spare capacity of their buffers and
    /// [`CHUNK_OVERHEAD`] per chunk, in order and out of order.
    pub fn mem_charged(&self) -> usize {
        self.ready_len + self.ready_spare + self.tail.capacity() - self.tail.len()
            + self.ready_overhead()
            + self.ofo.mem_charged()
    }

    /// [`CHUNK_OVERHEAD`] for each in-order chunk, the tail's buffer included.
    fn ready_overhead(&self) -> usize {
        CHUNK_OVERHEAD * (self.ready.len() + (self.tail.capacity() > 0) as usize)
    }

    /// Makes room for `len` bytes at offset `off` within `budget` (Linux
    /// `tcp_try_rmem_schedule`): when they would take [`RecvBuf::mem_charged`]
    /// past it, out-of-order chunks are dropped from the tail, never one
    /// that starts before `off` and never in-order data (what was received
    /// in order was acknowledged). `fits` is `false` when even that is not
    /// enough: the segment is dropped then (it was not acknowledged).
    pub fn make_room(&mut self, off: u64, len: usize, budget: usize) -> Room {
        // What the insert can add: its bytes and a chunk per gap it fills
        // (a segment over many small holes adds one chunk for each).
        let pieces = if off <= self.next { 1 } else { self.ofo.pieces_for(off, off + len as u64) };
        let charge = len.saturating_add(CHUNK_OVERHEAD.saturating_mul(pieces));
        let mut room = Room { fits: true, ..Room::default() };
        if self.mem_charged() + charge > budget {
            room.prune_called = true;
            while self.mem_charged() + charge > budget {
                if self.ofo.pop_last_chunk_from(off.max(self.next)).is_none() {
                    break;
                }
                room.pruned_chunks += 1;
            }
            if room.pruned_chunks > 0 {
                // The SACK state is reset (Linux `tcp_sack_reset`): the peer
                // learns from the next SACK blocks what is still held.
                if self.last_ofo.is_some_and(|l| self.ofo.range_at(l).is_none()) {
                    self.last_ofo = None;
                }
            }
            room.fits = self.mem_charged() + charge <= budget;
        }
        // Tail coalescing may reserve room, but only what the budget has left.
        if room.fits {
            room.spare = budget - self.mem_charged() - charge;
        }
        room
    }

    /// Out-of-order ranges as `[start, end)` offsets, ascending.
    pub fn ofo_ranges(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.ofo.ranges()
    }

    /// The out-of-order range containing `off`.
    pub fn ofo_range_at(&self, off: u64) -> Option<(u64, u64)> {
        self.ofo.range_at(off)
    }

    /// Inserts `data` at stream offset `off`, outside any memory budget.
    #[cfg(test)]
    pub fn insert(&mut self, off: u64, data: &[u8]) -> Insert {
        self.insert_within(off, Src::Slice(data), usize::MAX)
    }

    /// [`RecvBuf::insert`] for data already in a `Bytes`.
    #[cfg(test)]
    pub fn insert_bytes(&mut self, off: u64, data: Bytes) -> Insert {
        self.insert_within(off, Src::Bytes(data), usize::MAX)
    }

    /// Inserts a segment that [`RecvBuf::make_room`] admitted (the caller
    /// has trimmed it to the window): tail
    /// coalescing reserves at most `spare_max` bytes of spare capacity, the
    /// room's [`Room::spare`], so the queue stays within the budget. A
    /// `Src::Bytes` is queued as slices of it, not copied, except pieces
    /// shorter than `COPY_BELOW` (the MPTCP layer moves subflow chunks this
    /// way, and a subflow queues a lent super-segment's payload).
    pub fn insert_within(&mut self, off: u64, data: Src<'_>, spare_max: usize) -> Insert {
        let mut res = Insert::default();
        let len = data.len();
        let end = off + len as u64;
        if len == 0 {
            return res;
        }
        if end <= self.next {
            res.duplicate = true;
            return res;
        }
        if off <= self.next {
            // In order, after dropping the already-received prefix.
            let before = self.next;
            self.push_in_order(&data, (self.next - off) as usize, spare_max);
            self.next = end;
            // Pull in everything the out-of-order queue now continues, each
            // range as one chunk.
            while let Some(e) = self.ofo.pop_range_upto(self.next) {
                let mut any = false;
                while let Some((s, b, spare)) = self.ofo.pop_chunk_before(e) {
                    let ce = s + b.len() as u64;
                    if ce > self.next {
                        let skip = self.next.saturating_sub(s) as usize;
                        let rest = b.slice(skip..);
                        if skip > 0 && rest.len() < COPY_BELOW {
                            // Cut short: copied, not kept as a slice of
                            // the chunk (`unpin`), its spare room gone.
                            self.push_ready(unpin(rest), false, 0);
                        } else {
                            self.push_ready(rest, false, spare);
                        }
                        self.next = ce;
                        any = true;
                    }
                }
                if any {
                    self.ready.back_mut().expect("pushed").last = true;
                }
            }
            if self.last_ofo.is_some_and(|l| l < self.next) {
                self.last_ofo = None;
            }
            res.in_order = (self.next - before) as usize;
            return res;
        }
        res.queued_ofo = true;
        res.tail = self.ofo.end().is_none_or(|e| off >= e);
        let ins = self.ofo.insert(off, data, spare_max);
        res.merged = ins.merged;
        res.duplicate = ins.duplicate;
        self.last_ofo = Some(ins.start);
        res
    }

    /// Queues bytes `from..` of an in-order segment: a long one as a piece
    /// of its own (a slice of a shared buffer, not a copy), a short one
    /// appended to the tail buffer, which a run of them grows by doubling
    /// within `spare_max` of spare room.
    fn push_in_order(&mut self, data: &Src<'_>, from: usize, spare_max: usize) {
        let n = data.len() - from;
        if n >= COPY_BELOW {
            self.push_ready(data.tail_from(from), true, 0);
            return;
        }
        let bytes = match data {
            Src::Bytes(b) => &b[from..],
            Src::Slice(s) => &s[from..],
        };
        if self.tail.capacity() - self.tail.len() < n {
            self.seal_tail();
            let cap = (self.tail_run + n).min(COALESCE_MAX).min(n.saturating_add(spare_max)).max(n);
            self.tail = BytesMut::with_capacity(cap);
        }
        self.tail.extend_from_slice(bytes);
        self.tail_run += n;
        self.ready_len += n;
    }

    /// Moves the tail buffer into `ready` as a piece (its bytes are
    /// already counted in `ready_len`), its spare room charged until the
    /// piece is read.
    fn seal_tail(&mut self) {
        if self.tail.capacity() == 0 {
            return;
        }
        let t = std::mem::take(&mut self.tail);
        if t.is_empty() {
            return;
        }
        let spare = t.capacity() - t.len();
        self.ready_spare += spare;
        self.ready.push_back(Piece { data: t.freeze(), last: true, spare });
    }

    fn push_ready(&mut self, data: Bytes, last: bool, spare: usize) {
        self.seal_tail();
        self.tail_run = 0;
        self.ready_len += data.len();
        self.ready_spare += spare;
        self.ready.push_back(Piece { data, last, spare });
    }

    fn pop_ready(&mut self) -> Option<Bytes> {
        let p = self.ready.pop_front()?;
        self.ready_spare -= p.spare;
        self.ready_len -= p.data.len();
        Some(p.data)
    }

    /// Takes the first `take` bytes of the front piece, fewer than it
    /// holds. A long piece (a slice of a lent super-segment) cut down to a
    /// short remainder has the remainder copied, as the queues copy short
    /// shared slices (see `COPY_BELOW`): a reader taking a few bytes less
    /// than a piece must not leave those few pinning 64 KiB.
    fn split_front(&mut self, take: usize) -> Bytes {
        let front = self.ready.front_mut().expect("a front piece");
        debug_assert!(take < front.data.len());
        let long = front.data.len() >= COPY_BELOW;
        let head = front.data.split_to(take);
        self.ready_len -= take;
        if long && front.data.len() < COPY_BELOW {
            front.data = unpin(std::mem::take(&mut front.data));
            self.ready_spare -= std::mem::take(&mut front.spare);
        }
        head
    }

    /// A read begins: the tail buffer becomes a piece the read can take,
    /// and the bytes after it begin a run of their own.
    fn reading(&mut self) {
        self.seal_tail();
        self.tail_run = 0;
    }

    /// Copies up to `out.len()` in-order bytes to `out`.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        self.reading();
        let mut n = 0;
        while n < out.len() {
            let Some(front) = self.ready.front_mut() else { break };
            let take = front.data.len().min(out.len() - n);
            out[n..n + take].copy_from_slice(&front.data[..take]);
            n += take;
            if take == front.data.len() {
                self.pop_ready();
            } else {
                self.split_front(take);
            }
        }
        n
    }

    /// Takes the next in-order chunk, at most `max` bytes, without copying
    /// unless the chunk is a range that was reassembled from several
    /// segments and `max` spans more than its first piece: those bytes are
    /// copied once, here (the application reading with [`RecvBuf::read`]
    /// copies them anyway).
    pub fn read_chunk(&mut self, max: usize) -> Option<Bytes> {
        self.reading();
        let front = self.ready.front_mut()?;
        if front.last || front.data.len() >= max {
            if front.data.len() <= max {
                return self.pop_ready();
            }
            return Some(self.split_front(max));
        }
        // The chunk continues past this piece and `max` wants more.
        let mut want = 0;
        for p in &self.ready {
            want += p.data.len().min(max - want);
            if p.last || want == max {
                break;
            }
        }
        let mut out = BytesMut::with_capacity(want);
        while out.len() < want {
            let front = self.ready.front_mut().expect("counted");
            let take = front.data.len().min(want - out.len());
            out.extend_from_slice(&front.data[..take]);
            if take == front.data.len() {
                self.pop_ready();
            } else {
                self.split_front(take);
            }
        }
        Some(out.freeze())
    }

    /// Takes the next in-order piece as it was received, at most `max`
    /// bytes, never copying it (a long piece cut to a short remainder has
    /// the remainder copied, see `split_front`): the application's
    /// zero-copy read. Pieces of a reassembled range come one by one.
    pub fn read_piece(&mut self, max: usize) -> Option<Bytes> {
        self.reading();
        let front = self.ready.front()?;
        if max == 0 {
            return None;
        }
        if front.data.len() <= max {
            // The chunk's end, if this piece was it, moves to nothing: the
            // next piece begins a chunk of its own anyway.
            return self.pop_ready();
        }
        Some(self.split_front(max))
    }

    #[cfg(test)]
    fn check(&self) {
        self.ofo.check();
        assert_eq!(self.ready_len, self.ready.iter().map(|p| p.data.len()).sum::<usize>() + self.tail.len());
        assert_eq!(self.ready_spare, self.ready.iter().map(|p| p.spare).sum::<usize>());
        assert!(self.ready.iter().all(|p| !p.data.is_empty()));
        assert!(self.ready.back().is_none_or(|p| p.last));
        assert!(self.tail.len() <= COALESCE_MAX);
        assert!(self.mem_charged() >= self.ready_len + self.ofo_len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn drain(r: &mut RecvBuf) -> Vec<u8> {
        let mut v = vec![0; r.ready_len()];
        let n = r.read(&mut v);
        v.truncate(n);
        v
    }

    #[test]
    fn in_order_out_of_order_and_holes() {
        let mut r = RecvBuf::default();
        assert_eq!(r.insert(0, b"ab").in_order, 2);
        let i = r.insert(4, b"ef");
        assert!(i.queued_ofo && !i.merged);
        let i = r.insert(6, b"gh");
        assert!(i.merged);
        assert_eq!(r.ofo_ranges().collect::<Vec<_>>(), vec![(4, 8)]);
        assert!(r.insert(5, b"f").duplicate);
        assert_eq!(r.insert(2, b"cd").in_order, 6);
        assert!(r.ofo_is_empty());
        assert_eq!(drain(&mut r), b"abcdefgh");
        assert!(r.insert(3, b"d").duplicate);
    }

    /// Tiny in-order segments are coalesced (Linux `tcp_try_coalesce`):
    /// 256 KiB of 64-byte segments cost about their bytes, not a chunk each
    /// (without coalescing they were charged five times their bytes and a
    /// window of 256 KiB overran a budget of 576 KiB).
    #[test]
    fn tiny_in_order_segments_cost_their_bytes() {
        let mut r = RecvBuf::default();
        let seg = [9u8; 64];
        let budget = mem_budget(256 * 1024);
        for i in 0..4096u64 {
            let room = r.make_room(i * 64, 64, budget);
            assert!(room.fits, "segment {i}: {room:?}, charged {}", r.mem_charged());
            r.insert_within(i * 64, Src::Slice(&seg), room.spare);
        }
        r.check();
        assert_eq!(r.ready_len(), 4096 * 64);
        assert!(r.mem_charged() < 2 * r.ready_len(), "{} for {}", r.mem_charged(), r.ready_len());
        // The bytes come out in pieces of many segments: buffers doubling
        // from one segment to 64 KiB.
        let mut pieces = 0;
        while let Some(p) = r.read_chunk(usize::MAX) {
            assert!(p.iter().all(|&b| b == 9));
            pieces += 1;
        }
        assert!(pieces <= 16, "{pieces} pieces");
        assert_eq!(r.mem_charged(), 0);
        r.check();
    }

    #[test]
    fn in_order_bytes_are_queued_without_a_copy() {
        const C: usize = COPY_BELOW;
        let mut r = RecvBuf::default();
        let data = Bytes::from(vec![7u8; 5 * C]);
        let ptr = data.as_ptr();
        r.insert_bytes(0, data.slice(..3 * C));
        // Overlapping retransmission: only the new suffix is queued, still zero-copy.
        r.insert_bytes(2 * C as u64, data.slice(2 * C..));
        let a = r.read_chunk(usize::MAX).unwrap();
        let b = r.read_chunk(usize::MAX).unwrap();
        assert_eq!((a.len(), b.len()), (3 * C, 2 * C));
        assert_eq!(a.as_ptr(), ptr);
        assert_eq!(b.as_ptr(), ptr.wrapping_add(3 * C));
    }

    /// Out-of-order data given as `Bytes` is queued as slices of it and
    /// handed out again without a copy, in any arrival order.
    #[test]
    fn out_of_order_bytes_are_not_copied() {
        const C: usize = COPY_BELOW;
        let segs: Vec<Bytes> = (0..20u8).map(|i| Bytes::from(vec![i; C])).collect();
        let mut r = RecvBuf::default();
        for (i, b) in segs.iter().enumerate().rev() {
            r.insert_bytes((i * C) as u64, b.clone());
            r.check();
        }
        assert_eq!(r.ready_len(), 20 * C);
        for b in &segs {
            let c = r.read_chunk(C).unwrap();
            assert_eq!(c.as_ptr(), b.as_ptr());
        }
        assert!(r.read_chunk(C).is_none());
    }

    /// The application's zero-copy read: every piece as it was queued (a
    /// reassembled range piece by piece, never coalesced into a copy), cut
    /// at `max`, the bytes in order and the accounting exact.
    #[test]
    fn pieces_come_out_as_they_were_queued() {
        const C: usize = COPY_BELOW;
        let segs: Vec<Bytes> = (0..8u8).map(|i| Bytes::from(vec![i; C])).collect();
        let mut r = RecvBuf::default();
        // Out of order: the eight become one readable range of eight pieces.
        for (i, b) in segs.iter().enumerate().rev() {
            r.insert_bytes((i * C) as u64, b.clone());
        }
        assert_eq!(r.read_piece(0), None);
        for b in &segs[..4] {
            let p = r.read_piece(usize::MAX).unwrap();
            assert_eq!((p.as_ptr(), p.len()), (b.as_ptr(), C), "the piece itself, not a copy");
            r.check();
        }
        // Cut at `max`: the head is a slice, the rest stays first in line.
        let head = r.read_piece(C / 2).unwrap();
        assert_eq!((head.as_ptr(), head.len()), (segs[4].as_ptr(), C / 2));
        let rest = r.read_piece(usize::MAX).unwrap();
        assert_eq!(&rest[..], &segs[4][C / 2..]);
        r.check();
        let mut got = Vec::new();
        while let Some(p) = r.read_piece(C) {
            got.extend_from_slice(&p);
        }
        assert_eq!(got, segs[5..].concat());
        assert_eq!(r.ready_len(), 0);
        r.check();
    }

    #[test]
    fn unpin_copies_a_short_slice_of_a_large_buffer_and_keeps_a_long_one() {
        let big = Bytes::from(vec![7u8; 64 * 1024]);
        let short = unpin(big.slice(100..101));
        assert_eq!(&short[..], &[7]);
        assert!(!big.as_ptr_range().contains(&short.as_ptr()), "copied out of the 64 KiB buffer");
        let long = unpin(big.slice(0..COPY_BELOW));
        assert_eq!(long.as_ptr(), big.as_ptr(), "kept as a slice");
    }

    /// A short piece of a shared buffer is copied, in order or out of order:
    /// a few new bytes of a mostly duplicate 64 KiB super-segment must not
    /// keep all of it alive while the budget charges a few bytes.
    #[test]
    fn short_pieces_of_shared_data_are_copied() {
        const C: usize = COPY_BELOW;
        let big = Bytes::from(vec![1u8; 4 * C]);
        let within = |c: &Bytes| {
            let (p, q) = (big.as_ptr() as usize, c.as_ptr() as usize);
            q >= p && q < p + big.len()
        };
        let mut r = RecvBuf::default();
        r.insert(0, &vec![0u8; 4 * C - 100]);
        // In order: only the last 100 bytes are new.
        assert_eq!(r.insert_bytes(0, big.clone()).in_order, 100);
        // Out of order: the gaps between two queued ranges are filled by
        // pieces of the buffer, the queued ranges themselves cut short by
        // an overlapping in-order insert.
        let x = 4 * C as u64 + 1000;
        r.insert(x, &[2u8; 10]);
        r.insert(x + 150, &[2u8; 10]);
        assert!(r.insert_bytes(x, big.slice(..2 * C)).queued_ofo);
        r.insert_bytes(4 * C as u64, big.slice(..1005));
        assert_eq!(r.ready_len(), 4 * C + 1000 + 2 * C);
        let mut n = 0;
        while let Some(c) = r.read_chunk(usize::MAX) {
            n += c.len();
            assert!(c.len() >= C || !within(&c), "a short piece ({} bytes) points into the shared buffer", c.len());
        }
        assert_eq!(n, 6 * C + 1000);
        // A reader taking all but a few bytes of a long piece: the rest is
        // copied, the buffer no longer pinned by it.
        let mut r = RecvBuf::default();
        r.insert_bytes(0, big.clone());
        let mut out = vec![0u8; 4 * C - 100];
        assert_eq!(r.read(&mut out), 4 * C - 100);
        let rest = r.read_chunk(usize::MAX).unwrap();
        assert_eq!(rest.len(), 100);
        assert!(!within(&rest), "the short remainder of a read still points into the shared buffer");
        r.check();
    }

    /// A run of segments behind a hole coalesces into few buffers, allocated
    /// for the run, never moving what they already hold.
    #[test]
    fn tail_run_coalesces() {
        let mut r = RecvBuf::default();
        let seg = [5u8; 1000];
        for i in 1..=200u64 {
            let ins = r.insert(i * 1000, &seg);
            assert_eq!((ins.tail, ins.merged), (true, i > 1));
            r.check();
        }
        let chunks = r.ofo.chunks();
        assert!(chunks < 20, "{chunks} chunks");
        // Spare capacity never exceeds what is queued.
        assert!(r.mem_charged() <= 2 * r.ofo_len() + CHUNK_OVERHEAD * chunks, "{}", r.mem_charged());
        assert_eq!(r.insert(0, &seg).in_order, 201_000);
        assert_eq!(r.read_chunk(usize::MAX).map(|b| b.len()), Some(1000));
        assert_eq!(r.read_chunk(usize::MAX).map(|b| b.len()), Some(200_000));
        r.check();
        assert_eq!(r.mem_charged(), 0);
    }

    /// Tiny ranges are charged their overhead, not one byte each.
    #[test]
    fn tiny_ranges_are_charged_per_chunk() {
        let mut r = RecvBuf::default();
        for i in 0..1000u64 {
            r.insert(2 * i + 1, b"x");
        }
        assert_eq!(r.ofo_len(), 1000);
        assert_eq!(r.mem_charged(), 1000 * (1 + CHUNK_OVERHEAD));
    }

    /// Past its budget the queue drops its out-of-order tail, never data
    /// before the segment made room for and never in-order data.
    #[test]
    fn make_room_prunes_the_tail_only() {
        let mut r = RecvBuf::default();
        r.insert(0, &[1u8; 1000]);
        for i in 0..100u64 {
            r.insert(2000 + 2 * i, b"x");
        }
        let before = r.mem_charged();
        let budget = 1000 + 30 * (1 + CHUNK_OVERHEAD);
        // A segment behind some of the queued ones: only those after it go.
        let room = r.make_room(2100, 1, budget);
        assert!(room.prune_called && !room.fits, "{room:?}");
        assert_eq!(r.ofo_ranges().last(), Some((2098, 2099)));
        assert!(r.mem_charged() < before);
        // In-order data may take the whole out-of-order queue, not the ready bytes.
        let room = r.make_room(1000, 1, budget);
        assert!(room.fits && room.pruned_chunks > 0, "{room:?}");
        assert_eq!(r.ready_len(), 1000);
        r.check();
        let room = r.make_room(1000, 10_000, budget);
        assert!(!room.fits);
        assert_eq!(r.ready_len(), 1000);
        assert!(r.ofo_is_empty());
        r.check();
        // Within the budget nothing happens.
        let (budget, mem) = (mem_budget(1 << 20), r.mem_charged());
        let spare = budget - mem - (1 + CHUNK_OVERHEAD);
        assert_eq!(r.make_room(1000, 1, budget), Room { fits: true, spare, ..Room::default() });
    }

    /// `make_room`, then the insert when it fits (as both layers do); the
    /// queue never ends over its budget, whatever the segment adds.
    fn admit(r: &mut RecvBuf, off: u64, data: &[u8], budget: usize) -> bool {
        let room = r.make_room(off, data.len(), budget);
        if room.fits {
            r.insert_within(off, Src::Slice(data), room.spare);
        }
        r.check();
        assert!(r.mem_charged() <= budget, "{} > {budget} after {} bytes at {off}", r.mem_charged(), data.len());
        room.fits
    }

    /// One segment over many small holes adds a chunk for each: the budget
    /// counts them all, not one.
    #[test]
    fn a_segment_filling_many_holes_is_charged_a_chunk_per_hole() {
        let mut r = RecvBuf::default();
        for i in 0..500u64 {
            r.insert(10 + 2 * i, b"x");
        }
        // Room for the segment's bytes and one chunk, not for 500.
        let budget = r.mem_charged() + 1000 + CHUNK_OVERHEAD + 100;
        let room = r.make_room(9, 1000, budget);
        assert!(room.prune_called && room.pruned_chunks > 0, "{room:?}");
        admit(&mut r, 9, &[7u8; 1000], budget);
    }

    /// A run behind a hole gets spare capacity for coalescing only as far
    /// as the budget goes.
    #[test]
    fn coalescing_room_stays_within_the_budget() {
        let budget = mem_budget(64 * 1024);
        let mut r = RecvBuf::default();
        let mut admitted = 0;
        for i in 0..200u64 {
            admitted += admit(&mut r, 1 + i * 1000, &[3u8; 1000], budget) as usize;
        }
        assert!(admitted > 100, "{admitted}");
        assert!(r.ofo.chunks() < admitted, "runs were coalesced: {} chunks", r.ofo.chunks());
    }

    /// Descending arrival of many full segments reassembles whole, each
    /// segment held once (no merge copies, charged one chunk each). Its
    /// speed is the `reassembly` bench's business, not a timed test's.
    #[test]
    fn reverse_order_reassembles_each_segment_once() {
        let seg = vec![1u8; 1448];
        let mut r = RecvBuf::default();
        let n = 20_000u64;
        for i in (0..n).rev() {
            r.insert(i * 1448, &seg);
        }
        assert_eq!(r.ready_len(), n as usize * 1448);
        assert!(r.mem_charged() <= n as usize * (1448 + CHUNK_OVERHEAD), "{}", r.mem_charged());
    }

    /// The case that showed the oracle test comparing chunk boundaries:
    /// three overlapping in-order segments, the last two short, end in
    /// one coalesced piece where the oracle has two; same bytes.
    #[test]
    fn short_in_order_overlaps_coalesce_into_one_piece() {
        let stream: Vec<u8> = (0..64u8).collect();
        let mut r = RecvBuf::default();
        for (off, len) in [(0usize, 44usize), (24, 24), (16, 33)] {
            r.insert(off as u64, &stream[off..off + len]);
            r.check();
        }
        assert_eq!(r.ready_len(), 49);
        assert_eq!(r.read_chunk(usize::MAX).as_deref(), Some(&stream[..44]));
        assert_eq!(r.read_chunk(usize::MAX).as_deref(), Some(&stream[44..49]));
        assert_eq!(r.read_chunk(usize::MAX), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert { off: u64, len: usize, shared: bool },
        Read(usize),
        ReadChunk(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..400, 1usize..60, any::<bool>()).prop_map(|(off, len, shared)| Op::Insert { off, len, shared }),
            1 => (0usize..120).prop_map(Op::Read),
            1 => (1usize..120).prop_map(Op::ReadChunk),
        ]
    }

    proptest! {
        /// The new queue against the old one (the oracle): same `Insert`
        /// results, same ranges, the same byte stream read out. Chunk
        /// boundaries of in-order data may differ: the new queue coalesces
        /// short in-order segments into one piece (Linux `tcp_try_coalesce`),
        /// the oracle keeps one chunk per segment, so a `read_chunk` of the
        /// new queue may return more bytes, never other ones.
        #[test]
        fn same_as_the_old_queue(ops in prop::collection::vec(op(), 1..150), probes in prop::collection::vec(0u64..500, 4)) {
            let stream: Vec<u8> = (0..500u32).map(|i| (i * 13 + 1) as u8).collect();
            let mut new = RecvBuf::default();
            let mut old = super::super::recv_oracle::RecvBuf::default();
            // What each queue handed its reader so far.
            let (mut out_new, mut out_old) = (Vec::new(), Vec::new());
            for op in ops {
                match op {
                    Op::Insert { off, len, shared } => {
                        let data = &stream[off as usize..off as usize + len];
                        let (a, b) = if shared {
                            let b = Bytes::copy_from_slice(data);
                            (new.insert_bytes(off, b.clone()), old.insert_bytes(off, b))
                        } else {
                            (new.insert(off, data), old.insert(off, data))
                        };
                        let b = Insert { in_order: b.in_order, queued_ofo: b.queued_ofo, tail: b.tail, merged: b.merged, duplicate: b.duplicate };
                        prop_assert_eq!(a, b);
                    }
                    Op::Read(n) => {
                        let (mut a, mut b) = (vec![0; n], vec![0; n]);
                        let (ra, rb) = (new.read(&mut a), old.read(&mut b));
                        out_new.extend_from_slice(&a[..ra]);
                        out_old.extend_from_slice(&b[..rb]);
                    }
                    Op::ReadChunk(n) => {
                        let (a, b) = (new.read_chunk(n), old.read_chunk(n));
                        prop_assert!(a.as_ref().map_or(0, |a| a.len()) <= n);
                        out_new.extend_from_slice(a.as_deref().unwrap_or_default());
                        out_old.extend_from_slice(b.as_deref().unwrap_or_default());
                    }
                }
                new.check();
                let common = out_new.len().min(out_old.len());
                prop_assert_eq!(&out_new[..common], &out_old[..common]);
                prop_assert_eq!(new.next(), old.next());
                prop_assert_eq!(out_new.len() + new.ready_len(), out_old.len() + old.ready_len());
                prop_assert_eq!(new.ofo_len(), old.ofo_len());
                prop_assert_eq!(new.ofo_is_empty(), old.ofo_is_empty());
                prop_assert_eq!(new.last_ofo, old.last_ofo);
                prop_assert_eq!(new.ofo_ranges().collect::<Vec<_>>(), old.ofo_ranges().collect::<Vec<_>>());
                prop_assert_eq!(new.ofo_ranges().rev().collect::<Vec<_>>(), old.ofo_ranges().rev().collect::<Vec<_>>());
                for &p in &probes {
                    prop_assert_eq!(new.ofo_range_at(p), old.ofo_range_at(p));
                }
                if let Some(l) = new.last_ofo {
                    prop_assert_eq!(new.ofo_range_at(l), old.ofo_range_at(l));
                }
            }
            // What is left reads out as the same stream.
            while let Some(a) = new.read_chunk(usize::MAX) {
                out_new.extend_from_slice(&a);
            }
            while let Some(b) = old.read_chunk(usize::MAX) {
                out_old.extend_from_slice(&b);
            }
            prop_assert_eq!(out_new, out_old);
        }
    }

    proptest! {
        /// Any arrival order of any overlapping pieces yields the original stream.
        #[test]
        fn reassembles_any_overlap_pattern(
            pieces in prop::collection::vec((0u64..200, 1usize..40), 1..60),
            order in prop::collection::vec(any::<u16>(), 60),
        ) {
            let stream: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
            let mut segs: Vec<(u64, usize)> = pieces;
            // Cover the whole prefix [0, 240) so the result is complete.
            for s in (0..240).step_by(40) { segs.push((s, 40)); }
            let mut idx: Vec<usize> = (0..segs.len()).collect();
            idx.sort_by_key(|&i| order[i % order.len()] as usize * 1000 + i);
            let mut r = RecvBuf::default();
            let mut out = Vec::new();
            for i in idx {
                let (off, len) = segs[i];
                r.insert(off, &stream[off as usize..off as usize + len]);
                out.extend(drain(&mut r));
                let total: usize = r.ofo_ranges().map(|(s, e)| (e - s) as usize).sum();
                prop_assert_eq!(total, r.ofo_len());
                let v: Vec<_> = r.ofo_ranges().collect();
                for w in v.windows(2) { prop_assert!(w[0].1 < w[1].0); }
            }
            prop_assert!(out.len() >= 240);
            prop_assert_eq!(&out[..], &stream[..out.len()]);
        }
    }
}
