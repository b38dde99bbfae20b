//! The out-of-order queue: byte ranges waiting for a hole before them to
//! fill (Linux `out_of_order_queue`), O(log n) per segment and zero copy.
//!
//! Two ordered maps. `ranges` holds the maximal ranges, disjoint and
//! non-adjacent: a segment that overlaps or abuts a range merges into it, and
//! these are what SACK reports and what the OFO counters see. `chunks` holds
//! the data as the pieces that tile those ranges exactly (adjacent pieces are
//! allowed). Inserting a segment adds only the parts of it that fill gaps,
//! sliced out of it; data already queued is never copied, concatenated or
//! moved, so every segment costs O(log n) plus O(1) per range it merges
//! (each range is merged away once: amortised O(log n)).
//!
//! The one copy is tail coalescing, as Linux's `tcp_try_coalesce` on the OFO
//! tail: a segment given by reference, which has to be copied anyway, is
//! appended to the piece it continues when that piece has spare capacity.
//! Spare capacity is only allocated at the tail of a range, for a run of
//! in-sequence segments behind a hole (the usual pattern after a loss), sized
//! to the run so far (at most [`COALESCE_MAX`] and what the memory budget has
//! left), so it never exceeds the bytes already in the range and is charged by
//! [`OfoQueue::mem_charged`]. A
//! segment given as `Bytes` is sliced, not copied, except for pieces shorter
//! than [`COPY_BELOW`].

use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;

/// Memory charged for every chunk of data held, on top of its bytes, as
/// Linux charges an skb's `truesize` (payload plus `struct sk_buff` and
/// `skb_shared_info`, about 576 bytes on x86-64) rather than its payload. Here
/// a chunk costs its `Bytes` handle and shared header, its allocation's
/// malloc overhead and its share of the ordered map's nodes, together well
/// under 256 bytes; 256 keeps a margin and a round figure. With it, a peer
/// that sends tiny segments pays for what they really cost instead of one
/// byte each.
pub(crate) const CHUNK_OVERHEAD: usize = 256;

/// The largest buffer tail coalescing allocates (a 64 KiB GRO skb).
pub(crate) const COALESCE_MAX: usize = 64 * 1024;

/// Shared data shorter than this is copied rather than sliced when a queue
/// keeps it. A received super-segment is one allocation of up to 64 KiB (a
/// GRO read the driver lends as it is, or a subflow chunk the connection
/// moves): a short slice of it (the few new bytes of a mostly duplicate
/// segment, a mapping that covers a corner of it) would keep all of it alive
/// while the memory budget charges only its length. Copying short slices
/// bounds what a peer can make a queue hold to about four times what it is
/// charged (the purpose of Linux's `truesize`).
pub(crate) const COPY_BELOW: usize = 16 * 1024;

/// Shared data as a queue keeps it: itself, or a copy of it if it is shorter
/// than [`COPY_BELOW`]. The one place the rule is applied to a whole slice.
pub(crate) fn unpin(data: Bytes) -> Bytes {
    if data.len() < COPY_BELOW {
        Bytes::copy_from_slice(&data)
    } else {
        data
    }
}

/// A segment's payload as the caller has it.
#[derive(Debug, Clone)]
pub(crate) enum Src<'a> {
    /// Borrowed: the parts that are queued are copied (once).
    Slice(&'a [u8]),
    /// Already in a `Bytes`: the parts that are queued are slices of it
    /// (copies if shorter than [`COPY_BELOW`]).
    Bytes(Bytes),
}

impl Src<'_> {
    pub fn len(&self) -> usize {
        match self {
            Src::Slice(s) => s.len(),
            Src::Bytes(b) => b.len(),
        }
    }

    /// Bytes `from..` of the segment as a `Bytes`: a copy of a slice, a
    /// slice of a `Bytes` (a copy if shorter than [`COPY_BELOW`]).
    pub fn tail_from(&self, from: usize) -> Bytes {
        match self {
            Src::Bytes(b) => unpin(b.slice(from..)),
            Src::Slice(s) => Bytes::copy_from_slice(&s[from..]),
        }
    }
}

#[derive(Debug)]
enum Chunk {
    Shared(Bytes),
    /// Allocated here by a copy; may have spare capacity for coalescing.
    Owned(BytesMut),
}

impl Chunk {
    fn len(&self) -> usize {
        match self {
            Chunk::Shared(b) => b.len(),
            Chunk::Owned(m) => m.len(),
        }
    }
    fn spare(&self) -> usize {
        match self {
            Chunk::Shared(_) => 0,
            Chunk::Owned(m) => m.capacity() - m.len(),
        }
    }
    fn into_bytes(self) -> Bytes {
        match self {
            Chunk::Shared(b) => b,
            Chunk::Owned(m) => m.freeze(), // O(1), no copy
        }
    }
}

/// What [`OfoQueue::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OfoInsert {
    /// Start of the range that now holds the segment.
    pub start: u64,
    /// It overlapped or abutted a range already queued.
    pub merged: bool,
    /// Every byte of it was already queued.
    pub duplicate: bool,
}

#[derive(Debug, Default)]
pub(crate) struct OfoQueue {
    /// start → end of the maximal ranges; disjoint and non-adjacent.
    ranges: BTreeMap<u64, u64>,
    /// start → data; tiles `ranges` exactly.
    chunks: BTreeMap<u64, Chunk>,
    /// Bytes held (sum of the ranges' lengths).
    len: usize,
    /// Spare capacity of the `Owned` chunks.
    spare: usize,
}

impl OfoQueue {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
    /// Chunks of data held.
    #[cfg(test)]
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }
    /// Memory charged: bytes held, spare capacity and [`CHUNK_OVERHEAD`] per chunk.
    pub fn mem_charged(&self) -> usize {
        self.len + self.spare + CHUNK_OVERHEAD * self.chunks.len()
    }

    /// Ranges as `[start, end)`, ascending.
    pub fn ranges(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }

    /// The range containing `off`.
    pub fn range_at(&self, off: u64) -> Option<(u64, u64)> {
        self.ranges.range(..=off).next_back().map(|(&s, &e)| (s, e)).filter(|&(_, e)| e > off)
    }

    /// End of the last range.
    pub fn end(&self) -> Option<u64> {
        self.ranges.last_key_value().map(|(_, &e)| e)
    }

    /// The most chunks queueing `[off, end)` adds: one per gap it fills
    /// between the ranges it overlaps (O(those ranges), as the insert).
    pub fn pieces_for(&self, off: u64, end: u64) -> usize {
        1 + self.ranges.range(..end).rev().take_while(|&(_, &e)| e > off).count()
    }

    /// Queues `data` at `off`, merging it with every range it overlaps or
    /// abuts. Only the bytes not already queued are added. Tail coalescing
    /// allocates at most `spare_max` bytes of spare capacity (what the
    /// memory budget has left).
    pub fn insert(&mut self, off: u64, data: Src<'_>, spare_max: usize) -> OfoInsert {
        let end = off + data.len() as u64;
        let mut start = off;
        // Everything of the segment before `fill` is known to be queued.
        let mut fill = off;
        let mut merged = false;
        if let Some((&ps, &pe)) = self.ranges.range(..=off).next_back() {
            if pe >= end {
                return OfoInsert { start: ps, merged: true, duplicate: true };
            }
            if pe >= off {
                self.ranges.remove(&ps);
                start = ps;
                fill = pe;
                merged = true;
            }
        }
        let mut range_end = end;
        // Successors that overlap or abut. Each starts past `fill` (ranges
        // are non-adjacent) and at or before `end` (one that ends past `end`
        // is the last).
        while let Some((&ns, &ne)) = self.ranges.range(start + 1..).next() {
            if ns > range_end {
                break;
            }
            self.ranges.remove(&ns);
            self.add_piece(start, fill, ns, off, &data, spare_max);
            fill = ne;
            range_end = range_end.max(ne);
            merged = true;
        }
        if fill < end {
            self.add_piece(start, fill, end, off, &data, spare_max);
        }
        self.ranges.insert(start, range_end);
        OfoInsert { start, merged, duplicate: false }
    }

    /// Adds bytes `[from, to)` of the segment at `off` to the range that
    /// starts at `range_start`, with at most `spare_max` bytes of spare room.
    fn add_piece(&mut self, range_start: u64, from: u64, to: u64, off: u64, data: &Src<'_>, spare_max: usize) {
        let (lo, hi) = ((from - off) as usize, (to - off) as usize);
        let n = hi - lo;
        self.len += n;
        let slice = match data {
            Src::Bytes(b) if n >= COPY_BELOW => {
                self.chunks.insert(from, Chunk::Shared(b.slice(lo..hi)));
                return;
            }
            Src::Bytes(b) => &b[lo..hi],
            Src::Slice(s) => &s[lo..hi],
        };
        // Does it continue the piece before it?
        let mut continues = false;
        if let Some((&ps, prev)) = self.chunks.range_mut(..from).next_back() {
            if ps + prev.len() as u64 == from {
                continues = true;
                if let Chunk::Owned(m) = prev {
                    if m.capacity() - m.len() >= n {
                        m.extend_from_slice(slice); // within capacity: no reallocation
                        self.spare -= n;
                        return;
                    }
                }
            }
        }
        // A run growing at the tail of the queue gets room for as many bytes
        // again as the range holds (doubling, without moving what is queued).
        let at_tail = self.chunks.range(from..).next().is_none();
        let cap = if continues && at_tail {
            ((to - range_start) as usize).min(COALESCE_MAX).min(n.saturating_add(spare_max)).max(n)
        } else {
            n
        };
        let mut m = BytesMut::with_capacity(cap);
        m.extend_from_slice(slice);
        let c = Chunk::Owned(m);
        self.spare += c.spare();
        self.chunks.insert(from, c);
    }

    /// Removes the first range if it starts at or before `next`; returns its end.
    pub fn pop_range_upto(&mut self, next: u64) -> Option<u64> {
        let entry = self.ranges.first_entry()?;
        if *entry.key() > next {
            return None;
        }
        Some(entry.remove())
    }

    /// Removes the first chunk if it starts before `end`: its start and data.
    pub fn pop_chunk_before(&mut self, end: u64) -> Option<(u64, Bytes, usize)> {
        let entry = self.chunks.first_entry()?;
        if *entry.key() >= end {
            return None;
        }
        let (s, c) = entry.remove_entry();
        let spare = c.spare();
        self.spare -= spare;
        self.len -= c.len();
        Some((s, c.into_bytes(), spare))
    }

    /// Drops the last chunk of the queue if it starts at or after `from`
    /// (pruning, Linux `tcp_prune_ofo_queue`: the tail goes first, and
    /// never data before the segment being made room for); its length.
    pub fn pop_last_chunk_from(&mut self, from: u64) -> Option<usize> {
        let entry = self.chunks.last_entry()?;
        let start = *entry.key();
        if start < from {
            return None;
        }
        let c = entry.remove();
        self.len -= c.len();
        self.spare -= c.spare();
        // The last chunk is the tail of the last range.
        let mut range = self.ranges.last_entry().expect("chunks tile the ranges");
        if *range.key() == start {
            range.remove();
        } else {
            *range.get_mut() = start;
        }
        Some(c.len())
    }

    /// Checks the invariants (tests).
    #[cfg(test)]
    pub fn check(&self) {
        let mut prev_end: Option<u64> = None;
        let (mut visited, mut len, mut spare) = (0, 0, 0);
        for (&s, &e) in &self.ranges {
            assert!(s < e);
            assert!(prev_end.is_none_or(|p| p < s), "ranges disjoint and non-adjacent");
            prev_end = Some(e);
            let mut at = s;
            while at < e {
                let c = self.chunks.get(&at).expect("chunks tile their range");
                assert!(c.len() > 0);
                at += c.len() as u64;
                visited += 1;
                len += c.len();
                spare += c.spare();
            }
            assert_eq!(at, e, "no chunk past its range");
        }
        assert_eq!(visited, self.chunks.len(), "no chunk outside the ranges");
        assert_eq!(len, self.len);
        assert_eq!(spare, self.spare);
    }
}
