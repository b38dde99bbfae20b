//! Kernel sockets inside a lab namespace, driven by plain threads, and the
//! kernel's own counters (`nstat`) read from inside the namespace.

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use mptun_io::run_in_netns;
use socket2::{Domain, Protocol, Socket, Type};

/// `IPPROTO_MPTCP` (Linux ≥ 5.6).
pub const IPPROTO_MPTCP: i32 = 262;

/// Which protocol a kernel socket asks for at `socket()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Mptcp,
}

fn socket(addr: SocketAddr, proto: Proto) -> io::Result<Socket> {
    let p = match proto {
        Proto::Tcp => Protocol::TCP,
        Proto::Mptcp => Protocol::from(IPPROTO_MPTCP),
    };
    Socket::new(Domain::for_address(addr), Type::STREAM, Some(p))
}

/// A listening kernel socket created inside namespace `ns`.
pub fn listen(ns: &str, addr: SocketAddr, proto: Proto) -> io::Result<TcpListener> {
    run_in_netns(ns, || {
        let s = socket(addr, proto)?;
        s.set_reuse_address(true)?;
        s.bind(&addr.into())?;
        s.listen(16)?;
        Ok(TcpListener::from(s))
    })?
}

/// A kernel connection from namespace `ns` (blocking connect, bounded).
pub fn connect(ns: &str, to: SocketAddr, proto: Proto) -> io::Result<TcpStream> {
    run_in_netns(ns, || {
        let s = socket(to, proto)?;
        s.connect_timeout(&to.into(), Duration::from_secs(10))?;
        Ok(TcpStream::from(s))
    })?
}

/// Accepts one connection within `limit`.
pub fn accept_within(l: &TcpListener, limit: Duration) -> io::Result<TcpStream> {
    l.set_nonblocking(true)?;
    let deadline = std::time::Instant::now() + limit;
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no connection accepted"))
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether a connected kernel socket runs MPTCP (and not a fallback):
/// `getsockopt(SOL_MPTCP, MPTCP_INFO)` succeeds only then.
pub fn is_mptcp(s: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    const SOL_MPTCP: i32 = 284;
    const MPTCP_INFO: i32 = 1;
    let mut buf = [0u8; 256];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: valid fd, buffer and length.
    let rc = unsafe { libc::getsockopt(s.as_raw_fd(), SOL_MPTCP, MPTCP_INFO, buf.as_mut_ptr().cast(), &mut len) };
    rc == 0 && len > 0
}

/// The kernel's SNMP/netstat counters of namespace `ns` by nstat name
/// (`TcpExtTCPTimeouts`, `MPTcpExtMPJoinAckRx`, …).
pub fn nstat(ns: &str) -> io::Result<BTreeMap<String, u64>> {
    run_in_netns(ns, mptun_io::netstat::read)?
}
