//! The driver's own counters, next to the protocol's ([`mptun_proto::Counters`],
//! kernel names) and the devices' ([`mptun_io::IoStats`], `ip -s link` names).

/// Driver activity since the stack started. Monotonic counts, except the
/// two `held_*` gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Times the driver task was polled.
    pub polls: u64,
    /// Loop iterations (receive, timers, transmit, wake) across all polls.
    pub iterations: u64,
    /// IP packets handed to the endpoint.
    pub rx_packets: u64,
    /// Of those, TCP super-packets taken whole from a device's GRO/TSO read
    /// (one segment for the core, many on the wire).
    pub rx_gro_packets: u64,
    /// IP packets the endpoint produced (a TSO super-segment is one).
    pub tx_packets: u64,
    /// Wire segments those packets carry: more than `tx_packets` when the
    /// endpoint sends TSO super-segments.
    pub tx_segments: u64,
    /// Packets handed to a device with their payload still in the send
    /// buffer, for the device to write behind the headers
    /// ([`crate::StackBuilder::zero_copy_send`]).
    pub tx_gathered: u64,
    /// Packets whose payload the endpoint left in the send buffer
    /// (`TcpConfig::gather_payload`) and the driver copied behind the
    /// headers after all: held for a later departure, or for a device
    /// that cannot gather. The rest went to the device by reference.
    pub tx_tail_copied: u64,
    /// Batches written to devices.
    pub tx_batches: u64,
    /// Packets that waited in the departure queue (EDT in the future, their
    /// flow had packets waiting, or the device pushed back).
    pub tx_held: u64,
    /// Packets dropped because their departure time was beyond the
    /// departure queue's horizon (fq's `horizon_drops`).
    pub tx_horizon_drops: u64,
    /// Packets dropped because the departure queue, or their flow's share
    /// of it, was full (fq's `flows_plimit`).
    pub tx_queue_drops: u64,
    /// Packets dropped because no path owns their source address.
    pub tx_no_route: u64,
    /// Packets dropped because they exceed what the device takes: its MTU,
    /// or, for a super-segment cut into wire segments on its way to a
    /// device without TSO, the slots of a batch (or are malformed).
    pub tx_oversize: u64,
    /// Packets dropped because a device write failed.
    pub tx_errors: u64,
    /// Wake-ups by the departure/protocol timer.
    pub timer_wakeups: u64,
    /// Application tasks woken (read, write, connect, accept).
    pub app_wakeups: u64,
    /// Packets in the departure queue now (gauge).
    pub held_packets: u64,
    /// Bytes in the departure queue now (gauge).
    pub held_bytes: u64,
    /// Connections accepted but refused because no listener took them.
    pub accept_refused: u64,
}
