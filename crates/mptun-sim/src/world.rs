//! The event loop: two hosts joined by links, virtual time.
//!
//! A [`Topology`] names its links (each one direction, with today's link
//! model) and routes packets by source address through one or more of them;
//! several routes may share a link, so subflows and flows may meet in one
//! queue. [`PathSpec`]s, two hosts joined by disjoint paths of one link
//! each way, are the special case every older scenario uses, and they run
//! exactly as they did.

use crate::events::EventQueue;
use crate::host::Host;
use mptun_link::{Link, LinkConfig, LinkStats, Verdict};
use mptun_time::{Duration, Instant};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::net::IpAddr;

/// Which host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    A,
    B,
}

/// One path: an address on each host and a link per direction.
#[derive(Clone, Debug)]
pub struct PathSpec {
    pub addr_a: IpAddr,
    pub addr_b: IpAddr,
    pub a_to_b: LinkConfig,
    pub b_to_a: LinkConfig,
}

/// Simulation-wide settings.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    /// Hard stop in virtual time.
    pub max_time: Duration,
    /// Largest packet a host may put on a link.
    pub mtu: usize,
    /// Hosts may hand over TSO super-segments (up to 64 KiB), which the
    /// sending side cuts into wire segments before the link, as a NIC
    /// does; off, hosts get an MTU-sized buffer and build every segment.
    pub gso: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig { seed: 1, max_time: Duration::from_secs(600), mtu: 1500, gso: false }
    }
}

/// One route: the addresses it joins and the links a packet crosses, in
/// order, each way (indices into [`Topology::links`]).
#[derive(Clone, Debug)]
pub struct RouteSpec {
    pub addr_a: IpAddr,
    pub addr_b: IpAddr,
    pub a_to_b: Vec<usize>,
    pub b_to_a: Vec<usize>,
}

/// Named one-way links and the routes through them.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    pub links: Vec<(String, LinkConfig)>,
    pub routes: Vec<RouteSpec>,
}

impl Topology {
    /// Disjoint paths: path `i` is links `2i` (A→B) and `2i + 1` (B→A).
    pub fn from_paths(paths: &[PathSpec]) -> Self {
        let mut t = Topology::default();
        for (i, p) in paths.iter().enumerate() {
            t.links.push((format!("path{i}-a2b"), p.a_to_b));
            t.links.push((format!("path{i}-b2a"), p.b_to_a));
            t.routes.push(RouteSpec {
                addr_a: p.addr_a,
                addr_b: p.addr_b,
                a_to_b: vec![2 * i],
                b_to_a: vec![2 * i + 1],
            });
        }
        t
    }
}

struct LinkState {
    name: String,
    link: Link,
}

/// A packet on its way ([`EventQueue`] orders them by arrival, then by
/// send order).
struct InFlight {
    to: Side,
    /// The route and the hop it enters next, when it has links left to cross.
    next: Option<(usize, usize)>,
    /// A link flipped a bit of it: the receiver must check the checksum.
    corrupted: bool,
    data: Vec<u8>,
}

/// A change to apply at a given virtual time (a path going down, a rate
/// change): to path `path`'s two links ([`Topology::from_paths`]'s
/// numbering).
pub struct Action {
    pub at: Instant,
    pub path: usize,
    pub a_to_b: Option<LinkConfig>,
    pub b_to_a: Option<LinkConfig>,
}

/// A change of one link of a [`Topology`] at a given virtual time.
struct LinkChange {
    at: Instant,
    link: usize,
    config: LinkConfig,
}

/// Something a host does at a given virtual time: an operator's command
/// (`ip mptcp endpoint delete` when an interface goes away), an
/// application's call.
pub type HostAction<A, B> = Box<dyn FnOnce(Instant, &mut A, &mut B)>;

/// Counters of the simulation itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    pub packets_sent: u64,
    pub packets_delivered: u64,
    pub bytes_delivered: u64,
    /// Packets no route took (from an address no route starts at, or to
    /// one the other host does not have): each answered with an ICMP net
    /// unreachable.
    pub no_route: u64,
    pub events: u64,
    /// TSO super-segments cut into wire segments.
    pub gso_packets: u64,
    /// Super-segments the cutter refused (malformed): dropped.
    pub gso_errors: u64,
}

/// The simulator.
pub struct Sim<A: Host, B: Host> {
    pub a: A,
    pub b: B,
    cfg: SimConfig,
    links: Vec<LinkState>,
    routes: Vec<RouteSpec>,
    queue: EventQueue<InFlight>,
    /// Pending link changes, latest first.
    changes: Vec<LinkChange>,
    /// Pending host actions, latest first.
    host_actions: Vec<(Instant, HostAction<A, B>)>,
    rng: ChaCha8Rng,
    now: Instant,
    pool: Vec<Vec<u8>>,
    stats: SimStats,
}

impl<A: Host, B: Host> Sim<A, B> {
    /// Two hosts joined by disjoint `paths`.
    pub fn new(cfg: SimConfig, a: A, b: B, paths: Vec<PathSpec>) -> Self {
        Self::with_topology(cfg, a, b, Topology::from_paths(&paths))
    }

    /// Two hosts joined by `topology`. Panics on a route through a link it
    /// does not have, or through none.
    pub fn with_topology(cfg: SimConfig, a: A, b: B, topology: Topology) -> Self {
        for r in &topology.routes {
            assert!(!r.a_to_b.is_empty() && !r.b_to_a.is_empty(), "a route crosses at least one link each way: {r:?}");
            assert!(r.a_to_b.iter().chain(&r.b_to_a).all(|&l| l < topology.links.len()), "no such link: {r:?}");
        }
        let links: Vec<_> =
            topology.links.into_iter().map(|(name, c)| LinkState { name, link: Link::new(c) }).collect();
        let queue = EventQueue::new(links.len());
        Sim {
            a,
            b,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            links,
            routes: topology.routes,
            queue,
            changes: Vec::new(),
            host_actions: Vec::new(),
            now: Instant::ZERO,
            pool: Vec::new(),
            stats: SimStats::default(),
        }
    }

    pub fn now(&self) -> Instant {
        self.now
    }

    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// Link counters of route `i`'s first link each way: (A→B, B→A) (of
    /// path `i` for [`Sim::new`]).
    pub fn link_stats(&self, i: usize) -> (LinkStats, LinkStats) {
        let r = &self.routes[i];
        (self.links[r.a_to_b[0]].link.stats(), self.links[r.b_to_a[0]].link.stats())
    }

    /// Every link's name and counters, in the topology's order.
    pub fn links(&self) -> impl Iterator<Item = (&str, LinkStats)> {
        self.links.iter().map(|l| (l.name.as_str(), l.link.stats()))
    }

    /// Every link's name and the queueing delays its packets met, in the
    /// topology's order.
    pub fn link_queue_delays(&self) -> impl Iterator<Item = (&str, &mptun_link::Histogram)> {
        self.links.iter().map(|l| (l.name.as_str(), l.link.queue_delay()))
    }

    /// Routes (paths, for [`Sim::new`]).
    pub fn path_count(&self) -> usize {
        self.routes.len()
    }

    /// Schedules a change of path `action.path`'s links.
    pub fn schedule(&mut self, action: Action) {
        let r = &self.routes[action.path];
        let (ab, ba) = (r.a_to_b[0], r.b_to_a[0]);
        // Pushed B→A first: changes due at one instant apply last-scheduled
        // first, so A→B is applied before B→A, as one path's were.
        if let Some(c) = action.b_to_a {
            self.schedule_link(action.at, ba, c);
        }
        if let Some(c) = action.a_to_b {
            self.schedule_link(action.at, ab, c);
        }
    }

    /// Schedules `f` to run on both hosts at `at` (after the link changes
    /// due then, before the packets); what it makes the hosts send leaves
    /// at once.
    pub fn schedule_host(&mut self, at: Instant, f: impl FnOnce(Instant, &mut A, &mut B) + 'static) {
        // Latest first, and ahead of those due at the same instant: they
        // pop, and run, in the order scheduled.
        let i = self.host_actions.partition_point(|(t, _)| *t > at);
        self.host_actions.insert(i, (at, Box::new(f)));
    }

    /// Schedules a change of link `link` (an index into the topology's links).
    pub fn schedule_link(&mut self, at: Instant, link: usize, config: LinkConfig) {
        self.changes.push(LinkChange { at, link, config });
        // Latest first, so the next one pops off the end (a stable sort:
        // changes due at one instant pop last-scheduled first).
        self.changes.sort_by_key(|c| Reverse(c.at));
    }

    /// The route a packet from `side` takes: the one joining its source
    /// and destination, else the first from its source (policy routing by
    /// source address, as disjoint paths have it) if the other host has the
    /// destination address; none for an address nobody has.
    fn route(&self, from: Side, src: IpAddr, dst: IpAddr) -> Option<usize> {
        let ends = |r: &RouteSpec| match from {
            Side::A => (r.addr_a, r.addr_b),
            Side::B => (r.addr_b, r.addr_a),
        };
        if let Some(r) = self.routes.iter().position(|r| ends(r) == (src, dst)) {
            return Some(r);
        }
        if !self.routes.iter().any(|r| ends(r).1 == dst) {
            return None;
        }
        self.routes.iter().position(|r| ends(r).0 == src)
    }

    /// A packet of `side`'s that no route takes is answered as a router
    /// without a route answers it: ICMP net unreachable quoting it, from
    /// the sender's first hop (modelled at no distance, so it arrives at
    /// once and is never lost). The sender's own source address stands for
    /// the router's: TCP does not look at who reports.
    fn answer_unroutable(&mut self, side: Side, packet: &[u8], src: IpAddr) {
        let mut icmp = self.pool.pop().unwrap_or_default();
        icmp.resize(self.cfg.mtu.max(1280), 0);
        let why = mptun_wire::icmp::Unreachable::Network;
        if let Ok(n) = mptun_wire::icmp::emit_unreachable(src, packet, why, &mut icmp) {
            let now = self.now;
            match side {
                Side::A => self.a.handle_packet(now, &icmp[..n], true),
                Side::B => self.b.handle_packet(now, &icmp[..n], true),
            }
        }
        self.pool.push(icmp);
    }

    fn transmit_all(&mut self, side: Side) {
        let now = self.now;
        let cap = if self.cfg.gso { mptun_wire::gso::GSO_MAX_SIZE } else { self.cfg.mtu };
        loop {
            let mut buf = self.pool.pop().unwrap_or_default();
            buf.resize(cap, 0);
            let out = match side {
                Side::A => self.a.poll_transmit(now, &mut buf),
                Side::B => self.b.poll_transmit(now, &mut buf),
            };
            let Some(out) = out else {
                self.pool.push(buf);
                return;
            };
            buf.truncate(out.len);
            let Some(p) = self.route(side, out.src, out.dst) else {
                self.stats.packets_sent += 1;
                self.stats.no_route += 1;
                self.answer_unroutable(side, &buf, out.src);
                self.pool.push(buf);
                continue;
            };
            let Some(size) = out.segment_size.filter(|_| out.len > self.cfg.mtu) else {
                self.stats.packets_sent += 1;
                self.put_on_link(side, p, 0, buf, false);
                continue;
            };
            // The device's segmentation: each wire segment meets the link
            // on its own, back to back, as a NIC's TSO sends them.
            self.stats.gso_packets += 1;
            match mptun_wire::gso::segments(&buf, size) {
                Ok(mut segs) => loop {
                    let mut seg = self.pool.pop().unwrap_or_default();
                    seg.resize(self.cfg.mtu.max(size + segs.layout().header_len), 0);
                    match segs.next_into(&mut seg) {
                        Ok(Some(n)) => {
                            seg.truncate(n);
                            self.stats.packets_sent += 1;
                            self.put_on_link(side, p, 0, seg, false);
                        }
                        Ok(None) => {
                            self.pool.push(seg);
                            break;
                        }
                        Err(_) => {
                            self.stats.gso_errors += 1;
                            self.pool.push(seg);
                            break;
                        }
                    }
                },
                Err(_) => self.stats.gso_errors += 1,
            }
            self.pool.push(buf);
        }
    }

    /// Offers one wire packet, sent by `side` on route `route`, to the
    /// route's link number `hop` in that direction.
    fn put_on_link(&mut self, side: Side, route: usize, hop: usize, mut buf: Vec<u8>, mut corrupted: bool) {
        let now = self.now;
        let r = &self.routes[route];
        let (hops, to) = match side {
            Side::A => (&r.a_to_b, Side::B),
            Side::B => (&r.b_to_a, Side::A),
        };
        let next = (hop + 1 < hops.len()).then_some((route, hop + 1));
        let line = hops[hop];
        let link = &mut self.links[line].link;
        match link.offer(now, buf.len(), &mut self.rng) {
            Verdict::Dropped(_) => self.pool.push(buf),
            Verdict::Deliver { release, duplicate, corrupt_bit } => {
                if let Some(bit) = corrupt_bit {
                    buf[(bit / 8) as usize] ^= 1 << (bit % 8);
                    corrupted = true;
                }
                if let Some(d) = duplicate {
                    self.queue.push(line, d, InFlight { to, next, corrupted, data: buf.clone() });
                }
                self.queue.push(line, release, InFlight { to, next, corrupted, data: buf });
            }
        }
    }

    fn next_event(&self) -> Option<Instant> {
        let mut t = self.queue.next_at();
        t = Instant::min_opt(t, self.a.poll_timeout());
        t = Instant::min_opt(t, self.b.poll_timeout());
        t = Instant::min_opt(t, self.changes.last().map(|c| c.at));
        t = Instant::min_opt(t, self.host_actions.last().map(|(at, _)| *at));
        t
    }

    /// Runs until `done` says so (checked after every step), nothing is left
    /// to do, or `max_time` passes. `sample` is called every `sample_every`
    /// of virtual time (if given) for traces; it only observes: the hosts
    /// do not run at sample times, so a traced run is the very run an
    /// untraced one is. Returns the final virtual time.
    pub fn run(
        &mut self,
        mut done: impl FnMut(&Self) -> bool,
        sample_every: Option<Duration>,
        mut sample: impl FnMut(Instant, &A, &B),
    ) -> Instant {
        let end = Instant::ZERO + self.cfg.max_time;
        let mut next_sample = sample_every.map(|_| Instant::ZERO);
        let mut stuck = 0u32;
        let mut observed_only = false;
        loop {
            if !observed_only {
                self.transmit_all(Side::A);
                self.transmit_all(Side::B);
                if done(self) {
                    break;
                }
            }
            observed_only = false;
            let Some(t) = self.next_event() else { break };
            if let Some(s) = next_sample.filter(|&s| s <= t && s <= end) {
                sample(s.max(self.now), &self.a, &self.b);
                next_sample = Some(s + sample_every.expect("set with next_sample"));
                observed_only = true;
                continue;
            }
            if t > end {
                self.now = end;
                break;
            }
            if t <= self.now {
                stuck += 1;
                assert!(stuck < 1_000_000, "simulation stuck at {:?}: a host keeps asking for the past", self.now);
            } else {
                stuck = 0;
            }
            self.now = self.now.max(t);
            self.stats.events += 1;
            let now = self.now;
            while self.changes.last().is_some_and(|c| c.at <= now) {
                let c = self.changes.pop().expect("peeked");
                self.links[c.link].link.set_config(c.config);
            }
            while self.host_actions.last().is_some_and(|(at, _)| *at <= now) {
                let (_, f) = self.host_actions.pop().expect("peeked");
                f(now, &mut self.a, &mut self.b);
            }
            while let Some(pkt) = self.queue.pop_due(now) {
                if let Some((route, hop)) = pkt.next {
                    // Out of one link, into the route's next one.
                    let from = match pkt.to {
                        Side::A => Side::B,
                        Side::B => Side::A,
                    };
                    self.put_on_link(from, route, hop, pkt.data, pkt.corrupted);
                    continue;
                }
                // Receivers trust the checksums of packets the wire left
                // alone: what stands behind that is every sender's, which
                // builds of the tests check here.
                debug_assert!(
                    pkt.corrupted
                        || !matches!(mptun_wire::parse_tcp_packet(&pkt.data), Err(mptun_wire::Error::BadChecksum)),
                    "a sender put a packet with a bad checksum on the wire: {:02x?}",
                    &pkt.data[..pkt.data.len().min(64)]
                );
                self.stats.packets_delivered += 1;
                self.stats.bytes_delivered += pkt.data.len() as u64;
                match pkt.to {
                    Side::A => self.a.handle_packet(now, &pkt.data, !pkt.corrupted),
                    Side::B => self.b.handle_packet(now, &pkt.data, !pkt.corrupted),
                }
                self.pool.push(pkt.data);
            }
            if self.a.poll_timeout().is_some_and(|t| t <= now) {
                self.a.handle_timeout(now);
            }
            if self.b.poll_timeout().is_some_and(|t| t <= now) {
                self.b.handle_timeout(now);
            }
        }
        self.now
    }
}
