//! Where a proxied connection goes: an address, or a name the exit
//! resolves (as `socks5h`), in the SOCKS5 address types both the SOCKS
//! codec and the exit header use.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// SOCKS5 `ATYP` values (RFC 1928 section 4), shared by the exit header.
pub(crate) const ATYP_IPV4: u8 = 1;
pub(crate) const ATYP_DOMAIN: u8 = 3;
pub(crate) const ATYP_IPV6: u8 = 4;

/// A destination as a client named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Dest {
    Addr(SocketAddr),
    /// A host name (letters, digits, `-`, `.`, `_`; 1..=255 bytes) and port.
    Name(String, u16),
}

impl Dest {
    /// A destination from a SOCKS/header address field: IP literals given
    /// as names become addresses, names must be plausible host names (no
    /// control bytes, spaces or `/` smuggled into a resolver or a log).
    pub(crate) fn from_name(bytes: &[u8], port: u16) -> Option<Dest> {
        if bytes.is_empty() || bytes.len() > 255 {
            return None;
        }
        if !bytes.iter().all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'[' | b']')) {
            return None;
        }
        let s = std::str::from_utf8(bytes).ok()?;
        let literal = s.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(s);
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return Some(Dest::Addr(SocketAddr::new(ip, port)));
        }
        if s.contains([':', '[', ']']) {
            return None;
        }
        Some(Dest::Name(s.to_ascii_lowercase(), port))
    }

    pub(crate) fn port(&self) -> u16 {
        match self {
            Dest::Addr(a) => a.port(),
            Dest::Name(_, p) => *p,
        }
    }

    /// The `ATYP` and address bytes of the wire form (port excluded).
    pub(crate) fn wire_addr(&self) -> (u8, Vec<u8>) {
        match self {
            Dest::Addr(SocketAddr::V4(a)) => (ATYP_IPV4, a.ip().octets().to_vec()),
            Dest::Addr(SocketAddr::V6(a)) => (ATYP_IPV6, a.ip().octets().to_vec()),
            Dest::Name(n, _) => (ATYP_DOMAIN, n.as_bytes().to_vec()),
        }
    }

    /// The inverse of [`Dest::wire_addr`]; `None` for anything malformed.
    pub(crate) fn from_wire(atyp: u8, addr: &[u8], port: u16) -> Option<Dest> {
        match (atyp, addr.len()) {
            (ATYP_IPV4, 4) => {
                let o: [u8; 4] = addr.try_into().ok()?;
                Some(Dest::Addr(SocketAddr::new(IpAddr::from(o), port)))
            }
            (ATYP_IPV6, 16) => {
                let o: [u8; 16] = addr.try_into().ok()?;
                Some(Dest::Addr(SocketAddr::new(IpAddr::from(o), port)))
            }
            (ATYP_DOMAIN, _) => Dest::from_name(addr, port),
            _ => None,
        }
    }
}

impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dest::Addr(a) => write!(f, "{a}"),
            Dest::Name(n, p) => write!(f, "{n}:{p}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_literals() {
        assert_eq!(Dest::from_name(b"Example.COM", 80), Some(Dest::Name("example.com".into(), 80)));
        assert_eq!(Dest::from_name(b"10.1.2.3", 80), Some(Dest::Addr("10.1.2.3:80".parse().unwrap())));
        assert_eq!(Dest::from_name(b"[fd00::1]", 80), Some(Dest::Addr("[fd00::1]:80".parse().unwrap())));
        for bad in [&b""[..], b"a b", b"a/b", b"a\0b", b"x:y", b"[a]", &[b'a'; 256], &[0xc3, 0xa9]] {
            assert_eq!(Dest::from_name(bad, 1), None, "{bad:?}");
        }
        for d in [Dest::Name("h.example".into(), 443), Dest::Addr("[::1]:9".parse().unwrap())] {
            let (t, a) = d.wire_addr();
            assert_eq!(Dest::from_wire(t, &a, d.port()), Some(d.clone()));
        }
        assert_eq!(Dest::from_wire(ATYP_IPV4, &[1, 2, 3], 1), None);
        assert_eq!(Dest::from_wire(9, &[1, 2, 3, 4], 1), None);
    }
}
