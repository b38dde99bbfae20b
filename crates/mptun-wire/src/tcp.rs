//! TCP header and options (RFC 9293, RFC 7323, RFC 2018, RFC 8684 kind 30).
//!
//! Options are kept as their raw bytes ([`TcpOptions`], at most 40) and decoded
//! lazily into typed [`TcpOption`]s: re-emitting a received header is then
//! byte-exact by construction (order, NOP padding and all), and building an
//! outgoing header costs no allocation.

use crate::{mptcp::MptcpOption, Error};
use arrayvec::ArrayVec;

/// Option kind numbers (IANA "TCP Parameters").
pub mod kind {
    pub const EOL: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMP: u8 = 8;
    pub const MPTCP: u8 = 30;
}

/// TCP flags byte (CWR ECE URG ACK PSH RST SYN FIN) as on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    pub const FIN: TcpFlags = TcpFlags(0x01);
    pub const SYN: TcpFlags = TcpFlags(0x02);
    pub const RST: TcpFlags = TcpFlags(0x04);
    pub const PSH: TcpFlags = TcpFlags(0x08);
    pub const ACK: TcpFlags = TcpFlags(0x10);
    pub const URG: TcpFlags = TcpFlags(0x20);
    pub const ECE: TcpFlags = TcpFlags(0x40);
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// True if every flag of `other` is set in `self`.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
    pub const fn fin(self) -> bool {
        self.0 & 0x01 != 0
    }
    pub const fn syn(self) -> bool {
        self.0 & 0x02 != 0
    }
    pub const fn rst(self) -> bool {
        self.0 & 0x04 != 0
    }
    pub const fn psh(self) -> bool {
        self.0 & 0x08 != 0
    }
    pub const fn ack(self) -> bool {
        self.0 & 0x10 != 0
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, o: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | o.0)
    }
}

impl core::ops::BitOrAssign for TcpFlags {
    fn bitor_assign(&mut self, o: TcpFlags) {
        self.0 |= o.0;
    }
}

impl core::fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        const NAMES: [&str; 8] = ["F", "S", "R", "P", ".", "U", "E", "W"];
        for (i, n) in NAMES.iter().enumerate() {
            if self.0 & (1 << i) != 0 {
                f.write_str(n)?;
            }
        }
        Ok(())
    }
}

/// Up to four SACK blocks `(left, right)` in sequence space (RFC 2018).
pub type SackBlocks = ArrayVec<(u32, u32), 4>;

/// One decoded TCP option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TcpOption {
    Eol,
    Nop,
    Mss(u16),
    WindowScale(u8),
    SackPermitted,
    Sack(SackBlocks),
    Timestamp {
        tsval: u32,
        tsecr: u32,
    },
    Mptcp(MptcpOption),
    /// Any other kind, kept so it can be skipped (and re-emitted) faithfully.
    Unknown {
        kind: u8,
        data: ArrayVec<u8, 38>,
    },
}

/// The raw option bytes of a header (at most 40), decoded on demand.
///
/// Equality compares the bytes, so two option lists that decode alike but are
/// padded differently are different: that is what "byte-exact" means here.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TcpOptions {
    buf: [u8; 40],
    len: u8,
}

/// What the stack needs from one header's options, gathered in one pass.
///
/// MPTCP options are collected in order; Linux puts at most one MPTCP option
/// in a segment today, but a peer may legally send two (e.g. DSS + ADD_ADDR).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OptionSummary {
    pub mss: Option<u16>,
    pub window_scale: Option<u8>,
    pub sack_permitted: bool,
    pub timestamp: Option<(u32, u32)>,
    pub sack: SackBlocks,
    pub mptcp: ArrayVec<MptcpOption, 4>,
    /// Some option was malformed; the rest were still decoded where possible.
    pub malformed: bool,
}

/// A parsed TCP header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpHeader {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
    /// As received; `emit` writes it unchanged, the IP layer fills it in.
    pub checksum: u16,
    pub urgent: u16,
    pub options: TcpOptions,
}

/// Most option bytes a TCP header can carry (data offset 15 words).
pub const MAX_OPTIONS_LEN: usize = 40;

impl TcpOption {
    /// Wire length of the option, kind and length bytes included.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        match self {
            TcpOption::Eol | TcpOption::Nop => 1,
            TcpOption::Mss(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::Sack(b) => 2 + 8 * b.len(),
            TcpOption::Timestamp { .. } => 10,
            TcpOption::Mptcp(m) => m.len(),
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// The option kind byte.
    pub fn kind(&self) -> u8 {
        match self {
            TcpOption::Eol => kind::EOL,
            TcpOption::Nop => kind::NOP,
            TcpOption::Mss(_) => kind::MSS,
            TcpOption::WindowScale(_) => kind::WINDOW_SCALE,
            TcpOption::SackPermitted => kind::SACK_PERMITTED,
            TcpOption::Sack(_) => kind::SACK,
            TcpOption::Timestamp { .. } => kind::TIMESTAMP,
            TcpOption::Mptcp(_) => kind::MPTCP,
            TcpOption::Unknown { kind, .. } => *kind,
        }
    }

    /// Decodes the option at the start of `buf`, returning it and the bytes it
    /// occupies (1 for EOL and NOP, else its length byte).
    pub fn parse(buf: &[u8]) -> Result<(TcpOption, usize), Error> {
        Self::parse_framed(buf).map_err(|(e, _)| e)
    }

    /// As [`parse`](Self::parse), also telling which class an error is: a
    /// framing error (no length byte, a length below 2 or past the end) leaves
    /// no way to find the next option; a content error (an MSS of length 5, a
    /// malformed MPTCP option) is confined to one well-framed option, which can
    /// be skipped as Linux's `tcp_parse_options` does.
    pub(crate) fn parse_framed(buf: &[u8]) -> Result<(TcpOption, usize), (Error, Framing)> {
        let Some(&k) = buf.first() else {
            return Err((Error::Truncated, Framing::Lost));
        };
        match k {
            kind::EOL => return Ok((TcpOption::Eol, 1)),
            kind::NOP => return Ok((TcpOption::Nop, 1)),
            _ => {}
        }
        let Some(&l) = buf.get(1) else {
            return Err((Error::Truncated, Framing::Lost));
        };
        let l = l as usize;
        if l < 2 {
            return Err((Error::BadLength, Framing::Lost));
        }
        if l > buf.len() {
            return Err((Error::Truncated, Framing::Lost));
        }
        let o = &buf[..l];
        let bad = |e| Err((e, Framing::Kept(l)));
        let opt = match k {
            kind::MSS => {
                if l != 4 {
                    return bad(Error::BadLength);
                }
                TcpOption::Mss(u16::from_be_bytes([o[2], o[3]]))
            }
            kind::WINDOW_SCALE => {
                if l != 3 {
                    return bad(Error::BadLength);
                }
                TcpOption::WindowScale(o[2])
            }
            kind::SACK_PERMITTED => {
                if l != 2 {
                    return bad(Error::BadLength);
                }
                TcpOption::SackPermitted
            }
            kind::SACK => {
                if l < 10 || (l - 2) & 7 != 0 {
                    return bad(Error::BadLength);
                }
                let mut blocks = SackBlocks::new();
                for c in o[2..].chunks_exact(8) {
                    let left = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                    let right = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
                    // At most (40 - 2) / 8 = 4 blocks fit, the capacity.
                    if blocks.try_push((left, right)).is_err() {
                        return bad(Error::BadLength);
                    }
                }
                TcpOption::Sack(blocks)
            }
            kind::TIMESTAMP => {
                if l != 10 {
                    return bad(Error::BadLength);
                }
                TcpOption::Timestamp {
                    tsval: u32::from_be_bytes([o[2], o[3], o[4], o[5]]),
                    tsecr: u32::from_be_bytes([o[6], o[7], o[8], o[9]]),
                }
            }
            kind::MPTCP => match MptcpOption::parse(o) {
                Ok(m) => TcpOption::Mptcp(m),
                Err(e) => return bad(e),
            },
            _ => {
                let mut data = ArrayVec::new();
                if data.try_extend_from_slice(&o[2..]).is_err() {
                    return bad(Error::BadLength);
                }
                TcpOption::Unknown { kind: k, data }
            }
        };
        Ok((opt, l))
    }

    /// Writes the option at the start of `out`, returning its length.
    /// Refuses an empty SACK and an `Unknown` that claims kind EOL or NOP
    /// (neither has a length byte) with [`Error::BadLength`].
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, Error> {
        let l = self.len();
        if out.len() < l {
            return Err(Error::NoSpace);
        }
        if l >= 2 && !matches!(self, TcpOption::Mptcp(_)) {
            out[0] = self.kind();
            out[1] = l as u8;
        }
        match self {
            TcpOption::Eol => out[0] = kind::EOL,
            TcpOption::Nop => out[0] = kind::NOP,
            TcpOption::Mss(m) => out[2..4].copy_from_slice(&m.to_be_bytes()),
            TcpOption::WindowScale(w) => out[2] = *w,
            TcpOption::SackPermitted => {}
            TcpOption::Sack(blocks) => {
                if blocks.is_empty() {
                    return Err(Error::BadLength);
                }
                for (i, (left, right)) in blocks.iter().enumerate() {
                    out[2 + 8 * i..6 + 8 * i].copy_from_slice(&left.to_be_bytes());
                    out[6 + 8 * i..10 + 8 * i].copy_from_slice(&right.to_be_bytes());
                }
            }
            TcpOption::Timestamp { tsval, tsecr } => {
                out[2..6].copy_from_slice(&tsval.to_be_bytes());
                out[6..10].copy_from_slice(&tsecr.to_be_bytes());
            }
            TcpOption::Mptcp(m) => return m.emit(out),
            TcpOption::Unknown { kind: k, data } => {
                if *k == kind::EOL || *k == kind::NOP {
                    return Err(Error::BadLength);
                }
                out[2..l].copy_from_slice(data);
            }
        }
        Ok(l)
    }
}

impl From<MptcpOption> for TcpOption {
    fn from(m: MptcpOption) -> Self {
        TcpOption::Mptcp(m)
    }
}

/// Whether a failed option left the option list walkable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// The option's length byte is unusable: nothing after it can be found.
    Lost,
    /// The option was well framed (this many bytes) but its content was bad.
    Kept(usize),
}

/// Iterator over the options of a [`TcpOptions`]; see [`TcpOptions::iter`].
#[derive(Clone)]
pub struct OptionsIter<'a> {
    rest: &'a [u8],
}

impl Iterator for OptionsIter<'_> {
    type Item = Result<TcpOption, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match TcpOption::parse_framed(self.rest) {
            Ok((TcpOption::Eol, _)) => {
                self.rest = &[];
                Some(Ok(TcpOption::Eol))
            }
            Ok((opt, used)) => {
                self.rest = &self.rest[used..];
                Some(Ok(opt))
            }
            Err((e, Framing::Kept(used))) => {
                self.rest = &self.rest[used..];
                Some(Err(e))
            }
            Err((e, Framing::Lost)) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

impl Default for TcpOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for TcpOptions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut l = f.debug_list();
        for o in self.iter() {
            match o {
                Ok(o) => l.entry(&o),
                Err(e) => l.entry(&format_args!("<{e}>")),
            };
        }
        l.finish()
    }
}

impl TcpOptions {
    /// An empty option list.
    pub const fn new() -> Self {
        TcpOptions { buf: [0; MAX_OPTIONS_LEN], len: 0 }
    }

    /// Takes raw option bytes as received. Only the size is checked: content
    /// is decoded lazily, so a malformed option never costs the whole header.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        if bytes.len() > MAX_OPTIONS_LEN {
            return Err(Error::BadLength);
        }
        let mut o = Self::new();
        o.buf[..bytes.len()].copy_from_slice(bytes);
        o.len = bytes.len() as u8;
        Ok(o)
    }

    /// The option bytes exactly as they will go on the wire (before the
    /// header emitter pads them to a 32-bit multiple).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// Bytes used so far (not yet padded to a word).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when the header carries no options.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes still free in the 40-byte option space.
    pub fn remaining(&self) -> usize {
        MAX_OPTIONS_LEN - self.len()
    }

    /// Decodes the options in order. Stops after EOL and after an option
    /// whose length byte is unusable (truncated, < 2, past the end); an option
    /// that is well framed but has bad content (wrong MSS length, malformed
    /// MPTCP) yields its error and iteration continues with the next option,
    /// as Linux does, so one bad option cannot hide a valid DSS behind it.
    pub fn iter(&self) -> OptionsIter<'_> {
        OptionsIter { rest: self.as_bytes() }
    }

    /// Appends the option's bytes exactly, with no padding (see
    /// [`push_aligned`](Self::push_aligned) for Linux's layout). Fails with
    /// [`Error::NoSpace`] (leaving `self` unchanged) beyond 40 bytes.
    pub fn push(&mut self, opt: &TcpOption) -> Result<(), Error> {
        let at = self.len();
        let n = opt.emit(&mut self.buf[at..])?;
        self.len += n as u8;
        Ok(())
    }

    /// Appends one NOP.
    pub fn push_nop(&mut self) -> Result<(), Error> {
        self.push(&TcpOption::Nop)
    }

    /// Appends the option in the 32-bit-aligned form Linux writes
    /// (`tcp_options_write`, `mptcp_write_options`): NOPs *before* the
    /// classic options (`01 01 08 0a` timestamps, `01 01 05 len` SACK,
    /// `01 03 03 ws`, `01 01 04 02` lone SACK_PERM), NOPs *after* an MPTCP
    /// option whose length is not a word multiple (DSS mapping, MP_PRIO,
    /// RM_ADDR, ADD_ADDR with port). MSS and options already a word multiple go
    /// as they are. Assumes the list is word aligned so far, as it is when
    /// built only through this method. All or nothing: on [`Error::NoSpace`]
    /// nothing is appended.
    pub fn push_aligned(&mut self, opt: &TcpOption) -> Result<(), Error> {
        let (before, after) = match opt {
            TcpOption::Mptcp(m) => (0, m.linux_padding()),
            TcpOption::Eol | TcpOption::Nop => (0, 0),
            o => ((4 - o.len() % 4) % 4, 0),
        };
        if before + opt.len() + after > self.remaining() {
            return Err(Error::NoSpace);
        }
        let saved = self.len;
        for _ in 0..before {
            self.push_nop()?;
        }
        if let Err(e) = self.push(opt) {
            self.len = saved;
            return Err(e);
        }
        for _ in 0..after {
            self.push_nop()?;
        }
        Ok(())
    }

    /// Appends EOL (zero) bytes up to a multiple of 4, the header length unit.
    /// Cannot fail: 40 is itself a multiple of 4.
    pub fn pad_to_word(&mut self) {
        while self.len & 3 != 0 {
            self.buf[self.len as usize] = kind::EOL;
            self.len += 1;
        }
    }

    /// Gathers what the stack needs in one pass. Later duplicates win (as in
    /// Linux); MPTCP options beyond four are ignored (Linux processes at most
    /// one of each subtype); any error sets `malformed` but the well-framed
    /// options around it are still reported.
    pub fn summary(&self) -> OptionSummary {
        let mut s = OptionSummary::default();
        for o in self.iter() {
            match o {
                Ok(TcpOption::Mss(m)) => s.mss = Some(m),
                Ok(TcpOption::WindowScale(w)) => s.window_scale = Some(w),
                Ok(TcpOption::SackPermitted) => s.sack_permitted = true,
                Ok(TcpOption::Timestamp { tsval, tsecr }) => s.timestamp = Some((tsval, tsecr)),
                Ok(TcpOption::Sack(b)) => s.sack = b,
                Ok(TcpOption::Mptcp(m)) => {
                    let _ = s.mptcp.try_push(m);
                }
                Ok(TcpOption::Eol | TcpOption::Nop | TcpOption::Unknown { .. }) => {}
                Err(_) => s.malformed = true,
            }
        }
        s
    }

    /// The options of a SYN or SYN-ACK in exactly Linux's layout:
    /// `02 04 mss`, then timestamps with SACK_PERM folded into their padding
    /// (`04 02 08 0a ...`, or `01 01 08 0a ...` without SACK, or
    /// `01 01 04 02` for SACK alone), `01 03 03 ws`, then the MPTCP option
    /// (MP_CAPABLE or MP_JOIN) NOP-padded to a word.
    pub fn syn(
        mss: u16,
        wscale: Option<u8>,
        sack_perm: bool,
        ts: Option<(u32, u32)>,
        mptcp: Option<&MptcpOption>,
    ) -> Result<Self, Error> {
        let mut o = Self::new();
        o.push(&TcpOption::Mss(mss))?;
        match (ts, sack_perm) {
            (Some((tsval, tsecr)), true) => {
                o.push(&TcpOption::SackPermitted)?;
                o.push(&TcpOption::Timestamp { tsval, tsecr })?;
            }
            (Some((tsval, tsecr)), false) => o.push_aligned(&TcpOption::Timestamp { tsval, tsecr })?,
            (None, true) => o.push_aligned(&TcpOption::SackPermitted)?,
            (None, false) => {}
        }
        if let Some(ws) = wscale {
            o.push_aligned(&TcpOption::WindowScale(ws))?;
        }
        if let Some(m) = mptcp {
            o.push_aligned(&TcpOption::Mptcp(m.clone()))?;
        }
        Ok(o)
    }

    /// The options of a non-SYN segment in Linux's layout: `01 01 08 0a`
    /// timestamps, `01 01 05 len` SACK, then each MPTCP option in the given
    /// order, NOP-padded to a word (a DSS with a mapping ends `len 01 01`).
    ///
    /// As in `tcp_established_options`, MPTCP space is reserved before SACK:
    /// SACK blocks that no longer fit are dropped (the first ones, the most
    /// recent, are kept). MPTCP options that do not fit are an error.
    pub fn established(ts: Option<(u32, u32)>, sack: &[(u32, u32)], mptcp: &[MptcpOption]) -> Result<Self, Error> {
        let mut o = Self::new();
        if let Some((tsval, tsecr)) = ts {
            o.push_aligned(&TcpOption::Timestamp { tsval, tsecr })?;
        }
        let mptcp_space: usize = mptcp.iter().map(|m| m.len() + m.linux_padding()).sum();
        if mptcp_space > o.remaining() {
            return Err(Error::NoSpace);
        }
        let for_sack = o.remaining() - mptcp_space;
        if !sack.is_empty() && for_sack >= 12 {
            let n = sack.len().min((for_sack - 4) / 8).min(4);
            let blocks: SackBlocks = sack[..n].iter().copied().collect();
            o.push_aligned(&TcpOption::Sack(blocks))?;
        }
        for m in mptcp {
            o.push_aligned(&TcpOption::Mptcp(m.clone()))?;
        }
        Ok(o)
    }
}

impl TcpHeader {
    /// Fixed part of the header.
    pub const MIN_LEN: usize = 20;

    /// A header with no options and a zero checksum (filled in by the IP
    /// emitter), for building outgoing segments.
    pub fn new(src_port: u16, dst_port: u16, seq: u32, ack: u32, flags: TcpFlags, window: u16) -> Self {
        TcpHeader { src_port, dst_port, seq, ack, flags, window, checksum: 0, urgent: 0, options: TcpOptions::new() }
    }

    /// Parses the header at the start of `buf` (a whole segment, or at least
    /// its header) and returns it with its length in bytes (data offset × 4).
    /// Refuses a data offset below 5 ([`Error::BadHeader`]) or beyond `buf`
    /// ([`Error::Truncated`]). The option bytes are kept raw; their content is
    /// judged when decoded. The four reserved/AE bits are ignored and written
    /// back as zero (RFC 9293 3.1: must be ignored when not implemented).
    pub fn parse(buf: &[u8]) -> Result<(TcpHeader, usize), Error> {
        if buf.len() < Self::MIN_LEN {
            return Err(Error::Truncated);
        }
        let hlen = ((buf[12] >> 4) as usize) * 4;
        if hlen < Self::MIN_LEN {
            return Err(Error::BadHeader);
        }
        if hlen > buf.len() {
            return Err(Error::Truncated);
        }
        let be16 = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
        let be32 = |i: usize| u32::from_be_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        let h = TcpHeader {
            src_port: be16(0),
            dst_port: be16(2),
            seq: be32(4),
            ack: be32(8),
            flags: TcpFlags(buf[13]),
            window: be16(14),
            checksum: be16(16),
            urgent: be16(18),
            options: TcpOptions::from_bytes(&buf[Self::MIN_LEN..hlen])?,
        };
        Ok((h, hlen))
    }

    /// Header length on the wire: 20 plus the options rounded up to a word.
    pub fn header_len(&self) -> usize {
        Self::MIN_LEN + self.options.len().div_ceil(4) * 4
    }

    /// Writes the header (options padded with EOL bytes to a word, data
    /// offset set accordingly, `checksum` as stored) and returns its length.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, Error> {
        let hlen = self.header_len();
        if out.len() < hlen {
            return Err(Error::NoSpace);
        }
        out[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        out[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        out[4..8].copy_from_slice(&self.seq.to_be_bytes());
        out[8..12].copy_from_slice(&self.ack.to_be_bytes());
        out[12] = ((hlen / 4) as u8) << 4;
        out[13] = self.flags.0;
        out[14..16].copy_from_slice(&self.window.to_be_bytes());
        out[16..18].copy_from_slice(&self.checksum.to_be_bytes());
        out[18..20].copy_from_slice(&self.urgent.to_be_bytes());
        let ol = self.options.len();
        out[20..20 + ol].copy_from_slice(self.options.as_bytes());
        out[20 + ol..hlen].fill(kind::EOL);
        Ok(hlen)
    }
}
