//! Path MTU over network namespaces: mptun in A with one TUN per path
//! connects to a kernel MPTCP server in B and both send 32 MiB;
//! one path is narrower than the other:
//!
//! * `pmtu_small_tun_next_to_full_size`: path 2's TUN has MTU 1280, path 1's
//!   1500. Each subflow's MSS comes from its own device: nothing is dropped
//!   as oversize and both paths carry data.
//! * `pmtu_router_hop_with_icmp`: both TUNs are 1500, but A's kernel routes
//!   path 2 onto a 1280-byte veth and answers mptun's larger packets with
//!   ICMP "fragmentation needed"; mptun lowers that subflow's MSS.
//! * `pmtu_router_hop_icmp_dropped`: the same with every ICMP error of A's
//!   kernel dropped (a policy rule to a blackhole table): mptun detects the
//!   black hole after repeated RTOs and probes its way back up (Linux
//!   `tcp_mtu_probing=1`).
//!
//! In every case SHA-256 is compared both ways and every path carries data.
//! Needs root: skipped with a reason otherwise, failed when
//! MPTUN_REQUIRE_NETNS=1. Each test builds and deletes its own namespaces.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpStream, Stack};
use mptun_io::testutil::require_netns;
use mptun_tests::kernel::{self, Proto};
use mptun_tests::lab::{Lab, Side};
use mptun_tests::xfer::{assert_intact, exchange_async, exchange_blocking};
use tokio::time::timeout;

const N: usize = 32 << 20;
/// With ICMP dropped the hole shows only after four RTOs in a row (about 3
/// s, Linux's `tcp_retries1` timing): a transfer long enough to outlast it
/// well, even on a quiet machine where a fast transfer can end before the
/// hole shows.
const N_SILENT: usize = 4 << 30;
const CASE_LIMIT: Duration = Duration::from_secs(60);
/// Bytes a path must have carried (acknowledged to mptun) to count.
const CARRIED: u64 = 256 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Narrow {
    /// Path 2's TUN has MTU 1280.
    Tun,
    /// A's kernel forwards path 2 onto a 1280-byte hop and sends ICMP.
    HopIcmp,
    /// The same hop, ICMP dropped.
    HopSilent,
}

/// Per local address: most bytes acknowledged and received on one subflow,
/// and the path MTU it ended with.
type Seen = BTreeMap<IpAddr, (u64, u64, u32)>;

fn watch(stack: Stack, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Seen> {
    tokio::spawn(async move {
        let mut seen = Seen::new();
        while !stop.load(Ordering::Relaxed) {
            for c in stack.connections() {
                for s in &c.conn.subflows {
                    let e = seen.entry(s.local.ip()).or_default();
                    e.0 = e.0.max(s.tcp.bytes_acked);
                    e.1 = e.1.max(s.tcp.bytes_received);
                    e.2 = s.tcp.pmtu;
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        seen
    })
}

async fn run(case: &str, narrow: Narrow) {
    let lab = Lab::new(case, 2).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    if narrow != Narrow::Tun {
        lab.narrow_hop(2, 1280).unwrap();
    }
    if narrow == Narrow::HopSilent {
        lab.drop_icmp().unwrap();
    }
    let tun1 = lab.tun(Side::A, "mpt1", &[1]).unwrap();
    let tun2 = lab.tun_mtu(Side::A, "mpt2", &[2], if narrow == Narrow::Tun { 1280 } else { 1500 }).unwrap();
    let (p1, p2) = (lab.mptun_addr(Side::A, 1), lab.mptun_addr(Side::A, 2));
    let stack = Stack::builder().path(p1, tun1).path(p2, tun2).build().unwrap();
    let server = SocketAddr::new(lab.kernel_addr(Side::B, 1), 5303);
    let l = kernel::listen(lab.b.name(), server, Proto::Mptcp).unwrap();
    let n = if narrow == Narrow::HopSilent { N_SILENT } else { N };
    let k = std::thread::spawn(move || {
        let s = kernel::accept_within(&l, Duration::from_secs(10))?;
        exchange_blocking(s, n, 2, Duration::from_secs(50))
    });
    let s = timeout(Duration::from_secs(10), MptcpStream::connect(&stack, server)).await.unwrap().unwrap();
    assert!(s.info().unwrap().is_mptcp(), "MP_CAPABLE must be established with the kernel");
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(stack.clone(), stop.clone());
    let started = std::time::Instant::now();
    let xfer = exchange_async(s, n, 1, Arc::new(AtomicU64::new(0)));
    let ours = timeout(CASE_LIMIT, xfer).await.expect("transfer timed out").expect("transfer failed");
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let seen = watcher.await.unwrap();
    let theirs = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
    assert_intact(&ours, &theirs);
    let c = stack.counters();
    let rt = stack.runtime_stats();
    println!(
        "{case}: {:.1} s; per path (acked, received, pmtu) {seen:?}; IcmpInDestUnreachs {} PmtuReduced {} \
         BlackHole {} MTUPSuccess {} MTUPFail {} OutOfWindowIcmps {} tx_oversize {}",
        took.as_secs_f64(),
        c.icmp_in_dest_unreachs,
        c.mptun_pmtu_reduced,
        c.mptun_pmtu_black_hole,
        c.tcp_ext_tcp_mtup_success,
        c.tcp_ext_tcp_mtup_fail,
        c.tcp_ext_out_of_window_icmps,
        rt.tx_oversize
    );
    for p in [p1, p2] {
        let (acked, received, _) = seen.get(&p).copied().unwrap_or_default();
        assert!(acked >= CARRIED, "path {p} carried too little mptun → kernel: {seen:?}");
        assert!(received >= CARRIED, "path {p} carried too little kernel → mptun: {seen:?}");
    }
    assert_eq!(rt.tx_oversize, 0, "no packet larger than its TUN's MTU");
    assert_eq!(seen[&p1].2, 1500, "path 1 keeps full-size packets: {seen:?}");
    match narrow {
        Narrow::Tun => {
            assert_eq!(seen[&p2].2, 1280, "{seen:?}");
            assert_eq!(c.mptun_pmtu_black_hole, 0);
        }
        Narrow::HopIcmp => {
            assert!(c.icmp_in_dest_unreachs >= 1 && c.mptun_pmtu_reduced >= 1, "ICMP was applied");
            assert_eq!(seen[&p2].2, 1280, "{seen:?}");
        }
        Narrow::HopSilent => {
            assert_eq!(c.icmp_in_dest_unreachs, 0, "no ICMP leaves the router");
            assert!(c.mptun_pmtu_black_hole >= 1, "the black hole was detected");
            assert!((1024..=1280).contains(&seen[&p2].2), "{seen:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pmtu_small_tun_next_to_full_size() {
    if require_netns().is_some() {
        return;
    }
    run("mtut", Narrow::Tun).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pmtu_router_hop_with_icmp() {
    if require_netns().is_some() {
        return;
    }
    run("mtui", Narrow::HopIcmp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pmtu_router_hop_icmp_dropped() {
    if require_netns().is_some() {
        return;
    }
    run("mtus", Narrow::HopSilent).await;
}
