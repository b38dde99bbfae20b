//! The receive path (the receive half of Linux `subflow.c` and
//! `protocol.c`): DSS mappings received on each subflow, the data they map
//! moved into the connection-level reassembly queue in data sequence order,
//! the 32-bit DSN expansion, the fallback to an infinite mapping when a
//! middlebox strips the options, and the connection-level receive window.

use super::{Connection, JoinState, Mode, RxMap, Shared, SubflowExt, MPTCP_RST_EMIDDLEBOX, MPTCP_RST_EMPTCP};
use crate::buf::{mem_budget, unpin, RecvBuf, Src};
use crate::seq::{DataSeq, Seq};
use crate::tcp::{BufferSize, Subflow};
use bytes::Bytes;
use mptun_time::Instant;
use mptun_wire::checksum::dss_checksum;
use mptun_wire::mptcp::DssMapping;
use mptun_wire::tcp::OptionSummary;
use mptun_wire::TcpHeader;

/// The advertised MSS assumed before a subflow has one: a 1500-byte
/// Ethernet MTU less IPv4 and TCP headers and the timestamp option
/// (1500 - 20 - 20 - 12). Linux has no constant for it; its `advmss` comes
/// from the route.
pub(super) const DEFAULT_ADVMSS: usize = 1448;

/// 32-bit DSN or data-ACK expansion against a 64-bit reference (RFC 8684 3.3.1).
pub(super) fn expand32(v: u64, reference: u64) -> u64 {
    let low = v & 0xffff_ffff;
    let cand = (reference & !0xffff_ffff) | low;
    // Pick the candidate closest to the reference, modulo 2^64 (a data
    // sequence space may cross the wrap).
    [cand.wrapping_sub(1 << 32), cand, cand.wrapping_add(1 << 32)]
        .into_iter()
        .min_by_key(|c| (c.wrapping_sub(reference) as i64).unsigned_abs())
        .expect("three candidates")
}

/// Whether a received DSS checksum equals the one computed: equal, or the
/// two ones'-complement zeros (0x0000 and 0xffff) for each other (Linux sums
/// the received checksum in and tests the folded result for zero).
fn checksum_matches(computed: u16, received: u16) -> bool {
    computed == received || (computed, received) == (0, 0xffff) || (computed, received) == (0xffff, 0)
}

/// Most mappings a subflow keeps ahead of its data (each came with at
/// least one in-window byte, so the window bounds them too).
const MAX_AHEAD: usize = 65536;

/// A received mapping that cannot be: it contradicts one already in place
/// (Linux `MPTcpExtDSSNotMatching`), or the data it came with is not in it.
pub(super) struct BadMapping;

/// ACKs of new data in a row without MPTCP options after which a sender
/// takes the peer's options as stripped (three, like the duplicate-ACK
/// threshold: a middlebox strips every one, a forged ACK is a single one).
const OPTLESS_ACKS_FALLBACK: u8 = 3;

impl Connection {
    /// A DSS mapping received on an acceptable segment of a subflow. As in
    /// Linux it counts only together with the data it came with (it must
    /// map at least one byte of that segment), and a mapping that
    /// contradicts one already known resets the subflow. A DATA_FIN takes
    /// the mapping's last data sequence number.
    pub(super) fn on_mapping(sh: &mut Shared, sf: &mut Subflow, ext: &mut SubflowExt, m: &DssMapping, data_fin: bool) {
        // Nothing can be mapped before the peer's key (and so its IDSN) is
        // known, and after a fallback options are ignored (Linux
        // `mptcp_incoming_options` returns early once fallen back).
        if sh.rx_base.is_none() || sh.infinite {
            return;
        }
        let dsn = DataSeq(if m.dsn64 { m.dsn } else { expand32(m.dsn, sh.rcv_nxt.0) });
        let mut len = m.len as u32;
        if data_fin {
            // The DATA_FIN takes the last data sequence number of the mapping.
            Self::on_data_fin(sh, dsn + (len.max(1) as u64 - 1));
            len = len.saturating_sub(1);
        }
        if len == 0 {
            return;
        }
        let map = RxMap { ssn: Seq(m.ssn), dsn, len, csum: m.checksum, fin: data_fin };
        if Self::add_mapping(sh, sf, ext, map).is_err() {
            Self::mapping_error(sh, sf, ext);
        }
    }

    /// The first data of the client may come with the third-ACK MP_CAPABLE
    /// (RFC 8684 3.1: data length and checksum, the mapping implied at
    /// relative sequence 1 and the peer's IDSN + 1).
    pub(super) fn on_capable_mapping(
        sh: &mut Shared,
        sf: &mut Subflow,
        ext: &mut SubflowExt,
        len: u16,
        checksum: Option<u16>,
    ) {
        if let Some(base) = sh.rx_base.filter(|_| !sh.infinite) {
            let map = RxMap { ssn: Seq(1) + sh.ssn_off(), dsn: base, len: len as u32, csum: checksum, fin: false };
            if len > 0 && Self::add_mapping(sh, sf, ext, map).is_err() {
                Self::mapping_error(sh, sf, ext);
            }
        }
    }

    /// The peer's DATA_FIN at `fin`: taken only inside the receive window we
    /// offered, and only the first (Linux `mptcp_update_rcv_data_fin`
    /// ignores every later one: they may be retransmissions).
    fn on_data_fin(sh: &mut Shared, fin: DataSeq) {
        if sh.peer_data_fin.is_some() {
            return;
        }
        // The DATA_FIN follows the last data byte: within the window too.
        if fin.ge(sh.rcv_nxt) && fin.le(sh.accept_edge()) {
            sh.peer_data_fin = Some(fin);
        }
    }

    /// Files a mapping that came with the segment `ext.rx_seg`: dropped if
    /// its data was already read, an error unless it maps a byte of that
    /// segment or if it contradicts a mapping already known for the same
    /// subflow bytes. Mappings that only repeat (part of) a known one are
    /// absorbed; the new bytes of one that extends a known one consistently
    /// are kept (not with DSS checksums, which cover a mapping whole).
    fn add_mapping(sh: &Shared, sf: &Subflow, ext: &mut SubflowExt, map: RxMap) -> Result<(), BadMapping> {
        let (seg_ssn, seg_len) = ext.rx_seg;
        if seg_len == 0 {
            // Linux attaches a mapping to the skb of its data; a data-less
            // segment's mapping (other than a DATA_FIN) goes nowhere.
            return Ok(());
        }
        let next = Self::next_ssn(sh, sf);
        if map.end().le(next) {
            // All read already: a retransmission.
            return Ok(());
        }
        let seg = RxMap { ssn: seg_ssn, dsn: DataSeq(0), len: seg_len, csum: None, fin: false };
        if !map.overlaps(&seg) {
            return Err(BadMapping);
        }
        // The pieces of `map` no known mapping covers. `rx_ahead` is sorted
        // and without overlaps, so only the run of mappings that overlap
        // `map` is looked at (found by binary search): a peer cannot make
        // each new mapping cost a scan of all those kept.
        let key = |s: Seq| (s - next) as i32;
        let lo = ext.rx_ahead.partition_point(|m| key(m.end()) <= key(map.ssn));
        let hi = ext.rx_ahead.partition_point(|m| key(m.ssn) < key(map.end())).max(lo);
        // The common case, a mapping repeated on every wire segment it
        // covers: known already, nothing to file (and nothing allocated).
        if ext.rx_map.iter().chain(ext.rx_ahead.range(lo..hi)).any(|known| *known == map) {
            return Ok(());
        }
        let mut pieces = vec![map];
        for known in ext.rx_map.iter().chain(ext.rx_ahead.range(lo..hi)) {
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
            if p.len != map.len && sh.csum && map.csum.is_some() {
                // Only part of a checksummed mapping would be kept.
                return Err(BadMapping);
            }
            if p.end().le(next) {
                continue;
            }
            if ext.rx_ahead.len() >= MAX_AHEAD {
                return Err(BadMapping);
            }
            let at = ext.rx_ahead.partition_point(|m| key(m.ssn) < key(p.ssn));
            ext.rx_ahead.insert(at, p);
        }
        Ok(())
    }

    /// A mapping the peer cannot have sent: reset the subflow (Linux
    /// `MAPPING_INVALID` on a subflow that cannot fall back: MP_TCPRST
    /// "MPTCP-specific error"); its unacknowledged data is reinjected
    /// elsewhere as for any failed subflow.
    pub(super) fn mapping_error(sh: &mut Shared, sf: &mut Subflow, ext: &mut SubflowExt) {
        sh.counters.mptcp_dss_not_matching += 1;
        ext.rx_map = None;
        ext.rx_ahead.clear();
        ext.rst_reason = Some(MPTCP_RST_EMPTCP);
        sh.counters.mptcp_mp_rst_tx += 1;
        sf.abort();
    }

    /// Relative ssn of the next byte the subflow would hand out.
    pub(super) fn next_ssn(sh: &Shared, sf: &Subflow) -> Seq {
        Seq(sf.recv_offset() as u32) + 1 + sh.ssn_off()
    }

    /// The mapping that covers relative ssn `next`, made current: the
    /// current one, else the first one kept ahead (those wholly before
    /// `next` are dropped), else in fallback mode the infinite mapping's
    /// continuation. `None` when no mapping covers `next`.
    fn current_map(infinite: bool, ext: &mut SubflowExt, next: Seq) -> Option<RxMap> {
        loop {
            if let Some(m) = ext.rx_map {
                if m.contains(next) {
                    return Some(m);
                }
                if m.ssn.gt(next) {
                    return None;
                }
                ext.rx_last_end = Some((m.end(), m.dsn_end()));
                ext.rx_map = None;
            }
            match ext.rx_ahead.front() {
                Some(a) if a.end().le(next) => {
                    ext.rx_ahead.pop_front();
                }
                Some(a) if a.contains(next) => ext.rx_map = ext.rx_ahead.pop_front(),
                Some(_) => return None,
                None => match ext.rx_last_end {
                    // After a fallback the stream goes on where the last
                    // mapping ended, without end (in 1 GiB steps).
                    Some((ssn, dsn)) if infinite && ssn == next => {
                        ext.rx_map = Some(RxMap { ssn, dsn, len: 1 << 30, csum: None, fin: false });
                    }
                    _ => return None,
                },
            }
        }
    }

    /// A middlebox stripped our options mid-stream: data without any MPTCP
    /// option on the only subflow once fully established, or a run of ACKs
    /// of new data without options (before full establishment, a client
    /// takes the first such ACK). Fall back to an infinite mapping (RFC 8684 3.7): the
    /// mappings already received are honoured to their end, and the
    /// subflow's bytes from there on continue the data sequence exactly
    /// where the last of them ends.
    pub(super) fn detect_fallback(
        &mut self,
        idx: usize,
        hdr: &TcpHeader,
        opts: &OptionSummary,
        payload: &[u8],
        (single_subflow, ofo_empty, acked_new): (bool, bool, bool),
    ) {
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let sh = &mut self.shared;
        let f = hdr.flags;
        if !opts.mptcp.is_empty() {
            ext.optless_acks = 0;
        } else if acked_new {
            ext.optless_acks = ext.optless_acks.saturating_add(1);
        }
        if sh.mode == Mode::Mptcp
            && !sh.infinite
            // A client whose first established segments carry no option
            // falls back too (Linux `check_fully_established`).
            && (sh.fully_established || !sh.server)
            && opts.mptcp.is_empty()
            && !f.syn()
            && !f.rst()
            // Data without a DSS proves the stripping (Linux
            // `get_mapping_status`). A sender that gets only pure ACKs needs
            // OPTLESS_ACKS_FALLBACK of them in a row acknowledging new data,
            // so one forged ACK cannot force a fallback; before it is fully
            // established a client takes the first (`check_fully_established`).
            && (!payload.is_empty()
                || ext.optless_acks >= OPTLESS_ACKS_FALLBACK
                || (!sh.fully_established && sf.snd_una() != sf.iss() + 1))
            && ext.join == super::JoinState::Initial
            && single_subflow
            && ofo_empty
        {
            if !sh.allow_infinite_fallback {
                // Linux `mptcp_subflow_reset` when `mptcp_try_fallback` fails.
                ext.rst_reason = Some(MPTCP_RST_EMIDDLEBOX);
                sh.counters.mptcp_mp_rst_tx += 1;
                sf.abort();
                return;
            }
            sh.counters.mptcp_dss_fallback += 1;
            Self::fall_back(sh, sf, ext);
        }
    }

    /// Falls back to an infinite mapping on the only subflow: the mappings
    /// already received are honoured to their end, and the subflow's bytes
    /// from there on continue the data sequence where the last of them ends.
    pub(super) fn fall_back(sh: &mut Shared, sf: &Subflow, ext: &mut SubflowExt) {
        sh.infinite = true;
        // Where the mapped data ends: the last mapping known, else the
        // last one read, else the subflow's next byte at rcv_nxt.
        let next = Self::next_ssn(sh, sf);
        let last = ext.rx_ahead.back().or(ext.rx_map.as_ref()).map(|m| (m.end(), m.dsn_end()));
        let cont = last.or(ext.rx_last_end.filter(|&(ssn, _)| ssn.ge(next))).unwrap_or((next, sh.rcv_nxt));
        // (Should bytes lie unmapped between `next` and `cont`,
        // drain_mappings finds them and resets: never a silent gap.)
        ext.rx_last_end = Some(cont);
        ext.rx_infinite_at = Some(cont);
    }

    /// A DSS mapping received after a fallback. Linux ignores them; but a
    /// peer that still sends one has not fallen back (a middlebox stripped
    /// only what made us fall back), and it may put data-level copies (a
    /// retransmission, a window probe) on this subflow at new subflow
    /// sequence numbers. Read as the stream, such a copy would be delivered
    /// twice. So a mapping that puts bytes of the infinite part at another
    /// data sequence number than the infinite mapping does is a protocol
    /// error (the subflow is reset before anything of the segment is read);
    /// one that agrees, or covers only bytes before the fallback, or none of
    /// the segment's, changes nothing.
    pub(super) fn contradicts_infinite(sh: &Shared, ext: &SubflowExt, m: &DssMapping, data_fin: bool) -> bool {
        let Some((at_ssn, at_dsn)) = ext.rx_infinite_at else { return false };
        let (seg_ssn, seg_len) = ext.rx_seg;
        let len = (m.len as u32).saturating_sub(data_fin as u32);
        if seg_len == 0 || len == 0 {
            return false;
        }
        let dsn = DataSeq(if m.dsn64 { m.dsn } else { expand32(m.dsn, sh.rcv_nxt.0) });
        let map = RxMap { ssn: Seq(m.ssn), dsn, len, csum: None, fin: false };
        let seg = RxMap { ssn: seg_ssn, dsn: DataSeq(0), len: seg_len, csum: None, fin: false };
        if !map.overlaps(&seg) || map.end().le(at_ssn) {
            return false;
        }
        let from = if map.ssn.ge(at_ssn) { map.ssn } else { at_ssn };
        map.dsn + (from - map.ssn) as u64 != at_dsn + (from - at_ssn) as u64
    }

    /// The subflow's FIN after a fallback: it is the DATA_FIN only if every
    /// byte the subflow acknowledged made it into the connection and the
    /// stream is contiguous up to it; anything else is an error for the
    /// application, never an end of stream. `true` for a clean end.
    pub(super) fn fallback_fin_in_order(&mut self, idx: usize) -> bool {
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return false };
        let next = Self::next_ssn(&self.shared, sf);
        let at = match ext.rx_map {
            Some(m) if next - m.ssn <= m.len => Some(m.dsn + (next - m.ssn) as u64),
            _ => ext.rx_last_end.filter(|&(ssn, _)| ssn == next).map(|(_, dsn)| dsn),
        };
        sf.recv_ready() == 0 && self.rcv_buf.ofo_is_empty() && at == Some(self.shared.rcv_nxt)
    }

    /// After a fallback no DATA_ACK comes: what the single subflow has
    /// acknowledged is acknowledged at the data level.
    pub(super) fn fallback_una(&mut self) {
        if let Some((sf, ext)) = self.subflows.iter().flatten().next() {
            let sf_una = sf.snd_una() - (sf.iss() - self.shared.ssn_off()).0;
            let mut una = self.shared.snd_una;
            for m in &ext.tx_maps {
                let start = Seq(m.ssn);
                if sf_una.lt(start) {
                    break;
                }
                let into = sf_una - start;
                una = una.max(m.dsn + (into.min(m.len)) as u64);
                if into < m.len {
                    break;
                }
            }
            self.shared.snd_una = una;
            let wnd = sf.info().snd_wnd as u64;
            self.shared.wnd_end = self.shared.wnd_end.max(una + wnd);
        }
    }

    /// Moves what subflow `idx` delivered into the connection, mapping by
    /// mapping, then sees whether the peer's DATA_FIN is now in order.
    pub(super) fn drain_subflow(&mut self, now: Instant, idx: usize) {
        if self.subflows.get(idx).and_then(|s| s.as_ref()).is_none() {
            return;
        }
        let Some(base) = self.shared.rx_base else { return };
        self.drain_mappings(now, idx, base);
        self.peer_data_fin_in_order(idx);
    }

    /// The mapping loop of [`Connection::drain_subflow`] (Linux
    /// `subflow_check_data_avail` with `get_mapping_status`): in-order
    /// subflow data is read under the mapping that covers it; data no
    /// mapping covers is a protocol error that resets the subflow.
    fn drain_mappings(&mut self, now: Instant, idx: usize, base: DataSeq) {
        let alone = self.subflows.iter().flatten().count() == 1;
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let sh = &mut self.shared;
        while sf.recv_ready() > 0 {
            let next = Self::next_ssn(sh, sf);
            let Some(map) = Self::current_map(sh.infinite, ext, next) else {
                Self::mapping_error(sh, sf, ext);
                break;
            };
            let into = next - map.ssn;
            let Some(chunk) = Self::read_mapped(sh, sf, ext, now, map, into, alone) else { break };
            let dsn = map.dsn + into as u64;
            let end = dsn + chunk.len() as u64;
            // A mapping that puts data before the data sequence space is a
            // broken or hostile peer: reset the subflow as Linux does for an
            // invalid mapping.
            if dsn.lt(base) {
                Self::mapping_error(sh, sf, ext);
                break;
            }
            if end.le(sh.rcv_nxt) {
                sh.counters.mptcp_duplicate_data += 1;
            } else if !sh.infinite && end.gt(sh.accept_edge()) {
                // Past the right edge of the largest window we announced and
                // the slack a Linux sender needs (`Shared::accept_edge`): the
                // peer ignores the window. Dropped (Linux
                // `mptcp_data_queue_ofo`, `MPTcpExtNoDSSInWindow`); the DATA_ACK
                // does not cover it. (After a fallback the subflow's own
                // window is the limit.)
                sh.counters.mptcp_no_dss_in_window += 1;
            } else if let Some(spare) = Self::admit(sh, &mut self.rcv_buf, dsn - base, chunk.len()) {
                let off = dsn - base;
                let ins = self.rcv_buf.insert_within(off, Src::Bytes(unpin(chunk)), spare);
                if ins.queued_ofo {
                    sh.counters.mptcp_ofo_queue += 1;
                    sh.counters.mptcp_ofo_queue_tail += ins.tail as u64;
                    sh.counters.mptcp_ofo_merge += ins.merged as u64;
                }
                if ins.duplicate {
                    sh.counters.mptcp_duplicate_data += 1;
                }
            }
            sh.rcv_nxt = base + self.rcv_buf.next();
        }
    }

    /// Makes room for `len` bytes at offset `off` of the connection's receive
    /// queue within its memory budget (Linux `mptcp_rmem_schedule`): the
    /// out-of-order tail past them is pruned first (`MPTcpExtOFOPruned`);
    /// `None` when they still do not fit and are dropped (`MPTcpExtRcvPruned`:
    /// not DATA_ACKed, so the peer sends them again), else the spare room
    /// their insert may take ([`crate::buf::RecvBuf::insert_within`]). After
    /// a fallback the subflow's own budget is the limit.
    fn admit(sh: &mut Shared, rcv_buf: &mut RecvBuf, off: u64, len: usize) -> Option<usize> {
        if sh.infinite {
            return Some(usize::MAX);
        }
        let room = rcv_buf.make_room(off, len, mem_budget(sh.recv_limit));
        sh.counters.mptcp_ofo_pruned += (room.pruned_chunks > 0) as u64;
        sh.counters.mptcp_rcv_pruned += !room.fits as u64;
        room.fits.then_some(room.spare)
    }

    /// The next bytes of the mapping `(ssn, dsn, len, checksum)`, `into`
    /// bytes in, from the subflow; `None` when there are none yet or the
    /// subflow was reset. With DSS checksums a mapping is delivered whole
    /// and only once verified. A failed checksum (RFC 8684 3.7, Linux
    /// `subflow_check_data_avail`): on the only subflow (`alone`, never
    /// joined) MP_FAIL with the mapping's DSN and a fallback to TCP from
    /// that mapping on, its bytes delivered as the TCP stream carried them;
    /// otherwise the subflow is reset with MP_TCPRST "middlebox
    /// interference" and MP_FAIL, and its data is reinjected elsewhere.
    fn read_mapped(
        sh: &mut Shared,
        sf: &mut Subflow,
        ext: &mut SubflowExt,
        now: Instant,
        map: RxMap,
        into: u32,
        alone: bool,
    ) -> Option<Bytes> {
        let RxMap { ssn: mssn, dsn: mdsn, len: mlen, csum: mcsum, fin: mfin } = map;
        match mcsum.filter(|_| sh.csum && into == 0) {
            Some(expect) => {
                if sf.recv_ready() < mlen as usize {
                    return None;
                }
                let mut whole = Vec::with_capacity(mlen as usize);
                while whole.len() < mlen as usize {
                    let Some(c) = sf.recv_chunk(now, mlen as usize - whole.len()) else { break };
                    whole.extend_from_slice(&c);
                }
                // The pseudo-header always has the 64-bit DSN (RFC 8684
                // 3.3.1) and the data-level length as sent, which counts a
                // DATA_FIN the mapping carries.
                if !checksum_matches(dss_checksum(mdsn.0, mssn.0, (mlen + mfin as u32) as u16, &whole), expect) {
                    sh.counters.mptcp_data_csum_err += 1;
                    sh.counters.mptcp_mp_fail_tx += 1;
                    ext.mp_fail = Some(mdsn);
                    if alone && ext.join == JoinState::Initial && sh.allow_infinite_fallback {
                        // The infinite mapping starts at the failed one: the
                        // subflow's bytes continue the data sequence from it.
                        sh.infinite = true;
                        sh.counters.mptcp_dss_fallback += 1;
                        ext.rx_ahead.clear();
                        ext.rx_map = Some(RxMap { ssn: mssn, dsn: mdsn, len: 1 << 30, csum: None, fin: false });
                        ext.rx_infinite_at = Some((mssn, mdsn));
                        sf.request_ack();
                        return Some(Bytes::from(whole));
                    }
                    ext.rx_map = None;
                    ext.rst_reason = Some(MPTCP_RST_EMIDDLEBOX);
                    sh.counters.mptcp_mp_rst_tx += 1;
                    sf.abort();
                    return None;
                }
                Some(Bytes::from(whole))
            }
            None => sf.recv_chunk(now, (mlen - into) as usize),
        }
    }

    /// Linux DRS at the connection level (`mptcp_rcv_space_adjust`).
    pub(super) fn rcv_space_adjust(&mut self, now: Instant) {
        let BufferSize::Auto { max, .. } = self.cfg.mptcp.recv_buffer else { return };
        // Linux mptcp_rcv_space_adjust: the largest subflow RTT, so the window
        // covers what the fast path delivers while the slow one catches up.
        let rtt = self.subflows.iter().flatten().filter_map(|(s, _)| s.rcv_rtt().or(s.srtt())).max();
        let Some(rtt) = rtt else { return };
        let mss = self.subflow(0).map_or(DEFAULT_ADVMSS, |s| s.mss(0) as usize);
        if let Some(rcvwin) = self.rcvq_space.adjust(now, rtt, mss) {
            self.shared.recv_limit = self.shared.recv_limit.max(rcvwin.min(max));
        }
    }

    pub(super) fn rcv_window(&self) -> u64 {
        self.shared.recv_limit.saturating_sub(self.rcv_buf.ready_len() + self.rcv_buf.ofo_len()) as u64
    }

    /// After the application read: announce a window that at least doubled.
    pub(super) fn maybe_window_update(&mut self) {
        let adv = self.shared.rcv_wnd_end.saturating_sub(self.shared.rcv_nxt);
        let now_wnd = self.rcv_window();
        if now_wnd >= 2 * adv.max(1) && now_wnd >= 2 * DEFAULT_ADVMSS as u64 {
            if let Some((sf, _)) = self.best_ack_subflow() {
                sf.request_ack();
            }
        }
    }
}
