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
    Timestamp { tsval: u32, tsecr: u32 },
    Mptcp(MptcpOption),
    /// Any other kind, kept so it can be skipped (and re-emitted) faithfully.
    Unknown { kind: u8, data: ArrayVec<u8, 38> },
}

/// The raw option bytes of a header (at most 40), decoded on demand.
#[derive(Clone, PartialEq, Eq)]
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
