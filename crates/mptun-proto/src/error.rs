//! Typed errors of the stream API: what a socket layer needs to tell "try
//! again later" (no room, nothing yet) from "never again" (closed, finished,
//! exhausted), as smoltcp's `SendError`/`RecvError` do. A driver maps them to
//! the `io::ErrorKind`s its users expect.

use core::fmt;

/// Why [`Endpoint::connect`](crate::Endpoint::connect) opened nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnectError {
    /// Every local port of [`IP_LOCAL_PORT_RANGE`](crate::endpoint::IP_LOCAL_PORT_RANGE)
    /// is in use towards this destination (Linux `EADDRNOTAVAIL` from
    /// `__inet_hash_connect`).
    AddrNotAvailable,
    /// The requested (local, remote) pair belongs to a live subflow
    /// (Linux `EADDRINUSE`): taking it would steal that subflow's packets.
    AddrInUse,
    /// The endpoint holds [`EndpointConfig::max_connections`](crate::EndpointConfig::max_connections)
    /// connections already (Linux `ENOBUFS`/`EMFILE`-like exhaustion).
    TooManyConnections,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectError::AddrNotAvailable => "no free local port towards this destination",
            ConnectError::AddrInUse => "address pair already in use",
            ConnectError::TooManyConnections => "connection limit of the endpoint reached",
        })
    }
}

impl std::error::Error for ConnectError {}

/// Why `send` took nothing for good (no room yet is `Ok(0)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The connection is gone, reset, or our direction is shut down: no
    /// byte will ever be taken again (smoltcp's `SendError::InvalidState`).
    InvalidState,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("connection not open for sending")
    }
}

impl std::error::Error for SendError {}

/// Why `recv` returned nothing for good (nothing yet is `Ok(0)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvError {
    /// The connection is gone or was closed without an orderly end of the
    /// peer's stream (reset, timed out): what was not read is lost.
    InvalidState,
    /// The peer closed its direction and every byte before that was read:
    /// end of stream (smoltcp's `RecvError::Finished`).
    Finished,
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RecvError::InvalidState => "connection not open for receiving",
            RecvError::Finished => "end of stream",
        })
    }
}

impl std::error::Error for RecvError {}
