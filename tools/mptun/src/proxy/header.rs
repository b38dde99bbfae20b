//! The exit header: what the local proxy sends first on each MPTCP
//! connection (the destination) and what the exit answers (the outcome of
//! its connect), both authenticated with HMAC-SHA256 under the pre-shared
//! key, so the exit relays only for holders of the key and a captured
//! header cannot open a second connection. The byte layout is in
//! docs/proxy.md; the replay defence (timestamp window plus a cache of the
//! nonces seen in it) is [`ReplayGuard`].

use std::collections::{BTreeSet, HashSet};
use std::io;
use std::net::SocketAddr;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::dest::{Dest, ATYP_DOMAIN, ATYP_IPV4, ATYP_IPV6};
use super::socks5::Rep;

type HmacSha256 = Hmac<Sha256>;

pub(crate) const REQUEST_MAGIC: [u8; 4] = *b"MPXQ";
pub(crate) const REPLY_MAGIC: [u8; 4] = *b"MPXR";
pub(crate) const VERSION: u8 = 1;
pub(crate) const TAG_LEN: usize = 32;
pub(crate) const NONCE_LEN: usize = 16;
/// The request's fixed part: magic, version, atyp, address length,
/// reserved, timestamp, nonce.
pub(crate) const REQUEST_FIXED: usize = 32;
/// The reply's fixed part: magic, version, code, atyp, reserved.
pub(crate) const REPLY_FIXED: usize = 8;
/// How far a request's timestamp may be from the exit's clock.
pub(crate) const WINDOW_MS: u64 = 30_000;
/// Nonces remembered at most (a key holder opening more than this many
/// connections per [`WINDOW_MS`] is refused until older ones expire).
pub(crate) const REPLAY_CACHE: usize = 1 << 16;

/// The pre-shared key (the key file's contents without surrounding
/// whitespace, at least 16 bytes).
#[derive(Clone)]
pub(crate) struct Key(Vec<u8>);

impl Key {
    pub(crate) fn from_bytes(b: &[u8]) -> Result<Key, String> {
        let t = b.trim_ascii();
        if t.len() < 16 {
            return Err(format!(
                "the key is {} bytes; at least 16 are needed (e.g. `head -c 32 /dev/urandom | base64 > key`)",
                t.len()
            ));
        }
        Ok(Key(t.to_vec()))
    }

    /// Reads the key file (at most 4 KiB); a file others can read is
    /// accepted with a warning, as the key is only as secret as the file.
    pub(crate) fn read(path: &Path) -> anyhow::Result<Key> {
        use std::io::Read;
        use std::os::unix::fs::PermissionsExt;
        let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("--key-file {}: {e}", path.display()))?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            anyhow::bail!("--key-file {}: not a regular file", path.display());
        }
        if meta.permissions().mode() & 0o077 != 0 {
            eprintln!("mptun: warning: --key-file {} can be read by other users (chmod 600 it)", path.display());
        }
        let mut b = Vec::new();
        f.take(4096).read_to_end(&mut b)?;
        Key::from_bytes(&b).map_err(|e| anyhow::anyhow!("--key-file {}: {e}", path.display()))
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }
}

/// A decoded request header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) dest: Dest,
    pub(crate) timestamp_ms: u64,
    pub(crate) nonce: [u8; NONCE_LEN],
    /// Its tag: the reply's tag covers it, binding reply to request.
    pub(crate) tag: [u8; TAG_LEN],
}

/// Why a request header was rejected (each is counted by the exit).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reject {
    /// Not an mptun proxy header, or an unknown version.
    Malformed(&'static str),
    /// The tag does not verify: the peer holds another key.
    WrongKey,
    /// Authentic, but its timestamp is outside the window.
    Stale { skew_ms: i64 },
    /// Authentic and fresh, but its nonce was seen: a replay.
    Replayed,
    /// The replay cache is full of live nonces.
    CacheFull,
}

impl std::fmt::Display for Reject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reject::Malformed(s) => write!(f, "malformed header: {s}"),
            Reject::WrongKey => write!(f, "wrong key (header authentication failed)"),
            Reject::Stale { skew_ms } => {
                write!(f, "timestamp {} ms off the exit's clock (window ±{WINDOW_MS} ms)", skew_ms)
            }
            Reject::Replayed => write!(f, "replayed header (nonce already used)"),
            Reject::CacheFull => write!(f, "too many connections in the replay window"),
        }
    }
}

/// Encodes a request for `dest` (the caller supplies clock and nonce, so
/// tests are deterministic); returns the bytes and the tag.
pub(crate) fn encode_request(
    key: &Key,
    dest: &Dest,
    timestamp_ms: u64,
    nonce: [u8; NONCE_LEN],
) -> (Vec<u8>, [u8; TAG_LEN]) {
    let (atyp, addr) = dest.wire_addr();
    let mut b = Vec::with_capacity(REQUEST_FIXED + addr.len() + 2 + TAG_LEN);
    b.extend_from_slice(&REQUEST_MAGIC);
    b.push(VERSION);
    b.push(atyp);
    b.push(addr.len() as u8); // Dest guarantees 4, 16 or 1..=255
    b.push(0);
    b.extend_from_slice(&timestamp_ms.to_be_bytes());
    b.extend_from_slice(&nonce);
    b.extend_from_slice(&addr);
    b.extend_from_slice(&dest.port().to_be_bytes());
    let mut m = key.mac();
    m.update(&b);
    let tag: [u8; TAG_LEN] = m.finalize().into_bytes().into();
    b.extend_from_slice(&tag);
    (b, tag)
}

/// The length of the variable part that follows the fixed 32 bytes
/// (address, port, tag), or why the fixed part is not a request.
pub(crate) fn request_rest_len(fixed: &[u8; REQUEST_FIXED]) -> Result<usize, Reject> {
    if fixed[..4] != REQUEST_MAGIC {
        return Err(Reject::Malformed("bad magic"));
    }
    if fixed[4] != VERSION {
        return Err(Reject::Malformed("unsupported version"));
    }
    let len = usize::from(fixed[6]);
    let ok = match fixed[5] {
        ATYP_IPV4 => len == 4,
        ATYP_IPV6 => len == 16,
        ATYP_DOMAIN => len >= 1,
        _ => false,
    };
    if !ok {
        return Err(Reject::Malformed("bad address type or length"));
    }
    Ok(len + 2 + TAG_LEN)
}

/// Decodes and authenticates a whole request (fixed part and rest). The
/// tag is checked before any other field is trusted; freshness is the
/// [`ReplayGuard`]'s job.
pub(crate) fn decode_request(key: &Key, b: &[u8]) -> Result<Request, Reject> {
    let fixed: &[u8; REQUEST_FIXED] =
        b.get(..REQUEST_FIXED).and_then(|f| f.try_into().ok()).ok_or(Reject::Malformed("truncated"))?;
    let rest = request_rest_len(fixed)?;
    if b.len() != REQUEST_FIXED + rest {
        return Err(Reject::Malformed("length mismatch"));
    }
    let (body, tag) = b.split_at(b.len() - TAG_LEN);
    let mut m = key.mac();
    m.update(body);
    m.verify_slice(tag).map_err(|_| Reject::WrongKey)?;
    let len = usize::from(fixed[6]);
    let addr = &body[REQUEST_FIXED..REQUEST_FIXED + len];
    let port = u16::from_be_bytes([body[REQUEST_FIXED + len], body[REQUEST_FIXED + len + 1]]);
    let dest = Dest::from_wire(fixed[5], addr, port).ok_or(Reject::Malformed("bad address"))?;
    Ok(Request {
        dest,
        timestamp_ms: u64::from_be_bytes(fixed[8..16].try_into().expect("8 bytes")),
        nonce: fixed[16..32].try_into().expect("16 bytes"),
        tag: tag.try_into().expect("32 bytes"),
    })
}

/// Reads one request from `s`: exactly its bytes (what follows is the
/// client's data), at most 32 + 255 + 2 + 32.
pub(crate) async fn read_request<S: AsyncRead + Unpin>(s: &mut S, key: &Key) -> io::Result<Result<Request, Reject>> {
    let mut b = [0u8; REQUEST_FIXED + 255 + 2 + TAG_LEN];
    s.read_exact(&mut b[..REQUEST_FIXED]).await?;
    let fixed: [u8; REQUEST_FIXED] = b[..REQUEST_FIXED].try_into().expect("fixed part");
    let rest = match request_rest_len(&fixed) {
        Ok(n) => n,
        Err(r) => return Ok(Err(r)),
    };
    s.read_exact(&mut b[REQUEST_FIXED..REQUEST_FIXED + rest]).await?;
    Ok(decode_request(key, &b[..REQUEST_FIXED + rest]))
}

/// The exit's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) rep: Rep,
    /// The exit's address of the outgoing connection (SOCKS BND.ADDR).
    pub(crate) bound: Option<SocketAddr>,
}

pub(crate) fn encode_reply(key: &Key, request_tag: &[u8; TAG_LEN], reply: &Reply) -> Vec<u8> {
    let mut b = Vec::with_capacity(REPLY_FIXED + 16 + 2 + TAG_LEN);
    b.extend_from_slice(&REPLY_MAGIC);
    b.push(VERSION);
    b.push(reply.rep as u8);
    match reply.bound {
        Some(SocketAddr::V4(a)) => {
            b.extend_from_slice(&[ATYP_IPV4, 0]);
            b.extend_from_slice(&a.ip().octets());
        }
        Some(SocketAddr::V6(a)) => {
            b.extend_from_slice(&[ATYP_IPV6, 0]);
            b.extend_from_slice(&a.ip().octets());
        }
        None => b.extend_from_slice(&[0, 0]),
    }
    b.extend_from_slice(&reply.bound.map_or(0, |a| a.port()).to_be_bytes());
    let mut m = key.mac();
    m.update(request_tag);
    m.update(&b);
    b.extend_from_slice(&m.finalize().into_bytes());
    b
}

/// Why a reply was not accepted by the local proxy.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BadReply {
    Malformed(&'static str),
    /// The tag does not verify: the exit holds another key (it refuses us).
    WrongKey,
}

fn reply_rest_len(fixed: &[u8; REPLY_FIXED]) -> Result<usize, BadReply> {
    if fixed[..4] != REPLY_MAGIC {
        return Err(BadReply::Malformed("bad magic (is this an mptun proxy exit?)"));
    }
    if fixed[4] != VERSION {
        return Err(BadReply::Malformed("unsupported version"));
    }
    let alen = match fixed[6] {
        0 => 0,
        ATYP_IPV4 => 4,
        ATYP_IPV6 => 16,
        _ => return Err(BadReply::Malformed("bad address type")),
    };
    Ok(alen + 2 + TAG_LEN)
}

pub(crate) fn decode_reply(key: &Key, request_tag: &[u8; TAG_LEN], b: &[u8]) -> Result<Reply, BadReply> {
    let fixed: &[u8; REPLY_FIXED] =
        b.get(..REPLY_FIXED).and_then(|f| f.try_into().ok()).ok_or(BadReply::Malformed("truncated"))?;
    let rest = reply_rest_len(fixed)?;
    if b.len() != REPLY_FIXED + rest {
        return Err(BadReply::Malformed("length mismatch"));
    }
    let (body, tag) = b.split_at(b.len() - TAG_LEN);
    let mut m = key.mac();
    m.update(request_tag);
    m.update(body);
    m.verify_slice(tag).map_err(|_| BadReply::WrongKey)?;
    let rep = Rep::from_u8(fixed[5]).ok_or(BadReply::Malformed("unknown reply code"))?;
    let addr = &body[REPLY_FIXED..body.len() - 2];
    let port = u16::from_be_bytes([body[body.len() - 2], body[body.len() - 1]]);
    let bound = match Dest::from_wire(fixed[6], addr, port) {
        Some(Dest::Addr(a)) => Some(a),
        _ => None,
    };
    Ok(Reply { rep, bound })
}

pub(crate) async fn read_reply<S: AsyncRead + Unpin>(
    s: &mut S,
    key: &Key,
    request_tag: &[u8; TAG_LEN],
) -> io::Result<Result<Reply, BadReply>> {
    let mut b = [0u8; REPLY_FIXED + 16 + 2 + TAG_LEN];
    s.read_exact(&mut b[..REPLY_FIXED]).await?;
    let rest = match reply_rest_len(b[..REPLY_FIXED].try_into().expect("fixed part")) {
        Ok(n) => n,
        Err(e) => return Ok(Err(e)),
    };
    s.read_exact(&mut b[REPLY_FIXED..REPLY_FIXED + rest]).await?;
    Ok(decode_reply(key, request_tag, &b[..REPLY_FIXED + rest]))
}

/// The exit's memory of the nonces of authentic requests still inside the
/// timestamp window: a request is fresh when its timestamp is within
/// ±[`WINDOW_MS`] of the exit's clock and its nonce is not remembered. A
/// nonce is kept until its timestamp leaves the window, after which a
/// replay is stale anyway, so the memory is bounded by the connection rate
/// (and capped at [`REPLAY_CACHE`]).
///
/// Entries leave in order of expiry, not of arrival: clients' clocks
/// differ, and one request stamped at the far edge of the window must not
/// hold the ones behind it (and with them the cap) after they expired.
/// When the cap is reached by live entries the newcomer is refused; what is
/// remembered is never dropped early, as that would let its replay through.
#[derive(Default)]
pub(crate) struct ReplayGuard {
    seen: HashSet<[u8; NONCE_LEN]>,
    /// (expiry, nonce), the earliest expiry first.
    by_expiry: BTreeSet<(u64, [u8; NONCE_LEN])>,
}

impl ReplayGuard {
    pub(crate) fn check(&mut self, r: &Request, now_ms: u64) -> Result<(), Reject> {
        let skew = i128::from(r.timestamp_ms) - i128::from(now_ms);
        if skew.unsigned_abs() > u128::from(WINDOW_MS) {
            return Err(Reject::Stale { skew_ms: skew.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64 });
        }
        while let Some(&(exp, n)) = self.by_expiry.first() {
            if exp >= now_ms {
                break;
            }
            self.by_expiry.pop_first();
            self.seen.remove(&n);
        }
        if self.seen.contains(&r.nonce) {
            return Err(Reject::Replayed);
        }
        if self.seen.len() >= REPLAY_CACHE {
            return Err(Reject::CacheFull);
        }
        self.seen.insert(r.nonce);
        // A replay after its timestamp's window has closed is stale.
        self.by_expiry.insert((r.timestamp_ms + WINDOW_MS, r.nonce));
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.seen.len()
    }
}

/// Milliseconds since the Unix epoch (the header's clock).
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A fresh random nonce.
pub(crate) fn nonce() -> io::Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| io::Error::other(format!("no OS entropy: {e}")))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Key {
        Key::from_bytes(s.as_bytes()).unwrap()
    }

    #[test]
    fn request_round_trip_and_layout() {
        let k = key("0123456789abcdef-key\n");
        let d = Dest::Name("example.org".into(), 443);
        let (b, tag) = encode_request(&k, &d, 0x0102_0304_0506_0708, [7; 16]);
        assert_eq!(&b[..8], b"MPXQ\x01\x03\x0b\x00");
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[16..32], &[7; 16]);
        assert_eq!(&b[32..43], b"example.org");
        assert_eq!(&b[43..45], &[1, 187]);
        assert_eq!(b.len(), 32 + 11 + 2 + 32);
        let r = decode_request(&k, &b).unwrap();
        assert_eq!((r.dest, r.timestamp_ms, r.nonce, r.tag), (d, 0x0102_0304_0506_0708, [7; 16], tag));
        // The tag is HMAC-SHA256 over everything before it (docs/proxy.md).
        let mut m = HmacSha256::new_from_slice(b"0123456789abcdef-key").unwrap();
        m.update(&b[..45]);
        assert_eq!(&b[45..], &m.finalize().into_bytes()[..]);
        for d in [Dest::Addr("10.1.2.3:80".parse().unwrap()), Dest::Addr("[fd00::9]:8080".parse().unwrap())] {
            let (b, _) = encode_request(&k, &d, 5, [1; 16]);
            assert_eq!(decode_request(&k, &b).unwrap().dest, d);
        }
    }

    #[test]
    fn wrong_key_and_tampering_are_rejected() {
        let (k, other) = (key("0123456789abcdef"), key("fedcba9876543210"));
        let (b, _) = encode_request(&k, &Dest::Addr("10.0.0.1:80".parse().unwrap()), 1, [0; 16]);
        assert_eq!(decode_request(&other, &b), Err(Reject::WrongKey));
        // Flipping any bit after the length-checked fields breaks the tag.
        for i in 8..b.len() {
            let mut t = b.clone();
            t[i] ^= 0x10;
            assert_eq!(decode_request(&k, &t), Err(Reject::WrongKey), "byte {i}");
        }
        assert!(Key::from_bytes(b"  short \n").is_err());
    }

    #[test]
    fn hostile_and_truncated_headers_never_panic() {
        let k = key("0123456789abcdef");
        let (b, _) = encode_request(&k, &Dest::Name("a.b".into(), 1), 1, [0; 16]);
        for n in 0..b.len() {
            assert!(decode_request(&k, &b[..n]).is_err(), "truncated at {n}");
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode_request(&k, &long), Err(Reject::Malformed("length mismatch")));
        for len in 0..400 {
            let mut v = mptun::pattern::Pattern::bytes(0x2545_f491_4f6c_dd1d ^ len as u64, len);
            if len >= 8 {
                v[..5].copy_from_slice(b"MPXQ\x01");
            }
            assert!(decode_request(&k, &v).is_err());
            assert!(decode_reply(&k, &[0; 32], &v).is_err());
        }
        // The async reader reads exactly the header and stops at EOF.
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut with_data = b.clone();
            with_data.extend_from_slice(b"GET / HTTP/1.1\r\n");
            let mut r = &with_data[..];
            assert!(read_request(&mut r, &k).await.unwrap().is_ok());
            assert_eq!(r, b"GET / HTTP/1.1\r\n", "the client's data is left for the relay");
            for n in 0..b.len() {
                let mut r = &b[..n];
                assert!(read_request(&mut r, &k).await.is_err(), "EOF at {n}");
            }
            let mut bad: &[u8] = b"HTTP/1.1 200 OK\r\n\r\n0123456789abcdef";
            assert_eq!(read_request(&mut bad, &k).await.unwrap(), Err(Reject::Malformed("bad magic")));
        });
    }

    #[test]
    fn reply_is_bound_to_its_request() {
        let k = key("0123456789abcdef");
        let (t1, t2) = ([1u8; 32], [2u8; 32]);
        let rep = Reply { rep: Rep::Succeeded, bound: Some("10.0.0.2:40000".parse().unwrap()) };
        let b = encode_reply(&k, &t1, &rep);
        assert_eq!(&b[..8], b"MPXR\x01\x00\x01\x00");
        assert_eq!(b.len(), 8 + 4 + 2 + 32);
        assert_eq!(decode_reply(&k, &t1, &b), Ok(rep));
        assert_eq!(decode_reply(&k, &t2, &b), Err(BadReply::WrongKey), "a reply to another request");
        assert_eq!(decode_reply(&key("fedcba9876543210"), &t1, &b), Err(BadReply::WrongKey));
        let none = encode_reply(&k, &t1, &Reply { rep: Rep::NotAllowed, bound: None });
        assert_eq!(decode_reply(&k, &t1, &none).unwrap().rep, Rep::NotAllowed);
        for n in 0..none.len() {
            assert!(decode_reply(&k, &t1, &none[..n]).is_err());
        }
    }

    #[test]
    fn replays_and_stale_headers_are_refused() {
        let k = key("0123456789abcdef");
        let now = 1_700_000_000_000u64;
        let req = |ts: u64, n: u8| {
            let (b, _) = encode_request(&k, &Dest::Addr("10.0.0.1:80".parse().unwrap()), ts, [n; 16]);
            decode_request(&k, &b).unwrap()
        };
        let mut g = ReplayGuard::default();
        assert_eq!(g.check(&req(now, 1), now), Ok(()));
        assert_eq!(g.check(&req(now, 1), now + 5), Err(Reject::Replayed));
        assert_eq!(g.check(&req(now, 2), now + 5), Ok(()));
        assert!(matches!(g.check(&req(now - WINDOW_MS - 1, 3), now), Err(Reject::Stale { .. })));
        assert!(matches!(g.check(&req(now + WINDOW_MS + 1, 3), now), Err(Reject::Stale { .. })));
        // After the window the replay is stale; the nonce is forgotten.
        assert!(matches!(g.check(&req(now, 1), now + WINDOW_MS + 1), Err(Reject::Stale { .. })));
        assert_eq!(g.check(&req(now + 2 * WINDOW_MS, 9), now + 2 * WINDOW_MS), Ok(()));
        assert_eq!(g.len(), 1, "expired nonces pruned");
        assert!(matches!(g.check(&req(0, 1), u64::MAX), Err(Reject::Stale { .. })));
    }

    /// One request stamped at the far edge of the window must not keep a
    /// full cache full once the requests behind it have expired: entries
    /// leave in order of expiry, not of arrival.
    #[test]
    fn hostile_replay_guard_prunes_by_expiry() {
        let now = 10_000_000u64;
        let mk = |i: u32, ts: u64| {
            let mut nonce = [0u8; 16];
            nonce[..4].copy_from_slice(&i.to_be_bytes());
            Request { dest: Dest::Name("x".into(), 1), timestamp_ms: ts, nonce, tag: [0; 32] }
        };
        let mut g = ReplayGuard::default();
        assert_eq!(g.check(&mk(0, now + WINDOW_MS - 1000), now), Ok(()), "stamped 29 s ahead");
        for i in 1..REPLAY_CACHE as u32 {
            assert_eq!(g.check(&mk(i, now), now), Ok(()));
        }
        assert_eq!(g.check(&mk(u32::MAX, now), now), Err(Reject::CacheFull), "full of live nonces");
        // 31 s later every entry but the first has expired.
        let later = now + WINDOW_MS + 1000;
        assert_eq!(g.check(&mk(u32::MAX, later), later), Ok(()), "room once the others expired");
        assert_eq!(g.len(), 2);
        assert_eq!(g.check(&mk(0, now + WINDOW_MS - 1000), later), Err(Reject::Replayed), "the first still guards");
    }

    #[test]
    fn replay_cache_is_bounded() {
        let mut g = ReplayGuard::default();
        let now = 1_000_000u64;
        let mk = |i: u32| {
            let mut nonce = [0u8; 16];
            nonce[..4].copy_from_slice(&i.to_be_bytes());
            Request { dest: Dest::Name("x".into(), 1), timestamp_ms: now, nonce, tag: [0; 32] }
        };
        for i in 0..REPLAY_CACHE as u32 {
            assert_eq!(g.check(&mk(i), now), Ok(()));
        }
        assert_eq!(g.check(&mk(u32::MAX), now), Err(Reject::CacheFull));
        assert_eq!(g.check(&mk(0), now), Err(Reject::Replayed));
        assert_eq!(g.len(), REPLAY_CACHE);
        assert_eq!(
            g.check(&mk(u32::MAX), now + WINDOW_MS + 1),
            Err(Reject::Stale { skew_ms: -(WINDOW_MS as i64) - 1 })
        );
        let later = now + WINDOW_MS + 1;
        let mut r = mk(u32::MAX);
        r.timestamp_ms = later;
        assert_eq!(g.check(&r, later), Ok(()));
        assert_eq!(g.len(), 1);
    }
}
