//! Interop with the Linux kernel's MPTCP (RFC 8684) over network
//! namespaces: (a) mptun client → kernel MPTCP server with a joined second
//! subflow, (b) kernel MPTCP client with a `subflow` endpoint → mptun
//! server, (e) a path brought down mid-transfer. 64 MiB each way, SHA-256
//! checked.
//!
//! Compiled with `--features mptcp-interop`. Needs root: skipped with a
//! reason otherwise, failed when MPTUN_REQUIRE_NETNS=1.
#![cfg(feature = "mptcp-interop")]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpListener, MptcpStream, Stack};
use mptun_io::testutil::require_netns;
use mptun_tests::kernel::{self, Proto};
use mptun_tests::lab::{Lab, Side};
use mptun_tests::xfer::{assert_intact, exchange_async, exchange_blocking};
use tokio::time::timeout;

const N: usize = 64 << 20;
const CASE_LIMIT: Duration = Duration::from_secs(50);

/// What a watcher saw of a stack's connections during a transfer.
#[derive(Debug, Default)]
struct Seen {
    /// Most subflows joined at once on one connection.
    most_joined: usize,
    /// Local addresses of subflows that had data acknowledged.
    carried: Vec<IpAddr>,
    any_mptcp: bool,
}

/// Samples `stack.connections()` every millisecond until `stop`.
fn watch(stack: Stack, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<Seen> {
    tokio::spawn(async move {
        let mut seen = Seen::default();
        while !stop.load(Ordering::Relaxed) {
            for c in stack.connections() {
                seen.any_mptcp |= c.is_mptcp();
                seen.most_joined = seen.most_joined.max(c.conn.subflows.iter().filter(|s| s.joined).count());
                for s in &c.conn.subflows {
                    if (s.tcp.bytes_acked > 0 || s.tcp.bytes_received > 0) && !seen.carried.contains(&s.local.ip()) {
                        seen.carried.push(s.local.ip());
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        seen
    })
}

fn counter(map: &BTreeMap<String, u64>, name: &str) -> u64 {
    map.get(name).copied().unwrap_or(0)
}

/// mptun in A, one TUN per path, connects to a kernel MPTCP listener in B.
/// With `path_down_after`, path 2 goes down once mptun received that many bytes.
async fn mptun_client_to_kernel(case: &str, path_down_after: Option<u64>) {
    let lab = Lab::new(case, 2).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    let tun1 = lab.tun(Side::A, "mpt1", &[1]).unwrap();
    let tun2 = lab.tun(Side::A, "mpt2", &[2]).unwrap();
    let stack =
        Stack::builder().path(lab.mptun_addr(Side::A, 1), tun1).path(lab.mptun_addr(Side::A, 2), tun2).build().unwrap();
    let server = SocketAddr::new(lab.kernel_addr(Side::B, 1), 5301);
    let l = kernel::listen(lab.b.name(), server, Proto::Mptcp).unwrap();
    let k = std::thread::spawn(move || {
        let s = kernel::accept_within(&l, Duration::from_secs(10))?;
        let mptcp = kernel::is_mptcp(&s);
        exchange_blocking(s, N, 2, Duration::from_secs(40)).map(|r| (r, mptcp))
    });
    let s = timeout(Duration::from_secs(10), MptcpStream::connect(&stack, server)).await.unwrap().unwrap();
    assert!(s.info().unwrap().is_mptcp(), "MP_CAPABLE must be established with the kernel");

    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(stack.clone(), stop.clone());
    let progress = Arc::new(AtomicU64::new(0));
    let xfer = tokio::spawn(exchange_async(s, N, 1, progress.clone()));
    let mut carried_before_down = Vec::new();
    if let Some(after) = path_down_after {
        timeout(CASE_LIMIT, async {
            while progress.load(Ordering::Relaxed) < after && !xfer.is_finished() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("transfer stalled before the path went down");
        // The join races the byte count on a loaded host: the path goes down
        // once it has carried data (or after 10 s, which the assertion below
        // then reports).
        let path2 = lab.mptun_addr(Side::A, 2);
        let t0 = std::time::Instant::now();
        loop {
            carried_before_down.clear();
            for c in stack.connections() {
                for sf in c.conn.subflows.iter().filter(|s| s.tcp.bytes_acked > 0 || s.tcp.bytes_received > 0) {
                    carried_before_down.push(sf.local.ip());
                }
            }
            if carried_before_down.contains(&path2) || t0.elapsed() > Duration::from_secs(10) || xfer.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        lab.link_down(Side::A, 2).unwrap();
    }
    let ours = match timeout(CASE_LIMIT, xfer).await {
        Ok(r) => r.unwrap().expect("transfer failed"),
        Err(_) => {
            for line in stack.debug_state() {
                eprintln!("mptun: {line}");
            }
            for c in stack.connections() {
                eprintln!("mptun counters: {:?}", c.counters);
            }
            let ss = std::process::Command::new("ip").args(["netns", "exec", lab.b.name(), "ss", "-tinM"]).output();
            if let Ok(o) = ss {
                eprintln!("kernel ss -tinM:\n{}", String::from_utf8_lossy(&o.stdout));
            }
            if let Ok(ns) = kernel::nstat(lab.b.name()) {
                eprintln!(
                    "kernel MPTcpExt: {:?}",
                    ns.iter().filter(|(k, _)| k.starts_with("MPTcp")).collect::<Vec<_>>()
                );
            }
            panic!("{case}: transfer stalled for {CASE_LIMIT:?} (progress {} bytes)", progress.load(Ordering::Relaxed));
        }
    };
    stop.store(true, Ordering::Relaxed);
    let seen = watcher.await.unwrap();
    let (theirs, kernel_mptcp) = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
    assert_intact(&ours, &theirs);
    assert!(kernel_mptcp, "the kernel socket must run MPTCP, not a fallback");
    let ns = kernel::nstat(lab.b.name()).unwrap();
    println!(
        "{case}: mptun received {:.2} Gbit/s, kernel {:.2} Gbit/s; seen {seen:?}; kernel MPJoinAckRx {}",
        ours.recv_gbps(),
        theirs.recv_gbps(),
        counter(&ns, "MPTcpExtMPJoinAckRx")
    );
    assert!(counter(&ns, "MPTcpExtMPCapableACKRX") >= 1, "kernel saw the MP_CAPABLE third ACK");
    assert!(counter(&ns, "MPTcpExtMPJoinAckRx") >= 1, "kernel accepted our MP_JOIN (MPJoinAckRx)");
    assert_eq!(counter(&ns, "MPTcpExtMPJoinAckHMacFailure"), 0);
    assert!(seen.most_joined >= 2, "two subflows joined on mptun's side: {seen:?}");
    let path2 = lab.mptun_addr(Side::A, 2);
    if path_down_after.is_some() {
        assert!(carried_before_down.contains(&path2), "path 2 carried data before it went down");
    }
}

/// (a) mptun client → kernel MPTCP server: MP_CAPABLE, a second subflow
/// joined (kernel MPJoinAckRx), 64 MiB each way intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_mptcp_client_to_kernel_server() {
    if require_netns().is_some() {
        return;
    }
    mptun_client_to_kernel("mca", None).await;
}

/// (e) As (a), and path 2 is brought down (`ip link set a2 down`) after
/// 16 MiB: the transfer completes over path 1, intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_mptcp_path_down_mid_transfer() {
    if require_netns().is_some() {
        return;
    }
    mptun_client_to_kernel("mce", Some(16 << 20)).await;
}

/// (b) kernel MPTCP client with a `subflow` endpoint on path 2 → mptun
/// server: both subflows accepted, 64 MiB each way intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_mptcp_kernel_client_to_mptun_server() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("mcb", 2).unwrap();
    lab.kernel_mptcp(Side::A, true).unwrap();
    let tun = lab.tun(Side::B, "mpt1", &[1]).unwrap();
    let stack = Stack::builder().path(lab.mptun_addr(Side::B, 1), tun).build().unwrap();
    let addr = SocketAddr::new(lab.mptun_addr(Side::B, 1), 5302);
    let listener = MptcpListener::bind(&stack, addr).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(stack.clone(), stop.clone());
    let ns = lab.a.name().to_owned();
    let k = std::thread::spawn(move || {
        let s = kernel::connect(&ns, addr, Proto::Mptcp)?;
        let mptcp = kernel::is_mptcp(&s);
        exchange_blocking(s, N, 3, Duration::from_secs(40)).map(|r| (r, mptcp))
    });
    let (s, peer) = timeout(Duration::from_secs(10), listener.accept()).await.expect("no connection").unwrap();
    assert_eq!(peer.ip(), lab.kernel_addr(Side::A, 1));
    assert!(s.info().unwrap().is_mptcp(), "the kernel client offered MP_CAPABLE");
    let ours = timeout(CASE_LIMIT, exchange_async(s, N, 4, Arc::new(AtomicU64::new(0)))).await.unwrap().unwrap();
    stop.store(true, Ordering::Relaxed);
    let seen = watcher.await.unwrap();
    let (theirs, kernel_mptcp) = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
    assert_intact(&ours, &theirs);
    assert!(kernel_mptcp);
    let nsa = kernel::nstat(lab.a.name()).unwrap();
    println!(
        "mptun received {:.2} Gbit/s, kernel {:.2} Gbit/s; seen {seen:?}; kernel MPJoinSynAckRx {}",
        ours.recv_gbps(),
        theirs.recv_gbps(),
        counter(&nsa, "MPTcpExtMPJoinSynAckRx")
    );
    assert!(seen.most_joined >= 2, "the kernel's second subflow was accepted: {seen:?}");
    assert!(counter(&nsa, "MPTcpExtMPJoinSynAckRx") >= 1, "kernel got our MP_JOIN SYN-ACK");
    assert_eq!(counter(&nsa, "MPTcpExtMPJoinSynAckHMacFailure"), 0);
}
