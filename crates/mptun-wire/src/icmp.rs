//! The ICMP errors a TCP sender acts on: IPv4 "fragmentation needed"
//! (type 3 code 4, RFC 1191) and ICMPv6 "packet too big" (type 2, RFC
//! 8201). Both quote the start of the packet that did not fit, which names
//! the connection (addresses and ports) and the sequence number the sender
//! must check before believing it (RFC 5927).

use crate::checksum;
use crate::Error;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const IPPROTO_TCP: u8 = 6;
const IPPROTO_ICMP: u8 = 1;
const IPPROTO_ICMPV6: u8 = 58;
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_FRAG_NEEDED: u8 = 4;
const ICMPV6_PKT_TOOBIG: u8 = 2;
/// ICMP header: type, code, checksum, 4 bytes of data (the MTU).
const ICMP_HEADER_LEN: usize = 8;

/// A "too big" report about one of our TCP segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooBig {
    /// Who sent the ICMP (a router on the path).
    pub reporter: IpAddr,
    /// Source of the quoted packet: our address.
    pub local: IpAddr,
    /// Destination of the quoted packet: the peer.
    pub remote: IpAddr,
    /// Quoted TCP source port (ours).
    pub local_port: u16,
    /// Quoted TCP destination port (the peer's).
    pub remote_port: u16,
    /// Quoted TCP sequence number.
    pub seq: u32,
    /// The next-hop MTU the router reports (0 from pre-RFC 1191 routers).
    pub mtu: u32,
    /// IPv6 (ICMPv6 "packet too big") rather than IPv4.
    pub v6: bool,
}

/// What [`parse_icmp_packet`] found in a non-TCP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icmp {
    /// A "fragmentation needed" / "packet too big" quoting a TCP segment.
    TooBig(TooBig),
    /// Some other ICMP message (or one quoting something other than TCP).
    Other,
}

/// Parses an IPv4 ICMP or an ICMPv6 packet. `Err(NotTcp)` means not ICMP at
/// all; other errors are malformed ICMP (bad checksum, truncated quote).
pub fn parse_icmp_packet(pkt: &[u8]) -> Result<Icmp, Error> {
    match pkt.first().map(|b| b >> 4) {
        Some(4) => parse_v4(pkt),
        Some(6) => parse_v6(pkt),
        Some(_) => Err(Error::BadHeader),
        None => Err(Error::Truncated),
    }
}

fn parse_v4(pkt: &[u8]) -> Result<Icmp, Error> {
    if pkt.len() < 20 {
        return Err(Error::Truncated);
    }
    let ihl = usize::from(pkt[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
    if ihl < 20 || total < ihl || total > pkt.len() {
        return Err(Error::BadHeader);
    }
    if pkt[9] != IPPROTO_ICMP {
        return Err(Error::NotTcp);
    }
    if !checksum::verify(&pkt[..ihl]) {
        return Err(Error::BadChecksum);
    }
    if u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff != 0 {
        return Err(Error::Unsupported);
    }
    let reporter = IpAddr::V4(Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]));
    let icmp = &pkt[ihl..total];
    if icmp.len() < ICMP_HEADER_LEN {
        return Err(Error::Truncated);
    }
    if !checksum::verify(icmp) {
        return Err(Error::BadChecksum);
    }
    if icmp[0] != ICMP_DEST_UNREACH || icmp[1] != ICMP_FRAG_NEEDED {
        return Ok(Icmp::Other);
    }
    let mtu = u32::from(u16::from_be_bytes([icmp[6], icmp[7]]));
    // The quoted IPv4 header and at least 8 bytes of TCP (RFC 792).
    let q = &icmp[ICMP_HEADER_LEN..];
    if q.len() < 20 || q[0] >> 4 != 4 {
        return Err(Error::Truncated);
    }
    let qihl = usize::from(q[0] & 0x0f) * 4;
    if qihl < 20 || q.len() < qihl + 8 {
        return Err(Error::Truncated);
    }
    if q[9] != IPPROTO_TCP {
        return Ok(Icmp::Other);
    }
    let local = IpAddr::V4(Ipv4Addr::new(q[12], q[13], q[14], q[15]));
    let remote = IpAddr::V4(Ipv4Addr::new(q[16], q[17], q[18], q[19]));
    Ok(Icmp::TooBig(quoted_tcp(reporter, local, remote, &q[qihl..], mtu, false)))
}

fn parse_v6(pkt: &[u8]) -> Result<Icmp, Error> {
    if pkt.len() < 40 {
        return Err(Error::Truncated);
    }
    let plen = usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
    if pkt[6] != IPPROTO_ICMPV6 {
        return Err(Error::NotTcp);
    }
    if 40 + plen > pkt.len() {
        return Err(Error::Truncated);
    }
    let src = v6(&pkt[8..24]);
    let dst = v6(&pkt[24..40]);
    let icmp = &pkt[40..40 + plen];
    if icmp.len() < ICMP_HEADER_LEN {
        return Err(Error::Truncated);
    }
    let pseudo = checksum::pseudo_header_sum(src, dst, IPPROTO_ICMPV6, icmp.len() as u32);
    if fold(u32::from(pseudo) + u32::from(checksum::sum(icmp))) != 0xffff {
        return Err(Error::BadChecksum);
    }
    if icmp[0] != ICMPV6_PKT_TOOBIG {
        return Ok(Icmp::Other);
    }
    let mtu = u32::from_be_bytes([icmp[4], icmp[5], icmp[6], icmp[7]]);
    let q = &icmp[ICMP_HEADER_LEN..];
    if q.len() < 40 + 8 || q[0] >> 4 != 6 {
        return Err(Error::Truncated);
    }
    if q[6] != IPPROTO_TCP {
        // Extension headers in the quote: not ours to chase.
        return Ok(Icmp::Other);
    }
    Ok(Icmp::TooBig(quoted_tcp(src, v6(&q[8..24]), v6(&q[24..40]), &q[40..], mtu, true)))
}

fn quoted_tcp(reporter: IpAddr, local: IpAddr, remote: IpAddr, tcp: &[u8], mtu: u32, v6: bool) -> TooBig {
    TooBig {
        reporter,
        local,
        remote,
        local_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        remote_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
        mtu,
        v6,
    }
}

fn v6(b: &[u8]) -> IpAddr {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    IpAddr::V6(Ipv6Addr::from(a))
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Builds the ICMP error a router on the path would send about `quoted`
/// (one of our packets, at least its IP header and 8 bytes of TCP):
/// "fragmentation needed" for IPv4, "packet too big" for IPv6. For tests
/// and simulators; returns the packet's length in `out`.
pub fn emit_too_big(reporter: IpAddr, quoted: &[u8], mtu: u32, out: &mut [u8]) -> Result<usize, Error> {
    let v6 = quoted.first().is_some_and(|b| b >> 4 == 6);
    let (iph, qmax) = if v6 { (40, 1280 - 48) } else { (20, 548) };
    let q = &quoted[..quoted.len().min(qmax)];
    let len = iph + ICMP_HEADER_LEN + q.len();
    if out.len() < len || q.len() < if v6 { 48 } else { 28 } {
        return Err(Error::Truncated);
    }
    let out = &mut out[..len];
    out.fill(0);
    let icmp_start = iph;
    out[icmp_start + ICMP_HEADER_LEN..].copy_from_slice(q);
    if v6 {
        let dst = v6_at(quoted, 8);
        out[0] = 0x60;
        out[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        out[6] = IPPROTO_ICMPV6;
        out[7] = 64;
        let IpAddr::V6(r) = reporter else { return Err(Error::BadHeader) };
        out[8..24].copy_from_slice(&r.octets());
        out[24..40].copy_from_slice(&dst.octets());
        out[40] = ICMPV6_PKT_TOOBIG;
        out[44..48].copy_from_slice(&mtu.to_be_bytes());
        let pseudo = checksum::pseudo_header_sum(reporter, IpAddr::V6(dst), IPPROTO_ICMPV6, (len - 40) as u32);
        let c = !fold(u32::from(pseudo) + u32::from(checksum::sum(&out[40..])));
        out[42..44].copy_from_slice(&c.to_be_bytes());
    } else {
        let IpAddr::V4(r) = reporter else { return Err(Error::BadHeader) };
        out[0] = 0x45;
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        out[8] = 64;
        out[9] = IPPROTO_ICMP;
        out[12..16].copy_from_slice(&r.octets());
        out[16..20].copy_from_slice(&quoted[12..16]);
        let c = checksum::checksum(&out[..20]);
        out[10..12].copy_from_slice(&c.to_be_bytes());
        out[20] = ICMP_DEST_UNREACH;
        out[21] = ICMP_FRAG_NEEDED;
        out[26..28].copy_from_slice(&(mtu.min(0xffff) as u16).to_be_bytes());
        let c = checksum::checksum(&out[20..]);
        out[22..24].copy_from_slice(&c.to_be_bytes());
    }
    Ok(len)
}

fn v6_at(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{emit_tcp_packet, TcpFlags, TcpHeader};

    fn segment(src: &str, dst: &str) -> Vec<u8> {
        let h = TcpHeader::new(40000, 5000, 0xdead_beef, 1, TcpFlags::ACK, 64);
        let mut buf = vec![0u8; 2000];
        let n = emit_tcp_packet(src.parse().unwrap(), dst.parse().unwrap(), 64, &h, &[7; 1400], &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn frag_needed_and_packet_too_big_round_trip() {
        for (src, dst, router) in [("10.0.0.1", "10.0.1.2", "10.0.0.254"), ("fd00::1", "fd01::2", "fd00::fe")] {
            let seg = segment(src, dst);
            let mut out = [0u8; 1500];
            let n = emit_too_big(router.parse().unwrap(), &seg, 1280, &mut out).unwrap();
            let Icmp::TooBig(t) = parse_icmp_packet(&out[..n]).unwrap() else { panic!("not too big") };
            assert_eq!(t.local, src.parse::<IpAddr>().unwrap());
            assert_eq!(t.remote, dst.parse::<IpAddr>().unwrap());
            assert_eq!(t.reporter, router.parse::<IpAddr>().unwrap());
            assert_eq!((t.local_port, t.remote_port, t.seq, t.mtu), (40000, 5000, 0xdead_beef, 1280));
            assert_eq!(t.v6, src.contains(':'));
            // A corrupted byte fails the checksum.
            out[n - 1] ^= 1;
            assert_eq!(parse_icmp_packet(&out[..n]), Err(Error::BadChecksum));
        }
    }

    #[test]
    fn tcp_is_not_icmp_and_truncated_quotes_are_errors() {
        let seg = segment("10.0.0.1", "10.0.1.2");
        assert_eq!(parse_icmp_packet(&seg), Err(Error::NotTcp));
        let mut out = [0u8; 1500];
        let n = emit_too_big("10.0.0.254".parse().unwrap(), &seg, 1280, &mut out).unwrap();
        for cut in [0, 10, 27, 30, 40, n - 1] {
            assert!(parse_icmp_packet(&out[..cut]).is_err(), "cut at {cut}");
        }
    }
}
