//! TUN devices inside network namespaces, end to end through the kernel.
//!
//! Each test builds its own pair of namespaces (unique names, deleted by
//! Drop guards even on failure): `a`, where the TUN lives and the kernel
//! forwards, and `b`, a peer with a UDP socket. The peer sends to an address
//! routed into the TUN; the test reads the raw packet through PacketIo,
//! writes the echo reply back, and the peer must receive it. Traffic only
//! ever goes to addresses inside these namespaces.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use mptun_io::testutil::{
    parse_udp, require_netns, tcp_packet, udp_checksums_ok, udp_echo_reply, unique_name, TcpFields,
};
use mptun_io::{
    run_in_netns, spawn_tun_in_netns, Netns, NetnsGuard, PacketIo, PacketIoExt, PcapReader, PcapTap, RxBatch,
    TunConfig, TunDevice, TxBatch, TxPacket,
};
use tokio::net::UdpSocket;
use tokio::time::timeout;

const T: Duration = Duration::from_secs(5);

/// Two namespaces joined by a veth: a = 10.200.0.1 / fd00:200::1, b = .2.
struct Lab {
    a: NetnsGuard,
    b: NetnsGuard,
}

impl Lab {
    /// A fresh pair of namespaces, or `None` where namespaces cannot be
    /// made (the test then passes as skipped, per `require_netns`).
    fn if_netns() -> Option<Lab> {
        require_netns().is_none().then(Lab::new)
    }

    fn new() -> Lab {
        let a = Netns::create(&unique_name("mptio-a-", 24)).unwrap();
        let b = Netns::create(&unique_name("mptio-b-", 24)).unwrap();
        a.ip(["link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b.name()]).unwrap();
        a.ip(["addr", "add", "10.200.0.1/24", "dev", "va"]).unwrap();
        a.ip(["addr", "add", "fd00:200::1/64", "dev", "va", "nodad"]).unwrap();
        b.ip(["addr", "add", "10.200.0.2/24", "dev", "vb"]).unwrap();
        b.ip(["addr", "add", "fd00:200::2/64", "dev", "vb", "nodad"]).unwrap();
        a.ip(["link", "set", "va", "up"]).unwrap();
        b.ip(["link", "set", "vb", "up"]).unwrap();
        a.sysctl("net.ipv4.ip_forward", "1").unwrap();
        a.sysctl("net.ipv6.conf.all.forwarding", "1").unwrap();
        Lab { a, b }
    }

    /// Routes `prefix` in b towards a, where it is reached through a TUN.
    fn route_via_a(&self, prefix: &str) {
        let via = if prefix.contains(':') { "fd00:200::1" } else { "10.200.0.1" };
        self.b.ip(["route", "add", prefix, "via", via]).unwrap();
    }

    /// A UDP socket in b, usable from the test's runtime.
    fn peer_socket(&self, v6: bool) -> UdpSocket {
        let bind = if v6 { "[fd00:200::2]:0" } else { "10.200.0.2:0" };
        let s = run_in_netns(self.b.name(), || std::net::UdpSocket::bind(bind)).unwrap().unwrap();
        s.set_nonblocking(true).unwrap();
        UdpSocket::from_std(s).unwrap()
    }
}

/// Reads from `tun` until a UDP packet to `dst` shows up (the kernel also
/// sends router solicitations and MLD reports into a fresh TUN).
async fn recv_udp_to(tun: &dyn PacketIo, batch: &mut RxBatch, dst: SocketAddr) -> Vec<u8> {
    loop {
        batch.clear();
        timeout(T, tun.recv_batch(batch)).await.expect("no packet on the TUN in time").unwrap();
        if let Some(p) = batch.iter().find(|p| parse_udp(p).is_some_and(|(_, d, _)| d == dst)) {
            return p.to_vec();
        }
    }
}

async fn echo_once(lab: &Lab, tun: &dyn PacketIo, dst: &str) {
    let dst: SocketAddr = dst.parse().unwrap();
    let sock = lab.peer_socket(dst.is_ipv6());
    let payload = format!("ping {dst}");
    sock.send_to(payload.as_bytes(), dst).await.unwrap();
    let mut batch = RxBatch::for_io(tun);
    let req = recv_udp_to(tun, &mut batch, dst).await;
    assert!(udp_checksums_ok(&req), "the kernel hands the TUN complete checksums");
    let (src, _, body) = parse_udp(&req).unwrap();
    assert_eq!(body, payload.as_bytes());
    assert_eq!(src, sock.local_addr().unwrap());
    tun.send(&udp_echo_reply(&req).unwrap()).await.unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = timeout(T, sock.recv_from(&mut buf)).await.expect("echo reply not delivered").unwrap();
    assert_eq!(&buf[..n], payload.as_bytes());
    assert_eq!(from, dst);
}

fn tun_config(name: &str, addrs: &[(&str, u8)]) -> TunConfig {
    let mut c = TunConfig::new(name).mtu(1400);
    for (a, p) in addrs {
        c = c.address(a.parse::<IpAddr>().unwrap(), *p).unwrap();
    }
    c
}

#[tokio::test]
async fn namespace_guard_creates_enters_and_deletes() {
    if require_netns().is_some() {
        return;
    }
    let name = unique_name("mptio-g-", 24);
    let own = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    {
        let ns = Netns::create(&name).unwrap();
        assert!(Netns::exists(&name));
        let inside = run_in_netns(&name, || std::fs::read_link("/proc/thread-self/ns/net").unwrap()).unwrap();
        assert_ne!(inside, own, "the closure ran in the new namespace");
        assert_eq!(std::fs::read_link("/proc/thread-self/ns/net").unwrap(), own, "the caller did not move");
        let links = ns.ip(["-o", "link", "show"]).unwrap();
        assert!(links.contains("lo:") && links.contains("UP"), "loopback up: {links}");
        let err = ns.ip(["link", "set", "no-such-dev", "up"]).unwrap_err().to_string();
        assert!(err.contains("no-such-dev") && err.contains("-n"), "error names command and stderr: {err}");
        ns.sysctl("net.ipv4.ip_forward", "1").unwrap();
        let v = run_in_netns(&name, || std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward").unwrap()).unwrap();
        assert_eq!(v.trim(), "1");
    }
    assert!(!Netns::exists(&name), "dropping the guard deletes the namespace");
    assert!(run_in_netns(&name, || ()).is_err());
    assert!(Netns::create("../etc").is_err());
}

#[tokio::test]
async fn tun_echo_ipv4() {
    let Some(lab) = Lab::if_netns() else { return };
    let tun = spawn_tun_in_netns(lab.a.name(), &tun_config("mtun0", &[("10.201.0.1", 24)])).unwrap();
    assert_eq!(tun.name(), "mtun0");
    assert_eq!(tun.mtu(), 1400);
    let shown = lab.a.ip(["-o", "addr", "show", "dev", "mtun0"]).unwrap();
    assert!(shown.contains("10.201.0.1/24"), "{shown}");
    assert!(lab.a.ip(["-o", "link", "show", "mtun0"]).unwrap().contains("mtu 1400"));
    lab.route_via_a("10.201.0.0/24");
    echo_once(&lab, &tun, "10.201.0.2:7").await;
    let s = tun.stats();
    assert!(s.rx_packets >= 1 && s.tx_packets == 1 && s.tx_errors == 0, "{s:?}");
}

#[tokio::test]
async fn one_tun_two_addresses_v4_and_v6() {
    let Some(lab) = Lab::if_netns() else { return };
    let cfg = tun_config("mtun0", &[("10.201.0.1", 24), ("10.202.0.1", 24), ("fd00:201::1", 64)]);
    let tun = spawn_tun_in_netns(lab.a.name(), &cfg).unwrap();
    let shown = lab.a.ip(["-o", "addr", "show", "dev", "mtun0"]).unwrap();
    for a in ["10.201.0.1/24", "10.202.0.1/24", "fd00:201::1/64"] {
        assert!(shown.contains(a), "{a} missing: {shown}");
    }
    lab.route_via_a("10.201.0.0/24");
    lab.route_via_a("10.202.0.0/24");
    lab.route_via_a("fd00:201::/64");
    echo_once(&lab, &tun, "10.201.0.2:7").await;
    echo_once(&lab, &tun, "10.202.0.2:9").await;
    echo_once(&lab, &tun, "[fd00:201::2]:7").await;
}

#[tokio::test]
async fn two_tuns_each_get_their_own_traffic() {
    let Some(lab) = Lab::if_netns() else { return };
    let t0 = spawn_tun_in_netns(lab.a.name(), &tun_config("mtun0", &[("10.201.0.1", 24)])).unwrap();
    let t1 = spawn_tun_in_netns(lab.a.name(), &tun_config("mtun1", &[("10.202.0.1", 24)])).unwrap();
    lab.route_via_a("10.201.0.0/24");
    lab.route_via_a("10.202.0.0/24");
    echo_once(&lab, &t0, "10.201.0.2:7").await;
    echo_once(&lab, &t1, "10.202.0.2:7").await;
    // Nothing for 10.202/24 ever reached mtun0, and vice versa.
    let sock = lab.peer_socket(false);
    sock.send_to(b"only-t1", "10.202.0.2:8").await.unwrap();
    let mut b1 = RxBatch::for_io(&t1);
    recv_udp_to(&t1, &mut b1, "10.202.0.2:8".parse().unwrap()).await;
    let mut b0 = RxBatch::for_io(&t0);
    let stray = timeout(Duration::from_millis(200), async {
        loop {
            b0.clear();
            t0.recv_batch(&mut b0).await.unwrap();
            if b0.iter().any(|p| parse_udp(p).is_some()) {
                return;
            }
        }
    })
    .await;
    assert!(stray.is_err(), "mtun0 received UDP meant for mtun1");
}

#[tokio::test]
async fn batching_drains_a_burst_in_few_wakeups() {
    let Some(lab) = Lab::if_netns() else { return };
    let tun = spawn_tun_in_netns(lab.a.name(), &tun_config("mtun0", &[("10.201.0.1", 24)])).unwrap();
    lab.route_via_a("10.201.0.0/24");
    let sock = lab.peer_socket(false);
    const N: usize = 200;
    let dst: SocketAddr = "10.201.0.2:7".parse().unwrap();
    // Queue the whole burst before the first read. The TUN's own counters
    // move only as it is read, so this waits: 200 ms, not the 1 ms the
    // kernel takes on a quiet host, for a loaded one whose softirq work
    // went to ksoftirqd.
    for i in 0..N {
        sock.send_to(&(i as u32).to_be_bytes(), dst).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut batch = RxBatch::new(64, tun.mtu());
    let mut out = TxBatch::new(64, tun.mtu());
    let mut seen = Vec::new();
    let mut biggest = 0;
    while seen.len() < N {
        batch.clear();
        let n = timeout(T, tun.recv_batch(&mut batch)).await.expect("burst stalled").unwrap();
        biggest = biggest.max(n);
        for p in batch.iter() {
            if let Some((_, d, body)) = parse_udp(p) {
                if d == dst {
                    seen.push(u32::from_be_bytes(body.try_into().unwrap()));
                    out.push(&mut TxPacket::copy_of(&udp_echo_reply(p).unwrap())).unwrap();
                }
            }
        }
        let want = out.len();
        assert_eq!(tun.send_batch(&mut out).await.unwrap(), want);
    }
    assert_eq!(seen, (0..N as u32).collect::<Vec<_>>(), "in order, none lost");
    assert_eq!(biggest, 64, "a wakeup fills the whole batch when the queue holds more");
    let s = tun.stats();
    assert!(s.rx_wakeups * 10 <= s.rx_packets, "batching: {s:?}");
    let mut got = 0;
    let mut buf = [0u8; 64];
    while got < N {
        timeout(T, sock.recv_from(&mut buf)).await.expect("echoes lost").unwrap();
        got += 1;
    }
}

#[tokio::test]
async fn offload_device_still_carries_plain_packets() {
    let Some(lab) = Lab::if_netns() else { return };
    let cfg = tun_config("mtun0", &[("10.201.0.1", 24), ("fd00:201::1", 64)]).offload(true);
    let tun = spawn_tun_in_netns(lab.a.name(), &cfg).unwrap();
    assert!(tun.offload(), "IFF_VNET_HDR accepted by this kernel");
    lab.route_via_a("10.201.0.0/24");
    lab.route_via_a("fd00:201::/64");
    echo_once(&lab, &tun, "10.201.0.2:7").await;
    echo_once(&lab, &tun, "[fd00:201::2]:7").await;
    // And through the batch path (virtio header in the slot headroom).
    let sock = lab.peer_socket(false);
    let dst: SocketAddr = "10.201.0.2:9".parse().unwrap();
    sock.send_to(b"batched", dst).await.unwrap();
    let mut batch = RxBatch::for_io(&tun);
    let req = recv_udp_to(&tun, &mut batch, dst).await;
    let mut out = TxBatch::for_io(&tun);
    out.push(&mut TxPacket::copy_of(&udp_echo_reply(&req).unwrap())).unwrap();
    out.push(&mut TxPacket::copy_of(&udp_echo_reply(&req).unwrap())).unwrap();
    assert_eq!(tun.send_batch(&mut out).await.unwrap(), 2);
    let mut buf = [0u8; 64];
    for _ in 0..2 {
        let (n, _) = timeout(T, sock.recv_from(&mut buf)).await.expect("offload batch reply lost").unwrap();
        assert_eq!(&buf[..n], b"batched");
    }
}

/// A TUN whose MTU is raised after it was opened (`ip link set mtu`) hands
/// over packets longer than the slots it was sized for, and the read cuts
/// them: such a packet is counted as dropped and the next one is read as
/// usual, instead of being passed on cut (or, where the read reports the
/// whole length, recorded past the end of its slot: a panic).
#[tokio::test]
async fn hostile_a_read_longer_than_the_slot_is_dropped() {
    let Some(lab) = Lab::if_netns() else { return };
    let cfg = tun_config("mtun0", &[("10.201.0.1", 24)]).offload(false);
    let tun = spawn_tun_in_netns(lab.a.name(), &cfg).unwrap();
    assert!(!tun.offload());
    lab.a.ip(["link", "set", "mtun0", "mtu", "3000"]).unwrap();
    let sock = run_in_netns(lab.a.name(), || std::net::UdpSocket::bind("10.201.0.1:0")).unwrap().unwrap();
    let dst: SocketAddr = "10.201.0.9:9".parse().unwrap();
    sock.send_to(&[0x5a; 2000], dst).unwrap();
    sock.send_to(b"small", dst).unwrap();
    let mut batch = RxBatch::for_io(&tun);
    assert_eq!(batch.max_packet_len(), 1400);
    let got = recv_udp_to(&tun, &mut batch, dst).await;
    assert_eq!(parse_udp(&got).unwrap().2, b"small");
    assert_eq!(tun.stats().rx_dropped, 1, "{:?}", tun.stats());
}

/// Packets the kernel took in from a TUN: one per write(2).
fn kernel_rx_packets(ns: &NetnsGuard, dev: &str) -> u64 {
    let s = ns.ip(["-s", "-o", "link", "show", dev]).unwrap();
    let after = s.split("RX:").nth(1).unwrap();
    after.split_whitespace().filter_map(|w| w.parse().ok()).nth(1).unwrap()
}

#[tokio::test]
async fn offload_gso_super_packet_reaches_a_kernel_socket_intact() {
    // We are a TCP sender behind the TUN; a kernel socket on the TUN's own
    // address receives. With offload, a TSO super-packet (ten segments'
    // data behind one header, its checksum left partial) goes down in one
    // write with a GSO virtio header: the kernel must get every byte right.
    let Some(lab) = Lab::if_netns() else { return };
    let cfg = tun_config("mtun0", &[("10.201.0.1", 24)]).mtu(1500).offload(true);
    let tun = spawn_tun_in_netns(lab.a.name(), &cfg).unwrap();
    let listener = run_in_netns(lab.a.name(), || std::net::TcpListener::bind("10.201.0.1:5001")).unwrap().unwrap();
    let (me, them): (SocketAddr, SocketAddr) =
        ("10.201.0.2:40000".parse().unwrap(), "10.201.0.1:5001".parse().unwrap());
    let seg = |seq, ack, flags, options: &[u8], payload: &[u8]| {
        tcp_packet(me, them, TcpFields { seq, ack, flags, window: 65535, options }, payload)
    };
    let isn = 7_000u32;
    tun.send(&seg(isn, 0, 0x02, &[2, 4, 0x05, 0xb4], &[])).await.unwrap();
    let mut batch = RxBatch::for_io(&tun);
    let server_isn = timeout(T, async {
        loop {
            batch.clear();
            tun.recv_batch(&mut batch).await.unwrap();
            // IPv4 + TCP from `them` with SYN|ACK.
            if let Some(p) = batch.iter().find(|p| p.len() >= 40 && p[9] == 6 && p[20 + 13] == 0x12) {
                return u32::from_be_bytes(p[24..28].try_into().unwrap());
            }
        }
    })
    .await
    .expect("no SYN-ACK");
    tun.send(&seg(isn + 1, server_isn + 1, 0x10, &[], &[])).await.unwrap();
    // Ten full segments fit Linux's initial receive window (10 MSS).
    const SEGS: usize = 10;
    const LEN: usize = 1400;
    let data: Vec<u8> = (0..SEGS * LEN).map(|i| (i * 7 % 251) as u8).collect();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let (mut c, _) = listener.accept().unwrap();
        c.set_read_timeout(Some(T)).unwrap();
        let mut got = vec![0u8; SEGS * LEN];
        c.read_exact(&mut got).map(|_| got)
    });
    let writes_before = kernel_rx_packets(&lab.a, "mtun0");
    let mut out = TxBatch::for_io(&tun);
    assert!(tun.caps().tso);
    out.push(&mut TxPacket::copy_of(&seg(isn + 1, server_isn + 1, 0x18, &[], &data)).with_segment_size(Some(LEN)))
        .unwrap();
    assert_eq!(tun.send_batch(&mut out).await.unwrap(), 1);
    let writes = kernel_rx_packets(&lab.a, "mtun0") - writes_before;
    let got = tokio::task::spawn_blocking(move || reader.join().unwrap()).await.unwrap().expect("socket read");
    assert!(got == data, "the kernel socket received exactly the bytes sent");
    assert_eq!(writes, 1, "{SEGS} segments in one write");
    // A malformed super-packet is refused and counted, not written.
    let errors = tun.stats().tx_errors;
    out.push(
        &mut TxPacket::copy_of(&seg(isn + 1, server_isn + 1, 0x18, &[], &data)[..30]).with_segment_size(Some(LEN)),
    )
    .unwrap();
    assert_eq!(tun.send_batch(&mut out).await.unwrap(), 0);
    assert_eq!(tun.stats().tx_errors, errors + 1);
}

/// TCP checksum check over the pseudo-header (IPv4 only, for this test).
fn tcp4_checksum_ok(p: &[u8]) -> bool {
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    let seg = &p[20..total];
    let mut pseudo = 0u32;
    for c in p[12..20].chunks(2) {
        pseudo += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    pseudo += 6 + seg.len() as u32;
    mptun_io::testutil::checksum(seg, pseudo) == 0
}

#[tokio::test]
async fn offload_super_packets_arrive_split_and_checksummed() {
    // A kernel TCP sender in namespace a, talking to us behind the TUN: its
    // TSO super-packets must reach the caller as wire-sized segments with
    // complete checksums and contiguous sequence numbers.
    bulk_from_a_kernel_sender(false).await;
}

#[tokio::test]
async fn offload_super_packets_arrive_whole_in_gro_mode() {
    // The same with the batch in GRO mode: the kernel's super-packets come
    // whole (up to 64 KiB, their wire segment size given, the checksum
    // vouched for by the kernel), and cut as a device would they are the
    // same contiguous, correctly checksummed segments.
    bulk_from_a_kernel_sender(true).await;
}

async fn bulk_from_a_kernel_sender(gro: bool) {
    let Some(lab) = Lab::if_netns() else { return };
    let name = if gro { "mtun1" } else { "mtun0" };
    let cfg = tun_config(name, &[("10.201.0.1", 24)]).mtu(1500).offload(true);
    let tun = spawn_tun_in_netns(lab.a.name(), &cfg).unwrap();
    let me: SocketAddr = "10.201.0.2:5001".parse().unwrap();
    const TOTAL: usize = 1 << 20;
    let sender = std::thread::spawn({
        let ns = lab.a.name().to_owned();
        move || {
            run_in_netns(&ns, || {
                use std::io::Write;
                let mut s = std::net::TcpStream::connect_timeout(&me, T).unwrap();
                s.set_write_timeout(Some(T)).unwrap();
                let _ = s.write_all(&vec![0xa5u8; TOTAL]);
                // Keep the socket until the reader is done (dropping it would send FIN/RST early).
                std::thread::sleep(Duration::from_millis(500));
            })
            .unwrap()
        }
    });
    let mut batch = RxBatch::for_io(&tun);
    batch.set_gro(gro);
    let mut out = TxBatch::for_io(&tun);
    let (mut peer, mut next, mut got, mut whole) = (None, 0u32, 0usize, 0usize);
    let mut seg = vec![0u8; 1500];
    timeout(T, async {
        while got < TOTAL {
            batch.clear();
            tun.recv_batch(&mut batch).await.unwrap();
            let mut wire = Vec::new();
            for (i, p) in batch.iter().enumerate() {
                if p.len() < 40 || p[0] != 0x45 || p[9] != 6 {
                    continue;
                }
                if !gro {
                    assert!(p.len() <= 1500, "a {}-byte packet was not split", p.len());
                    assert!(batch.gso_size(i).is_none() && !batch.checksum_verified(i));
                    wire.push(p.to_vec());
                    continue;
                }
                // Cut (and checksum) as a device would: the kernel left the
                // checksum partial and says so.
                assert!(batch.checksum_verified(i), "a local sender's packet: CHECKSUM_PARTIAL");
                // Where a capture completes it: from the TCP header on, into
                // TCP's field; completed, it verifies.
                assert_eq!(batch.partial_checksum(i), Some((20, 16)), "csum_start and csum_offset");
                let mut done = p.to_vec();
                assert!(mptun_wire::checksum::complete_partial(&mut done, 20, 16));
                assert!(tcp4_checksum_ok(&done), "completed, the checksum verifies");
                let size = batch.gso_size(i).unwrap_or(1460);
                if p.len() > 1500 {
                    assert!(batch.gso_size(i).is_some(), "a {}-byte packet without its segment size", p.len());
                    whole += 1;
                }
                let mut segs = mptun_wire::gso::segments(p, size).expect("a valid super-packet");
                while let Some(n) = segs.next_into(&mut seg).unwrap() {
                    wire.push(seg[..n].to_vec());
                }
            }
            for p in &wire {
                assert!(tcp4_checksum_ok(p), "bad TCP checksum after split");
                let src = SocketAddr::from(([p[12], p[13], p[14], p[15]], u16::from_be_bytes([p[20], p[21]])));
                let seq = u32::from_be_bytes(p[24..28].try_into().unwrap());
                let thl = usize::from(p[32] >> 4) * 4;
                let len = (usize::from(u16::from_be_bytes([p[2], p[3]])) - 20 - thl) as u32;
                if p[33] & 0x02 != 0 {
                    peer = Some(src);
                    next = seq.wrapping_add(1);
                    let f = TcpFields {
                        seq: 99,
                        ack: next,
                        flags: 0x12,
                        window: 65535,
                        options: &[2, 4, 5, 0xb4, 1, 3, 3, 7],
                    };
                    out.push(&mut TxPacket::copy_of(&tcp_packet(me, src, f, &[]))).unwrap();
                } else if len > 0 {
                    assert_eq!(seq, next, "segments in order, none missing");
                    next = next.wrapping_add(len);
                    got += len as usize;
                }
            }
            if let Some(src) = peer {
                let f = TcpFields { seq: 100, ack: next, flags: 0x10, window: 65535, options: &[] };
                if out.is_empty() {
                    out.push(&mut TxPacket::copy_of(&tcp_packet(me, src, f, &[]))).unwrap();
                }
                tun.send_batch(&mut out).await.unwrap();
            }
        }
    })
    .await
    .expect("bulk transfer stalled");
    assert_eq!(got, TOTAL);
    let s = tun.stats();
    if gro {
        assert!(whole > 0 && s.rx_gro_whole > 0 && s.rx_gso_split == 0, "no whole super-packets: {s:?}");
    } else {
        assert!(s.rx_gso_split > 0 && s.rx_syscalls < s.rx_packets, "no super-packets seen: {s:?}");
    }
    sender.join().unwrap();
}

#[tokio::test]
async fn malformed_writes_are_counted_and_skipped() {
    let Some(lab) = Lab::if_netns() else { return };
    let tun = spawn_tun_in_netns(lab.a.name(), &tun_config("mtun0", &[("10.201.0.1", 24)])).unwrap();
    lab.route_via_a("10.201.0.0/24");
    let sock = lab.peer_socket(false);
    let dst: SocketAddr = "10.201.0.2:7".parse().unwrap();
    sock.send_to(b"x", dst).await.unwrap();
    let mut batch = RxBatch::for_io(&tun);
    let req = recv_udp_to(&tun, &mut batch, dst).await;
    let mut out = TxBatch::for_io(&tun);
    out.push(&mut TxPacket::copy_of(&[0x00; 20])).unwrap(); // version 0: the kernel refuses it
    out.push(&mut TxPacket::copy_of(&udp_echo_reply(&req).unwrap())).unwrap();
    assert_eq!(tun.send_batch(&mut out).await.unwrap(), 1);
    assert_eq!(tun.stats().tx_errors, 1);
    let mut buf = [0u8; 8];
    timeout(T, sock.recv_from(&mut buf)).await.expect("good packet after a bad one lost").unwrap();
}

#[tokio::test]
async fn pcap_tap_on_a_tun_opens_in_tcpdump() {
    let Some(lab) = Lab::if_netns() else { return };
    let path = std::env::temp_dir().join(format!("{}.pcap", unique_name("mptio-cap-", 40)));
    let tun = spawn_tun_in_netns(lab.a.name(), &tun_config("mtun0", &[("10.201.0.1", 24)])).unwrap();
    let tap = PcapTap::create(tun, &path).unwrap();
    lab.route_via_a("10.201.0.0/24");
    echo_once(&lab, &tap, "10.201.0.2:7").await;
    tap.flush().unwrap();
    let udp: Vec<_> = PcapReader::open(&path)
        .unwrap()
        .map(|r| r.unwrap())
        .filter_map(|r| parse_udp(&r.data).map(|(s, d, _)| (s.port(), d.port())))
        .collect();
    assert!(udp.len() == 2 && udp[0].1 == 7 && udp[1].0 == 7, "request then reply: {udp:?}");
    if let Ok(out) = std::process::Command::new("tcpdump").args(["-nn", "-r"]).arg(&path).output() {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "tcpdump: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("10.201.0.2.7 > 10.200.0.2"), "tcpdump sees the reply: {text}");
    } else {
        println!("note: tcpdump not installed, checked with PcapReader only");
    }
    drop(tap);
    std::fs::remove_file(&path).ok();
}

#[test]
fn creating_outside_a_runtime_is_an_error_not_a_panic() {
    if require_netns().is_some() {
        return;
    }
    let ns = Netns::create(&unique_name("mptio-r-", 24)).unwrap();
    let err = spawn_tun_in_netns(ns.name(), &TunConfig::new("mtun0")).unwrap_err();
    assert!(err.to_string().contains("tokio"), "{err}");
    // Bad configs are refused before touching the kernel.
    let long = TunConfig::new("a-name-longer-than-15");
    assert_eq!(
        run_in_netns(ns.name(), || TunDevice::create(&long).map(|_| ())).unwrap().unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
}
