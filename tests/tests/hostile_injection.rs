//! Hostile input against a live mptun ↔ kernel MPTCP transfer: a raw socket
//! injects a few thousand random and crafted segments that carry the live
//! connection's 4-tuple (random sequence and acknowledgement numbers, random
//! flags, MPTCP options of every subtype, well formed or with random and
//! truncated lengths) towards both ends while 96 MiB flow each way. The
//! transfer completes with SHA-256 equal on both sides and the stack stays up.
//!
//! Needs root: skipped with a reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpStream, Stack};
use mptun_io::testutil::require_netns;
use mptun_tests::kernel::{self, Proto};
use mptun_tests::lab::{Lab, Side};
use mptun_tests::xfer::{assert_intact, exchange_async, exchange_blocking};
use mptun_wire::mptcp::{DataAck, DssMapping};
use mptun_wire::{emit_tcp_packet, MptcpOption, TcpFlags, TcpHeader, TcpOption, TcpOptions};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tokio::time::timeout;

const N: usize = 96 << 20;
const INJECT: usize = 3000;
const CASE_LIMIT: Duration = Duration::from_secs(60);

/// xorshift64*: the test needs no more than reproducible noise.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn flip(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

fn random_mptcp(r: &mut Rng) -> MptcpOption {
    match r.below(11) {
        0 => MptcpOption::MpCapable {
            version: 1,
            flags: r.next() as u8,
            sender_key: Some(r.next()),
            receiver_key: r.flip().then(|| r.next()),
            data_len: None,
            checksum: None,
        },
        1 => MptcpOption::MpJoinSyn { backup: r.flip(), addr_id: r.next() as u8, token: r.next() as u32, nonce: 1 },
        2 => MptcpOption::MpJoinAck { hmac: [r.next() as u8; 20] },
        3 => MptcpOption::Dss {
            data_ack: Some(DataAck { ack: r.next(), ack64: r.flip() }),
            mapping: None,
            data_fin: false,
        },
        4 => MptcpOption::Dss {
            data_ack: None,
            mapping: Some(DssMapping {
                dsn: r.next(),
                dsn64: true,
                ssn: r.next() as u32,
                len: r.next() as u16,
                checksum: None,
            }),
            data_fin: r.flip(),
        },
        5 => MptcpOption::AddAddr {
            echo: r.flip(),
            addr_id: r.next() as u8,
            addr: IpAddr::from((r.next() as u32).to_be_bytes()),
            port: None,
            hmac: Some(r.next()),
        },
        6 => MptcpOption::RmAddr { ids: [0u8, 1, r.next() as u8].into_iter().collect() },
        7 => MptcpOption::MpPrio { backup: r.flip() },
        8 => MptcpOption::MpFail { dsn: r.next() },
        9 => MptcpOption::MpFastclose { receiver_key: r.next() },
        _ => MptcpOption::MpTcpRst { flags: r.below(16) as u8, reason: r.next() as u8 },
    }
}

/// Kind-30 options with random subtypes, lengths and bodies.
fn garbage(r: &mut Rng) -> TcpOptions {
    let mut o = Vec::new();
    while o.len() < 36 && r.below(3) != 0 {
        let len = 2 + r.below(20) as usize;
        o.push(30);
        o.push(if r.below(4) == 0 { r.next() as u8 } else { len as u8 });
        o.push(((r.below(16) as u8) << 4) | (r.next() as u8 & 0x0f));
        for _ in 3..len {
            o.push(r.next() as u8);
        }
    }
    o.truncate(40);
    TcpOptions::from_bytes(&o).unwrap()
}

fn segment(r: &mut Rng, from: SocketAddr, to: SocketAddr) -> Vec<u8> {
    let flags = match r.below(6) {
        0 => TcpFlags(r.next() as u8),
        1 => TcpFlags::RST,
        2 => TcpFlags::SYN,
        _ => TcpFlags::ACK | TcpFlags(r.next() as u8 & 0x09),
    };
    let opts = if r.flip() {
        garbage(r)
    } else {
        let mut o = TcpOptions::new();
        let _ = o.push_aligned(&TcpOption::Mptcp(random_mptcp(r)));
        o
    };
    let mut h = TcpHeader::new(from.port(), to.port(), r.next() as u32, r.next() as u32, flags, r.next() as u16);
    h.options = opts;
    let payload: Vec<u8> = (0..if r.flip() { 0 } else { r.below(300) }).map(|_| r.next() as u8).collect();
    let mut out = vec![0u8; 2000];
    let n = emit_tcp_packet(from.ip(), to.ip(), 64, &h, &payload, &mut out).unwrap();
    out.truncate(n);
    out
}

fn raw_socket(ns: &str) -> Socket {
    mptun_io::run_in_netns(ns, || Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::from(libc::IPPROTO_RAW))))
        .unwrap()
        .unwrap()
}

/// mptun (namespace A, one TUN) connects to a kernel MPTCP listener in B;
/// once data flows, segments with the connection's 4-tuple are injected
/// towards mptun (from B, spoofing the kernel) and towards the kernel (from
/// A, spoofing mptun).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_netns_injection_into_a_live_transfer() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("hinj", 1).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    let tun = lab.tun(Side::A, "mpt1", &[1]).unwrap();
    let stack = Stack::builder().path(lab.mptun_addr(Side::A, 1), tun).build().unwrap();
    let server = SocketAddr::new(lab.kernel_addr(Side::B, 1), 5303);
    let l = kernel::listen(lab.b.name(), server, Proto::Mptcp).unwrap();
    let k = std::thread::spawn(move || {
        let s = kernel::accept_within(&l, Duration::from_secs(10))?;
        exchange_blocking(s, N, 2, Duration::from_secs(50))
    });
    let s = timeout(Duration::from_secs(10), MptcpStream::connect(&stack, server)).await.unwrap().unwrap();
    assert!(s.info().unwrap().is_mptcp());
    let progress = Arc::new(AtomicU64::new(0));
    let xfer = tokio::spawn(exchange_async(s, N, 1, progress.clone()));
    timeout(CASE_LIMIT, async {
        while progress.load(Ordering::Relaxed) < 1 << 20 && !xfer.is_finished() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("no data before the injection");
    let ours_addr = stack
        .connections()
        .into_iter()
        .flat_map(|c| c.conn.subflows.into_iter().map(|s| s.local))
        .next()
        .expect("a live subflow");
    let (to_mptun, to_kernel) = (raw_socket(lab.b.name()), raw_socket(lab.a.name()));
    let during = progress.clone();
    let injector = std::thread::spawn(move || {
        let mut r = Rng(0x5eed_1234_abcd_0001);
        let mut sent = 0;
        for i in 0..INJECT {
            let (from, to, sock) =
                if i % 2 == 0 { (server, ours_addr, &to_mptun) } else { (ours_addr, server, &to_kernel) };
            let p = segment(&mut r, from, to);
            if sock.send_to(&p, &SockAddr::from(SocketAddr::new(to.ip(), 0))).is_ok() {
                sent += 1;
            }
            if i % 64 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        (sent, during.load(Ordering::Relaxed))
    });
    let ours = timeout(CASE_LIMIT, xfer).await.expect("transfer timed out").unwrap().expect("transfer failed");
    let (injected, at_end) = tokio::task::spawn_blocking(move || injector.join().unwrap()).await.unwrap();
    let theirs = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
    assert_intact(&ours, &theirs);
    let c = stack.counters();
    println!(
        "injected {injected} (mptun had received {at_end} of {N} bytes when the last went out); mptun received {:.2} Gbit/s; MptunMPOptsUnacceptable {} MptunMalformed {} TcpExtTCPChallengeACK {}",
        ours.recv_gbps(),
        c.mptun_mp_opts_unacceptable,
        c.mptun_malformed,
        c.tcp_ext_tcp_challenge_ack
    );
    assert!(injected >= INJECT * 9 / 10, "the raw socket sent {injected} of {INJECT}");
}
