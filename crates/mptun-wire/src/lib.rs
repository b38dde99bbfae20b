//! Wire codec for mptun: IP (via etherparse), TCP header and options, every
//! MPTCP option subtype of RFC 8684, checksums, and the MPTCP crypto
//! (token, IDSN, HMACs) that is defined over wire bytes.
//!
//! Input is hostile: every parser returns a typed [`Error`] for truncated,
//! over-long or inconsistent input and never panics. Emitters are byte-exact:
//! `emit(parse(bytes)) == bytes` for everything Linux sends.

#![forbid(unsafe_code)]

pub mod error;
pub mod mptcp;
pub mod tcp;

pub use error::Error;
pub use mptcp::MptcpOption;
pub use tcp::{SackBlocks, TcpFlags, TcpHeader, TcpOption, TcpOptions};
