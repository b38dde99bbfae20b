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
use std::task::Poll;

use mptun_proto::{ConnectError, ConnectionHandle};
use tokio::net::ToSocketAddrs;

use crate::handle::{forward_read, forward_write, StreamInner};
use crate::info::{StreamInfo, SubflowInfo};
use crate::split::{OwnedReadHalf, OwnedWriteHalf};
use crate::state::{ConnState, State};
use crate::{Stack, StreamOptions};

/// A connection of a [`Stack`], like `tokio::net::TcpStream`.
pub struct MptcpStream {
    pub(crate) inner: Arc<StreamInner>,
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
            // Options that kept the stack's path manager get its endpoints
            // and limits as they are now, changes made at run time included.
            let mut cfg = cfg;
            if cfg.mptcp.pm == *stack.built_pm() {
                cfg.mptcp.pm = st.ep.pm_config().clone();
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

    /// The connection's path-manager commands (announce, remove,
    /// subflow-create/destroy, backup), or `None` when it does not speak
    /// MPTCP (plain TCP, or fallen back): there is no token to address.
    pub fn path_manager(&self) -> io::Result<Option<crate::ConnectionPm>> {
        let token = self.token()?;
        Ok(token.map(|t| crate::ConnectionPm::new(self.inner.stack.clone(), t)))
    }

    /// Our MPTCP token for the connection (what path-manager events and
    /// commands name it by), `None` for plain TCP or after a fallback.
    pub fn token(&self) -> io::Result<Option<u32>> {
        let st = self.inner.stack.shared().lock();
        let c = st.ep.conn(self.inner.h).ok_or_else(State::gone_error)?;
        Ok(c.local_token().filter(|_| c.mode() == mptun_proto::mptcp::Mode::Mptcp))
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
