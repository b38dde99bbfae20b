//! The connection handle a stream and its split halves share: the stack,
//! the connection's handle and its addresses, the reads, writes and
//! shutdowns they all go through, and the macros that give each of them
//! `AsyncRead` and `AsyncWrite`. Dropping the last holder releases the
//! connection.

use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use bytes::Bytes;
use mptun_proto::ConnectionHandle;
use tokio::io::ReadBuf;

use crate::info::StreamInfo;
use crate::state::State;
use crate::Stack;

/// The part both halves of a split stream share; dropping the last one
/// closes the connection.
pub(crate) struct StreamInner {
    pub(crate) stack: Stack,
    pub(crate) h: ConnectionHandle,
    pub(crate) local: SocketAddr,
    pub(crate) peer: SocketAddr,
}

impl StreamInner {
    pub(crate) fn info(&self) -> io::Result<StreamInfo> {
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
        self.poll_write_with(cx, data.len(), |ep, h| ep.send(h, data))
    }

    /// Hands the front of `data` to the send buffer without copying it
    /// and advances `data` past what was taken.
    pub(crate) fn poll_write_chunk(&self, cx: &mut Context<'_>, data: &mut bytes::Bytes) -> Poll<io::Result<usize>> {
        let r = self.poll_write_with(cx, data.len(), |ep, h| {
            // A slice of what fits: the send buffer counts what it holds
            // (the slice still keeps all of `data`'s allocation alive).
            let n = data.len().min(ep.send_space(h));
            if n == 0 {
                return Ok(0);
            }
            ep.send_bytes(h, data.slice(..n))
        });
        if let Poll::Ready(Ok(n)) = r {
            bytes::Buf::advance(data, n);
        }
        r
    }

    /// A write of `len` bytes that `send` queues (and says how many it took).
    fn poll_write_with(
        &self,
        cx: &mut Context<'_>,
        len: usize,
        send: impl FnOnce(
            &mut mptun_proto::Endpoint,
            mptun_proto::ConnectionHandle,
        ) -> Result<usize, mptun_proto::SendError>,
    ) -> Poll<io::Result<usize>> {
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
        if len == 0 {
            return Poll::Ready(Ok(0));
        }
        let Ok(n) = send(&mut st.ep, self.h) else {
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
        impl $t {
            /// Writes all of `data` without copying it (quinn's
            /// `write_chunk`): the send buffer keeps slices of `data` until
            /// the peer acknowledges them, and the device write copies the
            /// bytes once, where `AsyncWrite` copies them into the buffer
            /// first. For an application that owns its data in a `Bytes`
            /// already (a file read into a `BytesMut`, a cached object);
            /// the allocation stays alive until the last of it is
            /// acknowledged. Writes of both kinds may be mixed.
            pub async fn write_chunk(&mut self, mut data: bytes::Bytes) -> std::io::Result<()> {
                while !data.is_empty() {
                    std::future::poll_fn(|cx| self.inner.poll_write_chunk(cx, &mut data)).await?;
                }
                Ok(())
            }

            /// Writes the front of `data` without copying it, advancing
            /// `data` past what the send buffer took ([`Self::write_chunk`]
            /// as a poll function). `Ready(Ok(0))` only for an empty `data`.
            pub fn poll_write_chunk(
                &mut self,
                cx: &mut std::task::Context<'_>,
                data: &mut bytes::Bytes,
            ) -> std::task::Poll<std::io::Result<usize>> {
                self.inner.poll_write_chunk(cx, data)
            }
        }

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
