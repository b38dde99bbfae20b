//! TUN packet rates through PacketIo: batching and IFF_VNET_HDR offload.
//!
//! Needs root (it builds two namespaces, deleted at exit); prints figures,
//! asserts nothing about speed. Run with
//! `cargo bench -p mptun-io --bench tun_io` (add `-- --secs 3` for longer runs).
//!
//! Scenarios (all traffic stays inside the namespaces it creates):
//! - rx UDP: a kernel UDP sender in namespace A floods an address routed into
//!   the TUN; the runtime reads with batches of 1 and of 128.
//! - tx UDP: the runtime writes small UDP packets into the TUN, one `send`
//!   per packet vs `send_batch` of 128; the kernel forwards them to B, which
//!   drops them (no route back, forwarding off).
//! - tx TCP: full-size segments of one TCP flow, batch of 128, offload off vs
//!   on (on: tun-rs coalesces them into super-packets, one write each).
//! - rx TCP: a kernel TCP connection from A to a tiny ACK-only responder
//!   behind the TUN; offload off vs on (on: the kernel hands over TSO
//!   super-packets that tun-rs splits).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mptun_io::testutil::{require_netns, tcp_packet, udp_packet, unique_name, TcpFields};
use mptun_io::{
    run_in_netns, spawn_tun_in_netns, Netns, NetnsGuard, PacketIo, PacketIoExt, RxBatch, TunConfig, TunDevice, TxBatch,
    TxPacket,
};

const TUN_NET: &str = "10.210.0.1";
const PEER: Ipv4Addr = Ipv4Addr::new(10, 210, 0, 2); // routed into the TUN
const FAR: Ipv4Addr = Ipv4Addr::new(10, 220, 0, 9); // routed out to namespace B, dropped there

struct Lab {
    a: NetnsGuard,
    _b: NetnsGuard,
}

fn lab() -> Lab {
    let a = Netns::create(&unique_name("mptio-bench-a-", 30)).unwrap();
    let b = Netns::create(&unique_name("mptio-bench-b-", 30)).unwrap();
    a.ip(["link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b.name()]).unwrap();
    a.ip(["addr", "add", "10.220.0.1/24", "dev", "va"]).unwrap();
    b.ip(["addr", "add", "10.220.0.2/24", "dev", "vb"]).unwrap();
    a.ip(["link", "set", "va", "up"]).unwrap();
    b.ip(["link", "set", "vb", "up"]).unwrap();
    a.sysctl("net.ipv4.ip_forward", "1").unwrap();
    a.sysctl("net.ipv4.conf.all.rp_filter", "0").unwrap();
    // Let B answer ARP for FAR so frames really cross the veth, then drop them at IP.
    b.ip(["addr", "add", &format!("{FAR}/32"), "dev", "lo"]).unwrap();
    b.ip(["route", "add", "blackhole", "10.210.0.0/24"]).unwrap();
    a.ip(["route", "add", &format!("{FAR}/32"), "via", "10.220.0.2"]).unwrap();
    Lab { a, _b: b }
}

fn tun(lab: &Lab, name: &str, offload: bool) -> TunDevice {
    let cfg = TunConfig::new(name)
        .address(TUN_NET.parse().unwrap(), 24)
        .unwrap()
        .offload(offload)
        .tx_queue_len(4096)
        .mtu(1500);
    spawn_tun_in_netns(lab.a.name(), &cfg).unwrap()
}

fn tcp(src: SocketAddr, dst: SocketAddr, seq: u32, ack: u32, flags: u8, opts: &[u8], payload: &[u8]) -> Vec<u8> {
    tcp_packet(src, dst, TcpFields { seq, ack, flags, window: 65535, options: opts }, payload)
}

/// Packets the kernel took in from the TUN (one per write(2), super-packets count once).
fn kernel_rx_packets(lab: &Lab, dev: &str) -> u64 {
    let s = lab.a.ip(["-s", "-o", "link", "show", dev]).unwrap();
    let after = s.split("RX:").nth(1).unwrap_or("");
    after.split_whitespace().filter_map(|w| w.parse().ok()).nth(1).unwrap_or(0)
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const RST: u8 = 0x04;

/// CPU time of the calling thread (the runtime's only thread), in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn mpps(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64() / 1e6
}

async fn rx_udp(lab: &Lab, batch_size: usize, secs: f64) {
    let dev = tun(lab, "brx0", false);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let gen = {
        let (ns, stop, sent) = (lab.a.name().to_owned(), stop.clone(), sent.clone());
        std::thread::spawn(move || {
            run_in_netns(&ns, || {
                let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
                s.connect(SocketAddr::from((PEER, 9))).unwrap();
                let payload = [0u8; 64];
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    if s.send(&payload).is_ok() {
                        n += 1;
                    }
                }
                sent.store(n, Ordering::Relaxed);
            })
            .unwrap()
        })
    };
    let mut batch = RxBatch::new(batch_size, dev.mtu());
    let start = Instant::now();
    let cpu0 = thread_cpu_ns();
    let mut got = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        batch.clear();
        got += dev.recv_batch(&mut batch).await.unwrap() as u64;
    }
    let el = start.elapsed();
    let cpu = thread_cpu_ns() - cpu0;
    stop.store(true, Ordering::Relaxed);
    gen.join().unwrap();
    let s = dev.stats();
    println!(
        "rx udp 92B   batch {batch_size:>3}: {:6.3} Mpps read, {:5.0} ns CPU/pkt, {:5.1} pkts/wakeup (sender offered {:6.3} Mpps)",
        mpps(got, el),
        cpu as f64 / got.max(1) as f64,
        s.rx_packets as f64 / s.rx_wakeups.max(1) as f64,
        mpps(sent.load(Ordering::Relaxed), el),
    );
}

async fn tx_udp(lab: &Lab, batched: bool, secs: f64) {
    let dev = tun(lab, "btx0", false);
    let pkt = udp_packet(SocketAddr::from((PEER, 9)), SocketAddr::from((FAR, 9)), &[0u8; 64]);
    let mut batch = TxBatch::new(128, dev.mtu());
    // The buffers the batch hands back, refilled: a push moves its packet's
    // buffer into a slot instead of copying it.
    let mut spare = Vec::new();
    let start = Instant::now();
    let cpu0 = thread_cpu_ns();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        if batched {
            while !batch.is_full() {
                let mut p = TxPacket::copy_in(std::mem::take(&mut spare), &pkt);
                batch.push(&mut p).unwrap();
                spare = p.into_buffer();
            }
            n += dev.send_batch(&mut batch).await.unwrap() as u64;
        } else {
            for _ in 0..128 {
                dev.send(&pkt).await.unwrap();
            }
            n += 128;
        }
    }
    let el = start.elapsed();
    let cpu = thread_cpu_ns() - cpu0;
    let label = if batched { "send_batch 128" } else { "send x1       " };
    println!("tx udp 92B   {label}: {:6.3} Mpps written, {:5.0} ns CPU/pkt", mpps(n, el), cpu as f64 / n.max(1) as f64);
}

async fn tx_tcp(lab: &Lab, offload: bool, secs: f64) {
    let dev = tun(lab, "btt0", offload);
    let (src, dst) = (SocketAddr::from((PEER, 40000)), SocketAddr::from((FAR, 5001)));
    const MSS: usize = 1448;
    let payload = vec![0x5au8; MSS];
    let mut batch = TxBatch::new(128, dev.mtu());
    let mut spare = Vec::new();
    let mut seq = 1u32;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        while !batch.is_full() {
            let p = tcp(src, dst, seq, 1, ACK, &[], &payload);
            let mut p = TxPacket::copy_in(std::mem::take(&mut spare), &p);
            batch.push(&mut p).unwrap();
            spare = p.into_buffer();
            seq = seq.wrapping_add(MSS as u32);
        }
        n += dev.send_batch(&mut batch).await.unwrap() as u64;
    }
    let el = start.elapsed();
    let writes = kernel_rx_packets(lab, "btt0");
    println!(
        "tx tcp 1500B offload {}: {:6.3} Mpps = {:6.2} Gbit/s of segments written, {:5.1} segments per write(2)",
        if offload { "on " } else { "off" },
        mpps(n, el),
        n as f64 * 1500.0 * 8.0 / el.as_secs_f64() / 1e9,
        n as f64 / writes.max(1) as f64,
    );
}

async fn rx_tcp(lab: &Lab, offload: bool, secs: f64) {
    let dev = tun(lab, "btr0", offload);
    let me = SocketAddr::from((PEER, 5001));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (ns, stop) = (lab.a.name().to_owned(), stop.clone());
        std::thread::spawn(move || {
            run_in_netns(&ns, || {
                use std::io::Write;
                let mut s = std::net::TcpStream::connect_timeout(&me, Duration::from_secs(3)).unwrap();
                s.set_write_timeout(Some(Duration::from_millis(200))).unwrap();
                let chunk = vec![0u8; 1 << 16];
                while !stop.load(Ordering::Relaxed) {
                    if s.write(&chunk).is_err() && stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
            })
            .unwrap()
        })
    };
    let mut batch = RxBatch::new(128, dev.mtu());
    let mut out = TxBatch::new(4, dev.mtu());
    let our_isn = 1_000u32;
    let mut peer: Option<(SocketAddr, u32, u32)> = None; // (addr, isn, next expected)
    let mut start = None;
    let mut bytes = 0u64;
    loop {
        if let Some(t) = start {
            if Instant::now().duration_since(t).as_secs_f64() >= secs {
                break;
            }
        }
        batch.clear();
        dev.recv_batch(&mut batch).await.unwrap();
        let mut advanced = false;
        for p in batch.iter() {
            if p.len() < 40 || p[0] != 0x45 || p[9] != 6 {
                continue;
            }
            let t = &p[20..];
            let sport = u16::from_be_bytes([t[0], t[1]]);
            let src = SocketAddr::from((Ipv4Addr::new(p[12], p[13], p[14], p[15]), sport));
            let seq = u32::from_be_bytes([t[4], t[5], t[6], t[7]]);
            let flags = t[13];
            let thl = usize::from(t[12] >> 4) * 4;
            let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
            let len = total.saturating_sub(20 + thl) as u32;
            if flags & SYN != 0 {
                peer = Some((src, seq, seq.wrapping_add(1)));
                // MSS 1460, NOP, window scale 7: an 8 MiB window.
                let opts = [2, 4, 0x05, 0xb4, 1, 3, 3, 7];
                let synack = tcp(me, src, our_isn, seq.wrapping_add(1), SYN | ACK, &opts, &[]);
                out.push(&mut TxPacket::copy_of(&synack)).unwrap();
                start = Some(Instant::now());
            } else if let Some((_, _, next)) = peer.as_mut() {
                if seq == *next && len > 0 {
                    *next = next.wrapping_add(len);
                    bytes += u64::from(len);
                    advanced = true;
                }
            }
        }
        if let (true, Some((src, _, next))) = (advanced, peer) {
            out.push(&mut TxPacket::copy_of(&tcp(me, src, our_isn + 1, next, ACK, &[], &[]))).unwrap();
        }
        if !out.is_empty() {
            dev.send_batch(&mut out).await.unwrap();
        }
    }
    let el = start.map(|t| t.elapsed()).unwrap_or_default();
    stop.store(true, Ordering::Relaxed);
    if let Some((src, _, next)) = peer {
        // Reset the connection so the sender thread ends at once.
        dev.send(&tcp(me, src, our_isn + 1, next, RST | ACK, &[], &[])).await.unwrap();
    }
    sender.join().unwrap();
    let s = dev.stats();
    println!(
        "rx tcp bulk  offload {}: {:6.2} Gbit/s goodput, {:6.3} Mpps segments, {} reads for {} segments ({} super-packets split)",
        if offload { "on " } else { "off" },
        bytes as f64 * 8.0 / el.as_secs_f64().max(1e-9) / 1e9,
        mpps(s.rx_packets, el),
        s.rx_syscalls,
        s.rx_packets,
        s.rx_gso_split,
    );
}

fn main() {
    if require_netns().is_some() {
        return;
    }
    let mut secs = 2.0;
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--secs") {
        secs = args.get(i + 1).and_then(|s| s.parse().ok()).unwrap_or(secs);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let lab = lab();
        println!(
            "mptun-io TUN benchmark, {secs} s per figure, {} cores",
            std::thread::available_parallelism().unwrap()
        );
        rx_udp(&lab, 1, secs).await;
        rx_udp(&lab, 128, secs).await;
        tx_udp(&lab, false, secs).await;
        tx_udp(&lab, true, secs).await;
        tx_tcp(&lab, false, secs).await;
        tx_tcp(&lab, true, secs).await;
        rx_tcp(&lab, false, secs).await;
        rx_tcp(&lab, true, secs).await;
    });
}
