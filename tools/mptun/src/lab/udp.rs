//! Unresponsive cross traffic on real packets (`mptun lab peer --udp`): the
//! simulator's UDP source (`mptun_sim::cross`) as a kernel UDP socket in the
//! client's namespace, and its sink in the server's. The source sends
//! `packet`-byte IP packets (28 of them headers) at `rate` bit/s while on,
//! on for `on` and off for `off` from its start (on first, as the
//! simulator's), whatever the network does; the sink counts the IP bytes
//! that arrive, as the simulator's goodput of a UDP flow counts them.
//!
//! Each datagram carries its sequence number and a pattern derived from it,
//! so the sink tells a corrupted datagram from a lost one; the source ends
//! with a few end markers, the sink also stops after `off` + 5 s without a
//! datagram (every marker lost).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use mptun_sim::cross::Source;

use super::peer::{PeerReport, CONNECTING, READY};

/// IPv4 and UDP headers, counted in `packet` as the simulator does.
const HEADERS: usize = 20 + 8;
/// The sequence number of an end marker.
const END: u64 = u64::MAX;
/// End markers sent, 10 ms apart (any one ends the sink).
const END_MARKERS: usize = 5;
/// At most this many datagrams leave back to back to catch up after a late wake-up.
const MAX_BURST: u32 = 8;

/// A duration as the scenario files spell them (`2s`, `500ms`, `0`), for
/// the on/off times of `--udp`.
pub(crate) fn parse_span(s: &str) -> Result<Duration> {
    Ok(Duration::from_nanos(crate::units::parse_duration(s)?.as_nanos() as u64))
}

/// What a UDP flow sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UdpFlow {
    /// IP bits per second while on.
    pub(crate) rate_bps: u64,
    /// IP packet size, bytes, headers included (28 to 1500).
    pub(crate) packet: usize,
    pub(crate) on: Duration,
    /// Zero: a constant rate.
    pub(crate) off: Duration,
}

impl UdpFlow {
    fn check(&self) -> Result<()> {
        if self.rate_bps == 0 || !(HEADERS + 8..=1500).contains(&self.packet) {
            bail!("--udp needs a rate and packets of {} to 1500 bytes", HEADERS + 8);
        }
        Ok(())
    }

    /// The simulator's source of this flow (its schedule: `gap`, `next_on`),
    /// started at zero, never stopped.
    fn source(&self) -> Source {
        let any = IpAddr::from([0, 0, 0, 0]);
        let span = |d: Duration| mptun_time::Duration::from_nanos(d.as_nanos() as u64);
        Source {
            src: any,
            dst: any,
            rate_bps: self.rate_bps,
            packet: self.packet,
            on: span(self.on),
            off: span(self.off),
            start: mptun_time::Duration::ZERO,
            stop: None,
        }
    }
}

/// `t` after the start, in the simulator's time.
fn sim_t(t: Duration) -> mptun_time::Instant {
    mptun_time::Instant::ZERO + mptun_time::Duration::from_nanos(t.as_nanos() as u64)
}

/// When, after the start, the source of `s` may next send from `t` on.
fn next_on(s: &Source, t: Duration) -> Duration {
    let at = s.next_on(sim_t(t)).expect("a source that never stops");
    Duration::from_nanos((at - mptun_time::Instant::ZERO).as_nanos() as u64)
}

/// Datagram `seq`'s payload of `len` bytes (at least 8).
fn payload(seq: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend((0..len - 8).map(|j| (seq.wrapping_mul(7) as usize + j) as u8));
}

/// Whether `d` is a datagram of this format; its sequence number if so.
fn parse(d: &[u8]) -> Option<u64> {
    let seq = u64::from_be_bytes(d.get(..8)?.try_into().ok()?);
    if seq == END {
        return Some(seq);
    }
    let ok = d[8..].iter().enumerate().all(|(j, &b)| b == (seq.wrapping_mul(7) as usize + j) as u8);
    ok.then_some(seq)
}

fn report(
    sent: u64,
    received: u64,
    runtime: Duration,
    rx_series: Vec<(f64, u64)>,
    counters: BTreeMap<String, u64>,
) -> PeerReport {
    PeerReport {
        stack: "kernel".into(),
        sent,
        received,
        sent_sha256: String::new(),
        received_sha256: String::new(),
        runtime_s: runtime.as_secs_f64(),
        established_s: 0.0,
        subflows_max: 0,
        mode: "udp".into(),
        subflow_series: Vec::new(),
        counters,
        slow_start_exit: None,
        final_cwnd: 0,
        rx_series,
        object_ms: Vec::new(),
        rwnd_limited_s: None,
        subflow_bytes: Vec::new(),
    }
}

/// The source: sends to `to` for `send_for`, then the end markers.
pub(crate) fn send(to: SocketAddr, f: UdpFlow, send_for: Duration) -> Result<PeerReport> {
    f.check()?;
    let sock = UdpSocket::bind(("0.0.0.0", 0)).context("UDP socket")?;
    sock.connect(to).with_context(|| format!("UDP to {to}"))?;
    eprintln!("{CONNECTING}");
    let t0 = Instant::now();
    let src = f.source();
    let (gap, len) = (Duration::from_nanos(src.gap().as_nanos() as u64), f.packet - HEADERS);
    let (mut seq, mut sent, mut refused) = (0u64, 0u64, 0u64);
    let mut buf = Vec::with_capacity(len);
    // The schedule, in time from the start: the next datagram is due at `due`.
    let mut due = Duration::ZERO;
    while due < send_for {
        let now = t0.elapsed();
        if now < due {
            std::thread::sleep(due - now);
            continue;
        }
        let mut burst = 0;
        while due <= t0.elapsed() && due < send_for && burst < MAX_BURST {
            payload(seq, len, &mut buf);
            match sock.send(&buf) {
                Ok(_) => sent += f.packet as u64,
                // Nothing listening yet (ICMP port unreachable) or a full
                // socket buffer: counted, and the source goes on regardless.
                Err(_) => refused += 1,
            }
            seq += 1;
            burst += 1;
            due = next_on(&src, due + gap);
        }
        if burst == MAX_BURST && due <= t0.elapsed() {
            // Too far behind (a long stall of this thread): skip ahead
            // rather than flood the link with the backlog.
            due = next_on(&src, t0.elapsed());
        }
    }
    payload(END, 8, &mut buf);
    for _ in 0..END_MARKERS {
        let _ = sock.send(&buf);
        std::thread::sleep(Duration::from_millis(10));
    }
    let counters = BTreeMap::from([("UdpDatagramsSent".to_string(), seq), ("UdpSendErrors".to_string(), refused)]);
    Ok(report(sent, 0, t0.elapsed(), Vec::new(), counters))
}

/// The sink: counts what arrives at `at` until an end marker, or `off` +
/// 5 s with nothing after the first datagram; `sample` apart, the IP bytes
/// received so far (from the first datagram).
pub(crate) fn sink(at: SocketAddr, f: UdpFlow, sample: Duration) -> Result<PeerReport> {
    let sock = UdpSocket::bind(at).with_context(|| format!("UDP on {at}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(10)))?;
    eprintln!("{READY}");
    let idle_limit = f.off + Duration::from_secs(5);
    let mut buf = vec![0u8; 2048];
    let (mut received, mut datagrams, mut corrupt) = (0u64, 0u64, 0u64);
    let mut t0: Option<Instant> = None;
    let mut last = Instant::now();
    let mut series = Vec::new();
    let mut next_sample = Duration::ZERO;
    loop {
        let r = sock.recv(&mut buf);
        let now = Instant::now();
        if let Ok(n) = r {
            match parse(&buf[..n]) {
                Some(END) => break,
                Some(_) => {
                    t0.get_or_insert(now);
                    received += (n + HEADERS) as u64;
                    datagrams += 1;
                }
                None => corrupt += 1,
            }
            last = now;
        }
        if let Some(t0) = t0 {
            while now - t0 >= next_sample {
                series.push((next_sample.as_secs_f64(), received));
                next_sample += sample;
            }
            if now - last > idle_limit {
                break;
            }
        }
        if crate::signals::received().is_some() {
            return Err(crate::signals::interrupted());
        }
    }
    let runtime = t0.map_or(Duration::ZERO, |t| t.elapsed());
    series.push((runtime.as_secs_f64(), received));
    let counters =
        BTreeMap::from([("UdpDatagramsReceived".to_string(), datagrams), ("UdpDatagramsCorrupt".to_string(), corrupt)]);
    Ok(report(0, received, runtime, series, counters))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_off_follows_the_simulators_source() {
        let f = UdpFlow { rate_bps: 5_000_000, packet: 1500, on: Duration::from_secs(2), off: Duration::from_secs(2) };
        let s = f.source();
        assert_eq!(s.gap().as_nanos(), 2_400_000);
        assert_eq!(next_on(&s, Duration::from_millis(1999)), Duration::from_millis(1999), "on first");
        assert_eq!(next_on(&s, Duration::from_millis(2500)), Duration::from_secs(4), "then off");
        let constant = UdpFlow { off: Duration::ZERO, ..f }.source();
        assert_eq!(next_on(&constant, Duration::from_secs(3)), Duration::from_secs(3));
    }

    #[test]
    fn a_datagram_is_told_from_a_corrupted_one() {
        let mut d = Vec::new();
        payload(41, 1472, &mut d);
        assert_eq!(d.len(), 1472);
        assert_eq!(parse(&d), Some(41));
        d[700] ^= 1;
        assert_eq!(parse(&d), None);
        payload(END, 8, &mut d);
        assert_eq!(parse(&d), Some(END));
        assert_eq!(parse(&d[..5]), None, "too short");
    }
}
