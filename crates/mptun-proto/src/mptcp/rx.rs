//! The receive path (the receive half of Linux `subflow.c` and
//! `protocol.c`): DSS mappings received on each subflow, the data they map
//! moved into the connection-level reassembly queue in data sequence order,
//! the DSS checksum check, and the connection-level receive window's
//! autotuning and updates. The data-level state it fills is `data_rx.rs`.

use super::data_rx::DEFAULT_ADVMSS;
use super::slot::{RxMap, SubflowSlot};
use super::{Connection, MPTCP_RST_EMPTCP};
use crate::counters::Counters;
use crate::seq::{DataSeq, Seq};
use crate::tcp::BufferSize;
use bytes::Bytes;
use core::ops::ControlFlow;
use mptun_time::Instant;
use mptun_wire::checksum::dss_checksum;
use mptun_wire::mptcp::DssMapping;

/// Whether a received DSS checksum equals the one computed: equal, or the
/// two ones'-complement zeros (0x0000 and 0xffff) for each other (Linux sums
/// the received checksum in and tests the folded result for zero).
fn checksum_matches(computed: u16, received: u16) -> bool {
    computed == received || (computed, received) == (0, 0xffff) || (computed, received) == (0xffff, 0)
}

impl SubflowSlot {
    /// A mapping the peer cannot have sent: reset the subflow (Linux
    /// `MAPPING_INVALID` on a subflow that cannot fall back: MP_TCPRST
    /// "MPTCP-specific error"); its unacknowledged data is reinjected
    /// elsewhere as for any failed subflow.
    pub(super) fn mapping_error(&mut self, counters: &mut Counters) {
        counters.mptcp_dss_not_matching += 1;
        self.mp.rx.drop_mappings();
        counters.mptcp_mp_rst_tx += 1;
        self.reset_with(MPTCP_RST_EMPTCP);
    }
}

impl Connection {
    /// A DSS mapping received on an acceptable segment of subflow `idx`. As
    /// in Linux it counts only together with the data it came with (it must
    /// map at least one byte of that segment), and a mapping that
    /// contradicts one already known resets the subflow. A DATA_FIN takes
    /// the mapping's last data sequence number.
    pub(super) fn on_mapping(&mut self, idx: usize, m: &DssMapping, data_fin: bool) {
        // Nothing can be mapped before the peer's key (and so its IDSN) is
        // known, and after a fallback options are ignored (Linux
        // `mptcp_incoming_options` returns early once fallen back).
        if self.rx.base().is_none() || self.mode.infinite() {
            return;
        }
        let dsn = self.rx.expand(m);
        let mut len = m.len as u32;
        if data_fin {
            // The DATA_FIN takes the last data sequence number of the mapping.
            self.rx.on_data_fin(dsn + (len.max(1) as u64 - 1));
            len = len.saturating_sub(1);
        }
        if len == 0 {
            return;
        }
        self.file_mapping(idx, RxMap { ssn: Seq(m.ssn), dsn, len, csum: m.checksum, fin: data_fin });
    }

    /// The first data of the client may come with the third-ACK MP_CAPABLE
    /// (RFC 8684 3.1: data length and checksum, the mapping implied at
    /// relative sequence 1 and the peer's IDSN + 1).
    pub(super) fn on_capable_mapping(&mut self, idx: usize, len: u16, checksum: Option<u16>) {
        let Some(base) = self.rx.base().filter(|_| !self.mode.infinite()) else { return };
        let ssn = Seq(1) + self.space.ssn_off();
        if len > 0 {
            self.file_mapping(idx, RxMap { ssn, dsn: base, len: len as u32, csum: checksum, fin: false });
        }
    }

    /// Files `map` with subflow `idx`'s mappings; one that cannot be resets it.
    fn file_mapping(&mut self, idx: usize, map: RxMap) {
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        let next = slot.next_rx_ssn();
        if slot.mp.rx.add_mapping(next, self.hs.csum(), map).is_err() {
            slot.mapping_error(&mut self.counters);
        }
    }

    /// Moves what subflow `idx` delivered into the connection, mapping by
    /// mapping, then sees whether the peer's DATA_FIN is now in order.
    pub(super) fn drain_subflow(&mut self, now: Instant, idx: usize) {
        if self.subflows.get(idx).is_none() {
            return;
        }
        let Some(base) = self.rx.base() else { return };
        self.drain_mappings(now, idx, base);
        self.peer_data_fin_in_order(idx);
    }

    /// The mapping loop of [`Connection::drain_subflow`] (Linux
    /// `subflow_check_data_avail` with `get_mapping_status`): in-order
    /// subflow data is read under the mapping that covers it; data no
    /// mapping covers is a protocol error that resets the subflow.
    fn drain_mappings(&mut self, now: Instant, idx: usize, base: DataSeq) {
        let alone = self.subflows.count() == 1;
        loop {
            let Some(slot) = self.subflows.get_mut(idx) else { return };
            if slot.tcp.recv_ready() == 0 {
                return;
            }
            let next = slot.next_rx_ssn();
            let Some(map) = slot.mp.rx.current_map(self.mode.infinite(), next) else {
                slot.mapping_error(&mut self.counters);
                return;
            };
            let into = next - map.ssn;
            let Some(chunk) = self.read_mapped(idx, now, map, into, alone) else { return };
            let dsn = map.dsn + into as u64;
            // A mapping that puts data before the data sequence space is a
            // broken or hostile peer: reset the subflow as Linux does for an
            // invalid mapping.
            if dsn.lt(base) {
                if let Some(slot) = self.subflows.get_mut(idx) {
                    slot.mapping_error(&mut self.counters);
                }
                return;
            }
            self.rx.receive(&mut self.counters, self.mode.infinite(), dsn, chunk);
        }
    }

    /// The next bytes of `map`, `into` bytes in, from subflow `idx`; `None`
    /// when there are none yet or the subflow was reset. With DSS checksums
    /// a mapping is delivered whole and only once verified; a failed one is
    /// [`Connection::on_bad_checksum`]'s (`alone`: on the only subflow).
    fn read_mapped(&mut self, idx: usize, now: Instant, map: RxMap, into: u32, alone: bool) -> Option<Bytes> {
        let slot = self.subflows.get_mut(idx)?;
        let Some(expect) = map.csum.filter(|_| self.hs.csum() && into == 0) else {
            return slot.tcp.recv_chunk(now, (map.len - into) as usize);
        };
        if slot.tcp.recv_ready() < map.len as usize {
            return None;
        }
        let mut whole = Vec::with_capacity(map.len as usize);
        while whole.len() < map.len as usize {
            let Some(c) = slot.tcp.recv_chunk(now, map.len as usize - whole.len()) else { break };
            whole.extend_from_slice(&c);
        }
        // The pseudo-header always has the 64-bit DSN (RFC 8684 3.3.1) and
        // the data-level length as sent, which counts a DATA_FIN the mapping
        // carries.
        let wire_len = (map.len + map.fin as u32) as u16;
        if checksum_matches(dss_checksum(map.dsn.0, map.ssn.0, wire_len, &whole), expect) {
            return Some(Bytes::from(whole));
        }
        self.on_bad_checksum(idx, map, alone).then(|| Bytes::from(whole))
    }

    /// Linux DRS at the connection level (`mptcp_rcv_space_adjust`).
    pub(super) fn rcv_space_adjust(&mut self, now: Instant) {
        let BufferSize::Auto { max, .. } = self.cfg.mptcp.recv_buffer else { return };
        // Linux mptcp_rcv_space_adjust: the largest subflow RTT, so the window
        // covers what the fast path delivers while the slow one catches up.
        let rtt = self.subflows.live().filter_map(|s| s.tcp.rcv_rtt().or(s.tcp.srtt())).max();
        let Some(rtt) = rtt else { return };
        let mss = self.subflow(0).map_or(DEFAULT_ADVMSS, |s| s.mss(0) as usize);
        self.rx.adjust_space(now, rtt, mss, max);
    }

    /// After the application read: announce a window that at least doubled.
    pub(super) fn maybe_window_update(&mut self) {
        let adv = self.rx.announced();
        let now_wnd = self.rx.window();
        if now_wnd >= 2 * adv.max(1) && now_wnd >= 2 * DEFAULT_ADVMSS as u64 {
            if let Some(slot) = self.best_ack_subflow() {
                slot.tcp.request_ack();
            }
        }
    }

    /// The mapping of a received DSS. `Break` when it reset the subflow
    /// before anything of the segment is read.
    pub(super) fn on_dss_mapping(&mut self, idx: usize, m: &DssMapping, data_fin: bool) -> ControlFlow<()> {
        let dsn = self.rx.expand(m);
        let Some(slot) = self.subflows.get_mut(idx) else { return ControlFlow::Continue(()) };
        if self.hs.csum() && m.checksum.is_none() {
            // Checksums were negotiated: a mapping without one is invalid
            // (RFC 8684 3.3; Linux's get_mapping_status resets the subflow).
            self.counters.mptcp_dss_not_matching += 1;
            self.counters.mptcp_mp_rst_tx += 1;
            slot.reset_with(MPTCP_RST_EMPTCP);
            // Handled like a refused join: the RST (with its reason) leaves
            // before the subflow is reaped.
            return ControlFlow::Break(());
        }
        if self.mode.infinite() && slot.contradicts_infinite(dsn, m, data_fin) {
            // Reset before the drain reads the copy as the stream.
            slot.mapping_error(&mut self.counters);
            return ControlFlow::Break(());
        }
        if m.len == 0 && !data_fin {
            self.on_infinite_mapping(idx, m);
        } else {
            self.on_mapping(idx, m, data_fin);
        }
        ControlFlow::Continue(())
    }
}
