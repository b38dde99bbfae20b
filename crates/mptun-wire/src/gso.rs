//! TCP segmentation offload: the layout of a super-segment and how a device
//! cuts it into wire segments.
//!
//! A TSO super-segment is one IP packet whose TCP payload is several
//! segments' worth of consecutive bytes, with a `segment_size` that says
//! where to cut (Linux `gso_size`). The stack builds one header for all of
//! them, and the device (a NIC, the kernel's GSO for a TUN write, or the
//! simulator's link) replicates it on every piece as Linux's
//! `tcp_gso_segment` does: the options unchanged, the sequence number
//! advanced by the bytes before the piece, FIN and PSH only on the last
//! piece, CWR only on the first, lengths and checksums recomputed. The IPv4
//! ID is kept (Linux's `SKB_GSO_TCP_FIXEDID`: the stack sends DF packets,
//! all with ID 0).
//!
//! [`segments`] is the device side for software: an iterator that writes
//! each wire segment into a caller's buffer, refusing (typed error, no
//! panic) anything that is not a well-formed TCP super-segment.

use crate::checksum::{self, IPPROTO_TCP};
use crate::ip::{IPV4_HEADER_LEN, IPV6_HEADER_LEN};
use crate::tcp::TcpFlags;
use crate::Error;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Largest IP packet a GSO super-segment may be (the IPv4 total length
/// field; Linux's `GSO_LEGACY_MAX_SIZE`).
pub const GSO_MAX_SIZE: usize = 65_535;

/// Offset of the TCP flags byte in the TCP header.
const TCP_FLAGS_AT: usize = 13;
/// Offset of the TCP checksum field in the TCP header.
const TCP_CSUM_AT: usize = 16;

/// Where the parts of a TCP super-segment are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Source address (for the pseudo-header).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Length of the IP header (where the TCP header starts: `csum_start`).
    pub ip_len: usize,
    /// Length of IP plus TCP header with options (`hdr_len`).
    pub header_len: usize,
    /// Bytes of the packet (the IP length; trailing bytes beyond it ignored).
    pub total: usize,
}

impl Layout {
    /// Reads the headers of `pkt`: IPv4 without fragments or IPv6 without
    /// extension headers, carrying TCP, its lengths consistent. Checksums
    /// are not verified (a partially checksummed packet is valid here).
    pub fn parse(pkt: &[u8]) -> Result<Layout, Error> {
        Self::parse_head(pkt, 0)
    }

    /// [`Self::parse`] for a packet of which only the first bytes are in
    /// `head` (at least its IP and TCP headers) and `tail_len` more payload
    /// bytes lie elsewhere: a packet the sender gathers from its header and
    /// its send buffer at write time (`writev`) instead of copying the
    /// payload behind the header.
    pub fn parse_head(head: &[u8], tail_len: usize) -> Result<Layout, Error> {
        let pkt = head;
        let avail = head.len() + tail_len;
        let first = *pkt.first().ok_or(Error::Truncated)?;
        let (src, dst, ip_len, total) = match first >> 4 {
            4 => {
                if pkt.len() < IPV4_HEADER_LEN {
                    return Err(Error::Truncated);
                }
                let ihl = usize::from(first & 0x0f) * 4;
                let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
                if ihl < IPV4_HEADER_LEN || total < ihl {
                    return Err(Error::BadHeader);
                }
                if total > avail {
                    return Err(Error::Truncated);
                }
                if pkt[9] != IPPROTO_TCP {
                    return Err(Error::NotTcp);
                }
                if u16::from_be_bytes([pkt[6], pkt[7]]) & 0x3fff != 0 {
                    return Err(Error::Unsupported);
                }
                let s = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
                let d = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
                (IpAddr::V4(s), IpAddr::V4(d), ihl, total)
            }
            6 => {
                if pkt.len() < IPV6_HEADER_LEN {
                    return Err(Error::Truncated);
                }
                if pkt[6] != IPPROTO_TCP {
                    return Err(Error::Unsupported);
                }
                let total = IPV6_HEADER_LEN + usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
                if total > avail {
                    return Err(Error::Truncated);
                }
                let mut s = [0u8; 16];
                s.copy_from_slice(&pkt[8..24]);
                let mut d = [0u8; 16];
                d.copy_from_slice(&pkt[24..40]);
                (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)), IPV6_HEADER_LEN, total)
            }
            _ => return Err(Error::BadHeader),
        };
        if total < ip_len + 20 || pkt.len() < ip_len + 20 {
            return Err(Error::Truncated);
        }
        let doff = usize::from(pkt[ip_len + 12] >> 4) * 4;
        if doff < 20 {
            return Err(Error::BadHeader);
        }
        let header_len = ip_len + doff;
        if header_len > total || header_len > pkt.len() {
            return Err(Error::Truncated);
        }
        Ok(Layout { src, dst, ip_len, header_len, total })
    }

    /// TCP payload bytes.
    pub fn payload_len(&self) -> usize {
        self.total - self.header_len
    }

    /// Wire segments of `segment_size` payload bytes this packet makes.
    pub fn segment_count(&self, segment_size: usize) -> usize {
        self.payload_len().div_ceil(segment_size.max(1)).max(1)
    }
}

/// Writes `pkt`'s TCP checksum field as a device with checksum offload
/// expects it (`CHECKSUM_PARTIAL`, virtio `NEEDS_CSUM`): the folded
/// pseudo-header sum over the whole segment length, not complemented, which
/// the device completes over the bytes from the TCP header on.
pub fn set_partial_checksum(pkt: &mut [u8], l: &Layout) {
    let tcp_len = (l.total - l.ip_len) as u32;
    let p = checksum::pseudo_header_sum(l.src, l.dst, IPPROTO_TCP, tcp_len);
    pkt[l.ip_len + TCP_CSUM_AT..l.ip_len + TCP_CSUM_AT + 2].copy_from_slice(&p.to_be_bytes());
}

/// Completes the TCP checksum of a packet whose field holds the partial
/// sum (built by [`crate::ip::emit_tcp_packet_offload`]), as a device with
/// checksum offload would: for a device without it, and for a capture
/// that must show what the wire carries.
pub fn complete_checksum(pkt: &mut [u8]) -> Result<(), Error> {
    let l = Layout::parse(pkt)?;
    let at = l.ip_len + TCP_CSUM_AT;
    pkt[at..at + 2].fill(0);
    let c = checksum::tcp_checksum(l.src, l.dst, &pkt[l.ip_len..l.total]);
    pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

/// The wire segments of a super-segment, as a device cuts them.
///
/// Each call to [`Segments::next_into`] writes the next one, a complete IP
/// packet with correct checksums, into the caller's buffer.
#[derive(Debug)]
pub struct Segments<'a> {
    pkt: &'a [u8],
    layout: Layout,
    segment_size: usize,
    offset: usize,
    index: usize,
}

/// Cuts `pkt` every `segment_size` payload bytes. A packet whose payload
/// fits one segment comes out unchanged but for recomputed checksums.
pub fn segments(pkt: &[u8], segment_size: usize) -> Result<Segments<'_>, Error> {
    if segment_size == 0 {
        return Err(Error::BadLength);
    }
    let layout = Layout::parse(pkt)?;
    Ok(Segments { pkt, layout, segment_size, offset: 0, index: 0 })
}

impl Segments<'_> {
    /// The layout of the super-segment.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Writes the next wire segment into `out` and returns its length, or
    /// `None` after the last. [`Error::NoSpace`] if `out` is too small.
    pub fn next_into(&mut self, out: &mut [u8]) -> Result<Option<usize>, Error> {
        let l = self.layout;
        let payload = l.payload_len();
        if self.offset >= payload && !(payload == 0 && self.index == 0) {
            return Ok(None);
        }
        let n = (payload - self.offset).min(self.segment_size);
        let len = l.header_len + n;
        if out.len() < len {
            return Err(Error::NoSpace);
        }
        let last = self.offset + n >= payload;
        out[..l.header_len].copy_from_slice(&self.pkt[..l.header_len]);
        out[l.header_len..len].copy_from_slice(&self.pkt[l.header_len + self.offset..][..n]);
        if l.src.is_ipv6() {
            out[4..6].copy_from_slice(&((len - IPV6_HEADER_LEN) as u16).to_be_bytes());
        } else {
            out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            out[10..12].fill(0);
            let c = checksum::checksum(&out[..l.ip_len]);
            out[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let tcp = &mut out[l.ip_len..len];
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]).wrapping_add(self.offset as u32);
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        if !last {
            tcp[TCP_FLAGS_AT] &= !(TcpFlags::FIN.0 | TcpFlags::PSH.0);
        }
        if self.index > 0 {
            tcp[TCP_FLAGS_AT] &= !TcpFlags::CWR.0;
        }
        let c = checksum::tcp_checksum(l.src, l.dst, tcp);
        tcp[TCP_CSUM_AT..TCP_CSUM_AT + 2].copy_from_slice(&c.to_be_bytes());
        self.offset += n;
        self.index += 1;
        Ok(Some(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::{emit_tcp_headers_offload, emit_tcp_packet_offload};
    use crate::tcp::{TcpFlags, TcpHeader, TcpOption, TcpOptions};
    use crate::{emit_tcp_packet, parse_tcp_packet};

    fn ip_v4(a: [u8; 4]) -> std::net::IpAddr {
        std::net::IpAddr::V4(a.into())
    }

    /// An offload packet differs from the complete one only in its TCP
    /// checksum field, which holds the pseudo-header sum; completing it
    /// gives the complete packet byte for byte, odd payload lengths too.
    #[test]
    fn offload_packets_complete_to_the_full_ones() {
        let mut h = TcpHeader::new(1000, 2000, 7, 9, TcpFlags::ACK | TcpFlags::PSH, 512);
        h.options = TcpOptions::established(Some((1, 2)), &[], &[]).unwrap();
        for (s, d) in [
            (ip_v4([10, 0, 0, 1]), ip_v4([10, 0, 0, 2])),
            (IpAddr::V6("fd00::1".parse().unwrap()), IpAddr::V6("fd00::2".parse().unwrap())),
        ] {
            for plen in [0usize, 1, 7, 1448, 3001] {
                let payload: Vec<u8> = (0..plen).map(|i| (i * 31 + 7) as u8).collect();
                let (mut full, mut part) = (vec![0u8; 4000], vec![0u8; 4000]);
                let n = emit_tcp_packet(s, d, 64, &h, &payload, &mut full).unwrap();
                assert_eq!(emit_tcp_packet_offload(s, d, 64, &h, &payload, &mut part).unwrap(), n);
                let at = crate::ip::ip_header_len(s) + 16;
                assert_eq!(full[..at], part[..at]);
                assert_eq!(full[at + 2..n], part[at + 2..n]);
                let seg_len = (n - crate::ip::ip_header_len(s)) as u32;
                let pseudo = crate::checksum::pseudo_header_sum(s, d, crate::checksum::IPPROTO_TCP, seg_len);
                assert_eq!(part[at..at + 2], pseudo.to_be_bytes());
                assert_eq!(parse_tcp_packet(&part[..n]), Err(Error::BadChecksum), "not a complete checksum");
                complete_checksum(&mut part[..n]).unwrap();
                assert_eq!(full[..n], part[..n], "{s} payload {plen}");
                assert!(parse_tcp_packet(&part[..n]).is_ok());
            }
        }
    }

    #[test]
    fn headers_for_a_gathered_payload_are_the_offload_packet_s_own() {
        let mut h = TcpHeader::new(1000, 2000, 7, 9, TcpFlags::ACK | TcpFlags::PSH, 512);
        h.options = TcpOptions::established(Some((1, 2)), &[], &[]).unwrap();
        for (s, d) in [
            (ip_v4([10, 0, 0, 1]), ip_v4([10, 0, 0, 2])),
            (IpAddr::V6("fd00::1".parse().unwrap()), IpAddr::V6("fd00::2".parse().unwrap())),
        ] {
            for plen in [1usize, 1448, 60_000] {
                let payload: Vec<u8> = (0..plen).map(|i| (i * 31 + 7) as u8).collect();
                let mut whole = vec![0u8; 65_535];
                let n = emit_tcp_packet_offload(s, d, 64, &h, &payload, &mut whole).unwrap();
                // Only room for the headers: the payload is not written.
                let mut head = vec![0u8; n - plen];
                let hl = emit_tcp_headers_offload(s, d, 64, &h, plen, &mut head).unwrap();
                assert_eq!(hl, n - plen);
                assert_eq!(head[..], whole[..hl], "{s} payload {plen}");
                let l = Layout::parse_head(&head, plen).unwrap();
                assert_eq!((l.total, l.header_len, l.payload_len()), (n, hl, plen));
                assert_eq!(Layout::parse_head(&head, plen - 1), Err(Error::Truncated));
                assert_eq!(Layout::parse_head(&head[..hl - 1], plen + 1), Err(Error::Truncated));
                assert_eq!(emit_tcp_headers_offload(s, d, 64, &h, plen, &mut head[..hl - 1]), Err(Error::NoSpace));
            }
        }
    }

    fn super_segment(src: &str, dst: &str, payload: &[u8], flags: TcpFlags) -> Vec<u8> {
        let mut h = TcpHeader::new(40000, 5000, 0xffff_f000, 77, flags, 512);
        h.options = TcpOptions::new();
        h.options.push(&TcpOption::Nop).unwrap();
        h.options.push(&TcpOption::Nop).unwrap();
        h.options.push(&TcpOption::Timestamp { tsval: 5, tsecr: 6 }).unwrap();
        let mut buf = vec![0u8; GSO_MAX_SIZE];
        let n = emit_tcp_packet(src.parse().unwrap(), dst.parse().unwrap(), 64, &h, payload, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    fn check_split(src: &str, dst: &str) {
        let payload: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let flags = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN | TcpFlags::CWR;
        let pkt = super_segment(src, dst, &payload, flags);
        let mut it = segments(&pkt, 1448).unwrap();
        assert_eq!(it.layout().segment_count(1448), 7);
        let mut buf = [0u8; 1600];
        let mut got = Vec::new();
        let mut i = 0u32;
        while let Some(n) = it.next_into(&mut buf).unwrap() {
            // A parser that verifies every checksum accepts each piece.
            let p = parse_tcp_packet(&buf[..n]).expect("valid wire segment");
            assert_eq!(p.tcp.seq, 0xffff_f000u32.wrapping_add(i * 1448), "sequence advances (and wraps)");
            assert_eq!(p.tcp.ack, 77);
            assert_eq!(p.tcp.window, 512);
            assert_eq!(p.tcp.options.summary().timestamp, Some((5, 6)), "options replicated");
            let last = i == 6;
            assert_eq!(p.tcp.flags.fin(), last);
            assert_eq!(p.tcp.flags.contains(TcpFlags::PSH), last);
            assert_eq!(p.tcp.flags.contains(TcpFlags::CWR), i == 0);
            assert_eq!(p.payload.len(), if last { 10_000 - 6 * 1448 } else { 1448 });
            got.extend_from_slice(p.payload);
            i += 1;
        }
        assert_eq!(i, 7);
        assert_eq!(got, payload);
    }

    #[test]
    fn splits_like_a_device_v4() {
        check_split("10.0.0.1", "10.0.0.2");
    }

    #[test]
    fn splits_like_a_device_v6() {
        check_split("fd00::1", "fd00::2");
    }

    #[test]
    fn small_packet_passes_whole() {
        let pkt = super_segment("10.0.0.1", "10.0.0.2", b"hello", TcpFlags::ACK | TcpFlags::PSH);
        let mut it = segments(&pkt, 1448).unwrap();
        let mut buf = [0u8; 1600];
        let n = it.next_into(&mut buf).unwrap().unwrap();
        assert_eq!(&buf[..n], &pkt[..]);
        assert_eq!(it.next_into(&mut buf).unwrap(), None);
        let ack = super_segment("10.0.0.1", "10.0.0.2", b"", TcpFlags::ACK);
        let mut it = segments(&ack, 1448).unwrap();
        assert_eq!(it.next_into(&mut buf).unwrap(), Some(ack.len()), "a pure ACK is one segment");
        assert_eq!(it.next_into(&mut buf).unwrap(), None);
    }

    #[test]
    fn partial_checksum_completes_to_the_real_one() {
        let pkt = super_segment("10.0.0.1", "10.0.0.2", &[9u8; 3000], TcpFlags::ACK);
        let l = Layout::parse(&pkt).unwrap();
        let mut p = pkt.clone();
        set_partial_checksum(&mut p, &l);
        // What the device does: the complement of the sum from csum_start on.
        let c = checksum::checksum(&p[l.ip_len..l.total]);
        let at = l.ip_len + TCP_CSUM_AT;
        p[at..at + 2].copy_from_slice(&c.to_be_bytes());
        assert_eq!(p, pkt);
    }

    #[test]
    fn hostile_input_is_refused() {
        let pkt = super_segment("10.0.0.1", "10.0.0.2", &[1u8; 3000], TcpFlags::ACK);
        for cut in [0, 1, 19, 20, 39] {
            assert!(segments(&pkt[..cut], 1448).is_err(), "cut at {cut}");
        }
        let mut bad = pkt.clone();
        bad[2..4].copy_from_slice(&60_000u16.to_be_bytes());
        assert_eq!(segments(&bad, 1448).unwrap_err(), Error::Truncated);
        let mut bad = pkt.clone();
        bad[20 + 12] = 0x20; // data offset 8 bytes
        assert_eq!(segments(&bad, 1448).unwrap_err(), Error::BadHeader);
        let mut bad = pkt.clone();
        bad[20 + 12] = 0xf0; // data offset 60 bytes, past a 52-byte header but within the packet
        assert!(segments(&bad, 1448).is_ok());
        assert_eq!(segments(&pkt, 0).unwrap_err(), Error::BadLength);
        let mut it = segments(&pkt, 1448).unwrap();
        assert_eq!(it.next_into(&mut [0u8; 100]).unwrap_err(), Error::NoSpace);
        // Any bytes at all: an error or segments, never a panic.
        let mut x = 0x9e37_79b9u32;
        for _ in 0..2000 {
            let mut p = pkt.clone();
            for _ in 0..4 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                let i = (x as usize) % 60;
                p[i] = (x >> 8) as u8;
            }
            if let Ok(mut it) = segments(&p, 1 + (x as usize % 2000)) {
                let mut buf = vec![0u8; GSO_MAX_SIZE];
                while let Ok(Some(_)) = it.next_into(&mut buf) {}
            }
        }
    }
}
