//! MPTCP options (RFC 8684 section 3, TCP option kind 30), with the exact
//! lengths the Linux kernel emits (`net/mptcp/options.c`).

use arrayvec::ArrayVec;
use core::net::IpAddr;

/// MPTCP option subtypes.
pub mod subtype {
    pub const MP_CAPABLE: u8 = 0;
    pub const MP_JOIN: u8 = 1;
    pub const DSS: u8 = 2;
    pub const ADD_ADDR: u8 = 3;
    pub const RM_ADDR: u8 = 4;
    pub const MP_PRIO: u8 = 5;
    pub const MP_FAIL: u8 = 6;
    pub const MP_FASTCLOSE: u8 = 7;
    pub const MP_TCPRST: u8 = 8;
}

/// MP_CAPABLE flag bits (the byte after subtype/version).
pub mod cap_flags {
    /// A: checksum required.
    pub const CHECKSUM: u8 = 0x80;
    /// B: extensibility.
    pub const EXTENSIBILITY: u8 = 0x40;
    /// C: do not establish subflows to the source address.
    pub const NO_SRC_ADDR: u8 = 0x20;
    /// H: HMAC-SHA256.
    pub const HMAC_SHA256: u8 = 0x01;
}

/// A DSS mapping: `len` bytes starting at data sequence `dsn` sit at subflow
/// sequence `ssn` (relative to the subflow's ISN, as on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DssMapping {
    /// Data sequence number; only the low 32 bits are meaningful when `dsn64` is false.
    pub dsn: u64,
    pub dsn64: bool,
    /// Relative subflow sequence number.
    pub ssn: u32,
    /// Data-level length; 0 with DATA_FIN alone, or an infinite mapping.
    pub len: u16,
    /// DSS checksum, present when checksums were negotiated.
    pub checksum: Option<u16>,
}

/// A DSS data ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataAck {
    /// Only the low 32 bits are meaningful when `ack64` is false.
    pub ack: u64,
    pub ack64: bool,
}

/// One MPTCP option, typed. Every variant re-emits byte-exact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MptcpOption {
    /// MP_CAPABLE. Length tells the form: 4 (SYN, v1), 12 (SYN-ACK, `sender_key`),
    /// 20 (third ACK, both keys), 22 (first data, both keys + `data_len`),
    /// 24 (first data with `checksum`).
    MpCapable {
        version: u8,
        /// Raw flags byte (A B C D E F G H), see [`cap_flags`].
        flags: u8,
        sender_key: Option<u64>,
        receiver_key: Option<u64>,
        data_len: Option<u16>,
        checksum: Option<u16>,
    },
    /// MP_JOIN on a SYN (length 12).
    MpJoinSyn { backup: bool, addr_id: u8, token: u32, nonce: u32 },
    /// MP_JOIN on a SYN-ACK (length 16): truncated (64-bit) HMAC.
    MpJoinSynAck { backup: bool, addr_id: u8, hmac: u64, nonce: u32 },
    /// MP_JOIN on the third ACK (length 24): 160 bits of HMAC.
    MpJoinAck { hmac: [u8; 20] },
    /// DSS. Length follows from which parts are present.
    Dss { data_ack: Option<DataAck>, mapping: Option<DssMapping>, data_fin: bool },
    /// ADD_ADDR (v1). IPv4 or IPv6 follows from `addr`; `hmac` is absent on an echo.
    AddAddr { echo: bool, addr_id: u8, addr: IpAddr, port: Option<u16>, hmac: Option<u64> },
    /// RM_ADDR with one or more address ids.
    RmAddr { ids: ArrayVec<u8, 36> },
    /// MP_PRIO (v1, length 3).
    MpPrio { backup: bool },
    /// MP_FAIL with the DSN where the checksum failed.
    MpFail { dsn: u64 },
    /// MP_FASTCLOSE carrying the receiver's key.
    MpFastclose { receiver_key: u64 },
    /// MP_TCPRST: flags nibble (U V W T) and reason code.
    MpTcpRst { flags: u8, reason: u8 },
}
