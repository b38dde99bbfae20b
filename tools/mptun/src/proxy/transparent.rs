//! Transparent mode: a connection the kernel redirected to the local proxy
//! (`iptables -t nat ... -j REDIRECT`, or nft's `redirect`) still knows
//! where the application meant to go; netfilter's connection tracking
//! answers `SO_ORIGINAL_DST` (IPv4) / `IP6T_SO_ORIGINAL_DST` (IPv6) with
//! the destination before NAT.

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

/// linux/netfilter_ipv4.h `SO_ORIGINAL_DST`, and linux/netfilter_ipv6/ip6_tables.h
/// `IP6T_SO_ORIGINAL_DST` (the same number at level SOL_IPV6).
const SO_ORIGINAL_DST: libc::c_int = 80;

/// The destination the application connected to before a REDIRECT, or
/// `None` when the connection was not redirected (no NAT entry, or the
/// original destination is the proxy's own address: a SOCKS client).
pub(crate) fn original_dst(s: &tokio::net::TcpStream) -> io::Result<Option<SocketAddr>> {
    let local = s.local_addr()?;
    let fd = s.as_raw_fd();
    // An IPv4 client of a dual-stack ([::]) listener is tracked by IPv4 conntrack.
    let v4 = match local {
        SocketAddr::V4(_) => true,
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some(),
    };
    let orig = if v4 {
        let mut sa = MaybeUninit::<libc::sockaddr_in>::zeroed();
        let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: valid fd; sa/len describe a writable sockaddr_in.
        let rc = unsafe { libc::getsockopt(fd, libc::SOL_IP, SO_ORIGINAL_DST, sa.as_mut_ptr().cast(), &mut len) };
        if rc != 0 {
            return not_redirected(io::Error::last_os_error());
        }
        // SAFETY: zero-initialised, then filled by the kernel.
        let sa = unsafe { sa.assume_init() };
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)), u16::from_be(sa.sin_port)))
    } else {
        let mut sa = MaybeUninit::<libc::sockaddr_in6>::zeroed();
        let mut len = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        // SAFETY: valid fd; sa/len describe a writable sockaddr_in6.
        let rc = unsafe { libc::getsockopt(fd, libc::SOL_IPV6, SO_ORIGINAL_DST, sa.as_mut_ptr().cast(), &mut len) };
        if rc != 0 {
            return not_redirected(io::Error::last_os_error());
        }
        // SAFETY: zero-initialised, then filled by the kernel.
        let sa = unsafe { sa.assume_init() };
        let ip = Ipv6Addr::from(sa.sin6_addr.s6_addr);
        // A dual-stack listener sees IPv4 clients as mapped addresses.
        match ip.to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, u16::from_be(sa.sin6_port))),
            None => SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(sa.sin6_port), 0, 0)),
        }
    };
    let same = |a: SocketAddr, b: SocketAddr| {
        let canon = |x: SocketAddr| match x {
            SocketAddr::V6(v) => v.ip().to_ipv4_mapped().map_or(x, |v4| SocketAddr::new(v4.into(), v.port())),
            x => x,
        };
        canon(a) == canon(b)
    };
    Ok((!same(orig, local)).then_some(orig))
}

/// ENOENT: conntrack has no NAT for it (not redirected); ENOPROTOOPT: no
/// conntrack at all. Both mean "a SOCKS client".
fn not_redirected(e: io::Error) -> io::Result<Option<SocketAddr>> {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOPROTOOPT) => Ok(None),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a REDIRECT the original destination is the listener itself
    /// (or unknown): a SOCKS client, never a loop to ourselves.
    #[tokio::test]
    async fn a_direct_connection_is_not_redirected() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let _c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        assert_eq!(original_dst(&s).unwrap(), None);
    }
}
