//! The data-level receive side's state (Linux keeps it in the msk:
//! `ack_seq`, `rcv_wnd_sent`, the receive queues, `rcv_data_fin`): the
//! peer's data sequence space, the connection's reassembly queue and the
//! window we announce over it. Its fields are private: every change is one
//! of the methods below, so that its invariants (`nxt` is the base plus the
//! bytes in order, the announced edge never shrinks, the DATA_FIN is taken
//! once and only inside the window) are kept in one file. The receive path
//! that feeds it is `rx.rs`.

use crate::buf::{mem_budget, unpin, RecvBuf, Src};
use crate::counters::Counters;
use crate::seq::DataSeq;
use crate::tcp::autotune::RcvSpace;
use bytes::Bytes;
use mptun_time::{Duration, Instant};
use mptun_wire::mptcp::{DataAck, DssMapping};

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

/// The data-level receive side.
#[derive(Debug)]
pub(super) struct DataRx {
    /// First DSN of the peer's data (IDSN + 1), once its key is known.
    base: Option<DataSeq>,
    /// Next data sequence number expected in order.
    nxt: DataSeq,
    /// The furthest window edge announced (never shrinks).
    wnd_end: DataSeq,
    /// The receive buffer's size (the msk's `SO_RCVBUF`, autotuned).
    limit: usize,
    /// The reassembly queue, in data sequence order from `base`.
    buf: RecvBuf,
    /// Connection-level DRS (`mptcp_rcv_space_adjust`), the subflow's type.
    space: RcvSpace,
    /// The peer's DATA_FIN, once taken.
    peer_fin: Option<DataSeq>,
    /// Every byte before the peer's DATA_FIN arrived: its stream ended.
    peer_fin_done: bool,
}

impl DataRx {
    pub fn new(now: Instant, limit: usize) -> Self {
        DataRx {
            base: None,
            nxt: DataSeq(0),
            wnd_end: DataSeq(0),
            limit,
            buf: RecvBuf::default(),
            // As the subflow does (Linux starts at TCP_INIT_CWND × advmss).
            space: RcvSpace::new(now, RcvSpace::initial_space(DEFAULT_ADVMSS, limit)),
            peer_fin: None,
            peer_fin_done: false,
        }
    }

    // ------------------------------------------------------------------
    // What it holds
    // ------------------------------------------------------------------

    /// First DSN of the peer's data, once its key is known.
    pub fn base(&self) -> Option<DataSeq> {
        self.base
    }

    /// Next data sequence number expected in order.
    pub fn nxt(&self) -> DataSeq {
        self.nxt
    }

    /// The furthest window edge announced.
    pub fn wnd_end(&self) -> DataSeq {
        self.wnd_end
    }

    /// The receive buffer's size.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The reassembly queue (what is ready, what is out of order).
    pub fn buf(&self) -> &RecvBuf {
        &self.buf
    }

    /// The peer's DATA_FIN, once taken.
    pub fn peer_fin(&self) -> Option<DataSeq> {
        self.peer_fin
    }

    /// The peer's stream ended: every byte before its DATA_FIN arrived.
    pub fn peer_fin_done(&self) -> bool {
        self.peer_fin_done
    }

    /// The furthest data sequence number data is accepted up to: the
    /// furthest edge announced ([`DataRx::wnd_end`]) plus one more
    /// buffer's worth. A Linux sender overestimates the window it was given:
    /// it adds a subflow's last window to a DATA_ACK that came later on the
    /// same subflow (`ack_update_msk`), keeps that subflow's window when a
    /// duplicate ACK brings a smaller one, and raises a subflow's window to
    /// the connection's (`MPTcpExtSndWndShared`); data past the edge it was
    /// told is common at high rates. Dropping it (as Linux's receiver does,
    /// `MPTcpExtNoDSSInWindow`) leaves it covered by the subflow's ACK but
    /// not by the DATA_ACK, and only the sender's connection-level
    /// retransmission timer, hundreds of milliseconds later, repairs that.
    /// The memory budget ([`crate::buf::mem_budget`] of the buffer, twice
    /// it) still bounds what is held.
    pub fn accept_edge(&self) -> DataSeq {
        self.wnd_end + self.limit as u64
    }

    /// Free space of the receive buffer: the window to announce from `nxt`.
    pub fn window(&self) -> u64 {
        self.limit.saturating_sub(self.buf.ready_len() + self.buf.ofo_len()) as u64
    }

    /// The window last announced, from `nxt`.
    pub fn announced(&self) -> u64 {
        self.wnd_end.saturating_sub(self.nxt)
    }

    /// A DSN of a received DSS in 64 bits.
    pub fn expand(&self, m: &DssMapping) -> DataSeq {
        DataSeq(if m.dsn64 { m.dsn } else { expand32(m.dsn, self.nxt.0) })
    }

    /// The DATA_ACK to send, once the peer's data sequence space is known.
    pub fn data_ack(&self) -> Option<DataAck> {
        self.base.map(|_| DataAck { ack: self.nxt.0, ack64: true })
    }

    // ------------------------------------------------------------------
    // The peer
    // ------------------------------------------------------------------

    /// The peer's key is known: its data starts at `base`, and it may send
    /// the `syn_window` bytes our SYN (or SYN-ACK) offered before any
    /// connection-level window of ours reaches it.
    pub fn set_base(&mut self, base: DataSeq, syn_window: u64) {
        self.base = Some(base);
        self.nxt = base;
        // Until now `wnd_end` was 0 or a window edge counted from 0 (a
        // segment sent before the key came): it enters the data sequence
        // space as the later of the two in plain order, so that the modular
        // order from here on never sees a number 2^63 away.
        self.wnd_end = DataSeq(self.wnd_end.0.max(base.0)).max(base + syn_window);
    }

    /// The peer's DATA_FIN at `fin`: taken only inside the receive window we
    /// offered, and only the first (Linux `mptcp_update_rcv_data_fin`
    /// ignores every later one: they may be retransmissions).
    pub fn on_data_fin(&mut self, fin: DataSeq) {
        if self.peer_fin.is_some() {
            return;
        }
        // The DATA_FIN follows the last data byte: within the window too.
        if fin.ge(self.nxt) && fin.le(self.accept_edge()) {
            self.peer_fin = Some(fin);
        }
    }

    /// Mapped data `chunk` at `dsn` (at or past `base`, which is known):
    /// a duplicate, data past [`DataRx::accept_edge`] (the peer ignores the
    /// window; dropped as Linux's `mptcp_data_queue_ofo` does, the DATA_ACK
    /// not covering it; after a fallback, `infinite`, the subflow's own
    /// window is the limit), or data queued within the memory budget.
    pub fn receive(&mut self, counters: &mut Counters, infinite: bool, dsn: DataSeq, chunk: Bytes) {
        let Some(base) = self.base else { return };
        let end = dsn + chunk.len() as u64;
        if end.le(self.nxt) {
            counters.mptcp_duplicate_data += 1;
        } else if !infinite && end.gt(self.accept_edge()) {
            counters.mptcp_no_dss_in_window += 1;
        } else if let Some(spare) = self.admit(counters, infinite, dsn - base, chunk.len()) {
            let ins = self.buf.insert_within(dsn - base, Src::Bytes(unpin(chunk)), spare);
            if ins.queued_ofo {
                counters.mptcp_ofo_queue += 1;
                counters.mptcp_ofo_queue_tail += ins.tail as u64;
                counters.mptcp_ofo_merge += ins.merged as u64;
            }
            if ins.duplicate {
                counters.mptcp_duplicate_data += 1;
            }
        }
        self.nxt = base + self.buf.next();
    }

    /// Makes room for `len` bytes at offset `off` of the reassembly queue
    /// within its memory budget (Linux `mptcp_rmem_schedule`): the
    /// out-of-order tail past them is pruned first (`MPTcpExtOFOPruned`);
    /// `None` when they still do not fit and are dropped (`MPTcpExtRcvPruned`:
    /// not DATA_ACKed, so the peer sends them again), else the spare room
    /// their insert may take ([`crate::buf::RecvBuf::insert_within`]). After
    /// a fallback (`infinite`) the subflow's own budget is the limit.
    fn admit(&mut self, counters: &mut Counters, infinite: bool, off: u64, len: usize) -> Option<usize> {
        if infinite {
            return Some(usize::MAX);
        }
        let room = self.buf.make_room(off, len, mem_budget(self.limit));
        counters.mptcp_ofo_pruned += (room.pruned_chunks > 0) as u64;
        counters.mptcp_rcv_pruned += !room.fits as u64;
        room.fits.then_some(room.spare)
    }

    /// The peer's DATA_FIN is next in order: it takes one data sequence
    /// number and the stream ends. `true` the one time this happens.
    pub fn take_peer_fin_in_order(&mut self) -> bool {
        match self.peer_fin {
            Some(fin) if !self.peer_fin_done && self.nxt == fin => {
                self.nxt += 1;
                self.peer_fin_done = true;
                true
            }
            _ => false,
        }
    }

    /// After a fallback the subflow's FIN, in order, ended the stream.
    pub fn end_by_subflow_fin(&mut self) {
        self.peer_fin_done = true;
    }

    // ------------------------------------------------------------------
    // Our side
    // ------------------------------------------------------------------

    /// The window to announce with `recv_window` free in the buffer,
    /// relative to the DATA_ACK: its edge never moves back.
    pub fn announce_window(&mut self, recv_window: u64) -> u64 {
        self.wnd_end = self.wnd_end.max(self.nxt + recv_window);
        self.wnd_end - self.nxt
    }

    /// The application reads in-order data into `out`.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let n = self.buf.read(out);
        self.space.on_read(n);
        n
    }

    /// The application takes the next piece of in-order data, at most `max` bytes.
    pub fn read_piece(&mut self, max: usize) -> Option<Bytes> {
        let b = self.buf.read_piece(max);
        self.space.on_read(b.as_ref().map_or(0, Bytes::len));
        b
    }

    /// Receive-buffer autotuning (Linux DRS) over an RTT of `rtt`: the
    /// buffer grows to what the application consumed per RTT, at most `max`.
    pub fn adjust_space(&mut self, now: Instant, rtt: Duration, mss: usize, max: usize) {
        if let Some(rcvwin) = self.space.adjust(now, rtt, mss) {
            self.limit = self.limit.max(rcvwin.min(max));
        }
    }
}
