//! MPTCP options (RFC 8684 section 3, TCP option kind 30), with the exact
//! lengths the Linux kernel emits (`net/mptcp/options.c`).

use crate::Error;
use arrayvec::ArrayVec;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// TCP option kind of every MPTCP option.
pub const KIND: u8 = 30;

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

/// DSS flag bits (the fourth byte of a DSS option, RFC 8684 section 3.3).
pub mod dss_flags {
    /// A: a data ACK is present.
    pub const DATA_ACK: u8 = 0x01;
    /// a: the data ACK is 8 octets.
    pub const DATA_ACK64: u8 = 0x02;
    /// M: a mapping (DSN, SSN, data-level length) is present.
    pub const MAPPING: u8 = 0x04;
    /// m: the DSN is 8 octets.
    pub const DSN64: u8 = 0x08;
    /// F: DATA_FIN.
    pub const DATA_FIN: u8 = 0x10;
}

/// MP_TCPRST flag bits (low nibble of the third byte, RFC 8684 section 3.6).
pub mod rst_flags {
    /// T: the error is transient, the peer may retry the subflow.
    pub const TRANSIENT: u8 = 0x01;
}

/// Wire lengths Linux uses (`TCPOLEN_MPTCP_*` in `net/mptcp/protocol.h`).
pub mod len {
    pub const MPC_SYN: usize = 4;
    pub const MPC_SYNACK: usize = 12;
    pub const MPC_ACK: usize = 20;
    pub const MPC_ACK_DATA: usize = 22;
    pub const MPC_ACK_DATA_CSUM: usize = 24;
    pub const MPJ_SYN: usize = 12;
    pub const MPJ_SYNACK: usize = 16;
    pub const MPJ_ACK: usize = 24;
    pub const DSS_BASE: usize = 4;
    pub const ADD_ADDR_BASE: usize = 8;
    pub const ADD_ADDR6_BASE: usize = 20;
    pub const PORT: usize = 2;
    pub const ADD_ADDR_HMAC: usize = 8;
    pub const RM_ADDR_BASE: usize = 3;
    pub const PRIO: usize = 3;
    pub const FAIL: usize = 12;
    pub const FASTCLOSE: usize = 12;
    pub const TCPRST: usize = 4;
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

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

impl DssMapping {
    /// Wire bytes of the mapping: DSN, SSN, data-level length, optional checksum.
    const fn wire_len(&self) -> usize {
        (if self.dsn64 { 8 } else { 4 }) + 4 + 2 + if self.checksum.is_some() { 2 } else { 0 }
    }
}

impl MptcpOption {
    /// Decodes one MPTCP option from its complete wire bytes, kind (30) and
    /// length byte included: `opt.len()` must equal the length byte. Taking
    /// the whole option (rather than the body) lets the length checks below be
    /// written against the RFC's numbers, which all count kind and length.
    ///
    /// The form of each subtype is told apart by its length (as Linux does in
    /// `mptcp_parse_option`), and flags that contradict the length are refused.
    /// Reserved bits are ignored on input and written as zero, so re-emitting
    /// is byte-exact for every option Linux sends.
    pub fn parse(opt: &[u8]) -> Result<MptcpOption, Error> {
        if opt.len() < 2 {
            return Err(Error::Truncated);
        }
        if opt[0] != KIND {
            return Err(Error::BadMptcp);
        }
        let l = opt[1] as usize;
        if l > opt.len() {
            return Err(Error::Truncated);
        }
        if l != opt.len() || l < 3 {
            return Err(Error::BadLength);
        }
        let subtype = opt[2] >> 4;
        let nibble = opt[2] & 0x0f;
        match subtype {
            subtype::MP_CAPABLE => {
                if l < 4 {
                    return Err(Error::BadLength);
                }
                let (sender_key, receiver_key, data_len, checksum) = match l {
                    len::MPC_SYN => (None, None, None, None),
                    len::MPC_SYNACK => (Some(be64(opt, 4)), None, None, None),
                    len::MPC_ACK => (Some(be64(opt, 4)), Some(be64(opt, 12)), None, None),
                    len::MPC_ACK_DATA => (Some(be64(opt, 4)), Some(be64(opt, 12)), Some(be16(opt, 20)), None),
                    len::MPC_ACK_DATA_CSUM => {
                        (Some(be64(opt, 4)), Some(be64(opt, 12)), Some(be16(opt, 20)), Some(be16(opt, 22)))
                    }
                    _ => return Err(Error::BadLength),
                };
                Ok(MptcpOption::MpCapable {
                    version: nibble,
                    flags: opt[3],
                    sender_key,
                    receiver_key,
                    data_len,
                    checksum,
                })
            }
            subtype::MP_JOIN => {
                let backup = nibble & 0x01 != 0;
                match l {
                    len::MPJ_SYN => {
                        Ok(MptcpOption::MpJoinSyn { backup, addr_id: opt[3], token: be32(opt, 4), nonce: be32(opt, 8) })
                    }
                    len::MPJ_SYNACK => Ok(MptcpOption::MpJoinSynAck {
                        backup,
                        addr_id: opt[3],
                        hmac: be64(opt, 4),
                        nonce: be32(opt, 12),
                    }),
                    len::MPJ_ACK => {
                        let mut hmac = [0u8; 20];
                        hmac.copy_from_slice(&opt[4..24]);
                        Ok(MptcpOption::MpJoinAck { hmac })
                    }
                    _ => Err(Error::BadLength),
                }
            }
            subtype::DSS => Self::parse_dss(opt),
            subtype::ADD_ADDR => Self::parse_add_addr(opt, nibble),
            subtype::RM_ADDR => {
                let n = l - len::RM_ADDR_BASE;
                let mut ids = ArrayVec::new();
                if n == 0 || ids.try_extend_from_slice(&opt[3..l]).is_err() {
                    return Err(Error::BadLength);
                }
                Ok(MptcpOption::RmAddr { ids })
            }
            subtype::MP_PRIO => match l {
                len::PRIO => Ok(MptcpOption::MpPrio { backup: nibble & 0x01 != 0 }),
                _ => Err(Error::BadLength),
            },
            subtype::MP_FAIL => match l {
                len::FAIL => Ok(MptcpOption::MpFail { dsn: be64(opt, 4) }),
                _ => Err(Error::BadLength),
            },
            subtype::MP_FASTCLOSE => match l {
                len::FASTCLOSE => Ok(MptcpOption::MpFastclose { receiver_key: be64(opt, 4) }),
                _ => Err(Error::BadLength),
            },
            subtype::MP_TCPRST => match l {
                len::TCPRST => Ok(MptcpOption::MpTcpRst { flags: nibble, reason: opt[3] }),
                _ => Err(Error::BadLength),
            },
            _ => Err(Error::BadMptcp),
        }
    }

    fn parse_dss(opt: &[u8]) -> Result<MptcpOption, Error> {
        let l = opt.len();
        if l < len::DSS_BASE {
            return Err(Error::BadLength);
        }
        let flags = opt[3];
        let has_ack = flags & dss_flags::DATA_ACK != 0;
        let ack64 = flags & dss_flags::DATA_ACK64 != 0;
        let has_map = flags & dss_flags::MAPPING != 0;
        let dsn64 = flags & dss_flags::DSN64 != 0;
        let data_fin = flags & dss_flags::DATA_FIN != 0;
        // `a` without `A` and `m` without `M` carry no data; Linux ignores
        // them and so do we (they are not re-emitted).
        let ack_len = if !has_ack {
            0
        } else if ack64 {
            8
        } else {
            4
        };
        let map_len = if !has_map {
            0
        } else if dsn64 {
            14
        } else {
            10
        };
        let expected = len::DSS_BASE + ack_len + map_len;
        let csum = if l == expected {
            false
        } else if has_map && l == expected + 2 {
            true
        } else {
            return Err(Error::BadLength);
        };
        let mut at = len::DSS_BASE;
        let data_ack = if has_ack {
            let ack = if ack64 { be64(opt, at) } else { u64::from(be32(opt, at)) };
            at += ack_len;
            Some(DataAck { ack, ack64 })
        } else {
            None
        };
        let mapping = if has_map {
            let dsn = if dsn64 { be64(opt, at) } else { u64::from(be32(opt, at)) };
            at += if dsn64 { 8 } else { 4 };
            let ssn = be32(opt, at);
            let len = be16(opt, at + 4);
            let checksum = if csum { Some(be16(opt, at + 6)) } else { None };
            Some(DssMapping { dsn, dsn64, ssn, len, checksum })
        } else {
            None
        };
        Ok(MptcpOption::Dss { data_ack, mapping, data_fin })
    }

    fn parse_add_addr(opt: &[u8], nibble: u8) -> Result<MptcpOption, Error> {
        let l = opt.len();
        let echo = nibble & 0x01 != 0;
        // (IPv6?, port?, hmac?) from the length alone; the table is disjoint.
        let (v6, has_port, has_hmac) = match l {
            8 => (false, false, false),
            10 => (false, true, false),
            16 => (false, false, true),
            18 => (false, true, true),
            20 => (true, false, false),
            22 => (true, true, false),
            28 => (true, false, true),
            30 => (true, true, true),
            _ => return Err(Error::BadLength),
        };
        // RFC 8684 3.4.1: an announcement carries the HMAC, an echo does not.
        if echo == has_hmac {
            return Err(Error::BadMptcp);
        }
        let addr_id = opt[3];
        let mut at = 4;
        let addr = if v6 {
            let mut a = [0u8; 16];
            a.copy_from_slice(&opt[4..20]);
            at += 16;
            IpAddr::V6(Ipv6Addr::from(a))
        } else {
            at += 4;
            IpAddr::V4(Ipv4Addr::new(opt[4], opt[5], opt[6], opt[7]))
        };
        let port = if has_port {
            let p = be16(opt, at);
            at += 2;
            Some(p)
        } else {
            None
        };
        let hmac = if has_hmac { Some(be64(opt, at)) } else { None };
        Ok(MptcpOption::AddAddr { echo, addr_id, addr, port, hmac })
    }

    /// The subtype number on the wire.
    pub const fn subtype(&self) -> u8 {
        match self {
            MptcpOption::MpCapable { .. } => subtype::MP_CAPABLE,
            MptcpOption::MpJoinSyn { .. } | MptcpOption::MpJoinSynAck { .. } | MptcpOption::MpJoinAck { .. } => {
                subtype::MP_JOIN
            }
            MptcpOption::Dss { .. } => subtype::DSS,
            MptcpOption::AddAddr { .. } => subtype::ADD_ADDR,
            MptcpOption::RmAddr { .. } => subtype::RM_ADDR,
            MptcpOption::MpPrio { .. } => subtype::MP_PRIO,
            MptcpOption::MpFail { .. } => subtype::MP_FAIL,
            MptcpOption::MpFastclose { .. } => subtype::MP_FASTCLOSE,
            MptcpOption::MpTcpRst { .. } => subtype::MP_TCPRST,
        }
    }

    /// Wire length, kind and length bytes included (the value of the length
    /// byte). The option-space planner needs it before emitting. For a
    /// combination `emit` refuses (e.g. MP_CAPABLE with a receiver key but no
    /// sender key) this is the length of the fields present.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        match self {
            MptcpOption::MpCapable { sender_key, receiver_key, data_len, checksum, .. } => {
                4 + 8 * (sender_key.is_some() as usize)
                    + 8 * (receiver_key.is_some() as usize)
                    + 2 * (data_len.is_some() as usize)
                    + 2 * (checksum.is_some() as usize)
            }
            MptcpOption::MpJoinSyn { .. } => len::MPJ_SYN,
            MptcpOption::MpJoinSynAck { .. } => len::MPJ_SYNACK,
            MptcpOption::MpJoinAck { .. } => len::MPJ_ACK,
            MptcpOption::Dss { data_ack, mapping, .. } => {
                len::DSS_BASE
                    + data_ack.map_or(0, |a| if a.ack64 { 8 } else { 4 })
                    + mapping.as_ref().map_or(0, DssMapping::wire_len)
            }
            MptcpOption::AddAddr { addr, port, hmac, .. } => {
                (if addr.is_ipv6() { len::ADD_ADDR6_BASE } else { len::ADD_ADDR_BASE })
                    + if port.is_some() { len::PORT } else { 0 }
                    + if hmac.is_some() { len::ADD_ADDR_HMAC } else { 0 }
            }
            MptcpOption::RmAddr { ids } => len::RM_ADDR_BASE + ids.len(),
            MptcpOption::MpPrio { .. } => len::PRIO,
            MptcpOption::MpFail { .. } => len::FAIL,
            MptcpOption::MpFastclose { .. } => len::FASTCLOSE,
            MptcpOption::MpTcpRst { .. } => len::TCPRST,
        }
    }

    /// How many NOPs Linux writes after this option so the next one starts on
    /// a 32-bit boundary (`mptcp_write_options` works in whole words: a DSS
    /// mapping without checksum ends `len, NOP, NOP`, MP_PRIO ends with one NOP,
    /// RM_ADDR fills its last word with NOPs).
    pub fn linux_padding(&self) -> usize {
        (4 - self.len() % 4) % 4
    }

    /// Writes the option (kind and length included) at the start of `out` and
    /// returns its length. Refuses, with [`Error::BadMptcp`], values that have
    /// no wire form: MP_CAPABLE fields present out of order, a version or flag
    /// nibble above 15, an ADD_ADDR whose echo flag contradicts its HMAC, an
    /// empty RM_ADDR.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, Error> {
        let l = self.len();
        if out.len() < l {
            return Err(Error::NoSpace);
        }
        let out = &mut out[..l];
        out[0] = KIND;
        out[1] = l as u8;
        let head = |nibble: u8| (self.subtype() << 4) | nibble;
        match self {
            MptcpOption::MpCapable { version, flags, sender_key, receiver_key, data_len, checksum } => {
                if *version > 0x0f {
                    return Err(Error::BadMptcp);
                }
                // Fields appear in wire order; a later one needs all earlier ones.
                let ok = matches!(
                    (sender_key, receiver_key, data_len, checksum),
                    (None, None, None, None)
                        | (Some(_), None, None, None)
                        | (Some(_), Some(_), None, None)
                        | (Some(_), Some(_), Some(_), _)
                );
                if !ok {
                    return Err(Error::BadMptcp);
                }
                out[2] = head(*version);
                out[3] = *flags;
                if let Some(k) = sender_key {
                    out[4..12].copy_from_slice(&k.to_be_bytes());
                }
                if let Some(k) = receiver_key {
                    out[12..20].copy_from_slice(&k.to_be_bytes());
                }
                if let Some(d) = data_len {
                    out[20..22].copy_from_slice(&d.to_be_bytes());
                }
                if let Some(c) = checksum {
                    out[22..24].copy_from_slice(&c.to_be_bytes());
                }
            }
            MptcpOption::MpJoinSyn { backup, addr_id, token, nonce } => {
                out[2] = head(*backup as u8);
                out[3] = *addr_id;
                out[4..8].copy_from_slice(&token.to_be_bytes());
                out[8..12].copy_from_slice(&nonce.to_be_bytes());
            }
            MptcpOption::MpJoinSynAck { backup, addr_id, hmac, nonce } => {
                out[2] = head(*backup as u8);
                out[3] = *addr_id;
                out[4..12].copy_from_slice(&hmac.to_be_bytes());
                out[12..16].copy_from_slice(&nonce.to_be_bytes());
            }
            MptcpOption::MpJoinAck { hmac } => {
                out[2] = head(0);
                out[3] = 0; // reserved
                out[4..24].copy_from_slice(hmac);
            }
            MptcpOption::Dss { data_ack, mapping, data_fin } => {
                let mut flags = 0u8;
                out[2] = head(0);
                let mut at = len::DSS_BASE;
                if let Some(a) = data_ack {
                    flags |= dss_flags::DATA_ACK;
                    if a.ack64 {
                        flags |= dss_flags::DATA_ACK64;
                        out[at..at + 8].copy_from_slice(&a.ack.to_be_bytes());
                        at += 8;
                    } else {
                        out[at..at + 4].copy_from_slice(&(a.ack as u32).to_be_bytes());
                        at += 4;
                    }
                }
                if let Some(m) = mapping {
                    flags |= dss_flags::MAPPING;
                    if m.dsn64 {
                        flags |= dss_flags::DSN64;
                        out[at..at + 8].copy_from_slice(&m.dsn.to_be_bytes());
                        at += 8;
                    } else {
                        out[at..at + 4].copy_from_slice(&(m.dsn as u32).to_be_bytes());
                        at += 4;
                    }
                    out[at..at + 4].copy_from_slice(&m.ssn.to_be_bytes());
                    out[at + 4..at + 6].copy_from_slice(&m.len.to_be_bytes());
                    if let Some(c) = m.checksum {
                        out[at + 6..at + 8].copy_from_slice(&c.to_be_bytes());
                    }
                }
                if *data_fin {
                    flags |= dss_flags::DATA_FIN;
                }
                out[3] = flags;
            }
            MptcpOption::AddAddr { echo, addr_id, addr, port, hmac } => {
                if *echo == hmac.is_some() {
                    return Err(Error::BadMptcp);
                }
                out[2] = head(*echo as u8);
                out[3] = *addr_id;
                let mut at = 4;
                match addr {
                    IpAddr::V4(a) => {
                        out[4..8].copy_from_slice(&a.octets());
                        at += 4;
                    }
                    IpAddr::V6(a) => {
                        out[4..20].copy_from_slice(&a.octets());
                        at += 16;
                    }
                }
                if let Some(p) = port {
                    out[at..at + 2].copy_from_slice(&p.to_be_bytes());
                    at += 2;
                }
                if let Some(h) = hmac {
                    out[at..at + 8].copy_from_slice(&h.to_be_bytes());
                }
            }
            MptcpOption::RmAddr { ids } => {
                if ids.is_empty() {
                    return Err(Error::BadMptcp);
                }
                out[2] = head(0);
                out[3..].copy_from_slice(ids);
            }
            MptcpOption::MpPrio { backup } => {
                out[2] = head(*backup as u8);
            }
            MptcpOption::MpFail { dsn } => {
                out[2] = head(0);
                out[3] = 0;
                out[4..12].copy_from_slice(&dsn.to_be_bytes());
            }
            MptcpOption::MpFastclose { receiver_key } => {
                out[2] = head(0);
                out[3] = 0;
                out[4..12].copy_from_slice(&receiver_key.to_be_bytes());
            }
            MptcpOption::MpTcpRst { flags, reason } => {
                if *flags > 0x0f {
                    return Err(Error::BadMptcp);
                }
                out[2] = head(*flags);
                out[3] = *reason;
            }
        }
        Ok(l)
    }
}
