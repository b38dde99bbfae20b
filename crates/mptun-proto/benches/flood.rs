//! SYN flood and join churn against a listening endpoint.
//!
//! 1. 10^5 SYNs with MP_CAPABLE from distinct sources, then 10^4 MP_JOIN
//!    SYNs naming a live connection's token, fed to one endpoint with its
//!    output drained after each (as a driver does) and virtual time moving
//!    10 µs per packet: CPU ns per packet (wall clock) and the peak heap the
//!    process holds above the idle endpoint (a counting allocator).
//! 2. A 16 MB transfer between two endpoints over an emulated 100 Mbit/s,
//!    10 ms path, in virtual time, alone and then with the same flood
//!    (SYNs and joins at 10^5/s, replies to the attacker dropped) reaching
//!    the receiving endpoint: goodput of each and their ratio, which must be
//!    at least 0.9.
//!
//! Run: `cargo bench -p mptun-proto --bench flood`. Prints figures; exits
//! non-zero if the goodput ratio is below 0.9 or memory is not bounded.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{ip, sa};
use mptun_proto::endpoint::{ConnectionHandle, Endpoint, EndpointConfig};
use mptun_proto::{Duration, Instant};
use mptun_wire::{emit_tcp_packet, MptcpOption, TcpFlags, TcpHeader, TcpOption, TcpOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The system allocator, counting live bytes and their peak.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Relaxed) + l.size();
            PEAK.fetch_max(now, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Relaxed);
    }
}

#[global_allocator]
static A: Counting = Counting;

const SERVER: &str = "10.0.1.2:5000";
const CLIENT_IP: &str = "10.0.1.1";

/// A SYN from flood source `k` (distinct address and port), as Linux sends
/// it: MSS, SACK, timestamps, window scale, MP_CAPABLE; or an MP_JOIN SYN
/// for `token`.
fn flood_syn(k: u32, join: Option<u32>) -> Vec<u8> {
    let src = SocketAddr::new(IpAddr::from([172, 16, (k >> 16) as u8, (k >> 8) as u8]), 1024 + (k & 0xff) as u16);
    let mut h = TcpHeader::new(src.port(), 5000, k.wrapping_mul(2_654_435_761), 0, TcpFlags::SYN, 64240);
    h.options = TcpOptions::new();
    let mptcp = match join {
        Some(token) => MptcpOption::MpJoinSyn { backup: false, addr_id: 1, token, nonce: k },
        None => MptcpOption::MpCapable {
            version: 1,
            flags: mptun_wire::mptcp::cap_flags::HMAC_SHA256,
            sender_key: None,
            receiver_key: None,
            data_len: None,
            checksum: None,
        },
    };
    for o in [
        TcpOption::Mss(1460),
        TcpOption::SackPermitted,
        TcpOption::Timestamp { tsval: k, tsecr: 0 },
        TcpOption::WindowScale(7),
        TcpOption::Mptcp(mptcp),
    ] {
        h.options.push_aligned(&o).unwrap();
    }
    let mut out = vec![0u8; 200];
    let n = emit_tcp_packet(src.ip(), sa(SERVER).ip(), 64, &h, &[], &mut out).unwrap();
    out.truncate(n);
    out
}

/// One direction of the emulated path: serialisation at `rate` then `delay`.
struct Link {
    rate_bps: u64,
    delay: Duration,
    busy_until: Instant,
    q: VecDeque<(Instant, Vec<u8>)>,
}

impl Link {
    fn new() -> Self {
        Link { rate_bps: 100_000_000, delay: Duration::from_millis(10), busy_until: Instant::ZERO, q: VecDeque::new() }
    }
    fn send(&mut self, now: Instant, p: Vec<u8>) {
        let tx = Duration::from_nanos(p.len() as u64 * 8 * 1_000_000_000 / self.rate_bps);
        self.busy_until = self.busy_until.max(now) + tx;
        self.q.push_back((self.busy_until + self.delay, p));
    }
}

/// Drains `ep`; what goes to `to` is put on `link`, the rest (replies to
/// the flood) is dropped. Returns the packets sent.
fn drain(ep: &mut Endpoint, now: Instant, link: &mut Link, to: IpAddr, buf: &mut [u8]) -> u64 {
    let mut n = 0;
    while let Some(t) = ep.poll_transmit(now, buf) {
        n += 1;
        if t.dst.ip() == to {
            let n = t.assemble(buf);
            link.send(now, buf[..n].to_vec());
        }
    }
    n
}

struct Transfer {
    goodput_bps: f64,
    wall_s: f64,
    flood_packets: u64,
    peak_heap: usize,
    server_counters: mptun_proto::Counters,
}

/// A `total`-byte transfer client → server; with `flood`, 10^5 SYNs and
/// 10^4 joins (token of the data connection) reach the server at 10^5
/// packets per second of virtual time from the start of the transfer.
fn transfer(total: usize, flood: bool) -> Transfer {
    let mut a = Endpoint::new(EndpointConfig::default(), [1; 32]);
    let mut b = Endpoint::new(EndpointConfig::default(), [2; 32]);
    b.listen(sa(SERVER));
    let (mut ab, mut ba) = (Link::new(), Link::new());
    let mut now = Instant::ZERO;
    let h = a.connect(now, sa(&format!("{CLIENT_IP}:0")), sa(SERVER)).unwrap();
    let data = vec![0x5au8; 64 * 1024];
    let (mut sent, mut got) = (0usize, 0usize);
    let mut sh: Option<ConnectionHandle> = None;
    let mut rbuf = vec![0u8; 64 * 1024];
    let mut buf = vec![0u8; 1600];
    let (ca, cb) = (ip(CLIENT_IP), sa(SERVER).ip());
    let mut start = None;
    let (mut syns, mut joins) = (0u32, 0u32);
    let flood_step = Duration::from_micros(10);
    let mut next_flood = Instant::ZERO;
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let wall = std::time::Instant::now();
    loop {
        if a.is_established(h) {
            start.get_or_insert(now);
            while sent < total {
                let k = a.send(h, &data[..(total - sent).min(data.len())]).unwrap();
                if k == 0 {
                    break;
                }
                sent += k;
            }
        }
        if sh.is_none() {
            sh = b.accept();
        }
        if let Some(s) = sh {
            while let Ok(k @ 1..) = b.recv(s, now, &mut rbuf) {
                got += k;
            }
        }
        if got >= total {
            break;
        }
        drain(&mut a, now, &mut ab, cb, &mut buf);
        drain(&mut b, now, &mut ba, ca, &mut buf);
        let token = sh.and_then(|s| b.conn(s)?.local_token());
        let flooding = flood && start.is_some() && (syns < 100_000 || joins < 10_000);
        let mut next = [ab.q.front().map(|p| p.0), ba.q.front().map(|p| p.0), a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        if flooding {
            next = Instant::min_opt(next, Some(next_flood.max(now)));
        }
        let Some(t) = next else { panic!("stalled at {got} of {total}") };
        now = now.max(t);
        assert!(now < Instant::ZERO + Duration::from_secs(120), "transfer took too long");
        while ab.q.front().is_some_and(|p| p.0 <= now) {
            let (_, p) = ab.q.pop_front().unwrap();
            b.handle_packet(now, &p);
        }
        while ba.q.front().is_some_and(|p| p.0 <= now) {
            let (_, p) = ba.q.pop_front().unwrap();
            a.handle_packet(now, &p);
        }
        if flooding && next_flood <= now {
            // Ten SYNs for every join, until each kind has its count.
            let k = syns + joins;
            if k % 11 == 10 && joins < 10_000 || syns >= 100_000 {
                b.handle_packet(now, &flood_syn(1_000_000 + joins, token));
                joins += 1;
            } else {
                b.handle_packet(now, &flood_syn(syns, None));
                syns += 1;
            }
            next_flood = now + flood_step;
            drain(&mut b, now, &mut ba, ca, &mut buf);
        }
        if a.poll_timeout().is_some_and(|t| t <= now) {
            a.handle_timeout(now);
        }
        if b.poll_timeout().is_some_and(|t| t <= now) {
            b.handle_timeout(now);
        }
    }
    let dur = now - start.expect("connected");
    Transfer {
        goodput_bps: total as f64 * 8.0 / dur.as_secs_f64(),
        wall_s: wall.elapsed().as_secs_f64(),
        flood_packets: (syns + joins) as u64,
        peak_heap: PEAK.load(Relaxed).saturating_sub(base),
        server_counters: b.counters(),
    }
}

fn main() {
    // --- 1: flood alone, CPU and memory ---------------------------------
    let mut b = Endpoint::new(EndpointConfig::default(), [2; 32]);
    b.listen(sa(SERVER));
    let mut a = Endpoint::new(EndpointConfig::default(), [1; 32]);
    // One established MPTCP connection whose token the joins name.
    let mut now = Instant::ZERO;
    let h = a.connect(now, sa(&format!("{CLIENT_IP}:0")), sa(SERVER)).unwrap();
    let mut buf = vec![0u8; 1600];
    for _ in 0..10 {
        let (mut pa, mut pb) = (Vec::new(), Vec::new());
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            let n = t.assemble(&mut buf);
            pa.push(buf[..n].to_vec());
        }
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            let n = t.assemble(&mut buf);
            pb.push(buf[..n].to_vec());
        }
        now += Duration::from_millis(1);
        pa.iter().for_each(|p| b.handle_packet(now, p));
        pb.iter().for_each(|p| a.handle_packet(now, p));
        a.send(h, b"x").unwrap();
    }
    let sh = b.accept().expect("connected");
    let token = b.conn(sh).unwrap().local_token().expect("MPTCP");
    let pkts: Vec<Vec<u8>> = (0..100_000).map(|k| flood_syn(k, None)).collect();
    let jpkts: Vec<Vec<u8>> = (0..10_000).map(|k| flood_syn(1_000_000 + k, Some(token))).collect();
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let mut out = 0u64;
    // Each packet 10 µs after the last, the endpoint driven as a driver
    // does; returns wall ns per packet.
    let mut feed = |b: &mut Endpoint, pkts: &[Vec<u8>]| {
        let t0 = std::time::Instant::now();
        for p in pkts {
            now += Duration::from_micros(10);
            b.handle_packet(now, p);
            if b.poll_timeout().is_some_and(|t| t <= now) {
                b.handle_timeout(now);
            }
            while b.poll_transmit(now, &mut buf).is_some() {
                out += 1;
            }
        }
        t0.elapsed().as_nanos() as f64 / pkts.len() as f64
    };
    let syn_ns = feed(&mut b, &pkts);
    let syn_peak = PEAK.load(Relaxed).saturating_sub(base);
    let join_ns = feed(&mut b, &jpkts);
    let peak = PEAK.load(Relaxed).saturating_sub(base);
    let c = b.counters();
    let (live, half_open) = b.connection_count();
    println!("flood: {} SYNs, {} MP_JOIN SYNs against one listening endpoint", pkts.len(), jpkts.len());
    println!("  CPU per SYN            {syn_ns:>10.0} ns (handle + drain the reply)");
    println!("  CPU per join SYN       {join_ns:>10.0} ns");
    println!("  peak heap above idle   {:>10} bytes after the SYNs, {peak} after the joins", syn_peak);
    println!("  half-open held         {half_open:>10} (max_syn_backlog), {live} connections");
    println!(
        "  SyncookiesSent {}  TCPReqQFullDrop {}  MPJoinSynRx {}  MPJoinRejected {}  MPJoinRateLimited {}  replies {}",
        c.tcp_ext_syncookies_sent,
        c.tcp_ext_tcp_req_q_full_drop,
        c.mptcp_mp_join_syn_rx,
        c.mptcp_mp_join_rejected,
        c.mptun_mp_join_rate_limited,
        out
    );
    drop((a, b, pkts, jpkts));

    // --- 2: an established transfer with and without the flood ----------
    const TOTAL: usize = 16 << 20;
    let calm = transfer(TOTAL, false);
    let flooded = transfer(TOTAL, true);
    let ratio = flooded.goodput_bps / calm.goodput_bps;
    println!("transfer: {} MiB over 100 Mbit/s, 10 ms one way, virtual time", TOTAL >> 20);
    println!(
        "  alone        {:>8.2} Mbit/s  (wall {:.2} s, peak heap {} bytes)",
        calm.goodput_bps / 1e6,
        calm.wall_s,
        calm.peak_heap
    );
    println!(
        "  flooded      {:>8.2} Mbit/s  (wall {:.2} s, peak heap {} bytes, {} flood packets, {} cookies)",
        flooded.goodput_bps / 1e6,
        flooded.wall_s,
        flooded.peak_heap,
        flooded.flood_packets,
        flooded.server_counters.tcp_ext_syncookies_sent
    );
    println!("  goodput ratio flooded/alone {ratio:.3} (>= 0.9 required)");
    let bounded = half_open <= EndpointConfig::default().limits.max_syn_backlog;
    if ratio < 0.9 || !bounded {
        eprintln!("FAIL: ratio {ratio:.3}, half-open {half_open}");
        std::process::exit(1);
    }
}
