//! Owned halves of a stream, like `tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf}`.
//!
//! Both halves share the connection; reads and writes already take the
//! stack's lock independently, so splitting needs no extra locking.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::handle::StreamInner;

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

macro_rules! addrs {
    ($half:ty) => {
        impl $half {
            /// The stream's local address (the halves share one connection,
            /// so both answer what the stream would).
            pub fn local_addr(&self) -> io::Result<SocketAddr> {
                Ok(self.inner.local())
            }
            /// The stream's peer address, as the unsplit stream reports it.
            pub fn peer_addr(&self) -> io::Result<SocketAddr> {
                Ok(self.inner.peer())
            }
        }
    };
}

addrs!(OwnedReadHalf);
addrs!(OwnedWriteHalf);
crate::handle::forward_read!(OwnedReadHalf);
crate::handle::forward_write!(OwnedWriteHalf);

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        self.inner.shutdown_write();
    }
}
