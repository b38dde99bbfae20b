//! [`MptcpStream`]: a connected byte stream with the surface of
//! `tokio::net::TcpStream`.
//!
//! Reads and writes go straight to the endpoint's buffers under the stack's
//! lock; a task that finds nothing to read (or no room to write) leaves its
//! waker, which the driver invokes once the connection's state allows
//! progress. Underneath is MPTCP when the peer speaks it and plain TCP when
//! it does not (fallback); the stream looks the same either way.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use mptun_proto::{ConnectError, ConnectionHandle};
use tokio::io::ReadBuf;
use tokio::net::ToSocketAddrs;

use crate::info::{StreamInfo, SubflowInfo};
use crate::split::{OwnedReadHalf, OwnedWriteHalf};
use crate::state::{ConnState, State};
use crate::{Stack, StreamOptions};

/// A connection of a [`Stack`], like `tokio::net::TcpStream`.
pub struct MptcpStream {
    pub(crate) inner: Arc<StreamInner>,
}

/// The part both halves of a split stream share; dropping the last one
/// closes the connection.
pub(crate) struct StreamInner {
    stack: Stack,
    h: ConnectionHandle,
    local: SocketAddr,
    peer: SocketAddr,
}

impl MptcpStream {
    /// Opens a connection with the stack's default options, trying each
    /// address `addr` resolves to in turn (like `TcpStream::connect`).
    pub async fn connect(stack: &Stack, addr: impl ToSocketAddrs) -> io::Result<MptcpStream> {
        Self::connect_with(stack, addr, stack.stream_options()).await
    }

    /// Opens a connection with per-stream options.
    pub async fn connect_with(
        stack: &Stack,
        addr: impl ToSocketAddrs,
        options: StreamOptions,
    ) -> io::Result<MptcpStream> {
        let mut last = None;
        for remote in tokio::net::lookup_host(addr).await? {
            match Self::connect_one(stack, remote, &options).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "could not resolve to any address")))
    }

    async fn connect_one(stack: &Stack, remote: SocketAddr, options: &StreamOptions) -> io::Result<MptcpStream> {
        let local = match options.bind {
            Some(l) => l,
            None => SocketAddr::new(
                stack.pick_local(remote).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::AddrNotAvailable, format!("no path of {remote}'s address family"))
                })?,
                0,
            ),
        };
        let shared = stack.shared().clone();
        let mut cfg = options.cfg.clone();
        // A property of the devices, not of the stream.
        cfg.tcp.checksum_offload = stack.checksum_offload();
        cfg.tcp.gather_payload = stack.zero_copy_send();
        cfg.tcp.tso &= stack.devices_tso();
        let scheduler = options.scheduler.clone();
        let (h, local) = shared.update(|st| {
            if st.driver_gone || st.shutdown {
                return Err(State::gone_error());
            }
            if !st.local_ips.contains(&local.ip()) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("{} is no path of the stack", local.ip()),
                ));
            }
            let wake_space = StreamOptions::wake_space(&cfg);
            let now = shared.clock.now();
            let h = st.ep.connect_conn(now, local, remote, cfg).map_err(|e| connect_error(e, local, remote))?;
            if let (Some(make), Some(conn)) = (&scheduler, st.ep.conn_mut(h)) {
                conn.set_scheduler(make());
            }
            let local = st.ep.addresses(h).map_or(local, |a| a.0);
            let span = tracing::debug_span!("conn", id = h.0, %local, %remote, side = "client");
            span.in_scope(|| tracing::debug!("connecting"));
            st.conns.insert(h, ConnState::new(1, wake_space, span));
            Ok((h, local))
        })?;
        // From here a cancelled connect (the future dropped) closes the
        // connection through StreamInner's Drop.
        let inner = Arc::new(StreamInner { stack: stack.clone(), h, local, peer: remote });
        poll_fn(|cx| {
            let mut st = shared.lock();
            let st = &mut *st;
            let Some(cs) = st.conns.get_mut(&h) else { return Poll::Ready(Err(State::gone_error())) };
            if let Some(kind) = cs.error {
                // The kind's own wording ("connection refused", "timed out"): the cause, not just the address.
                return Poll::Ready(Err(io::Error::new(
                    kind,
                    format!("connect to {remote}: {}", io::Error::from(kind)),
                )));
            }
            if cs.connected {
                return Poll::Ready(Ok(()));
            }
            if st.ep.is_closed(h) {
                // Closed during the handshake without a timeout: the peer
                // reset it (the core reports no Reset while MP_CAPABLE is
                // pending), which for a connect is a refusal.
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("connect to {remote}: connection refused"),
                )));
            }
            if st.driver_gone {
                return Poll::Ready(Err(State::gone_error()));
            }
            cs.connect = Some(cx.waker().clone());
            st.watch.insert(h);
            Poll::Pending
        })
        .await?;
        Ok(MptcpStream { inner })
    }

    /// Wraps a connection a listener accepted.
    pub(crate) fn accepted(stack: Stack, h: ConnectionHandle, local: SocketAddr, peer: SocketAddr) -> Self {
        MptcpStream { inner: Arc::new(StreamInner { stack, h, local, peer }) }
    }

    /// The local address of the connection's first subflow.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.local)
    }

    /// The peer's address on the first subflow.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.peer)
    }

    /// `TCP_NODELAY`, at any time as on a kernel socket: the connection and
    /// every subflow switch Nagle's algorithm at once. Turning it off wakes
    /// the driver, which sends what Nagle was holding back.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        let h = self.inner.h;
        self.inner.stack.shared().update(|st| {
            let conn = st.ep.conn_mut(h).ok_or_else(State::gone_error)?;
            conn.set_nodelay(nodelay);
            Ok(())
        })
    }

    /// Whether Nagle's algorithm is off (the default here, unlike a kernel
    /// socket: a stack in userspace pays per packet less than per wait).
    pub fn nodelay(&self) -> io::Result<bool> {
        let st = self.inner.stack.shared().lock();
        st.ep.conn(self.inner.h).map(|c| c.nodelay()).ok_or_else(State::gone_error)
    }

    /// A `TCP_INFO`/`MPTCP_INFO`-like snapshot of the connection and its subflows.
    pub fn info(&self) -> io::Result<StreamInfo> {
        self.inner.info()
    }

    /// Per-subflow snapshots (cwnd, srtt, pacing rate, bytes, retransmissions).
    pub fn subflows(&self) -> io::Result<Vec<SubflowInfo>> {
        Ok(self.inner.info()?.conn.subflows)
    }

    /// The stack the stream lives on.
    pub fn stack(&self) -> &Stack {
        &self.inner.stack
    }

    /// Splits into owned halves that can move to different tasks. Dropping
    /// the write half shuts down the write direction, as in tokio.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        crate::split::split(self.inner)
    }
}

impl StreamInner {
    fn info(&self) -> io::Result<StreamInfo> {
        let st = self.stack.shared().lock();
        let c = st.ep.conn(self.h).ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "connection is gone"))?;
        Ok(StreamInfo {
            local: self.local,
            remote: self.peer,
            established: st.ep.is_established(self.h),
            conn: c.info(),
            counters: c.counters(),
        })
    }

    pub(crate) fn local(&self) -> SocketAddr {
        self.local
    }

    pub(crate) fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub(crate) fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let r =
            self.poll_recv(cx, |ep, h, now| ep.recv(h, now, buf.initialize_unfilled()).map(|n| (n > 0).then_some(n)));
        r.map_ok(|got| {
            if let Some(n) = got {
                buf.advance(n);
            }
        })
    }

    /// The next piece of the stream as it arrived, at most `max` bytes,
    /// not copied; `None` at its end.
    pub(crate) fn poll_read_chunk(&self, cx: &mut Context<'_>, max: usize) -> Poll<io::Result<Option<Bytes>>> {
        if max == 0 {
            // As `read` into an empty buffer returns 0 at once.
            return Poll::Ready(Ok(None));
        }
        self.poll_recv(cx, |ep, h, now| ep.recv_piece(h, now, max))
    }

    /// A read of either kind: `take` returns what it took (`None`:
    /// nothing ready). Ready with `None` at the end of the stream.
    fn poll_recv<T>(
        &self,
        cx: &mut Context<'_>,
        take: impl FnOnce(
            &mut mptun_proto::Endpoint,
            ConnectionHandle,
            mptun_time::Instant,
        ) -> Result<Option<T>, mptun_proto::RecvError>,
    ) -> Poll<io::Result<Option<T>>> {
        let shared = self.stack.shared();
        let mut guard = shared.lock();
        let st = &mut *guard;
        let now = shared.clock.now();
        let r = take(&mut st.ep, self.h, now);
        if let Ok(Some(got)) = r {
            // Reading may open the window enough for a window update.
            let w = st.driver_waker.take();
            drop(guard);
            if let Some(w) = w {
                w.wake();
            }
            return Poll::Ready(Ok(Some(got)));
        }
        let Some(cs) = st.conns.get_mut(&self.h) else { return Poll::Ready(Err(State::gone_error())) };
        if let Some(kind) = cs.error {
            return Poll::Ready(Err(kind.into()));
        }
        if let Err(e) = r {
            // Ended by the stack itself (`Stack::shutdown` with this stream
            // still held): an error, never an end of stream that would pass
            // a cut-off transfer for a whole one.
            if e == mptun_proto::RecvError::InvalidState && (st.shutdown || st.driver_gone) {
                return Poll::Ready(Err(State::gone_error()));
            }
            // The peer's orderly end, or a close without one that left no
            // error to report: end of stream either way, as a kernel socket
            // reads 0 once it is closed.
            return Poll::Ready(Ok(None));
        }
        if st.driver_gone {
            return Poll::Ready(Err(State::gone_error()));
        }
        cs.read = Some(cx.waker().clone());
        st.watch.insert(self.h);
        Poll::Pending
    }

    pub(crate) fn poll_write(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let shared = self.stack.shared();
        let mut guard = shared.lock();
        let st = &mut *guard;
        let Some(cs) = st.conns.get_mut(&self.h) else { return Poll::Ready(Err(State::gone_error())) };
        if let Some(kind) = cs.error {
            return Poll::Ready(Err(kind.into()));
        }
        if cs.write_shutdown || st.ep.is_closed(self.h) {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "write side is shut down")));
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let Ok(n) = st.ep.send(self.h, data) else {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "connection not open for sending")));
        };
        if n > 0 {
            let w = st.driver_waker.take();
            drop(guard);
            if let Some(w) = w {
                w.wake();
            }
            return Poll::Ready(Ok(n));
        }
        if st.driver_gone {
            return Poll::Ready(Err(State::gone_error()));
        }
        cs.write = Some(cx.waker().clone());
        st.watch.insert(self.h);
        Poll::Pending
    }

    /// Shuts the write direction down: a FIN (DATA_FIN under MPTCP) after
    /// the queued data. Idempotent.
    pub(crate) fn shutdown_write(&self) {
        let h = self.h;
        self.stack.shared().update(|st| {
            if let Some(cs) = st.conns.get_mut(&h) {
                if !cs.write_shutdown {
                    cs.write_shutdown = true;
                    cs.span.in_scope(|| tracing::debug!("shutdown(write)"));
                    st.ep.close(h);
                }
            }
        });
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        let h = self.h;
        self.stack.shared().update(|st| st.release(h));
    }
}

/// `AsyncRead` for a handle of a [`StreamInner`] (the stream, its read
/// half), and its zero-copy read.
macro_rules! forward_read {
    ($t:ty) => {
        impl $t {
            /// Reads the next piece of the stream as it arrived, at most
            /// `max` bytes, without copying it out of the buffer the device
            /// read it into (quinn's `read_chunk`): the application gets
            /// the bytes in its memory with one copy in all (the device's),
            /// where `AsyncRead` makes a second. `Ok(None)` at the end of
            /// the stream, and at once for a `max` of 0 (as `read` into an
            /// empty buffer returns 0). A piece keeps the receive buffer it
            /// is a slice of (up to 64 KiB) alive until it is dropped, so
            /// an application that holds on to data should copy what it
            /// keeps. Reads of both kinds may be mixed; the window opens as
            /// with `read`. A piece is often one received segment: to hash
            /// or parse in large blocks, gather pieces or use `read`.
            pub async fn read_chunk(&mut self, max: usize) -> std::io::Result<Option<bytes::Bytes>> {
                std::future::poll_fn(|cx| self.inner.poll_read_chunk(cx, max)).await
            }

            /// [`Self::read_chunk`] as a poll function, for hand-written futures.
            pub fn poll_read_chunk(
                &mut self,
                cx: &mut std::task::Context<'_>,
                max: usize,
            ) -> std::task::Poll<std::io::Result<Option<bytes::Bytes>>> {
                self.inner.poll_read_chunk(cx, max)
            }
        }

        impl tokio::io::AsyncRead for $t {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                self.inner.poll_read(cx, buf)
            }
        }
    };
}

/// `AsyncWrite` for a handle of a [`StreamInner`] (the stream, its write
/// half): shutdown sends the FIN.
macro_rules! forward_write {
    ($t:ty) => {
        impl tokio::io::AsyncWrite for $t {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                self.inner.poll_write(cx, buf)
            }

            /// Data is handed to the stack on write; like a kernel socket
            /// there is nothing to flush.
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                _cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                _cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                self.inner.shutdown_write();
                std::task::Poll::Ready(Ok(()))
            }
        }
    };
}
pub(crate) use {forward_read, forward_write};

forward_read!(MptcpStream);
forward_write!(MptcpStream);

/// The `io::Error` a failed `connect` gives, as `TcpStream::connect` would:
/// `AddrNotAvailable` when no local port is left towards `remote`,
/// `AddrInUse` when the bound pair is taken.
fn connect_error(e: ConnectError, local: SocketAddr, remote: SocketAddr) -> io::Error {
    let kind = match e {
        ConnectError::AddrNotAvailable => io::ErrorKind::AddrNotAvailable,
        ConnectError::AddrInUse => io::ErrorKind::AddrInUse,
        ConnectError::TooManyConnections => io::ErrorKind::OutOfMemory,
    };
    io::Error::new(kind, format!("connect from {local} to {remote}: {e}"))
}

impl std::fmt::Debug for MptcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MptcpStream").field("local", &self.inner.local).field("peer", &self.inner.peer).finish()
    }
}
