//! The control messages `mptun send` and `mptun serve` exchange over the data
//! connection itself (as iperf3 negotiates a test, but without a second
//! connection: one MPTCP connection is what is being measured).
//!
//! ```text
//! client → server  Request   "MPTN" ver=1 flags mode name_len reserved amount name [cookie]
//!                   (flags: reverse, file, cookie, BLAKE3 instead of SHA-256)
//! server → client  Response  "MPTA" status reserved msg_len amount msg
//! sender → peer    data ..., Trailer, FIN
//! receiver → sender Stop "MPTS" (optional, during the data: the receiver
//!                   was interrupted; the sender ends the data at once)
//! receiver → peer  Trailer, summary_len:u32, Summary (JSON), FIN
//! Trailer (72 bytes): "MPTE" retransmits:u32 bytes:u64 elapsed_us:u64
//!                   cpu_user_us:u64 cpu_sys_us:u64 digest:[u8; 32]
//! ```
//!
//! The sender's trailer is the last 72 bytes of its stream, so a receiver
//! that does not know the length in advance (a duration test) holds back the
//! last 72 bytes it has read and hashes the rest. Every field is checked:
//! the peer is another process, possibly not ours.

use anyhow::{bail, Result};

use crate::host::CpuUse;

/// Request magic.
pub(crate) const REQUEST_MAGIC: [u8; 4] = *b"MPTN";
/// Response magic.
pub(crate) const RESPONSE_MAGIC: [u8; 4] = *b"MPTA";
/// A receiver's request to end the data now (it was interrupted).
pub(crate) const STOP_MAGIC: [u8; 4] = *b"MPTS";
/// Trailer magic.
pub(crate) const TRAILER_MAGIC: [u8; 4] = *b"MPTE";
/// Protocol version this build speaks.
pub(crate) const VERSION: u8 = 2;
/// Fixed part of a request.
pub(crate) const REQUEST_LEN: usize = 24;
/// Fixed part of a response.
pub(crate) const RESPONSE_LEN: usize = 16;
/// A trailer.
pub(crate) const TRAILER_LEN: usize = 72;
/// The sender's summary after its trailer: a u32 length, that much JSON,
/// zeros to the end. Fixed, because the receiver of a duration test finds
/// the end of the data only at EOF, by holding back this many bytes.
pub(crate) const SENDER_SUMMARY_LEN: usize = 2048;
/// What the receiver holds back: the sender's trailer and summary.
pub(crate) const SENDER_TAIL_LEN: usize = TRAILER_LEN + SENDER_SUMMARY_LEN;
/// Largest file name a request may carry.
pub(crate) const MAX_NAME: usize = 255;
/// Largest response message.
pub(crate) const MAX_MESSAGE: usize = 1024;
/// Largest counters blob after the receiver's trailer.
pub(crate) const MAX_COUNTERS: usize = 64 * 1024;
/// Largest byte count a request may ask for (1 PiB: far beyond any test,
/// small enough that rates and progress never overflow).
pub(crate) const MAX_BYTES: u64 = 1 << 50;
/// Longest duration a request may ask for (one day, in milliseconds).
pub(crate) const MAX_DURATION_MS: u64 = 86_400_000;

const FLAG_REVERSE: u8 = 1;
const FLAG_FILE: u8 = 2;
/// The request ends with the test's cookie ([`COOKIE_LEN`] bytes).
const FLAG_COOKIE: u8 = 4;
/// The data is checked with BLAKE3 instead of SHA-256.
const FLAG_BLAKE3: u8 = 8;
/// The data is checked with XXH3-128 instead of SHA-256.
const FLAG_XXH3: u8 = 16;
/// iperf3's cookie: 36 characters of `a-z2-7` naming the test at both ends.
pub(crate) const COOKIE_LEN: usize = 36;
const COOKIE_CHARS: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// A fresh cookie, as iperf3's client draws one for each test.
pub(crate) fn new_cookie() -> String {
    let mut raw = [0u8; COOKIE_LEN];
    let mut got = 0;
    while got < raw.len() {
        // SAFETY: writes at most the remaining length into our buffer.
        let n = unsafe { libc::getrandom(raw[got..].as_mut_ptr().cast(), raw.len() - got, 0) };
        if n <= 0 {
            // No entropy source: the clock still tells tests apart.
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            for (i, b) in raw.iter_mut().enumerate() {
                *b = (t >> ((i % 16) * 8)) as u8 ^ (std::process::id() as u8).wrapping_mul(i as u8);
            }
            break;
        }
        got += n as usize;
    }
    raw.iter().map(|b| char::from(COOKIE_CHARS[usize::from(b & 31)])).collect()
}

/// How much the sender moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Amount {
    /// Exactly this many bytes.
    Bytes(u64),
    /// For this many milliseconds.
    DurationMs(u64),
}

/// The hash both ends compute over the data and compare in the trailers:
/// SHA-256 (with SHA-NI where the CPU has it), or BLAKE3, several times
/// faster, or XXH3-128, faster again: a 128-bit checksum that catches an
/// accidental change of the stream (a lost, duplicated, reordered or
/// corrupted byte) but not one made on purpose to match (no cryptographic
/// strength). `send` asks for XXH3-128 unless told otherwise: with SHA-256
/// a test on one veth measured the hash, at a third of iperf3's rate. The
/// wire's default (no flag) stays SHA-256, what a client of an older
/// build asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum HashKind {
    #[default]
    Sha256,
    Blake3,
    Xxh3,
}

impl HashKind {
    /// Its name in the report.
    pub(crate) fn name(self) -> &'static str {
        match self {
            HashKind::Sha256 => "sha256",
            HashKind::Blake3 => "blake3",
            HashKind::Xxh3 => "xxh3",
        }
    }
}

/// What the client asks the server for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// The server sends and the client receives.
    pub(crate) reverse: bool,
    pub(crate) amount: Amount,
    /// A file is transferred: its base name (forward: what the server
    /// stores it as; reverse: empty, the server sends its `--file`).
    pub(crate) file: Option<String>,
    /// The test's cookie ([`new_cookie`]; empty: an older client sent none).
    pub(crate) cookie: String,
    /// How the data is checked.
    pub(crate) hash: HashKind,
}

impl Request {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let name = self.file.as_deref().unwrap_or("").as_bytes();
        let mut b = Vec::with_capacity(REQUEST_LEN + name.len());
        b.extend_from_slice(&REQUEST_MAGIC);
        b.push(VERSION);
        let cookie = self.cookie.len() == COOKIE_LEN;
        b.push(
            (u8::from(self.reverse) * FLAG_REVERSE)
                | (u8::from(self.file.is_some()) * FLAG_FILE)
                | (u8::from(cookie) * FLAG_COOKIE)
                | (u8::from(self.hash == HashKind::Blake3) * FLAG_BLAKE3)
                | (u8::from(self.hash == HashKind::Xxh3) * FLAG_XXH3),
        );
        b.extend_from_slice(&(name.len().min(MAX_NAME) as u16).to_be_bytes());
        let (mode, v) = match self.amount {
            Amount::Bytes(n) => (1u8, n),
            Amount::DurationMs(ms) => (2u8, ms),
        };
        b.push(mode);
        b.extend_from_slice(&[0; 7]);
        b.extend_from_slice(&v.to_be_bytes());
        b.extend_from_slice(&name[..name.len().min(MAX_NAME)]);
        if cookie {
            b.extend_from_slice(self.cookie.as_bytes());
        }
        b
    }

    /// Parses the fixed part; returns the request (without its name and
    /// cookie) and the length of the tail still to read ([`Request::set_tail`]).
    pub(crate) fn decode_fixed(b: &[u8; REQUEST_LEN]) -> Result<(Request, usize)> {
        if b[..4] != REQUEST_MAGIC {
            bail!("not an mptun client: it sent {:?}", String::from_utf8_lossy(&b[..4]));
        }
        if b[4] != VERSION {
            bail!("client speaks protocol version {}, this server {VERSION}", b[4]);
        }
        let flags = b[5];
        if flags & !(FLAG_REVERSE | FLAG_FILE | FLAG_COOKIE | FLAG_BLAKE3 | FLAG_XXH3) != 0 {
            bail!("unknown request flags {flags:#04x}");
        }
        let name_len = usize::from(u16::from_be_bytes([b[6], b[7]]));
        if name_len > MAX_NAME {
            bail!("file name of {name_len} bytes (at most {MAX_NAME})");
        }
        if b[9..16].iter().any(|&x| x != 0) {
            bail!("reserved request bytes are not zero");
        }
        let v = u64::from_be_bytes(b[16..24].try_into().expect("8 bytes"));
        let amount = match b[8] {
            1 if v == 0 || v > MAX_BYTES => bail!("requested byte count {v} out of range 1..={MAX_BYTES}"),
            1 => Amount::Bytes(v),
            2 if v == 0 || v > MAX_DURATION_MS => bail!("requested duration {v} ms out of range"),
            2 => Amount::DurationMs(v),
            m => bail!("unknown request mode {m}"),
        };
        let file = flags & FLAG_FILE != 0;
        if !file && name_len != 0 {
            bail!("a file name without the file flag");
        }
        let cookie = if flags & FLAG_COOKIE != 0 { " ".repeat(COOKIE_LEN) } else { String::new() };
        let tail = name_len + cookie.len();
        let hash = match (flags & FLAG_BLAKE3 != 0, flags & FLAG_XXH3 != 0) {
            (false, false) => HashKind::Sha256,
            (true, false) => HashKind::Blake3,
            (false, true) => HashKind::Xxh3,
            (true, true) => bail!("two hashes asked for at once"),
        };
        Ok((Request { reverse: flags & FLAG_REVERSE != 0, amount, file: file.then(String::new), cookie, hash }, tail))
    }

    /// Checks and stores the tail that followed the fixed part: the file
    /// name, then the cookie if the flags announced one.
    pub(crate) fn set_tail(&mut self, raw: &[u8]) -> Result<()> {
        let (name, cookie) = raw.split_at(raw.len().saturating_sub(self.cookie.len()));
        if !self.cookie.is_empty() {
            if cookie.len() != COOKIE_LEN || !cookie.iter().all(|c| COOKIE_CHARS.contains(c)) {
                bail!("malformed test cookie {:?}", String::from_utf8_lossy(cookie));
            }
            self.cookie = String::from_utf8_lossy(cookie).into_owned();
        }
        self.set_name(name)
    }

    /// Checks and stores the file name that followed the fixed part: a
    /// plain base name, so a client cannot write outside the server's
    /// output directory.
    pub(crate) fn set_name(&mut self, raw: &[u8]) -> Result<()> {
        if self.file.is_none() {
            if !raw.is_empty() {
                bail!("a file name without the file flag");
            }
            return Ok(());
        }
        let name = std::str::from_utf8(raw).map_err(|_| anyhow::anyhow!("file name is not UTF-8"))?;
        if self.reverse {
            if !name.is_empty() {
                bail!("a reverse file request carries no name");
            }
        } else if name.is_empty()
            || name == "."
            || name == ".."
            || name.contains(['/', '\\', '\0'])
            || name.chars().any(char::is_control)
        {
            bail!("unsafe file name {name:?}");
        }
        self.file = Some(name.to_owned());
        Ok(())
    }
}

/// The server's answer to a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Response {
    /// `None`: accepted; `Some(reason)`: refused.
    pub(crate) refused: Option<String>,
    /// Reverse tests: bytes the server will send (0: until the duration ends).
    pub(crate) amount: u64,
}

impl Response {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let msg = self.refused.as_deref().unwrap_or("").as_bytes();
        let msg = &msg[..msg.len().min(MAX_MESSAGE)];
        let mut b = Vec::with_capacity(RESPONSE_LEN + msg.len());
        b.extend_from_slice(&RESPONSE_MAGIC);
        b.push(u8::from(self.refused.is_some()));
        b.push(0);
        b.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        b.extend_from_slice(&self.amount.to_be_bytes());
        b.extend_from_slice(msg);
        b
    }

    /// Parses the fixed part; returns the response and the message length.
    pub(crate) fn decode_fixed(b: &[u8; RESPONSE_LEN]) -> Result<(Response, usize)> {
        if b[..4] != RESPONSE_MAGIC {
            bail!("not an mptun server: it answered {:?}", String::from_utf8_lossy(&b[..4]));
        }
        let len = usize::from(u16::from_be_bytes([b[6], b[7]]));
        if len > MAX_MESSAGE {
            bail!("server message of {len} bytes (at most {MAX_MESSAGE})");
        }
        let refused = match b[4] {
            0 => None,
            1 => Some(String::new()),
            s => bail!("unknown response status {s}"),
        };
        let amount = u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"));
        if amount > MAX_BYTES {
            bail!("server announces {amount} bytes (at most {MAX_BYTES})");
        }
        Ok((Response { refused, amount }, len))
    }
}

/// What one side says about its half of the transfer when it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Trailer {
    /// Data bytes sent (sender) or received (receiver).
    pub(crate) bytes: u64,
    /// Segments this side retransmitted (saturating at u32::MAX).
    pub(crate) retransmits: u32,
    /// This side's span of the data, microseconds: the sender's from its
    /// start to its trailer, the receiver's from the first data byte to
    /// the last.
    pub(crate) elapsed_us: u64,
    /// CPU time of the process within exactly that span, microseconds,
    /// so that the peer's utilisation is these over `elapsed_us`.
    pub(crate) cpu_user_us: u64,
    pub(crate) cpu_sys_us: u64,
    /// The data bytes' digest ([`HashKind`]: the request's).
    pub(crate) digest: [u8; 32],
}

impl Trailer {
    /// A side's trailer: `bytes` moved, `retransmits` (saturating), and
    /// the span they took with the CPU time in it.
    pub(crate) fn new(bytes: u64, retransmits: u64, span: CpuUse, digest: [u8; 32]) -> Trailer {
        Trailer {
            bytes,
            retransmits: retransmits.min(u64::from(u32::MAX)) as u32,
            elapsed_us: span.wall_us,
            cpu_user_us: span.user_us,
            cpu_sys_us: span.sys_us,
            digest,
        }
    }

    pub(crate) fn encode(&self) -> [u8; TRAILER_LEN] {
        let mut b = [0u8; TRAILER_LEN];
        b[..4].copy_from_slice(&TRAILER_MAGIC);
        b[4..8].copy_from_slice(&self.retransmits.to_be_bytes());
        b[8..16].copy_from_slice(&self.bytes.to_be_bytes());
        b[16..24].copy_from_slice(&self.elapsed_us.to_be_bytes());
        b[24..32].copy_from_slice(&self.cpu_user_us.to_be_bytes());
        b[32..40].copy_from_slice(&self.cpu_sys_us.to_be_bytes());
        b[40..72].copy_from_slice(&self.digest);
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Trailer> {
        let Ok(b) = <&[u8; TRAILER_LEN]>::try_from(b) else {
            bail!("the peer's stream ended {} bytes short of its trailer", TRAILER_LEN.saturating_sub(b.len()));
        };
        if b[..4] != TRAILER_MAGIC {
            bail!("the peer's stream does not end in a trailer (bad magic {:02x?})", &b[..4]);
        }
        let u = |r: std::ops::Range<usize>| u64::from_be_bytes(b[r].try_into().expect("8 bytes"));
        let t = Trailer {
            bytes: u(8..16),
            retransmits: u32::from_be_bytes(b[4..8].try_into().expect("4 bytes")),
            elapsed_us: u(16..24),
            cpu_user_us: u(24..32),
            cpu_sys_us: u(32..40),
            digest: b[40..72].try_into().expect("32 bytes"),
        };
        if t.bytes > MAX_BYTES {
            bail!("peer reports {} bytes (at most {MAX_BYTES})", t.bytes);
        }
        Ok(t)
    }
}

/// Frames the sender's summary `json` into its fixed region, or `None` if
/// it does not fit.
pub(crate) fn encode_sender_summary(json: &[u8]) -> Option<[u8; SENDER_SUMMARY_LEN]> {
    if json.len() > SENDER_SUMMARY_LEN - 4 {
        return None;
    }
    let mut b = [0u8; SENDER_SUMMARY_LEN];
    b[..4].copy_from_slice(&(json.len() as u32).to_be_bytes());
    b[4..4 + json.len()].copy_from_slice(json);
    Some(b)
}

/// The JSON of a sender's summary region (the bytes after its trailer).
pub(crate) fn decode_sender_summary(b: &[u8]) -> Result<&[u8]> {
    let Ok(b) = <&[u8; SENDER_SUMMARY_LEN]>::try_from(b) else {
        bail!("the sender's summary is {} bytes, not {SENDER_SUMMARY_LEN}", b.len());
    };
    let len = u32::from_be_bytes(b[..4].try_into().expect("4 bytes")) as usize;
    if len > SENDER_SUMMARY_LEN - 4 {
        bail!("the sender's summary claims {len} bytes (at most {})", SENDER_SUMMARY_LEN - 4);
    }
    if b[4 + len..].iter().any(|&x| x != 0) {
        bail!("the sender's summary is not zero-padded");
    }
    Ok(&b[4..4 + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trips_and_rejects_nonsense() {
        for r in [
            Request {
                reverse: false,
                amount: Amount::Bytes(64 << 20),
                file: None,
                cookie: String::new(),
                hash: HashKind::Sha256,
            },
            Request {
                reverse: true,
                amount: Amount::DurationMs(10_000),
                file: None,
                cookie: new_cookie(),
                hash: HashKind::Blake3,
            },
            Request {
                reverse: false,
                amount: Amount::Bytes(5),
                file: Some("a.bin".into()),
                cookie: new_cookie(),
                hash: HashKind::Sha256,
            },
            Request {
                reverse: false,
                amount: Amount::Bytes(5),
                file: None,
                cookie: new_cookie(),
                hash: HashKind::Xxh3,
            },
        ] {
            let b = r.encode();
            let (mut d, n) = Request::decode_fixed(b[..REQUEST_LEN].try_into().unwrap()).unwrap();
            assert_eq!(b.len(), REQUEST_LEN + n);
            d.set_tail(&b[REQUEST_LEN..]).unwrap();
            assert_eq!(d, r);
        }
        // Both hash flags at once is no request.
        let mut b = Request {
            reverse: false,
            amount: Amount::Bytes(1),
            file: None,
            cookie: String::new(),
            hash: HashKind::Blake3,
        }
        .encode();
        b[REQUEST_MAGIC.len() + 1] |= FLAG_XXH3;
        assert!(Request::decode_fixed(b[..REQUEST_LEN].try_into().unwrap()).is_err());
        let c = new_cookie();
        assert!(c.len() == COOKIE_LEN && c.bytes().all(|x| COOKIE_CHARS.contains(&x)), "{c}");
        assert_ne!(c, new_cookie());
        let mut r = Request { reverse: false, amount: Amount::Bytes(1), file: None, cookie: c, hash: HashKind::Sha256 };
        let mut b = r.encode();
        b[REQUEST_LEN] = b'!';
        r.cookie = " ".repeat(COOKIE_LEN);
        assert!(r.set_tail(&b[REQUEST_LEN..]).is_err(), "a cookie outside iperf3's alphabet");
        let good = Request {
            reverse: false,
            amount: Amount::Bytes(1),
            file: None,
            cookie: String::new(),
            hash: HashKind::Sha256,
        }
        .encode();
        let fixed = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            f(&mut b);
            Request::decode_fixed(b[..REQUEST_LEN].try_into().unwrap())
        };
        assert!(fixed(&|b| b[0] = b'X').is_err());
        assert!(fixed(&|b| b[4] = 9).is_err());
        assert!(fixed(&|b| b[5] = 0x80).is_err());
        assert!(fixed(&|b| b[8] = 7).is_err());
        assert!(fixed(&|b| b[12] = 1).is_err());
        assert!(fixed(&|b| b[16..24].copy_from_slice(&0u64.to_be_bytes())).is_err());
        assert!(fixed(&|b| b[16..24].copy_from_slice(&u64::MAX.to_be_bytes())).is_err());
        assert!(fixed(&|b| b[6..8].copy_from_slice(&3u16.to_be_bytes())).is_err(), "name without file flag");
        let mut r = Request {
            reverse: false,
            amount: Amount::Bytes(1),
            file: Some(String::new()),
            cookie: String::new(),
            hash: HashKind::Sha256,
        };
        for bad in [&b"../etc/passwd"[..], b"..", b"a/b", b"", b"\xff", b"a\nb"] {
            assert!(r.set_name(bad).is_err(), "{bad:?}");
        }
        assert!(r.set_name(b"ok.bin").is_ok());
    }

    #[test]
    fn response_and_trailer_round_trip() {
        for r in [Response { refused: None, amount: 77 }, Response { refused: Some("no file".into()), amount: 0 }] {
            let b = r.encode();
            let (mut d, n) = Response::decode_fixed(b[..RESPONSE_LEN].try_into().unwrap()).unwrap();
            if d.refused.is_some() {
                d.refused = Some(String::from_utf8(b[RESPONSE_LEN..RESPONSE_LEN + n].to_vec()).unwrap());
            }
            assert_eq!(d, r);
        }
        let t = Trailer { bytes: 9, retransmits: 4, elapsed_us: 8, cpu_user_us: 7, cpu_sys_us: 6, digest: [5; 32] };
        assert_eq!(Trailer::decode(&t.encode()).unwrap(), t);
        assert!(Trailer::decode(&t.encode()[1..]).is_err());
        let mut bad = t.encode();
        bad[0] = 0;
        assert!(Trailer::decode(&bad).is_err());
    }

    #[test]
    fn sender_summary_is_framed_and_checked() {
        let r = encode_sender_summary(b"{\"x\":1}").unwrap();
        assert_eq!(decode_sender_summary(&r).unwrap(), b"{\"x\":1}");
        assert!(decode_sender_summary(&r[1..]).is_err());
        assert!(encode_sender_summary(&[b' '; SENDER_SUMMARY_LEN - 4]).is_some());
        assert!(encode_sender_summary(&[b' '; SENDER_SUMMARY_LEN - 3]).is_none());
        let mut long = r;
        long[..4].copy_from_slice(&(SENDER_SUMMARY_LEN as u32).to_be_bytes());
        assert!(decode_sender_summary(&long).is_err());
        let mut dirty = r;
        dirty[SENDER_SUMMARY_LEN - 1] = 1;
        assert!(decode_sender_summary(&dirty).is_err());
    }
}
