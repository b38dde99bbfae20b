//! The send path (Linux `protocol.c`'s push and the packet scheduler):
//! bursts of connection data handed to the subflows the scheduler picks,
//! each a DSS mapping; what the scheduler asks besides (a window cut, the
//! head of a slow subflow's data sent again elsewhere); reinjection of a
//! failed or stale subflow's unacknowledged data; and the release of what
//! the peer DATA_ACKed.

use super::hook::{DSS_FULL, DSS_MAP};
use super::slot::{SubflowSlot, TxMap};
use super::subflow_tx::AckView;
use super::Connection;
use crate::buf::SendBuf;
use crate::sched::{ConnView, Request, SubflowView};
use crate::seq::{DataSeq, Seq};
use crate::tcp::{BufferSize, Subflow};
use bytes::Bytes;
use mptun_time::Duration;
use mptun_wire::checksum::dss_checksum;
use mptun_wire::mptcp::DataAck;

/// Memory Linux charges per MSS-sized segment in a subflow's send buffer
/// (`tcp_sndbuf_expand`: skb truesize, about 4352 bytes for a 1448-byte MSS).
const TRUESIZE_PER_MSS: usize = 4352;

/// The longest mapping: as many whole segments of `seg` bytes as a DSS
/// data-level length (16 bits) holds.
fn map_cap(seg: u64) -> u64 {
    let max = u64::from(u16::MAX);
    match max / seg.max(1) {
        0 => max,
        n => n * seg,
    }
}

/// How much of `want` bytes goes to `sf` now, given its send buffer: when
/// the buffer is the limit, whole segments of `seg` bytes, and nothing while
/// less than one segment is free (the rest waits for an ACK, as Linux's
/// `tcp_mss_split_point` waits on a window limit), so that the space one ACK
/// frees does not become a mapping ending in a short segment.
fn mapping_len(sf: &Subflow, seg: u64, want: u64) -> u64 {
    let space = sf.send_space() as u64;
    if want <= space {
        want
    } else if space >= seg {
        space - space % seg
    } else if sf.send_queued() == 0 {
        // A buffer smaller than a segment: never wait for room that cannot come.
        space
    } else {
        0
    }
}

/// Hands `[start, start + len)` of the connection's send buffer to `sf` as
/// slices of the application writes it spans (one mapping; `joined`: it
/// grows the previous one), so that no segment boundary falls between them
/// and nothing is gathered into a fresh allocation. False if it does not fit.
fn hand_over(snd_buf: &SendBuf, sf: &mut Subflow, start: Seq, len: usize, joined: bool) -> bool {
    if len > sf.send_space() {
        return false;
    }
    for (i, part) in snd_buf.slices(start, len).enumerate() {
        let fits = if joined || i > 0 { sf.send_bytes_joined(part) } else { sf.send_bytes(part) };
        debug_assert!(fits.is_ok(), "checked against send_space");
    }
    true
}

/// Maps up to `want` bytes of the connection's send buffer from `start`
/// onto `slot` as a new mapping (at most `room`, the peer's window): a
/// mapping ends on a wire segment boundary (Linux sizes an skb, one
/// mapping, to `size_goal`, a multiple of the MSS), as a 65,535-byte
/// mapping would end every TSO super-segment in a short segment. The
/// segment size depends on whether the mapping carries the DATA_ACK, so
/// that is decided here, once. Returns the bytes mapped, 0 when none fit.
fn new_mapping(
    buf: &SendBuf,
    slot: &mut SubflowSlot,
    start: DataSeq,
    want: u64,
    room: u64,
    acks: &AckView,
    csum_on: bool,
) -> u64 {
    let ssn = slot.write_seq_rel();
    let (tcp, mp) = (&mut slot.tcp, &mut slot.mp);
    let with_ack = mp.tx.new_map_needs_ack(ssn, mp.first_data_ssn(), acks);
    let seg = tcp.mss(if with_ack { DSS_FULL } else { DSS_MAP }) as u64;
    let len = mapping_len(tcp, seg, want.min(map_cap(seg))).min(room);
    if len == 0 {
        return 0;
    }
    let csum = if csum_on {
        let data = buf.slice_bytes(Seq(start.0 as u32), len as usize);
        let csum = dss_checksum(start.0, ssn.0, len as u16, &data);
        if tcp.send_bytes(data).is_err() {
            return 0;
        }
        csum
    } else {
        if !hand_over(buf, tcp, Seq(start.0 as u32), len as usize, false) {
            return 0;
        }
        0
    };
    mp.tx.note_ack_decision(with_ack, acks);
    mp.tx.push_map(TxMap { ssn, dsn: start, len: len as u32, csum, with_ack: Some(with_ack) });
    len
}

/// The most the MPTCP-level retransmission timer sends again at once: one
/// data fragment. Linux's live in a page frag (`SKB_FRAG_PAGE_ORDER`,
/// 32 KiB) and a mapping never spans two; ours is the mapping that holds
/// the head, at most a TSO super-segment's 64 KiB.
const RETRANS_FRAG_MAX: u64 = 64 * 1024;

impl SubflowSlot {
    /// What the scheduler sees of this subflow (index `id`); data
    /// sequence numbers as offsets from `base`, the first byte's DSN,
    /// with `una` the oldest byte not DATA_ACKed.
    fn view(&self, id: usize, base: DataSeq, una: DataSeq) -> SubflowView {
        let info = self.tcp.info();
        let sampled = self.tcp.srtt().is_some();
        let off = |d: DataSeq| d.0.wrapping_sub(base.0);
        let mut unacked: Option<(DataSeq, DataSeq)> = None;
        for m in self.mp.tx.maps().iter().filter(|m| m.dsn_end().gt(una)) {
            let (s, e) = (m.dsn.max(una), m.dsn_end());
            unacked = Some(unacked.map_or((s, e), |(a, b)| (a.min(s), b.max(e))));
        }
        SubflowView {
            id,
            available: self.usable(),
            backup: self.mp.backup(),
            queued: self.tcp.send_queued(),
            send_space: self.tcp.send_space(),
            pacing_rate: info.pacing_rate,
            cwnd: info.cwnd,
            ssthresh: info.ssthresh,
            srtt: self.tcp.srtt(),
            ca_state: info.ca_state,
            cwnd_limited: info.cwnd_limited,
            in_flight: self.tcp.packets_in_flight(),
            unsent: self.tcp.unsent(),
            // The smallest data segment: one that carries a whole DSS, so
            // that a burst of k of these never ends in a runt.
            mss: self.tcp.mss(DSS_FULL),
            rttvar: sampled.then_some(info.rttvar),
            min_rtt: sampled.then_some(info.min_rtt),
            lost: info.lost_out,
            retrans: info.retrans_out,
            delivery_rate: info.delivery_rate,
            last_send: info.last_data_send,
            last_ack: info.last_ack_recv,
            unacked_data: unacked.map(|(s, e)| (off(s), off(e))),
            data_end: self.mp.tx.data_end().map(off),
        }
    }

    /// The window cut the scheduler asked for, applied from the subflow's
    /// own push path (the equivalent of doing it under the subflow socket
    /// lock). `true` when one was applied.
    pub(super) fn apply_cut(&mut self) -> bool {
        let Some(cut) = self.mp.take_cut() else { return false };
        self.tcp.reduce_window(cut);
        true
    }
}

impl Connection {
    /// Queues the not yet DATA_ACKed data of subflow `idx` for another subflow.
    pub(super) fn reinject_from(&mut self, idx: usize) {
        // After a fallback the single subflow's byte stream is the data
        // stream: data sent again on it would be read as new data. Before
        // the connection is fully established there is no other subflow,
        // and the peer may have fallen back without our knowing (a third
        // ACK lost): its own retransmissions carry the data.
        if self.mode.infinite() || !self.hs.fully_established() {
            return;
        }
        let Some(slot) = self.subflows.get_mut(idx) else { return };
        for (start, end) in slot.mp.tx.take_for_reinjection(self.tx.una()) {
            self.tx.queue_reinjection(start, end);
            self.counters.mptcp_reinjected_bytes += end - start;
        }
    }

    /// Releases the data and mappings the peer DATA_ACKed (and, for a
    /// mapping, that its subflow acknowledged too: it may still retransmit).
    pub(super) fn release_acked(&mut self) {
        self.tx.release_acked();
        let una = self.tx.una();
        for slot in self.subflows.live_mut() {
            let sf_una = slot.snd_una_rel();
            slot.mp.tx.release(una, sf_una);
        }
    }

    /// Linux sizes the msk send buffer as the sum of its subflows'
    /// sk_sndbuf. Those count memory: 2 × cwnd × ~4352 bytes of skb per
    /// MSS-sized segment (tcp_sndbuf_expand), while the msk's queue is
    /// charged about its payload. In payload terms the msk holds ~3× the
    /// subflows' payload buffers, room for the data the receiver holds
    /// out of order while the slow path catches up.
    pub(super) fn grow_send_buffer(&mut self) {
        if let BufferSize::Auto { max, .. } = self.cfg.mptcp.send_buffer {
            let sum: usize = self
                .subflows
                .live()
                .map(|s| s.tcp.info().send_buffer / s.tcp.mss(0).max(1) as usize * TRUESIZE_PER_MSS)
                .sum();
            self.tx.grow_limit(sum.min(max));
        }
    }

    /// Stale subflows (an RTO streak): the scheduler avoids them and their
    /// data is reinjected elsewhere, once per streak.
    pub(super) fn detect_stale(&mut self) {
        let streak = self.cfg.mptcp.stale_rto_streak;
        for i in 0..self.subflows.slot_count() {
            let Some(slot) = self.subflows.get_mut(i) else { continue };
            let stale_now = slot.tcp.rto_streak() >= streak;
            if stale_now && !slot.mp.stale() {
                slot.mp.set_stale(true);
                self.counters.mptcp_subflow_stale += 1;
                self.reinject_from(i);
            } else if !stale_now && slot.mp.stale() {
                slot.mp.set_stale(false);
                self.counters.mptcp_subflow_recover += 1;
            }
        }
    }

    /// What the scheduler sees of each subflow.
    fn views(&self) -> Vec<SubflowView> {
        let (base, una) = (self.tx.base(), self.tx.una());
        self.subflows.iter().map(|(i, s)| s.view(i, base, una)).collect()
    }

    /// What the scheduler sees of the connection.
    fn conn_view(&self) -> ConnView {
        let tx = &self.tx;
        let off = |d: DataSeq| d.0.wrapping_sub(tx.base().0);
        ConnView {
            rwnd_limited: tx.write_seq().gt(tx.wnd_end()),
            now: self.last_now,
            una: off(tx.una()),
            nxt: off(tx.nxt()),
            write_seq: off(tx.write_seq()),
            wnd_end: off(tx.wnd_end().max(tx.una())),
            send_buffer: tx.limit(),
            reinject_queued: tx.reinject_queued(),
        }
    }

    /// Starts (`limited`) or stops the receive-window-limited chrono.
    fn rwnd_chrono(&mut self, limited: bool) {
        self.tx.rwnd_chrono(self.last_now, limited);
    }

    /// Time the connection's data waited for the peer's window so far.
    pub(super) fn rwnd_limited(&self) -> Duration {
        self.tx.rwnd_limited(self.last_now)
    }

    /// Nothing new can go: the scheduler may still ask for copies of data
    /// in flight (`Scheduler::on_blocked`), carried out at once.
    fn push_blocked(&mut self) {
        if self.mode.infinite() || !self.hs.fully_established() || !self.sched.acts_when_blocked() {
            return;
        }
        let views = self.views();
        let conn = self.conn_view();
        self.sched.on_blocked(&views, &conn);
        self.carry_out_requests();
    }

    /// Hands bursts of data (reinjections first) to the subflows the scheduler picks.
    pub(super) fn push_pending(&mut self) {
        if self.mode.infinite() {
            self.tx.drop_reinjections();
        }
        loop {
            let (start, end, reinj) = self.tx.next_range();
            let room = self.tx.wnd_end().saturating_sub(start);
            if start.ge(end) || (room == 0 && !reinj) {
                let window_bound = start.lt(end);
                self.rwnd_chrono(window_bound);
                self.push_blocked();
                return;
            }
            let views = self.views();
            let conn = self.conn_view();
            let pick = self.sched.select(&views, &conn);
            self.carry_out_requests();
            let Some(pick) = pick else {
                // The peer's window has room: what waits now is the subflows.
                if room > 0 && !reinj {
                    self.rwnd_chrono(false);
                }
                return;
            };
            let acks = self.ack_view(self.rx.window());
            let csum_on = self.hs.csum();
            let Some(slot) = self.subflows.get_mut(pick.id) else { return };
            let want = (end - start).min(pick.max_burst as u64);
            let room = if reinj { u64::MAX } else { room };
            let ssn = slot.write_seq_rel();
            let unsent_from = slot.snd_nxt_rel();
            let (tcp, mp) = (&mut slot.tcp, &mut slot.mp);
            // Linux mptcp_skb_can_collapse_to: data that continues the last
            // mapping of this subflow, none of which has gone out yet, grows
            // that mapping (up to the DSS's 16-bit length) instead of
            // starting one, so a TSO super-segment is not cut at every push.
            let grow = mp.tx.growable_last(start, ssn, unsent_from).filter(|_| !reinj && !csum_on);
            if let Some((map_len, with_ack)) = grow {
                let seg = tcp.mss(if with_ack == Some(true) { DSS_FULL } else { DSS_MAP }) as u64;
                let len = mapping_len(tcp, seg, want.min(map_cap(seg).saturating_sub(u64::from(map_len)))).min(room);
                if len > 0 {
                    if !hand_over(self.tx.buf(), tcp, Seq(start.0 as u32), len as usize, true) {
                        return;
                    }
                    mp.tx.grow_last(len as u32);
                    self.tx.advance_nxt(len);
                    self.rwnd_chrono(false);
                    self.sched.on_pushed(pick.id, len as usize, &views);
                    self.push_copies(&pick, start, len, &views);
                    continue;
                }
            }
            let len = new_mapping(self.tx.buf(), slot, start, want, room, &acks, csum_on);
            if len == 0 {
                return;
            }
            if reinj {
                self.mode.forbid_infinite();
                self.tx.reinjected_up_to(start + len);
            } else {
                self.tx.advance_nxt(len);
                self.rwnd_chrono(false);
            }
            self.sched.on_pushed(pick.id, len as usize, &views);
            self.push_copies(&pick, start, len, &views);
        }
    }

    /// The pick's copies of `[start, start + len)`, each at most its burst.
    fn push_copies(&mut self, pick: &crate::sched::Pick, start: DataSeq, len: u64, views: &[SubflowView]) {
        for c in pick.copies.iter().filter(|c| c.id != pick.id) {
            let sent = self.copy_onto(c.id, start, start + len.min(c.max_burst as u64));
            if sent > 0 {
                self.sched.on_pushed(c.id, sent as usize, views);
            }
        }
    }

    /// Maps data `[from, to)`, already handed to a subflow once, onto
    /// subflow `id` as new mappings of its own, clipped to what the peer
    /// has not DATA_ACKed and to what `id` can queue now: a redundant copy
    /// or a reinjection the scheduler chose. Returns the bytes mapped.
    fn copy_onto(&mut self, id: usize, from: DataSeq, to: DataSeq) -> u64 {
        let mut start = from.max(self.tx.una());
        let end = to.min(self.tx.nxt());
        if self.mode.infinite() || !self.hs.fully_established() || start.ge(end) {
            return 0;
        }
        // A copy onto the only subflow is a data-level retransmission: not
        // onto a subflow the peer may read as a plain TCP stream.
        if self.subflows.count() == 1 && !self.copy_allowed() {
            return 0;
        }
        let acks = self.ack_view(self.rx.window());
        let csum_on = self.hs.csum();
        let Some(slot) = self.subflows.get_mut(id) else { return 0 };
        if !slot.usable() {
            return 0;
        }
        let mut sent = 0;
        while start.lt(end) {
            let len = new_mapping(self.tx.buf(), slot, start, end - start, u64::MAX, &acks, csum_on);
            if len == 0 {
                break;
            }
            start += len;
            sent += len;
        }
        if sent > 0 {
            self.mode.forbid_infinite();
            self.counters.mptun_sched_copy_bytes += sent;
        }
        sent
    }

    /// What the scheduler asked for besides its pick, carried out before
    /// the burst is pushed.
    fn carry_out_requests(&mut self) {
        while let Some(r) = self.sched.poll_request() {
            match r {
                Request::ReduceWindow { id, cut } => {
                    if let Some(slot) = self.subflows.get_mut(id) {
                        slot.mp.ask_cut(cut);
                    }
                }
                // Opportunistic retransmission: the oldest unacknowledged
                // data of the slow subflow goes out again on a fast one.
                Request::ReinjectHead { id } => self.reinject_head(id),
                Request::Reinject { on, from, to } => {
                    let base = self.tx.base();
                    self.copy_onto(on, base + from, base + to);
                }
            }
        }
    }

    /// Queues the oldest data of subflow `id` the peer has not DATA_ACKed,
    /// one MSS at most, to be sent again (unless it is queued already).
    fn reinject_head(&mut self, id: usize) {
        let una = self.tx.una();
        let head = self.subflows.get(id).and_then(|slot| {
            let mss = slot.tcp.mss(0) as u64;
            slot.mp.tx.maps().iter().find(|m| m.dsn_end().gt(una)).map(|m| {
                let start = m.dsn.max(una);
                (start, m.dsn_end().min(start + mss))
            })
        });
        if let Some((s, e)) = head {
            if self.tx.queue_reinjection_once(s, e) {
                self.counters.mptcp_reinjected_bytes += e - s;
            }
        }
    }

    /// The MPTCP-level zero-window probe (Linux `mptcp_sendmsg_frag`'s
    /// `zero_window_probe`): when the peer's connection-level window is
    /// closed, data waits and nothing is unacknowledged, the window update
    /// that would reopen it may have been lost, and no ACK will come by
    /// itself. So the last DATA_ACKed byte goes out again as a one-byte
    /// mapping, a duplicate at the data level that the subflow still
    /// acknowledges, with a DATA_ACK and the current window; repeated with
    /// an exponential backoff while the window stays closed.
    pub(super) fn window_probe(&mut self) {
        let Some(byte) = self.tx.last_acked_byte() else { return };
        // No idle subflow: the previous probe still waits in one (its own
        // zero-window probing carries it).
        let Some(i) = self.probe_subflow() else { return };
        if !self.copy_allowed() {
            return;
        }
        let dsn = DataSeq(self.tx.una().0.wrapping_sub(1));
        let csum_on = self.hs.csum();
        let slot = self.subflows.get_mut(i).expect("picked a live subflow");
        let ssn = slot.write_seq_rel();
        if slot.tcp.send_bytes(Bytes::copy_from_slice(&[byte])).is_err() {
            return;
        }
        let csum = if csum_on { dss_checksum(dsn.0, ssn.0, 1, &[byte]) } else { 0 };
        slot.mp.tx.push_probe(TxMap { ssn, dsn, len: 1, csum, with_ack: Some(true) });
        self.mode.forbid_infinite();
        self.counters.mptcp_win_probe += 1;
    }

    /// A usable subflow with nothing queued, the lowest RTT first: where a
    /// zero-window probe goes.
    pub(super) fn probe_subflow(&self) -> Option<usize> {
        self.subflows
            .iter()
            .filter(|(_, s)| s.usable() && s.tcp.send_queued() == 0)
            .min_by_key(|(_, s)| s.tcp.srtt().unwrap_or(Duration::MAX))
            .map(|(i, _)| i)
    }

    /// When the MPTCP-level retransmission timer expires (Linux
    /// `__mptcp_retrans`) and the oldest unacknowledged data is no longer
    /// in flight on any live subflow (a subflow acknowledged it but the peer
    /// never DATA_ACKed it, or its subflow is gone), that data is sent again
    /// on a subflow the scheduler picks.
    pub(super) fn retransmit_head(&mut self) {
        let una = self.tx.una();
        if self.tx.una_queued_for_reinjection() {
            return;
        }
        // Where is the byte at snd_una? In flight on a live subflow: that
        // subflow's own RTO covers it. In flight on a stale one only (a
        // path that went down): its RTO never succeeds, so it goes again
        // here, as Linux's `__mptcp_retrans` sends the head whatever holds it.
        let mut end = None;
        for slot in self.subflows.live() {
            let sf_una = slot.snd_una_rel();
            for m in slot.mp.tx.maps() {
                let mend = m.dsn_end();
                if m.dsn.le(una) && una.lt(mend) {
                    let at_ssn = m.ssn + (una - m.dsn) as u32;
                    if at_ssn.ge(sf_una) && !slot.mp.stale() {
                        return;
                    }
                    end = Some(end.map_or(mend, |e: DataSeq| e.max(mend)));
                }
            }
        }
        // The whole head fragment goes (the rest of the mapping that holds
        // the head), as Linux's `__mptcp_retrans` sends its rtx head dfrag
        // (its `already_sent` bytes) rather than one segment: a tiny-MSS
        // connection repairs as much per timeout as any other.
        let end = end.unwrap_or(self.tx.nxt()).min(una + RETRANS_FRAG_MAX).min(self.tx.nxt());
        if !self.copy_allowed() {
            return;
        }
        self.tx.queue_reinjection(una, end);
        self.counters.mptcp_retrans += 1;
        self.counters.mptcp_reinjected_bytes += end - una;
        self.push_pending();
    }

    /// DATA_ACK: the peer holds our data up to it (in its receive buffer,
    /// not just some subflow's), so it can be released; it also moves the
    /// connection-level send window's right edge.
    pub(super) fn on_data_ack(&mut self, a: &DataAck, wnd: u64) {
        self.tx.on_data_ack(a, wnd);
    }

    /// The acknowledgement view the DATA_ACK decisions of new mappings take,
    /// with `recv_window` free in the receive buffer.
    pub(super) fn ack_view(&self, recv_window: u64) -> AckView {
        AckView::new(&self.rx, &self.hs, recv_window)
    }
}
