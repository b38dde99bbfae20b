//! The server side of SOCKS5 (RFC 1928) with username/password
//! authentication (RFC 1929): method negotiation, the request, the reply.
//!
//! Every field is read with `read_exact` of a length the protocol bounds
//! (at most 255 bytes at a time), so a hostile client can neither make the
//! proxy buffer more than a few hundred bytes nor make it read past the
//! request into data the client sent early (that belongs to the relay).

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::dest::{Dest, ATYP_DOMAIN, ATYP_IPV4, ATYP_IPV6};

const VERSION: u8 = 5;
const AUTH_VERSION: u8 = 1;
pub(crate) const METHOD_NONE: u8 = 0x00;
pub(crate) const METHOD_USERPASS: u8 = 0x02;
const METHOD_UNACCEPTABLE: u8 = 0xff;
const CMD_CONNECT: u8 = 1;

/// SOCKS5 reply codes (RFC 1928 section 6); the exit answers with them too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Rep {
    Succeeded = 0,
    GeneralFailure = 1,
    NotAllowed = 2,
    NetworkUnreachable = 3,
    HostUnreachable = 4,
    ConnectionRefused = 5,
    TtlExpired = 6,
    CommandNotSupported = 7,
    AddressTypeNotSupported = 8,
}

impl Rep {
    pub(crate) fn from_u8(v: u8) -> Option<Rep> {
        use Rep::*;
        Some(match v {
            0 => Succeeded,
            1 => GeneralFailure,
            2 => NotAllowed,
            3 => NetworkUnreachable,
            4 => HostUnreachable,
            5 => ConnectionRefused,
            6 => TtlExpired,
            7 => CommandNotSupported,
            8 => AddressTypeNotSupported,
            _ => return None,
        })
    }

    /// RFC 1928's wording, for logs and events.
    pub(crate) fn text(self) -> &'static str {
        use Rep::*;
        match self {
            Succeeded => "succeeded",
            GeneralFailure => "general SOCKS server failure",
            NotAllowed => "connection not allowed by ruleset",
            NetworkUnreachable => "network unreachable",
            HostUnreachable => "host unreachable",
            ConnectionRefused => "connection refused",
            TtlExpired => "TTL expired",
            CommandNotSupported => "command not supported",
            AddressTypeNotSupported => "address type not supported",
        }
    }

    /// The reply for a failed outgoing connect.
    pub(crate) fn for_connect_error(e: &io::Error) -> Rep {
        use io::ErrorKind as K;
        match e.kind() {
            K::ConnectionRefused => Rep::ConnectionRefused,
            K::NetworkUnreachable => Rep::NetworkUnreachable,
            K::HostUnreachable | K::TimedOut => Rep::HostUnreachable,
            _ => match e.raw_os_error() {
                Some(libc::ENETUNREACH) => Rep::NetworkUnreachable,
                Some(libc::EHOSTUNREACH) => Rep::HostUnreachable,
                _ => Rep::GeneralFailure,
            },
        }
    }
}

/// Username/password pairs the local proxy accepts (RFC 1929); empty: no
/// authentication is required.
#[derive(Clone, Debug, Default)]
pub(crate) struct Users(Vec<(Vec<u8>, Vec<u8>)>);

impl Users {
    /// `user:password` lines (blank lines and `#` comments skipped).
    pub(crate) fn parse(text: &str) -> Result<Users, String> {
        let mut v = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let (u, p) = line.split_once(':').ok_or_else(|| format!("line {}: not user:password", i + 1))?;
            if u.is_empty() || u.len() > 255 || p.is_empty() || p.len() > 255 {
                return Err(format!("line {}: user and password must be 1..=255 bytes", i + 1));
            }
            v.push((u.as_bytes().to_vec(), p.as_bytes().to_vec()));
        }
        if v.is_empty() {
            return Err("no user:password line".into());
        }
        Ok(Users(v))
    }

    pub(crate) fn required(&self) -> bool {
        !self.0.is_empty()
    }

    fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        // Every entry is compared in full (no early exit on the first
        // differing byte or entry), so timing says little about which part
        // was wrong.
        let mut ok = false;
        for (u, p) in &self.0 {
            ok |= ct_eq(u, user) & ct_eq(p, pass);
        }
        ok
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (x, y) in a.iter().zip(b.iter().cycle()) {
        diff |= x ^ y;
    }
    diff == 0
}

/// Why a SOCKS negotiation ended without a destination; what the client
/// was answered, if anything.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The client is not speaking SOCKS5 or broke off (nothing answered,
    /// or the method refusal sent).
    Protocol(String),
    /// Authentication failed (status 1 answered).
    Auth,
    /// A well-formed request the proxy does not serve; this reply was sent.
    Reply(Rep, String),
    Io(io::Error),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Protocol(s) => write!(f, "not SOCKS5: {s}"),
            Refusal::Auth => write!(f, "SOCKS5 authentication failed"),
            Refusal::Reply(r, s) => write!(f, "{} ({s})", r.text()),
            Refusal::Io(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for Refusal {
    fn from(e: io::Error) -> Self {
        Refusal::Io(e)
    }
}

/// Runs the server side up to the request: method selection, RFC 1929
/// authentication if `users` requires it, and the CONNECT request. Other
/// commands are answered "command not supported", unknown address types
/// "address type not supported". On success the reply is still to be sent
/// ([`write_reply`]), once the outcome of the connect is known.
pub(crate) async fn accept<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, users: &Users) -> Result<Dest, Refusal> {
    let mut head = [0u8; 2];
    s.read_exact(&mut head).await?;
    if head[0] != VERSION {
        return Err(Refusal::Protocol(format!("version byte {}", head[0])));
    }
    let mut methods = [0u8; 255];
    let methods = &mut methods[..usize::from(head[1])];
    s.read_exact(methods).await?;
    let want = if users.required() { METHOD_USERPASS } else { METHOD_NONE };
    if !methods.contains(&want) {
        s.write_all(&[VERSION, METHOD_UNACCEPTABLE]).await?;
        return Err(Refusal::Protocol(format!("no acceptable method offered (need {want:#04x}, got {methods:02x?})")));
    }
    s.write_all(&[VERSION, want]).await?;
    if want == METHOD_USERPASS {
        let mut v = [0u8; 2];
        s.read_exact(&mut v).await?;
        if v[0] != AUTH_VERSION {
            return Err(Refusal::Protocol(format!("username/password version {}", v[0])));
        }
        let mut user = [0u8; 255];
        let user = &mut user[..usize::from(v[1])];
        s.read_exact(user).await?;
        let mut plen = [0u8; 1];
        s.read_exact(&mut plen).await?;
        let mut pass = [0u8; 255];
        let pass = &mut pass[..usize::from(plen[0])];
        s.read_exact(pass).await?;
        let ok = users.check(user, pass);
        s.write_all(&[AUTH_VERSION, u8::from(!ok)]).await?;
        if !ok {
            return Err(Refusal::Auth);
        }
    }
    let mut req = [0u8; 4];
    s.read_exact(&mut req).await?;
    if req[0] != VERSION {
        return Err(Refusal::Protocol(format!("request version byte {}", req[0])));
    }
    let (cmd, atyp) = (req[1], req[3]);
    let mut addr = [0u8; 255];
    let addr = match atyp {
        ATYP_IPV4 => &mut addr[..4],
        ATYP_IPV6 => &mut addr[..16],
        ATYP_DOMAIN => {
            let mut n = [0u8; 1];
            s.read_exact(&mut n).await?;
            &mut addr[..usize::from(n[0])]
        }
        t => {
            write_reply(s, Rep::AddressTypeNotSupported, None).await?;
            return Err(Refusal::Reply(Rep::AddressTypeNotSupported, format!("ATYP {t}")));
        }
    };
    s.read_exact(addr).await?;
    let mut port = [0u8; 2];
    s.read_exact(&mut port).await?;
    let port = u16::from_be_bytes(port);
    if cmd != CMD_CONNECT {
        write_reply(s, Rep::CommandNotSupported, None).await?;
        let what = match cmd {
            2 => "BIND".to_string(),
            3 => "UDP ASSOCIATE".to_string(),
            c => format!("command {c}"),
        };
        return Err(Refusal::Reply(Rep::CommandNotSupported, what));
    }
    match Dest::from_wire(atyp, addr, port) {
        Some(d) => Ok(d),
        None => {
            write_reply(s, Rep::GeneralFailure, None).await?;
            Err(Refusal::Reply(Rep::GeneralFailure, format!("malformed address {:?}", String::from_utf8_lossy(addr))))
        }
    }
}

/// The reply to the request: `bound` is the exit's address of the outgoing
/// connection when it told us one (RFC 1928 allows zeros otherwise).
pub(crate) async fn write_reply<S: AsyncWrite + Unpin>(
    s: &mut S,
    rep: Rep,
    bound: Option<SocketAddr>,
) -> io::Result<()> {
    s.write_all(&encode_reply(rep, bound)).await
}

pub(crate) fn encode_reply(rep: Rep, bound: Option<SocketAddr>) -> Vec<u8> {
    let mut out = vec![VERSION, rep as u8, 0];
    match bound {
        Some(SocketAddr::V6(a)) => {
            out.push(ATYP_IPV6);
            out.extend_from_slice(&a.ip().octets());
        }
        Some(SocketAddr::V4(a)) => {
            out.push(ATYP_IPV4);
            out.extend_from_slice(&a.ip().octets());
        }
        None => out.extend_from_slice(&[ATYP_IPV4, 0, 0, 0, 0]),
    }
    out.extend_from_slice(&bound.map_or(0, |a| a.port()).to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `accept` on a client's bytes; returns the result and what the
    /// server wrote back.
    fn run(input: &[u8], users: &Users) -> (Result<Dest, Refusal>, Vec<u8>) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let (mut client, mut server) = tokio::io::duplex(4096);
            client.write_all(input).await.unwrap();
            client.shutdown().await.unwrap();
            let r = accept(&mut server, users).await;
            drop(server);
            let mut out = Vec::new();
            client.read_to_end(&mut out).await.unwrap();
            (r, out)
        })
    }

    #[test]
    fn connect_ipv4_ipv6_and_name() {
        let none = Users::default();
        let (r, out) = run(&[5, 1, 0, 5, 1, 0, 1, 10, 0, 0, 1, 0, 80], &none);
        assert_eq!(r.unwrap(), Dest::Addr("10.0.0.1:80".parse().unwrap()));
        assert_eq!(out, [5, 0]);
        let mut v6 = vec![5, 2, 2, 0, 5, 1, 0, 4];
        v6.extend_from_slice(&"fd00::7".parse::<std::net::Ipv6Addr>().unwrap().octets());
        v6.extend_from_slice(&[1, 187]);
        assert_eq!(run(&v6, &none).0.unwrap(), Dest::Addr("[fd00::7]:443".parse().unwrap()));
        let mut name = vec![5, 1, 0, 5, 1, 0, 3, 11];
        name.extend_from_slice(b"example.org");
        name.extend_from_slice(&[0x1f, 0x90]);
        assert_eq!(run(&name, &none).0.unwrap(), Dest::Name("example.org".into(), 8080));
    }

    #[test]
    fn username_password() {
        let users = Users::parse("# comment\nalice:s3cret\n\nbob:pw\n").unwrap();
        let mut ok = vec![5, 1, 2, 1, 5];
        ok.extend_from_slice(b"alice");
        ok.push(6);
        ok.extend_from_slice(b"s3cret");
        ok.extend_from_slice(&[5, 1, 0, 1, 10, 0, 0, 1, 0, 80]);
        let (r, out) = run(&ok, &users);
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(out, [5, 2, 1, 0]);
        let mut bad = vec![5, 1, 2, 1, 5];
        bad.extend_from_slice(b"alice");
        bad.push(2);
        bad.extend_from_slice(b"pw");
        let (r, out) = run(&bad, &users);
        assert!(matches!(r, Err(Refusal::Auth)), "{r:?}");
        assert_eq!(out, [5, 2, 1, 1]);
        // A client offering only "no authentication" to a proxy that needs a password.
        let (r, out) = run(&[5, 1, 0], &users);
        assert!(matches!(r, Err(Refusal::Protocol(_))));
        assert_eq!(out, [5, 0xff]);
        assert!(Users::parse("nocolon").is_err());
        assert!(Users::parse("").is_err());
        assert!(!ct_eq(b"ab", b"abc") && ct_eq(b"abc", b"abc") && !ct_eq(b"", b"a"));
    }

    #[test]
    fn bind_and_udp_are_not_supported() {
        for cmd in [2u8, 3, 9] {
            let (r, out) = run(&[5, 1, 0, 5, cmd, 0, 1, 10, 0, 0, 1, 0, 80], &Users::default());
            assert!(matches!(r, Err(Refusal::Reply(Rep::CommandNotSupported, _))), "{r:?}");
            assert_eq!(out, [5, 0, 5, 7, 0, 1, 0, 0, 0, 0, 0, 0]);
        }
        let (r, out) = run(&[5, 1, 0, 5, 1, 0, 7, 1, 2], &Users::default());
        assert!(matches!(r, Err(Refusal::Reply(Rep::AddressTypeNotSupported, _))));
        assert_eq!(out[2..4], [5, 8]);
    }

    #[test]
    fn hostile_and_truncated_input_never_panics() {
        let good = [5u8, 1, 0, 5, 1, 0, 3, 3, b'a', b'.', b'b', 0, 80];
        // Every truncation is an error (EOF), never a panic or a success.
        for n in 0..good.len() {
            assert!(run(&good[..n], &Users::default()).0.is_err(), "truncated at {n}");
        }
        // Garbage of every length: only errors or well-formed results.
        for len in 0..300 {
            let mut b = mptun::pattern::Pattern::bytes(0x9e37_79b9_7f4a_7c15 ^ len as u64, len);
            if len > 2 {
                b[0] = 5;
            }
            let _ = run(&b, &Users::default());
        }
        // A name that is no host name is refused, not passed to a resolver.
        let mut evil = vec![5, 1, 0, 5, 1, 0, 3, 5];
        evil.extend_from_slice(b"a\nb/c");
        evil.extend_from_slice(&[0, 80]);
        assert!(matches!(run(&evil, &Users::default()).0, Err(Refusal::Reply(Rep::GeneralFailure, _))));
        assert!(matches!(run(&[4, 1, 0], &Users::default()).0, Err(Refusal::Protocol(_))));
    }

    #[test]
    fn replies() {
        assert_eq!(encode_reply(Rep::NotAllowed, None), [5, 2, 0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            encode_reply(Rep::Succeeded, Some("10.0.0.2:4000".parse().unwrap())),
            [5, 0, 0, 1, 10, 0, 0, 2, 15, 160]
        );
        assert_eq!(encode_reply(Rep::Succeeded, Some("[::1]:1".parse().unwrap())).len(), 22);
        for v in 0..=8 {
            assert_eq!(Rep::from_u8(v).unwrap() as u8, v);
        }
        assert_eq!(Rep::from_u8(9), None);
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        assert_eq!(Rep::for_connect_error(&refused), Rep::ConnectionRefused);
        assert_eq!(Rep::for_connect_error(&io::Error::from_raw_os_error(libc::ENETUNREACH)), Rep::NetworkUnreachable);
    }
}
