//! The kernel's stack behind `--kernel`: IPPROTO_MPTCP sockets set up like
//! mptun's streams (same options, before connect/listen), and what the
//! kernel reports about them (`MPTCP_TCPINFO`, `MPTCP_SUBFLOW_ADDRS`,
//! `TCP_INFO`, `/proc/net/netstat`), turned into the same [`Probe`] mptun
//! streams give, so both stacks are measured with identical accounting.

use std::collections::BTreeMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};

use anyhow::{anyhow, Context, Result};
use socket2::{Domain, Protocol, Socket, Type};

use crate::probe::{Probe, SubflowProbe};

/// `IPPROTO_MPTCP` (Linux >= 5.6).
const IPPROTO_MPTCP: i32 = 262;
const SOL_MPTCP: i32 = 284;
const MPTCP_INFO: i32 = 1;
const MPTCP_TCPINFO: i32 = 2;
const MPTCP_SUBFLOW_ADDRS: i32 = 3;
/// `struct mptcp_subflow_data`: size_subflow_data, num_subflows, size_kernel, size_user.
const SUBFLOW_DATA_LEN: usize = 16;
/// The part of `struct tcp_info` read here (up to `tcpi_snd_wnd`).
const TCP_INFO_LEN: usize = 232;
/// `struct mptcp_subflow_addrs`: two `sockaddr_storage`s.
const SUBFLOW_ADDRS_LEN: usize = 256;
const MAX_SUBFLOWS: usize = 16;

/// Refuses what cannot name a kernel congestion control (`TCP_CONGESTION`
/// takes up to 15 bytes of `[A-Za-z0-9_]`), before any socket exists.
pub(crate) fn check_cc_name(c: &str) -> Result<()> {
    if c.is_empty() || c.len() > 15 || !c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        anyhow::bail!("--cc '{c}' is no congestion control name");
    }
    Ok(())
}

/// Refuses a congestion control this kernel cannot run, before any work:
/// an MPTCP socket takes any name before its first subflow exists and its
/// subflows then silently run the default. A plain TCP socket's
/// `TCP_CONGESTION` is the kernel's own check (it loads `tcp_NAME` when
/// allowed and refuses what an unprivileged user may not pick); the error
/// lists `net.ipv4.tcp_available_congestion_control`.
pub(crate) fn check_cc_available(c: &str) -> Result<()> {
    check_cc_name(c)?;
    let probe = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .or_else(|_| Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP)))
        .map_err(|e| anyhow!("socket: {e}"))?;
    let Err(e) = probe.set_tcp_congestion(c.as_bytes()) else { return Ok(()) };
    let list = |knob: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{knob}"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    };
    let why = match (e.raw_os_error(), list("tcp_available_congestion_control")) {
        (Some(libc::EPERM), _) => format!(
            "not permitted for this user (net.ipv4.tcp_allowed_congestion_control: {})",
            list("tcp_allowed_congestion_control")
        ),
        (Some(libc::ENOENT), offered) if !offered.is_empty() => {
            format!("the kernel has no '{c}' (it offers: {offered})")
        }
        (_, offered) if offered.is_empty() => e.to_string(),
        (_, offered) => format!("{e} (the kernel offers: {offered})"),
    };
    anyhow::bail!("--cc {c}: unable to set TCP congestion control: {why}")
}

/// Socket options shared by both stacks.
#[derive(Clone, Debug, Default)]
pub(crate) struct KernelOptions {
    pub(crate) mptcp: bool,
    pub(crate) cc: Option<String>,
    pub(crate) sndbuf: Option<usize>,
    pub(crate) rcvbuf: Option<usize>,
    /// Bytes per second.
    pub(crate) max_pacing_rate: Option<u64>,
}

fn socket(addr: SocketAddr, o: &KernelOptions) -> Result<Socket> {
    let proto = if o.mptcp { Protocol::from(IPPROTO_MPTCP) } else { Protocol::TCP };
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(proto)).map_err(|e| {
        if o.mptcp && matches!(e.raw_os_error(), Some(libc::EPROTONOSUPPORT) | Some(libc::ENOPROTOOPT)) {
            anyhow!("the kernel refuses IPPROTO_MPTCP ({e}): is net.mptcp.enabled=1? (--no-mptcp for plain TCP)")
        } else {
            anyhow!("socket: {e}")
        }
    })?;
    if let Some(cc) = &o.cc {
        s.set_tcp_congestion(cc.as_bytes())
            .map_err(|e| anyhow!("TCP_CONGESTION {cc}: {e} (is the module loaded and allowed?)"))?;
    }
    if let Some(b) = o.sndbuf {
        s.set_send_buffer_size(b).context("SO_SNDBUF")?;
    }
    if let Some(b) = o.rcvbuf {
        s.set_recv_buffer_size(b).context("SO_RCVBUF")?;
    }
    if let Some(r) = o.max_pacing_rate {
        let v = r.min(u64::from(u32::MAX) - 1) as u32;
        setsockopt_u32(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_MAX_PACING_RATE, v).context("SO_MAX_PACING_RATE")?;
    }
    s.set_tcp_nodelay(true).ok();
    Ok(s)
}

fn setsockopt_u32(fd: RawFd, level: i32, name: i32, v: u32) -> io::Result<()> {
    // SAFETY: valid fd, pointer to a live u32 and its size.
    let rc = unsafe { libc::setsockopt(fd, level, name, (&v as *const u32).cast(), 4) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A listening kernel socket.
pub(crate) fn listen(addr: SocketAddr, o: &KernelOptions) -> Result<tokio::net::TcpListener> {
    let s = socket(addr, o)?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // Dual-stack, as iperf3's default listener.
        s.set_only_v6(false).context("IPV6_V6ONLY")?;
    }
    s.set_reuse_address(true)?;
    s.bind(&addr.into()).map_err(|e| anyhow!("bind {addr}: {e}"))?;
    s.listen(128)?;
    s.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(std::net::TcpListener::from(s))?)
}

/// A kernel connection to `to`.
pub(crate) async fn connect(to: SocketAddr, o: &KernelOptions) -> Result<tokio::net::TcpStream> {
    let s = socket(to, o)?;
    s.set_nonblocking(true)?;
    let sock = tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(s));
    sock.connect(to).await.map_err(|e| crate::stack::connect_error(to, &e))
}

fn getsockopt(fd: RawFd, level: i32, name: i32, buf: &mut [u8]) -> io::Result<usize> {
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: valid fd; buf and len describe writable memory the kernel fills up to len.
    let rc = unsafe { libc::getsockopt(fd, level, name, buf.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(len as usize)
}

fn u32_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 4).map_or(0, |x| u64::from(u32::from_ne_bytes(x.try_into().expect("4 bytes"))))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8).map_or(0, |x| u64::from_ne_bytes(x.try_into().expect("8 bytes")))
}

/// `struct tcp_info` fields, by their offsets in linux/tcp.h.
fn subflow_from_tcp_info(id: usize, b: &[u8], local: Option<SocketAddr>, remote: Option<SocketAddr>) -> SubflowProbe {
    let mss = u32_at(b, 16).max(1);
    SubflowProbe {
        id,
        local,
        remote,
        bytes_acked: u64_at(b, 120),
        bytes_received: u64_at(b, 128),
        bytes_retrans: u64_at(b, 208),
        retrans_segs: u32_at(b, 100),
        cwnd: u32_at(b, 80),
        mss,
        snd_wnd: u32_at(b, 228),
        pmtu: u32_at(b, 60),
        srtt_us: u32_at(b, 68),
        rttvar_us: u32_at(b, 72),
        pacing_rate: u64_at(b, 104),
        bbr: None,
        penalized: 0,
        state: kernel_state(b.first().copied().unwrap_or(0)),
        established: matches!(b.first(), Some(1 | 4..=9 | 11)) || u64_at(b, 120) > 0 || u64_at(b, 128) > 0,
        withdrawn: false,
    }
}

/// `tcpi_state` (include/net/tcp_states.h) by name.
fn kernel_state(s: u8) -> &'static str {
    match s {
        1 => "ESTABLISHED",
        2 => "SYN_SENT",
        3 => "SYN_RECV",
        4 => "FIN_WAIT1",
        5 => "FIN_WAIT2",
        6 => "TIME_WAIT",
        7 => "CLOSE",
        8 => "CLOSE_WAIT",
        9 => "LAST_ACK",
        10 => "LISTEN",
        11 => "CLOSING",
        _ => "UNKNOWN",
    }
}

fn sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(b.get(0..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    match i32::from(family) {
        libc::AF_INET => {
            let a: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(a), port)))
        }
        libc::AF_INET6 => {
            let a: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            Some(SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(a), port, 0, 0)))
        }
        _ => None,
    }
}

/// Reads an array option (`MPTCP_TCPINFO`, `MPTCP_SUBFLOW_ADDRS`): the
/// header, then up to [`MAX_SUBFLOWS`] items of `item` bytes each.
fn subflow_array(fd: RawFd, name: i32, item: usize) -> io::Result<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; SUBFLOW_DATA_LEN + MAX_SUBFLOWS * item];
    buf[0..4].copy_from_slice(&(SUBFLOW_DATA_LEN as u32).to_ne_bytes());
    buf[12..16].copy_from_slice(&(item as u32).to_ne_bytes());
    let len = getsockopt(fd, SOL_MPTCP, name, &mut buf)?;
    let n = u32_at(&buf, 4) as usize;
    let size_user = (u32_at(&buf, 12) as usize).clamp(1, item);
    let avail = len.saturating_sub(SUBFLOW_DATA_LEN) / size_user;
    Ok((0..n.min(avail).min(MAX_SUBFLOWS))
        .map(|i| {
            let off = SUBFLOW_DATA_LEN + i * size_user;
            let mut v = buf[off..off + size_user].to_vec();
            v.resize(item, 0);
            v
        })
        .collect())
}

/// What the kernel says about a connected socket.
pub(crate) fn probe(s: &tokio::net::TcpStream) -> Probe {
    let fd = s.as_raw_fd();
    let mut mi = [0u8; 256];
    let mptcp = getsockopt(fd, SOL_MPTCP, MPTCP_INFO, &mut mi).is_ok_and(|n| n > 0);
    let mut subflows = Vec::new();
    if mptcp {
        let infos = subflow_array(fd, MPTCP_TCPINFO, TCP_INFO_LEN).unwrap_or_default();
        let addrs = subflow_array(fd, MPTCP_SUBFLOW_ADDRS, SUBFLOW_ADDRS_LEN).unwrap_or_default();
        for (i, b) in infos.iter().enumerate() {
            let (l, r) = addrs.get(i).map_or((None, None), |a| (sockaddr(&a[..128]), sockaddr(&a[128..])));
            subflows.push(subflow_from_tcp_info(i, b, l, r));
        }
    } else {
        let mut b = [0u8; TCP_INFO_LEN];
        if getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut b).is_ok() {
            let mut sf = subflow_from_tcp_info(0, &b, s.local_addr().ok(), s.peer_addr().ok());
            sf.bbr = bbr_info(fd);
            subflows.push(sf);
        }
    }
    let retrans_segs = subflows.iter().map(|s| s.retrans_segs).sum();
    Probe { mode: if mptcp { "mptcp" } else { "tcp" }, subflows, retrans_segs }
}

/// `TCP_CC_INFO` of a socket running BBR (`struct tcp_bbr_info`: bw low and
/// high words in bytes per second, min RTT in µs, the gains): what `ss -ti`
/// prints as `bbr:(bw:…,mrtt:…,pacing_gain:…,cwnd_gain:…)`.
fn bbr_info(fd: RawFd) -> Option<(u64, u32)> {
    const TCP_CC_INFO: i32 = 26;
    if congestion_fd(fd).as_deref() != Some("bbr") {
        return None;
    }
    let mut b = [0u8; 20];
    let n = getsockopt(fd, libc::IPPROTO_TCP, TCP_CC_INFO, &mut b).ok()?;
    (n >= 12).then(|| (u64_at(&b, 0), u32_at(&b, 8) as u32))
}

fn congestion_fd(fd: RawFd) -> Option<String> {
    let mut b = [0u8; 16];
    let n = getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, &mut b).ok()?;
    let end = b[..n].iter().position(|&c| c == 0).unwrap_or(n);
    Some(String::from_utf8_lossy(&b[..end]).into_owned())
}

/// Bytes written but not yet acknowledged (`SIOCOUTQ`; MPTCP sockets
/// answer at the data level).
pub(crate) fn unacked(s: &tokio::net::TcpStream) -> Option<u64> {
    let mut v: libc::c_int = 0;
    // SAFETY: valid fd; TIOCOUTQ (= SIOCOUTQ) writes one int.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::TIOCOUTQ, &mut v) };
    (rc == 0 && v >= 0).then_some(v as u64)
}

/// The congestion control a socket runs (`TCP_CONGESTION`).
pub(crate) fn congestion(s: &tokio::net::TcpStream) -> Option<String> {
    congestion_fd(s.as_raw_fd())
}

/// This namespace's `MPTcpExt*`/`TcpExt*`/`Tcp*` counters (nstat names).
pub(crate) fn netstat() -> BTreeMap<String, u64> {
    let mut all = mptun_io::netstat::read().unwrap_or_default();
    all.retain(|k, _| ["MPTcpExt", "TcpExt", "Tcp"].iter().any(|p| k.starts_with(p)));
    all
}

/// Counters that grew from `before` to `after` (gauges like TcpCurrEstab
/// excluded), with their increase.
pub(crate) fn netstat_delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter(|(k, _)| {
            !matches!(k.as_str(), "TcpCurrEstab" | "TcpMaxConn" | "TcpRtoMin" | "TcpRtoMax" | "TcpRtoAlgorithm")
        })
        .filter_map(|(k, &v)| {
            let d = v.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_info_offsets() {
        let mut b = vec![0u8; TCP_INFO_LEN];
        b[16..20].copy_from_slice(&1448u32.to_ne_bytes());
        b[68..72].copy_from_slice(&20_000u32.to_ne_bytes());
        b[80..84].copy_from_slice(&10u32.to_ne_bytes());
        b[100..104].copy_from_slice(&3u32.to_ne_bytes());
        b[120..128].copy_from_slice(&12345u64.to_ne_bytes());
        b[60..64].copy_from_slice(&1500u32.to_ne_bytes());
        b[228..232].copy_from_slice(&65_535u32.to_ne_bytes());
        let s = subflow_from_tcp_info(0, &b, None, None);
        assert_eq!((s.mss, s.srtt_us, s.cwnd, s.retrans_segs, s.bytes_acked), (1448, 20_000, 10, 3, 12345));
        assert_eq!((s.pmtu, s.snd_wnd), (1500, 65_535));
        // A short (old-kernel) struct reads as zeros, never out of bounds.
        let s = subflow_from_tcp_info(0, &b[..90], None, None);
        assert_eq!(s.bytes_acked, 0);
    }

    #[test]
    fn netstat_reads_this_namespace() {
        let m = netstat();
        assert!(m.keys().any(|k| k.starts_with("Tcp")), "{m:?}");
        let mut after = m.clone();
        after.insert("TcpRetransSegs".into(), m.get("TcpRetransSegs").copied().unwrap_or(0) + 2);
        assert_eq!(netstat_delta(&m, &after).get("TcpRetransSegs"), Some(&2));
    }
}
