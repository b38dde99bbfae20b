//! Wire codec for mptun: IPv4/IPv6 framing of TCP, the TCP header and
//! options, every MPTCP option subtype of RFC 8684, checksums, and the MPTCP
//! crypto (token, IDSN, HMACs) that is defined over wire bytes.
//!
//! Input is hostile: every parser returns a typed [`Error`] for truncated,
//! over-long or inconsistent input and never panics. Emitters are byte-exact:
//! `emit(parse(bytes)) == bytes` for everything Linux sends, which the tests
//! check against a real kernel capture. Nothing here allocates.
//!
//! Building and reading back a segment with a DSS data ACK, laid out as Linux
//! lays it out (`01 01 08 0a` timestamps, then the DSS):
//!
//! ```
//! use mptun_wire::{emit_tcp_packet, parse_tcp_packet, DataAck, MptcpOption, TcpFlags, TcpHeader, TcpOptions};
//!
//! let dss = MptcpOption::Dss { data_ack: Some(DataAck { ack: 7, ack64: true }), mapping: None, data_fin: false };
//! let mut h = TcpHeader::new(40000, 5000, 1, 1, TcpFlags::ACK, 64);
//! h.options = TcpOptions::established(Some((100, 200)), &[], &[dss.clone()])?;
//! let (src, dst) = ("10.0.1.1".parse().unwrap(), "10.0.1.2".parse().unwrap());
//! let mut buf = [0u8; 1500];
//! let n = emit_tcp_packet(src, dst, 64, &h, b"data", &mut buf)?;
//! let p = parse_tcp_packet(&buf[..n])?;
//! assert_eq!(p.payload, b"data");
//! assert_eq!(p.tcp.options.summary().mptcp[0], dss);
//! # Ok::<(), mptun_wire::Error>(())
//! ```

#![forbid(unsafe_code)]

pub mod checksum;
pub mod crypto;
pub mod error;
pub mod gso;
pub mod icmp;
pub mod ip;
pub mod mptcp;
pub mod tcp;

pub use error::Error;
pub use ip::{
    emit_tcp_headers_offload, emit_tcp_packet, emit_tcp_packet_offload, parse_tcp_packet, parse_tcp_packet_unverified,
    tcp_packet_len, TcpPacket,
};
pub use mptcp::{DataAck, DssMapping, MptcpOption};
pub use tcp::{OptionSummary, SackBlocks, TcpFlags, TcpHeader, TcpOption, TcpOptions};
