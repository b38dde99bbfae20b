//! A host wrapper that records what arrives at a host, so a scenario can
//! measure a bottleneck's output from the far side of its delay line.
//!
//! With a constant propagation delay, the arrival process at the receiver is
//! the bottleneck's departure process shifted by that delay. Recording
//! arrivals at the host is therefore an exact utilisation meter for the link
//! feeding it, without reaching into the link model.

use crate::host::{Host, Outgoing};
use mptun_time::{Duration, Instant};

/// `inner`, plus a log of every packet handed to it.
pub struct Tap<H> {
    pub inner: H,
    /// Packets delivered to the host.
    pub rx_packets: u64,
    /// IP bytes delivered to the host.
    pub rx_bytes: u64,
    /// Every arrival as (instant, IP length), in time order.
    arrivals: Vec<(Instant, u32)>,
}

impl<H: Host> Tap<H> {
    pub fn new(inner: H) -> Self {
        Tap { inner, rx_packets: 0, rx_bytes: 0, arrivals: Vec::new() }
    }

    /// Every arrival so far as (instant, IP length).
    pub fn arrivals(&self) -> &[(Instant, u32)] {
        &self.arrivals
    }

    /// Packets and IP bytes that arrived in `[from, to)`.
    pub fn arrived_between(&self, from: Instant, to: Instant) -> (u64, u64) {
        let lo = self.arrivals.partition_point(|&(t, _)| t < from);
        let hi = self.arrivals.partition_point(|&(t, _)| t < to);
        let bytes = self.arrivals[lo..hi].iter().map(|&(_, l)| u64::from(l)).sum();
        ((hi - lo) as u64, bytes)
    }

    /// Fraction of a link's capacity that the arrivals in `[from, to)`
    /// represent: `rate_bps` is the link's rate on the wire, and every packet
    /// costs its IP length plus `overhead` bytes of framing there.
    pub fn utilisation(&self, from: Instant, to: Instant, rate_bps: u64, overhead: u32) -> f64 {
        let span: Duration = to - from;
        if span.is_zero() || rate_bps == 0 {
            return 0.0;
        }
        let (pkts, bytes) = self.arrived_between(from, to);
        let wire_bits = (bytes + pkts * u64::from(overhead)) as f64 * 8.0;
        wire_bits / (rate_bps as f64 * span.as_secs_f64())
    }
}

impl<H: Host> Host for Tap<H> {
    fn handle_packet(&mut self, now: Instant, packet: &[u8], csum_verified: bool) {
        self.rx_packets += 1;
        self.rx_bytes += packet.len() as u64;
        self.arrivals.push((now, packet.len() as u32));
        self.inner.handle_packet(now, packet, csum_verified);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.inner.handle_timeout(now);
    }

    fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<Outgoing> {
        self.inner.poll_transmit(now, out)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::host::NullHost as Sink;

    #[test]
    fn utilisation_counts_framing_and_half_open_windows() {
        let mut t = Tap::new(Sink);
        // 1500-byte IP packets every 242.24 us = 1514 wire bytes at 50 Mbit/s.
        let gap = Duration::from_nanos(242_240);
        let mut now = Instant::ZERO;
        for _ in 0..1000 {
            t.handle_packet(now, &[0u8; 1500], true);
            now += gap;
        }
        let end = Instant::ZERO + gap * 1000;
        let u = t.utilisation(Instant::ZERO, end, 50_000_000, 14);
        assert!((u - 1.0).abs() < 1e-9, "{u}");
        // Without the framing the same arrivals are 1500/1514 of the link.
        let u = t.utilisation(Instant::ZERO, end, 50_000_000, 0);
        assert!((u - 1500.0 / 1514.0).abs() < 1e-9, "{u}");
        // [from, to): the packet at `to` belongs to the next window.
        assert_eq!(t.arrived_between(Instant::ZERO, Instant::ZERO + gap).0, 1);
        assert_eq!(t.arrived_between(Instant::ZERO + gap, Instant::ZERO + gap * 3).0, 2);
        assert_eq!(t.utilisation(end, end, 50_000_000, 14), 0.0);
    }
}
