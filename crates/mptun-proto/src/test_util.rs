//! One test harness for the subflow and the connection tests (in the manner of
//! quinn-proto's `src/tests/util.rs`): two ends back to back through the real
//! codec, a 1 ms wire, a hand on every packet in between (to drop, reorder or
//! rewrite it), and virtual time that jumps to the next thing that happens.

use crate::endpoint::Endpoint;
use crate::tcp::Subflow;
use mptun_time::{Duration, Instant};
use mptun_wire::{parse_tcp_packet, TcpHeader};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

/// An IP address written as a literal: the one parser for every unit test.
pub(crate) fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A socket address written as a literal, as [`ip`].
pub(crate) fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// One end of the wire: a subflow or an endpoint, driven through the
/// sans-IO contract only (methods, never fields).
pub(crate) trait Host {
    /// The next packet to send at `now`, written into `buf`; its length.
    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize>;
    /// An IP packet arrives.
    fn receive(&mut self, now: Instant, pkt: &[u8]);
    /// When the host wants to be woken.
    fn timeout(&self) -> Option<Instant>;
    /// `now` has reached (or passed) [`Host::timeout`], or a packet arrived.
    fn tick(&mut self, now: Instant);
    /// State for a "time stands still" diagnosis.
    fn dump(&self) -> String;
}

impl Host for Subflow {
    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let t = self.poll_transmit(now, &mut (), buf)?;
        assert!(t.departure <= now, "EDT in the future was released");
        Some(t.assemble(buf))
    }
    fn receive(&mut self, now: Instant, pkt: &[u8]) {
        let p = parse_tcp_packet(pkt).expect("stack emits valid packets");
        let opts = p.tcp.options.summary();
        let _ = self.handle_segment(now, &p.tcp, &opts, p.payload);
    }
    fn timeout(&self) -> Option<Instant> {
        self.poll_timeout()
    }
    fn tick(&mut self, now: Instant) {
        if self.poll_timeout().is_some_and(|t| t <= now) {
            self.handle_timeout(now);
        }
    }
    fn dump(&self) -> String {
        format!("{self:?} {:?}", self.info())
    }
}

impl Host for Endpoint {
    fn transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let t = self.poll_transmit(now, buf)?;
        Some(t.assemble(buf))
    }
    fn receive(&mut self, now: Instant, pkt: &[u8]) {
        self.handle_packet(now, pkt);
    }
    fn timeout(&self) -> Option<Instant> {
        self.poll_timeout()
    }
    fn tick(&mut self, now: Instant) {
        self.handle_timeout(now);
    }
    fn dump(&self) -> String {
        let mut s = String::new();
        for h in self.handles() {
            let c = self.conn(h).unwrap();
            s += &format!("conn {:?} {}\n", c.poll_timeout(), c.debug_state());
            for (i, sf) in c.subflows() {
                s += &format!("  sf{i} {:?} {:?}\n", sf.poll_timeout(), sf);
            }
        }
        s
    }
}

/// What the wire does with a packet (`true` = sent by A): deliver it,
/// possibly rewritten, or drop it (`None`).
pub(crate) type Tamper<'a> = &'a mut dyn FnMut(bool, Vec<u8>) -> Option<Vec<u8>>;

/// Every packet passes untouched.
pub(crate) fn pass() -> impl FnMut(bool, Vec<u8>) -> Option<Vec<u8>> {
    |_, p| Some(p)
}

/// A tamper from a header predicate: `keep(from_a, header)` decides whether
/// the packet survives.
pub(crate) fn keep(mut f: impl FnMut(bool, &TcpHeader) -> bool) -> impl FnMut(bool, Vec<u8>) -> Option<Vec<u8>> {
    move |from_a, p| {
        let h = parse_tcp_packet(&p).expect("stack emits valid packets").tcp;
        f(from_a, &h).then_some(p)
    }
}

/// Two hosts back to back.
pub(crate) struct Pair<H: Host> {
    pub a: H,
    pub b: H,
    pub now: Instant,
    /// One-way delay of the wire.
    pub delay: Duration,
    /// Packets on the wire: (arrival, from A, bytes); kept across runs.
    pub wire: VecDeque<(Instant, bool, Vec<u8>)>,
}

impl<H: Host> Pair<H> {
    pub fn new(a: H, b: H, now: Instant) -> Self {
        Pair { a, b, now, delay: Duration::from_millis(1), wire: VecDeque::new() }
    }

    /// Drains what `a` (or `b`) has to send at `now`, bypassing the wire.
    pub fn drain(host: &mut H, now: Instant) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        let mut buf = vec![0u8; 1600];
        while let Some(n) = host.transmit(now, &mut buf) {
            v.push(buf[..n].to_vec());
            assert!(v.len() < 100_000, "runaway transmitter: {:?}", parse_tcp_packet(&buf[..n]).map(|p| p.tcp));
        }
        v
    }

    /// Shuttles packets until both sides are quiet or the next event lies
    /// past `limit` from now; `now` stays at the last event.
    pub fn run_for(&mut self, limit: Duration, tamper: Tamper<'_>) {
        let end = self.now + limit;
        let mut wire = std::mem::take(&mut self.wire);
        let mut stuck = 0u32;
        loop {
            for p in Self::drain(&mut self.a, self.now) {
                if let Some(p) = tamper(true, p) {
                    wire.push_back((self.now + self.delay, true, p));
                }
            }
            for p in Self::drain(&mut self.b, self.now) {
                if let Some(p) = tamper(false, p) {
                    wire.push_back((self.now + self.delay, false, p));
                }
            }
            let next = [wire.front().map(|w| w.0), self.a.timeout(), self.b.timeout()].into_iter().flatten().min();
            let Some(next) = next else { break };
            if next > end {
                break;
            }
            stuck = if next <= self.now { stuck + 1 } else { 0 };
            if stuck >= 100_000 {
                panic!("time stands still at {:?}\nA: {}\nB: {}", self.now, self.a.dump(), self.b.dump());
            }
            self.now = self.now.max(next);
            while wire.front().is_some_and(|w| w.0 <= self.now) {
                let (_, from_a, p) = wire.pop_front().unwrap();
                if from_a {
                    self.b.receive(self.now, &p);
                } else {
                    self.a.receive(self.now, &p);
                }
            }
            self.a.tick(self.now);
            self.b.tick(self.now);
        }
        self.wire = wire;
    }

    /// [`Pair::run_for`], then `now` moves on to the end of the interval.
    pub fn run(&mut self, dur: Duration, tamper: Tamper<'_>) {
        let end = self.now + dur;
        self.run_for(dur, tamper);
        self.now = self.now.max(end);
    }
}
