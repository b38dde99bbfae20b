//! What one endpoint lets its peers and its application hold: every limit
//! that keeps memory and CPU bounded whatever a peer sends, each with Linux's
//! default where Linux has one and a counter that shows it was hit
//! (`docs/mptcp.md`, "Limits").

use super::IP_LOCAL_PORT_RANGE;
use core::ops::RangeInclusive;

/// Endpoint-wide limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Local ports given to connections and subflows that ask for port 0
    /// (`net.ipv4.ip_local_port_range`); once all are used towards one
    /// destination, connecting fails with `AddrNotAvailable`.
    pub local_port_range: RangeInclusive<u16>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { local_port_range: IP_LOCAL_PORT_RANGE }
    }
}
