//! Unresponsive cross traffic: UDP packets at a constant rate, or on/off,
//! that no congestion signal slows down (a video call, a game, a
//! misbehaving sender), next to the responsive flows of a scenario.
//!
//! [`WithCross`] wraps a host: it sends its sources' packets beside the
//! host's own, in departure order, and counts the UDP packets that reach
//! it instead of handing them to the host's stack. Without sources it is
//! the host it wraps, packet for packet.

use crate::host::{Host, Outgoing};
use mptun_time::{Duration, Instant};
use std::net::IpAddr;

/// IPv4 and UDP headers.
const HEADERS: usize = 20 + 8;
/// The UDP source port of source `i` is this plus `i` (the sink counts by it).
pub const CROSS_PORT_BASE: u16 = 40_000;
const CROSS_DST_PORT: u16 = 9;

/// One unresponsive source.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// IP bytes per second times eight while on.
    pub rate_bps: u64,
    /// IP packet size, bytes (28 bytes of headers included).
    pub packet: usize,
    /// On for `on`, then off for `off`, from `start`; `off` zero: constant.
    pub on: Duration,
    pub off: Duration,
    pub start: Duration,
    pub stop: Option<Duration>,
}

impl Source {
    /// Time between two packets while on.
    pub fn gap(&self) -> Duration {
        Duration::from_nanos((self.packet as u128 * 8 * 1_000_000_000 / u128::from(self.rate_bps.max(1))) as u64)
    }

    /// The first instant at or after `t` at which the source may send
    /// (`None` once it has stopped); the lab's UDP source follows it too.
    pub fn next_on(&self, t: Instant) -> Option<Instant> {
        let start = Instant::ZERO + self.start;
        let t = t.max(start);
        if self.stop.is_some_and(|s| t >= Instant::ZERO + s) {
            return None;
        }
        if self.off.is_zero() || self.on.is_zero() {
            return Some(t);
        }
        let period = (self.on + self.off).as_nanos();
        let into = (t - start).as_nanos() % period;
        let at = if into < self.on.as_nanos() { t } else { t + Duration::from_nanos((period - into) as u64) };
        self.stop.is_none_or(|s| at < Instant::ZERO + s).then_some(at)
    }
}

/// A source and when its next packet leaves.
#[derive(Clone, Debug)]
struct Running {
    source: Source,
    next: Option<Instant>,
    sent: u64,
}

/// A host with unresponsive sources beside it and a sink for theirs.
#[derive(Debug)]
pub struct WithCross<H> {
    pub inner: H,
    sources: Vec<Running>,
    /// IP bytes received per source index (from the UDP source port).
    received: Vec<u64>,
}

impl<H: Host> WithCross<H> {
    pub fn new(inner: H, sources: Vec<Source>) -> Self {
        let sources = sources
            .into_iter()
            .map(|source| Running { next: source.next_on(Instant::ZERO), source, sent: 0 })
            .collect();
        WithCross { inner, sources, received: Vec::new() }
    }

    /// IP bytes received from source `i` of the far end.
    pub fn received(&self, i: usize) -> u64 {
        self.received.get(i).copied().unwrap_or(0)
    }

    /// IP bytes source `i` of this end sent.
    pub fn sent(&self, i: usize) -> u64 {
        self.sources.get(i).map_or(0, |s| s.sent)
    }

    fn next_due(&self) -> Option<Instant> {
        self.sources.iter().filter_map(|s| s.next).min()
    }

    /// A UDP packet of source `i` in `out`.
    fn build(&mut self, i: usize, out: &mut [u8]) -> Option<Outgoing> {
        let s = &self.sources[i].source;
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (s.src, s.dst) else { return None };
        let len = s.packet.clamp(HEADERS, out.len());
        let udp = (len - 20) as u16;
        let ip = etherparse::Ipv4Header::new(udp, 64, etherparse::IpNumber::UDP, src.octets(), dst.octets()).ok()?;
        let mut w = &mut out[..];
        ip.write(&mut w).ok()?;
        let port = CROSS_PORT_BASE + i as u16;
        out[20..22].copy_from_slice(&port.to_be_bytes());
        out[22..24].copy_from_slice(&CROSS_DST_PORT.to_be_bytes());
        out[24..26].copy_from_slice(&udp.to_be_bytes());
        out[26..28].copy_from_slice(&[0, 0]); // no checksum (RFC 768 allows it over IPv4)
        out[28..len].fill(0);
        Some(Outgoing { len, src: s.src, dst: s.dst, segment_size: None })
    }
}

impl<H: Host> Host for WithCross<H> {
    fn handle_packet(&mut self, now: Instant, packet: &[u8], csum_verified: bool) {
        if let Ok(ip) = etherparse::Ipv4HeaderSlice::from_slice(packet) {
            if ip.protocol() == etherparse::IpNumber::UDP && packet.len() >= HEADERS {
                let port = u16::from_be_bytes([packet[20], packet[21]]);
                if let Some(i) = port.checked_sub(CROSS_PORT_BASE).map(usize::from) {
                    if self.received.len() <= i {
                        self.received.resize(i + 1, 0);
                    }
                    self.received[i] += packet.len() as u64;
                    return;
                }
            }
        }
        self.inner.handle_packet(now, packet, csum_verified);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.inner.poll_timeout().is_some_and(|t| t <= now) {
            self.inner.handle_timeout(now);
        }
    }

    fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<Outgoing> {
        let due = (0..self.sources.len()).find(|&i| self.sources[i].next.is_some_and(|t| t <= now));
        if let Some(i) = due {
            let r = &mut self.sources[i];
            let at = r.next.expect("due");
            r.next = r.source.next_on(at + r.source.gap());
            if let Some(o) = self.build(i, out) {
                self.sources[i].sent += o.len as u64;
                return Some(o);
            }
        }
        self.inner.poll_transmit(now, out)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [self.inner.poll_timeout(), self.next_due()].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(on_ms: u64, off_ms: u64) -> Source {
        Source {
            src: "10.0.1.1".parse().unwrap(),
            dst: "10.0.1.2".parse().unwrap(),
            rate_bps: 1_200_000, // a 1500-byte packet every 10 ms
            packet: 1500,
            on: Duration::from_millis(on_ms),
            off: Duration::from_millis(off_ms),
            start: Duration::from_millis(5),
            stop: Some(Duration::from_millis(1000)),
        }
    }

    #[test]
    fn the_schedule_keeps_to_rate_on_off_start_and_stop() {
        let s = source(0, 0);
        assert_eq!(s.gap(), Duration::from_millis(10));
        assert_eq!(s.next_on(Instant::ZERO), Some(Instant::from_millis(5)));
        assert_eq!(s.next_on(Instant::from_millis(1000)), None);
        let s = source(100, 300);
        // On 5..105, off 105..405, on again 405..505.
        assert_eq!(s.next_on(Instant::from_millis(104)), Some(Instant::from_millis(104)));
        assert_eq!(s.next_on(Instant::from_millis(105)), Some(Instant::from_millis(405)));
        assert_eq!(s.next_on(Instant::from_millis(900)), Some(Instant::from_millis(900)));
        assert_eq!(s.next_on(Instant::from_millis(950)), None, "the next on period starts after the stop");
    }

    /// An idle host that never sends: only the source's packets leave.
    use crate::host::NullHost as Idle;

    #[test]
    fn packets_leave_on_time_and_the_far_end_counts_them() {
        let mut a = WithCross::new(Idle, vec![source(100, 300)]);
        let mut b = WithCross::new(Idle, vec![]);
        let mut out = vec![0u8; 2048];
        let mut times = Vec::new();
        while let Some(t) = a.poll_timeout() {
            let o = a.poll_transmit(t, &mut out).expect("due");
            assert_eq!(o.len, 1500);
            let ip = etherparse::Ipv4HeaderSlice::from_slice(&out[..o.len]).unwrap();
            assert_eq!(ip.total_len(), 1500);
            b.handle_packet(t, &out[..o.len], true);
            times.push(t);
        }
        // 10 packets in each of 5..105, 405..505 and 805..905 (a fourth
        // period would start at 1205, past the stop).
        assert_eq!(times.len(), 30);
        assert_eq!(times[..3], [Instant::from_millis(5), Instant::from_millis(15), Instant::from_millis(25)]);
        assert_eq!(times[10], Instant::from_millis(405));
        assert_eq!((a.sent(0), b.received(0)), (45_000, 45_000));
    }
}
