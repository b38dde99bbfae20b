//! The sans-IO protocol core of mptun.
//!
//! Layers, bottom up: [`tcp`] (one TCP subflow), then the MPTCP connection,
//! scheduler and path manager, and [`endpoint`], which demultiplexes IP
//! packets to connections and is what a driver (the simulator or the tokio
//! runtime) talks to. Nothing here reads a clock or does I/O: every entry
//! point takes the current [`Instant`](mptun_time::Instant).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub(crate) mod buf;
pub mod counters;
pub mod endpoint;
pub mod error;
pub mod mptcp;
pub mod pm;
pub mod sched;
pub mod seq;
pub mod tcp;
#[cfg(test)]
mod test_util;

pub use counters::Counters;
pub use endpoint::{ConnectionHandle, Endpoint, EndpointConfig, Limits};
pub use error::{ConnectError, RecvError, SendError};
pub use mptcp::{ConnConfig, Connection, MptcpConfig};
pub use mptun_time::{Duration, Instant};

/// The smallest packet worth handing to
/// [`Endpoint::handle_packet_bytes`] rather than
/// [`Endpoint::handle_packet`]: the receive queues copy shared data shorter
/// than this (so that a short slice cannot pin a 64 KiB buffer), so for a
/// smaller packet lending the buffer saves nothing. (The packet's headers
/// count here, so a packet just above it may still have its payload
/// copied.)
pub const RECV_ZERO_COPY_MIN: usize = buf::COPY_BELOW;
