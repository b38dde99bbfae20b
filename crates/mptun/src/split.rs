//! Owned halves of a stream, like `tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf}`.
//!
//! Both halves share the connection; reads and writes already take the
//! stack's lock independently, so splitting needs no extra locking.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::stream::StreamInner;

/// The reading half of an [`crate::MptcpStream`].
pub struct OwnedReadHalf {
    inner: Arc<StreamInner>,
}

/// The writing half of an [`crate::MptcpStream`]. Dropping it shuts the
/// write direction down (FIN / DATA_FIN), as tokio's does.
pub struct OwnedWriteHalf {
    inner: Arc<StreamInner>,
}

pub(crate) fn split(inner: Arc<StreamInner>) -> (OwnedReadHalf, OwnedWriteHalf) {
    (OwnedReadHalf { inner: inner.clone() }, OwnedWriteHalf { inner })
}

impl OwnedReadHalf {
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.local())
    }
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.peer())
    }
}

impl OwnedWriteHalf {
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.local())
    }
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.inner.peer())
    }
}

impl AsyncRead for OwnedReadHalf {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.inner.poll_read(cx, buf)
    }
}

impl AsyncWrite for OwnedWriteHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.inner.poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.inner.shutdown_write();
        Poll::Ready(Ok(()))
    }
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        self.inner.shutdown_write();
    }
}
