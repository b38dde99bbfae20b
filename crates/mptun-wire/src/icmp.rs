//! The ICMP errors a TCP sender acts on: IPv4 "fragmentation needed"
//! (type 3 code 4, RFC 1191) and ICMPv6 "packet too big" (type 2, RFC
//! 8201) for path-MTU discovery; the other destination-unreachable codes
//! and time-exceeded, which end a handshake at once and are remembered as
//! a soft error by a synchronized connection (RFC 1122 4.2.3.9, Linux
//! `tcp_v4_err`/`tcp_v6_err`). All quote the start of the packet that did
//! not arrive, which names the connection (addresses and ports) and the
//! sequence number the sender must check before believing it (RFC 5927).

use crate::checksum;
use crate::Error;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const IPPROTO_TCP: u8 = 6;
const IPPROTO_ICMP: u8 = 1;
const IPPROTO_ICMPV6: u8 = 58;
const ICMP_DEST_UNREACH: u8 = 3;
const ICMP_FRAG_NEEDED: u8 = 4;
const ICMP_TIME_EXCEEDED: u8 = 11;
/// Linux `NR_ICMP_UNREACH`: the highest destination-unreachable code.
const NR_ICMP_UNREACH: u8 = 15;
const ICMPV6_DEST_UNREACH: u8 = 1;
const ICMPV6_PKT_TOOBIG: u8 = 2;
const ICMPV6_TIME_EXCEED: u8 = 3;
/// ICMP header: type, code, checksum, 4 bytes of data (the MTU).
const ICMP_HEADER_LEN: usize = 8;

/// The start of one of our TCP segments, as an ICMP error quotes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quote {
    /// Who sent the ICMP (a router on the path, or the peer).
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
    /// IPv6 (ICMPv6) rather than IPv4.
    pub v6: bool,
}

/// A "too big" report about one of our TCP segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooBig {
    /// The segment that did not fit.
    pub quote: Quote,
    /// The next-hop MTU the router reports (0 from pre-RFC 1191 routers).
    pub mtu: u32,
}

/// Why an ICMP error says a segment of ours cannot arrive, grouped by the
/// errno Linux gives the socket for it (`icmp_err_convert`,
/// `icmpv6_err_convert`): what an application is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unreachable {
    /// No route to the network (IPv4 codes 0, 6, 9, 11; ICMPv6 code 0):
    /// `ENETUNREACH`.
    Network,
    /// The host cannot be reached (IPv4 codes 1, 5, 7, 8, 10, 12-15; ICMPv6
    /// codes 2, 3): `EHOSTUNREACH` (Linux says `EHOSTDOWN`, `ENONET` or
    /// `EOPNOTSUPP` for codes 7, 8 and 5; the application is told the
    /// same thing).
    Host,
    /// The host does not speak TCP (IPv4 code 2): `ENOPROTOOPT`.
    Protocol,
    /// Nothing listens on the port (IPv4 code 3, ICMPv6 code 4):
    /// `ECONNREFUSED`, as a RST would say.
    Port,
    /// A policy forbids it (ICMPv6 codes 1, 5, 6): `EACCES`. IPv4's
    /// "administratively prohibited" (13) is `Host`, as Linux has it.
    Prohibited,
    /// The packet's hop limit ran out on the way (ICMP time exceeded, a
    /// routing loop): `EHOSTUNREACH`.
    TimeExceeded,
}

impl Unreachable {
    /// The errno Linux reports for it (as `MPTCP_EVENT_SUB_CLOSED`'s error
    /// and a failed `connect` carry it).
    pub fn errno(self) -> u32 {
        match self {
            Unreachable::Network => 101,
            Unreachable::Host | Unreachable::TimeExceeded => 113,
            Unreachable::Protocol => 92,
            Unreachable::Port => 111,
            Unreachable::Prohibited => 13,
        }
    }

    /// What `strerror` says of it, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Unreachable::Network => "network unreachable",
            Unreachable::Host => "host unreachable",
            Unreachable::Protocol => "protocol not available",
            Unreachable::Port => "connection refused",
            Unreachable::Prohibited => "administratively prohibited",
            Unreachable::TimeExceeded => "host unreachable (time exceeded)",
        }
    }

    fn from_v4(typ: u8, code: u8) -> Option<Unreachable> {
        use Unreachable::*;
        Some(match (typ, code) {
            (ICMP_TIME_EXCEEDED, _) => TimeExceeded,
            (ICMP_DEST_UNREACH, 0 | 6 | 9 | 11) => Network,
            (ICMP_DEST_UNREACH, 2) => Protocol,
            (ICMP_DEST_UNREACH, 3) => Port,
            (ICMP_DEST_UNREACH, c) if c <= NR_ICMP_UNREACH && c != ICMP_FRAG_NEEDED => Host,
            _ => return None,
        })
    }

    fn from_v6(typ: u8, code: u8) -> Option<Unreachable> {
        use Unreachable::*;
        Some(match (typ, code) {
            (ICMPV6_TIME_EXCEED, _) => TimeExceeded,
            (ICMPV6_DEST_UNREACH, 0) => Network,
            (ICMPV6_DEST_UNREACH, 1 | 5 | 6) => Prohibited,
            (ICMPV6_DEST_UNREACH, 2 | 3) => Host,
            (ICMPV6_DEST_UNREACH, 4) => Port,
            _ => return None,
        })
    }

    /// The (type, code) a router sends for it; `None` where the family has
    /// no such message (IPv6 has no "protocol unreachable").
    fn type_code(self, v6: bool) -> Option<(u8, u8)> {
        use Unreachable::*;
        Some(match (self, v6) {
            (Network, false) => (ICMP_DEST_UNREACH, 0),
            (Host, false) => (ICMP_DEST_UNREACH, 1),
            (Protocol, false) => (ICMP_DEST_UNREACH, 2),
            (Port, false) => (ICMP_DEST_UNREACH, 3),
            (Prohibited, false) => (ICMP_DEST_UNREACH, 13),
            (TimeExceeded, false) => (ICMP_TIME_EXCEEDED, 0),
            (Network, true) => (ICMPV6_DEST_UNREACH, 0),
            (Host, true) => (ICMPV6_DEST_UNREACH, 3),
            (Protocol, true) => return None,
            (Port, true) => (ICMPV6_DEST_UNREACH, 4),
            (Prohibited, true) => (ICMPV6_DEST_UNREACH, 1),
            (TimeExceeded, true) => (ICMPV6_TIME_EXCEED, 0),
        })
    }
}

/// What [`parse_icmp_packet`] found in a non-TCP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Icmp {
    /// A "fragmentation needed" / "packet too big" quoting a TCP segment.
    TooBig(TooBig),
    /// A destination-unreachable or time-exceeded quoting a TCP segment.
    Unreachable(Quote, Unreachable),
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
    let too_big = icmp[0] == ICMP_DEST_UNREACH && icmp[1] == ICMP_FRAG_NEEDED;
    let why = Unreachable::from_v4(icmp[0], icmp[1]);
    if !too_big && why.is_none() {
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
    let quote = quoted_tcp(reporter, local, remote, &q[qihl..], false);
    Ok(classify(quote, why, mtu))
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
    let why = Unreachable::from_v6(icmp[0], icmp[1]);
    if icmp[0] != ICMPV6_PKT_TOOBIG && why.is_none() {
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
    let quote = quoted_tcp(src, v6(&q[8..24]), v6(&q[24..40]), &q[40..], true);
    Ok(classify(quote, why, mtu))
}

/// "Too big" unless the message is one of the unreachable kinds.
fn classify(quote: Quote, why: Option<Unreachable>, mtu: u32) -> Icmp {
    match why {
        Some(why) => Icmp::Unreachable(quote, why),
        None => Icmp::TooBig(TooBig { quote, mtu }),
    }
}

fn quoted_tcp(reporter: IpAddr, local: IpAddr, remote: IpAddr, tcp: &[u8], v6: bool) -> Quote {
    Quote {
        reporter,
        local,
        remote,
        local_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        remote_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
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
    let (typ, code, data) = if v6 {
        (ICMPV6_PKT_TOOBIG, 0, mtu.to_be_bytes())
    } else {
        (ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, u32::from(mtu.min(0xffff) as u16).to_be_bytes())
    };
    emit_error(reporter, quoted, (typ, code, data), out)
}

/// Builds the destination-unreachable (or time-exceeded) a router on the
/// path would send about `quoted`, as [`emit_too_big`] does. `Unsupported`
/// for a kind the family has no message for.
pub fn emit_unreachable(reporter: IpAddr, quoted: &[u8], why: Unreachable, out: &mut [u8]) -> Result<usize, Error> {
    let v6 = quoted.first().is_some_and(|b| b >> 4 == 6);
    let (typ, code) = why.type_code(v6).ok_or(Error::Unsupported)?;
    emit_error(reporter, quoted, (typ, code, [0; 4]), out)
}

fn emit_error(
    reporter: IpAddr,
    quoted: &[u8],
    (typ, code, data): (u8, u8, [u8; 4]),
    out: &mut [u8],
) -> Result<usize, Error> {
    let v6 = quoted.first().is_some_and(|b| b >> 4 == 6);
    let (iph, qmax) = if v6 { (40, 1280 - 48) } else { (20, 548) };
    let q = &quoted[..quoted.len().min(qmax)];
    let len = iph + ICMP_HEADER_LEN + q.len();
    if out.len() < len || q.len() < if v6 { 48 } else { 28 } {
        return Err(Error::Truncated);
    }
    let out = &mut out[..len];
    out.fill(0);
    out[iph + ICMP_HEADER_LEN..].copy_from_slice(q);
    out[iph] = typ;
    out[iph + 1] = code;
    out[iph + 4..iph + 8].copy_from_slice(&data);
    if v6 {
        let dst = v6_at(quoted, 8);
        out[0] = 0x60;
        out[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        out[6] = IPPROTO_ICMPV6;
        out[7] = 64;
        let IpAddr::V6(r) = reporter else { return Err(Error::BadHeader) };
        out[8..24].copy_from_slice(&r.octets());
        out[24..40].copy_from_slice(&dst.octets());
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
            let q = t.quote;
            assert_eq!(q.local, src.parse::<IpAddr>().unwrap());
            assert_eq!(q.remote, dst.parse::<IpAddr>().unwrap());
            assert_eq!(q.reporter, router.parse::<IpAddr>().unwrap());
            assert_eq!((q.local_port, q.remote_port, q.seq, t.mtu), (40000, 5000, 0xdead_beef, 1280));
            assert_eq!(q.v6, src.contains(':'));
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

    #[test]
    fn unreachable_kinds_round_trip_and_quote_the_segment() {
        use Unreachable::*;
        for (src, dst, router) in [("10.0.0.1", "10.0.1.2", "10.0.0.254"), ("fd00::1", "fd01::2", "fd00::fe")] {
            let seg = segment(src, dst);
            let v6 = src.contains(':');
            for why in [Network, Host, Protocol, Port, Prohibited, TimeExceeded] {
                let mut out = [0u8; 1500];
                let n = match emit_unreachable(router.parse().unwrap(), &seg, why, &mut out) {
                    Ok(n) => n,
                    Err(Error::Unsupported) if v6 && why == Protocol => continue,
                    Err(e) => panic!("{why:?}: {e}"),
                };
                let Icmp::Unreachable(q, got) = parse_icmp_packet(&out[..n]).unwrap() else { panic!("{why:?}") };
                // IPv4's "administratively prohibited" is EHOSTUNREACH, as Linux has it.
                let want = if why == Prohibited && !v6 { Host } else { why };
                assert_eq!(got, want, "{src}");
                assert_eq!((q.local_port, q.remote_port, q.seq, q.v6), (40000, 5000, 0xdead_beef, v6));
                assert_eq!(q.local, src.parse::<IpAddr>().unwrap());
                out[n - 1] ^= 1;
                assert_eq!(parse_icmp_packet(&out[..n]), Err(Error::BadChecksum));
            }
        }
    }

    /// Every IPv4 unreachable code maps as Linux's `icmp_err_convert`
    /// does; codes past `NR_ICMP_UNREACH` and other types are not ours.
    #[test]
    fn ipv4_codes_follow_linux_and_unknown_ones_are_other() {
        use Unreachable::*;
        let seg = segment("10.0.0.1", "10.0.1.2");
        let want = [
            Some(Network),
            Some(Host),
            Some(Protocol),
            Some(Port),
            None,
            Some(Host),
            Some(Network),
            Some(Host),
            Some(Host),
            Some(Network),
            Some(Host),
            Some(Network),
            Some(Host),
            Some(Host),
            Some(Host),
            Some(Host),
        ];
        for code in 0..=20u8 {
            let mut out = [0u8; 1500];
            let n =
                emit_error("10.0.0.254".parse().unwrap(), &seg, (ICMP_DEST_UNREACH, code, [0; 4]), &mut out).unwrap();
            let got = parse_icmp_packet(&out[..n]).unwrap();
            match want.get(usize::from(code)).copied().flatten() {
                Some(w) => assert!(matches!(got, Icmp::Unreachable(_, k) if k == w), "code {code}: {got:?}"),
                None if code == ICMP_FRAG_NEEDED => assert!(matches!(got, Icmp::TooBig(_))),
                None => assert_eq!(got, Icmp::Other, "code {code}"),
            }
        }
        // An echo reply is not an error about TCP.
        let mut out = [0u8; 1500];
        let n = emit_error("10.0.0.254".parse().unwrap(), &seg, (0, 0, [0; 4]), &mut out).unwrap();
        assert_eq!(parse_icmp_packet(&out[..n]), Ok(Icmp::Other));
    }
}
