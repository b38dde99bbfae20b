//! The connection as the application sees it: one byte stream, whatever
//! the subflows underneath (a socket's `write`/`read`/`shutdown`/`close`
//! and `TCP_NODELAY`). In plain mode every call goes to the single
//! subflow; in MPTCP mode to the connection-level buffers, with the DATA_FIN
//! standing in for the FIN and MP_FASTCLOSE for the RST.

use super::fallback::{ConnMode, Mode};
use super::Connection;
use crate::error::{RecvError, SendError};
use crate::tcp::Subflow;
use bytes::Bytes;
use mptun_time::Instant;

impl Connection {
    /// Bytes [`Connection::send`] would accept now: room in the connection
    /// send buffer (0 until the handshake says where data goes).
    pub fn send_space(&self) -> usize {
        if self.plain() {
            return self.subflow(0).map_or(0, |s| s.send_space());
        }
        // Until the SYN-ACK tells whether the peer speaks MPTCP, data has no
        // home: it would go to the connection if MPTCP, to the subflow if not.
        if self.mode == ConnMode::Pending || self.tx.fin().seq().is_some() || self.subflows.count() == 0 {
            return 0;
        }
        self.tx.space()
    }

    /// Queues as much of `data` as fits and returns how much; like a
    /// non-blocking `write`, the rest must be offered again later. `Ok(0)`:
    /// no room yet (or the handshake has not said where data goes); an
    /// error: no byte will ever be taken again.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, SendError> {
        self.write(data.len(), |n| Bytes::copy_from_slice(&data[..n]))
    }

    /// [`Connection::send`] without a copy: the buffer keeps (a slice of)
    /// `data` itself until it is acknowledged. For a writer that builds its
    /// data in an owned buffer anyway (the simulator's bulk sender). A
    /// partial write keeps all of `data`'s allocation alive while only the
    /// part taken is counted against the send buffer: size writes to
    /// [`Connection::send_space`].
    pub fn send_bytes(&mut self, data: Bytes) -> Result<usize, SendError> {
        self.write(data.len(), |n| data.slice(..n))
    }

    /// Queues the first `n` bytes (at most `len`, as room allows) of a
    /// write, which `take(n)` hands over.
    fn write(&mut self, len: usize, take: impl FnOnce(usize) -> Bytes) -> Result<usize, SendError> {
        if !self.may_send() {
            return Err(SendError::InvalidState);
        }
        if self.plain() {
            return Ok(self.initial().map_or(0, |s| s.write_with(len, take)));
        }
        let n = len.min(self.send_space());
        if n > 0 {
            self.tx.append(take(n));
            self.progress(self.last_now);
        }
        Ok(n)
    }

    /// Whether our direction is still open: the application may write now
    /// or later (in MPTCP mode, no DATA_FIN queued and a subflow left; in
    /// plain mode, the subflow not past its FIN).
    pub fn may_send(&self) -> bool {
        use crate::tcp::State;
        let open = |s: &Subflow| {
            matches!(s.state(), State::SynSent | State::SynReceived | State::Established | State::CloseWait)
        };
        match self.mode() {
            Mode::Plain | Mode::Pending => self.subflow(0).is_some_and(open),
            Mode::Mptcp => {
                self.tx.fin().seq().is_none()
                    && !self.closed_event_sent
                    && self.subflows.live().any(|s| !s.tcp.is_closed())
            }
        }
    }

    /// Bytes readable in order now.
    pub fn recv_ready(&self) -> usize {
        if self.plain() {
            return self.subflow(0).map_or(0, |s| s.recv_ready());
        }
        self.rx.buf().ready_len()
    }

    /// Reads in-order data into `out`. `now` drives receive-buffer
    /// autotuning (the window grows with what the application consumes) and
    /// may trigger a window update.
    ///
    /// `Ok(0)`: nothing yet; [`RecvError::Finished`]: the peer's stream ended
    /// and all of it was read; [`RecvError::InvalidState`]: the connection
    /// closed without that end (reset, timed out).
    pub fn recv(&mut self, now: Instant, out: &mut [u8]) -> Result<usize, RecvError> {
        let n = if self.plain() {
            self.initial().map_or(0, |s| s.recv(now, out))
        } else {
            let n = self.rx.read(out);
            self.after_app_read(now, n);
            n
        };
        if n > 0 || out.is_empty() {
            return Ok(n);
        }
        self.recv_end().map(|()| 0)
    }

    /// Takes the next piece of in-order data (at most `max` bytes, `max` >
    /// 0) as it arrived, never copying it: the application's zero-copy
    /// read (quinn's `read_chunk`), with [`Connection::recv`]'s window
    /// accounting. A piece pins the receive buffer it is a slice of
    /// (typically a device read of up to 64 KiB) until dropped.
    ///
    /// `Ok(None)`: nothing yet (or `max` is 0); the errors as `recv`'s.
    pub fn recv_piece(&mut self, now: Instant, max: usize) -> Result<Option<Bytes>, RecvError> {
        if max == 0 {
            return Ok(None);
        }
        let b = if self.plain() {
            self.initial().and_then(|s| s.recv_piece(now, max))
        } else {
            let b = self.rx.read_piece(max);
            self.after_app_read(now, b.as_ref().map_or(0, Bytes::len));
            b
        };
        if b.is_some() {
            return Ok(b);
        }
        self.recv_end().map(|()| None)
    }

    /// After the application took `n` bytes (MPTCP mode): the connection
    /// level's receive-buffer autotuning and window update.
    fn after_app_read(&mut self, now: Instant, n: usize) {
        if n > 0 {
            self.rcv_space_adjust(now);
            self.maybe_window_update();
        }
    }

    /// Nothing to read: why, if it is for good.
    fn recv_end(&self) -> Result<(), RecvError> {
        // An orderly end only: a plain subflow that was reset is closed but
        // never received the FIN.
        let finished = match self.mode() {
            Mode::Mptcp => self.recv_finished(),
            Mode::Plain | Mode::Pending => self.subflow(0).is_some_and(|s| s.recv_finished()),
        };
        if finished {
            return Err(RecvError::Finished);
        }
        if self.is_closed() {
            return Err(RecvError::InvalidState);
        }
        Ok(())
    }

    /// The peer closed its direction (DATA_FIN, or FIN in plain mode) and
    /// everything before it was read: a `read` would return 0.
    pub fn recv_finished(&self) -> bool {
        if self.plain() {
            return self.subflow(0).is_none_or(|s| s.recv_finished() || s.is_closed());
        }
        self.rx.peer_fin_done() && self.rx.buf().ready_len() == 0
    }

    /// `TCP_NODELAY` for every subflow, present and future.
    pub fn set_nodelay(&mut self, nodelay: bool) {
        self.cfg.tcp.nagle = !nodelay;
        for slot in self.subflows.live_mut() {
            slot.tcp.set_nagle(!nodelay);
        }
    }

    /// Whether Nagle is off (`TCP_NODELAY`).
    pub fn nodelay(&self) -> bool {
        !self.cfg.tcp.nagle
    }

    /// Orderly close: DATA_FIN after the queued data (FIN in plain mode).
    pub fn close(&mut self) {
        if self.plain() || self.mode == ConnMode::Pending {
            if let Some(sf) = self.initial() {
                sf.close();
            }
            return;
        }
        if self.tx.close() {
            self.progress(self.last_now);
        }
    }

    /// Abortive close. In MPTCP mode every subflow's RST carries
    /// MP_FASTCLOSE with the peer's key (RFC 8684 3.5), so the peer tears
    /// the whole connection down at once, not subflow by subflow.
    ///
    /// A connection whose DATA_FINs are both done has nothing left to abort:
    /// it is released without MP_FASTCLOSE, and a subflow whose FIN exchange
    /// finished (TIME_WAIT) is left alone, as the kernel leaves a timewait
    /// socket when its process exits.
    pub fn abort(&mut self) {
        let done = self.tx.fin().acked() && self.rx.peer_fin_done();
        let fastclose = self.mode.is_mptcp() && self.hs.remote_key().is_some() && !done;
        for slot in self.subflows.live_mut() {
            if slot.tcp.state() == crate::tcp::State::TimeWait {
                continue;
            }
            slot.mp.signals.set_fastclose(fastclose);
            slot.tcp.abort();
        }
        if fastclose {
            self.counters.mptcp_mp_fastclose_tx += 1;
        }
    }

    /// Data can flow: the handshake completed (in MPTCP mode, on at least
    /// one subflow).
    pub fn is_established(&self) -> bool {
        match self.mode() {
            Mode::Plain => self.subflow(0).is_some_and(|s| s.state().is_synchronized() && !s.is_closed()),
            Mode::Pending => false,
            Mode::Mptcp => self.subflows.live().any(|s| s.tcp.state().is_synchronized()),
        }
    }

    /// The connection's own state, named as TCP's (Linux's MPTCP socket
    /// state, `ss -M`'s first column): in MPTCP mode it follows the
    /// DATA_FINs, not any one subflow (a subflow may linger in TIME_WAIT
    /// long after the connection is over); plain or still deciding, it is
    /// the initial subflow's. When both DATA_FINs are out and ours is not
    /// yet acknowledged it reports `LastAck` (a simultaneous close's
    /// `Closing` is not told apart).
    pub fn state(&self) -> crate::tcp::State {
        use crate::tcp::State;
        if self.mode() != Mode::Mptcp || self.is_closed() {
            return self.subflow(0).map_or(State::Closed, |s| s.state());
        }
        if !self.is_established() {
            return self.subflows.live().map(|s| s.tcp.state()).next().unwrap_or(State::Closed);
        }
        let fin = self.tx.fin();
        match (fin.seq().is_some(), fin.acked(), self.rx.peer_fin_done()) {
            (false, _, false) => State::Established,
            (false, _, true) => State::CloseWait,
            (true, false, false) => State::FinWait1,
            (true, true, false) => State::FinWait2,
            (true, false, true) => State::LastAck,
            (true, true, true) => State::Closed,
        }
    }

    /// Every subflow is closed: the endpoint may reap the connection.
    pub fn is_closed(&self) -> bool {
        self.subflows.live().all(|s| s.tcp.is_closed())
    }

    /// The peer acknowledged every byte the application wrote (at the data
    /// level in MPTCP mode, on the subflow in plain mode): at most the FIN
    /// (the DATA_FIN) is left to deliver.
    pub fn all_data_acked(&self) -> bool {
        if self.plain() {
            return self.subflow(0).is_none_or(|s| s.send_queued() == 0);
        }
        self.tx.all_acked()
    }

    /// Every byte the application wrote was sent at least once (at the data
    /// level; in plain mode, only once it was all acknowledged): what is
    /// left is the peer's acknowledgement, a round trip away.
    pub fn all_data_sent(&self) -> bool {
        if self.plain() {
            return self.all_data_acked();
        }
        self.tx.all_sent()
    }

    /// Every subflow is closed (its close over, or reset) or in TIME_WAIT
    /// (both FINs went and ours was acknowledged): [`Self::abort`] would
    /// send nothing, and a host that goes away now leaves the peer waiting
    /// for nothing, as the kernel's timewait sockets when their process
    /// exits.
    pub fn is_finished(&self) -> bool {
        self.subflows.live().all(|s| matches!(s.tcp.state(), crate::tcp::State::Closed | crate::tcp::State::TimeWait))
    }
}
