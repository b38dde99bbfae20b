//! The receive path (the receive half of Linux `subflow.c` and
//! `protocol.c`): DSS mappings received on each subflow, the data they map
//! moved into the connection-level reassembly queue in data sequence order,
//! the 32-bit DSN expansion, the fallback to an infinite mapping when a
//! middlebox strips the options, and the connection-level receive window.

use super::{Connection, Mode, Shared, SubflowExt, MPTCP_RST_EMIDDLEBOX, MPTCP_RST_EMPTCP};
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
    // Pick the candidate closest to the reference.
    [cand.wrapping_sub(1 << 32), cand, cand.wrapping_add(1 << 32)]
        .into_iter()
        .min_by_key(|c| c.abs_diff(reference))
        .expect("three candidates")
}

impl Connection {
    /// A DSS mapping received on a subflow: remembered until the subflow
    /// delivers the bytes it maps. A DATA_FIN takes the mapping's last data
    /// sequence number.
    pub(super) fn on_mapping(sh: &mut Shared, ext: &mut SubflowExt, m: &DssMapping, data_fin: bool) {
        // Nothing can be mapped before the peer's key (and so its IDSN) is known.
        if sh.rx_base.is_none() {
            return;
        }
        let dsn = DataSeq(if m.dsn64 { m.dsn } else { expand32(m.dsn, sh.rcv_nxt.0) });
        let mut len = m.len as u32;
        if data_fin {
            // The DATA_FIN takes the last data sequence number of the mapping.
            let fin = dsn + (len.max(1) as u64 - 1);
            sh.peer_data_fin.get_or_insert(fin);
            len = len.saturating_sub(1);
        }
        if len > 0 && m.ssn != 0 {
            ext.rx_maps.entry(m.ssn).or_insert((dsn, len, m.checksum));
        }
    }

    /// The first data of the client may come with the third-ACK MP_CAPABLE
    /// (RFC 8684 3.1: data length and checksum, the mapping implied at
    /// relative sequence 1 and the peer's IDSN + 1).
    pub(super) fn on_capable_mapping(sh: &Shared, ext: &mut SubflowExt, len: u16, checksum: Option<u16>) {
        if let Some(base) = sh.rx_base {
            ext.rx_maps.entry(1).or_insert((base, len as u32, checksum));
        }
    }

    /// A middlebox stripped our options mid-stream: data (or an ACK of new
    /// data) without any MPTCP option on the only subflow, once fully
    /// established. Fall back to an infinite mapping (RFC 8684 3.7).
    pub(super) fn detect_fallback(
        &mut self,
        idx: usize,
        hdr: &TcpHeader,
        opts: &OptionSummary,
        payload: &[u8],
        (single_subflow, ofo_empty): (bool, bool),
    ) {
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let sh = &mut self.shared;
        let f = hdr.flags;
        if sh.mode == Mode::Mptcp
            && !sh.infinite
            && sh.fully_established
            && opts.mptcp.is_empty()
            && !f.syn()
            && !f.rst()
            && (!payload.is_empty() || sf.snd_una() != sf.iss() + 1)
            && ext.join == super::JoinState::Initial
            && single_subflow
            && ofo_empty
        {
            sh.infinite = true;
            sh.counters.mptcp_dss_fallback += 1;
            // Receive side: everything from the subflow's next byte on continues at rcv_nxt.
            let next_ssn = (sf.recv_offset() as u32).wrapping_add(1);
            ext.rx_maps.retain(|&ssn, &mut (_, len, _)| Seq(ssn + len).gt(Seq(next_ssn)));
            if !ext.rx_maps.keys().any(|&k| Seq(k).le(Seq(next_ssn))) {
                ext.rx_maps.insert(next_ssn, (sh.rcv_nxt, u32::MAX / 2, None));
            }
        }
    }

    /// After a fallback no DATA_ACK comes: what the single subflow has
    /// acknowledged is acknowledged at the data level.
    pub(super) fn fallback_una(&mut self) {
        if let Some((sf, ext)) = self.subflows.iter().flatten().next() {
            let sf_una = (sf.snd_una() - sf.iss().0).0;
            let mut una = self.shared.snd_una;
            for m in &ext.tx_maps {
                let into = sf_una.wrapping_sub(m.ssn);
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

    /// The mapping loop of [`Connection::drain_subflow`].
    fn drain_mappings(&mut self, now: Instant, idx: usize, base: DataSeq) {
        let Some((sf, ext)) = self.subflows.get_mut(idx).and_then(|s| s.as_mut()) else { return };
        let sh = &mut self.shared;
        loop {
            // Relative ssn of the next byte the subflow would hand out.
            let ssn = (sf.recv_offset() as u32).wrapping_add(1);
            let Some((&mssn, &(mdsn, mlen, mcsum))) = ext.rx_maps.range(..=ssn).next_back() else { break };
            let into = ssn.wrapping_sub(mssn);
            if into >= mlen {
                // Past this mapping and no later one known yet.
                if ext.rx_maps.range(ssn..).next().is_none() {
                    break;
                }
                ext.rx_maps.remove(&mssn);
                continue;
            }
            let Some(chunk) = Self::read_mapped(sh, sf, ext, now, (mssn, mdsn, mlen, mcsum), into) else { break };
            let dsn = mdsn + into as u64;
            let clen = chunk.len() as u32;
            // A mapping that puts data outside the window we offered (or
            // before the data sequence space) is a broken or hostile peer:
            // reset the subflow as Linux does for an invalid mapping, rather
            // than let it park data anywhere in the reassembly queue.
            let edge = sh.rcv_wnd_end.max(sh.rcv_nxt + self.rcv_buf.ofo_len() as u64 + sh.recv_limit as u64);
            if dsn.lt(base) || (dsn + clen as u64).gt(edge) {
                sh.counters.mptcp_dss_not_matching += 1;
                ext.rx_maps.remove(&mssn);
                ext.rst_reason = Some(MPTCP_RST_EMPTCP);
                sh.counters.mptcp_mp_rst_tx += 1;
                sf.abort();
                break;
            }
            if (dsn + clen as u64).le(sh.rcv_nxt) {
                sh.counters.mptcp_duplicate_data += 1;
            } else {
                let off = dsn - base;
                let ins = self.rcv_buf.insert_bytes(off, chunk);
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
            if into + clen >= mlen {
                ext.rx_maps.remove(&mssn);
            }
        }
    }

    /// The next bytes of the mapping `(ssn, dsn, len, checksum)`, `into`
    /// bytes in, from the subflow; `None` when there are none yet or the
    /// subflow was reset. With DSS checksums a mapping is delivered whole
    /// and only once verified; a failed checksum resets the subflow
    /// (MP_TCPRST "middlebox interference").
    fn read_mapped(
        sh: &mut Shared,
        sf: &mut Subflow,
        ext: &mut SubflowExt,
        now: Instant,
        (mssn, mdsn, mlen, mcsum): (u32, DataSeq, u32, Option<u16>),
        into: u32,
    ) -> Option<Bytes> {
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
                if dss_checksum(mdsn.0, mssn, mlen as u16, &whole) != expect {
                    sh.counters.mptcp_data_csum_err += 1;
                    ext.rx_maps.remove(&mssn);
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
