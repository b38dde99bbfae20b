//! The event loop: two hosts, N paths, virtual time.

use crate::host::Host;
use mptun_link::{Link, LinkConfig, LinkStats, Verdict};
use mptun_time::{Duration, Instant};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
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

struct PathState {
    spec: PathSpec,
    ab: Link,
    ba: Link,
}

/// A packet on its way; ordered by arrival time, then by send order.
struct InFlight {
    at: Instant,
    order: u64,
    to: Side,
    data: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.order) == (o.at, o.order)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.order).cmp(&(o.at, o.order))
    }
}

/// A change to apply at a given virtual time (a path going down, a rate change).
pub struct Action {
    pub at: Instant,
    pub path: usize,
    pub a_to_b: Option<LinkConfig>,
    pub b_to_a: Option<LinkConfig>,
}

/// Counters of the simulation itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    pub packets_sent: u64,
    pub packets_delivered: u64,
    pub bytes_delivered: u64,
    /// Packets whose source address matched no path.
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
    paths: Vec<PathState>,
    queue: BinaryHeap<Reverse<InFlight>>,
    actions: Vec<Action>,
    rng: ChaCha8Rng,
    now: Instant,
    order: u64,
    pool: Vec<Vec<u8>>,
    stats: SimStats,
}

impl<A: Host, B: Host> Sim<A, B> {
    pub fn new(cfg: SimConfig, a: A, b: B, paths: Vec<PathSpec>) -> Self {
        let paths = paths
            .into_iter()
            .map(|spec| PathState { ab: Link::new(spec.a_to_b), ba: Link::new(spec.b_to_a), spec })
            .collect();
        Sim {
            a,
            b,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            paths,
            queue: BinaryHeap::new(),
            actions: Vec::new(),
            now: Instant::ZERO,
            order: 0,
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

    /// Link counters of path `i`: (A→B, B→A).
    pub fn link_stats(&self, i: usize) -> (LinkStats, LinkStats) {
        (self.paths[i].ab.stats(), self.paths[i].ba.stats())
    }

    pub fn path_count(&self) -> usize {
        self.paths.len()
    }

    /// Schedules a link change.
    pub fn schedule(&mut self, action: Action) {
        self.actions.push(action);
        self.actions.sort_by_key(|a| Reverse(a.at));
    }

    fn route(&self, from: Side, src: IpAddr) -> Option<usize> {
        self.paths.iter().position(|p| match from {
            Side::A => p.spec.addr_a == src,
            Side::B => p.spec.addr_b == src,
        })
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
            let Some(p) = self.route(side, out.src) else {
                self.stats.packets_sent += 1;
                self.stats.no_route += 1;
                self.pool.push(buf);
                continue;
            };
            let Some(size) = out.segment_size.filter(|_| out.len > self.cfg.mtu) else {
                self.put_on_link(side, p, buf);
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
                            self.put_on_link(side, p, seg);
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

    /// Offers one wire packet to path `p`'s link away from `side`.
    fn put_on_link(&mut self, side: Side, p: usize, mut buf: Vec<u8>) {
        let now = self.now;
        self.stats.packets_sent += 1;
        let link = match side {
            Side::A => &mut self.paths[p].ab,
            Side::B => &mut self.paths[p].ba,
        };
        let to = match side {
            Side::A => Side::B,
            Side::B => Side::A,
        };
        match link.offer(now, buf.len(), &mut self.rng) {
            Verdict::Dropped(_) => self.pool.push(buf),
            Verdict::Deliver { release, duplicate, corrupt_bit } => {
                if let Some(bit) = corrupt_bit {
                    buf[(bit / 8) as usize] ^= 1 << (bit % 8);
                }
                if let Some(d) = duplicate {
                    self.order += 1;
                    self.queue.push(Reverse(InFlight { at: d, order: self.order, to, data: buf.clone() }));
                }
                self.order += 1;
                self.queue.push(Reverse(InFlight { at: release, order: self.order, to, data: buf }));
            }
        }
    }

    fn next_event(&self) -> Option<Instant> {
        let mut t = self.queue.peek().map(|r| r.0.at);
        t = Instant::min_opt(t, self.a.poll_timeout());
        t = Instant::min_opt(t, self.b.poll_timeout());
        t = Instant::min_opt(t, self.actions.last().map(|a| a.at));
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
            while self.actions.last().is_some_and(|a| a.at <= now) {
                let act = self.actions.pop().expect("peeked");
                let p = &mut self.paths[act.path];
                if let Some(c) = act.a_to_b {
                    p.ab.set_config(c);
                }
                if let Some(c) = act.b_to_a {
                    p.ba.set_config(c);
                }
            }
            while self.queue.peek().is_some_and(|r| r.0.at <= now) {
                let Reverse(pkt) = self.queue.pop().expect("peeked");
                self.stats.packets_delivered += 1;
                self.stats.bytes_delivered += pkt.data.len() as u64;
                match pkt.to {
                    Side::A => self.a.handle_packet(now, &pkt.data),
                    Side::B => self.b.handle_packet(now, &pkt.data),
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
