//! What a userspace-PM command can fail with. Linux's netlink commands
//! answer with an errno and an extack message; here each refusal has its
//! own variant, and a refused command changes nothing.

/// Why a path-manager command was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PmError {
    /// No connection has that token (Linux: `ENOENT`, "invalid token").
    UnknownToken,
    /// The connection no longer speaks MPTCP: it fell back to TCP or never
    /// spoke it (Linux: `EINVAL`).
    Fallback,
    /// The connection is closing: no subflow or address may be added.
    Closing,
    /// The connection is not fully established yet: the peer's key, which
    /// a join's HMAC needs, may not be known (Linux: `EINVAL`).
    NotEstablished,
    /// The address id is taken by another address, or is 0 where 0 is the
    /// initial subflow's (Linux: `EINVAL`, "invalid addr id").
    IdInUse,
    /// No announcement or endpoint has that id.
    NoSuchId,
    /// The `subflows` limit is reached (Linux: `EINVAL`).
    LimitReached,
    /// The local address is not one of this host's.
    AddrNotLocal,
    /// The address is not usable: unspecified, multicast, or of a family
    /// the command does not allow.
    BadAddress,
    /// No subflow has that pair of addresses.
    NoSuchSubflow,
}

impl core::fmt::Display for PmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PmError::UnknownToken => "no connection has that token",
            PmError::Fallback => "the connection fell back to TCP",
            PmError::Closing => "the connection is closing",
            PmError::NotEstablished => "the connection is not fully established",
            PmError::IdInUse => "address id in use",
            PmError::NoSuchId => "no address has that id",
            PmError::LimitReached => "subflow limit reached",
            PmError::AddrNotLocal => "address is not local",
            PmError::BadAddress => "address not usable",
            PmError::NoSuchSubflow => "no subflow has those addresses",
        })
    }
}

impl std::error::Error for PmError {}
