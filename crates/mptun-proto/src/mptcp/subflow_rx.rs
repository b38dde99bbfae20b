//! What a subflow received at the data level (Linux keeps it in
//! `mptcp_subflow_context`: `map_seq`, `map_subflow_seq`, `map_data_len`,
//! and on the skbs of the subflow's receive queue): the mapping its next
//! bytes are read under, the mappings that came ahead of them, and where an
//! infinite mapping continues after a fallback. The fields are private: the
//! receive path (`rx.rs`) files and takes mappings and the fallback
//! (`fallback.rs`) sets where the infinite mapping starts, through the
//! methods below.

use crate::seq::{DataSeq, Seq};
use std::collections::VecDeque;

/// Most mappings a subflow keeps ahead of its data (each came with at
/// least one in-window byte, so the window bounds them too).
const MAX_AHEAD: usize = 65536;

/// A received mapping that cannot be: it contradicts one already in place
/// (Linux `MPTcpExtDSSNotMatching`), or the data it came with is not in it.
pub(crate) struct BadMapping;

/// A DSS mapping received on a subflow: `len` bytes from relative subflow
/// sequence `ssn` (1 = first data byte, modulo 2^32) carry data sequence
/// `dsn` on. Linux keeps the same in the subflow context (`map_seq`,
/// `map_subflow_seq`, `map_data_len`, `map_csum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RxMap {
    pub ssn: Seq,
    pub dsn: DataSeq,
    pub len: u32,
    /// DSS checksum of the mapping, when the peer sent one.
    pub csum: Option<u16>,
    /// The mapping carried the DATA_FIN: its data-level length on the wire,
    /// which the checksum's pseudo-header holds, is `len + 1` (Linux
    /// `map_data_fin`, added back in `validate_data_csum`).
    pub fin: bool,
}

impl RxMap {
    /// The mapping of a whole stream from `ssn` at `dsn` on: what the
    /// subflow's bytes are read under after a fallback (in 1 GiB steps).
    pub fn infinite(ssn: Seq, dsn: DataSeq) -> RxMap {
        RxMap { ssn, dsn, len: 1 << 30, csum: None, fin: false }
    }
    /// The relative subflow sequence just past the mapping.
    pub fn end(&self) -> Seq {
        self.ssn + self.len
    }
    /// The data sequence just past the mapping.
    pub fn dsn_end(&self) -> DataSeq {
        self.dsn + self.len as u64
    }
    /// Whether relative subflow sequence `ssn` lies inside the mapping.
    pub fn contains(&self, ssn: Seq) -> bool {
        ssn - self.ssn < self.len
    }
    /// Whether the two mappings share a subflow byte.
    pub fn overlaps(&self, o: &RxMap) -> bool {
        self.contains(o.ssn) || o.contains(self.ssn)
    }
}

/// The receive side of a subflow at the data level: the mappings its bytes
/// are read under (the mapping bookkeeping is here; `rx.rs` drives it).
#[derive(Debug)]
pub(crate) struct SubflowRx {
    /// The mapping the subflow's next bytes are read under (Linux keeps
    /// exactly one per subflow).
    map: Option<RxMap>,
    /// Mappings that came with data beyond the current mapping (on
    /// out-of-order segments, or on a segment that starts inside the current
    /// mapping): Linux keeps them on the skb that carried them until that
    /// skb reaches the head of the queue. In subflow sequence order, never
    /// overlapping, all inside the subflow's receive window.
    ahead: VecDeque<RxMap>,
    /// (relative ssn, data sequence) just past the last mapping taken:
    /// where an infinite mapping continues after a fallback.
    last_end: Option<(Seq, DataSeq)>,
    /// Where the infinite mapping starts after a fallback (relative ssn and
    /// its data sequence): a mapping the peer still sends must agree with it
    /// (see `SubflowSlot::contradicts_infinite`).
    infinite_at: Option<(Seq, DataSeq)>,
    /// Relative ssn and payload length of the segment being processed (the
    /// one whose options are read).
    seg: (Seq, u32),
    /// Accepted segments in a row that acknowledged new data without any
    /// MPTCP option: the evidence a sender has that a middlebox strips its
    /// peer's options (one forged ACK is not enough to fall back).
    optless_acks: u8,
}

impl Default for SubflowRx {
    fn default() -> Self {
        SubflowRx {
            map: None,
            ahead: VecDeque::new(),
            last_end: None,
            infinite_at: None,
            seg: (Seq(0), 0),
            optless_acks: 0,
        }
    }
}

impl SubflowRx {
    /// The segment being processed: relative ssn and payload length.
    pub fn set_segment(&mut self, ssn: Seq, len: u32) {
        self.seg = (ssn, len);
    }

    /// The segment being processed.
    pub fn seg(&self) -> (Seq, u32) {
        self.seg
    }

    /// The mapping the next bytes are read under.
    pub fn map(&self) -> Option<RxMap> {
        self.map
    }

    /// The mappings kept ahead of the data, in subflow sequence order.
    pub fn ahead(&self) -> &VecDeque<RxMap> {
        &self.ahead
    }

    /// Where the last mapping taken ended: (relative ssn, data sequence).
    pub fn last_end(&self) -> Option<(Seq, DataSeq)> {
        self.last_end
    }

    /// Where the infinite mapping starts after a fallback.
    pub fn infinite_at(&self) -> Option<(Seq, DataSeq)> {
        self.infinite_at
    }

    /// ACKs of new data in a row without MPTCP options.
    pub fn optless_acks(&self) -> u8 {
        self.optless_acks
    }

    /// An accepted segment came with MPTCP options (`with_options`) or
    /// without, acknowledging new data (`acked_new`) or not: the run of
    /// option-less ACKs of new data is counted.
    pub fn on_ack_options(&mut self, with_options: bool, acked_new: bool) {
        if with_options {
            self.optless_acks = 0;
        } else if acked_new {
            self.optless_acks = self.optless_acks.saturating_add(1);
        }
    }

    /// The mapping read now is dropped (its checksum failed and the subflow resets).
    pub fn drop_current(&mut self) {
        self.map = None;
    }

    /// Every mapping is dropped (the subflow resets on an invalid one).
    pub fn drop_mappings(&mut self) {
        self.map = None;
        self.ahead.clear();
    }

    /// After a fallback the mappings received are honoured to their end;
    /// the infinite mapping continues from the last of them (or, with none,
    /// from relative ssn `next` at data sequence `rcv_nxt`).
    pub fn resume_after_mapped(&mut self, next: Seq, rcv_nxt: DataSeq) {
        let last = self.ahead.back().or(self.map.as_ref()).map(|m| (m.end(), m.dsn_end()));
        let cont = last.or(self.last_end.filter(|&(ssn, _)| ssn.ge(next))).unwrap_or((next, rcv_nxt));
        // (Should bytes lie unmapped between `next` and `cont`,
        // the drain finds them and resets: never a silent gap.)
        self.last_end = Some(cont);
        self.infinite_at = Some(cont);
    }

    /// After a fallback at the mapping `m` whose checksum failed: the
    /// infinite mapping starts at it.
    pub fn resume_at_failed(&mut self, m: RxMap) {
        self.ahead.clear();
        self.map = Some(RxMap::infinite(m.ssn, m.dsn));
        self.infinite_at = Some((m.ssn, m.dsn));
    }

    /// After the peer's infinite mapping: from relative ssn `ssn` on the
    /// subflow's bytes continue the data sequence at `dsn` (what
    /// [`SubflowRx::current_map`] reads once the known mappings are used up).
    pub fn resume_at(&mut self, ssn: Seq, dsn: DataSeq) {
        self.ahead.retain(|x| x.ssn.lt(ssn));
        self.last_end = Some((ssn, dsn));
        self.infinite_at = Some((ssn, dsn));
    }

    /// Files a mapping that came with the segment being processed (`next`:
    /// the subflow's next relative ssn to read): dropped if its
    /// data was already read, an error unless it maps a byte of that
    /// segment or if it contradicts a mapping already known for the same
    /// subflow bytes. Mappings that only repeat (part of) a known one are
    /// absorbed; the new bytes of one that extends a known one consistently
    /// are kept (not with DSS checksums, `csum`, which cover a mapping whole).
    pub fn add_mapping(&mut self, next: Seq, csum: bool, map: RxMap) -> Result<(), BadMapping> {
        let rx = self;
        let (seg_ssn, seg_len) = rx.seg;
        if seg_len == 0 {
            // Linux attaches a mapping to the skb of its data; a data-less
            // segment's mapping (other than a DATA_FIN) goes nowhere.
            return Ok(());
        }
        if map.end().le(next) {
            // All read already: a retransmission.
            return Ok(());
        }
        let seg = RxMap { ssn: seg_ssn, dsn: DataSeq(0), len: seg_len, csum: None, fin: false };
        if !map.overlaps(&seg) {
            return Err(BadMapping);
        }
        // The pieces of `map` no known mapping covers. `ahead` is sorted
        // and without overlaps, so only the run of mappings that overlap
        // `map` is looked at (found by binary search): a peer cannot make
        // each new mapping cost a scan of all those kept.
        let key = |s: Seq| (s - next) as i32;
        let lo = rx.ahead.partition_point(|m| key(m.end()) <= key(map.ssn));
        let hi = rx.ahead.partition_point(|m| key(m.ssn) < key(map.end())).max(lo);
        // The common case, a mapping repeated on every wire segment it
        // covers: known already, nothing to file (and nothing allocated).
        if rx.map.iter().chain(rx.ahead.range(lo..hi)).any(|known| *known == map) {
            return Ok(());
        }
        let mut pieces = vec![map];
        for known in rx.map.iter().chain(rx.ahead.range(lo..hi)) {
            if *known == map {
                return Ok(());
            }
            let mut rest = Vec::with_capacity(pieces.len() + 1);
            for p in pieces {
                if !p.overlaps(known) {
                    rest.push(p);
                    continue;
                }
                // Both must put the shared bytes at the same data sequence.
                let (a, b) = if p.ssn.le(known.ssn) { (p, *known) } else { (*known, p) };
                if a.dsn + (b.ssn - a.ssn) as u64 != b.dsn {
                    return Err(BadMapping);
                }
                if p.ssn.lt(known.ssn) {
                    rest.push(RxMap { len: known.ssn - p.ssn, ..p });
                }
                if known.end().lt(p.end()) {
                    let cut = known.end() - p.ssn;
                    rest.push(RxMap { ssn: known.end(), dsn: p.dsn + cut as u64, len: p.len - cut, ..p });
                }
            }
            pieces = rest;
        }
        for p in pieces {
            if p.len != map.len && csum && map.csum.is_some() {
                // Only part of a checksummed mapping would be kept.
                return Err(BadMapping);
            }
            if p.end().le(next) {
                continue;
            }
            if rx.ahead.len() >= MAX_AHEAD {
                return Err(BadMapping);
            }
            let at = rx.ahead.partition_point(|m| key(m.ssn) < key(p.ssn));
            rx.ahead.insert(at, p);
        }
        Ok(())
    }

    /// The mapping that covers relative ssn `next`, made current: the
    /// current one, else the first one kept ahead (those wholly before
    /// `next` are dropped), else after a fallback (`infinite`) the infinite
    /// mapping's continuation. `None` when no mapping covers `next`.
    pub fn current_map(&mut self, infinite: bool, next: Seq) -> Option<RxMap> {
        let rx = self;
        loop {
            if let Some(m) = rx.map {
                if m.contains(next) {
                    return Some(m);
                }
                if m.ssn.gt(next) {
                    return None;
                }
                rx.last_end = Some((m.end(), m.dsn_end()));
                rx.map = None;
            }
            match rx.ahead.front() {
                Some(a) if a.end().le(next) => {
                    rx.ahead.pop_front();
                }
                Some(a) if a.contains(next) => rx.map = rx.ahead.pop_front(),
                Some(_) => return None,
                None => match rx.last_end {
                    // After a fallback the stream goes on where the last
                    // mapping ended, without end.
                    Some((ssn, dsn)) if infinite && ssn == next => rx.map = Some(RxMap::infinite(ssn, dsn)),
                    _ => return None,
                },
            }
        }
    }
}
