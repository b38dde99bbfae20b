//! One bottleneck (droptail unless told otherwise), alike both ways: what the experiments that
//! make flows compete (`cc-compare`, `shared-bottleneck`) are built on.

use mptun_link::{JitterMode, LinkConfig, Qdisc};
use mptun_time::Duration;

/// The link, and its buffer in packets.
#[derive(Clone, Copy, Debug)]
pub struct Bottleneck {
    /// IP bytes per second times eight.
    pub rate_bps: u64,
    /// Round trip of propagation, split evenly between the directions.
    pub rtt: Duration,
    /// Buffer in packets; `None`: one BDP of 1500-byte packets.
    pub queue_packets: Option<usize>,
    /// Order-preserving delay jitter (see `shared_bottleneck::Params`).
    pub jitter: Duration,
    /// The queue discipline within the buffer.
    pub qdisc: Qdisc,
}

impl Bottleneck {
    /// The link config, its buffer in packets and the BDP in packets.
    pub fn link(&self) -> (LinkConfig, usize, u64) {
        let base = LinkConfig { rate_bps: Some(self.rate_bps), delay: self.rtt / 2, ..Default::default() };
        let bdp = base.bdp_bytes(self.rtt) / 1500;
        let queue = self.queue_packets.unwrap_or(bdp as usize).max(2);
        let jitter_mode = if self.jitter.is_zero() { base.jitter_mode } else { JitterMode::OrderPreserving };
        (
            LinkConfig { limit_packets: Some(queue), jitter: self.jitter, jitter_mode, qdisc: self.qdisc, ..base },
            queue,
            bdp,
        )
    }
}
