//! [`MptcpListener`]: accepts connections, like `tokio::net::TcpListener`.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::task::{Context, Poll};

use tokio::net::ToSocketAddrs;

use crate::state::{ListenerState, State};
use crate::{MptcpStream, Stack};

/// Linux's default `net.ipv4.ip_local_port_range` (32768–60999), the core's
/// range: a listener bound to port 0 gets a port from it, as a kernel socket
/// would, so a peer or a firewall rule sees the ports it expects.
pub(crate) const EPHEMERAL_PORTS: std::ops::RangeInclusive<u16> = mptun_proto::endpoint::IP_LOCAL_PORT_RANGE;

/// A listening socket of a [`Stack`].
///
/// Connections whose handshake completed wait in its queue (up to Linux's
/// `somaxconn`, 4096) until [`MptcpListener::accept`] takes them. A peer
/// offering MPTCP gets MPTCP; one that does not gets plain TCP, and both
/// come out of `accept` the same way.
pub struct MptcpListener {
    stack: Stack,
    id: u64,
    addr: SocketAddr,
}

impl MptcpListener {
    /// Listens on `addr`: one of the stack's path addresses, or the
    /// unspecified address for all of them. Port 0 picks a free port.
    pub async fn bind(stack: &Stack, addr: impl ToSocketAddrs) -> io::Result<MptcpListener> {
        let mut last = None;
        for a in tokio::net::lookup_host(addr).await? {
            match Self::bind_one(stack, a) {
                Ok(l) => return Ok(l),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "could not resolve to any address")))
    }

    fn bind_one(stack: &Stack, mut addr: SocketAddr) -> io::Result<MptcpListener> {
        let id = stack.shared().update(|st| {
            if st.driver_gone || st.shutdown {
                return Err(State::gone_error());
            }
            if !addr.ip().is_unspecified() && !st.local_ips.contains(&addr.ip()) {
                return Err(io::Error::new(
                    io::ErrorKind::AddrNotAvailable,
                    format!("{} is no path of the stack", addr.ip()),
                ));
            }
            let clashes = |st: &State, a: SocketAddr| {
                st.listeners.values().any(|l| {
                    l.addr.port() == a.port()
                        && (l.addr.ip() == a.ip() || l.addr.ip().is_unspecified() || a.ip().is_unspecified())
                })
            };
            if addr.port() == 0 {
                // The ephemeral range, scanned from a point that varies per call.
                let (first, count) = (*EPHEMERAL_PORTS.start(), EPHEMERAL_PORTS.len() as u16);
                let start = (st.next_listener as u16).wrapping_mul(7919) % count;
                let port = (0..count)
                    .map(|i| first + (start + i) % count)
                    .find(|&p| !clashes(st, SocketAddr::new(addr.ip(), p)))
                    .ok_or_else(|| io::Error::new(io::ErrorKind::AddrInUse, "no free port"))?;
                addr.set_port(port);
            } else if clashes(st, addr) {
                return Err(io::Error::new(io::ErrorKind::AddrInUse, format!("{addr} is already bound")));
            }
            // The endpoint listens on the stack's own addresses only: a SYN
            // to any other address the OS routes into a device finds no
            // listener and is answered as a closed port is (RFC 9293
            // 3.10.7.1: RST), never accepted as if it were ours.
            for a in own_addrs(&st.local_ips, addr) {
                st.ep.listen(a);
            }
            let id = st.next_listener;
            st.next_listener += 1;
            st.listeners.insert(id, ListenerState { addr, queue: VecDeque::new(), waker: None, scheduler: None });
            tracing::debug!(%addr, "listening");
            Ok(id)
        })?;
        Ok(MptcpListener { stack: stack.clone(), id, addr })
    }

    /// Waits for the next connection; returns it with the peer's address.
    pub async fn accept(&self) -> io::Result<(MptcpStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls for the next connection.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(MptcpStream, SocketAddr)>> {
        let mut st = self.stack.shared().lock();
        let st = &mut *st;
        let gone = st.driver_gone;
        let Some(l) = st.listeners.get_mut(&self.id) else { return Poll::Ready(Err(State::gone_error())) };
        while let Some(h) = l.queue.pop_front() {
            // The listener's reference passes to the stream.
            let Some((local, peer)) = st.ep.addresses(h) else { continue };
            if let (Some(make), Some(conn)) = (&l.scheduler, st.ep.conn_mut(h)) {
                conn.set_scheduler(make());
            }
            return Poll::Ready(Ok((MptcpStream::accepted(self.stack.clone(), h, local, peer), peer)));
        }
        if gone {
            return Poll::Ready(Err(State::gone_error()));
        }
        l.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The MPTCP scheduler of the connections this listener hands out from
    /// now on, instead of the stack's (`net.mptcp.scheduler`): the server
    /// side of a scheduler experiment. It is set as `accept` returns a
    /// connection, before the application can write to it, so all its data
    /// is scheduled by it. Any [`Scheduler`](mptun_proto::sched::Scheduler)
    /// will do, one of [`Policy`](mptun_proto::sched::Policy)'s by name with
    /// [`crate::scheduler_by_name`].
    pub fn set_scheduler(&self, factory: impl Fn() -> Box<dyn mptun_proto::sched::Scheduler> + Send + Sync + 'static) {
        let id = self.id;
        let factory: crate::options::SchedulerFactory = std::sync::Arc::new(factory);
        self.stack.shared().update(|st| {
            if let Some(l) = st.listeners.get_mut(&id) {
                l.scheduler = Some(factory);
            }
        });
    }

    /// The bound address (with the port chosen if 0 was given).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.addr)
    }

    /// The stack the listener lives on.
    pub fn stack(&self) -> &Stack {
        &self.stack
    }
}

impl Drop for MptcpListener {
    fn drop(&mut self) {
        let id = self.id;
        self.stack.shared().update(|st| close(st, id));
    }
}

/// Closes listener `id` (dropped, or its stack ending): its addresses take
/// no more connections, and those not yet accepted are reset, as when a
/// kernel listener closes.
pub(crate) fn close(st: &mut State, id: u64) {
    if let Some(l) = st.listeners.remove(&id) {
        for a in own_addrs(&st.local_ips, l.addr) {
            st.ep.unlisten(a);
        }
        for h in l.queue {
            st.ep.abort(h);
            st.release(h);
        }
    }
}

/// The concrete addresses a listener on `addr` takes: `addr` itself, or
/// for the unspecified address every path address of the family (`[::]`:
/// of both, as a dual-stack kernel socket).
fn own_addrs(local_ips: &[IpAddr], addr: SocketAddr) -> Vec<SocketAddr> {
    if !addr.ip().is_unspecified() {
        return vec![addr];
    }
    local_ips.iter().filter(|ip| addr.is_ipv6() || ip.is_ipv4()).map(|&ip| SocketAddr::new(ip, addr.port())).collect()
}

impl std::fmt::Debug for MptcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MptcpListener").field("addr", &self.addr).finish()
    }
}
