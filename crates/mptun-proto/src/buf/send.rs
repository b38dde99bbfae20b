//! The send side's byte store: everything from `snd_una` on, acknowledged data
//! released as soon as it is acknowledged.
//!
//! Application writes are kept as the `Bytes` they arrived in (no copy, no
//! coalescing); a segment that spans two writes is gathered at emission, where
//! a copy into the packet buffer happens anyway.

use crate::seq::Seq;
use bytes::{Buf, Bytes};
use std::collections::VecDeque;

/// Bytes written by the application from the oldest unacknowledged one on,
/// addressed by sequence number.
#[derive(Debug)]
pub(crate) struct SendBuf {
    chunks: VecDeque<Bytes>,
    /// Per chunk: it continues the write before it (one MPTCP mapping
    /// grown by a later write), so no segment boundary falls between them.
    joined: VecDeque<bool>,
    /// Sequence number of the first byte of `chunks[0]`.
    head: Seq,
    len: usize,
}

impl SendBuf {
    /// An empty buffer whose first byte will have sequence number `head`.
    pub fn new(head: Seq) -> Self {
        SendBuf { chunks: VecDeque::new(), joined: VecDeque::new(), head, len: 0 }
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
            self.len += data.len();
            self.chunks.push_back(data);
            self.joined.push_back(joined);
        }
    }

    /// Releases everything before `seq` (clamped to what is buffered).
    pub fn ack_to(&mut self, seq: Seq) {
        if seq.le(self.head) {
            return;
        }
        let mut n = (seq - self.head).min(self.len as u32) as usize;
        self.head += n as u32;
        self.len -= n;
        while n > 0 {
            let front = self.chunks.front_mut().expect("len accounts for chunks");
            if front.len() <= n {
                n -= front.len();
                self.chunks.pop_front();
                self.joined.pop_front();
            } else {
                front.advance(n);
                n = 0;
            }
        }
    }

    /// Bytes from `seq` to the end of the write that holds it (its chunk
    /// and the chunks joined to it).
    pub fn contiguous_from(&self, seq: Seq) -> usize {
        if seq.lt(self.head) {
            return 0;
        }
        let mut off = (seq - self.head) as usize;
        for (i, c) in self.chunks.iter().enumerate() {
            if off < c.len() {
                let rest = self.chunks.iter().zip(&self.joined).skip(i + 1);
                return c.len() - off + rest.take_while(|(_, &j)| j).map(|(c, _)| c.len()).sum::<usize>();
            }
            off -= c.len();
        }
        0
    }

    /// The bytes `[seq, seq + len)` as zero-copy slices of the writes they
    /// lie in, in order: how the MPTCP layer hands a mapping that spans
    /// several application writes to a subflow without gathering it into a
    /// fresh allocation.
    pub fn slices(&self, seq: Seq, len: usize) -> impl Iterator<Item = Bytes> + '_ {
        debug_assert!(seq.ge(self.head) && (seq + len as u32).le(self.end()));
        let mut off = (seq - self.head) as usize;
        let mut need = len;
        let mut chunks = self.chunks.iter();
        // Stops at the last piece instead of walking the rest of the buffer.
        std::iter::from_fn(move || {
            while need > 0 {
                let c = chunks.next()?;
                if off >= c.len() {
                    off -= c.len();
                    continue;
                }
                let take = (c.len() - off).min(need);
                let part = c.slice(off..off + take);
                off = 0;
                need -= take;
                return Some(part);
            }
            None
        })
    }

    /// The bytes `[seq, seq + len)` as a `Bytes`: a zero-copy slice when they
    /// lie in one chunk.
    pub fn slice_bytes(&self, seq: Seq, len: usize) -> Bytes {
        let mut scratch = Vec::new();
        let mut off = (seq - self.head) as usize;
        for c in &self.chunks {
            if off < c.len() {
                if off + len <= c.len() {
                    return c.slice(off..off + len);
                }
                break;
            }
            off -= c.len();
        }
        Bytes::from(self.range(seq, len, &mut scratch).to_vec())
    }

    /// The bytes `[seq, seq + len)`: borrowed if they lie in one chunk,
    /// otherwise gathered into `scratch`.
    pub fn range<'a>(&'a self, seq: Seq, len: usize, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        debug_assert!(seq.ge(self.head) && (seq + len as u32).le(self.end()));
        let mut off = (seq - self.head) as usize;
        let mut idx = 0;
        while idx < self.chunks.len() && off >= self.chunks[idx].len() {
            off -= self.chunks[idx].len();
            idx += 1;
        }
        if idx < self.chunks.len() && off + len <= self.chunks[idx].len() {
            return &self.chunks[idx][off..off + len];
        }
        scratch.clear();
        let mut need = len;
        while need > 0 && idx < self.chunks.len() {
            let c = &self.chunks[idx][off..];
            let take = c.len().min(need);
            scratch.extend_from_slice(&c[..take]);
            need -= take;
            off = 0;
            idx += 1;
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
}
