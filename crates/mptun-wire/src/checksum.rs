//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Every simulated and real segment is summed once on the way in and once on
//! the way out, so the bulk sum reads eight bytes at a time into four
//! independent 64-bit accumulators. It sums in native byte order and swaps at
//! the end: one's-complement addition commutes with byte swapping (RFC 1071
//! section 2(B)), which saves a byte swap per word.
//!
//! Partial sums are carried as `u16` values *not yet complemented*, in
//! network-order value space, so pieces (pseudo-header, header, payload) can
//! be summed separately and joined with [`combine`]. Every piece but the last
//! must have an even length.

use core::net::IpAddr;

/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;

/// Folds a 64-bit accumulator of 16-bit words to 16 bits with end-around carry.
#[inline]
pub const fn fold64(mut x: u64) -> u16 {
    x = (x & 0xffff_ffff) + (x >> 32);
    x = (x & 0xffff_ffff) + (x >> 32);
    fold32(x as u32)
}

/// Folds a 32-bit accumulator of 16-bit words to 16 bits with end-around carry.
#[inline]
pub const fn fold32(mut x: u32) -> u16 {
    x = (x & 0xffff) + (x >> 16);
    x = (x & 0xffff) + (x >> 16);
    x as u16
}

/// One's-complement addition of two partial sums.
#[inline]
pub const fn combine(a: u16, b: u16) -> u16 {
    fold32(a as u32 + b as u32)
}

#[inline]
fn word(c: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&c[..8]);
    u64::from_ne_bytes(a)
}

/// Sum of `data` in native order, unfolded. Each 64-bit word is split into
/// its two 32-bit halves, added without carries into a 64-bit accumulator
/// (2^31 iterations before overflow: far beyond any packet).
#[inline]
fn sum_native(data: &[u8]) -> u64 {
    const LO: u64 = 0xffff_ffff;
    let (mut a0, mut a1, mut a2, mut a3) = (0u64, 0u64, 0u64, 0u64);
    let mut chunks = data.chunks_exact(32);
    for c in &mut chunks {
        let (w0, w1, w2, w3) = (word(&c[0..]), word(&c[8..]), word(&c[16..]), word(&c[24..]));
        a0 += (w0 & LO) + (w0 >> 32);
        a1 += (w1 & LO) + (w1 >> 32);
        a2 += (w2 & LO) + (w2 >> 32);
        a3 += (w3 & LO) + (w3 >> 32);
    }
    let mut rest = chunks.remainder();
    let mut acc = a0 + a1 + a2 + a3;
    while rest.len() >= 8 {
        let w = word(rest);
        acc += (w & LO) + (w >> 32);
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        acc += u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as u64;
        rest = &rest[4..];
    }
    if rest.len() >= 2 {
        acc += u16::from_ne_bytes([rest[0], rest[1]]) as u64;
        rest = &rest[2..];
    }
    if let Some(&b) = rest.first() {
        // An odd last byte is the high byte of a zero-padded word.
        acc += u16::from_ne_bytes([b, 0]) as u64;
    }
    acc
}

/// One's-complement sum of `data` as big-endian 16-bit words (an odd last byte
/// padded with zero), folded, not complemented.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    u16::from_be(fold64(sum_native(data)))
}

/// The Internet checksum of `data`: complement of [`sum`]. Used for the IPv4
/// header, whose checksum field is covered: a correct header checksums to 0.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// True if `data` (which contains its own checksum field) sums to all ones.
#[inline]
pub fn verify(data: &[u8]) -> bool {
    sum(data) == 0xffff
}

/// Partial sum of the TCP/UDP pseudo-header (RFC 9293 3.1 for IPv4,
/// RFC 8200 8.1 for IPv6). `src` and `dst` should be of one family; mixed
/// families are summed as given (no panic) but match nothing on the wire.
pub fn pseudo_header_sum(src: IpAddr, dst: IpAddr, proto: u8, len: u32) -> u16 {
    let mut acc: u64 = proto as u64;
    let mut add_addr = |a: IpAddr| match a {
        IpAddr::V4(a) => {
            let v = u32::from_be_bytes(a.octets());
            acc += (v >> 16) as u64 + (v & 0xffff) as u64;
        }
        IpAddr::V6(a) => {
            let v = u128::from_be_bytes(a.octets());
            for i in 0..8 {
                acc += ((v >> (16 * i)) & 0xffff) as u64;
            }
        }
    };
    add_addr(src);
    add_addr(dst);
    if src.is_ipv6() || dst.is_ipv6() {
        acc += (len >> 16) as u64 + (len & 0xffff) as u64;
    } else {
        acc += (len & 0xffff) as u64;
    }
    fold64(acc)
}

/// Offset of the checksum field in a TCP header.
const TCP_CSUM_AT: usize = 16;

/// The value to store in the checksum field of `segment` (TCP header plus
/// payload), whatever the field holds now: its current content is taken back
/// out of the sum, so callers need not zero it first.
pub fn tcp_checksum(src: IpAddr, dst: IpAddr, segment: &[u8]) -> u16 {
    let mut s = combine(pseudo_header_sum(src, dst, IPPROTO_TCP, segment.len() as u32), sum(segment));
    if segment.len() >= TCP_CSUM_AT + 2 {
        let field = u16::from_be_bytes([segment[TCP_CSUM_AT], segment[TCP_CSUM_AT + 1]]);
        s = combine(s, !field);
    }
    !s
}

/// True if the checksum in `segment` is correct for this address pair.
pub fn verify_tcp(src: IpAddr, dst: IpAddr, segment: &[u8]) -> bool {
    combine(pseudo_header_sum(src, dst, IPPROTO_TCP, segment.len() as u32), sum(segment)) == 0xffff
}

/// Completes a checksum that a sender left for the device to finish
/// (Linux `CHECKSUM_PARTIAL`, virtio `NEEDS_CSUM`): the field at
/// `start + offset` holds the pseudo-header sum, and the device stores the
/// complement of the sum of every byte from `start` to the end of the
/// packet, that field included, as Linux's `skb_checksum_help` does. A
/// result of zero is stored as `0xffff`, its other form in one's
/// complement, which TCP accepts alike and UDP requires. Nothing is
/// changed, and false returned, when the field does not lie inside `pkt`.
pub fn complete_partial(pkt: &mut [u8], start: usize, offset: usize) -> bool {
    let Some(at) = start.checked_add(offset).filter(|&at| at.checked_add(2).is_some_and(|end| end <= pkt.len())) else {
        return false;
    };
    let c = match checksum(&pkt[start..]) {
        0 => 0xffff,
        c => c,
    };
    pkt[at..at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// The checksum after one 16-bit word of the covered data changed from `old`
/// to `new` (RFC 1624 equation 3, `HC' = ~(~HC + ~m + m')`), for rewriting a
/// port or window without re-summing the segment. The result can differ from
/// a full recomputation only by the two representations of zero (0x0000 and
/// 0xffff), which every verifier treats alike.
#[inline]
pub const fn update_u16(csum: u16, old: u16, new: u16) -> u16 {
    !fold32((!csum) as u32 + (!old) as u32 + new as u32)
}

/// As [`update_u16`] for an aligned 32-bit field (an IPv4 address, a
/// sequence number).
#[inline]
pub const fn update_u32(csum: u16, old: u32, new: u32) -> u16 {
    let acc = (!csum) as u64
        + (!(old >> 16) & 0xffff) as u64
        + (!old & 0xffff) as u64
        + (new >> 16) as u64
        + (new & 0xffff) as u64;
    !fold64(acc)
}

/// The MPTCP DSS checksum (RFC 8684 3.3.1): the complement of the sum of a
/// pseudo-header (64-bit data sequence number, 32-bit relative subflow
/// sequence number, 16-bit data-level length, 16 zero bits) and the
/// mapping's payload. It lets a receiver detect a middlebox that rewrote the
/// payload under a mapping (and fall back or reset instead of delivering
/// corrupt data).
pub fn dss_checksum(dsn: u64, ssn: u32, len: u16, payload: &[u8]) -> u16 {
    let mut ph = [0u8; 16];
    ph[..8].copy_from_slice(&dsn.to_be_bytes());
    ph[8..12].copy_from_slice(&ssn.to_be_bytes());
    ph[12..14].copy_from_slice(&len.to_be_bytes());
    !combine(sum(&ph), sum(payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straight RFC 1071 reference: big-endian words, u32 accumulator.
    fn reference(data: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        for c in data.chunks(2) {
            let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], 0]) };
            acc += w as u64;
        }
        fold64(acc)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2.
        assert_eq!(sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), 0xddf2);
        assert_eq!(checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]), !0xddf2);
    }

    #[test]
    fn every_length_and_alignment_matches_reference() {
        let data: Vec<u8> = (0..300u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for start in 0..8 {
            for end in start..data.len() {
                assert_eq!(sum(&data[start..end]), reference(&data[start..end]), "{start}..{end}");
            }
        }
        assert_eq!(sum(&[0xff; 1000]), 0xffff);
        assert_eq!(sum(&[]), 0);
    }

    #[test]
    fn ipv4_header_example() {
        // A real IPv4 header (frame 1 of the kernel capture), checksum ac46.
        let h = [
            0x45, 0x00, 0x00, 0x40, 0x78, 0x6f, 0x40, 0x00, 0x40, 0x06, 0xac, 0x46, 0x0a, 0x00, 0x01, 0x01, 0x0a, 0x00,
            0x01, 0x02,
        ];
        assert!(verify(&h));
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(checksum(&z), 0xac46);
    }

    /// A segment whose field holds the pseudo-header sum, as a sender
    /// leaves it for the device, verifies once completed, at even and odd
    /// lengths, behind a header that is not summed.
    #[test]
    fn a_partial_checksum_completed_verifies() {
        let (src, dst): (IpAddr, IpAddr) = ("10.0.1.1".parse().unwrap(), "10.0.1.2".parse().unwrap());
        for len in [20usize, 21, 64, 1461] {
            let mut pkt = vec![0x45u8; 20 + len];
            for (i, b) in pkt[20..].iter_mut().enumerate() {
                *b = (i * 31 + 7) as u8;
            }
            let p = pseudo_header_sum(src, dst, IPPROTO_TCP, len as u32);
            pkt[20 + TCP_CSUM_AT..20 + TCP_CSUM_AT + 2].copy_from_slice(&p.to_be_bytes());
            assert!(complete_partial(&mut pkt, 20, TCP_CSUM_AT));
            assert!(verify_tcp(src, dst, &pkt[20..]), "{len} bytes");
            assert!(pkt[..20].iter().all(|&b| b == 0x45), "nothing before the start is touched");
        }
        let mut zero = [0xff, 0xff, 0, 0];
        assert!(complete_partial(&mut zero, 0, 2));
        assert_eq!(zero, [0xff; 4], "a zero result is stored as 0xffff");
        let mut short = [0u8; 30];
        assert!(!complete_partial(&mut short, 20, 16));
        assert!(!complete_partial(&mut short, usize::MAX, 16));
        assert!(!complete_partial(&mut short, 16, usize::MAX));
        assert_eq!(short, [0u8; 30], "a field beyond the packet: nothing written");
    }

    #[test]
    fn update_matches_recompute_on_example() {
        let mut d = [0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0];
        let c = checksum(&d);
        d[2] = 0xaa;
        d[3] = 0xbb;
        assert_eq!(update_u16(c, 0x5678, 0xaabb), checksum(&d));
    }

    /// A second implementation with its own fold loop, kept as the oracle:
    /// `dss_checksum` must agree with it on every input.
    fn dss_checksum_before_move(dsn: u64, ssn: u32, len: u16, payload: &[u8]) -> u16 {
        let mut ph = [0u8; 16];
        ph[..8].copy_from_slice(&dsn.to_be_bytes());
        ph[8..12].copy_from_slice(&ssn.to_be_bytes());
        ph[12..14].copy_from_slice(&len.to_be_bytes());
        let mut acc = sum(&ph) as u32 + sum(payload) as u32;
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        !(acc as u16)
    }

    #[test]
    fn dss_checksum_equals_the_former_implementation() {
        let ff = [0xffu8; 1500];
        let ramp: Vec<u8> = (0..1461u32).map(|i| (i * 7 + 3) as u8).collect();
        let cases: [(u64, u32, u16, &[u8]); 7] = [
            (0, 0, 0, &[]),
            (0x0102_0304_0506_0708, 0x0a0b_0c0d, 3, &[1, 2, 3]),
            (u64::MAX, u32::MAX, u16::MAX, &ff),
            (0xdead_beef_0000_0001, 1, 1, &[]),
            (0x8000_0000_0000_0000, 0x7fff_ffff, 1461, &ramp),
            (0xffff_ffff_ffff_fffe, 0xffff_0000, 1500, &ff),
            (42, 1, 0, &[0x00, 0x01]),
        ];
        for (dsn, ssn, len, p) in cases {
            assert_eq!(dss_checksum(dsn, ssn, len, p), dss_checksum_before_move(dsn, ssn, len, p), "{dsn:#x} {ssn:#x}");
        }
    }

    proptest::proptest! {
        #[test]
        fn dss_checksum_equals_the_former_implementation_anywhere(
            dsn: u64, ssn: u32, len: u16, p in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2000),
        ) {
            proptest::prop_assert_eq!(dss_checksum(dsn, ssn, len, &p), dss_checksum_before_move(dsn, ssn, len, &p));
        }
    }
}
