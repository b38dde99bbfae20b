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
    /// Not enough room in the output buffer (emit side).
    NoSpace,
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
        };
        f.write_str(s)
    }
}

impl std::error::Error for Error {}
