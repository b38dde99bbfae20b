//! Helpers for tests that need root and network namespaces, shared with the
//! other crates' tests.
//!
//! The rule: a test that needs namespaces is skipped, with the reason printed,
//! when the machine cannot run it (not root, no `/dev/net/tun`, `ip netns`
//! unusable); but CI sets `MPTUN_REQUIRE_NETNS=1`, and there a skip would hide
//! a broken environment, so it panics instead.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};

/// Why a namespace test cannot run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipReason(pub String);

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Environment variable that turns a skip into a failure.
pub const REQUIRE_ENV: &str = "MPTUN_REQUIRE_NETNS";

/// `None` when namespace tests can run. Otherwise prints
/// `skipped: <reason>` and returns the reason, or panics with it when
/// `MPTUN_REQUIRE_NETNS=1`.
///
/// ```no_run
/// if mptun_io::testutil::require_netns().is_some() {
///     return;
/// }
/// ```
pub fn require_netns() -> Option<SkipReason> {
    let reason = probe()?;
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("{REQUIRE_ENV}=1 but network-namespace tests cannot run: {reason}");
    }
    println!("skipped: {reason}");
    Some(reason)
}

fn probe() -> Option<SkipReason> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some(SkipReason("not root".into()));
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some(SkipReason("no /dev/net/tun".into()));
    }
    if let Err(e) = crate::netns::ip_here(["netns", "list"]) {
        return Some(SkipReason(format!("`ip netns` unusable: {e}")));
    }
    None
}

/// A name no other test (in this or a concurrent process) uses:
/// `PREFIX` + pid + a counter, cut to `max_len` keeping the unique tail.
/// Keep `PREFIX` short: interface names allow 15 bytes.
pub fn unique_name(prefix: &str, max_len: usize) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tail = format!("{:x}{}", std::process::id(), n);
    let keep = max_len.saturating_sub(tail.len()).min(prefix.len());
    format!("{}{}", &prefix[..keep], tail)
}

/// The Internet checksum (RFC 1071) of `data`, with `initial` folded in
/// (pass a pseudo-header sum, or 0).
pub fn checksum(data: &[u8], initial: u32) -> u16 {
    let mut sum = initial;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum = sum.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
    }
    if let [last] = chunks.remainder() {
        sum = sum.wrapping_add(u32::from(*last) << 8);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn pseudo_sum(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> u32 {
    let mut sum = 0u32;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            sum = sum.wrapping_add(u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])));
        }
    };
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            add(&s.octets());
            add(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            add(&s.octets());
            add(&d.octets());
        }
        _ => {}
    }
    sum.wrapping_add(u32::from(proto)).wrapping_add(len as u32)
}

/// A UDP datagram in an IPv4 or IPv6 packet, checksums filled in.
///
/// Panics if the address families differ or the payload exceeds 65 000
/// bytes: it builds test input from test constants.
pub fn udp_packet(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Vec<u8> {
    assert_eq!(src.is_ipv4(), dst.is_ipv4(), "address families differ");
    assert!(payload.len() <= 65_000);
    let udp_len = 8 + payload.len();
    let mut udp = Vec::with_capacity(udp_len);
    udp.extend_from_slice(&src.port().to_be_bytes());
    udp.extend_from_slice(&dst.port().to_be_bytes());
    udp.extend_from_slice(&(udp_len as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend_from_slice(payload);
    let mut c = checksum(&udp, pseudo_sum(src.ip(), dst.ip(), 17, udp_len));
    if c == 0 {
        c = 0xffff;
    }
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    ip_packet(src.ip(), dst.ip(), 17, &udp)
}

/// Wraps a transport segment (checksum already filled) in an IPv4 header
/// (DF, TTL 64, checksum filled) or an IPv6 header (hop limit 64).
fn ip_packet(src: IpAddr, dst: IpAddr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let mut p = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, proto, 0, 0];
            h[2..4].copy_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
            let c = checksum(&h, 0);
            h[10..12].copy_from_slice(&c.to_be_bytes());
            h
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let mut h = vec![0x60, 0, 0, 0];
            h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            h.extend_from_slice(&[proto, 64]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
            h
        }
        _ => panic!("address families differ"),
    };
    p.extend_from_slice(l4);
    p
}

/// TCP header fields for [`tcp_packet`].
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpFields<'a> {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10).
    pub flags: u8,
    /// Window (unscaled field value).
    pub window: u16,
    /// Options, already padded to a multiple of 4 bytes.
    pub options: &'a [u8],
}

/// A TCP segment in an IPv4 or IPv6 packet, checksums filled in. Panics on
/// mismatched families or unpadded options (test input from constants).
pub fn tcp_packet(src: SocketAddr, dst: SocketAddr, f: TcpFields<'_>, payload: &[u8]) -> Vec<u8> {
    assert!(f.options.len() & 3 == 0 && f.options.len() <= 40, "options must be padded, at most 40 bytes");
    let thl = 20 + f.options.len();
    let mut t = Vec::with_capacity(thl + payload.len());
    t.extend_from_slice(&src.port().to_be_bytes());
    t.extend_from_slice(&dst.port().to_be_bytes());
    t.extend_from_slice(&f.seq.to_be_bytes());
    t.extend_from_slice(&f.ack.to_be_bytes());
    t.push(((thl / 4) as u8) << 4);
    t.push(f.flags);
    t.extend_from_slice(&f.window.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 0]);
    t.extend_from_slice(f.options);
    t.extend_from_slice(payload);
    let c = checksum(&t, pseudo_sum(src.ip(), dst.ip(), 6, t.len()));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    ip_packet(src.ip(), dst.ip(), 6, &t)
}

/// A parsed UDP datagram: source, destination, payload.
pub type Udp<'a> = (SocketAddr, SocketAddr, &'a [u8]);

/// Parses a UDP-in-IP packet (no IPv4 options or IPv6 extension headers
/// beyond what the kernel sends for plain UDP); `None` for anything else or
/// anything truncated.
pub fn parse_udp(p: &[u8]) -> Option<Udp<'_>> {
    let (src, dst, l4) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([*p.get(2)?, *p.get(3)?]));
            if ihl < 20 || *p.get(9)? != 17 || total > p.len() || total < ihl {
                return None;
            }
            let s: [u8; 4] = p.get(12..16)?.try_into().ok()?;
            let d: [u8; 4] = p.get(16..20)?.try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), &p[ihl..total])
        }
        6 => {
            let plen = usize::from(u16::from_be_bytes([*p.get(4)?, *p.get(5)?]));
            if *p.get(6)? != 17 || 40 + plen > p.len() {
                return None;
            }
            let s: [u8; 16] = p.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = p.get(24..40)?.try_into().ok()?;
            (IpAddr::from(s), IpAddr::from(d), &p[40..40 + plen])
        }
        _ => return None,
    };
    let sport = u16::from_be_bytes([*l4.first()?, *l4.get(1)?]);
    let dport = u16::from_be_bytes([*l4.get(2)?, *l4.get(3)?]);
    let ulen = usize::from(u16::from_be_bytes([*l4.get(4)?, *l4.get(5)?]));
    if ulen < 8 || ulen > l4.len() {
        return None;
    }
    Some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport), &l4[8..ulen]))
}

/// The reply a UDP echo server would send to `p`: addresses and ports
/// swapped, same payload. `None` if `p` is no UDP packet.
pub fn udp_echo_reply(p: &[u8]) -> Option<Vec<u8>> {
    let (src, dst, payload) = parse_udp(p)?;
    Some(udp_packet(dst, src, payload))
}

/// Checks a UDP packet's checksums (IPv4 header and UDP); `false` when
/// either is wrong or the packet is no UDP.
pub fn udp_checksums_ok(p: &[u8]) -> bool {
    let Some((src, dst, _)) = parse_udp(p) else { return false };
    let (ip_ok, l4) = if p[0] >> 4 == 4 {
        let ihl = usize::from(p[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
        (checksum(&p[..ihl], 0) == 0, &p[ihl..total])
    } else {
        (true, &p[40..40 + usize::from(u16::from_be_bytes([p[4], p[5]]))])
    };
    let ulen = usize::from(u16::from_be_bytes([l4[4], l4[5]]));
    let zero_ok = src.is_ipv4() && l4[6] == 0 && l4[7] == 0; // IPv4 allows "no checksum"
    ip_ok && (zero_ok || checksum(&l4[..ulen], pseudo_sum(src.ip(), dst.ip(), 17, ulen)) == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_round_trips_v4_v6() {
        for (s, d) in [("10.1.2.3:1000", "10.9.8.7:53"), ("[fd00::1]:1000", "[fd00::2]:53")] {
            let (s, d): (SocketAddr, SocketAddr) = (s.parse().unwrap(), d.parse().unwrap());
            let p = udp_packet(s, d, b"hello");
            assert!(udp_checksums_ok(&p));
            assert_eq!(parse_udp(&p), Some((s, d, &b"hello"[..])));
            let r = udp_echo_reply(&p).unwrap();
            assert_eq!(parse_udp(&r), Some((d, s, &b"hello"[..])));
            let mut bad = p.clone();
            *bad.last_mut().unwrap() ^= 1;
            assert!(!udp_checksums_ok(&bad));
            for cut in 0..p.len() {
                assert!(parse_udp(&p[..cut]).is_none() || p[0] >> 4 == 4 && cut >= p.len());
            }
        }
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        assert_eq!(checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7], 0), !0xddf2);
    }

    #[test]
    fn unique_names_fit_and_differ() {
        let a = unique_name("mptun-io-test-", 15);
        let b = unique_name("mptun-io-test-", 15);
        assert!(a.len() <= 15 && b.len() <= 15);
        assert_ne!(a, b);
    }
}
