//! Wire codec for mptun: IPv4/IPv6 framing of TCP, the TCP header and
//! options, every MPTCP option subtype of RFC 8684, checksums, and the MPTCP
//! crypto (token, IDSN, HMACs) that is defined over wire bytes.
//!
//! Input is hostile: every parser returns a typed [`Error`] for truncated,
//! over-long or inconsistent input and never panics. Emitters are byte-exact:
//! `emit(parse(bytes)) == bytes` for everything Linux sends, which the tests
//! check against a real kernel capture. Nothing here allocates.

#![forbid(unsafe_code)]

pub mod checksum;
pub mod crypto;
pub mod error;
pub mod ip;
pub mod mptcp;
pub mod tcp;

pub use error::Error;
pub use ip::{emit_tcp_packet, parse_tcp_packet, parse_tcp_packet_unverified, tcp_packet_len, TcpPacket};
pub use mptcp::{DataAck, DssMapping, MptcpOption};
pub use tcp::{OptionSummary, SackBlocks, TcpFlags, TcpHeader, TcpOption, TcpOptions};
