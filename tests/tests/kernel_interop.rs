//! Interop with the Linux kernel over network namespaces, plain TCP and the
//! fallback paths: mptun ↔ kernel TCP, mptun ↔ a kernel MPTCP socket that
//! must fall back, and mptun ↔ mptun over TUN on both ends. 64 MiB each way,
//! checked with SHA-256. (The MPTCP cases are in kernel_interop_mptcp.rs.)
//!
//! Needs root: skipped with a reason otherwise, failed when
//! MPTUN_REQUIRE_NETNS=1.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use mptun::{MptcpListener, MptcpStream, Stack, StreamOptions};
use mptun_io::testutil::require_netns;
use mptun_tests::kernel::{self, Proto};
use mptun_tests::lab::{Lab, Side};
use mptun_tests::xfer::{assert_intact, exchange_async, exchange_blocking, Report};
use tokio::time::timeout;

const N: usize = 64 << 20;
const CASE_LIMIT: Duration = Duration::from_secs(50);

/// mptun in A (one path, its own TUN) connects to a kernel listener in B
/// and both send N bytes. Returns mptun's view, the kernel's, and whether
/// the kernel socket ended up running MPTCP.
async fn mptun_to_kernel(
    lab: &Lab,
    proto: Proto,
    opts: impl Fn(&Stack) -> StreamOptions,
) -> (Report, Report, bool, bool) {
    let tun = lab.tun(Side::A, "mpt1", &[1]).unwrap();
    let stack = Stack::builder().path(lab.mptun_addr(Side::A, 1), tun).build().unwrap();
    let server: SocketAddr = SocketAddr::new(lab.kernel_addr(Side::B, 1), 5201);
    let l = kernel::listen(lab.b.name(), server, proto).unwrap();
    let k = std::thread::spawn(move || {
        let s = kernel::accept_within(&l, Duration::from_secs(10))?;
        let mptcp = kernel::is_mptcp(&s);
        exchange_blocking(s, N, 2, Duration::from_secs(20)).map(|r| (r, mptcp))
    });
    let s = timeout(Duration::from_secs(10), MptcpStream::connect_with(&stack, server, opts(&stack)))
        .await
        .expect("connect timed out")
        .expect("connect failed");
    let ours_mptcp = s.info().unwrap().is_mptcp();
    let ours = timeout(CASE_LIMIT, exchange_async(s, N, 1, Arc::new(AtomicU64::new(0))))
        .await
        .expect("transfer timed out")
        .expect("transfer failed");
    let (theirs, kernel_mptcp) = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
    println!(
        "mptun received {:.2} Gbit/s, kernel received {:.2} Gbit/s; {}",
        ours.recv_gbps(),
        theirs.recv_gbps(),
        stack.counters().to_nstat().replace('\n', "; ")
    );
    (ours, theirs, ours_mptcp, kernel_mptcp)
}

/// (c) mptun offers MPTCP to a plain kernel TCP server: the SYN-ACK carries
/// no MP_CAPABLE, mptun falls back to TCP, data intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_fallback_plain_tcp_server() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("fb1", 1).unwrap();
    let (ours, theirs, ours_mptcp, kernel_mptcp) = mptun_to_kernel(&lab, Proto::Tcp, |s| s.stream_options()).await;
    assert_intact(&ours, &theirs);
    assert!(!ours_mptcp, "a plain TCP peer cannot give MPTCP");
    assert!(!kernel_mptcp);
}

/// (c) A kernel MPTCP listener whose MPTCP is refused: mptun opens the
/// socket as plain TCP (no MP_CAPABLE in its SYN), so the kernel's MPTCP
/// socket falls back to TCP; data intact and the kernel reports no MPTCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_fallback_kernel_mptcp_server() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("fb2", 1).unwrap();
    lab.kernel_mptcp(Side::B, false).unwrap();
    let (ours, theirs, ours_mptcp, kernel_mptcp) =
        mptun_to_kernel(&lab, Proto::Mptcp, |s| s.stream_options().mptcp(false)).await;
    assert_intact(&ours, &theirs);
    assert!(!ours_mptcp);
    assert!(!kernel_mptcp, "the kernel's MPTCP socket must have fallen back to TCP");
}

/// (c) The other direction: a plain kernel TCP client connects to an mptun
/// listener (which would accept MPTCP) and gets plain TCP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_fallback_plain_tcp_client() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("fb3", 1).unwrap();
    let tun = lab.tun(Side::B, "mpt1", &[1]).unwrap();
    let stack = Stack::builder().path(lab.mptun_addr(Side::B, 1), tun).build().unwrap();
    let addr = SocketAddr::new(lab.mptun_addr(Side::B, 1), 5202);
    let listener = MptcpListener::bind(&stack, addr).await.unwrap();
    let ns = lab.a.name().to_owned();
    let k = std::thread::spawn(move || {
        let s = kernel::connect(&ns, addr, Proto::Tcp)?;
        exchange_blocking(s, N, 3, Duration::from_secs(20))
    });
    let (s, peer) = timeout(Duration::from_secs(10), listener.accept()).await.expect("no connection").unwrap();
    assert_eq!(peer.ip(), lab.kernel_addr(Side::A, 1), "routed over path 1 without NAT");
    assert!(!s.info().unwrap().is_mptcp());
    let ours = timeout(CASE_LIMIT, exchange_async(s, N, 4, Arc::new(AtomicU64::new(0)))).await.unwrap().unwrap();
    let theirs = tokio::task::spawn_blocking(move || k.join().unwrap()).await.unwrap().unwrap();
    assert_intact(&ours, &theirs);
    let c = stack.counters();
    assert!(c.tcp_passive_opens >= 1, "{}", c.to_nstat());
}

/// (d) mptun ↔ mptun over TUN devices on both ends, routed through two
/// kernels. The client has two paths on one TUN (one device, two
/// addresses); the server one path on its own TUN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_interop_mptun_to_mptun_over_tun() {
    if require_netns().is_some() {
        return;
    }
    let lab = Lab::new("mm", 2).unwrap();
    let tun_a = lab.tun(Side::A, "mpta", &[1, 2]).unwrap();
    let tun_b = lab.tun(Side::B, "mptb", &[1]).unwrap();
    let client = Stack::builder()
        .path(lab.mptun_addr(Side::A, 1), tun_a.clone())
        .path(lab.mptun_addr(Side::A, 2), tun_a)
        .build()
        .unwrap();
    let server = Stack::builder().path(lab.mptun_addr(Side::B, 1), tun_b).build().unwrap();
    let addr = SocketAddr::new(lab.mptun_addr(Side::B, 1), 5203);
    let listener = MptcpListener::bind(&server, addr).await.unwrap();
    let srv = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        exchange_async(s, N, 6, Arc::new(AtomicU64::new(0))).await
    });
    let c = timeout(Duration::from_secs(10), MptcpStream::connect(&client, addr)).await.unwrap().unwrap();
    let ours = timeout(CASE_LIMIT, exchange_async(c, N, 5, Arc::new(AtomicU64::new(0)))).await.unwrap().unwrap();
    let theirs = timeout(CASE_LIMIT, srv).await.unwrap().unwrap().unwrap();
    assert_intact(&ours, &theirs);
    println!(
        "client received {:.2} Gbit/s, server received {:.2} Gbit/s; client devices {:?}",
        ours.recv_gbps(),
        theirs.recv_gbps(),
        client.device_stats()
    );
    assert_eq!(client.runtime_stats().tx_no_route, 0);
}
