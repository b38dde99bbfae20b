//! Path MTU between two `Endpoint`s in virtual time: a client with two paths
//! (device MTUs given per local address), a server, and a "router" on the
//! wire that drops packets larger than its link MTU and, unless told to keep
//! quiet (a black hole), answers them with ICMP "fragmentation needed" /
//! "packet too big" built from the dropped packet, as a kernel router does.
//! Every test runs a transfer in both directions to its end and compares the
//! bytes.

mod common;

use common::ip;
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_proto::pm::{EndpointFlags, PmEndpoint};
use mptun_proto::{Duration, Instant};
use mptun_wire::icmp::emit_too_big;
use mptun_wire::parse_tcp_packet;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

const PORT: u16 = 5000;

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    ChaCha8Rng::seed_from_u64(seed).fill(&mut v[..]);
    v
}

/// What the router of one client path does with packets above its MTU.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Hop {
    /// No limit.
    Open,
    /// Packets above `mtu` are dropped and answered with ICMP.
    Icmp(usize),
    /// Packets above `mtu` are dropped silently.
    BlackHole(usize),
}

struct Net {
    c: Endpoint,
    s: Endpoint,
    now: Instant,
    wire: VecDeque<(Instant, Vec<u8>)>,
    /// Client address → (server address of the path, the hop).
    hops: HashMap<IpAddr, Hop>,
    /// The client's addresses.
    clients: Vec<IpAddr>,
    /// Largest packet each source address sent.
    largest: HashMap<IpAddr, usize>,
    /// Payload bytes each client address sent and received.
    carried: HashMap<IpAddr, usize>,
    ch: ConnectionHandle,
    sh: Option<ConnectionHandle>,
    tx: [Vec<u8>; 2],
    sent: [usize; 2],
    rx: [Vec<u8>; 2],
    closed: [bool; 2],
    icmp_sent: u64,
}

impl Net {
    /// `paths`: (client address, server address, client device MTU, hop).
    fn new(paths: &[(&str, &str, u32, Hop)], n: usize) -> Net {
        let mut cc = EndpointConfig::default();
        let mut sc = EndpointConfig::default();
        for (i, (ca, sa, _, _)) in paths.iter().enumerate().skip(1) {
            cc.mptcp.pm.endpoints.push(PmEndpoint {
                id: i as u8,
                addr: ip(ca),
                flags: EndpointFlags::default(),
                port: None,
            });
            sc.mptcp.pm.endpoints.push(PmEndpoint {
                id: i as u8,
                addr: ip(sa),
                flags: EndpointFlags { signal: true, ..Default::default() },
                port: None,
            });
        }
        cc.mptcp.pm.max_add_addr_accepted = 4;
        let mut s = Endpoint::new(sc, [2; 32]);
        let mut c = Endpoint::new(cc, [1; 32]);
        let mut hops = HashMap::new();
        for &(ca, sa, mtu, hop) in paths {
            c.set_device_mtu(ip(ca), mtu);
            s.set_device_mtu(ip(sa), 1500);
            hops.insert(ip(ca), hop);
            hops.insert(ip(sa), hop);
        }
        s.listen(SocketAddr::new(ip(paths[0].1), PORT));
        let now = Instant::ZERO;
        let ch =
            c.connect(now, SocketAddr::new(ip(paths[0].0), 0), SocketAddr::new(ip(paths[0].1), PORT)).expect("connect");
        Net {
            c,
            s,
            now,
            wire: VecDeque::new(),
            hops,
            clients: paths.iter().map(|p| ip(p.0)).collect(),
            largest: HashMap::new(),
            carried: HashMap::new(),
            ch,
            sh: None,
            tx: [pattern(1, n), pattern(2, n)],
            sent: [0; 2],
            rx: [Vec::new(), Vec::new()],
            closed: [false; 2],
            icmp_sent: 0,
        }
    }

    fn pump(&mut self) {
        if self.sh.is_none() {
            self.sh = self.s.accept();
        }
        let mut buf = vec![0u8; 65536];
        let now = self.now;
        for side in 0..2 {
            let (ep, h) = if side == 0 { (&mut self.c, Some(self.ch)) } else { (&mut self.s, self.sh) };
            let Some(h) = h else { continue };
            while self.sent[side] < self.tx[side].len() {
                let n = ep.send(h, &self.tx[side][self.sent[side]..]).unwrap_or(0);
                if n == 0 {
                    break;
                }
                self.sent[side] += n;
            }
            if self.sent[side] == self.tx[side].len() && !self.closed[side] && ep.is_established(h) {
                ep.close(h);
                self.closed[side] = true;
            }
            loop {
                let n = ep.recv(h, now, &mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                self.rx[side].extend_from_slice(&buf[..n]);
            }
        }
        while self.c.poll_event().is_some() {}
        while self.s.poll_event().is_some() {}
    }

    fn drain(&mut self) {
        let mut buf = vec![0u8; 65536];
        for from_c in [true, false] {
            loop {
                let ep = if from_c { &mut self.c } else { &mut self.s };
                let Some(t) = ep.poll_transmit(self.now, &mut buf) else { break };
                // The sending host's device cuts TSO super-segments into
                // wire segments before they meet the path.
                let mut wire = Vec::new();
                let n = t.assemble(&mut buf);
                match t.segment_size {
                    Some(size) => {
                        let mut segs = mptun_wire::gso::segments(&buf[..n], size).expect("a valid super-segment");
                        let mut seg = vec![0u8; 65536];
                        while let Some(n) = segs.next_into(&mut seg).unwrap() {
                            wire.push(seg[..n].to_vec());
                        }
                    }
                    None => wire.push(buf[..n].to_vec()),
                }
                for p in wire {
                    self.on_wire(from_c, p);
                }
            }
        }
    }

    fn on_wire(&mut self, from_c: bool, p: Vec<u8>) {
        let delay = Duration::from_millis(5);
        let pkt = parse_tcp_packet(&p).expect("the stack emits valid packets");
        let l = self.largest.entry(pkt.src).or_default();
        *l = (*l).max(p.len());
        let client = if from_c { pkt.src } else { pkt.dst };
        match self.hops[&pkt.src] {
            Hop::Icmp(mtu) if p.len() > mtu => {
                let mut out = [0u8; 1500];
                let router = if pkt.src.is_ipv4() { ip("192.0.2.1") } else { ip("2001:db8::1") };
                let n = emit_too_big(router, &p, mtu as u32, &mut out).unwrap();
                self.icmp_sent += 1;
                self.wire.push_back((self.now + delay, out[..n].to_vec()));
            }
            Hop::BlackHole(mtu) if p.len() > mtu => {}
            _ => {
                *self.carried.entry(client).or_default() += pkt.payload.len();
                self.wire.push_back((self.now + delay, p));
            }
        }
    }

    fn deliver(&mut self, p: &[u8]) {
        // The outer destination: for ICMP, the sender of the quoted packet.
        let dst = if p[0] >> 4 == 4 {
            IpAddr::from([p[16], p[17], p[18], p[19]])
        } else {
            let mut a = [0u8; 16];
            a.copy_from_slice(&p[24..40]);
            IpAddr::from(a)
        };
        if self.clients.contains(&dst) {
            self.c.handle_packet(self.now, p);
        } else {
            self.s.handle_packet(self.now, p);
        }
    }

    fn step(&mut self) -> bool {
        self.pump();
        self.drain();
        let next =
            [self.wire.front().map(|w| w.0), self.c.poll_timeout(), self.s.poll_timeout()].into_iter().flatten().min();
        let Some(next) = next else { return false };
        self.now = self.now.max(next);
        while self.wire.front().is_some_and(|w| w.0 <= self.now) {
            let (_, p) = self.wire.pop_front().unwrap();
            self.deliver(&p);
        }
        self.c.handle_timeout(self.now);
        self.s.handle_timeout(self.now);
        true
    }

    fn done(&self) -> bool {
        self.rx[0].len() == self.tx[1].len()
            && self.rx[1].len() == self.tx[0].len()
            && self.c.recv_finished(self.ch)
            && self.sh.is_some_and(|h| self.s.recv_finished(h))
    }

    /// Runs to the end within `limit` of virtual time; checks the bytes.
    fn finish(&mut self, limit: Duration) {
        let deadline = self.now + limit;
        while !self.done() {
            assert!(self.step() && self.now <= deadline, "transfer incomplete at {:?}\n{}", self.now, self.dump());
        }
        assert!(self.rx[1] == self.tx[0], "client → server bytes differ");
        assert!(self.rx[0] == self.tx[1], "server → client bytes differ");
    }

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end && self.step() {}
    }

    /// Path MTU each client subflow uses now, by local address.
    fn client_pmtu(&self) -> HashMap<IpAddr, Option<u32>> {
        let c = self.c.conn(self.ch).unwrap();
        c.subflows().map(|(_, s)| (s.local().ip(), s.path_mtu())).collect()
    }

    fn dump(&self) -> String {
        format!(
            "sent {:?} rx {} {} largest {:?} carried {:?} icmp {} pmtu {:?}\nclient\n{}server\n{}",
            self.sent,
            self.rx[0].len(),
            self.rx[1].len(),
            self.largest,
            self.carried,
            self.icmp_sent,
            self.c.conn(self.ch).map(|_| self.client_pmtu()),
            self.c.counters().to_nstat(),
            self.s.counters().to_nstat()
        )
    }
}

/// Each subflow's MSS comes from its own device: the SYN from a 1280-byte
/// device announces 1240 and no packet on that path is larger than 1280,
/// while the 1500-byte path uses full-size packets.
#[test]
fn pmtu_device_mtu_per_subflow() {
    let mut n = Net::new(
        &[("10.0.1.1", "10.0.1.2", 1500, Hop::Open), ("10.0.2.1", "10.0.2.2", 1280, Hop::BlackHole(1280))],
        2_000_000,
    );
    n.finish(Duration::from_secs(30));
    assert_eq!(n.largest[&ip("10.0.1.1")], 1500, "{}", n.dump());
    assert!(n.largest[&ip("10.0.2.1")] <= 1280, "{}", n.dump());
    // The server learnt the small MSS from the join SYN.
    assert!(n.largest[&ip("10.0.2.2")] <= 1280, "{}", n.dump());
    assert!(n.carried[&ip("10.0.2.1")] > 100_000 && n.carried[&ip("10.0.1.1")] > 100_000, "{}", n.dump());
    assert_eq!(n.c.counters().mptun_pmtu_black_hole, 0);
    assert_eq!(n.client_pmtu()[&ip("10.0.2.1")], Some(1280));
    assert_eq!(n.client_pmtu()[&ip("10.0.1.1")], Some(1500));
}

/// A 1280-byte hop that answers with ICMP "fragmentation needed": only the
/// subflow behind it lowers its MSS, at once, and both directions finish.
#[test]
fn pmtu_icmp_frag_needed_lowers_only_that_subflow() {
    let mut n = Net::new(
        &[("10.0.1.1", "10.0.1.2", 1500, Hop::Open), ("10.0.2.1", "10.0.2.2", 1500, Hop::Icmp(1280))],
        2_000_000,
    );
    n.finish(Duration::from_secs(30));
    let (cc, sc) = (n.c.counters(), n.s.counters());
    assert!(cc.icmp_in_dest_unreachs > 0 && cc.mptun_pmtu_reduced >= 1, "{}", n.dump());
    assert!(sc.mptun_pmtu_reduced >= 1, "the server's subflow learnt it too\n{}", n.dump());
    assert_eq!(cc.mptun_pmtu_black_hole + sc.mptun_pmtu_black_hole, 0, "{}", n.dump());
    assert_eq!(n.client_pmtu()[&ip("10.0.2.1")], Some(1280));
    assert_eq!(n.client_pmtu()[&ip("10.0.1.1")], Some(1500));
    assert!(n.carried[&ip("10.0.2.1")] > 100_000, "{}", n.dump());
}

/// The same over IPv6 ("packet too big").
#[test]
fn pmtu_icmpv6_packet_too_big() {
    let mut n = Net::new(&[("fd00:1::1", "fd00:1::2", 1500, Hop::Icmp(1280))], 1_000_000);
    n.finish(Duration::from_secs(30));
    assert!(n.c.counters().icmp6_in_pkt_too_bigs > 0, "{}", n.dump());
    assert_eq!(n.client_pmtu()[&ip("fd00:1::1")], Some(1280));
}

/// The 1280-byte hop drops big packets silently: after repeated RTOs the
/// subflow falls back to `base_mss`, then probes its way back up to just
/// below 1280 (RFC 4821, Linux `tcp_mtu_probing=1`). One path, so every
/// byte has to cross the hole (with two, the other path finishes the
/// transfer before the detection's RTOs have run out).
#[test]
fn pmtu_black_hole_falls_back_then_probes_up() {
    let mut n = Net::new(&[("10.0.2.1", "10.0.2.2", 1500, Hop::BlackHole(1280))], 4_000_000);
    // The server's third ACK came with data and fell into the hole too, so
    // it has no RTT sample (1 s RTO): it detects the hole at its second RTO.
    n.finish(Duration::from_secs(15));
    let (cc, sc) = (n.c.counters(), n.s.counters());
    for c in [cc, sc] {
        assert_eq!(c.mptun_pmtu_black_hole, 1, "{}", n.dump());
        assert!(c.tcp_ext_tcp_mtup_success >= 1 && c.tcp_ext_tcp_mtup_fail >= 1, "{}", n.dump());
    }
    let pmtu = n.client_pmtu()[&ip("10.0.2.1")].unwrap();
    assert!((1280 - 16..=1280).contains(&pmtu), "searched up to {pmtu}\n{}", n.dump());
    println!("black hole: done at {:?}, {}", n.now, n.dump());
}

/// RFC 5927: an ICMP "too big" whose quoted sequence number is not in
/// `snd_una..=snd_nxt` is ignored and counted (`OutOfWindowIcmps`); one
/// that is in window is believed.
#[test]
fn pmtu_spoofed_icmp_outside_window_is_ignored() {
    let mut n = Net::new(&[("10.0.1.1", "10.0.1.2", 1500, Hop::Open)], 4_000_000);
    n.run_for(Duration::from_millis(40));
    assert!(n.rx[1].len() > 10_000 && n.rx[1].len() < 2_000_000, "{}", n.dump());
    let c = n.c.conn(n.ch).unwrap();
    let (_, sf) = c.subflows().next().unwrap();
    let (local, remote, una, nxt) = (sf.local(), sf.remote(), sf.snd_una(), sf.snd_nxt());
    assert!(nxt.gt(una), "data in flight");
    let quote = |seq: u32| {
        let h = mptun_wire::TcpHeader::new(local.port(), remote.port(), seq, 0, mptun_wire::TcpFlags::ACK, 0);
        let mut b = [0u8; 1600];
        let len = mptun_wire::emit_tcp_packet(local.ip(), remote.ip(), 64, &h, &[0; 1400], &mut b).unwrap();
        let mut out = [0u8; 1500];
        let k = emit_too_big(ip("192.0.2.1"), &b[..len], 1280, &mut out).unwrap();
        out[..k].to_vec()
    };
    for seq in [nxt.0.wrapping_add(1), una.0.wrapping_sub(1), nxt.0.wrapping_add(0x8000_0000)] {
        n.c.handle_packet(n.now, &quote(seq));
    }
    assert_eq!(n.c.counters().tcp_ext_out_of_window_icmps, 3, "{}", n.dump());
    assert_eq!(n.c.counters().mptun_pmtu_reduced, 0);
    assert_eq!(n.client_pmtu()[&ip("10.0.1.1")], Some(1500));
    // A genuine one (the quoted seq is in flight) lowers it.
    n.c.handle_packet(n.now, &quote(una.0));
    assert_eq!(n.c.counters().mptun_pmtu_reduced, 1);
    assert_eq!(n.client_pmtu()[&ip("10.0.1.1")], Some(1280));
    n.finish(Duration::from_secs(30));
    assert!(n.largest[&ip("10.0.1.1")] == 1500, "full-size packets before the report");
}
