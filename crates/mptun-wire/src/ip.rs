//! IPv4/IPv6 framing of TCP segments: the one parse and the one emit every
//! simulated and real packet goes through.
//!
//! Hand-written rather than delegated to `etherparse`: the stack needs only
//! the TCP case and must not allocate, and the direct path is measurably
//! faster (see `benches/ip_codec.rs`). `etherparse` stays the oracle in tests.
//!
//! What is refused, with a typed error, rather than half-handled: IPv4
//! fragments and IPv6 extension headers ([`Error::Unsupported`]) — the
//! stack's peers set DF and send no extension headers — and non-TCP packets
//! ([`Error::NotTcp`]).

use crate::checksum::{self, IPPROTO_TCP};
use crate::tcp::TcpHeader;
use crate::Error;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 header length without options (what we emit).
pub const IPV4_HEADER_LEN: usize = 20;
/// IPv6 fixed header length.
pub const IPV6_HEADER_LEN: usize = 40;
/// IPv4 flags/fragment-offset word with DF set, as Linux sends TCP.
const IPV4_DF: u16 = 0x4000;

/// A parsed IP packet carrying a TCP segment. Borrows the payload from the
/// input so parsing copies no data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpPacket<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    pub tcp: TcpHeader,
    pub payload: &'a [u8],
}

/// Parses an IPv4 or IPv6 packet carrying TCP and verifies the IPv4 header
/// checksum and the TCP checksum ([`Error::BadChecksum`]). Bytes beyond the
/// IP length (link-layer padding) are ignored.
pub fn parse_tcp_packet(pkt: &[u8]) -> Result<TcpPacket<'_>, Error> {
    parse(pkt, true)
}

/// As [`parse_tcp_packet`] but without checking the TCP checksum: for
/// captures taken before checksum offload filled it in (the field then holds
/// only the pseudo-header sum) and for segments whose checksum the NIC
/// already verified. The IPv4 header checksum is still checked.
pub fn parse_tcp_packet_unverified(pkt: &[u8]) -> Result<TcpPacket<'_>, Error> {
    parse(pkt, false)
}

#[inline]
fn parse(pkt: &[u8], verify_tcp: bool) -> Result<TcpPacket<'_>, Error> {
    let Some(&first) = pkt.first() else {
        return Err(Error::Truncated);
    };
    let (src, dst, ttl, segment) = match first >> 4 {
        4 => parse_v4(pkt)?,
        6 => parse_v6(pkt)?,
        _ => return Err(Error::BadHeader),
    };
    let (tcp, hlen) = TcpHeader::parse(segment)?;
    if verify_tcp && !checksum::verify_tcp(src, dst, segment) {
        return Err(Error::BadChecksum);
    }
    Ok(TcpPacket { src, dst, ttl, tcp, payload: &segment[hlen..] })
}

type Framed<'a> = (IpAddr, IpAddr, u8, &'a [u8]);

#[inline]
fn parse_v4(pkt: &[u8]) -> Result<Framed<'_>, Error> {
    if pkt.len() < IPV4_HEADER_LEN {
        return Err(Error::Truncated);
    }
    let ihl = ((pkt[0] & 0x0f) as usize) * 4;
    if ihl < IPV4_HEADER_LEN {
        return Err(Error::BadHeader);
    }
    if ihl > pkt.len() {
        return Err(Error::Truncated);
    }
    let total = u16::from_be_bytes([pkt[2], pkt[3]]) as usize;
    if total < ihl {
        return Err(Error::BadHeader);
    }
    if total > pkt.len() {
        return Err(Error::Truncated);
    }
    if !checksum::verify(&pkt[..ihl]) {
        return Err(Error::BadChecksum);
    }
    if pkt[9] != IPPROTO_TCP {
        return Err(Error::NotTcp);
    }
    let frag = u16::from_be_bytes([pkt[6], pkt[7]]);
    if frag & 0x3fff != 0 {
        // MF set or a non-zero offset: a fragment.
        return Err(Error::Unsupported);
    }
    let src = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
    let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
    Ok((IpAddr::V4(src), IpAddr::V4(dst), pkt[8], &pkt[ihl..total]))
}

/// Next-header values that are IPv6 extension headers (RFC 8200 4, IANA).
const fn is_ipv6_extension(nh: u8) -> bool {
    matches!(nh, 0 | 43 | 44 | 50 | 51 | 60 | 135 | 139 | 140 | 253 | 254)
}

#[inline]
fn parse_v6(pkt: &[u8]) -> Result<Framed<'_>, Error> {
    if pkt.len() < IPV6_HEADER_LEN {
        return Err(Error::Truncated);
    }
    let plen = u16::from_be_bytes([pkt[4], pkt[5]]) as usize;
    let nh = pkt[6];
    if is_ipv6_extension(nh) {
        return Err(Error::Unsupported);
    }
    if nh != IPPROTO_TCP {
        return Err(Error::NotTcp);
    }
    if IPV6_HEADER_LEN + plen > pkt.len() {
        return Err(Error::Truncated);
    }
    let mut s = [0u8; 16];
    s.copy_from_slice(&pkt[8..24]);
    let mut d = [0u8; 16];
    d.copy_from_slice(&pkt[24..40]);
    Ok((IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)), pkt[7], &pkt[IPV6_HEADER_LEN..][..plen]))
}

/// Bytes [`emit_tcp_packet`] will write for this header and payload size.
pub fn tcp_packet_len(src: IpAddr, tcp: &TcpHeader, payload_len: usize) -> usize {
    ip_header_len(src) + tcp.header_len() + payload_len
}

pub(crate) const fn ip_header_len(a: IpAddr) -> usize {
    match a {
        IpAddr::V4(_) => IPV4_HEADER_LEN,
        IpAddr::V6(_) => IPV6_HEADER_LEN,
    }
}

/// Writes a complete packet — IP header, TCP header, payload — into `out`
/// and returns its length. Both checksums are computed here (the header's
/// `checksum` field is ignored). IPv4 goes out as Linux sends TCP: no
/// options, TOS 0, DF set, id 0; IPv6 with traffic class and flow label 0.
///
/// Errors: [`Error::NoSpace`] if `out` is short, [`Error::BadHeader`] if `src`
/// and `dst` are of different families, [`Error::BadLength`] if the packet
/// would not fit the IP length field.
pub fn emit_tcp_packet(
    src: IpAddr,
    dst: IpAddr,
    ttl: u8,
    tcp: &TcpHeader,
    payload: &[u8],
    out: &mut [u8],
) -> Result<usize, Error> {
    emit(src, dst, ttl, tcp, payload, out, false)
}

/// [`emit_tcp_packet`] for a device with TCP checksum offload: the TCP
/// checksum field holds only the pseudo-header sum (`CHECKSUM_PARTIAL`,
/// virtio `NEEDS_CSUM`), as Linux leaves it for a NIC, and the device
/// completes it. The payload is copied but never summed: on a send path of
/// tens of Gbit/s that pass over every byte is a sizeable share of the
/// driver's time. A packet built this way must reach a device that
/// completes it, or go through `gso::complete_checksum` first; the
/// IPv4 header checksum is complete either way.
pub fn emit_tcp_packet_offload(
    src: IpAddr,
    dst: IpAddr,
    ttl: u8,
    tcp: &TcpHeader,
    payload: &[u8],
    out: &mut [u8],
) -> Result<usize, Error> {
    emit(src, dst, ttl, tcp, payload, out, true)
}

/// [`emit_tcp_packet_offload`] without the payload: writes the IP and TCP
/// headers of a packet that carries `payload_len` bytes of payload, its
/// lengths and partial checksum counting them, and returns the header
/// length. The payload goes out behind the headers from wherever it lies
/// (a gather write, `writev`), never copied into `out`: on a sender moving
/// tens of Gbit/s that copy is a sizeable share of the whole process's time.
pub fn emit_tcp_headers_offload(
    src: IpAddr,
    dst: IpAddr,
    ttl: u8,
    tcp: &TcpHeader,
    payload_len: usize,
    out: &mut [u8],
) -> Result<usize, Error> {
    emit_with(src, dst, ttl, tcp, Payload::Elsewhere(payload_len), out, true)
}

fn emit(
    src: IpAddr,
    dst: IpAddr,
    ttl: u8,
    tcp: &TcpHeader,
    payload: &[u8],
    out: &mut [u8],
    partial: bool,
) -> Result<usize, Error> {
    emit_with(src, dst, ttl, tcp, Payload::Here(payload), out, partial)
}

/// Where an emitted packet's payload is.
enum Payload<'a> {
    /// Copied behind the headers.
    Here(&'a [u8]),
    /// Not written: this many bytes follow the headers from elsewhere.
    Elsewhere(usize),
}

fn emit_with(
    src: IpAddr,
    dst: IpAddr,
    ttl: u8,
    tcp: &TcpHeader,
    payload: Payload<'_>,
    out: &mut [u8],
    partial: bool,
) -> Result<usize, Error> {
    let payload_len = match payload {
        Payload::Here(p) => p.len(),
        Payload::Elsewhere(n) => n,
    };
    let iph = ip_header_len(src);
    let seg_len = tcp.header_len() + payload_len;
    let total = iph + seg_len;
    let written = match payload {
        Payload::Here(_) => total,
        Payload::Elsewhere(_) => iph + tcp.header_len(),
    };
    if out.len() < written {
        return Err(Error::NoSpace);
    }
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            if total > u16::MAX as usize {
                return Err(Error::BadLength);
            }
            let h = &mut out[..IPV4_HEADER_LEN];
            h[0] = 0x45;
            h[1] = 0;
            h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            h[4..6].fill(0);
            h[6..8].copy_from_slice(&IPV4_DF.to_be_bytes());
            h[8] = ttl;
            h[9] = IPPROTO_TCP;
            h[10..12].fill(0);
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            let c = checksum::checksum(h);
            h[10..12].copy_from_slice(&c.to_be_bytes());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            if seg_len > u16::MAX as usize {
                return Err(Error::BadLength);
            }
            let h = &mut out[..IPV6_HEADER_LEN];
            h[0] = 0x60;
            h[1..4].fill(0);
            h[4..6].copy_from_slice(&(seg_len as u16).to_be_bytes());
            h[6] = IPPROTO_TCP;
            h[7] = ttl;
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
        }
        _ => return Err(Error::BadHeader),
    }
    let seg = &mut out[iph..written];
    let hlen = tcp.emit(seg)?;
    if let Payload::Here(p) = payload {
        seg[hlen..].copy_from_slice(p);
    }
    let c = if partial {
        checksum::pseudo_header_sum(src, dst, IPPROTO_TCP, seg_len as u32)
    } else {
        seg[16..18].fill(0);
        checksum::tcp_checksum(src, dst, seg)
    };
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::{TcpFlags, TcpOptions};

    fn v4(a: [u8; 4]) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(a))
    }

    #[test]
    fn roundtrip_v4_and_v6() {
        let mut h = TcpHeader::new(1000, 2000, 7, 9, TcpFlags::ACK | TcpFlags::PSH, 512);
        h.options = TcpOptions::established(Some((1, 2)), &[], &[]).unwrap();
        let payload = b"hello world";
        let mut buf = [0u8; 200];
        for (s, d) in [
            (v4([10, 0, 0, 1]), v4([10, 0, 0, 2])),
            (IpAddr::V6("fd00::1".parse().unwrap()), IpAddr::V6("fd00::2".parse().unwrap())),
        ] {
            let n = emit_tcp_packet(s, d, 64, &h, payload, &mut buf).unwrap();
            assert_eq!(n, tcp_packet_len(s, &h, payload.len()));
            let p = parse_tcp_packet(&buf[..n]).unwrap();
            assert_eq!((p.src, p.dst, p.ttl, p.payload), (s, d, 64, &payload[..]));
            let mut expect = h.clone();
            expect.checksum = p.tcp.checksum;
            assert_eq!(p.tcp, expect);
            // Flip one payload bit: the TCP checksum must catch it.
            buf[n - 1] ^= 1;
            assert_eq!(parse_tcp_packet(&buf[..n]), Err(Error::BadChecksum));
            assert!(parse_tcp_packet_unverified(&buf[..n]).is_ok());
        }
    }

    #[test]
    fn refusals() {
        let h = TcpHeader::new(1, 2, 3, 4, TcpFlags::SYN, 5);
        let mut buf = [0u8; 100];
        let (s, d) = (v4([1, 2, 3, 4]), v4([5, 6, 7, 8]));
        let n = emit_tcp_packet(s, d, 1, &h, &[], &mut buf).unwrap();
        let pkt = buf[..n].to_vec();
        let fix = |p: &mut Vec<u8>| {
            p[10] = 0;
            p[11] = 0;
            let c = checksum::checksum(&p[..20]);
            p[10..12].copy_from_slice(&c.to_be_bytes());
        };
        let mut p = pkt.clone();
        p[9] = 17;
        fix(&mut p);
        assert_eq!(parse_tcp_packet(&p), Err(Error::NotTcp));
        let mut p = pkt.clone();
        p[6] = 0x20; // MF
        fix(&mut p);
        assert_eq!(parse_tcp_packet(&p), Err(Error::Unsupported));
        let mut p = pkt.clone();
        p[7] = 1; // offset 8
        fix(&mut p);
        assert_eq!(parse_tcp_packet(&p), Err(Error::Unsupported));
        let mut p = pkt.clone();
        p[8] ^= 1; // ttl changed without checksum fix
        assert_eq!(parse_tcp_packet(&p), Err(Error::BadChecksum));
        let mut p = pkt.clone();
        p[0] = 0x44;
        assert_eq!(parse_tcp_packet(&p), Err(Error::BadHeader));
        assert_eq!(parse_tcp_packet(&pkt[..19]), Err(Error::Truncated));
        assert_eq!(parse_tcp_packet(&pkt[..n - 1]), Err(Error::Truncated));
        assert_eq!(parse_tcp_packet(&[]), Err(Error::Truncated));
        assert_eq!(parse_tcp_packet(&[0x55; 40]), Err(Error::BadHeader));
        let mut p = pkt.clone();
        p[2] = 0;
        p[3] = 10; // total length below header length
        fix(&mut p);
        assert_eq!(parse_tcp_packet(&p), Err(Error::BadHeader));
        // Trailing link padding is ignored.
        let mut p = pkt.clone();
        p.extend_from_slice(&[0xee; 6]);
        assert!(parse_tcp_packet(&p).is_ok());
        // Mixed families, short buffer.
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(emit_tcp_packet(s, v6, 1, &h, &[], &mut buf), Err(Error::BadHeader));
        assert_eq!(emit_tcp_packet(s, d, 1, &h, &[], &mut buf[..39]), Err(Error::NoSpace));
    }

    #[test]
    fn ipv6_refusals() {
        let h = TcpHeader::new(1, 2, 3, 4, TcpFlags::SYN, 5);
        let mut buf = [0u8; 100];
        let (s, d) = (IpAddr::V6(Ipv6Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::UNSPECIFIED));
        let n = emit_tcp_packet(s, d, 1, &h, &[], &mut buf).unwrap();
        let mut p = buf[..n].to_vec();
        p[6] = 44; // fragment header
        assert_eq!(parse_tcp_packet(&p), Err(Error::Unsupported));
        p[6] = 17;
        assert_eq!(parse_tcp_packet(&p), Err(Error::NotTcp));
        assert_eq!(parse_tcp_packet(&buf[..39]), Err(Error::Truncated));
        assert_eq!(parse_tcp_packet(&buf[..n - 1]), Err(Error::Truncated));
    }
}
