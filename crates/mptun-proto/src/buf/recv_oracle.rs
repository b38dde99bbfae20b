//! A plain reassembly queue, the oracle of the differential test in `recv.rs`
//! and the baseline of `benches/reassembly.rs`: simple enough to trust, and
//! kept unchanged so that it stays independent of `ofo.rs`. Its out-of-order
//! merge copies the whole following range, so descending arrival is
//! quadratic. Not used by the stack.

use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, VecDeque};

/// What inserting a segment did, for the counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insert {
    /// Bytes that became readable in order.
    pub in_order: usize,
    /// The segment went to the out-of-order queue.
    pub queued_ofo: bool,
    /// It went past every range already in the out-of-order queue.
    pub tail: bool,
    /// It merged with a neighbour in the out-of-order queue.
    pub merged: bool,
    /// Every byte of it was already received.
    pub duplicate: bool,
}

#[derive(Debug, Default)]
pub(crate) struct RecvBuf {
    ready: VecDeque<Bytes>,
    ready_len: usize,
    /// Offset of the next in-order byte (`rcv_nxt` as an offset).
    next: u64,
    /// start offset → data; ranges are disjoint and non-adjacent.
    ofo: BTreeMap<u64, BytesMut>,
    ofo_len: usize,
    /// Start of the out-of-order range touched last (the first SACK block, RFC 2018).
    pub last_ofo: Option<u64>,
}

impl RecvBuf {
    pub fn next(&self) -> u64 {
        self.next
    }
    pub fn ready_len(&self) -> usize {
        self.ready_len
    }
    pub fn ofo_len(&self) -> usize {
        self.ofo_len
    }
    pub fn ofo_is_empty(&self) -> bool {
        self.ofo.is_empty()
    }

    /// Out-of-order ranges as `[start, end)` offsets, ascending.
    pub fn ofo_ranges(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.ofo.iter().map(|(&s, d)| (s, s + d.len() as u64))
    }

    /// The out-of-order range containing `off`.
    pub fn ofo_range_at(&self, off: u64) -> Option<(u64, u64)> {
        self.ofo.range(..=off).next_back().map(|(&s, d)| (s, s + d.len() as u64)).filter(|&(_, e)| e > off)
    }

    /// Inserts `data` at stream offset `off`. The caller has trimmed it to the window.
    pub fn insert(&mut self, off: u64, data: &[u8]) -> Insert {
        self.insert_with(off, data, Bytes::copy_from_slice)
    }

    /// [`RecvBuf::insert`] for data already in a `Bytes`: in-order data is
    /// queued without a copy (the MPTCP layer moves subflow chunks this way).
    pub fn insert_bytes(&mut self, off: u64, data: Bytes) -> Insert {
        let whole = data.clone();
        self.insert_with(off, &data, move |d| {
            // `d` is a suffix of `data`: slice the same allocation.
            whole.slice(whole.len() - d.len()..)
        })
    }

    fn insert_with(&mut self, off: u64, data: &[u8], to_bytes: impl FnOnce(&[u8]) -> Bytes) -> Insert {
        let mut res = Insert::default();
        let end = off + data.len() as u64;
        if data.is_empty() {
            return res;
        }
        if end <= self.next {
            res.duplicate = true;
            return res;
        }
        // Drop the already-received prefix.
        let (off, data) = if off < self.next { (self.next, &data[(self.next - off) as usize..]) } else { (off, data) };
        if off == self.next {
            let before = self.next;
            self.push_ready(to_bytes(data));
            self.next = end;
            // Pull in everything the out-of-order queue now continues.
            while let Some(entry) = self.ofo.first_entry() {
                let s = *entry.key();
                if s > self.next {
                    break;
                }
                let d = entry.remove();
                self.ofo_len -= d.len();
                let e = s + d.len() as u64;
                if e > self.next {
                    let skip = (self.next - s) as usize;
                    let b = d.freeze().slice(skip..);
                    self.push_ready(b);
                    self.next = e;
                }
            }
            if self.last_ofo.is_some_and(|l| l < self.next) {
                self.last_ofo = None;
            }
            res.in_order = (self.next - before) as usize;
            return res;
        }
        res.queued_ofo = true;
        res.tail = self.ofo.last_key_value().is_none_or(|(&s, d)| off >= s + d.len() as u64);
        res.merged = self.insert_ofo(off, data, &mut res.duplicate);
        res
    }

    fn push_ready(&mut self, b: Bytes) {
        self.ready_len += b.len();
        self.ready.push_back(b);
    }

    /// Merges `[off, off+len)` into the disjoint range set. Returns whether it
    /// touched an existing range.
    fn insert_ofo(&mut self, off: u64, data: &[u8], duplicate: &mut bool) -> bool {
        let end = off + data.len() as u64;
        let mut start = off;
        let mut merged = false;
        // Absorb a predecessor that overlaps or abuts.
        let mut buf = BytesMut::new();
        if let Some((&ps, pd)) = self.ofo.range(..=off).next_back() {
            let pe = ps + pd.len() as u64;
            if pe >= end {
                *duplicate = true;
                self.last_ofo = Some(ps);
                return true;
            }
            if pe >= off {
                let pd = self.ofo.remove(&ps).expect("present");
                self.ofo_len -= pd.len();
                start = ps;
                buf = pd;
                buf.extend_from_slice(&data[(pe - off) as usize..]);
                merged = true;
            }
        }
        if buf.is_empty() {
            buf.extend_from_slice(data);
        }
        // Absorb successors that overlap or abut.
        while let Some((&ns, _)) = self.ofo.range(start + 1..).next() {
            let cur_end = start + buf.len() as u64;
            if ns > cur_end {
                break;
            }
            let nd = self.ofo.remove(&ns).expect("present");
            self.ofo_len -= nd.len();
            let ne = ns + nd.len() as u64;
            if ne > cur_end {
                buf.extend_from_slice(&nd[(cur_end - ns) as usize..]);
            }
            merged = true;
        }
        self.ofo_len += buf.len();
        self.ofo.insert(start, buf);
        self.last_ofo = Some(start);
        merged
    }

    /// Copies up to `out.len()` in-order bytes to `out`.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(front) = self.ready.front_mut() else { break };
            let take = front.len().min(out.len() - n);
            out[n..n + take].copy_from_slice(&front[..take]);
            n += take;
            if take == front.len() {
                self.ready.pop_front();
            } else {
                let _ = front.split_to(take);
            }
        }
        self.ready_len -= n;
        n
    }

    /// Takes the next in-order chunk, at most `max` bytes, without copying.
    pub fn read_chunk(&mut self, max: usize) -> Option<Bytes> {
        let front = self.ready.front_mut()?;
        let b = if front.len() <= max { self.ready.pop_front()? } else { front.split_to(max) };
        self.ready_len -= b.len();
        Some(b)
    }
}
