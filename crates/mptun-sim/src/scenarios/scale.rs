//! mptun against mptun with many connections at once: what the stack costs
//! per connection (the simulator half of the connection-scale benchmark,
//! `cargo bench -p mptun-sim --bench scale`; the real-packet half runs
//! over TUN against the kernel in `crates/mptun/benches/conn_scale.rs`).
//!
//! One client host opens `n` connections to one server host across one
//! link each way, spread evenly over the first virtual second (a SYN burst
//! of 10,000 would measure the SYN backlog, not the stack). Then:
//!
//! - **active**: the client writes `write` bytes every `write × 8 / rate`
//!   seconds, each write to the next connection in turn, so the total rate
//!   is `rate` whatever `n` and each connection moves `rate / n`; the
//!   server reads everything. Meanwhile one more connection does netperf
//!   `TCP_RR` (a 100-byte request as soon as the 100-byte response is in).
//! - **crr**: the `n` connections idle, `crr_loops` loops of netperf
//!   `TCP_CRR` (connect, 100-byte request, 100-byte response, close) for
//!   `crr` of virtual time.
//!
//! The hosts find the connections a packet concerns from its ports, so a
//! packet costs the same whatever the number of connections; nothing in
//! the host walks them all. What the caller measures around the phases
//! (wall time, CPU time, heap) is the stack's and the simulator's cost.

use crate::host::{Host, Outgoing};
use crate::world::{PathSpec, Sim, SimConfig};
use bytes::Bytes;
use mptun_link::LinkConfig;
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_proto::tcp::Event;
use mptun_time::{Duration, Instant};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

const BULK_PORT: u16 = 5001;
const RR_PORT: u16 = 5002;
const CRR_PORT: u16 = 5003;
/// netperf's request and response size.
const RR_SIZE: usize = 100;

/// The experiment's settings.
#[derive(Clone, Debug)]
pub struct Params {
    /// Concurrent bulk connections.
    pub n: usize,
    /// Total application rate of the bulk connections (bit/s).
    pub rate_bps: u64,
    /// The link, each way: rate (above `rate_bps`) and one-way delay.
    pub link_bps: u64,
    pub delay: Duration,
    /// Bytes per application write.
    pub write: usize,
    /// Length of the active phase (virtual).
    pub active: Duration,
    /// Length of the TCP_CRR phase (virtual) and its parallel loops.
    pub crr: Duration,
    pub crr_loops: usize,
    /// MPTCP (one subflow) instead of plain TCP.
    pub mptcp: bool,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            n: 100,
            rate_bps: 1_000_000_000,
            link_bps: 2_000_000_000,
            delay: Duration::from_millis(5),
            write: 16 * 1024,
            active: Duration::from_secs(4),
            crr: Duration::from_secs(2),
            crr_loops: 50,
            mptcp: false,
            seed: 1,
        }
    }
}

/// What a connection is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Bulk,
    Rr,
    Crr,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Bulk, Kind::Rr, Kind::Crr];

    /// The server port that tells the kinds apart.
    fn port(self) -> u16 {
        match self {
            Kind::Bulk => BULK_PORT,
            Kind::Rr => RR_PORT,
            Kind::Crr => CRR_PORT,
        }
    }
}

fn kind_of(port: u16) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| k.port() == port)
}

/// One connection as the application sees it.
#[derive(Debug)]
struct App {
    kind: Kind,
    /// Bytes of the current request or response read so far.
    got: usize,
    /// When the current request went out (client, RR and CRR).
    asked: Option<Instant>,
    /// The CRR client closed after its response.
    closed: bool,
}

/// A host of the experiment: the client or the server.
pub struct ScaleHost {
    pub ep: Endpoint,
    client: bool,
    addr: IpAddr,
    peer: IpAddr,
    apps: HashMap<ConnectionHandle, App>,
    /// (local port, remote port) to connection, to route a packet's effects.
    by_ports: HashMap<(u16, u16), ConnectionHandle>,
    /// Connections a packet reached since the last pump.
    touched: Vec<ConnectionHandle>,
    buf: Vec<u8>,
    // The client's schedule.
    bulk: Vec<ConnectionHandle>,
    to_open: usize,
    next_open: Option<Instant>,
    open_gap: Duration,
    writing: bool,
    next_write: Option<Instant>,
    write_gap: Duration,
    cursor: usize,
    payload: Bytes,
    crr_running: bool,
    // What it measured.
    /// Bulk connections established (both ends count their own).
    pub established: usize,
    /// Bulk bytes written (client) or read (server).
    pub bulk_bytes: u64,
    /// Writes skipped because the connection's send buffer was full.
    pub write_stalls: u64,
    /// TCP_RR transaction latencies (client), ns of virtual time.
    pub rr_ns: Vec<u64>,
    /// TCP_CRR: connection lifecycles completed, and their latencies (ns).
    pub crr_done: u64,
    pub crr_ns: Vec<u64>,
    /// Connections that failed (reset, timed out).
    pub failed: u64,
}

impl ScaleHost {
    fn new(ep: Endpoint, client: bool, addr: IpAddr, peer: IpAddr, p: &Params) -> Self {
        let payload = Bytes::from(crate::pattern::Pattern::new(p.seed).bytes(p.write));
        ScaleHost {
            ep,
            client,
            addr,
            peer,
            apps: HashMap::new(),
            by_ports: HashMap::new(),
            touched: Vec::new(),
            buf: vec![0; 64 * 1024],
            bulk: Vec::new(),
            to_open: 0,
            next_open: None,
            open_gap: Duration::ZERO,
            writing: false,
            next_write: None,
            write_gap: Duration::from_nanos((p.write as u64 * 8).saturating_mul(1_000_000_000) / p.rate_bps.max(1)),
            cursor: 0,
            payload,
            crr_running: false,
            established: 0,
            bulk_bytes: 0,
            write_stalls: 0,
            rr_ns: Vec::new(),
            crr_done: 0,
            crr_ns: Vec::new(),
            failed: 0,
        }
    }

    /// An endpoint with nothing in it: what takes a host's endpoint's
    /// place when a measurement frees the real one.
    pub fn empty_endpoint() -> Endpoint {
        Endpoint::new(EndpointConfig::default(), [0; 32])
    }

    /// Connections the endpoint holds.
    pub fn connections(&self) -> usize {
        self.ep.connection_count().0
    }

    /// Connects a connection of `kind`; its handle, unless the connect failed.
    fn open(&mut self, now: Instant, kind: Kind) -> Option<ConnectionHandle> {
        let Ok(h) = self.ep.connect(now, SocketAddr::new(self.addr, 0), SocketAddr::new(self.peer, kind.port())) else {
            self.failed += 1;
            return None;
        };
        self.register(h, kind);
        match kind {
            Kind::Bulk => self.bulk.push(h),
            // A lifecycle is timed from the connect.
            Kind::Crr => self.apps.get_mut(&h).expect("registered").asked = Some(now),
            Kind::Rr => {}
        }
        Some(h)
    }

    fn register(&mut self, h: ConnectionHandle, kind: Kind) {
        if let Some((l, r)) = self.ep.addresses(h) {
            self.by_ports.insert((l.port(), r.port()), h);
        }
        self.apps.insert(h, App { kind, got: 0, asked: None, closed: false });
    }

    fn forget(&mut self, h: ConnectionHandle) {
        if let Some((l, r)) = self.ep.addresses(h) {
            self.by_ports.remove(&(l.port(), r.port()));
        }
        self.apps.remove(&h);
        self.ep.remove(h);
    }

    fn ask(&mut self, now: Instant, h: ConnectionHandle) {
        let req = self.payload.slice(..RR_SIZE);
        if self.ep.conn_mut(h).and_then(|c| c.send_bytes(req).ok()) == Some(RR_SIZE) {
            if let Some(a) = self.apps.get_mut(&h) {
                if a.kind == Kind::Rr {
                    a.asked = Some(now);
                }
                a.got = 0;
            }
        }
    }

    /// Reacts to what the endpoint did: accepts, events, readable data.
    fn pump(&mut self, now: Instant) {
        while let Some(h) = self.ep.accept() {
            let kind = self.ep.addresses(h).and_then(|(l, _)| kind_of(l.port())).unwrap_or(Kind::Bulk);
            self.register(h, kind);
        }
        while let Some((h, ev)) = self.ep.poll_event() {
            let Some(kind) = self.apps.get(&h).map(|a| a.kind) else { continue };
            match ev {
                Event::Connected => match kind {
                    Kind::Bulk => self.established += 1,
                    Kind::Rr | Kind::Crr if self.client => self.ask(now, h),
                    _ => {}
                },
                Event::Reset | Event::TimedOut | Event::Unreachable(_) => {
                    self.failed += 1;
                    let done = self.apps.get(&h).is_some_and(|a| a.closed);
                    self.forget(h);
                    if kind == Kind::Crr && self.client && self.crr_running && !done {
                        self.open(now, Kind::Crr);
                    }
                }
                // A CRR connection's end (after TIME-WAIT on the client):
                // the loop went on when it closed.
                Event::Closed if kind == Kind::Crr => self.forget(h),
                _ => {}
            }
            self.touched.push(h);
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable_by_key(|h| h.0);
        touched.dedup();
        for &h in &touched {
            self.serve(now, h);
        }
        touched.clear();
        self.touched = touched;
    }

    /// Reads what `h` has and answers it.
    fn serve(&mut self, now: Instant, h: ConnectionHandle) {
        let Some(kind) = self.apps.get(&h).map(|a| a.kind) else { return };
        loop {
            let Some(conn) = self.ep.conn_mut(h) else { return };
            let n = match conn.recv(now, &mut self.buf) {
                Ok(n) if n > 0 => n,
                Ok(_) => break,
                Err(_) => {
                    // The peer's stream ended: the server closes its side.
                    if !self.client {
                        conn.close();
                    }
                    break;
                }
            };
            if kind == Kind::Bulk {
                self.bulk_bytes += n as u64;
                continue;
            }
            let app = self.apps.get_mut(&h).expect("kind found it");
            app.got += n;
            if app.got < RR_SIZE {
                continue;
            }
            app.got -= RR_SIZE;
            if !self.client {
                let resp = self.payload.slice(..RR_SIZE);
                let _ = conn.send_bytes(resp);
                continue;
            }
            let took = app.asked.take().map(|t| (now - t).as_nanos() as u64);
            match kind {
                Kind::Rr => {
                    self.rr_ns.extend(took);
                    self.ask(now, h);
                }
                Kind::Crr if !app.closed => {
                    app.closed = true;
                    self.crr_done += 1;
                    self.crr_ns.extend(took);
                    conn.close();
                    if self.crr_running {
                        self.open(now, Kind::Crr);
                    }
                    return;
                }
                _ => {}
            }
        }
    }

    /// The client's scheduled opens and writes due by `now`.
    fn run_schedule(&mut self, now: Instant) {
        while self.to_open > 0 && self.next_open.is_some_and(|t| t <= now) {
            self.to_open -= 1;
            self.open(now, Kind::Bulk);
            self.next_open = (self.to_open > 0).then(|| self.next_open.expect("due") + self.open_gap);
        }
        while self.writing && self.next_write.is_some_and(|t| t <= now) && !self.bulk.is_empty() {
            let h = self.bulk[self.cursor % self.bulk.len()];
            self.cursor += 1;
            // A buffer of its own, as a socket write copies it: what waits
            // in a send buffer is in the endpoint's heap.
            let data = Bytes::copy_from_slice(&self.payload);
            let len = data.len();
            match self.ep.conn_mut(h).map(|c| (c.send_space() >= len).then(|| c.send_bytes(data))) {
                Some(Some(Ok(n))) => self.bulk_bytes += n as u64,
                _ => self.write_stalls += 1,
            }
            self.next_write = self.next_write.map(|t| t + self.write_gap);
        }
    }

    fn note_packet(&mut self, packet: &[u8]) {
        // IPv4 (the experiment's addresses): the ports behind the header.
        let Some(&b0) = packet.first() else { return };
        let ihl = usize::from(b0 & 0x0f) * 4;
        let Some(ports) = packet.get(ihl..ihl + 4) else { return };
        let (src, dst) = (u16::from_be_bytes([ports[0], ports[1]]), u16::from_be_bytes([ports[2], ports[3]]));
        if let Some(&h) = self.by_ports.get(&(dst, src)) {
            self.touched.push(h);
        }
    }
}

impl Host for ScaleHost {
    fn handle_packet(&mut self, now: Instant, packet: &[u8], csum_verified: bool) {
        if csum_verified {
            self.ep.handle_packet_checksum_verified(now, packet);
        } else {
            self.ep.handle_packet(now, packet);
        }
        self.note_packet(packet);
        self.pump(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        self.run_schedule(now);
        self.pump(now);
    }

    fn poll_transmit(&mut self, now: Instant, out: &mut [u8]) -> Option<Outgoing> {
        let t = self.ep.poll_transmit(now, out)?;
        let len = t.assemble(out);
        if t.checksum_partial {
            crate::host::complete_checksum(&mut out[..len]);
        }
        Some(Outgoing { len, src: t.src.ip(), dst: t.dst.ip(), segment_size: t.segment_size })
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let writes = if self.writing { self.next_write } else { None };
        Instant::min_opt(Instant::min_opt(self.ep.poll_timeout(), self.next_open), writes)
    }
}

/// The experiment, phase by phase: the caller measures around each.
pub struct Scale {
    pub sim: Sim<ScaleHost, ScaleHost>,
    p: Params,
}

impl Scale {
    /// Client and server, nothing open yet.
    pub fn new(p: &Params) -> Self {
        let (ca, sa): (IpAddr, IpAddr) = ("10.0.1.1".parse().expect("literal"), "10.0.1.2".parse().expect("literal"));
        let link = LinkConfig {
            rate_bps: Some(p.link_bps),
            delay: p.delay,
            limit_packets: Some(100_000),
            ..Default::default()
        };
        let mut cfg = EndpointConfig::default();
        cfg.mptcp.enabled = p.mptcp;
        // Room for the bulk connections, the probe and the CRR loops'
        // connections in TIME-WAIT.
        cfg.limits.max_connections = cfg.limits.max_connections.max(p.n * 2 + 100_000);
        let mut a = ScaleHost::new(Endpoint::new(cfg.clone(), super::seed32(p.seed, 0xA)), true, ca, sa, p);
        let mut b = ScaleHost::new(Endpoint::new(cfg, super::seed32(p.seed, 0xB)), false, sa, ca, p);
        for kind in Kind::ALL {
            b.ep.listen(SocketAddr::new(sa, kind.port()));
        }
        a.to_open = p.n;
        a.next_open = Some(Instant::ZERO);
        a.open_gap = Duration::from_secs(1) / p.n.max(1) as u32;
        let cfg = SimConfig { seed: p.seed, max_time: Duration::from_secs(3600), ..Default::default() };
        let sim = Sim::new(cfg, a, b, vec![PathSpec { addr_a: ca, addr_b: sa, a_to_b: link, b_to_a: link }]);
        Scale { sim, p: p.clone() }
    }

    fn run_until(&mut self, t: Instant, mut stop: impl FnMut(&Sim<ScaleHost, ScaleHost>) -> bool) {
        self.sim.run(|s| s.now() >= t || stop(s), None, |_, _, _| {});
    }

    /// Opens the `n` connections and runs until both ends have them all
    /// (or 30 virtual seconds pass). Returns whether all were established.
    pub fn open_all(&mut self) -> bool {
        let n = self.p.n;
        let deadline = self.sim.now() + Duration::from_secs(30);
        self.run_until(deadline, |s| s.a.established >= n && s.b.established >= n);
        self.sim.a.established >= n && self.sim.b.established >= n
    }

    /// One idle second: the last delayed ACKs go out, nothing is in flight.
    pub fn settle(&mut self) {
        let t = self.sim.now() + Duration::from_secs(1);
        self.run_until(t, |_| false);
    }

    /// Writes at the total rate for the active phase, with the TCP_RR
    /// probe beside it.
    pub fn run_active(&mut self) {
        let now = self.sim.now();
        let rr = self.sim.a.open(now, Kind::Rr);
        // The probe's handshake first, so that its transactions and the
        // writes start together.
        let t = now + Duration::from_secs(1);
        self.run_until(t, |s| !s.a.rr_ns.is_empty());
        self.sim.a.rr_ns.clear();
        self.sim.a.writing = true;
        self.sim.a.next_write = Some(self.sim.now());
        let end = self.sim.now() + self.p.active;
        self.run_until(end, |_| false);
        self.sim.a.writing = false;
        if let Some(h) = rr {
            self.sim.a.ep.close(h);
        }
    }

    /// Lets the bulk data drain (the server reads what is in flight).
    pub fn drain(&mut self) {
        let t = self.sim.now() + Duration::from_secs(2);
        self.run_until(t, |s| s.b.bulk_bytes >= s.a.bulk_bytes);
    }

    /// TCP_CRR loops for the CRR phase.
    pub fn run_crr(&mut self) {
        let now = self.sim.now();
        self.sim.a.crr_running = true;
        for _ in 0..self.p.crr_loops {
            self.sim.a.open(now, Kind::Crr);
        }
        let end = now + self.p.crr;
        self.run_until(end, |_| false);
        self.sim.a.crr_running = false;
    }
}

/// The `q`-quantile (0..=1) of `v` (sorted in place), nearest rank.
pub fn quantile(v: &mut [u64], q: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_moves_what_it_should() {
        let p = Params {
            n: 20,
            rate_bps: 100_000_000,
            active: Duration::from_secs(1),
            crr: Duration::from_millis(500),
            crr_loops: 4,
            ..Params::default()
        };
        let mut s = Scale::new(&p);
        assert!(s.open_all());
        s.settle();
        assert_eq!((s.sim.a.connections(), s.sim.b.connections()), (20, 20));
        s.run_active();
        s.drain();
        let (a, b) = (&s.sim.a, &s.sim.b);
        // 1 s at 100 Mbit/s in 16 KiB writes, round robin.
        assert!((12_000_000..=12_600_000).contains(&a.bulk_bytes), "{}", a.bulk_bytes);
        assert_eq!(b.bulk_bytes, a.bulk_bytes);
        assert_eq!(a.write_stalls, 0);
        // The probe: one transaction per RTT (10 ms) and a little more.
        assert!((80..=100).contains(&a.rr_ns.len()), "{}", a.rr_ns.len());
        assert!(a.rr_ns.iter().all(|&ns| ns >= 10_000_000), "an RTT at least");
        s.run_crr();
        let a = &s.sim.a;
        // 4 loops of connect, request, response, close: 2 RTT each at least.
        assert!(a.crr_done >= 4 * 10, "{}", a.crr_done);
        assert!(a.crr_ns.iter().all(|&ns| ns >= 20_000_000));
        assert_eq!(a.failed, 0);
    }

    #[test]
    fn nearest_rank_quantiles() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(quantile(&mut v, 0.99), Some(99));
        assert_eq!(quantile(&mut v, 0.5), Some(50));
        assert_eq!(quantile(&mut [], 0.5), None);
    }
}
