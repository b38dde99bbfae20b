//! The data-level send side's state (Linux keeps it in the msk: `snd_una`,
//! `snd_nxt`, `write_seq`, `wnd_end`, the retransmit queue, the DATA_FIN
//! flags): our data sequence space, the connection's send buffer, what waits
//! to be sent again, and our DATA_FIN. Its fields are private: every change
//! is one of the methods below, so that the invariants between them
//! (`una <= nxt <= write_seq`, the buffer starting at `una`, the DATA_FIN at
//! `write_seq`) are kept in one file. The send path that uses it is `tx.rs`.

use crate::buf::SendBuf;
use crate::seq::{DataSeq, Seq};
use bytes::Bytes;
use mptun_time::{Duration, Instant};
use mptun_wire::mptcp::DataAck;
use std::collections::VecDeque;

use super::data_rx::expand32;

/// Our DATA_FIN (Linux `snd_data_fin_enable` and its retransmission).
#[derive(Debug, Default)]
pub(super) struct OurDataFin {
    /// Its data sequence number, once the application closed.
    seq: Option<DataSeq>,
    /// The peer DATA_ACKed it.
    acked: bool,
    /// Send it (again) on the next pure ACK.
    due: bool,
    /// When it was first sent: the connection is given up (reset with
    /// MP_FASTCLOSE) if it is not DATA_ACKed within `MPTCP_CLOSE_TIMEOUT`.
    first_sent: Option<Instant>,
    /// Retransmissions so far.
    backoff: u32,
    /// It went out at least once: the peer may have it, and a Linux peer
    /// takes no join from then on (`Connection::own_joins_closed`).
    sent: bool,
    /// Until when its first transmission may wait for our joins
    /// (`Connection::data_fin_hold`), fixed at the first look.
    hold_until: Option<Instant>,
    /// Its timer is set to `hold_until`, not to its first transmission.
    held: bool,
}

impl OurDataFin {
    /// Its data sequence number, once the application closed.
    pub fn seq(&self) -> Option<DataSeq> {
        self.seq
    }

    /// The peer DATA_ACKed it.
    pub fn acked(&self) -> bool {
        self.acked
    }

    /// It waits for the next pure ACK to carry it.
    pub fn due(&self) -> bool {
        self.due
    }

    /// It went out at least once.
    pub fn sent(&self) -> bool {
        self.sent
    }

    /// When it first went out (its timer first fired).
    pub fn first_sent(&self) -> Option<Instant> {
        self.first_sent
    }

    /// Until when its first transmission may wait for our joins: `at` the
    /// first time it is asked, the same instant every time after.
    pub fn hold_until(&mut self, at: Instant) -> Instant {
        *self.hold_until.get_or_insert(at)
    }

    /// Its timer now waits for the hold, not for its first transmission.
    pub fn hold(&mut self) {
        self.held = true;
    }

    /// The hold is over: `true` if its timer was set to the hold's end.
    pub fn release_hold(&mut self) -> bool {
        std::mem::take(&mut self.held)
    }

    /// Its timer fired: it is due on the next pure ACK. Returns when it
    /// first went out (now, the first time) and the retransmissions before
    /// this one, what the next deadline backs off by.
    pub fn on_timer(&mut self, now: Instant) -> (Instant, u32) {
        let first = *self.first_sent.get_or_insert(now);
        self.due = true;
        let backoff = self.backoff;
        self.backoff += 1;
        (first, backoff)
    }
}

/// The data-level send side: our data sequence space, the connection's
/// send buffer, what waits to be sent again, and our DATA_FIN.
#[derive(Debug)]
pub(super) struct DataTx {
    /// First DSN of our data (IDSN + 1).
    base: DataSeq,
    /// Oldest data the peer has not DATA_ACKed.
    una: DataSeq,
    /// Next new data to hand to a subflow.
    nxt: DataSeq,
    /// Just past the last byte the application wrote.
    write_seq: DataSeq,
    /// Right edge of the peer's connection-level window.
    wnd_end: DataSeq,
    /// Bytes from `una` on (indexed by the low 32 bits of the DSN).
    buf: SendBuf,
    /// The send buffer's size (the msk's `SO_SNDBUF`, autotuned).
    limit: usize,
    /// Data ranges to send again on another subflow, oldest first.
    reinject: VecDeque<(DataSeq, DataSeq)>,
    /// The last byte the peer DATA_ACKed: what a zero-window probe carries
    /// (Linux probes with the byte at `snd_una - 1`, a duplicate at the data
    /// level that the subflow still acknowledges).
    last_acked_byte: Option<u8>,
    fin: OurDataFin,
    /// Since when data waits for the peer's window, if it does (Linux's
    /// `TCP_CHRONO_RWND_LIMITED`, here at the connection level), and the
    /// time so limited before.
    rwnd_since: Option<Instant>,
    rwnd_limited: Duration,
}

impl DataTx {
    /// A send side starting at DSN `base` (our IDSN + 1).
    pub fn new(base: DataSeq, limit: usize) -> Self {
        DataTx {
            base,
            una: base,
            nxt: base,
            write_seq: base,
            wnd_end: base,
            buf: SendBuf::new(Seq(base.0 as u32)),
            limit,
            reinject: VecDeque::new(),
            last_acked_byte: None,
            fin: OurDataFin::default(),
            rwnd_since: None,
            rwnd_limited: Duration::ZERO,
        }
    }

    // ------------------------------------------------------------------
    // What it holds
    // ------------------------------------------------------------------

    /// First DSN of our data (IDSN + 1).
    pub fn base(&self) -> DataSeq {
        self.base
    }

    /// Oldest data the peer has not DATA_ACKed.
    pub fn una(&self) -> DataSeq {
        self.una
    }

    /// Next new data to hand to a subflow.
    pub fn nxt(&self) -> DataSeq {
        self.nxt
    }

    /// Just past the last byte the application wrote.
    pub fn write_seq(&self) -> DataSeq {
        self.write_seq
    }

    /// Right edge of the peer's connection-level window.
    pub fn wnd_end(&self) -> DataSeq {
        self.wnd_end
    }

    /// The bytes from `una` on.
    pub fn buf(&self) -> &SendBuf {
        &self.buf
    }

    /// The send buffer's size.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Room in the send buffer for the application.
    pub fn space(&self) -> usize {
        self.limit.saturating_sub(self.buf.len())
    }

    /// The last byte the peer DATA_ACKed, once there is one.
    pub fn last_acked_byte(&self) -> Option<u8> {
        self.last_acked_byte
    }

    /// Our DATA_FIN.
    pub fn fin(&self) -> &OurDataFin {
        &self.fin
    }

    /// Our DATA_FIN, for its timer's bookkeeping.
    pub fn fin_mut(&mut self) -> &mut OurDataFin {
        &mut self.fin
    }

    /// The peer DATA_ACKed every byte the application wrote.
    pub fn all_acked(&self) -> bool {
        !self.write_seq.gt(self.una)
    }

    /// Every byte the application wrote has been sent at least once: only
    /// acknowledgements (and repairs) are left.
    pub fn all_sent(&self) -> bool {
        !self.write_seq.gt(self.nxt)
    }

    /// Data waits, nothing is in flight and the peer's window admits none
    /// of it: only a window update (or a probe) moves it.
    pub fn window_closed(&self) -> bool {
        self.wnd_end.le(self.nxt) && self.una == self.nxt && self.write_seq.gt(self.nxt)
    }

    /// Our DATA_FIN's number, when it is due on the next pure ACK.
    pub fn data_fin_due(&self) -> Option<DataSeq> {
        self.fin.seq.filter(|_| self.fin.due)
    }

    // ------------------------------------------------------------------
    // The application
    // ------------------------------------------------------------------

    /// The application wrote `data` (the caller sized it to [`DataTx::space`]).
    pub fn append(&mut self, data: Bytes) {
        self.write_seq += data.len() as u64;
        self.buf.push(data);
    }

    /// The application closed: our DATA_FIN follows the last byte written.
    /// `false` if it was queued already.
    pub fn close(&mut self) -> bool {
        if self.fin.seq.is_some() {
            return false;
        }
        self.fin.seq = Some(self.write_seq);
        true
    }

    // ------------------------------------------------------------------
    // The peer
    // ------------------------------------------------------------------

    /// DATA_ACK: the peer holds our data up to it, so it can be released,
    /// and its window's right edge is `wnd` past it. An acknowledgement
    /// before `una` or past what was sent (the DATA_FIN counts as sent once
    /// all data before it went) is ignored.
    pub fn on_data_ack(&mut self, a: &DataAck, wnd: u64) {
        let ack = DataSeq(if a.ack64 { a.ack } else { expand32(a.ack, self.una.0) });
        let max = self.nxt + self.fin.seq.is_some_and(|f| f == self.nxt) as u64;
        if ack.lt(self.una) || ack.gt(max) {
            return;
        }
        self.una = ack;
        self.wnd_end = self.wnd_end.max(ack + wnd);
        if self.fin.seq.is_some_and(|f| ack.gt(f)) {
            self.fin.acked = true;
            self.fin.due = false;
        }
    }

    /// A window the handshake gave: its right edge at `edge`, if further.
    pub fn open_window(&mut self, edge: DataSeq) {
        self.wnd_end = self.wnd_end.max(edge);
    }

    /// After a fallback the single subflow's acknowledgement is the
    /// DATA_ACK: data up to `una` arrived, with a window of `wnd` past it.
    pub fn acked_by_fallback(&mut self, una: DataSeq, wnd: u64) {
        self.una = una;
        self.wnd_end = self.wnd_end.max(una + wnd);
    }

    /// Releases the bytes the peer DATA_ACKed, keeping the last of them for
    /// a zero-window probe (the DATA_FIN's DATA_ACK is one past the data).
    pub fn release_acked(&mut self) {
        let una_rel = Seq(self.una.0 as u32);
        let head = self.buf.end() - self.buf.len() as u32;
        let last = una_rel.min(self.buf.end());
        if last.gt(head) {
            self.last_acked_byte = self.buf.slice_bytes(last - 1, 1).first().copied();
        }
        self.buf.ack_to(una_rel);
    }

    /// The send buffer may hold `size` bytes, if that is more than now.
    pub fn grow_limit(&mut self, size: usize) {
        self.limit = self.limit.max(size);
    }

    /// Our DATA_FIN went out on a pure ACK.
    pub fn data_fin_sent(&mut self) {
        self.fin.due = false;
        self.fin.sent = true;
    }

    // ------------------------------------------------------------------
    // The push
    // ------------------------------------------------------------------

    /// `len` new bytes from `nxt` went onto a subflow.
    pub fn advance_nxt(&mut self, len: u64) {
        self.nxt += len;
    }

    /// What to push next: the oldest reinjection that still has bytes the
    /// peer did not DATA_ACK (`true`), else the new data (`false`), as
    /// `(start, end)`. Reinjections wholly DATA_ACKed are dropped on the way.
    pub fn next_range(&mut self) -> (DataSeq, DataSeq, bool) {
        while let Some(&(s, e)) = self.reinject.front() {
            let s = s.max(self.una);
            if s.lt(e) {
                return (s, e, true);
            }
            self.reinject.pop_front();
        }
        (self.nxt, self.write_seq, false)
    }

    /// The oldest reinjection was pushed up to `to`.
    pub fn reinjected_up_to(&mut self, to: DataSeq) {
        if let Some(front) = self.reinject.front_mut() {
            front.0 = to;
        }
    }

    /// Queues `[start, end)` to be sent again on another subflow.
    pub fn queue_reinjection(&mut self, start: DataSeq, end: DataSeq) {
        self.reinject.push_back((start, end));
    }

    /// Queues `[start, end)` unless a queued reinjection covers it already;
    /// `true` when it was queued.
    pub fn queue_reinjection_once(&mut self, start: DataSeq, end: DataSeq) -> bool {
        if self.reinject.iter().any(|&(a, b)| a.le(start) && end.le(b)) {
            return false;
        }
        self.reinject.push_back((start, end));
        true
    }

    /// A queued reinjection holds the byte at `una`.
    pub fn una_queued_for_reinjection(&self) -> bool {
        self.reinject.iter().any(|&(a, b)| a.le(self.una) && self.una.lt(b))
    }

    /// Something waits to be sent again.
    pub fn reinjection_pending(&self) -> bool {
        !self.reinject.is_empty()
    }

    /// Bytes queued to be sent again that the peer has not DATA_ACKed.
    pub fn reinject_queued(&self) -> u64 {
        self.reinject.iter().map(|&(a, b)| b.saturating_sub(a.max(self.una))).sum()
    }

    /// After a fallback nothing is sent again at the data level.
    pub fn drop_reinjections(&mut self) {
        self.reinject.clear();
    }

    /// Starts (`limited`) or stops at `now` the receive-window-limited chrono.
    pub fn rwnd_chrono(&mut self, now: Instant, limited: bool) {
        match (limited, self.rwnd_since) {
            (true, None) => self.rwnd_since = Some(now),
            (false, Some(t)) => {
                self.rwnd_limited += now - t;
                self.rwnd_since = None;
            }
            _ => {}
        }
    }

    /// Time the data waited for the peer's window up to `now`.
    pub fn rwnd_limited(&self, now: Instant) -> Duration {
        self.rwnd_limited + self.rwnd_since.map_or(Duration::ZERO, |t| now - t)
    }

    /// The send side for [`super::Connection::debug_state`].
    pub fn debug_summary(&self) -> String {
        format!(
            "snd_una={} snd_nxt={} write_seq={} wnd_end={}",
            self.una - self.base,
            self.nxt - self.base,
            self.write_seq - self.base,
            self.wnd_end.saturating_sub(self.base)
        )
    }

    /// The send buffer, reinjections and DATA_FIN for
    /// [`super::Connection::debug_state`].
    pub fn debug_queues(&self) -> String {
        format!(
            "send_limit={} reinject={:?} fin={:?}/{}",
            self.limit,
            self.reinject,
            self.fin.seq.map(|f| f - self.base),
            self.fin.acked
        )
    }
}
