//! Hostile-peer tests: a client and a server `Endpoint` exchange data in
//! both directions in virtual time while the test injects spoofed segments
//! that carry the connection's 4-tuple. The attacker knows addresses and
//! ports, not the sequence numbers or the keys: its segments are out of
//! window (or in window with an unacceptable ACK), or, where a test says
//! "accepted", copied from what an on-path observer saw, to check the
//! MPTCP-level check that gates the option's effect once TCP accepted the
//! segment. Every test ends with the transfer complete and the bytes of
//! both directions compared, and asserts the counters of what was dropped.

mod common;

use common::ip;
use mptun_proto::counters::Counters;
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_proto::mptcp::Mode;
use mptun_proto::pm::{EndpointFlags, PmEndpoint};
use mptun_proto::tcp::Event;
use mptun_proto::{Duration, Instant};
use mptun_wire::mptcp::{DataAck, DssMapping};
use mptun_wire::{emit_tcp_packet, parse_tcp_packet, MptcpOption, TcpFlags, TcpHeader, TcpOption, TcpOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

const C1: &str = "10.0.1.1";
const S1: &str = "10.0.1.2";
const C2: &str = "10.0.2.1";
const S2: &str = "10.0.2.2";
const PORT: u16 = 5000;
/// Bytes each side sends.
const XFER: usize = 400_000;
/// Half the sequence space away: out of any window, and not an old duplicate.
const FAR: u32 = 0x8000_0000;

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    ChaCha8Rng::seed_from_u64(seed).fill(&mut v[..]);
    v
}

/// The last legitimate segment seen on a (src, dst) pair, and the highest
/// sequence end seen on it.
#[derive(Clone)]
struct Seen {
    hdr: TcpHeader,
    mptcp: Vec<MptcpOption>,
    hi_end: u32,
}

/// Client, server and the wire between them, with an application on each
/// end that sends [`XFER`] bytes, reads everything and closes.
struct Net {
    c: Endpoint,
    s: Endpoint,
    now: Instant,
    delay: Duration,
    wire: VecDeque<(Instant, Vec<u8>)>,
    seen: HashMap<(SocketAddr, SocketAddr), Seen>,
    /// Initial sequence number of each sender, from its SYN.
    isn: HashMap<(SocketAddr, SocketAddr), u32>,
    /// Packets addressed to neither host: what the attacker's spoofed
    /// sources would receive.
    stray: Vec<Vec<u8>>,
    ch: ConnectionHandle,
    sh: Option<ConnectionHandle>,
    c_tx: Vec<u8>,
    s_tx: Vec<u8>,
    c_sent: usize,
    s_sent: usize,
    c_rx: Vec<u8>,
    s_rx: Vec<u8>,
    c_closed: bool,
    s_closed: bool,
    c_events: Vec<Event>,
    s_events: Vec<Event>,
    injected: u64,
}

fn server_addr(a: IpAddr) -> bool {
    a == ip(S1) || a == ip(S2)
}

fn client_addr(a: IpAddr) -> bool {
    a == ip(C1) || a == ip(C2)
}

impl Net {
    fn with(c: EndpointConfig, s: EndpointConfig) -> Net {
        let mut s = Endpoint::new(s, [2; 32]);
        s.listen(SocketAddr::new(ip(S1), PORT));
        let mut c = Endpoint::new(c, [1; 32]);
        let now = Instant::ZERO;
        let ch = c.connect(now, SocketAddr::new(ip(C1), 0), SocketAddr::new(ip(S1), PORT)).expect("connect");
        Net {
            c,
            s,
            now,
            delay: Duration::from_millis(5),
            wire: VecDeque::new(),
            seen: HashMap::new(),
            isn: HashMap::new(),
            stray: Vec::new(),
            ch,
            sh: None,
            c_tx: pattern(1, XFER),
            s_tx: pattern(2, XFER),
            c_sent: 0,
            s_sent: 0,
            c_rx: Vec::new(),
            s_rx: Vec::new(),
            c_closed: false,
            s_closed: false,
            c_events: Vec::new(),
            s_events: Vec::new(),
            injected: 0,
        }
    }

    /// One subflow.
    fn one() -> Net {
        Net::with(EndpointConfig::default(), EndpointConfig::default())
    }

    /// Two subflows: the server announces its second address, the client
    /// joins it from its own.
    fn two() -> Net {
        let mut c = EndpointConfig::default();
        c.mptcp.pm.endpoints.push(PmEndpoint { id: 1, addr: ip(C2), flags: EndpointFlags::default(), port: None });
        c.mptcp.pm.max_add_addr_accepted = 2;
        let mut s = EndpointConfig::default();
        s.mptcp.pm.endpoints.push(PmEndpoint {
            id: 1,
            addr: ip(S2),
            flags: EndpointFlags { signal: true, ..Default::default() },
            port: None,
        });
        Net::with(c, s)
    }

    // ---------------------------------------------------------------
    // The loop
    // ---------------------------------------------------------------

    fn pump(&mut self) {
        if self.sh.is_none() {
            self.sh = self.s.accept();
        }
        let mut buf = vec![0u8; 65536];
        let now = self.now;
        let sides = [
            (&mut self.c, Some(self.ch), &self.c_tx, &mut self.c_sent, &mut self.c_rx, &mut self.c_closed),
            (&mut self.s, self.sh, &self.s_tx, &mut self.s_sent, &mut self.s_rx, &mut self.s_closed),
        ];
        for (ep, h, tx, sent, rx, closed) in sides {
            let Some(h) = h else { continue };
            while *sent < tx.len() {
                let n = ep.send(h, &tx[*sent..]).unwrap_or(0);
                if n == 0 {
                    break;
                }
                *sent += n;
            }
            if *sent == tx.len() && !*closed && ep.is_established(h) {
                ep.close(h);
                *closed = true;
            }
            loop {
                let n = ep.recv(h, now, &mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                rx.extend_from_slice(&buf[..n]);
            }
        }
        while let Some((_, e)) = self.c.poll_event() {
            self.c_events.push(e);
        }
        while let Some((_, e)) = self.s.poll_event() {
            self.s_events.push(e);
        }
    }

    fn drain(&mut self) {
        let mut buf = vec![0u8; 65536];
        for from_c in [true, false] {
            loop {
                let ep = if from_c { &mut self.c } else { &mut self.s };
                let Some(t) = ep.poll_transmit(self.now, &mut buf) else { break };
                let n = t.assemble(&mut buf);
                let p = buf[..n].to_vec();
                let pkt = parse_tcp_packet(&p).expect("the stack emits valid packets");
                let key = (SocketAddr::new(pkt.src, pkt.tcp.src_port), SocketAddr::new(pkt.dst, pkt.tcp.dst_port));
                let f = pkt.tcp.flags;
                if f.syn() {
                    self.isn.insert(key, pkt.tcp.seq);
                }
                let end = pkt.tcp.seq.wrapping_add(pkt.payload.len() as u32 + f.syn() as u32 + f.fin() as u32);
                let mptcp: Vec<_> = pkt.tcp.options.summary().mptcp.into_iter().collect();
                let hi_end = match self.seen.get(&key) {
                    Some(s) if (end.wrapping_sub(s.hi_end) as i32) < 0 => s.hi_end,
                    _ => end,
                };
                self.seen.insert(key, Seen { hdr: pkt.tcp.clone(), mptcp, hi_end });
                self.wire.push_back((self.now + self.delay, p));
            }
        }
    }

    fn deliver(&mut self, p: &[u8]) {
        if std::env::var_os("HOSTILE_TRACE").is_some() {
            if let Ok(k) = parse_tcp_packet(p) {
                let o: Vec<_> = k.tcp.options.summary().mptcp.into_iter().collect();
                eprintln!(
                    "{:?} {}:{} > {}:{} {:?} seq={} ack={} len={} {:?}",
                    self.now,
                    k.src,
                    k.tcp.src_port,
                    k.dst,
                    k.tcp.dst_port,
                    k.tcp.flags,
                    k.tcp.seq,
                    k.tcp.ack,
                    k.payload.len(),
                    o
                );
            }
        }
        let Ok(pkt) = parse_tcp_packet(p) else {
            // Malformed on purpose: give it to whoever owns the address.
            let dst = if p.len() >= 20 && p[0] >> 4 == 4 { IpAddr::from([p[16], p[17], p[18], p[19]]) } else { ip(S1) };
            if server_addr(dst) {
                self.s.handle_packet(self.now, p);
            } else {
                self.c.handle_packet(self.now, p);
            }
            return;
        };
        if server_addr(pkt.dst) {
            self.s.handle_packet(self.now, p);
        } else if client_addr(pkt.dst) {
            self.c.handle_packet(self.now, p);
        } else {
            self.stray.push(p.to_vec());
        }
    }

    /// One round: apps, transmissions, then time moves to the next event.
    /// False when nothing is left to happen.
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

    fn run_until(&mut self, what: &str, mut cond: impl FnMut(&Net) -> bool) {
        let deadline = self.now + Duration::from_secs(60);
        let mut steps = 0u64;
        while !cond(self) {
            steps += 1;
            assert!(steps < 5_000_000, "runaway loop waiting for {what}");
            if !self.step() || self.now > deadline {
                panic!("never happened: {what}\n{}", self.dump());
            }
        }
    }

    fn done(&self) -> bool {
        self.c_rx.len() == XFER
            && self.s_rx.len() == XFER
            && self.c.recv_finished(self.ch)
            && self.sh.is_some_and(|h| self.s.recv_finished(h))
    }

    fn dump(&self) -> String {
        let mut s = format!(
            "now={:?} c_sent={} s_sent={} c_rx={} s_rx={} c_events={:?} s_events={:?}\n",
            self.now,
            self.c_sent,
            self.s_sent,
            self.c_rx.len(),
            self.s_rx.len(),
            self.c_events,
            self.s_events
        );
        for (name, ep) in [("client", &self.c), ("server", &self.s)] {
            for h in ep.handles() {
                let c = ep.conn(h).unwrap();
                s += &format!("{name} {:?} {}\n", c.mode(), c.debug_state());
            }
            s += &ep.counters().to_nstat();
        }
        s
    }

    /// Runs the transfer to its end and checks both directions byte for byte.
    fn finish(&mut self) {
        self.run_until("the transfer completes", |n| n.done() || n.c_rx.len() > XFER || n.s_rx.len() > XFER);
        assert!(self.c_rx == self.s_tx, "server → client data differs\n{}", self.dump());
        assert!(self.s_rx == self.c_tx, "client → server data differs\n{}", self.dump());
        assert!(!self.c_events.contains(&Event::Reset), "client saw a reset\n{}", self.dump());
        assert!(!self.s_events.contains(&Event::Reset), "server saw a reset\n{}", self.dump());
        assert_eq!(self.c.conn(self.ch).unwrap().mode(), Mode::Mptcp);
    }

    /// Established (and, with two subflows, joined) with data flowing both ways.
    fn midway(&mut self, subflows: usize) {
        self.run_until("established", |n| n.sh.is_some() && n.c.is_established(n.ch));
        self.run_until("subflows up", |n| {
            let c = n.c.conn(n.ch).unwrap();
            c.info().subflows.iter().filter(|s| s.joined).count() >= subflows
        });
        self.run_until("data in both directions", |n| n.c_rx.len() > XFER / 8 && n.s_rx.len() > XFER / 8);
    }

    fn cc(&self) -> Counters {
        self.c.counters()
    }

    fn sc(&self) -> Counters {
        self.s.counters()
    }

    // ---------------------------------------------------------------
    // The attacker
    // ---------------------------------------------------------------

    /// (client, server) of subflow `i` as the client sees it.
    fn tuple(&self, i: usize) -> (SocketAddr, SocketAddr) {
        let sf = self.c.conn(self.ch).unwrap().subflow(i).expect("subflow exists");
        (sf.local(), sf.remote())
    }

    fn seen(&self, from: SocketAddr, to: SocketAddr) -> Seen {
        self.seen.get(&(from, to)).cloned().expect("traffic seen on that tuple")
    }

    /// Puts a packet on the wire, arriving now.
    fn inject(&mut self, p: Vec<u8>) {
        self.injected += 1;
        self.wire.push_front((self.now, p));
    }

    /// Steps until the wire has delivered what was injected.
    fn settle(&mut self) {
        let t = self.now + self.delay * 2;
        self.run_until("injected packets delivered", |n| n.now >= t || n.done());
    }

    #[allow(clippy::too_many_arguments)]
    fn forge(
        from: SocketAddr,
        to: SocketAddr,
        seq: u32,
        ack: u32,
        flags: TcpFlags,
        window: u16,
        options: TcpOptions,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut h = TcpHeader::new(from.port(), to.port(), seq, ack, flags, window);
        h.options = options;
        let mut out = vec![0u8; 2000];
        let n = emit_tcp_packet(from.ip(), to.ip(), 64, &h, payload, &mut out).expect("forged packet fits");
        out.truncate(n);
        out
    }

    /// A segment far outside the window of `to` (and with an ACK half the
    /// space away), carrying `opts`.
    fn oow(&mut self, from: SocketAddr, to: SocketAddr, flags: TcpFlags, opts: TcpOptions, payload: &[u8]) {
        let s = self.seen(from, to);
        let p =
            Self::forge(from, to, s.hi_end.wrapping_add(FAR), s.hdr.ack.wrapping_add(FAR), flags, 1000, opts, payload);
        self.inject(p);
    }

    /// A segment in the window of `to` whose ACK acknowledges data never
    /// sent (RFC 5961 5.2: challenge ACK).
    fn inwin_bad_ack(&mut self, from: SocketAddr, to: SocketAddr, flags: TcpFlags, opts: TcpOptions, payload: &[u8]) {
        let s = self.seen(from, to);
        let p = Self::forge(from, to, s.hi_end, s.hdr.ack.wrapping_add(FAR), flags, 1000, opts, payload);
        self.inject(p);
    }

    /// A pure ACK `to` accepts (on-path knowledge: the next sequence number,
    /// the last ACK, window and timestamps of the real sender), carrying `mptcp`.
    fn accepted(&mut self, from: SocketAddr, to: SocketAddr, mptcp: &[MptcpOption]) {
        let s = self.seen(from, to);
        let mut o = TcpOptions::new();
        if let Some(ts) = s.hdr.options.summary().timestamp {
            o.push_aligned(&TcpOption::Timestamp { tsval: ts.0, tsecr: ts.1 }).unwrap();
        }
        for m in mptcp {
            o.push_aligned(&TcpOption::Mptcp(m.clone())).unwrap();
        }
        let p = Self::forge(from, to, s.hi_end, s.hdr.ack, TcpFlags::ACK, s.hdr.window, o, &[]);
        self.inject(p);
    }

    /// The latest DATA_ACK seen from `from` to `to`.
    fn data_ack(&self, from: SocketAddr, to: SocketAddr) -> u64 {
        self.seen(from, to)
            .mptcp
            .iter()
            .find_map(|o| match o {
                MptcpOption::Dss { data_ack: Some(a), .. } => Some(a.ack),
                _ => None,
            })
            .or_else(|| {
                // Data segments may leave the DATA_ACK off: look for any.
                self.seen.values().flat_map(|s| s.mptcp.iter()).find_map(|o| match o {
                    MptcpOption::Dss { data_ack: Some(a), .. } if a.ack64 => Some(a.ack),
                    _ => None,
                })
            })
            .unwrap_or(0)
    }
}

fn mp(opts: &[MptcpOption]) -> TcpOptions {
    let mut o = TcpOptions::new();
    for m in opts {
        o.push_aligned(&TcpOption::Mptcp(m.clone())).unwrap();
    }
    o
}

fn raw(bytes: &[u8]) -> TcpOptions {
    TcpOptions::from_bytes(bytes).unwrap()
}

fn dss_ack(ack: u64, ack64: bool) -> MptcpOption {
    MptcpOption::Dss { data_ack: Some(DataAck { ack, ack64 }), mapping: None, data_fin: false }
}

fn dss_map(dsn: u64, ssn: u32, len: u16, fin: bool) -> MptcpOption {
    MptcpOption::Dss {
        data_ack: None,
        mapping: Some(DssMapping { dsn, dsn64: true, ssn, len, checksum: None }),
        data_fin: fin,
    }
}

fn rm_addr(ids: &[u8]) -> MptcpOption {
    MptcpOption::RmAddr { ids: ids.iter().copied().collect() }
}

/// Both directions of every subflow: (from, to) pairs.
fn both(t: (SocketAddr, SocketAddr)) -> [(SocketAddr, SocketAddr); 2] {
    [(t.0, t.1), (t.1, t.0)]
}

fn opts_unacceptable(n: &Net) -> u64 {
    n.cc().mptun_mp_opts_unacceptable + n.sc().mptun_mp_opts_unacceptable
}

/// Runs the common shape: midway, `attack` (returns how many segments
/// with MPTCP options it expects dropped as unacceptable), finish, and the
/// counter of dropped options.
fn out_of_window_case(subflows: usize, opts: &[MptcpOption]) -> Net {
    let mut n = if subflows == 2 { Net::two() } else { Net::one() };
    n.midway(subflows);
    let before = opts_unacceptable(&n);
    let mut sent = 0;
    for i in 0..subflows {
        for (from, to) in both(n.tuple(i)) {
            for flags in [TcpFlags::ACK, TcpFlags::ACK | TcpFlags::PSH] {
                n.oow(from, to, flags, mp(opts), &[]);
                n.oow(from, to, flags, mp(opts), b"spoofed payload");
                sent += 2;
            }
        }
    }
    n.settle();
    assert!(
        opts_unacceptable(&n) - before >= sent,
        "each spoofed segment is dropped with its options: {} of {sent}\n{}",
        opts_unacceptable(&n) - before,
        n.dump()
    );
    n.finish();
    n
}

// -------------------------------------------------------------------
// Out-of-window segments with MPTCP options: ignored.
// -------------------------------------------------------------------

#[test]
fn hostile_oow_rm_addr_keeps_both_subflows() {
    let n = out_of_window_case(2, &[rm_addr(&[0, 1, 2, 3])]);
    assert_eq!(n.cc().mptcp_rm_addr + n.sc().mptcp_rm_addr, 0);
    let c = n.c.conn(n.ch).unwrap();
    assert_eq!(c.info().subflows.len(), 2, "{}", n.dump());
}

#[test]
fn hostile_oow_mp_prio_does_not_mark_backup() {
    let n = out_of_window_case(2, &[MptcpOption::MpPrio { backup: true }]);
    assert_eq!(n.cc().mptcp_mp_prio_rx + n.sc().mptcp_mp_prio_rx, 0);
    for ep in [&n.c, &n.s] {
        for h in ep.handles() {
            assert!(ep.conn(h).unwrap().info().subflows.iter().all(|s| !s.backup));
        }
    }
}

#[test]
fn hostile_oow_data_fin_at_random_dsn() {
    let mut r = ChaCha8Rng::seed_from_u64(3);
    let opts: Vec<_> = (0..1).map(|_| dss_map(r.random(), r.random(), r.random_range(0..1500), true)).collect();
    out_of_window_case(1, &opts);
}

#[test]
fn hostile_oow_data_fin_alone() {
    // DATA_FIN without a mapping body is not expressible; a mapping of length 1.
    out_of_window_case(2, &[dss_map(12345, 0, 1, true)]);
}

#[test]
fn hostile_oow_dss_mapping() {
    let mut r = ChaCha8Rng::seed_from_u64(4);
    out_of_window_case(2, &[dss_map(r.random(), r.random(), 1400, false)]);
}

#[test]
fn hostile_oow_data_ack32_ahead_and_behind() {
    let mut n = Net::one();
    n.midway(1);
    let before = opts_unacceptable(&n);
    let (c, s) = n.tuple(0);
    for (from, to) in both((c, s)) {
        let da = n.data_ack(from, to);
        for delta in [1_000i64, 30_000, 1 << 20, -1_000, -(1 << 20)] {
            let a = (da as i64 + delta) as u64 & 0xffff_ffff;
            n.oow(from, to, TcpFlags::ACK, mp(&[dss_ack(a, false)]), &[]);
        }
    }
    n.settle();
    assert!(opts_unacceptable(&n) - before >= 10, "{}", n.dump());
    n.finish();
}

#[test]
fn hostile_oow_data_ack64_ahead_and_behind() {
    let mut n = Net::one();
    n.midway(1);
    let before = opts_unacceptable(&n);
    let (c, s) = n.tuple(0);
    for (from, to) in both((c, s)) {
        let da = n.data_ack(from, to);
        for delta in [1_000i64, 30_000, 1 << 20, -1_000, -(1 << 20)] {
            n.oow(from, to, TcpFlags::ACK, mp(&[dss_ack((da as i64 + delta) as u64, true)]), &[]);
        }
    }
    n.settle();
    assert!(opts_unacceptable(&n) - before >= 10, "{}", n.dump());
    n.finish();
}

#[test]
fn hostile_oow_mp_fastclose_with_wrong_key() {
    let n = out_of_window_case(2, &[MptcpOption::MpFastclose { receiver_key: 0x0123_4567_89ab_cdef }]);
    assert_eq!(n.cc().mptcp_mp_fastclose_rx + n.sc().mptcp_mp_fastclose_rx, 0);
}

#[test]
fn hostile_oow_rst_with_mp_fastclose() {
    let mut n = Net::two();
    n.midway(2);
    for i in 0..2 {
        for (from, to) in both(n.tuple(i)) {
            let o = mp(&[MptcpOption::MpFastclose { receiver_key: 42 }]);
            n.oow(from, to, TcpFlags::RST | TcpFlags::ACK, o, &[]);
            n.oow(from, to, TcpFlags::RST, mp(&[MptcpOption::MpTcpRst { flags: 0, reason: 1 }]), &[]);
        }
    }
    n.settle();
    n.finish();
    let (c, s) = (n.cc(), n.sc());
    assert_eq!(c.mptcp_mp_fastclose_rx + s.mptcp_mp_fastclose_rx, 0);
    assert_eq!(c.mptcp_mp_rst_rx + s.mptcp_mp_rst_rx, 0);
    assert_eq!(c.tcp_estab_resets + s.tcp_estab_resets, 0);
}

#[test]
fn hostile_oow_add_addr_with_bad_hmac() {
    let o = MptcpOption::AddAddr { echo: false, addr_id: 7, addr: ip("10.0.9.9"), port: None, hmac: Some(0xdead_beef) };
    let n = out_of_window_case(1, &[o]);
    let (c, s) = (n.cc(), n.sc());
    assert_eq!(c.mptcp_add_addr + s.mptcp_add_addr, 0, "nothing announced on one path");
    assert_eq!(c.mptcp_add_addr_drop + s.mptcp_add_addr_drop, 0, "never even looked at");
}

#[test]
fn hostile_oow_add_addr_echo() {
    let o = MptcpOption::AddAddr { echo: true, addr_id: 1, addr: ip(S2), port: None, hmac: None };
    let n = out_of_window_case(2, &[o]);
    assert_eq!(n.sc().mptcp_echo_add, 1, "only the client's genuine echo");
}

#[test]
fn hostile_oow_mp_fail() {
    out_of_window_case(2, &[MptcpOption::MpFail { dsn: 0x1234_5678_9abc }]);
}

#[test]
fn hostile_oow_mp_capable_and_mp_join_forms() {
    let caps = [
        MptcpOption::MpCapable {
            version: 1,
            flags: 0x81,
            sender_key: Some(1),
            receiver_key: Some(2),
            data_len: Some(100),
            checksum: Some(7),
        },
        MptcpOption::MpCapable {
            version: 1,
            flags: 1,
            sender_key: Some(3),
            receiver_key: None,
            data_len: None,
            checksum: None,
        },
        MptcpOption::MpJoinAck { hmac: [9; 20] },
    ];
    for o in caps {
        out_of_window_case(1, &[o]);
    }
}

#[test]
fn hostile_oow_duplicate_options_in_one_segment() {
    let mut r = ChaCha8Rng::seed_from_u64(5);
    let opts = [dss_map(r.random(), r.random(), 100, true), MptcpOption::MpPrio { backup: true }, rm_addr(&[0, 1])];
    let n = out_of_window_case(2, &opts);
    assert_eq!(n.cc().mptcp_rm_addr + n.sc().mptcp_rm_addr, 0);
    assert_eq!(n.cc().mptcp_mp_prio_rx + n.sc().mptcp_mp_prio_rx, 0);
}

// -------------------------------------------------------------------
// In the window, but with an ACK for data never sent: challenge ACK,
// options ignored.
// -------------------------------------------------------------------

#[test]
fn hostile_in_window_bad_ack_options_ignored() {
    let mut n = Net::two();
    n.midway(2);
    let ch0 = n.cc().tcp_ext_tcp_challenge_ack + n.sc().tcp_ext_tcp_challenge_ack;
    let before = opts_unacceptable(&n);
    let mut r = ChaCha8Rng::seed_from_u64(6);
    let opts = [
        rm_addr(&[0, 1]),
        MptcpOption::MpPrio { backup: true },
        dss_map(r.random(), 1, 10, true),
        dss_ack(r.random(), true),
        MptcpOption::MpFail { dsn: 1 },
    ];
    let mut sent = 0;
    for i in 0..2 {
        for (from, to) in both(n.tuple(i)) {
            for o in &opts {
                n.inwin_bad_ack(from, to, TcpFlags::ACK, mp(std::slice::from_ref(o)), &[]);
                sent += 1;
            }
        }
    }
    n.settle();
    // Every one is challenged; the ACKs themselves are rate-limited as in
    // Linux (tcp_invalid_ratelimit), the rest counted as skipped.
    let skipped = n.cc().tcp_ext_tcp_ack_skipped_challenge + n.sc().tcp_ext_tcp_ack_skipped_challenge;
    let c = n.cc().tcp_ext_tcp_challenge_ack + n.sc().tcp_ext_tcp_challenge_ack + skipped;
    assert!(c - ch0 >= sent, "challenge ACKs {} for {sent}\n{}", c - ch0, n.dump());
    assert!(opts_unacceptable(&n) - before >= sent);
    n.finish();
    assert_eq!(n.cc().mptcp_rm_addr + n.sc().mptcp_rm_addr, 0);
    assert_eq!(n.cc().mptcp_mp_prio_rx + n.sc().mptcp_mp_prio_rx, 0);
    assert_eq!(n.c.conn(n.ch).unwrap().info().subflows.len(), 2);
}

// -------------------------------------------------------------------
// TCP-level spoofing: RST, SYN, random flags.
// -------------------------------------------------------------------

#[test]
fn hostile_rst_at_random_seq() {
    let mut n = Net::two();
    n.midway(2);
    let mut r = ChaCha8Rng::seed_from_u64(7);
    for i in 0..2 {
        for (from, to) in both(n.tuple(i)) {
            for _ in 0..100 {
                let f = if r.random() { TcpFlags::RST } else { TcpFlags::RST | TcpFlags::ACK };
                let p = Net::forge(from, to, r.random(), r.random(), f, 0, TcpOptions::new(), &[]);
                n.inject(p);
            }
        }
    }
    n.settle();
    n.finish();
    assert_eq!(n.cc().tcp_estab_resets + n.sc().tcp_estab_resets, 0);
}

#[test]
fn hostile_rst_in_window_is_challenged() {
    let mut n = Net::one();
    n.midway(1);
    let ch0 = n.cc().tcp_ext_tcp_challenge_ack + n.sc().tcp_ext_tcp_challenge_ack;
    for (from, to) in both(n.tuple(0)) {
        let s = n.seen(from, to);
        // In the window but not exactly rcv_nxt.
        let p = Net::forge(from, to, s.hi_end.wrapping_add(1000), 0, TcpFlags::RST, 0, TcpOptions::new(), &[]);
        n.inject(p);
    }
    n.settle();
    let ch = n.cc().tcp_ext_tcp_challenge_ack + n.sc().tcp_ext_tcp_challenge_ack;
    assert!(ch - ch0 >= 2, "{}", n.dump());
    n.finish();
    assert_eq!(n.cc().tcp_estab_resets + n.sc().tcp_estab_resets, 0);
}

#[test]
fn hostile_syn_in_established_state() {
    let mut n = Net::two();
    n.midway(2);
    let c0 = n.cc().tcp_ext_tcp_syn_challenge + n.sc().tcp_ext_tcp_syn_challenge;
    let mut r = ChaCha8Rng::seed_from_u64(8);
    let mut in_window = 0;
    for i in 0..2 {
        for (from, to) in both(n.tuple(i)) {
            let s = n.seen(from, to);
            let opts = [
                TcpOptions::new(),
                mp(&[MptcpOption::MpCapable {
                    version: 1,
                    flags: 1,
                    sender_key: None,
                    receiver_key: None,
                    data_len: None,
                    checksum: None,
                }]),
                mp(&[MptcpOption::MpJoinSyn { backup: true, addr_id: 9, token: r.random(), nonce: r.random() }]),
            ];
            for o in opts {
                // Random sequence number, and one in the window.
                n.inject(Net::forge(from, to, r.random(), 0, TcpFlags::SYN, 1000, o.clone(), &[]));
                n.inject(Net::forge(from, to, s.hi_end.wrapping_add(10), 0, TcpFlags::SYN, 1000, o, &[]));
                in_window += 1;
            }
        }
    }
    n.settle();
    let c = n.cc().tcp_ext_tcp_syn_challenge + n.sc().tcp_ext_tcp_syn_challenge;
    assert!(c - c0 >= in_window, "SYN challenges {} of {in_window}\n{}", c - c0, n.dump());
    n.finish();
    assert_eq!(n.sc().mptcp_mp_join_syn_rx, 1, "only the genuine join");
}

#[test]
fn hostile_random_flags_out_of_window() {
    let mut n = Net::two();
    n.midway(2);
    let mut r = ChaCha8Rng::seed_from_u64(9);
    for i in 0..2 {
        for (from, to) in both(n.tuple(i)) {
            for k in 0..=255u8 {
                let s = n.seen(from, to);
                let seq = s.hi_end.wrapping_add(FAR).wrapping_add(r.random_range(0..1 << 20));
                let payload = if k % 3 == 0 { &b"xyz"[..] } else { &[][..] };
                n.inject(Net::forge(from, to, seq, r.random(), TcpFlags(k), r.random(), TcpOptions::new(), payload));
            }
        }
    }
    n.settle();
    n.finish();
    assert_eq!(n.cc().tcp_estab_resets + n.sc().tcp_estab_resets, 0);
}

// -------------------------------------------------------------------
// Malformed kind-30 options.
// -------------------------------------------------------------------

/// Kind-30 options of every subtype with random lengths and bodies,
/// truncated, duplicated.
fn garbage_kind30(r: &mut ChaCha8Rng) -> Vec<u8> {
    let mut o = Vec::new();
    let n = r.random_range(1..=3);
    for _ in 0..n {
        let sub: u8 = r.random_range(0..16);
        let len: usize = r.random_range(0..=(38 - o.len()).min(30));
        if len < 2 {
            o.push(30);
            break;
        }
        o.push(30);
        o.push(if r.random_range(0..4) == 0 { r.random() } else { len as u8 });
        let mut body = vec![0u8; len - 2];
        r.fill(&mut body[..]);
        if let Some(b) = body.first_mut() {
            *b = (sub << 4) | (*b & 0x0f);
        }
        o.extend_from_slice(&body);
        if o.len() >= 38 {
            break;
        }
    }
    o.truncate(40);
    o
}

#[test]
fn hostile_malformed_kind30_out_of_window() {
    let mut n = Net::one();
    n.midway(1);
    let m0 = n.cc().mptun_malformed + n.sc().mptun_malformed;
    let mut r = ChaCha8Rng::seed_from_u64(10);
    for (from, to) in both(n.tuple(0)) {
        for _ in 0..200 {
            let o = garbage_kind30(&mut r);
            n.oow(from, to, TcpFlags::ACK, raw(&o), &[]);
        }
    }
    n.settle();
    assert!(n.cc().mptun_malformed + n.sc().mptun_malformed > m0, "{}", n.dump());
    n.finish();
}

#[test]
fn hostile_malformed_kind30_in_window_bad_ack() {
    let mut n = Net::one();
    n.midway(1);
    let mut r = ChaCha8Rng::seed_from_u64(11);
    for (from, to) in both(n.tuple(0)) {
        for _ in 0..200 {
            let o = garbage_kind30(&mut r);
            n.inwin_bad_ack(from, to, TcpFlags::ACK, raw(&o), &[]);
        }
    }
    n.settle();
    n.finish();
    assert_eq!(n.cc().mptcp_dss_fallback + n.sc().mptcp_dss_fallback, 0);
}

#[test]
fn hostile_bad_tcp_checksum_and_truncated_headers() {
    let mut n = Net::one();
    n.midway(1);
    let m0 = n.cc().mptun_malformed + n.sc().mptun_malformed;
    for (from, to) in both(n.tuple(0)) {
        let s = n.seen(from, to);
        let mut p = Net::forge(from, to, s.hi_end, s.hdr.ack, TcpFlags::ACK, 1000, mp(&[rm_addr(&[0])]), b"evil");
        let l = p.len();
        p[l - 1] ^= 0xff; // checksum no longer matches
        n.inject(p.clone());
        for cut in [21, 30, 39, 45] {
            n.inject(p[..cut].to_vec());
        }
    }
    n.settle();
    assert!(n.cc().mptun_malformed + n.sc().mptun_malformed >= m0 + 2, "{}", n.dump());
    n.finish();
}

// -------------------------------------------------------------------
// Handshakes.
// -------------------------------------------------------------------

#[test]
fn hostile_forged_synack_without_mp_capable_does_not_downgrade() {
    let mut n = Net::one();
    // The client's SYN is on the wire: the attacker answers first, without
    // MP_CAPABLE and with a guessed ACK.
    n.drain();
    let (c, s) = n.tuple(0);
    let mut r = ChaCha8Rng::seed_from_u64(12);
    for _ in 0..50 {
        let o = TcpOptions::syn(1460, Some(7), true, None, None).unwrap();
        n.inject(Net::forge(s, c, r.random(), r.random(), TcpFlags::SYN | TcpFlags::ACK, 65535, o, &[]));
    }
    n.run_until("established", |n| n.sh.is_some() && n.c.is_established(n.ch));
    assert_eq!(n.c.conn(n.ch).unwrap().mode(), Mode::Mptcp, "{}", n.dump());
    assert_eq!(n.cc().mptcp_mp_capable_fallback_synack, 0);
    assert_eq!(n.cc().mptcp_mp_capable_synack_rx, 1);
    n.finish();
}

#[test]
fn hostile_rst_during_handshake() {
    let mut n = Net::one();
    n.drain();
    let (c, s) = n.tuple(0);
    let mut r = ChaCha8Rng::seed_from_u64(13);
    for _ in 0..50 {
        let f = if r.random() { TcpFlags::RST } else { TcpFlags::RST | TcpFlags::ACK };
        n.inject(Net::forge(s, c, r.random(), r.random(), f, 0, TcpOptions::new(), &[]));
    }
    n.finish();
}

#[test]
fn hostile_forged_third_ack_does_not_establish() {
    let mut n = Net::one();
    // Wait for the server's SYN-ACK to be on the wire, then forge third
    // ACKs with made-up keys before the client's real one.
    n.run_until("SYN-ACK sent", |n| n.s.handles().next().is_some());
    let (c, s) = n.tuple(0);
    let syn = n.seen(c, s);
    let mut r = ChaCha8Rng::seed_from_u64(14);
    for k in 0..40 {
        let cap = MptcpOption::MpCapable {
            version: 1,
            flags: 1,
            sender_key: Some(r.random()),
            receiver_key: Some(r.random()),
            data_len: None,
            checksum: None,
        };
        // Half in the window with a guessed ACK, half anywhere.
        let seq = if k % 2 == 0 { syn.hi_end } else { r.random() };
        n.inject(Net::forge(c, s, seq, r.random(), TcpFlags::ACK, 1000, mp(&[cap]), &[]));
    }
    n.finish();
    assert_eq!(n.sc().mptcp_mp_capable_ack_rx, 1, "only the genuine third ACK");
    let sc = n.s.conn(n.sh.unwrap()).unwrap();
    assert_eq!(sc.remote_token(), n.c.conn(n.ch).unwrap().local_token());
}

#[test]
fn hostile_mp_join_to_random_token() {
    let mut n = Net::one();
    n.midway(1);
    let mut r = ChaCha8Rng::seed_from_u64(15);
    for k in 0..20u16 {
        let from = SocketAddr::new(ip(C2), 40000 + k);
        let to = SocketAddr::new(ip(S1), PORT);
        let o = TcpOptions::syn(
            1460,
            Some(7),
            true,
            None,
            Some(&MptcpOption::MpJoinSyn { backup: false, addr_id: 3, token: r.random(), nonce: r.random() }),
        )
        .unwrap();
        n.inject(Net::forge(from, to, r.random(), 0, TcpFlags::SYN, 65535, o, &[]));
    }
    n.settle();
    assert_eq!(n.sc().mptcp_mp_join_no_token_found, 20);
    assert_eq!(n.sc().mptcp_mp_join_syn_rx, 0);
    n.finish();
    assert_eq!(n.s.handles().count(), 1, "no connection for the unknown token");
}

#[test]
fn hostile_forged_join_synack_and_third_ack() {
    let mut n = Net::two();
    n.run_until("join SYN sent", |n| {
        n.seen.values().any(|s| s.mptcp.iter().any(|o| matches!(o, MptcpOption::MpJoinSyn { .. })))
    });
    let (&(jc, js), _) =
        n.seen.iter().find(|(_, s)| s.mptcp.iter().any(|o| matches!(o, MptcpOption::MpJoinSyn { .. }))).unwrap();
    let mut r = ChaCha8Rng::seed_from_u64(16);
    // Forged SYN-ACKs with a bad HMAC and a guessed ACK to the joining client.
    for _ in 0..20 {
        let j = MptcpOption::MpJoinSynAck { backup: false, addr_id: 1, hmac: r.random(), nonce: r.random() };
        let o = TcpOptions::syn(1460, Some(7), true, None, Some(&j)).unwrap();
        n.inject(Net::forge(js, jc, r.random(), r.random(), TcpFlags::SYN | TcpFlags::ACK, 65535, o, &[]));
    }
    // Forged third ACKs with a bad HMAC and a guessed ACK to the server.
    n.run_until("server has the join", |n| n.sh.is_some_and(|h| n.s.conn(h).unwrap().subflows().count() == 2));
    for _ in 0..20 {
        let o = mp(&[MptcpOption::MpJoinAck { hmac: [r.random(); 20] }]);
        n.inject(Net::forge(jc, js, r.random(), r.random(), TcpFlags::ACK, 1000, o, &[]));
    }
    n.midway(2);
    n.finish();
    let (c, s) = (n.cc(), n.sc());
    assert_eq!(c.mptcp_mp_join_synack_hmac_failure, 0);
    assert_eq!(s.mptcp_mp_join_ack_hmac_failure, 0);
    assert_eq!(s.mptcp_mp_join_ack_rx, 1, "{}", n.dump());
    assert_eq!(n.c.conn(n.ch).unwrap().info().subflows.len(), 2);
}

// -------------------------------------------------------------------
// Accepted segments (on-path knowledge of sequence numbers, not keys):
// the MPTCP-level check of each option.
// -------------------------------------------------------------------

fn accepted_case(subflows: usize, opts: &dyn Fn(&Net, SocketAddr, SocketAddr) -> Vec<MptcpOption>) -> Net {
    let mut n = if subflows == 2 { Net::two() } else { Net::one() };
    n.midway(subflows);
    let before = opts_unacceptable(&n);
    for i in 0..subflows {
        for (from, to) in both(n.tuple(i)) {
            let o = opts(&n, from, to);
            n.accepted(from, to, &o);
        }
    }
    n.settle();
    assert_eq!(opts_unacceptable(&n), before, "the forged segments were meant to be acceptable\n{}", n.dump());
    n.finish();
    n
}

#[test]
fn hostile_accepted_mp_fastclose_with_wrong_key() {
    let n = accepted_case(2, &|_, _, _| vec![MptcpOption::MpFastclose { receiver_key: 0x5555 }]);
    assert_eq!(n.cc().mptcp_mp_fastclose_rx + n.sc().mptcp_mp_fastclose_rx, 0);
}

#[test]
fn hostile_accepted_add_addr_with_bad_hmac() {
    let n = accepted_case(1, &|_, _, _| {
        vec![MptcpOption::AddAddr { echo: false, addr_id: 5, addr: ip("10.0.7.7"), port: None, hmac: Some(1) }]
    });
    let (c, s) = (n.cc(), n.sc());
    assert_eq!(c.mptcp_add_addr_drop + s.mptcp_add_addr_drop, 2);
    assert_eq!(c.mptcp_add_addr + s.mptcp_add_addr, 0);
}

#[test]
fn hostile_accepted_data_ack_ahead_of_snd_nxt() {
    accepted_case(2, &|n, from, to| {
        let da = n.data_ack(from, to);
        vec![dss_ack(da.wrapping_add(1 << 30), true)]
    });
}

#[test]
fn hostile_accepted_data_ack32_ahead_of_snd_nxt() {
    accepted_case(1, &|n, from, to| {
        let da = n.data_ack(from, to);
        vec![dss_ack(da.wrapping_add(1 << 24) & 0xffff_ffff, false)]
    });
}

#[test]
fn hostile_accepted_data_ack_behind_snd_una() {
    accepted_case(2, &|n, from, to| {
        let da = n.data_ack(from, to);
        vec![dss_ack(da.wrapping_sub(1 << 20), true)]
    });
}

#[test]
fn hostile_accepted_mp_fail() {
    accepted_case(1, &|_, _, _| vec![MptcpOption::MpFail { dsn: 77 }]);
}

#[test]
fn hostile_accepted_data_fin_at_random_dsn() {
    let mut r = ChaCha8Rng::seed_from_u64(17);
    let dsn: u64 = r.random();
    accepted_case(1, &move |_, _, _| vec![dss_map(dsn, 0, 1, true)]);
}

#[test]
fn hostile_accepted_dss_mapping_without_data() {
    // On-path knowledge: the relative subflow sequence number of the next
    // byte; a random data sequence number.
    let mut r = ChaCha8Rng::seed_from_u64(18);
    let dsn: u64 = r.random();
    accepted_case(1, &move |n, from, to| {
        let ssn = n.seen(from, to).hi_end.wrapping_sub(n.isn[&(from, to)]);
        vec![dss_map(dsn, ssn, 1400, false)]
    });
}

#[test]
fn hostile_accepted_pure_ack_without_options_no_fallback() {
    let n = accepted_case(1, &|_, _, _| vec![]);
    assert_eq!(n.cc().mptcp_dss_fallback + n.sc().mptcp_dss_fallback, 0);
}

// -------------------------------------------------------------------
// Thousands of random and crafted segments.
// -------------------------------------------------------------------

fn random_mptcp(r: &mut ChaCha8Rng) -> MptcpOption {
    match r.random_range(0..11) {
        0 => MptcpOption::MpCapable {
            version: r.random_range(0..2),
            flags: r.random(),
            sender_key: Some(r.random()),
            receiver_key: r.random::<bool>().then(|| r.random()),
            data_len: None,
            checksum: None,
        },
        1 => MptcpOption::MpJoinSyn { backup: r.random(), addr_id: r.random(), token: r.random(), nonce: r.random() },
        2 => MptcpOption::MpJoinAck { hmac: [r.random(); 20] },
        3 => dss_ack(r.random(), r.random()),
        4 => MptcpOption::Dss {
            data_ack: r.random::<bool>().then(|| DataAck { ack: r.random::<u32>() as u64, ack64: false }),
            mapping: Some(DssMapping {
                dsn: r.random(),
                dsn64: r.random(),
                ssn: r.random(),
                len: r.random(),
                checksum: None,
            }),
            data_fin: r.random(),
        },
        5 => MptcpOption::AddAddr {
            echo: r.random(),
            addr_id: r.random(),
            addr: IpAddr::from(r.random::<[u8; 4]>()),
            port: r.random::<bool>().then(|| r.random()),
            hmac: Some(r.random()),
        },
        6 => rm_addr(&[r.random(), r.random_range(0..3)]),
        7 => MptcpOption::MpPrio { backup: r.random() },
        8 => MptcpOption::MpFail { dsn: r.random() },
        9 => MptcpOption::MpFastclose { receiver_key: r.random() },
        _ => MptcpOption::MpTcpRst { flags: r.random_range(0..16), reason: r.random() },
    }
}

fn random_segment(n: &Net, r: &mut ChaCha8Rng, from: SocketAddr, to: SocketAddr) -> Vec<u8> {
    let s = n.seen(from, to);
    let kind = r.random_range(0..4);
    // Sequence: anywhere, or in the window with an ACK for data never sent.
    let (seq, ack) = match kind {
        0 | 1 => (r.random(), r.random()),
        _ => {
            (s.hi_end.wrapping_add(r.random_range(0..65536)), s.hdr.ack.wrapping_add(FAR + r.random_range(0..1 << 30)))
        }
    };
    let flags = match r.random_range(0..6) {
        0 => TcpFlags(r.random()),
        1 => TcpFlags::RST,
        2 => TcpFlags::SYN,
        _ => TcpFlags::ACK | TcpFlags(r.random::<u8>() & 0x09),
    };
    let opts = if r.random_range(0..3) == 0 {
        raw(&garbage_kind30(r))
    } else {
        let mut o = TcpOptions::new();
        for _ in 0..r.random_range(1..=2) {
            let _ = o.push_aligned(&TcpOption::Mptcp(random_mptcp(r)));
        }
        o
    };
    let mut payload = vec![0u8; if r.random() { 0 } else { r.random_range(1..200) }];
    r.fill(&mut payload[..]);
    Net::forge(from, to, seq, ack, flags, r.random(), opts, &payload)
}

#[test]
fn hostile_random_segments_during_transfer() {
    let mut n = Net::two();
    n.midway(2);
    let mut r = ChaCha8Rng::seed_from_u64(0x0405_711e);
    let mut left = 4000u32;
    let tuples: Vec<_> = (0..2).flat_map(|i| both(n.tuple(i))).collect();
    while left > 0 && !n.done() {
        for _ in 0..8 {
            let (from, to) = tuples[r.random_range(0..tuples.len())];
            let p = random_segment(&n, &mut r, from, to);
            n.inject(p);
            left -= 1;
        }
        assert!(n.step(), "{}", n.dump());
    }
    assert!(left == 0, "the transfer ended before all segments were injected: {left} left");
    n.finish();
    let (c, s) = (n.cc(), n.sc());
    assert_eq!(c.tcp_estab_resets + s.tcp_estab_resets, 0);
    assert!(c.mptun_mp_opts_unacceptable + s.mptun_mp_opts_unacceptable > 1000);
}
