//! Why a packet was refused. Each variant is counted by the stack
//! (as the kernel counts `TcpExtTCPHPAcks`-style drop reasons), so a malformed
//! packet costs a counter increment, never a panic.

use core::fmt;

/// A decoding failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// Fewer bytes than the header or option claims.
    Truncated,
    /// A length field that is impossible for its kind (e.g. MSS option of length 5).
    BadLength,
    /// A header field that is out of range (data offset < 5, IP version, ...).
    BadHeader,
    /// Checksum mismatch.
    BadChecksum,
    /// An MPTCP option whose subtype/flags/length combination RFC 8684 does not define.
    BadMptcp,
    /// Not enough room in the output buffer (emit side), or the 40-byte TCP
    /// option space is exhausted.
    NoSpace,
    /// Well-formed, but a feature this codec deliberately does not handle
    /// (IPv4 fragments, IPv6 extension headers): refusing is safer than a
    /// half-correct reassembly or header walk in the hot path.
    Unsupported,
    /// A valid IP packet that does not carry TCP.
    NotTcp,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Error::Truncated => "truncated",
            Error::BadLength => "bad option length",
            Error::BadHeader => "bad header field",
            Error::BadChecksum => "bad checksum",
            Error::BadMptcp => "malformed MPTCP option",
            Error::NoSpace => "no space in output buffer",
            Error::Unsupported => "unsupported IP feature (fragment or extension header)",
            Error::NotTcp => "not a TCP packet",
        };
        f.write_str(s)
    }
}

impl std::error::Error for Error {}
