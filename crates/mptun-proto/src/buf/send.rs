//! The send side's byte store: everything from `snd_una` on, acknowledged data
//! released as soon as it is acknowledged.
//!
//! Application writes are kept as the `Bytes` they arrived in (no copy, no
//! coalescing); a segment that spans two writes is gathered at emission, where
//! a copy into the packet buffer happens anyway.

use crate::seq::Seq;
use bytes::{Buf, Bytes};
use std::cell::Cell;
use std::collections::VecDeque;

/// Bytes written by the application from the oldest unacknowledged one on,
/// addressed by sequence number.
///
/// Each write remembers where it starts in the stream, so the write that
/// holds a sequence number is found by binary search: a send buffer of
/// megabytes holds a hundred writes or more, and every segment sent or
/// retransmitted looks one up (a linear walk would cost a sixth of a simulated
/// 1 Gbit/s run).
#[derive(Debug)]
pub(crate) struct SendBuf {
    chunks: VecDeque<Chunk>,
    /// Sequence number of the first buffered byte.
    head: Seq,
    /// Stream position (bytes pushed before it, ever) of that byte.
    head_pos: u64,
    len: usize,
    /// Chunks released so far, ever: with it, `hint` survives acks.
    released: u64,
    /// The chunk the last lookup found (counted from the first ever
    /// pushed): lookups mostly walk forward (`snd_nxt`), so it or the one
    /// after it usually holds the next one, and the binary search is for
    /// retransmissions.
    hint: Cell<u64>,
}

/// One application write, or what is left of it.
#[derive(Debug)]
struct Chunk {
    /// Stream position of `data[0]`.
    pos: u64,
    data: Bytes,
    /// It continues the write before it (one MPTCP mapping grown by a
    /// later write), so no segment boundary falls between them.
    joined: bool,
}

impl Chunk {
    fn end(&self) -> u64 {
        self.pos + self.data.len() as u64
    }
}

impl SendBuf {
    /// An empty buffer whose first byte will have sequence number `head`.
    pub fn new(head: Seq) -> Self {
        SendBuf { chunks: VecDeque::new(), head, head_pos: 0, len: 0, released: 0, hint: Cell::new(0) }
    }

    /// Bytes buffered (unacknowledged plus unsent).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Sequence number just past the last buffered byte.
    pub fn end(&self) -> Seq {
        self.head + self.len as u32
    }

    /// Appends one application write, kept as its own chunk.
    pub fn push(&mut self, data: Bytes) {
        self.push_write(data, false);
    }

    /// Appends `data` as a continuation of the last write: segments may
    /// span both ([`SendBuf::contiguous_from`] does not stop between them).
    pub fn push_joined(&mut self, data: Bytes) {
        self.push_write(data, true);
    }

    fn push_write(&mut self, data: Bytes, joined: bool) {
        if !data.is_empty() {
            let pos = self.head_pos + self.len as u64;
            self.len += data.len();
            self.chunks.push_back(Chunk { pos, data, joined });
        }
    }

    /// Releases everything before `seq` (clamped to what is buffered).
    pub fn ack_to(&mut self, seq: Seq) {
        if seq.le(self.head) {
            return;
        }
        let mut n = (seq - self.head).min(self.len as u32) as usize;
        self.head += n as u32;
        self.head_pos += n as u64;
        self.len -= n;
        while n > 0 {
            let front = self.chunks.front_mut().expect("len accounts for chunks");
            if front.data.len() <= n {
                n -= front.data.len();
                self.chunks.pop_front();
                self.released += 1;
            } else {
                front.data.advance(n);
                front.pos += n as u64;
                n = 0;
            }
        }
    }

    /// The chunk holding `seq` (at or after the head) and the offset in it;
    /// `None` at or past the end.
    fn locate(&self, seq: Seq) -> Option<(usize, usize)> {
        let off = (seq - self.head) as usize;
        if off >= self.len {
            return None;
        }
        let pos = self.head_pos + off as u64;
        let holds = |i: usize| self.chunks.get(i).is_some_and(|c| c.pos <= pos && pos < c.end());
        let near = self.hint.get().saturating_sub(self.released) as usize;
        let idx = if holds(near) {
            near
        } else if holds(near + 1) {
            near + 1
        } else {
            self.chunks.partition_point(|c| c.end() <= pos)
        };
        let c = self.chunks.get(idx)?;
        self.hint.set(self.released + idx as u64);
        Some((idx, (pos - c.pos) as usize))
    }

    /// Bytes from `seq` to the end of the write that holds it (its chunk
    /// and the chunks joined to it).
    pub fn contiguous_from(&self, seq: Seq) -> usize {
        if seq.lt(self.head) {
            return 0;
        }
        let Some((idx, off)) = self.locate(seq) else { return 0 };
        let rest = self.chunks.iter().skip(idx + 1).take_while(|c| c.joined).map(|c| c.data.len()).sum::<usize>();
        self.chunks[idx].data.len() - off + rest
    }

    /// The bytes `[seq, seq + len)` as zero-copy slices of the writes they
    /// lie in, in order: how the MPTCP layer hands a mapping that spans
    /// several application writes to a subflow without gathering it into a
    /// fresh allocation.
    pub fn slices(&self, seq: Seq, len: usize) -> impl Iterator<Item = Bytes> + '_ {
        debug_assert!(seq.ge(self.head) && (seq + len as u32).le(self.end()));
        let (idx, mut off) = if len > 0 { self.locate(seq).unwrap_or((self.chunks.len(), 0)) } else { (0, 0) };
        let mut need = len;
        let mut chunks = self.chunks.range(idx.min(self.chunks.len())..);
        // Stops at the last piece instead of walking the rest of the buffer.
        std::iter::from_fn(move || {
            if need == 0 {
                return None;
            }
            let c = &chunks.next()?.data;
            let take = (c.len() - off).min(need);
            let part = c.slice(off..off + take);
            off = 0;
            need -= take;
            Some(part)
        })
    }

    /// The bytes `[seq, seq + len)` as a `Bytes`: a zero-copy slice when they
    /// lie in one chunk.
    pub fn slice_bytes(&self, seq: Seq, len: usize) -> Bytes {
        if let Some((idx, off)) = self.locate(seq) {
            let c = &self.chunks[idx].data;
            if off + len <= c.len() {
                return c.slice(off..off + len);
            }
        }
        let mut scratch = Vec::new();
        Bytes::from(self.range(seq, len, &mut scratch).to_vec())
    }

    /// The bytes `[seq, seq + len)`: borrowed if they lie in one chunk,
    /// otherwise gathered into `scratch`.
    pub fn range<'a>(&'a self, seq: Seq, len: usize, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        debug_assert!(seq.ge(self.head) && (seq + len as u32).le(self.end()));
        scratch.clear();
        let Some((idx, off)) = self.locate(seq) else { return scratch };
        let c = &self.chunks[idx].data;
        if off + len <= c.len() {
            return &c[off..off + len];
        }
        for part in self.slices(seq, len) {
            scratch.extend_from_slice(&part);
        }
        scratch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_across_chunks_and_acks() {
        let mut b = SendBuf::new(Seq(u32::MAX - 2));
        b.push(Bytes::from_static(b"hello"));
        b.push(Bytes::from_static(b" "));
        b.push(Bytes::from_static(b"world"));
        let mut s = Vec::new();
        assert_eq!(b.range(Seq(u32::MAX - 2), 5, &mut s), b"hello");
        assert_eq!(b.range(Seq(u32::MAX), 6, &mut s), b"llo wo");
        b.ack_to(Seq(3)); // six bytes across the wrap
        assert_eq!(b.len(), 5);
        assert_eq!(b.range(Seq(3), 5, &mut s), b"world");
        b.ack_to(Seq(1)); // old ack: no effect
        assert_eq!(b.len(), 5);
        b.ack_to(Seq(100)); // beyond: clamps
        assert_eq!(b.len(), 0);
        assert_eq!(b.end(), Seq(8));
    }

    #[test]
    fn slices_cover_a_range_across_writes_without_copies() {
        let mut b = SendBuf::new(Seq(u32::MAX - 2));
        let (hello, world) = (Bytes::from_static(b"hello"), Bytes::from_static(b"world"));
        b.push(hello.clone());
        b.push(Bytes::from_static(b" "));
        b.push(world.clone());
        let parts: Vec<Bytes> = b.slices(Seq(u32::MAX), 7).collect();
        assert_eq!(parts, [&b"llo"[..], b" ", b"wor"]);
        assert_eq!(parts[0].as_ptr(), hello[2..].as_ptr());
        assert_eq!(parts[2].as_ptr(), world.as_ptr());
        assert_eq!(b.slices(Seq(u32::MAX - 2), 2).collect::<Vec<_>>(), [&b"he"[..]]);
        assert_eq!(b.slices(Seq(3), 5).collect::<Vec<_>>(), [&b"world"[..]]);
        assert_eq!(b.slices(Seq(3), 0).count(), 0);
    }

    #[test]
    fn lookups_agree_with_a_flat_copy_through_writes_and_acks() {
        // Many writes of odd sizes, acks that cut them in the middle, a
        // wrapping sequence space: every lookup is checked against a flat
        // copy of the stream.
        let base = Seq(u32::MAX - 5000);
        let mut b = SendBuf::new(base);
        let mut flat: Vec<u8> = Vec::new();
        let mut acked = 0usize;
        let mut x = 12345u64;
        let mut rnd = |n: usize| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) as usize % n
        };
        let mut s = Vec::new();
        let mut writes: Vec<(usize, usize, bool)> = Vec::new(); // start, end, joined
        for round in 0..400 {
            let w: Vec<u8> = (0..1 + rnd(3000)).map(|i| (flat.len() + i) as u8 ^ (round as u8)).collect();
            let joined = rnd(3) == 0;
            writes.push((flat.len(), flat.len() + w.len(), joined));
            flat.extend_from_slice(&w);
            if joined {
                b.push_joined(Bytes::from(w));
            } else {
                b.push(Bytes::from(w));
            }
            if rnd(4) == 0 {
                acked = (acked + rnd(flat.len() - acked + 1)).min(flat.len());
                b.ack_to(base + acked as u32);
            }
            assert_eq!(b.len(), flat.len() - acked);
            for _ in 0..5 {
                let off = acked + rnd(flat.len() - acked);
                let len = rnd(flat.len() - off + 1).min(5000);
                let seq = base + off as u32;
                assert_eq!(b.range(seq, len, &mut s), &flat[off..off + len], "range {off}+{len}");
                assert_eq!(b.slice_bytes(seq, len), &flat[off..off + len]);
                let joined: Vec<u8> = b.slices(seq, len).flat_map(|p| p.to_vec()).collect();
                assert_eq!(joined, &flat[off..off + len]);
                let i = writes.iter().position(|&(a, e, _)| a <= off && off < e).expect("in a write");
                let end = writes[i + 1..].iter().take_while(|w| w.2).last().map_or(writes[i].1, |w| w.1);
                assert_eq!(b.contiguous_from(seq), end - off, "contiguous from {off}");
            }
        }
    }
}
